"""Shared by the Python tests: the emulator's answer function, a free loopback
port, waiting until an HTTP route answers 200, a lanepack configuration built
(model_config, write_config), the emulator, lanepack or another server started
on free ports (start_emulator, start_proxy, start_server), a threads test's
arguments, a SentencePiece model trained, a lanepack-loadgen run read back from
its --json report, stopping servers (a lanepack checked to exit 0), and
TAP-like checks with a closing count."""
import http.client
import json
import os
import socket
import subprocess
import sys
import time


# The emulator's answer function, as include/lanepack/emu.h has it: the k-th
# output of a sequence is h(k), h(-1) = EMU_SEED, h(k) = (h(k-1) * 31 + t(k) + 1)
# mod EMU_MOD, so a misplaced token or a leak across sequences changes it.
EMU_MOD = 1000000007
EMU_SEED = 7


def emu_outputs(tokens):
    """The emulator's per-token outputs for one sequence."""
    h, out = EMU_SEED, []
    for t in tokens:
        h = (h * 31 + int(t) + 1) % EMU_MOD
        out.append(h)
    return out


def emu_last(tokens):
    """The emulator's per-sequence output: the last of its per-token ones."""
    h = EMU_SEED
    for t in tokens:
        h = (h * 31 + int(t) + 1) % EMU_MOD
    return h


def emu_feature(h, k):
    """Feature k of output h in the emulator's float form (vectors): FP32 holds it exactly."""
    return (h % 1000) + 0.25 * k


def threads_args(default):
    """A threads test's arguments, "LANEPACK EMULATOR [THREADS]": (the lanepack
    binary, the emulator's, the thread count, default when not given)."""
    return sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else default


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


def run_loadgen_bounded(loadgen, url, out, requests, args, timeout=90):
    """A closed-loop run of 8 users for requests requests (30 s at most, 10 s
    per request), its report in out: as run_loadgen."""
    cmd = [loadgen, "--url", url, "--concurrency", "8", "--max-requests", str(requests), "--duration", "30s",
           "--timeout", "10s", "--json", out] + args
    return run_loadgen(cmd, out, timeout)


def train_spm(tmp, text, vocab):
    """A SentencePiece model trained with spm_train on the file text, vocab
    pieces, in tmp (checked); its path."""
    prefix = os.path.join(tmp, "spm")
    r = subprocess.run(["spm_train", "--input=" + text, "--model_prefix=" + prefix, "--vocab_size=%d" % vocab,
                        "--character_coverage=1.0"], capture_output=True)
    check("spm_train trained a model on %s" % text, r.returncode == 0, r.stderr[-300:])
    return prefix + ".model"


# Ports are picked free and bound a moment later: another test on this machine
# may take one in between, and the server then exits at once. It is started
# again on new ports, this many times at most. (Not caught: a lanepack with
# threads >= 2 binds with SO_REUSEPORT and shares a port another such lanepack
# of the same user took, rather than failing.)
START_TRIES = 3
# How long a server that answered must stay up before it counts as ours: one
# whose bind failed exits within milliseconds (and what answered was another's).
ALIVE_S = 0.3


def loopback(port):
    """The loopback address of port, as "listen" and the emulator's --listen take it."""
    return "127.0.0.1:%d" % port


def backend_url(port):
    """The URL of a backend on loopback port."""
    return "http://127.0.0.1:%d" % port


def model_config(shapes, backends, **keys):
    """One model's configuration: its shapes, its backends (loopback ports or
    URLs) and the test's own keys."""
    return dict({"shapes": shapes, "backends": [backend_url(b) if isinstance(b, int) else b for b in backends]},
                **keys)


def write_config(path, cfg):
    """Writes the configuration cfg (a dict) to path as JSON; the path."""
    with open(path, "w") as f:
        json.dump(cfg, f)
    return path


def _mark(f):
    """Where a file object the server writes to stands now (None for a pipe, a
    descriptor or /dev/null): what a failed start wrote after it is cut off."""
    try:
        return f.tell()
    except (AttributeError, OSError, ValueError):
        return None


def _rewind(f, mark):
    """Cuts what a failed start wrote to f back to mark (from _mark), so that the
    test reads only what earlier servers and the one it kept wrote."""
    if mark is not None:
        f.seek(mark)
        f.truncate()


