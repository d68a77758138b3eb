#!/usr/bin/python3
"""The HTTP front against a hostile client: bearer tokens of any length compared
whole, admin routes behind the token when they share the client port, repeated
singleton headers refused, only valid request ids echoed, invalid UTF-8 in the
path escaped, the server's own rejections in the access log (and "-" buffered),
a global budget for bodies being uploaded, and no use-after-free when a
connection closes inside the parser's callback (the sanitizer build catches it).

Usage: test-front-security.py LANEPACK"""
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, free_port, model_config, raw, read_answer, start_proxy, write_config  # noqa: E402

lanepack = sys.argv[1]
VALID_ID = re.compile(r"[!#-\[\]-~]{1,63}")  # printable ASCII, no quote, no backslash


def get(port, path, headers=b"", method=b"GET", body=b""):
    req = method + b" " + path + b" HTTP/1.1\r\nHost: x\r\n" + headers
    if body:
        req += b"Content-Length: %d\r\n" % len(body)
    return raw(port, req + b"\r\n" + body)


def bearer(t):
    return b"Authorization: Bearer " + t.encode() + b"\r\n"


def json_ok(body):
    """The body is strict UTF-8 JSON."""
    try:
        json.loads(body.decode("utf-8"))
        return True
    except (UnicodeDecodeError, ValueError):
        return False


def access_lines(path):
    """The access log's lines (JSON with a status) in a file that also holds
    other log lines; a line that is not strict UTF-8 JSON is returned as bytes."""
    out = []
    try:
        with open(path, "rb") as f:
            for line in f:
                try:
                    d = json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, ValueError):
                    if b'"status"' in line:
                        out.append(line)
                    continue
                if isinstance(d, dict) and "status" in d and "request_id" in d:
                    out.append(d)
    except FileNotFoundError:
        pass
    return out


def syscw(pid):
    with open("/proc/%d/io" % pid) as f:
        for line in f:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    return -1


