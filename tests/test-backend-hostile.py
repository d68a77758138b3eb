#!/usr/bin/python3
"""What comes back from a careless or hostile backend: small fake backends
(Python's http.server on loopback) behind one lanepack.

- A refused batch (4xx, 5xx), a broken connection and a timeout give clients a
  code and a generic message only: never the backend's body (another client's
  tokens, quoted) nor its URL, on /v1 and /v2; the body goes to the log,
  escaped (no raw control bytes, no invalid UTF-8).
- An answer echoing another batch's `batch_id` (JSON wire) or `id` (v2) is a
  failed batch (502), never an answer; an answer without one is accepted.
- A huge, an endless chunked and a huge /healthz answer are cut off at a bound
  (502 for a batch) and the proxy's RSS stays bounded; a big answer within its
  bound (also a v2 client's, built whole before it is written) is not kept.
- A hedged batch whose original answers first reports the original's batch id.
- A request id with a comma reaches backends unambiguously: a JSON array
  (JSON wire) and a JSON-encoded array in a string parameter (v2).

Usage: test-backend-hostile.py LANEPACK"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, model_config, rss_kb, start_proxy  # noqa: E402

lanepack = sys.argv[1]

SECRET = b"invalid input_ids [4242, 1337, 90210] \x01\x1b[31m\xff\xfe tenant-a " + b"\xc3\xa9\x7f" * 3000
BIG = 300 * 1024 * 1024
BIGOK = 80 * 1024 * 1024
V2BIG_INNER = 1 << 20  # v2bigok: 1x8 tokens x 1 Mi INT32 = a 32 MB tensor, in and out
CHUNK = b" " * (1024 * 1024)


def outputs_for(req):
    """Per-token outputs of a JSON-wire batch: each token's id back."""
    return req["input_ids"]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, body, ctype="application/json"):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def stream(self, head, total, chunked):
        """head, then spaces up to total bytes (or until the reader leaves)."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Content-Length", str(total))
        self.end_headers()
        sent = 0
        try:
            if chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(head), head))
            else:
                self.wfile.write(head)
            sent = len(head)
            while sent < total:
                n = min(len(CHUNK), total - sent)
                if chunked:
                    self.wfile.write(b"%x\r\n" % n + CHUNK[:n] + b"\r\n")
                else:
                    self.wfile.write(CHUNK[:n])
                sent += n
            if chunked:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass
        self.server.streamed.append(sent)
        self.close_connection = True

    def do_GET(self):
        mode = self.server.mode
        if self.path == "/healthz":
            if mode == "hugehealth" and self.server.huge_health:
                return self.stream(b'{"status": "ok"}', BIG, False)
            return self.send(200, {"status": "ok"})
        if self.path == "/v2/health/ready" or self.path.endswith("/ready"):
            return self.send(200, {})
        if self.path.startswith("/v2/models/"):
            name = self.path[len("/v2/models/"):]
            return self.send(200, {"name": name, "versions": ["1"], "platform": "fake",
                                   "inputs": [{"name": n, "datatype": "INT32", "shape": [-1, -1]}
                                              for n in ("input_ids", "segment_ids", "position_ids")],
                                   "outputs": [{"name": "output", "datatype": "INT32", "shape": [-1, -1]}]})
        self.send(404, {"error": "no such route"})

    def do_POST(self):
        mode = self.server.mode
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if mode == "close":
            self.close_connection = True
            return
        if self.path.startswith("/v2/"):
            return self.v2(mode, json.loads(body))
        req = json.loads(body)
        with self.server.lock:
            self.server.batches.append(req)
            nth = len(self.server.batches)
        answer = {"batch_id": req["batch_id"], "outputs": outputs_for(req)}
        if mode == "quote422":
            return self.send(422, SECRET, "text/plain")
        if mode == "quote500":
            return self.send(500, SECRET, "text/plain")
        if mode == "slow":
            time.sleep(1.5)
        if mode == "wrongid":
            answer["batch_id"] = req["batch_id"] + 1
        if mode == "noid":
            del answer["batch_id"]
        if mode == "huge":
            return self.stream(json.dumps(answer).encode(), BIG, False)
        if mode == "endless":
            return self.stream(json.dumps(answer).encode(), BIG, True)
        if mode == "bigok":  # within its bound (max_output_value_bytes raised): answered
            return self.stream(json.dumps(answer).encode(), BIGOK, False)
        if mode == "hedge":
            time.sleep(0.8 if nth == 1 else 2.5)
        self.send(200, answer)

    def v2(self, mode, head):
        with self.server.lock:
            self.server.batches.append(head)
        if mode == "v2quote":
            return self.send(422, SECRET, "text/plain")
        ids = next(t for t in head["inputs"] if t["name"] == "input_ids")
        if mode == "v2bigok":  # a wide output, binary: within its bound
            raw = bytes(4 * V2BIG_INNER * ids["shape"][0] * ids["shape"][1])
            out = {"name": "output", "datatype": "INT32", "shape": ids["shape"] + [V2BIG_INNER],
                   "parameters": {"binary_data_size": len(raw)}}
            h = json.dumps({"id": head.get("id", ""), "model_name": "m", "outputs": [out]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Inference-Header-Content-Length", str(len(h)))
            self.send_header("Content-Length", str(len(h) + len(raw)))
            self.end_headers()
            self.wfile.write(h + raw)
            return
        out = {"name": "output", "datatype": "INT32", "shape": ids["shape"], "data": ids["data"]}
        answer = {"model_name": "m", "model_version": "1", "outputs": [out]}
        if mode != "v2noid":
            answer["id"] = head.get("id", "") + ("-swapped" if mode == "v2wrongid" else "")
        if mode == "v2huge":
            return self.stream(json.dumps(answer).encode(), BIG, False)
        self.send(200, answer)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # lanepack cutting a transfer short resets the connection: expected


def js(data):
    """A client's answer as JSON, or {} when it is not JSON."""
    try:
        d = json.loads(data)
        return d if isinstance(d, dict) else {}
    except ValueError:
        return {}


