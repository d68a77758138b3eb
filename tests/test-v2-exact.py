#!/usr/bin/python3
"""Open Inference Protocol clients get the backend's output exactly: in its own
datatype and bytes (INT64 past 2^53, UINT64 past 2^63, FP64/FP32/FP16/BF16 whole
numbers, NaN and infinities), in binary and in JSON (non-finite floats written as
Triton writes them: NaN, Infinity, -Infinity), with the datatype the model's
metadata names; the time fields (deadline_ms, timeout, priority) validated and
clamped alike on /v1 and /v2; one status for too many sequences on both routes.
A tiny v2 backend in this file answers chosen values: the output for token t is
VALUES[t % len(VALUES)] in the model's datatype.
Arguments: the lanepack and lanepack-emulator binaries."""
import http.client
import http.server
import json
import math
import os
import struct
import sys
import tempfile
import threading
import time

import numpy as np

from lphelp import check, finish, model_config, start_emulator, start_proxy

# model name -> (datatype, values); the backend's model is named as lanepack's
MODELS = {
    "i64": ("INT64", [2**53 + 1, 2**63 - 1, -2**63, -1, 0, 7]),
    "u64": ("UINT64", [2**64 - 1, 2**63 + 5, 0, 1]),
    "f64": ("FP64", [1.0, 2.0, 0.1, -3.0]),
    "f32": ("FP32", [1.0, 2.0, 3.5, math.nan, math.inf, -math.inf]),
    "f16": ("FP16", [0.5, 1.0, 65504.0, math.nan]),
    "bf16": ("BF16", [1.0, 2.0, -1.5, 3.0]),
    "b8": ("BOOL", [True, False]),
    "i64j": ("INT64", [2**53 + 1, 2**63 - 1, -2**63, -1]),   # the backend answers JSON "data"
    "f32j": ("FP32", [1.0, 2.0, 0.25, 4.0]),
    "u64j": ("UINT64", [2**64 - 1, 2**63, 5]),               # JSON past INT64_MAX
    "f64j": ("FP64", [math.nan, math.inf, -math.inf, 0.5]),  # JSON NaN, Infinity (as Triton writes)
    "slow": ("FP32", [1.0, 2.0]),                            # answers after SLOW_S
    "flip": ("INT64", [1, 2, 3]),                            # token 99: a malformed FP64 answer
}
SLOW_S = 1.5
NP = {"INT64": np.int64, "UINT64": np.uint64, "FP64": np.float64, "FP32": np.float32, "FP16": np.float16,
      "BOOL": np.bool_, "INT32": np.int32}


def raw_of(dtype, values):
    """values as the little-endian bytes of dtype (BF16: float32's top half)."""
    if dtype == "BF16":
        return b"".join(struct.pack("<f", v)[2:] for v in values)
    return np.asarray(values, dtype=NP[dtype]).astype(np.dtype(NP[dtype]).newbyteorder("<")).tobytes()


def bf16_floats(raw):
    return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]


