#!/usr/bin/env python3
"""access_log "-" (standard error) behind a pipe that a slow collector reads,
as in a container, with several front threads: each front gathers lines and
writes them at once; a pipe takes a large write in pieces as its reader makes
room, so two fronts' writes (or a front's and the process log's) must not cut
into each other. Every line read back is whole JSON.
Arguments: the lanepack and lanepack-emulator binaries, the thread count."""
import http.client
import json
import os
import signal
import tempfile
import threading
import time

from lphelp import check, finish, model_config, start_emulator, start_proxy, stop_all, threads_args


def main():
    proxy_bin, emu_bin, nthreads = threads_args(3)
    tmp = tempfile.mkdtemp()
    emu_p, emu_port = start_emulator(emu_bin, "4x64", ["--cost-ms", "0"])
    r, w = os.pipe()
    try:
        proxy, port = start_proxy(proxy_bin, os.path.join(tmp, "lanepack.json"), {
            "threads": nthreads, "access_log": "-",
            "models": {"m": model_config("4x64", [emu_port], max_wait_ms=1)}}, stderr=w)
    except BaseException:
        emu_p.terminate()
        raise
    os.close(w)
    chunks, slow = [], [True]

    def collector():  # a slow one: small reads, a pause after each
        while True:
            d = os.read(r, 512 if slow[0] else 65536)
            if not d:
                break
            chunks.append(d)
            if slow[0]:
                time.sleep(0.002)
    ct = threading.Thread(target=collector)
    ct.start()
    try:
        stop = time.time() + 5
        served = [0]

        def client(k):  # long query strings: large lines, the pipe fills soon
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            while time.time() < stop:
                c.request("POST", "/v1/infer?" + "q" * 1500, body='{"input_ids": [1, 2, 3]}',
                          headers={"Content-Type": "application/json", "X-Request-Id": "c%d-%d" % (k, served[0])})
                if c.getresponse().read() and True:
                    served[0] += 1
            c.close()
        ts = [threading.Thread(target=client, args=(k,)) for k in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        slow[0] = False
        proxy.send_signal(signal.SIGTERM)
        rc = proxy.wait(30)
        ct.join(30)
        lines = [l for l in b"".join(chunks).split(b"\n") if l]
        torn = []
        access = 0
        for l in lines:
            try:
                j = json.loads(l)
                access += "request_id" in j and "status" in j
            except ValueError:
                torn.append(l[:200])
        check("exit 0", rc == 0, rc)
        check("%d access lines for %d answers" % (access, served[0]), access >= served[0] > 0)
        check("%d lines on standard error, none torn" % len(lines), not torn, torn[:3])
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        stop_all([emu_p])
    finish()


if __name__ == "__main__":
    main()
