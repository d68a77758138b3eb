#!/usr/bin/python3
"""What an autoscaler and an inference gateway read, under a known load:
lanepack_requests_waiting and lanepack_requests_running per model (the
endpoint picker's TotalQueuedRequests and TotalRunningRequests: requests, not
sequences), lanepack_saturation per model (low when light, above 1 after a
burst that queues), all promtool-clean; and max_requests_per_connection: the
Nth answer on a keep-alive connection says Connection: close and the
connection closes after it.

Usage: test-scale.py LANEPACK EMULATOR"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, finish, loopback, model_config, start_emulator, start_proxy, stop_all,  # noqa: E402
                    write_config)

lanepack, emulator = sys.argv[1], sys.argv[2]
HEAVY_MS = 1500  # one device, one batch of 4 at a time: a burst of 13 queues for seconds
LIGHT_MS = 20


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    c.request("GET", "/metrics")
    return c.getresponse().read().decode()


def sample(text, name, model):
    m = re.search(r'^%s\{model="%s"\} (\S+)$' % (name, model), text, re.M)
    return float(m.group(1)) if m else None


def infer(port, model, body, out=None):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("POST", "/v1/models/%s/infer" % model, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        if out is not None:
            out.append(r.status)
        return r.status
    except (OSError, http.client.HTTPException) as e:
        if out is not None:
            out.append(repr(e))
        return None


def raw_requests(port, n, path="/healthz"):
    """n requests on one connection, one after another: each answer's
    Connection header (or None), and whether the server closed after the last."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    f = s.makefile("rb")
    conn_headers = []
    for _ in range(n):
        try:
            s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path.encode())
        except OSError:
            conn_headers.append("write failed")
            break
        try:
            status = f.readline()
        except ConnectionResetError:  # the server closed and our request met the closed socket
            status = b""
        if not status:
            conn_headers.append("closed")
            break
        length, conn = 0, None
        while True:
            line = f.readline().decode().strip()
            if not line:
                break
            k, _, v = line.partition(":")
            if k.lower() == "content-length":
                length = int(v)
            elif k.lower() == "connection":
                conn = v.strip().lower()
        f.read(length)
        conn_headers.append(conn)
    s.settimeout(3)
    try:
        closed = f.read(1) == b""
    except ConnectionResetError:
        closed = True
    except OSError:  # a timeout: still open
        closed = False
    s.close()
    return conn_headers, closed