class Backend(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def send(self, status, body, headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        p = self.path
        if p == "/v2/health/ready" or p.endswith("/ready"):
            return self.send(200, b"{}")
        name = p.rsplit("/", 1)[-1]
        if p.startswith("/v2/models/") and name in MODELS:
            meta = {"name": name, "platform": "fake",
                    "inputs": [{"name": n, "datatype": "INT32", "shape": [-1, -1]}
                               for n in ("input_ids", "segment_ids", "position_ids")],
                    "outputs": [{"name": "output", "datatype": MODELS[name][0], "shape": [-1, -1]}]}
            return self.send(200, json.dumps(meta).encode())
        self.send(404, b'{"error": "no such model"}')

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        name = self.path.split("/")[3]
        dtype, values = MODELS[name]
        hl = self.headers.get("Inference-Header-Content-Length")
        head = json.loads(body[:int(hl)] if hl else body)
        ids = head["inputs"][0]
        shape = ids["shape"]
        if "data" in ids:
            toks = np.asarray(ids["data"], dtype=np.int64).ravel()
        else:
            toks = np.frombuffer(body, dtype=NP[ids["datatype"]], offset=int(hl),
                                 count=int(np.prod(shape))).astype(np.int64)
        out = [values[int(t) % len(values)] for t in toks]
        if name == "slow":
            time.sleep(SLOW_S)
        binary = head.get("parameters", {}).get("binary_data_output") or any(
            o.get("parameters", {}).get("binary_data") for o in head.get("outputs", []))
        o = {"name": "output", "datatype": dtype, "shape": shape}
        if name == "flip" and 99 in toks:  # the wrong shape in another datatype: malformed
            o = {"name": "output", "datatype": "FP64", "shape": [1]}
            out = [0.5]
        ans = {"id": head.get("id"), "model_name": name, "outputs": [o]}
        if binary:
            raw = raw_of(dtype, out)
            o["parameters"] = {"binary_data_size": len(raw)}
            h = json.dumps(ans).encode()
            return self.send(200, h + raw, {"Inference-Header-Content-Length": str(len(h)),
                                            "Content-Type": "application/octet-stream"})
        o["data"] = out
        self.send(200, json.dumps(ans).encode(), {"Content-Type": "application/json"})


def call(port, method, path, body=None, headers=None):
    """(status, headers, body); status 0 when the connection failed (lanepack died)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
    except OSError as e:
        return 0, {}, str(e).encode()
    finally:
        c.close()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def v2(port, model, ids, binary_out=False, params=None, shape=None):
    """POST /v2/models/model/infer with input_ids (JSON data); returns
    (status, header or error, output raw bytes (binary) or None, body)."""
    ids = np.asarray(ids, dtype=np.int64)
    head = {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": shape or list(ids.shape),
                        "data": ids.ravel().tolist()}]}
    if params:
        head["parameters"] = dict(params)
    if binary_out:
        head.setdefault("parameters", {})["binary_data_output"] = True
    status, hdrs, data = call(port, "POST", "/v2/models/%s/infer" % model, json.dumps(head).encode(),
                              {"Content-Type": "application/json"})
    hl = hdrs.get("inference-header-content-length")
    try:
        h = json.loads(data[:int(hl)] if hl else data)
    except ValueError:
        h = {"unparsed": data[:200].decode("latin-1")}
    return status, h, (data[int(hl):] if hl else None), data


def v1(port, model, body):
    body = dict(body, model=model)
    status, _, data = call(port, "POST", "/v1/infer", json.dumps(body).encode(),
                           {"Content-Type": "application/json"})
    try:
        return status, json.loads(data)
    except ValueError:
        return status, {"unparsed": data[:200]}


def same_float(a, b, dtype):
    if dtype in ("FP32", "FP16"):
        a, b = float(NP[dtype](a)), float(NP[dtype](b))
    if math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    return a == b and math.copysign(1, a) == math.copysign(1, b) if isinstance(a, float) else False


def metadata_before_answers(port):
    """Before any answer, the datatype comes from the backend's model metadata (its probe)."""
    end, dt = time.time() + 5, None
    while time.time() < end:
        s, _, data = call(port, "GET", "/v2/models/u64")
        dt = json.loads(data)["outputs"][0]["datatype"] if s == 200 else None
        if dt == "UINT64":
            break
        time.sleep(0.05)
    check("u64 metadata before any answer: UINT64, from the backend's metadata", dt == "UINT64", dt)


def exact_values(port):
    for name, (dtype, values) in MODELS.items():
        if name in ("slow", "flip"):
            continue
        toks = list(range(len(values)))
        want_raw = raw_of(dtype, values)
        # binary answer: the backend's bytes, its datatype
        s, h, raw, body = v2(port, name, [toks], binary_out=True)
        o = (h.get("outputs") or [{}])[0]
        check("%s binary: 200, datatype %s, shape [1, %d], the backend's bytes" % (name, dtype, len(toks)),
              s == 200 and o.get("datatype") == dtype and o.get("shape") == [1, len(toks)] and raw == want_raw,
              "%d %s %s" % (s, o, raw))
        # JSON answer: the same values, exactly
        s, h, _, body = v2(port, name, [toks])
        o = (h.get("outputs") or [{}])[0]
        got = o.get("data")
        if dtype in ("INT64", "UINT64", "BOOL"):
            good = got == values and all(type(g) is type(v) for g, v in zip(got, values))
        else:
            want = bf16_floats(want_raw) if dtype == "BF16" else values
            good = isinstance(got, list) and len(got) == len(want) and \
                all(same_float(float(g), w, dtype) for g, w in zip(got, want))
        check("%s JSON: 200, datatype %s, exact values" % (name, dtype),
              s == 200 and o.get("datatype") == dtype and good, "%d %s" % (s, body[:300]))
        # the metadata names what the answers carry
        s, _, data = call(port, "GET", "/v2/models/%s" % name)
        meta = json.loads(data) if s == 200 else {}
        check("%s metadata: output datatype %s" % (name, dtype),
              s == 200 and meta.get("outputs", [{}])[0].get("datatype") == dtype, data[:300])
    # whole numbers keep their float datatype, request after request
    for name, toks in (("f64", [0, 1, 0, 1]), ("f64", [2, 0]), ("f64", [1, 1]), ("f32", [0, 1]),
                       ("bf16", [0, 3]), ("f16", [1, 1])):
        for binary in (False, True):
            s, h, _, body = v2(port, name, [toks], binary_out=binary)
            o = (h.get("outputs") or [{}])[0]
            check("%s %s %s: datatype stays %s" % (name, toks, "binary" if binary else "JSON", MODELS[name][0]),
                  s == 200 and o.get("datatype") == MODELS[name][0], body[:200])
    # Triton's JSON writer: NaN, Infinity, -Infinity (and /v1 still null)
    s, _, _, body = v2(port, "f32", [[3, 4, 5]])
    check("f32 JSON: non-finite as NaN, Infinity, -Infinity", s == 200 and b"[NaN,Infinity,-Infinity]" in body,
          body[:300])
    s, ans = v1(port, "f32", {"input_ids": [3, 4, 5]})
    check("f32 /v1: non-finite as null", s == 200 and ans.get("output") == [None, None, None], ans)
    # several rows: each row's part in place
    s, h, raw, body = v2(port, "i64", [[0, 1], [2, 3], [1, 0]], binary_out=True)
    want = raw_of("INT64", [2**53 + 1, 2**63 - 1, -2**63, -1, 2**63 - 1, 2**53 + 1])
    check("i64 [3, 2]: rows in order, exact", s == 200 and raw == want, body[:200])


def malformed_keeps_metadata(port):
    """A malformed answer (refused, never sliced) does not change what the metadata names."""
    s, _, _, body = v2(port, "flip", [[0, 1]])
    s2, _, data = call(port, "GET", "/v2/models/flip")
    dt = json.loads(data)["outputs"][0]["datatype"] if s2 == 200 else None
    check("flip: a good answer, metadata INT64", s == 200 and dt == "INT64", "%d %s %s" % (s, dt, body[:200]))
    s, _, _, body = v2(port, "flip", [[99, 1]])
    s2, _, data = call(port, "GET", "/v2/models/flip")
    dt = json.loads(data)["outputs"][0]["datatype"] if s2 == 200 else None
    check("flip: a malformed FP64 answer is 502 and the metadata still says INT64",
          s == 502 and dt == "INT64", "%d %s %s" % (s, dt, body[:200]))


def emulator_values(port):
    """A lanepack-JSON backend's numbers: FP64 always (never per value), as the metadata says."""
    dts = set()
    for toks in ([1, 2, 3], [4], [5, 6]):
        for binary in (False, True):
            s, h, _, body = v2(port, "emu", [toks], binary_out=binary)
            dts.add((s, (h.get("outputs") or [{}])[0].get("datatype")))
    s, _, data = call(port, "GET", "/v2/models/emu")
    meta = json.loads(data) if s == 200 else {"outputs": [{}]}
    check("lanepack-JSON backend: FP64 for every answer, as its metadata says",
          dts == {(200, "FP64")} and meta["outputs"][0]["datatype"] == "FP64", "%s %s" % (dts, data[:200]))


def time_fields(port):
    # v2 timeout: far too large is clamped, never undefined nor wrapped into the past
    for us in (9000000000000000000, 18446744000000000, 3600000001000):
        s, h, _, body = v2(port, "f32", [[0, 1]], params={"timeout": us})
        check("v2 timeout %d us: clamped, 200" % us, s == 200, body[:200])
    s, h, _, body = v2(port, "f32", [[0, 1]], params={"timeout": -1})
    check("v2 timeout -1: 400 naming timeout", s == 400 and "timeout" in h.get("error", ""), body[:200])
    s, h, _, body = v2(port, "f32", [[0, 1]], params={"timeout": 1.5})
    check("v2 timeout 1.5: 400 naming timeout", s == 400 and "timeout" in h.get("error", ""), body[:200])
    # /v1 deadline_ms: the same bounds
    for d in ("1e30", "3600001", "99999999999"):
        s, _, data = call(port, "POST", "/v1/infer", ('{"model": "f32", "input_ids": [0, 1], "deadline_ms": %s}' % d)
                          .encode(), {"Content-Type": "application/json"})
        check("/v1 deadline_ms %s: clamped, 200" % d, s == 200, data[:200])
    for d in ("-1", "1e400", "-0.5", "\"5\""):
        s, _, data = call(port, "POST", "/v1/infer", ('{"model": "f32", "input_ids": [0, 1], "deadline_ms": %s}' % d)
                          .encode(), {"Content-Type": "application/json"})
        check("/v1 deadline_ms %s: 400 naming deadline_ms" % d, s == 400 and b"deadline_ms" in data, data[:200])
    # priority: an integer, clamped to [-1000, 1000] on both routes
    for pr in ("5000", "-99999999999999999999", "1000"):
        s, _, data = call(port, "POST", "/v1/infer", ('{"model": "f32", "input_ids": [0], "priority": %s}' % pr)
                          .encode(), {"Content-Type": "application/json"})
        check("/v1 priority %s: clamped, 200" % pr, s == 200, data[:200])
    s, h, _, body = v2(port, "f32", [[0]], params={"priority": 5000})
    check("v2 priority 5000: clamped, 200", s == 200, body[:200])
    s, _, data = call(port, "POST", "/v1/infer", b'{"model": "f32", "input_ids": [0], "priority": 1.5}',
                      {"Content-Type": "application/json"})
    check("/v1 priority 1.5: 400 naming priority", s == 400 and b"priority" in data, data[:200])
    s, h, _, body = v2(port, "f32", [[0]], params={"priority": 1.5})
    check("v2 priority 1.5: 400 naming priority", s == 400 and "priority" in h.get("error", ""), body[:200])
    # 0 is no deadline of the client's own: the model's default_deadline_ms still applies
    t0 = time.time()
    outs = []
    ths = []

    def one(kind, arg):
        if kind == "v1":
            s, _, data = call(port, "POST", "/v1/infer",
                              ('{"model": "slow", "input_ids": [0, 1], "deadline_ms": %s}' % arg).encode(),
                              {"Content-Type": "application/json"})
        else:
            s, _, _, data = v2(port, "slow", [[0, 1]], params={"timeout": arg})
        outs.append((kind, arg, s, data[:160]))
    for kind, arg in (("v1", "0"), ("v1", "1e-400"), ("v1", "0.0"), ("v2", 0)):
        ths.append(threading.Thread(target=one, args=(kind, arg)))
        ths[-1].start()
    for t in ths:
        t.join()
    for kind, arg, s, data in sorted(outs, key=str):
        check("%s deadline %s on a model with default_deadline_ms 300 (backend takes %.1f s): 504" %
              (kind, arg, SLOW_S), s == 504 and b"deadline_exceeded" in data, "%d %s" % (s, data))
    check("... answered by the default deadline, not the backend", time.time() - t0 < SLOW_S + 1.0,
          time.time() - t0)


def limits(port):
    # too many sequences: 413 too_many_sequences on both routes (max_sequences_per_request 4)
    s, h, _, body = v2(port, "f32", [[0, 1]] * 5)
    check("v2 5 sequences > 4: 413 too_many_sequences", s == 413 and "too_many_sequences" in h.get("error", ""),
          body[:200])
    s, ans = v1(port, "f32", {"inputs": [[0, 1]] * 5})
    check("/v1 5 sequences > 4: 413 too_many_sequences", s == 413 and "too_many_sequences" in json.dumps(ans), ans)
    # an empty or out-of-range input: the same status and code on both routes
    s, h, _, body = v2(port, "f32", [], shape=[1, 0])
    s1, ans = v1(port, "f32", {"input_ids": []})
    check("empty input: 400 empty_sequence on both routes", s == s1 == 400 and "empty_sequence" in h.get("error", "")
          and "empty_sequence" in json.dumps(ans), "%s %s" % (body[:200], ans))
    status, _, data = call(port, "POST", "/v2/models/f32/infer", json.dumps(
        {"inputs": [{"name": "other", "datatype": "INT64", "shape": [1], "data": [1]}]}).encode())
    s1, ans = v1(port, "f32", {"id": 1})
    check("no input_ids: 400 missing_input on both routes", status == s1 == 400 and b"missing_input" in data
          and "missing_input" in json.dumps(ans), "%s %s" % (data[:200], ans))
    s, h, _, body = v2(port, "f32", [[2**40]])
    s1, ans = v1(port, "f32", {"input_ids": [2**40]})
    check("token out of range: 400 token_out_of_range on both routes",
          s == s1 == 400 and "token_out_of_range" in h.get("error", "") and "token_out_of_range" in json.dumps(ans),
          "%s %s" % (body[:200], ans))


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    bp = srv.server_address[1]
    e, ep = start_emulator(emulator, "2x8", ["--cost-ms", "1"])
    models = {}
    for name in MODELS:
        models[name] = model_config("2x8", [bp], protocol="v2", max_wait_ms=1, v2={"binary": not name.endswith("j")})
    models["slow"]["default_deadline_ms"] = 300
    models["emu"] = model_config("2x8", [ep], max_wait_ms=1)
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    cfg.close()
    log = tempfile.TemporaryFile()
    try:
        p, pp = start_proxy(lanepack, cfg.name, {"health_interval_ms": 100, "max_sequences_per_request": 4,
                                                 "models": models}, ready="/v2/health/ready", stderr=log)
    except BaseException:
        e.terminate()
        raise
    try:
        metadata_before_answers(pp)
        exact_values(pp)
        malformed_keeps_metadata(pp)
        emulator_values(pp)
        time_fields(pp)
        limits(pp)
        check("lanepack still running", p.poll() is None, p.poll())
    finally:
        p.terminate()
        e.terminate()
        rc = p.wait(10)
        e.wait(10)
        srv.shutdown()
        os.unlink(cfg.name)
    log.seek(0)
    reports = [ln for ln in log.read().decode("utf-8", "replace").splitlines()
               if "runtime error" in ln or "Sanitizer" in ln]
    check("lanepack exits 0 on SIGTERM, no sanitizer report", rc == 0 and not reports, "%s %s" % (rc, reports[:5]))
    finish()


if __name__ == "__main__":
    main()