tmp = tempfile.mkdtemp()
procs = []
try:
    dead_model = model_config("4x64", [free_port()])  # nothing listens: no backend is needed
    short, t300 = "secret-1", "M" * 300
    long515 = "L" * 511 + "TAIL"  # the old reader split it after 511 bytes
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("# tokens\n%s\n%s\n%s\n" % (short, t300, long515))

    # ---- the token file at --check-config ----
    huge = os.path.join(tmp, "tokens-huge")
    with open(huge, "w") as f:
        f.write("ok-token\n" + "H" * 20000 + "\n")
    cc = write_config(os.path.join(tmp, "cc.json"), {"auth_tokens_file": huge, "models": {"m": dead_model}})
    r = subprocess.run([lanepack, "--config", cc, "--check-config"], capture_output=True, timeout=30)
    err = r.stderr.decode("utf-8", "replace")
    check("--check-config refuses a token no Authorization header can carry, naming its line",
          r.returncode != 0 and "line 2" in err, (r.returncode, err[-300:]))
    write_config(cc, {"auth_tokens_file": tokens, "models": {"m": dead_model}})
    r = subprocess.run([lanepack, "--config", cc, "--check-config"], capture_output=True, timeout=30)
    check("--check-config takes a token file with a 515-character token", r.returncode == 0, r.stderr[-300:])
    # a token that fills max_header_bytes all but its name and scheme: no request
    # (its line and Host count too) can carry it, so it must not pass either
    edge = os.path.join(tmp, "tokens-edge")
    with open(edge, "w") as f:
        f.write("ok-token\n" + "E" * (4096 - len("Authorization") - len("Bearer ")) + "\n")
    write_config(cc, {"auth_tokens_file": edge, "max_header_bytes": 4096, "models": {"m": dead_model}})
    r = subprocess.run([lanepack, "--config", cc, "--check-config"], capture_output=True, timeout=30)
    err = r.stderr.decode("utf-8", "replace")
    check("--check-config refuses a token that leaves no room for the request line and Host",
          r.returncode != 0 and "line 2" in err, (r.returncode, err[-300:]))

    # ---- one proxy: tokens, no admin listener, access log on stderr ----
    lp_err = os.path.join(tmp, "lp.err")
    lp, port = start_proxy(lanepack, os.path.join(tmp, "lp.json"), {
        "auth_tokens_file": tokens, "access_log": "-", "max_header_bytes": 4096, "max_body_bytes": 65536,
        "log_level": "warn", "models": {"m": dead_model}}, ready="/healthz", stderr=open(lp_err, "wb"))
    procs.append(lp)

    # ---- bearer tokens ----
    st, _, _ = get(port, b"/v1/models", bearer("TAIL"))
    check("the tail of a long token does not authenticate", st == 401, st)
    st, _, _ = get(port, b"/v1/models", bearer(long515))
    check("a 515-character token authenticates whole", st == 200, st)
    st, _, _ = get(port, b"/v1/models", bearer(t300))
    check("a 300-character token authenticates (no 256-byte header cut)", st == 200, st)
    st, _, _ = get(port, b"/v1/models", bearer(t300[:255]))
    check("a prefix of a token does not authenticate", st == 401, st)
    st, _, _ = get(port, b"/v1/models", bearer(short))
    check("a short token authenticates", st == 200, st)
    st, _, body = get(port, b"/v1/models", b"Authorization: Bearer secr\r\nAuthorization: et-1\r\n")
    check("two Authorization headers are refused with 400 naming it",
          st == 400 and b"authorization" in body.lower() and json_ok(body), (st, body))

    # ---- admin routes on the client port need the token ----
    for path in (b"/metrics", b"/v1/models", b"/v1/buckets/advice"):
        st, _, body = get(port, path)
        check("%s without a token on the client port: 401" % path.decode(), st == 401, (st, body[:200]))
    st, _, body = get(port, b"/metrics", bearer(short))
    check("/metrics with a token: 200", st == 200 and b"lanepack_requests_total" in body, st)
    for path in (b"/healthz", b"/readyz", b"/v2/health/live", b"/v2/health/ready"):
        st, _, _ = get(port, path)
        check("%s stays open for probes" % path.decode(), st in (200, 503), st)

    # ---- repeated singleton headers ----
    for name, a, b in (("X-Request-Id", "aaa", "bbb"), ("Inference-Header-Content-Length", "1", "0"),
                       ("Content-Type", "application/json", "text/plain")):
        h = ("%s: %s\r\n%s: %s\r\n" % (name, a, name, b)).encode() + bearer(short)
        st, hd, body = get(port, b"/v2/models/m/infer", h, b"POST", b'{"inputs": []}')
        check("a repeated %s gets 400 naming it" % name,
              st == 400 and name.lower().encode() in body.lower() and json_ok(body), (st, body[:200]))
        check("... and the joined value is never used", b"aaabbb" not in hd.get("x-request-id", b""), hd)

    # ---- request ids echoed only when valid; invalid UTF-8 escaped ----
    bad_ids = [b'q"u\\o', b"\xff\xfe", b"a b", b"x" * 100]
    for bid in bad_ids:
        # no Host in HTTP/1.1: rejected by the server itself, before routing
        st, hd, _ = raw(port, b"GET /healthz HTTP/1.1\r\nX-Request-Id: " + bid + b"\r\n\r\n")
        rid = hd.get("x-request-id", b"")
        ok = rid != bid and VALID_ID.fullmatch(rid.decode("latin-1")) is not None
        check("an early 400 does not echo the invalid id %r" % bid[:20], st == 400 and ok, (st, rid))
    # a long id arriving in pieces (reads) is counted, never written past its buffer
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + b"y" * 1500)
    time.sleep(0.3)
    c.sendall(b"y" * 1500)
    time.sleep(0.3)
    c.sendall(b"y" * 500 + b"\r\n\r\n")
    st, hd, _ = read_answer(c)
    c.close()
    check("a 3500-byte X-Request-Id in pieces: answered, with a made id",
          st == 200 and re.fullmatch(rb"[0-9a-f]{16}", hd.get("x-request-id", b"")), (st, hd))
    st, hd, _ = raw(port, b"GET /healthz HTTP/1.1\r\nX-Request-Id: early-ok-1\r\n\r\n")
    check("an early 400 echoes a valid id", st == 400 and hd.get("x-request-id") == b"early-ok-1", (st, hd))
    st, _, body = get(port, b"/v1/models/\xff\xfe\xc3/infer", bearer(short) + b"Content-Type: application/json\r\n",
                      b"POST", b'{"input_ids": [1]}')
    check("invalid UTF-8 in the path: the JSON error is valid UTF-8", st == 404 and json_ok(body), (st, body))
    st, _, body = get(port, b"/v2/models/\xff\xfe/infer", bearer(short), b"POST", b'{"inputs": []}')
    check("invalid UTF-8 in a v2 path: the JSON error is valid UTF-8", st == 404 and json_ok(body), (st, body))

    # ---- the server's own rejections reach the access log ----
    early = [
        (400, b"GET /nohost HTTP/1.1\r\nX-Request-Id: rej-host\r\n\r\n", "rej-host"),
        (431, b"GET /big HTTP/1.1\r\nHost: x\r\nX-Request-Id: rej-431\r\nX-Pad: " + b"p" * 5000 + b"\r\n\r\n",
         "rej-431"),
        (501, b"POST /te HTTP/1.1\r\nHost: x\r\nX-Request-Id: rej-501\r\nTransfer-Encoding: gzip\r\n\r\n",
         "rej-501"),
        (413, b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nX-Request-Id: rej-413\r\nContent-Length: 999999\r\n\r\n",
         "rej-413"),
    ]
    for want, data, _ in early:
        st, _, _ = raw(port, data)
        check("the server itself answers %d" % want, st == want, st)
    st, _, body = get(port, b"/metrics", bearer(short))
    for reason in (b"bad_host", b"headers_too_large", b"transfer_coding_not_implemented", b"body_too_large",
                   b"repeated_header"):
        check("the server's own %s rejections are counted" % reason.decode(),
              st == 200 and b'lanepack_rejections_total{reason="' + reason + b'"}' in body, st)
    time.sleep(2.2)  # the access log is flushed once a second
    lines = access_lines(lp_err)
    for want, _, rid in early:
        mine = [l for l in lines if isinstance(l, dict) and l.get("request_id") == rid]
        check("the %d rejection is in the access log with its id" % want,
              len(mine) == 1 and mine[0].get("status") == want, mine)
    mine = [l for l in lines if isinstance(l, dict) and l.get("request_id") == "rej-host"]
    check("... with its path", mine and mine[0].get("path") == "/nohost", mine)
    check("every access log line is strict UTF-8 JSON (the invalid path too)",
          lines and all(isinstance(l, dict) for l in lines), [l for l in lines if not isinstance(l, dict)][:2])
    check("the invalid UTF-8 path is logged, escaped",
          any(isinstance(l, dict) and l.get("path", "").startswith("/v1/models/") and "\ufffd" in l["path"]
              for l in lines), [l.get("path") for l in lines if isinstance(l, dict)][-8:])

    # ---- access_log "-" is buffered: not a write per line ----
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    n = 200
    before = syscw(lp.pid)
    for i in range(n):
        s.sendall(b"GET /nothing-%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
        st, _, _ = read_answer(s)
        if st != 404:
            break
    after = syscw(lp.pid)
    s.close()
    # one write per answer; unbuffered logging would add one per line
    check("access_log \"-\": %d logged errors cost far fewer than %d writes" % (n, 2 * n),
          st == 404 and 0 <= after - before < 1.5 * n, (st, after - before))
    time.sleep(2.2)
    got = [l for l in access_lines(lp_err) if isinstance(l, dict) and l.get("path", "").startswith("/nothing-")]
    check("... and every line arrives within the flush period", len(got) == n, len(got))

    # ---- use-after-free: a connection closed inside the parser's callback
    # while the parser pool is full (the sanitizer build aborts on it) ----
    hold = []
    for i in range(300):
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        hold.append(c)
    xs = []
    for i in range(6):
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        xs.append(c)
    time.sleep(1.0)  # every connection holds a parser state now
    for c in hold:
        c.sendall(b"\r\n")
    answered = 0
    for c in hold:
        st, _, _ = read_answer(c)
        answered += st == 200
    check("300 held requests answered", answered == 300, answered)
    # the parser pool is full now: a parser given back is freed
    for i, c in enumerate(xs):
        if i % 2 == 0:
            c.sendall(b"Connection: close\r\n\r\n")  # answered and closed inside the callback
            read_answer(c)
        else:
            # the case: two pipelined requests and an abortive close at once
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.sendall(b"\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        c.close()
    for c in hold:
        c.close()
    time.sleep(1.0)
    alive = lp.poll() is None
    st = 0
    if alive:
        st, _, _ = get(port, b"/healthz")
    check("the proxy survives connections closing inside the parser's callback", alive and st == 200,
          (lp.poll(), st, open(lp_err, "rb").read()[-1500:]))

    lp.terminate()
    rc = lp.wait(timeout=20)
    check("the proxy exits cleanly (no leak under the sanitizers)", rc == 0,
          (rc, open(lp_err, "rb").read()[-1500:]))
    procs.remove(lp)

    # ---- a global budget for bodies being uploaded ----
    lp2_err = os.path.join(tmp, "lp2.err")
    try:
        lp, port = start_proxy(lanepack, os.path.join(tmp, "lp2.json"), {
            "max_body_bytes": 1 << 20, "max_body_bytes_in_flight": 2 << 20, "log_level": "warn",
            "models": {"m": dead_model}}, ready="/healthz", stderr=open(lp2_err, "wb"))
        procs.append(lp)
    except SystemExit:
        lp = None
    check("a proxy with max_body_bytes_in_flight starts", lp is not None and lp.poll() is None,
          open(lp2_err, "rb").read()[-300:])
    if lp is not None and lp.poll() is None:
        part = b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        size = 900 * 1024
        up = []
        for i in range(2):  # bodies the budget holds are bytes received: 800 KiB of each
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(part % size + b"{" + b" " * (800 * 1024))
            up.append(c)
        time.sleep(0.5)
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            c.sendall(part % size + b"{" + b" " * (300 * 1024))
        except OSError:
            pass  # refused while sending: the answer is read below
        st, hd, body = read_answer(c, 5)
        c.close()
        check("a body past the budget of bodies in flight: 503 with Retry-After, at once",
              st == 503 and "retry-after" in hd and json_ok(body), (st, hd, body[:200]))
        check("... saying which limit", b"max_body_bytes_in_flight" in body, body[:300])
        # chunked bodies count too, as they grow
        c = socket.create_connection(("127.0.0.1", port), timeout=10)
        c.sendall(b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        st = 0
        for i in range(12):
            try:
                c.sendall(b"%x\r\n" % (64 * 1024) + b" " * (64 * 1024) + b"\r\n")
            except OSError:
                break
        st, hd, body = read_answer(c, 5)
        c.close()
        check("a chunked body growing past the budget: 503", st == 503, (st, body[:200]))
        up.pop().close()  # its charge is given back
        time.sleep(0.5)
        body = b"{" + b" " * (size - 2) + b"}"
        st, _, _ = raw(port, part % size + body)
        check("once a held body goes, another fits again (answered on its merits)", st == 400, st)
        for c in up:
            c.close()
        # the budget holds the bytes received, not what a Content-Length promises:
        # clients that announce big bodies and send none of them (a few hundred
        # bytes of headers) cannot shut every other upload out
        time.sleep(0.5)
        idle = []
        for n in (1 << 20, (2 << 20) - (1 << 20) - 3):  # together: all but a byte of the budget
            c = socket.create_connection(("127.0.0.1", port), timeout=10)
            c.sendall(part % n)
            idle.append(c)
        time.sleep(0.5)
        st, _, body = raw(port, part % 2 + b"{}")
        check("bodies announced and not sent do not fill the budget: a small body is answered on its merits",
              st == 400, (st, body[:200]))
        for c in idle:
            c.close()
        lp.terminate()
        rc = lp.wait(timeout=20)
        check("... and exits cleanly", rc == 0, (rc, open(lp2_err, "rb").read()[-1500:]))
    if lp is not None:
        procs.remove(lp)
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
finish()
