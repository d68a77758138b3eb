#!/usr/bin/env python3
"""One client pipelining pages the proxy answers at once (/metrics, as fast
as it reads the answers) must not keep the loop to itself: other clients'
inferences are answered, and the backends' health probes run (the backend is
not marked down for want of a turn). Each request gets a loose bound (4 s, an
inference here takes milliseconds; before the fix the flood held every other
connection for seconds and the backend went down).
Arguments: the lanepack and lanepack-emulator binaries, the thread count."""
import http.client
import json
import os
import socket
import tempfile
import threading
import time

from lphelp import (check, emu_outputs, finish, model_config, start_emulator,
                    start_proxy, stop_all, stop_proxy, threads_args)

def main():
    proxy_bin, emu_bin, nthreads = threads_args(1)
    tmp = tempfile.mkdtemp()
    emu_p, emu_port = start_emulator(emu_bin, "4x64", ["--cost-ms", "1"])
    err = open(os.path.join(tmp, "stderr"), "w+")
    proxy = None
    stop = threading.Event()
    scrapes = [0]
    try:
        proxy, port = start_proxy(proxy_bin, os.path.join(tmp, "lanepack.json"), {
            "threads": nthreads, "health_interval_ms": 200,
            "models": {"m": model_config("4x64", [emu_port], max_wait_ms=1)}}, stderr=err)
        s = socket.create_connection(("127.0.0.1", port))

        def reader():
            try:
                while not stop.is_set():
                    d = s.recv(1 << 20)
                    if not d:
                        break
                    scrapes[0] += d.count(b"HTTP/1.1 200")
            except OSError:
                pass

        def flooder():
            try:
                while not stop.is_set():
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 64)
            except OSError:
                pass
        ts = [threading.Thread(target=reader), threading.Thread(target=flooder)]
        for t in ts:
            t.start()
        time.sleep(0.5)
        results = []
        for i in range(12):
            toks = [i + 1, 2, 3]
            t0 = time.time()
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=4)
                c.request("POST", "/v1/infer", body=json.dumps({"input_ids": toks}),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                body = r.read()
                ok = r.status == 200 and json.loads(body)["output"] == emu_outputs(toks)
                results.append((ok, r.status, round(time.time() - t0, 3)))
                c.close()
            except (OSError, http.client.HTTPException) as e:
                results.append((False, type(e).__name__, round(time.time() - t0, 3)))
            time.sleep(0.1)
        stop.set()
        s.shutdown(socket.SHUT_RDWR)
        s.close()
        for t in ts:
            t.join(10)
        check("the flood was served (%d scrapes)" % scrapes[0], scrapes[0] > 100, scrapes[0])
        check("every inference beside the flood answered right within 4 s",
              all(r[0] for r in results), results)
        err.seek(0)
        text = err.read()
        check("the backend was not marked down", "backend down" not in text,
              [l for l in text.splitlines() if "down" in l][:3])
    finally:
        stop.set()
        if proxy is not None:
            stop_proxy(proxy)
        stop_all([emu_p])
    finish()


if __name__ == "__main__":
    main()