def _serve(what, nports, launch, ready, timeout, popen_kw):
    """Starts a server with launch(ports) on nports free loopback ports until
    GET ready on the first answers 200 while it runs, again on new ports when
    it exits first (a port taken in between): (its Popen, *ports). SystemExit
    when it never gets ready."""
    outs = [(f, _mark(f)) for f in (popen_kw.get("stdout"), popen_kw.get("stderr"))]
    for _ in range(START_TRIES):
        ports = [free_port() for _ in range(nports)]
        p = launch(ports)
        end = time.time() + timeout
        while time.time() < end and p.poll() is None:
            try:
                c = http.client.HTTPConnection("127.0.0.1", ports[0], timeout=1)
                c.request("GET", ready)
                if c.getresponse().status == 200:
                    time.sleep(ALIVE_S)
                    if p.poll() is None:
                        return (p,) + tuple(ports)
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.05)
        exited = p.poll() is not None
        stop_all([p])
        if not exited:
            raise SystemExit("%s did not answer %s on port %d in %g s" % (what, ready, ports[0], timeout))
        for f, mark in outs:
            _rewind(f, mark)
    raise SystemExit("%s exited before it was ready on free ports (%d tries, last exit %s)"
                     % (what, START_TRIES, p.returncode))


def start_server(what, command, ready="/healthz", timeout=8.0, **popen_kw):
    """A server (what names it in errors) run as command(its --listen address)
    on a free loopback port, answering GET ready before this returns: (its
    Popen, its port)."""
    return _serve(what, 1, lambda ports: subprocess.Popen(command(loopback(ports[0])), **popen_kw),
                  ready, timeout, popen_kw)


def start_emulator(emulator, shapes, args=(), ready="/healthz", timeout=8.0, **popen_kw):
    """lanepack-emulator serving shapes with args on a free loopback port
    (stderr to /dev/null unless popen_kw says), answering before this returns:
    (its Popen, its port)."""
    popen_kw.setdefault("stderr", subprocess.DEVNULL)
    return start_server("the emulator", lambda listen: [emulator, "--listen", listen, "--shapes", shapes] + list(args),
                        ready, timeout, **popen_kw)


def start_proxy(lanepack, path, cfg, nports=1, args=(), ready="/readyz", timeout=30.0, **popen_kw):
    """lanepack on nports free loopback ports, the first its client listener,
    with the configuration written to path: cfg is a dict ("listen" is added)
    or a function of the ports that returns one (for keys naming the others,
    such as admin_listen). args are added to the command line and popen_kw go
    to Popen. Ready (GET ready answers 200 on the first port) before this
    returns: (its Popen, *its ports)."""
    def launch(ports):
        write_config(path, cfg(*ports) if callable(cfg) else dict(cfg, listen=loopback(ports[0])))
        return subprocess.Popen([lanepack, "--config", path] + list(args), **popen_kw)
    return _serve("lanepack", nports, launch, ready, timeout, popen_kw)


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


def stop_proxy(p, what="lanepack", grace=30.0):
    """Stops a lanepack the test started (its Popen) with SIGTERM and checks it
    exits 0: a drain that hangs, a crash at exit or a sanitizer's report at exit
    fails the test. One that already ended is checked as it ended. Returns its
    exit status ("hung" when SIGKILL was needed after grace seconds)."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            check("%s exits 0 on SIGTERM" % what, False, "hung: killed after %g s" % grace)
            return "hung"
    check("%s exits 0 on SIGTERM" % what, p.returncode == 0, p.returncode)
    return p.returncode


_results = []


def metric(port, name):
    """The value of the unlabelled metric name on GET /metrics (None when absent)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


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


def start_lanepack(lanepack, cfg, tmp, ready="/healthz"):
    """start_proxy with the configuration cfg (a dict, "listen" added) written
    into tmp, its stderr to a log in tmp; under ASan without a quarantine, so
    that freed memory leaves the RSS. Returns (the Popen, its port, the log's path)."""
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
    log = os.path.join(tmp, "lp.log")
    proc, port = start_proxy(lanepack, os.path.join(tmp, "lp.json"), cfg, ready=ready, stderr=open(log, "w"),
                             env=env)
    return proc, port, log


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


def read_answer(s, timeout=10.0):
    """One HTTP answer from socket s: (status, {lower name: value}, body bytes);
    status 0 if the connection closed before a whole answer."""
    s.settimeout(timeout)
    data = b""
    end = time.time() + timeout
    while b"\r\n\r\n" not in data and time.time() < end:
        try:
            got = s.recv(65536)
        except OSError:
            got = b""
        if not got:
            return 0, {}, data
        data += got
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return 0, {}, data
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(b":")
        hdrs[k.strip().lower().decode("latin-1")] = v.strip()
    n = int(hdrs.get("content-length", b"0"))
    while len(body) < n and time.time() < end:
        try:
            got = s.recv(65536)
        except OSError:
            break
        if not got:
            break
        body += got
    return status, hdrs, body


def raw(port, data, timeout=10.0):
    """Sends data on a new connection and reads one answer."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        return read_answer(s, timeout)
    finally:
        s.close()