with tempfile.TemporaryDirectory() as tmp:
    emus = []
    try:
        emu, heavy_port = start_emulator(emulator, "4x64", ["--cost-ms", str(HEAVY_MS), "--devices", "1"])
        emus.append(emu)
        emu, light_port = start_emulator(emulator, "4x64", ["--cost-ms", str(LIGHT_MS), "--devices", "1"])
        emus.append(emu)
        cfg = {"log_level": "warn", "max_requests_per_connection": 3,
               "models": {
                   "heavy": model_config("4x64", [heavy_port], max_wait_ms=5, max_inflight=1),
                   "light": model_config("4x64", [light_port], max_wait_ms=5, max_inflight=1)}}
        path = os.path.join(tmp, "lp.json")
        lp, lp_port, admin_port = start_proxy(lanepack, path, lambda lp, adm: dict(
            cfg, listen=loopback(lp), admin_listen=loopback(adm)), nports=2, stderr=subprocess.PIPE)
    except BaseException:
        stop_all(emus)
        raise
    cfg.update(listen=loopback(lp_port), admin_listen=loopback(admin_port))  # what a reload rewrites
    try:

        # ---- the gauges at rest ----
        text = metrics(admin_port)
        for name in ("lanepack_requests_waiting", "lanepack_requests_running", "lanepack_saturation"):
            check("%s is a gauge" % name, "# TYPE %s gauge" % name in text, name)
            check("%s{model=\"heavy\"} is 0 at rest" % name, sample(text, name, "heavy") == 0,
                  sample(text, name, "heavy"))

        # ---- light load: one request at a time, the device mostly idle ----
        for i in range(15):
            infer(lp_port, "light", {"input_ids": list(range(1, 10 + i))})
        text = metrics(admin_port)
        light = sample(text, "lanepack_saturation", "light")
        check("saturation is below 0.5 at light load (one request at a time)", light is not None and light < 0.5,
              light)

        # ---- a burst on the heavy model: 12 single requests and one of 3 sequences ----
        results = []
        threads = [threading.Thread(target=infer, args=(lp_port, "heavy", {"input_ids": list(range(1, 40 + i))}, results))
                   for i in range(12)]
        threads.append(threading.Thread(target=infer, args=(
            lp_port, "heavy", {"inputs": [list(range(1, 40)), list(range(1, 41)), list(range(1, 42))]}, results)))
        for t in threads:
            t.start()
        # every request admitted: 13 requests (15 sequences of 39 to 51 tokens,
        # one per lane of 4x64) outstanding; the first batch takes HEAVY_MS, so
        # none is answered yet
        end = time.time() + 1.2
        waiting = running = seqs = None
        while time.time() < end:
            text = metrics(admin_port)
            waiting = sample(text, "lanepack_requests_waiting", "heavy")
            running = sample(text, "lanepack_requests_running", "heavy")
            seqs = sample(text, "lanepack_queue_sequences", "heavy")
            if waiting is not None and running is not None and waiting + running == 13:
                break
            time.sleep(0.05)
        check("waiting + running = the 13 requests outstanding (requests, not the 15 sequences)",
              waiting is not None and running is not None and waiting + running == 13, (waiting, running))
        check("running: the requests in the one batch in flight (1 to 4 lanes)",
              running is not None and 1 <= running <= 4, running)
        check("waiting: at least the 9 requests no batch holds", waiting is not None and waiting >= 9, waiting)
        check("waiting counts requests, sequences counts sequences",
              seqs is not None and waiting is not None and seqs >= waiting, (seqs, waiting))
        check("promtool is installed (LP_SETUP_TESTS=1 scripts/setup.sh installs it)", shutil.which("promtool"))
        pt = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True) \
            if shutil.which("promtool") else None
        check("promtool check metrics passes with the new gauges", pt is not None and pt.returncode == 0,
              pt and pt.stderr.decode()[:300])
        for t in threads:
            t.join(40)
        check("the burst was answered", results.count(200) == 13, results)
        text = metrics(admin_port)
        heavy = sample(text, "lanepack_saturation", "heavy")
        check("saturation is above 1 after the burst (requests waited longer than a batch takes)",
              heavy is not None and heavy > 1.0,
              (heavy, [l for l in text.splitlines() if 'heavy' in l and ('_sum' in l or '_count' in l)
                       and ('queue_delay' in l or 'service_seconds' in l)]))
        check("nothing waits or runs after the burst",
              sample(text, "lanepack_requests_waiting", "heavy") == 0 and
              sample(text, "lanepack_requests_running", "heavy") == 0,
              (sample(text, "lanepack_requests_waiting", "heavy"), sample(text, "lanepack_requests_running", "heavy")))
        light2 = sample(text, "lanepack_saturation", "light")
        check("saturation is per model: the light model's stays low", light2 is not None and light2 < 0.5, light2)

        # ---- max_requests_per_connection: 3 ----
        hdrs, closed = raw_requests(lp_port, 4)
        check("the first two answers keep the connection", hdrs[:2] == [None, None], hdrs)
        check("the third answer says Connection: close", len(hdrs) >= 3 and hdrs[2] == "close", hdrs)
        check("the connection closes after the third answer", len(hdrs) == 4 and hdrs[3] in ("closed", "write failed"),
              hdrs)
        hdrs, closed = raw_requests(lp_port, 3)
        check("a new connection gets its 3 answers again, then is closed", hdrs == [None, None, "close"] and closed,
              (hdrs, closed))
        # an inference request counts as well
        s = socket.create_connection(("127.0.0.1", lp_port), timeout=10)
        body = json.dumps({"input_ids": [1, 2, 3]}).encode()
        req = b"POST /v1/models/light/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        s.sendall(req * 3)  # pipelined: the third answer closes
        data = b""
        s.settimeout(10)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        s.close()
        answers = data.count(b"HTTP/1.1 200")
        check("three pipelined inference requests: three answers, the last with Connection: close, then EOF",
              answers == 3 and data.count(b"Connection: close") == 1 and
              data.rfind(b"Connection: close") > data.rfind(b"HTTP/1.1 200"), data[-300:])
        # SIGHUP with max_requests_per_connection 2: new connections close after 2
        cfg["max_requests_per_connection"] = 2
        write_config(path, cfg)
        lp.send_signal(signal.SIGHUP)
        end, hdrs = time.time() + 5, None
        while time.time() < end:
            hdrs, closed = raw_requests(lp_port, 3)
            if hdrs[:2] == [None, "close"]:
                break
            time.sleep(0.2)
        check("after SIGHUP with max_requests_per_connection 2, the second answer closes", hdrs[:2] == [None, "close"],
              hdrs)
    finally:
        lp.terminate()
        try:
            lp.wait(15)
        except subprocess.TimeoutExpired:
            lp.kill()
        for e in emus:
            e.terminate()
            e.wait(5)
    check("lanepack exits 0", lp.returncode == 0, lp.stderr.read().decode()[-400:] if lp.stderr else "")
finish()
