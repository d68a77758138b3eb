#!/usr/bin/python3
"""The threaded proxy under a short load, every answer verified: lanepack with
2 and 3 front threads in front of the emulator, the bundled load generator on
the JSON route and the v2 binary route over many connections, clients that
leave mid-flight, a SIGHUP reload under load, then SIGTERM. Checked: every
answer right, nothing failed, the proxy healthy after, the --threads flag
winning over the file's own value (at start and across the reload), it exits 0 and no
sanitizer wrote a report (in the ThreadSanitizer build, a data race between the
threads fails here: scripts/test.sh runs it there with halt_on_error).

Usage: test-threads-load.py LANEPACK EMULATOR LOADGEN"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, model_config, run_loadgen, start_emulator, start_proxy  # noqa: E402

lanepack, emulator, loadgen = sys.argv[1], sys.argv[2], sys.argv[3]
# sanitized builds are 5-15x slower: keep the load bounded in time, not count
SLOW = any(s in lanepack for s in ("tsan", "asan"))
REQUESTS = 600 if SLOW else 3000


def load(port, tmp, name, extra):
    out = os.path.join(tmp, name + ".json")
    cmd = [loadgen, "--url", "http://127.0.0.1:%d" % port, "--lengths", "uniform:1,400",
           "--concurrency", "48", "--connections", "48", "--max-requests", str(REQUESTS),
           "--duration", "60s", "--timeout", "30s", "--verify", "--seed", "7", "--json", out] + extra
    return run_loadgen(cmd, out, 120)


def leavers(port, n=40):
    """n clients that send a request and close before the answer."""
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        body = json.dumps({"input_ids": list(range(1, 50 + i))}).encode()
        s.sendall(b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        s.close()


def healthy(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", "/v1/infer", json.dumps({"input_ids": [5, 6, 7]}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    return r.status == 200, (r.status, data[:200])


# The file asks for this many front threads more than the flag does.
FILE_EXTRA_THREADS = 2


def front_threads(pid):
    """The front loops a process runs: its threads named lp-front-N."""
    n = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                n += f.read().startswith("lp-front-")
        except OSError:
            pass
    return n


def run(threads, tmp):
    emu_err = open(os.path.join(tmp, "emu-%d.log" % threads), "w+")
    emu, emu_port = start_emulator(emulator, "8x512,4x1024", ["--cost-ms", "1", "--protocol", "both"],
                                   timeout=30, stderr=emu_err)
    # the file asks for other than the flag: the flag must win, at start and on reload
    cfg = {"log_level": "warn", "threads": threads + FILE_EXTRA_THREADS,
           "models": {"default": model_config("8x512,4x1024", [emu_port], max_wait_ms=2)}}
    lp_err = open(os.path.join(tmp, "lp-%d.log" % threads), "w+")
    lp = None
    try:
        lp, lp_port = start_proxy(lanepack, os.path.join(tmp, "lp-%d.json" % threads), cfg,
                                  args=["--threads", str(threads)], stderr=lp_err)
        tag = "%d threads" % threads
        fronts = front_threads(lp.pid)
        check(tag + ": --threads %d wins over the file's %d (front threads running)"
              % (threads, threads + FILE_EXTRA_THREADS), fronts == threads, fronts)
        rc, js, err = load(lp_port, tmp, "json-%d" % threads, [])
        check(tag + ": JSON route, every answer right", rc == 0 and js.get("ok") == REQUESTS
              and js.get("mismatches") == 0 and js.get("failed") == 0, (rc, js, err[-300:]))
        leavers(lp_port)
        lp.send_signal(signal.SIGHUP)
        rc, js, err = load(lp_port, tmp, "v2-%d" % threads, ["--protocol", "v2", "--binary"])
        check(tag + ": v2 binary route across a reload, every answer right", rc == 0
              and js.get("ok") == REQUESTS and js.get("mismatches") == 0 and js.get("failed") == 0,
              (rc, js, err[-300:]))
        ok, detail = healthy(lp_port)
        check(tag + ": healthy after clients left mid-flight", ok, detail)
        lp_err.seek(0)
        check(tag + ": the reload kept the flag's threads (not refused as a change)",
              "reload refused" not in lp_err.read() and front_threads(lp.pid) == threads, front_threads(lp.pid))
        lp.send_signal(signal.SIGTERM)
        try:
            code = lp.wait(timeout=60)
        except subprocess.TimeoutExpired:
            code = "hung"
        lp_err.seek(0)
        log = lp_err.read()
        check(tag + ": exits 0 on SIGTERM", code == 0, (code, log[-1500:]))
        check(tag + ": no sanitizer report", "Sanitizer" not in log, log[-3000:])
    finally:
        for p in (lp, emu):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        emu_err.close()
        lp_err.close()


with tempfile.TemporaryDirectory() as tmp:
    for n in (2, 3):
        run(n, tmp)
finish()
