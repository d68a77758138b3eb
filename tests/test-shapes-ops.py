#!/usr/bin/python3
"""Shape management, reload and the access log under operations: failing
pipelined requests of a hung-up client when a shape is lost (a use-after-free
under ASan before), shapes that come back after a transient "no such model" or
"shape mismatch" (and /readyz while none can serve), retired backends' shapes
leaving admission, stale shapes pruned when a backend's shapes churn, a failed
layout failing only its own batch, SIGHUP applying `devices`, reopening the
access log (logrotate) and a full disk dropping whole lines, counted.

Each section runs its own lanepack against lanepack-emulator or a small fake
JSON-wire backend written here (its shapes, holds and answers set by the test).

Usage: test-shapes-ops.py LANEPACK EMULATOR"""
import fcntl
import http.client
import json
import os
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, finish, free_port, loopback, model_config, start_emulator, start_proxy,  # noqa: E402
                    stop_proxy, write_config)

lanepack, emulator = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp()
procs = []


class Fake:
    """A JSON-wire backend: /healthz, /v1/shapes (self.shapes), /v1/batch
    answering each token's id as its output. hold() keeps batches unanswered
    until release(); mismatch makes them 500 "shape mismatch"; down makes
    /healthz fail."""

    def __init__(self, shapes):
        self.shapes = [list(s) for s in shapes]
        self.mismatch = False
        self.down = False
        self.gate = threading.Event()
        self.gate.set()
        self.batches = []  # (lanes, bucket) of every batch received
        self.held = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, status, obj):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/healthz":
                    self.send(503 if fake.down else 200, {"status": "down" if fake.down else "ok"})
                elif self.path == "/v1/shapes":
                    self.send(200, {"shapes": fake.shapes})
                else:
                    self.send(404, {"error": "no such route"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                shape = body.get("shape")
                fake.batches.append(tuple(shape))
                if not fake.gate.is_set():
                    fake.held += 1
                    fake.gate.wait(30)
                if fake.mismatch:
                    self.send(500, {"error": {"code": "shape_mismatch",
                                              "message": "shape mismatch: %r is not compiled" % shape}})
                    return
                self.send(200, {"batch_id": body.get("batch_id"),
                                "outputs": [[t for t in lane] for lane in body["input_ids"]]})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self):
        self.gate.clear()

    def release(self):
        self.gate.set()

    def wait_held(self, n, timeout=5):
        end = time.time() + timeout
        while self.held < n and time.time() < end:
            time.sleep(0.01)
        return self.held >= n

    def close(self):
        self.gate.set()
        self.server.shutdown()


def start_lanepack(cfg, name, nports=1, ready="/readyz", **popen):
    """lanepack on free ports with cfg (a dict, or a function of the ports)
    written to tmp/name.json, its stderr to tmp/name.err unless popen says,
    ready before this returns: (its Popen, the file's path, *its ports). A
    dict gets the listen address, for a reload that writes it again."""
    path = os.path.join(tmp, name + ".json")
    popen.setdefault("stderr", open(os.path.join(tmp, name + ".err"), "w"))
    p, *ports = start_proxy(lanepack, path, cfg, nports=nports, ready=ready, **popen)
    procs.append(p)
    if isinstance(cfg, dict):
        cfg["listen"] = loopback(ports[0])
    return (p, path) + tuple(ports)


def stop(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def base_cfg(**over):
    cfg = {"log_level": os.environ.get("LP_LOG", "warn"), "health_interval_ms": 100}
    cfg.update(over)
    return cfg


def call(port, method, path, body=None, timeout=20):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, None if body is None else json.dumps(body),
              {"Content-Type": "application/json"} if body is not None else {})
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


def infer(port, ids, model=None, timeout=20):
    body = {"input_ids": ids}
    if model:
        body["model"] = model
    return call(port, "POST", "/v1/infer", body, timeout)


def code_of(answer):
    return answer.get("error", {}).get("code") if isinstance(answer, dict) else None


def in_thread(f, *a):
    """Runs f(*a) in a thread; the returned list gets (result, seconds taken)."""
    out = []

    def run():
        t0 = time.time()
        try:
            out.append((f(*a), time.time() - t0))
        except Exception as e:  # noqa: BLE001 - reported by the check
            out.append((("error", repr(e)), time.time() - t0))
    t = threading.Thread(target=run)
    t.start()
    out.append(t)
    return out


def result(out, timeout=30):
    out[0].join(timeout)
    return out[1] if len(out) > 1 else (("no answer", None), None)


def metric(port, name, labels=""):
    st, text = call(port, "GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else str(text)
    for line in text.splitlines():
        m = re.match(r"%s(\{[^}]*\})? (\S+)$" % re.escape(name), line)
        if m and labels in (m.group(1) or ""):
            return float(m.group(2))
    return None


def wait_for(cond, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


# ---- 1. shape loss fails the pipelined requests of a client that hung up ----
def uaf_on_shape_loss():
    fake = Fake([[1, 16], [1, 64]])
    lp, _, port = start_lanepack(base_cfg(max_pipeline=4, models={"default": model_config(
        "1x16,1x64", [fake.url], max_wait_ms=0, max_inflight=1)}), "uaf")
    try:
        fake.hold()
        blocker = in_thread(infer, port, [7] * 40)
        check("uaf: a 1x64 batch is held at the backend", fake.wait_held(1), fake.batches)
        # four pipelined requests only 1x64 holds, queued behind it; then more
        # than the proxy holds back for a full pipeline, so it stops reading,
        # and a reset: the proxy learns of the hang-up only when it writes
        s = socket.create_connection(("127.0.0.1", port))
        body = json.dumps({"input_ids": [9] * 40})
        one = ("POST /v1/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode()
        s.sendall(one * 4 + b"x" * (160 * 1024))
        time.sleep(0.4)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        fake.mismatch = True  # 1x64 is gone: every queued request fails at once
        fake.release()
        (st, ans), _ = result(blocker)
        check("uaf: the held request gets 503 no_shape_available", st == 503 and code_of(ans) == "no_shape_available",
              (st, ans))
        time.sleep(0.3)
        alive = lp.poll() is None
        check("uaf: lanepack survives failing pipelined requests of a client that reset (no use after free)",
              alive, open(os.path.join(tmp, "uaf.err")).read()[-1500:])
        if alive:
            st, _ = call(port, "GET", "/healthz")
            check("uaf: and serves on", st == 200, st)
    finally:
        stop_proxy(lp)
        fake.close()


# ---- 2. a transient "no such model" / "shape mismatch" ----
def transient_missing():
    missing = os.path.join(tmp, "missing")
    emus, ports = [], []
    for proto in ("lanepack", "v2"):
        emu, p = start_emulator(emulator, "2x32", ["--cost-ms", "1", "--missing-file", missing, "--protocol", proto])
        emus.append(emu)
        ports.append(p)
    procs.extend(emus)
    # the admin listener's port first: readiness is asked there
    lp, _, admin, port = start_lanepack(lambda admin, port: base_cfg(
        listen=loopback(port), admin_listen=loopback(admin), models={
            "j": model_config("2x32", [ports[0]], max_wait_ms=0),
            "t": model_config("2x32", [ports[1]], max_wait_ms=0, protocol="v2",
                              v2={"model": "lanepack_{lanes}x{bucket}"})}), "transient", nports=2)
    try:
        ok = [infer(port, [3, 4, 5], m)[0] for m in ("j", "t")]
        check("transient: both models serve", ok == [200, 200], ok)
        open(missing, "w").close()
        lost = [infer(port, [3, 4, 5], m) for m in ("j", "t")]
        check("transient: while the backends lack their shapes: 503 no_shape_available (JSON wire, v2 404)",
              all(st == 503 and code_of(a) == "no_shape_available" for st, a in lost), lost)
        st, _ = call(admin, "GET", "/readyz")
        check("transient: /readyz is 503 while no shape can serve", st == 503, st)
        time.sleep(1.5)
        os.unlink(missing)
        t0 = time.time()
        back = wait_for(lambda: all(infer(port, [3, 4, 5], m)[0] == 200 for m in ("j", "t")), 8)
        check("transient: the shapes come back once the backends have them again (%.1f s)" % (time.time() - t0),
              back, [infer(port, [3, 4, 5], m) for m in ("j", "t")])
        st, _ = call(admin, "GET", "/readyz")
        check("transient: /readyz is 200 again", st == 200, st)
    finally:
        stop_proxy(lp)
        for e in emus:
            stop(e)


# ---- 3. a removed backend's shapes leave admission ----
def retired_shapes():
    small, wide = Fake([[1, 16]]), Fake([[1, 16], [1, 64]])
    cfg = base_cfg(models={"default": model_config("1x16", [small.url, wide.url], max_wait_ms=0, max_inflight=1,
                                                   max_request_ms=5000)})
    lp, path, port = start_lanepack(cfg, "retired")
    try:
        check("retired: 1x64 of the second backend is known",
              wait_for(lambda: [1, 64] in [s["shape"] for s in call(port, "GET", "/v1/models")[1]["models"][0]["shapes"]], 5))
        wide.hold()
        first = in_thread(infer, port, [5] * 40)
        check("retired: a 40-token sequence went to the backend with 1x64 (held)", wide.wait_held(1), wide.batches)
        queued = in_thread(infer, port, [6] * 40)
        time.sleep(0.2)
        cfg["models"]["default"]["backends"] = [small.url]
        write_config(path, cfg)
        lp.send_signal(signal.SIGHUP)
        (st, ans), took = result(queued, 10)
        check("retired: a queued sequence only the removed backend's shape holds fails at once (503 no_shape_available)",
              st == 503 and code_of(ans) == "no_shape_available" and took is not None and took < 3, (st, ans, took))
        t0 = time.time()
        st, ans = infer(port, [8] * 40)
        check("retired: a new one is refused at once (413 sequence_too_long)",
              st == 413 and code_of(ans) == "sequence_too_long" and time.time() - t0 < 3, (st, ans, time.time() - t0))
        wide.release()
        (st, ans), _ = result(first)
        check("retired: the batch in flight at the removed backend still ends there (200)", st == 200, (st, ans))
        check("retired: the short ones are served", infer(port, [1, 2, 3])[0] == 200)
    finally:
        stop_proxy(lp)
        small.close()
        wide.close()


# ---- 4. churning shapes do not fill the 16 slots ----
def churn():
    fake = Fake([[1, 16]] + [[1, 100 + i] for i in range(15)])
    lp, _, port = start_lanepack(base_cfg(models={"default": model_config("1x16", [fake.url], max_wait_ms=0)}),
                                 "churn")

    def shapes():
        return [tuple(s["shape"]) for s in call(port, "GET", "/v1/models")[1]["models"][0]["shapes"]]
    try:
        check("churn: the backend's 15 extra shapes fill the 16 slots", wait_for(lambda: len(shapes()) == 16, 5),
              shapes())
        fake.hold()
        held = in_thread(infer, port, [4] * 114)  # only 1x114 holds it
        check("churn: a batch of an old shape is in flight", fake.wait_held(1), fake.batches)
        old_shape = fake.batches[-1]
        # the backend goes down and comes back with 14 other shapes (one slot
        # stays with the batch in flight)
        fake.shapes = [[1, 16]] + [[1, 200 + i] for i in range(14)]
        fake.down = True
        time.sleep(0.5)
        fake.down = False
        want = {(1, 16)} | {(1, 200 + i) for i in range(14)}
        ok = wait_for(lambda: want <= set(shapes()), 5)
        check("churn: its new shapes replace the stale ones", ok, shapes())
        check("churn: the shape of the batch in flight is kept while it runs",
              tuple(old_shape) in set(shapes()), (old_shape, shapes()))
        fake.release()
        (st, ans), _ = result(held)
        check("churn: that batch is answered with its own shape",
              st == 200 and tuple(ans.get("batch", {}).get("shape", [])) == tuple(old_shape), (st, ans))
        st, ans = infer(port, [4] * 213)
        check("churn: a sequence only a new shape holds is served", st == 200, (st, ans))
        check("churn: and counted under its own shape",
              metric(port, "lanepack_batches_total", 'shape="%dx%d"' % tuple(ans.get("batch", {}).get("shape", [0, 0]))) == 1,
              ans)
        # once more, with a 15th new shape: the stale one has nothing in flight now
        fake.shapes.append([1, 214])
        fake.down = True
        time.sleep(0.5)
        fake.down = False
        check("churn: the stale shape leaves at the next report once its batch is done, its slot reused",
              wait_for(lambda: tuple(old_shape) not in set(shapes()) and want | {(1, 214)} <= set(shapes()), 5),
              shapes())
        st, ans = infer(port, [4] * 214)
        check("churn: the reused slot serves its new shape, counted from 0",
              st == 200 and metric(port, "lanepack_batches_total", 'shape="1x214"') == 1, (st, ans))
    finally:
        stop_proxy(lp)
        fake.close()


def is_asan():
    r = subprocess.run([lanepack, "--version"], capture_output=True, text=True,
                       env=dict(os.environ, ASAN_OPTIONS="help=1"))
    return "AddressSanitizer" in r.stderr


# ---- 5. a layout that cannot be built fails its own batch only ----
def layout_failure():
    # A v2 model with JSON tensors (its rectangles are filled as arrays, unlike
    # the gathered JSON and binary INT32 bodies): 2048x32768 is three 256 MiB
    # arrays, more than lanepack may allocate here (an address-space limit, or
    # ASan's cap). 2x64 holds the short requests beside it.
    emu, ep = start_emulator(emulator, "2x64,2048x32768", ["--protocol", "v2", "--cost-ms", "150"],
                             ready="/v2/health/ready")
    procs.append(emu)
    env = dict(os.environ)
    pre = None
    if is_asan():
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":allocator_may_return_null=1:max_allocation_size_mb=100"
    else:
        def pre():
            resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))
    lp, _, port = start_lanepack(base_cfg(models={"default": model_config(
        "2x64,2048x32768", [ep], max_batch_tokens=2048 * 32768, max_wait_ms=0,
        protocol="v2", v2={"model": "lanepack_{lanes}x{bucket}", "binary": False})}), "layout", env=env,
        preexec_fn=pre)
    try:
        time.sleep(0.3)  # the shapes are ready
        short = [in_thread(infer, port, [4] * 10) for _ in range(3)]
        time.sleep(0.05)  # the first short batch is at the backend: the rest wait beside the long one
        st, ans = infer(port, [5] * 100)  # only 2048x32768 holds it, and it cannot be built
        check("layout: the request whose rectangle could not be built gets 503 out_of_memory",
              st == 503 and code_of(ans) == "out_of_memory", (st, ans))
        outs = [result(x)[0] for x in short]
        check("layout: the requests queued beside it are served (200), not failed with it",
              [o[0] for o in outs] == [200] * 3, [(o[0], code_of(o[1])) for o in outs])
        check("layout: lanepack runs on", lp.poll() is None and infer(port, [1, 2])[0] == 200)
    finally:
        stop_proxy(lp)
        stop(emu)


# ---- 6. SIGHUP applies devices ----
def reload_devices():
    emu, ep = start_emulator(emulator, "2x32", ["--hide-shapes"])
    procs.append(emu)
    cfg = base_cfg(log_level="info", models={"default": model_config("2x32", [ep], devices=1)})
    lp, path, port = start_lanepack(cfg, "devices")
    try:
        check("devices: the gauge starts at the configured 1", metric(port, "lanepack_backend_devices") == 1)
        cfg["models"]["default"]["devices"] = 3
        write_config(path, cfg)
        lp.send_signal(signal.SIGHUP)
        check("devices: reloaded", wait_for(lambda: '"reloaded"' in open(os.path.join(tmp, "devices.err")).read(), 5))
        check("devices: SIGHUP with devices 3 sets the backend's devices (gauge 3)",
              wait_for(lambda: metric(port, "lanepack_backend_devices") == 3, 3), metric(port, "lanepack_backend_devices"))
        check("devices: and it serves", infer(port, [1, 2])[0] == 200)
    finally:
        stop_proxy(lp)
        stop(emu)


def log_lines(path):
    try:
        return open(path).read().splitlines(keepends=True)
    except FileNotFoundError:
        return []


# ---- 7. the access log: reopened on SIGHUP, whole lines or none on a full disk ----
def access_log():
    emu, ep = start_emulator(emulator, "2x32")
    procs.append(emu)
    access = os.path.join(tmp, "access.log")
    cfg = base_cfg(log_level="info", access_log=access, models={"default": model_config("2x32", [ep])})
    lp, path, port = start_lanepack(cfg, "access")
    try:
        for i in range(3):
            infer(port, [1, 2, 3])
        # logrotate: rename, then postrotate sends SIGHUP
        os.rename(access, access + ".1")
        lp.send_signal(signal.SIGHUP)
        wait_for(lambda: '"reloaded"' in open(os.path.join(tmp, "access.err")).read(), 5)
        for i in range(4):
            call(port, "POST", "/v1/infer", {"input_ids": "not tokens"})
        # again, with a configuration the reload refuses: the log is reopened all the same
        os.rename(access, access + ".2")
        write_config(path, dict(cfg, listen=loopback(free_port())))
        lp.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload refused" in open(os.path.join(tmp, "access.err")).read(), 5)
        for i in range(2):
            call(port, "POST", "/v1/infer", {"input_ids": "not tokens"})
        time.sleep(1.3)  # flushed once a second
        old, mid, new = log_lines(access + ".1"), log_lines(access + ".2"), log_lines(access)
        check("access log: SIGHUP reopens it: the lines after a rotation are in the new file",
              len(mid) == 4 and all('"status": 400' in l for l in mid), (len(old), len(mid), mid[:2]))
        check("access log: the rotated file keeps the lines before it", len(old) == 3, len(old))
        check("access log: a refused reload reopens it too", len(new) == 2, (len(old), len(mid), len(new)))
    finally:
        stop_proxy(lp)

    # a disk that fills: the file may not grow past 2,000 bytes
    full = os.path.join(tmp, "full.log")
    cfg = base_cfg(access_log=full, models={"default": model_config("2x32", [ep])})

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
    lp, _, port = start_lanepack(cfg, "full", stderr=subprocess.DEVNULL, preexec_fn=limit)
    try:
        n = 30
        for i in range(n):
            call(port, "POST", "/v1/infer", {"input_ids": "not tokens %d" % i})
        time.sleep(1.3)
        lines = log_lines(full)
        whole = all(l.endswith("\n") and isinstance(json.loads(l), dict) for l in lines)
        check("full disk: the log holds whole lines only (%d lines, %d bytes)" % (len(lines), sum(map(len, lines))),
              lines and whole, lines[-1:] if lines else lines)
        dropped = metric(port, "lanepack_access_log_dropped_lines_total")
        check("full disk: lines not written are counted (lanepack_access_log_dropped_lines_total = %s)" % dropped,
              dropped is not None and dropped == n - len(lines) and dropped > 0, (dropped, n, len(lines)))
        call(port, "POST", "/v1/infer", {"input_ids": "one more"})
        time.sleep(1.2)
        check("full disk: the count goes on", metric(port, "lanepack_access_log_dropped_lines_total") == (dropped or 0) + 1)
    finally:
        stop_proxy(lp)
        stop(emu)


# ---- 8. access_log "-" on a pipe that fills (a log collector behind): whole lines, none lost ----
def access_log_pipe():
    """stderr a non-blocking pipe nobody reads for a while: a write stops in the
    middle of a line (EAGAIN), and no ftruncate can take that part back. The
    rest of the line must follow, never the next line glued to its first half;
    and a collector that is only behind (the pipe full for now) loses nothing:
    once it reads again, slowly, every line arrives, in order."""
    rfd, wfd = os.pipe()
    fcntl.fcntl(wfd, fcntl.F_SETFL, fcntl.fcntl(wfd, fcntl.F_GETFL) | os.O_NONBLOCK)
    fcntl.fcntl(wfd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)  # a page: a write stops mid-line
    # the backend a free port nobody listens on: the requests here are refused before
    cfg = base_cfg(log_level="error", access_log="-", models={"default": model_config("2x32", [free_port()])})
    lp, _, port = start_lanepack(cfg, "pipe", ready="/healthz", stderr=wfd)
    os.close(wfd)
    got = []
    before, after = 60, 40  # about 15 KB, then 10 KB of lines: each more than the pipe holds

    def slow_reader():  # a collector that reads again, a KiB at a time: the pipe fills between reads
        while True:
            b = os.read(rfd, 1024)
            if not b:
                return
            got.append(b)
            time.sleep(0.01)

    def lines_now():
        return b"".join(got).splitlines()

    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        for i in range(before):
            c.request("POST", "/v1/infer", json.dumps({"input_ids": "not tokens %d" % i}),
                      {"Content-Type": "application/json"})
            c.getresponse().read()
        time.sleep(1.3)  # a flush meets the full pipe
        reader = threading.Thread(target=slow_reader)
        reader.start()
        for i in range(after):
            c.request("POST", "/v1/infer", json.dumps({"input_ids": "after %d" % i}),
                      {"Content-Type": "application/json", "X-Request-Id": "after-%d" % i})
            c.getresponse().read()
        c.close()
        deadline = time.time() + 20  # a page of the pipe a flush (a second): well inside
        while time.time() < deadline and sum(b'"after-' in ln for ln in lines_now()) < after:
            time.sleep(0.2)
    finally:
        stop_proxy(lp)
    reader.join(10)
    os.close(rfd)
    lines = lines_now()
    bad = []
    for ln in lines:
        try:
            json.loads(ln)
        except ValueError:
            bad.append(ln[:120])
    check("access_log \"-\" on a full non-blocking pipe: every line that arrives is whole JSON (%d lines)" % len(lines),
          lines and not bad, bad[:3])
    ids = [json.loads(ln).get("request_id") for ln in lines if not bad]
    afters = [x for x in ids if str(x).startswith("after-")]
    check("... a collector that was behind loses none: all %d lines from before it read again arrive" % before,
          len(lines) - len(afters) == before, len(lines) - len(afters))
    check("... and the %d after it, in order" % after, afters == ["after-%d" % i for i in range(after)], afters[:5])


if __name__ == "__main__":
    # LP_TEST_ONLY=churn,layout_failure runs those sections only
    only = [x for x in os.environ.get("LP_TEST_ONLY", "").split(",") if x]
    try:
        for section in (uaf_on_shape_loss, transient_missing, retired_shapes, churn, layout_failure,
                        reload_devices, access_log, access_log_pipe):
            if not only or section.__name__ in only:
                section()
    finally:
        for p in procs:
            stop(p)
    finish()
