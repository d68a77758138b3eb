#!/usr/bin/env python3
"""A drain where the client listener finishes closing before the admin one
(an admin connection is half way through a request): the proxy must not touch
the closed server while the admin one drains (the front's tick publishing its
connection count, a reload setting limits, /metrics counting connections).
Then the admin request completes, is answered, and the process exits 0 with
no sanitizer report. Run with 1 and 2 threads.
Arguments: the lanepack and lanepack-emulator binaries, the thread count."""
import http.client
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

from lphelp import check, finish, loopback, model_config, start_emulator, start_proxy, stop_all, threads_args


def main():
    proxy_bin, emu_bin, nthreads = threads_args(2)
    tmp = tempfile.mkdtemp()
    emu_p, emu_port = start_emulator(emu_bin, "4x64", ["--cost-ms", "1"])
    err = open(os.path.join(tmp, "stderr"), "w+")
    proxy = None
    try:
        proxy, port, admin_port = start_proxy(proxy_bin, os.path.join(tmp, "lanepack.json"), lambda port, admin: {
            "listen": loopback(port), "admin_listen": loopback(admin),
            "threads": nthreads, "drain_timeout_ms": 5000, "request_timeout_ms": 8000,
            "models": {"m": model_config("4x64", [emu_port], max_wait_ms=2)}}, nports=2, stderr=err)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/v1/infer", body=json.dumps({"input_ids": [1, 2, 3]}),
                  headers={"Content-Type": "application/json"})
        check("served before the drain", c.getresponse().status == 200)
        c.close()
        # an admin connection half way through its request holds the admin
        # server open; the client server has nothing and closes at once
        a = socket.create_connection(("127.0.0.1", admin_port))
        a.settimeout(10)
        a.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.2)
        proxy.send_signal(signal.SIGTERM)
        time.sleep(0.8)  # a few of the fronts' ticks with the client server gone
        proxy.send_signal(signal.SIGHUP)  # a reload sets every open server's limits
        time.sleep(0.5)
        a.sendall(b"\r\n")  # the scrape completes: it counts connections
        data = b""
        try:
            while b"lanepack_build_info" not in data:
                d = a.recv(65536)
                if not d:
                    break
                data += d
        except OSError as e:
            data += repr(e).encode()
        check("the admin request held over the drain is answered",
              data.startswith(b"HTTP/1.1 200") and b"lanepack_build_info" in data, data[:200])
        a.close()
        try:
            rc = proxy.wait(15)
        except subprocess.TimeoutExpired:
            rc = "still running"
        check("exit 0 once the admin connection is done: %s" % rc, rc == 0, rc)
        err.seek(0)
        text = err.read()
        check("no sanitizer report", "Sanitizer" not in text and "runtime error" not in text,
              "\n".join(l for l in text.splitlines() if not l.startswith("{"))[:3000])
    finally:
        if proxy is not None and proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        stop_all([emu_p])
    finish()


if __name__ == "__main__":
    main()
