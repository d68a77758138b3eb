#!/usr/bin/env python3
"""A second SIGTERM or SIGINT during the drain ends it at once: requests held
at a backend that never answers get 503 shutting_down and lanepack exits 0
well before drain_timeout_ms, with one front and with several.
Usage: test-drain-twice.py LANEPACK"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, model_config, start_proxy, stop_all  # noqa: E402

lanepack = sys.argv[1]
HELD = 6
DRAIN_MS = 20000  # far longer than the test waits: only the second signal can end it


def hang_backend(sock, stop):
    """Accepts and reads, never answers (a hung accelerator host)."""
    conns = []
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            c, _ = sock.accept()
            c.settimeout(0.01)
            conns.append(c)
        except OSError:
            pass
        for c in conns:
            try:
                c.recv(65536)
            except OSError:
                pass
    for c in conns:
        c.close()


def infer(port, out, i):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/infer", body=json.dumps({"input_ids": [1, 2, 3, i + 4]}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        out[i] = (r.status, json.loads(r.read() or b"{}").get("error", {}))
    except Exception as e:  # noqa: BLE001 -- recorded, checked below
        out[i] = (None, str(e))


for threads, sig in ((1, signal.SIGTERM), (2, signal.SIGINT)):
    be = socket.socket()
    be.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    be.bind(("127.0.0.1", 0))
    be.listen(64)
    stop = threading.Event()
    bt = threading.Thread(target=hang_backend, args=(be, stop), daemon=True)
    bt.start()
    tmp = tempfile.mkdtemp()
    proxy = None
    try:
        # the backend never answers: the proxy is never ready, only alive
        proxy, port = start_proxy(lanepack, os.path.join(tmp, "lp.json"), {
            "log_level": "error", "threads": threads, "drain_timeout_ms": DRAIN_MS, "health_interval_ms": 60000,
            "models": {"default": model_config("8x64", [be.getsockname()[1]], max_wait_ms=1,
                                               backend_timeout_ms=60000)}}, ready="/healthz", stderr=subprocess.DEVNULL)
        out = [None] * HELD
        clients = [threading.Thread(target=infer, args=(port, out, i)) for i in range(HELD)]
        for t in clients:
            t.start()
        time.sleep(1.0)  # every request admitted and its batch at the backend
        proxy.send_signal(sig)
        time.sleep(0.5)
        t0 = time.time()
        proxy.send_signal(sig)
        try:
            rc = proxy.wait(8)
        except subprocess.TimeoutExpired:
            rc = None
        took = time.time() - t0
        for t in clients:
            t.join(10)
        check("threads %d, second %s: lanepack exits 0 in %.1f s (drain_timeout_ms %d)"
              % (threads, sig.name, took, DRAIN_MS), rc == 0 and took < 5, (rc, took))
        check("threads %d: every held request answered 503 shutting_down" % threads,
              all(o and o[0] == 503 and o[1].get("code") == "shutting_down" for o in out), out)
    finally:
        stop.set()
        stop_all([proxy] if proxy else [])
        bt.join(2)
        be.close()
finish()
