#!/usr/bin/env python3
"""Issue 19's fault goal as a benchmark: every request answered once, none wrong,
all done in time, while both backends fail, reset, stall and garble batches and
one of them is killed and restarted on the same port.

Defaults are the goal: 3,000 requests from 30 closed-loop clients (each request
sent once on a keep-alive connection, 30 s client timeout), two emulators behind
one model (4x8192 at 20 ms and 8x2048 at 8 ms), each failing 5% of its batches
(500), resetting 3%, stalling 1% and garbling 2%, real lengths (manual pages,
those that fit the largest bucket), one emulator killed when a third of the
answers are in and started again 1 s later. The proxy runs with its defaults
(max_retries 2, backend_timeout_ms 30000, max_request_ms derived).

Each client checks every 200 against the emulator's formula, reads any bytes
the proxy sends that no request of its own asked for (before each send and for
0.3 s after its last answer) as a duplicate answer, and counts a connection
closed or a timeout without an answer as lost. Prints sent, answered, answered
once, verified, wrong, by status, p50/p99, total time and PASS/FAIL against
the goal; exits 0 on PASS, 1 on FAIL.

Registered as the integration test `faults` (tests/meson.build), which runs
it with the defaults against the build's binaries.

Usage: bench/bench-faults.py [--build build | --proxy BIN --emulator BIN]
    [--requests 3000] [--clients 30]
    [--timeout 30] [--goal-s 55] [--lengths tests/data/manpages.lengths]
    [--faults "--fail-rate 0.05 ..."] [--kill-at 0.33] [--down-s 1] [--seed 1]
    [--json FILE] [--debug] [--keep-logs]"""
import argparse
import json
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MOD = 1000000007


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_http(port, path, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=1) as r:
                if r.status == 200:
                    return True
        except Exception:
            pass
        time.sleep(0.05)
    return False


def expected(tokens):
    """The emulator's answer: h(k) = (h(k-1) * 31 + t(k) + 1) mod 1e9+7, h(-1) = 7."""
    out, h = [], 7
    for t in tokens:
        h = (h * 31 + t + 1) % MOD
        out.append(h)
    return out


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = self.answered = self.ok = self.wrong = 0
        self.duplicates = self.lost = self.timeouts = self.reconnects = 0
        self.by_status = {}
        self.lat_ms = []
        self.done = 0
        self.lost_ids = []


def read_response(sock, buf, deadline):
    """One HTTP/1.1 answer from sock (bytes already read in buf[0]); returns
    (status, headers dict, body bytes) or None on EOF, raises socket.timeout."""
    data = buf[0]
    while b"\r\n\r\n" not in data:
        sock.settimeout(max(0.001, deadline - time.time()))
        chunk = sock.recv(65536)
        if not chunk:
            buf[0] = data
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        body = b""
        while True:
            while b"\r\n" not in rest:
                sock.settimeout(max(0.001, deadline - time.time()))
                chunk = sock.recv(65536)
                if not chunk:
                    return None
                rest += chunk
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                sock.settimeout(max(0.001, deadline - time.time()))
                chunk = sock.recv(65536)
                if not chunk:
                    return None
                rest += chunk
            body += rest[:size]
            rest = rest[size + 2:]
            if size == 0:
                break
    else:
        n = int(hdrs.get("content-length", "0"))
        while len(rest) < n:
            sock.settimeout(max(0.001, deadline - time.time()))
            chunk = sock.recv(65536)
            if not chunk:
                return None
            rest += chunk
        body, rest = rest[:n], rest[n:]
    buf[0] = rest
    return status, hdrs, body


def pending_bytes(sock, buf, wait):
    """Anything the proxy sent that nobody asked for? Returns 'data', 'eof' or ''."""
    if buf[0]:
        return "data"
    r, _, _ = select.select([sock], [], [], wait)
    if not r:
        return ""
    try:
        sock.settimeout(0.5)
        chunk = sock.recv(65536)
    except OSError:
        return "eof"
    if not chunk:
        return "eof"
    buf[0] += chunk
    return "data"


