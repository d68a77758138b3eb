#!/usr/bin/env python3
"""A drain that never finishes by itself (slow clients half way through their
requests on every front): past drain_timeout_ms and the last resort the
process stops all the same, exits 0, and leaves no sanitizer report (the
connections left open belong to fronts that stay reachable to the end).
Arguments: the lanepack and lanepack-emulator binaries, the thread count."""
import os
import signal
import socket
import subprocess
import tempfile
import time

from lphelp import check, finish, model_config, start_emulator, start_proxy, stop_all, threads_args


def main():
    proxy_bin, emu_bin, nthreads = threads_args(2)
    tmp = tempfile.mkdtemp()
    emu_p, emu_port = start_emulator(emu_bin, "4x64", ["--cost-ms", "1"])
    err = open(os.path.join(tmp, "stderr"), "w+")
    proxy = None
    socks = []
    try:
        proxy, port = start_proxy(proxy_bin, os.path.join(tmp, "lanepack.json"), {
            "threads": nthreads, "drain_timeout_ms": 500,
            "models": {"m": model_config("4x64", [emu_port], max_wait_ms=2)}}, stderr=err)
        for _ in range(8 * nthreads):  # new connections spread over the fronts
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"input")
            socks.append(s)
        time.sleep(0.3)
        t0 = time.time()
        proxy.send_signal(signal.SIGTERM)
        try:
            rc = proxy.wait(20)
        except subprocess.TimeoutExpired:
            rc = "still running"
        check("stopped past the last resort, exit 0: %s after %.1f s" % (rc, time.time() - t0), rc == 0, rc)
        err.seek(0)
        text = err.read()
        check("the last resort was taken", "drain did not finish" in text)
        check("no sanitizer report", "Sanitizer" not in text and "runtime error" not in text,
              "\n".join(l for l in text.splitlines() if not l.startswith("{"))[:3000])
    finally:
        for s in socks:
            s.close()
        if proxy is not None and proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        stop_all([emu_p])
    finish()


if __name__ == "__main__":
    main()