def fake(mode):
    s = Server(("127.0.0.1", 0), Handler)
    s.mode = mode
    s.batches = []
    s.streamed = []
    s.huge_health = False  # set once the RSS baseline is taken
    s.lock = threading.Lock()
    threading.Thread(target=s.serve_forever, daemon=True).start()
    return s


def post(port, path, body, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", path, json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def infer(port, model, ids, headers=None):
    return post(port, "/v1/models/%s/infer" % model, {"input_ids": ids}, headers)


def v2infer(port, model, ids, rid="c1"):
    body = {"id": rid, "inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, len(ids)],
                                   "data": ids}]}
    return post(port, "/v2/models/%s/infer" % model, body)


MODES = ["bigok", "quote422", "quote500", "close", "slow", "wrongid", "noid", "huge", "endless", "hugehealth",
         "hedge", "v2quote", "v2wrongid", "v2noid", "v2huge", "v2bigok"]  # at most 16 models
fakes = {m: fake(m) for m in MODES}
tmp = tempfile.mkdtemp()
models = {}
for m, s in fakes.items():
    cfg = model_config("2x8", [s.server_address[1]], max_wait_ms=0, max_retries=0, retry_backoff_ms=1)
    if m == "bigok":
        cfg["max_output_value_bytes"] = 16 << 20
    if m == "slow":
        cfg["backend_timeout_ms"] = 400
    if m == "hedge":
        # a hedge is a copy: max_retries bounds hedges and retries together
        cfg.update({"shapes": "1x8", "devices": 2, "cost_ms": {"1x8": 20}, "stall_factor": 1.5,
                    "stall_min_ms": 100, "max_retries": 1})
    if m.startswith("v2"):
        cfg.update({"protocol": "v2", "v2": {"model": "m_{lanes}x{bucket}", "binary": False,
                                             "output": "output"}})
    if m == "v2bigok":
        cfg.update({"shapes": "1x8", "max_output_value_bytes": 16 << 20})
    models[m] = cfg