def client(port, cid, reqs, timeout_s, tally):
    sock, buf = None, [b""]
    for i, (body, want) in enumerate(reqs):
        rid = "c%d-%d" % (cid, i)
        if sock is not None:
            # an answer no request of ours is owed is a duplicate; a closed
            # idle connection is simply reopened
            st = pending_bytes(sock, buf, 0)
            if st == "data":
                with tally.lock:
                    tally.duplicates += 1
                sock.close()
                sock, buf = None, [b""]
            elif st == "eof":
                sock.close()
                sock, buf = None, [b""]
        if sock is None:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                sock = None
                with tally.lock:
                    tally.lost += 1
                    tally.done += 1
                continue
        head = ("POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "X-Request-Id: %s\r\nContent-Length: %d\r\n\r\n" % (rid, len(body))).encode()
        t0 = time.monotonic()
        deadline = time.time() + timeout_s
        try:
            sock.sendall(head + body)
        except OSError:
            sock.close()
            sock, buf = None, [b""]
            with tally.lock:
                tally.lost += 1
                tally.done += 1
            continue
        with tally.lock:
            tally.sent += 1
        try:
            r = read_response(sock, buf, deadline)
        except (socket.timeout, TimeoutError):
            r = "timeout"
        except OSError:
            r = None
        ms = (time.monotonic() - t0) * 1000.0
        if r is None or r == "timeout":
            sock.close()
            sock, buf = None, [b""]
            with tally.lock:
                tally.lost += 1
                tally.timeouts += r == "timeout"
                tally.lost_ids.append(rid)
                tally.done += 1
            continue
        status, hdrs, rbody = r
        good = None
        if status == 200:
            try:
                good = json.loads(rbody).get("output") == want
            except ValueError:
                good = False
        with tally.lock:
            tally.answered += 1
            tally.done += 1
            tally.by_status[status] = tally.by_status.get(status, 0) + 1
            tally.lat_ms.append(ms)
            if good is True:
                tally.ok += 1
            elif good is False:
                tally.wrong += 1
        if "close" in hdrs.get("connection", "").lower():
            sock.close()
            sock, buf = None, [b""]
            with tally.lock:
                tally.reconnects += 1
    if sock is not None:
        if pending_bytes(sock, buf, 0.3) == "data":
            with tally.lock:
                tally.duplicates += 1
        sock.close()


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--proxy", help="the lanepack binary (default BUILD/src/lanepack)")
    ap.add_argument("--emulator", help="the emulator (default BUILD/loadgen/lanepack-emulator)")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--clients", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=30.0, help="client timeout per request, s")
    ap.add_argument("--goal-s", type=float, default=55.0, help="all answered within this, s")
    ap.add_argument("--lengths", default=os.path.join(ROOT, "tests/data/manpages.lengths"))
    ap.add_argument("--shapes", default="4x8192,8x2048")
    ap.add_argument("--cost", default="4x8192=20,8x2048=8")
    ap.add_argument("--faults", default="--fail-rate 0.05 --reset-rate 0.03 --stall-rate 0.01 "
                    "--garbage-rate 0.02")
    ap.add_argument("--kill-at", type=float, default=0.33,
                    help="kill the second emulator when this share is answered (0: never)")
    ap.add_argument("--down-s", type=float, default=1.0, help="how long it stays down")
    ap.add_argument("--model-keys", default="", help="extra model keys, JSON text ending in a comma")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--debug", action="store_true",
                    help="the proxy logs each batch and writes an access log (kept with the logs)")
    a = ap.parse_args()

    proxy_bin = a.proxy or os.path.join(a.build, "src/lanepack")
    emu_bin = a.emulator or os.path.join(a.build, "loadgen/lanepack-emulator")
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    max_len = max(b for _, b in shapes)
    with open(a.lengths) as f:
        all_lengths = [int(x) for x in f.read().split()]
    lengths = [n for n in all_lengths if 0 < n <= max_len]
    rng = random.Random(a.seed)
    reqs = []
    for _ in range(a.requests):
        n = lengths[rng.randrange(len(lengths))]
        toks = [rng.randrange(30000) for _ in range(n)]
        reqs.append((json.dumps({"input_ids": toks}).encode(), expected(toks)))
    per = [reqs[i::a.clients] for i in range(a.clients)]

    logdir = tempfile.mkdtemp(prefix="lp-bench-faults-")
    procs = []

    def spawn(argv, log):
        p = subprocess.Popen(argv, stdout=open(os.path.join(logdir, log), "ab"),
                             stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    cost_args = []
    for c in a.cost.split(","):
        cost_args += ["--cost-ms", c]
    ports = [free_port(), free_port()]

    def emu(i, seed):
        return spawn([emu_bin, "--listen", "127.0.0.1:%d" % ports[i], "--shapes", a.shapes] +
                     cost_args + a.faults.split() + ["--seed", str(seed)] +
                     (["--log-batches"] if a.debug else []), "emu%d.log" % i)

    emus = [emu(0, a.seed * 10 + 1), emu(1, a.seed * 10 + 2)]
    for p in ports:
        if not wait_http(p, "/healthz"):
            sys.exit("emulator on %d did not start (%s)" % (p, logdir))
    port = free_port()
    cfg = os.path.join(logdir, "lanepack.json")
    with open(cfg, "w") as f:
        debug = ('"log_level": "debug", "access_log": "%s", ' % os.path.join(logdir, "access.log")
                 if a.debug else "")
        f.write('{"listen": "127.0.0.1:%d", %s"models": {"default": {%s"shapes": "%s", '
                '"backends": ["http://127.0.0.1:%d", "http://127.0.0.1:%d"]}}}\n'
                % (port, debug, a.model_keys, a.shapes, ports[0], ports[1]))
    proxy = spawn([proxy_bin, "--config", cfg], "proxy.log")
    if not wait_http(port, "/readyz"):
        sys.exit("lanepack did not become ready (%s)" % logdir)
    time.sleep(0.3)  # both backends have reported their shapes

    tally = Tally()
    threads = [threading.Thread(target=client, args=(port, i, per[i], a.timeout, tally))
               for i in range(a.clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    killed_at = restarted_at = None
    if a.kill_at > 0:
        while tally.done < a.kill_at * a.requests and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        if any(t.is_alive() for t in threads):
            emus[1].kill()
            emus[1].wait()
            killed_at = time.monotonic() - t0
            time.sleep(a.down_s)
            emus[1] = emu(1, a.seed * 10 + 3)
            wait_http(ports[1], "/healthz")
            restarted_at = time.monotonic() - t0
    for t in threads:
        t.join()
    total = time.monotonic() - t0

    metrics = {}
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as r:
            for ln in r.read().decode().splitlines():
                for k in ("lanepack_retries_total", "lanepack_hedges_won_total", "lanepack_stalls_total"):
                    if ln.startswith(k):
                        metrics[k] = metrics.get(k, 0) + float(ln.rsplit(" ", 1)[1])
    except Exception:
        pass
    proxy.send_signal(signal.SIGTERM)
    try:
        proxy_rc = proxy.wait(15)
    except subprocess.TimeoutExpired:
        proxy.kill()
        proxy_rc = -9
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()

    once = tally.answered - tally.duplicates
    verdicts = [
        ("every request sent", tally.sent == a.requests),
        ("every request answered", tally.answered == tally.sent and tally.lost == 0),
        ("answered once", tally.duplicates == 0),
        ("none wrong", tally.wrong == 0),
        ("within %.0f s" % a.goal_s, total <= a.goal_s),
        ("proxy exited cleanly", proxy_rc == 0),
    ]
    passed = all(v for _, v in verdicts)
    lat = tally.lat_ms
    print("bench-faults: %d requests from %d clients (%.0f s timeout), 2 emulators %s, %s, "
          "costs %s; %s (%d of %d lengths fit %d), seed %d"
          % (a.requests, a.clients, a.timeout, a.faults, a.shapes, a.cost,
             os.path.basename(a.lengths), len(lengths), len(all_lengths), max_len, a.seed))
    if killed_at is not None:
        print("emulator 2 killed at %.1f s, restarted on the same port at %.1f s"
              % (killed_at, restarted_at))
    print("sent            %d" % tally.sent)
    print("answered        %d" % tally.answered)
    print("answered once   %d (duplicates %d, lost %d, of them client timeouts %d)"
          % (once, tally.duplicates, tally.lost, tally.timeouts))
    print("verified 200    %d" % tally.ok)
    print("wrong           %d" % tally.wrong)
    print("by status       %s" % ", ".join("%d: %d" % (k, v) for k, v in sorted(tally.by_status.items())))
    print("latency         p50 %.1f ms, p99 %.1f ms, max %.1f ms"
          % (pct(lat, 50), pct(lat, 99), max(lat) if lat else float("nan")))
    print("total time      %.1f s" % total)
    if metrics:
        print("proxy           %s" % ", ".join("%s %.0f" % (k, v) for k, v in sorted(metrics.items())))
    if tally.lost_ids:
        print("lost ids        %s" % " ".join(tally.lost_ids[:20]))
    for name, ok in verdicts:
        if not ok:
            print("missed          %s" % name)
    print("%s (goal: every request answered once, none wrong, all done within %.0f s)"
          % ("PASS" if passed else "FAIL", a.goal_s))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"sent": tally.sent, "answered": tally.answered, "answered_once": once,
                       "duplicates": tally.duplicates, "lost": tally.lost,
                       "timeouts": tally.timeouts, "ok": tally.ok, "wrong": tally.wrong,
                       "by_status": {str(k): v for k, v in tally.by_status.items()},
                       "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "total_s": total,
                       "pass": passed, "metrics": metrics}, f)
    if not a.keep_logs and not a.debug and passed:
        for fn in os.listdir(logdir):
            os.unlink(os.path.join(logdir, fn))
        os.rmdir(logdir)
    else:
        print("logs in %s" % logdir)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
