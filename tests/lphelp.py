"""Shared by the Python tests: a free loopback port, waiting until an HTTP
route answers 200, a lanepack-loadgen run read back from its --json report,
and TAP-like checks with a closing count."""
import http.client
import json
import os
import socket
import subprocess
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_http(port, path, timeout=8.0):
    """Until GET path on port answers 200; SystemExit after timeout seconds."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit("nothing answered on port %d%s" % (port, path))


def run_loadgen(cmd, out, timeout):
    """Runs the load generator command cmd (which writes its report to out with
    --json): (exit code, the report or {} when none, stderr or all output)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    try:
        with open(out) as f:
            return r.returncode, json.load(f), r.stderr
    except (OSError, ValueError):
        return r.returncode, {}, r.stdout + r.stderr


def stop_all(procs, grace=10.0):
    """Stops the servers a test started, by their Popen objects: SIGTERM to
    each, then SIGKILL to any still running after grace seconds."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


_results = []


def rss_kb(pid):
    """The resident memory of process pid in KiB (-1 when it cannot be read)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def tei_error(st, js, status, etype, *words):
    """An error of TEI's shape, with the status and type, naming the words."""
    return (st == status and isinstance(js, dict) and set(js) == {"error", "error_type"}
            and js["error_type"] == etype and all(w in js["error"] for w in words))


def check(name, cond, detail=""):
    """One named check: prints ok / not ok (with the detail) and records it."""
    _results.append(bool(cond))
    print("%s - %s%s" % ("ok" if cond else "not ok", name, "" if cond else ": " + str(detail)[:400]), flush=True)


def start_lanepack(lanepack, cfg, tmp):
    """Starts lanepack on the configuration cfg (written into tmp), its stderr
    to a log in tmp; under ASan without a quarantine, so that freed memory
    leaves the RSS. Returns (the Popen, the log's path)."""
    path = os.path.join(tmp, "lp.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
    log = os.path.join(tmp, "lp.log")
    return subprocess.Popen([lanepack, "--config", path], stderr=open(log, "w"), env=env), log


def stop_lanepack(proc, log):
    """Stops what start_lanepack started (SIGTERM, then SIGKILL after 10 s) and
    checks it exited cleanly, with no sanitizer report in its log."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    tail = open(log).read()[-3000:]
    check("the proxy exited cleanly (no sanitizer report)", proc.returncode == 0 and "ERROR:" not in tail,
          (proc.returncode, tail))


def finish():
    """Prints the count and exits 0 only if every check passed."""
    print("%d of %d checks passed" % (sum(_results), len(_results)))
    raise SystemExit(0 if _results and all(_results) else 1)