log_path = os.path.join(tmp, "lp.log")
# under ASan freed memory waits in a quarantine, resident: none here, so RSS
# says what the proxy holds
env = dict(os.environ)
env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
proc, lp_port = start_proxy(lanepack, os.path.join(tmp, "lp.json"), {
    "log_level": "info", "health_interval_ms": 1000, "unhealthy_after": 100, "models": models},
    ready="/healthz", stderr=open(log_path, "wb"), env=env)
try:
    time.sleep(0.3)  # first probes answered
    infer(lp_port, "noid", [1, 2, 3])
    base = rss_kb(proc.pid)

    # ---- 1: no backend body or URL in what a client sees ----
    def leaks(data, mode):
        port = str(fakes[mode].server_address[1]).encode()
        return b"4242" in data or b"tenant-a" in data or b"127.0.0.1" in data or port in data

    for mode, want in (("quote422", 502), ("quote500", 502), ("close", 502), ("slow", 504)):
        st, data = infer(lp_port, mode, [5, 6, 7])
        check("%s: /v1 gets %d" % (mode, want), st == want, (st, data))
        check("%s: /v1 error names neither the backend nor its body" % mode, not leaks(data, mode), data)
        code = js(data).get("error", {}).get("code")
        check("%s: /v1 error has a code" % mode, code in ("backend_error", "backend_timeout"), data)
        st, data = v2infer(lp_port, mode, [5, 6, 7])
        check("%s: /v2 gets %d" % (mode, want), st == want, (st, data))
        check("%s: /v2 error names neither the backend nor its body" % mode, not leaks(data, mode), data)
    st, data = v2infer(lp_port, "v2quote", [5, 6, 7])
    check("v2 backend refusing: 502", st == 502, (st, data))
    check("v2 backend refusing: no body or URL in the error", not leaks(data, "v2quote"), data)
    time.sleep(0.2)
    with open(log_path, "rb") as f:
        raw = f.read()
    lines = raw.split(b"\n")
    quoted = [ln for ln in lines if b"4242" in ln]
    check("the backend's body is in the log", len(quoted) >= 3, raw[-2000:])
    check("log lines have no raw control bytes",
          not any(re.search(rb"[\x00-\x1f\x7f]", ln) for ln in lines), [ln for ln in quoted][:2])
    try:
        raw.decode("utf-8")
        utf8 = True
    except UnicodeDecodeError as e:
        utf8 = e
    check("the log is valid UTF-8", utf8 is True, utf8)
    check("log lines with the body are JSON", all(json.loads(ln) for ln in quoted) if quoted else False)
    check("the logged body is bounded", all(len(ln) < 2048 for ln in quoted))

    # ---- 2: an answer to another batch is not an answer ----
    st, data = infer(lp_port, "wrongid", [5, 6, 7])
    check("JSON wire: a wrong batch_id is 502", st == 502, (st, data))
    check("JSON wire: ... bad_backend_answer", b"bad_backend_answer" in data, data)
    st, data = infer(lp_port, "noid", [5, 6, 7])
    check("JSON wire: no batch_id is accepted", st == 200 and js(data).get("output") == [5, 6, 7], (st, data))
    st, data = v2infer(lp_port, "v2wrongid", [5, 6, 7])
    check("v2: a wrong id is 502", st == 502 and b"bad_backend_answer" in data, (st, data))
    st, data = v2infer(lp_port, "v2noid", [5, 6, 7])
    check("v2: no id is accepted", st == 200, (st, data))
    st, data = infer(lp_port, "v2noid", [5, 6, 7])
    check("v2 backend, /v1 client: no id is accepted", st == 200 and js(data).get("output") == [5, 6, 7],
          (st, data))

    # ---- 3: answers past their bound are cut off; memory stays bounded ----
    limit = base + 64 * 1024
    for mode in ("huge", "endless", "v2huge"):
        t0 = time.time()
        st, data = infer(lp_port, mode, [5, 6, 7])
        check("%s answer: 502" % mode, st == 502, (st, data[:200]))
        check("%s answer: cut off early (%.1f s)" % (mode, time.time() - t0), time.time() - t0 < 5)
        time.sleep(0.3)
        now = rss_kb(proc.pid)
        check("%s answer: RSS bounded (%d kB from %d kB)" % (mode, now, base), now < limit, (now, base))
        check("%s answer: the backend was stopped well before the end" % mode,
              fakes[mode].streamed and max(fakes[mode].streamed) < BIG // 4, fakes[mode].streamed)
    fakes["hugehealth"].huge_health = True
    time.sleep(2.5)  # two health probes of hugehealth
    now = rss_kb(proc.pid)
    check("huge /healthz: RSS bounded (%d kB from %d kB)" % (now, base), now < limit, (now, base))
    with open(log_path, "rb") as f:
        check("huge /healthz: logged", b"health probe answer too large" in f.read())
    check("huge /healthz: the probe was stopped early",
          fakes["hugehealth"].streamed and max(fakes["hugehealth"].streamed) < BIG // 4,
          fakes["hugehealth"].streamed)
    st, data = infer(lp_port, "bigok", [5, 6, 7])
    check("an 80 MB answer within its bound: 200", st == 200 and js(data).get("output") == [5, 6, 7], (st, data[:200]))
    time.sleep(0.3)
    now = rss_kb(proc.pid)
    check("... and its buffer is given back (RSS %d kB from %d kB)" % (now, base), now < limit, (now, base))
    # a v2 client's big answer (built whole before it is written): its buffers go too
    before = rss_kb(proc.pid)
    body = {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 8], "data": list(range(8))}],
            "parameters": {"binary_data_output": True}}
    st, data = post(lp_port, "/v2/models/v2bigok/infer", body, timeout=60)
    check("a 32 MB v2 answer within its bound: 200, whole", st == 200 and len(data) > 4 * 8 * V2BIG_INNER,
          (st, len(data), data[:200]))
    data = None
    # the proxy trims its heap on a once-a-second tick, twice after traffic (an
    # answer still being written at the first goes back at the second): how
    # long that takes depends on where the tick falls, so watch for it
    end = time.time() + 4.0
    while True:
        time.sleep(0.25)
        now = rss_kb(proc.pid)
        if now < before + 16 * 1024 or time.time() > end:
            break
    check("... and the proxy does not keep it (RSS %d kB from %d kB)" % (now, before), now < before + 16 * 1024,
          (now, before))
    st, data = infer(lp_port, "noid", [8, 9])
    check("after them, answers as before", st == 200 and js(data).get("output") == [8, 9], (st, data))

    # ---- 4: a hedged request reports the batch that answered it ----
    st, data = infer(lp_port, "hedge", [3, 4, 5])
    sent = [b["batch_id"] for b in fakes["hedge"].batches]
    check("hedge: answered", st == 200 and js(data).get("output") == [3, 4, 5], (st, data))
    check("hedge: the batch was hedged", len(sent) >= 2, sent)
    got = js(data).get("batch", {}).get("id")
    check("hedge: the answer names the original batch, which answered", sent and got == sent[0], (got, sent))

    # ---- 5: request ids with commas ----
    st, data = infer(lp_port, "noid", [1, 2], {"X-Request-Id": "a,b"})
    rids = fakes["noid"].batches[-1].get("request_ids") if fakes["noid"].batches else None
    check("JSON wire: request_ids is an array of the ids", st == 200 and rids == ["a,b"], (st, rids))
    st, data = post(lp_port, "/v1/models/v2noid/infer", {"inputs": [[1, 2], [3]]}, {"X-Request-Id": "c,d"})
    head = fakes["v2noid"].batches[-1] if fakes["v2noid"].batches else {}
    val = head.get("parameters", {}).get("lanepack_request_ids")
    try:
        parsed = json.loads(val)
    except (TypeError, ValueError):
        parsed = None
    check("v2: lanepack_request_ids is a JSON array in a string", st == 200 and parsed == ["c,d", "c,d"],
          (st, val))
finally:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    for s in fakes.values():
        s.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
check("lanepack exited cleanly", proc.returncode == 0, proc.returncode)
finish()
