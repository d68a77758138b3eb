#!/usr/bin/python3
"""The pod's shutdown, played as Kubernetes plays it with the manifests in
deploy/k8s: SIGTERM reaches the pod under load; lanepack (the main container)
gets it at once, the model server (a native sidecar) only once lanepack has
exited. Checked: /readyz fails at once; for drain_delay_ms new connections are
still accepted and served (endpoints take time to update); then the listener
closes and everything accepted is answered 200; lanepack exits 0; nothing is
lost. A second case sends SIGTERM to both at once, as Kubernetes does without
the sidecar ordering, to show what the ordering is for: requests fail.

Usage: test-drain.py LANEPACK EMULATOR"""
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
from lphelp import check, finish, loopback, model_config, start_emulator, start_proxy  # noqa: E402

lanepack, emulator = sys.argv[1], sys.argv[2]
DELAY_MS = 1500




def start_pod(tmp):
    emu, emu_port = start_emulator(emulator, "4x64", ["--cost-ms", "300"])
    lp, lp_port, admin_port = start_proxy(lanepack, os.path.join(tmp, "lp-%d.json" % emu_port), lambda lp, adm: {
        "listen": loopback(lp), "admin_listen": loopback(adm),
        "log_level": "warn", "drain_delay_ms": DELAY_MS, "drain_timeout_ms": 20000,
        "models": {"default": model_config("4x64", [emu_port], max_wait_ms=5)}}, nports=2, stderr=subprocess.DEVNULL)
    return emu, lp, lp_port, admin_port


class Clients:
    """16 clients, each a fresh connection per request (as through a Service
    whose endpoints have not caught up), until stopped or refused."""

    def __init__(self, port, n=16):
        self.port = port
        self.lock = threading.Lock()
        self.log = []  # (t_sent, t_done, outcome)
        self.stop = False
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(n)]
        for t in self.threads:
            t.start()

    def run(self, i):
        k = 0
        while not self.stop:
            k += 1
            body = json.dumps({"input_ids": [1 + (i * 7 + k + j) % 900 for j in range(1 + (i + k) % 40)]})
            t0 = time.monotonic()
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
                c.request("POST", "/v1/infer", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                outcome = r.status if r.status == 200 else "%d %s" % (r.status, data[:80])
                c.close()
            except ConnectionRefusedError:
                outcome = "refused"
            except (OSError, http.client.HTTPException) as e:
                outcome = "error %r" % e
            with self.lock:
                self.log.append((t0, time.monotonic(), outcome))
            if outcome == "refused":
                return
            time.sleep(0.02)

    def join(self):
        self.stop = True
        for t in self.threads:
            t.join(30)


def readyz(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", "/readyz")
        return c.getresponse().status
    except OSError:
        return None


with tempfile.TemporaryDirectory() as tmp:
    # ---- with the manifests' ordering ----
    emu, lp, port, admin = start_pod(tmp)
    cl = Clients(port)
    time.sleep(1.0)
    # the admin port's metrics under load: valid Prometheus text (promtool)
    c = http.client.HTTPConnection("127.0.0.1", admin, timeout=5)
    c.request("GET", "/metrics")
    metrics = c.getresponse().read()
    pt = subprocess.run(["promtool", "check", "metrics"], input=metrics, capture_output=True)
    check("promtool check metrics passes on the admin port's /metrics", pt.returncode == 0,
          pt.stderr.decode()[:300])
    check("process metrics are there", all(k in metrics for k in (b"process_cpu_seconds_total",
          b"process_resident_memory_bytes", b"process_open_fds", b"process_max_fds",
          b"process_start_time_seconds", b"lanepack_build_info")))
    t_term = time.monotonic()
    lp.send_signal(signal.SIGTERM)  # the pod is deleted: the main container first
    time.sleep(0.1)
    check("/readyz fails at once after SIGTERM (client port)", readyz(port) == 503, readyz(port))
    check("/readyz fails at once after SIGTERM (admin port)", readyz(admin) == 503, readyz(admin))
    try:
        rc = lp.wait(30)
    except subprocess.TimeoutExpired:
        lp.kill()
        rc = "hung"
    t_exit = time.monotonic()
    emu.send_signal(signal.SIGTERM)  # the sidecar: only once the main container has exited
    emu.wait(10)
    cl.join()
    log = cl.log
    during = [o for t0, t1, o in log if t_term + 0.05 < t0 < t_term + DELAY_MS / 1000.0 - 0.1]
    refused = [t0 for t0, t1, o in log if o == "refused"]
    bad = [o for t0, t1, o in log if o not in (200, "refused")]
    check("lanepack exits 0 after draining", rc == 0, rc)
    check("requests were in flight when SIGTERM came", any(t0 < t_term < t1 for t0, t1, o in log))
    check("new connections during drain_delay_ms are served (%d)" % len(during),
          len(during) >= 16 and all(o == 200 for o in during), during[:5])
    check("no connection refused before drain_delay_ms",
          all(t >= t_term + DELAY_MS / 1000.0 - 0.05 for t in refused), [t - t_term for t in refused][:5])
    check("every request that got in was answered 200 (%d answered)" % sum(1 for *_, o in log if o == 200),
          not bad, bad[:5])
    check("the drain took the delay and the last batches, not the drain timeout",
          DELAY_MS / 1000.0 <= t_exit - t_term < 10, t_exit - t_term)

    # ---- without it: both at once, as a pod of two plain containers ----
    emu, lp, port, admin = start_pod(tmp)
    cl = Clients(port)
    time.sleep(1.0)
    lp.send_signal(signal.SIGTERM)
    emu.send_signal(signal.SIGTERM)
    lp.wait(30)
    cl.join()
    failed = [o for *_, o in cl.log if o not in (200, "refused")]
    check("without the ordering, the model server leaving first fails requests (%d): "
          "what the sidecar ordering is for" % len(failed), len(failed) > 0, cl.log[-3:])

finish()
