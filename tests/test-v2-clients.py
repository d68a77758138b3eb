#!/usr/bin/python3
"""Open Inference Protocol clients against lanepack: JSON and binary tensors,
input_ids of shape [n], [1, n] and [k, n] (INT32 and INT64), the id echoed,
Triton's priority and timeout parameters, health and metadata routes, errors in
the v2 form; in front of a v2 backend (binary) and of a lanepack-JSON backend.
Every output checked against the emulator's function.
Arguments: the lanepack and lanepack-emulator binaries."""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from lphelp import emu_outputs, model_config, start_emulator, start_proxy

import numpy as np

def call(port, method, path, body=None, headers=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def infer(port, model, ids, binary, dtype=np.int64, rid=None, params=None, want_binary_out=None):
    ids = np.asarray(ids, dtype=dtype)
    dt = "INT64" if dtype == np.int64 else "INT32"
    head = {"inputs": [{"name": "input_ids", "datatype": dt, "shape": list(ids.shape)}]}
    if rid is not None:
        head["id"] = rid
    if params:
        head["parameters"] = dict(params)
    if want_binary_out is not None:
        head.setdefault("parameters", {})["binary_data_output"] = want_binary_out
    headers = {"Content-Type": "application/json"}
    if binary:
        raw = ids.tobytes()
        head["inputs"][0]["parameters"] = {"binary_data_size": len(raw)}
        h = json.dumps(head).encode()
        body = h + raw
        headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(h))}
    else:
        head["inputs"][0]["data"] = ids.ravel().tolist()
        body = json.dumps(head).encode()
    status, hdrs, data = call(port, "POST", "/v2/models/%s/infer" % model, body, headers)
    if status != 200:
        return status, json.loads(data), None
    hl = hdrs.get("inference-header-content-length")
    head = json.loads(data[:int(hl)] if hl else data)
    out = head["outputs"][0]
    dtypes = {"INT64": np.int64, "INT32": np.int32, "FP32": np.float32, "FP64": np.float64}
    if "data" in out:
        arr = np.asarray(out["data"], dtype=dtypes[out["datatype"]]).reshape(out["shape"])
    else:
        arr = np.frombuffer(data, dtype=dtypes[out["datatype"]], offset=int(hl)).reshape(out["shape"])
    return status, head, arr


failures = 0


def check(cond, what):
    global failures
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    failures += not cond


def scenario(lanepack, emulator, shapes, emu_args, model_keys, title):
    e, ep = start_emulator(emulator, shapes, ["--cost-ms", "1"] + emu_args)
    cfg = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    cfg.close()
    try:
        p, pp = start_proxy(lanepack, cfg.name, {"health_interval_ms": 100, "models": {
            "m": model_config(shapes, [ep], max_wait_ms=2, **model_keys)}}, ready="/v2/health/ready",
            stderr=subprocess.DEVNULL)
    except BaseException:
        e.terminate()
        raise
    try:
        print("== " + title)
        rng = np.random.default_rng(3)
        for binary in (False, True):
            form = "binary" if binary else "JSON"
            for shape in ((5,), (1, 7), (3, 9)):
                ids = rng.integers(0, 30000, size=shape)
                status, head, arr = infer(pp, "m", ids, binary, rid="req-%s-%d" % (form, len(shape)),
                                          want_binary_out=binary)
                rows = ids.reshape(-1, shape[-1])
                want = np.array([emu_outputs(r) for r in rows])
                good = status == 200 and arr.shape == (rows.shape[0], shape[-1]) and \
                    np.array_equal(arr.astype(np.int64), want) and head.get("id") == "req-%s-%d" % (form, len(shape))
                check(good, "%s input_ids %s -> output %s, id echoed" % (form, list(shape),
                                                                         None if arr is None else list(arr.shape)))
            status, head, arr = infer(pp, "m", rng.integers(0, 30000, size=(2, 4)), binary, dtype=np.int32)
            check(status == 200 and arr.shape == (2, 4), "%s INT32 input" % form)
        # Triton's schedule policy: a timeout longer than the work is answered ...
        status, head, _ = infer(pp, "m", [[1, 2, 3]], False, params={"priority": 5, "timeout": 2000000})
        check(status == 200, "priority and timeout parameters accepted")
        # ... and one shorter than the work (1 us: over before the scheduler sees the
        # request, far less than a batch's millisecond) is a 504 at once or in time
        status, body, _ = infer(pp, "m", [[1, 2, 3]], False, params={"timeout": 1})
        check(status == 504 and "deadline" in str(body.get("error")),
              "a timeout shorter than the work: 504 %s" % (body if status != 200 else ""))
        # errors in the v2 form
        status, body, _ = infer(pp, "m", np.zeros((1, 100000), dtype=np.int64), False)
        check(status == 413 and isinstance(body.get("error"), str), "too long: 413 %s" % body)
        status, body, _ = infer(pp, "nope", [[1]], False)
        check(status == 404 and "unknown_model" in body["error"], "unknown model: 404")
        s, _, data = call(pp, "POST", "/v2/models/m/infer", b"{\"inputs\": [}", {})
        check(s == 400 and "error" in json.loads(data), "malformed: 400 %s" % data[:80])
        s, _, data = call(pp, "POST", "/v2/models/m/infer",
                          json.dumps({"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [2],
                                                  "parameters": {"binary_data_size": 16}}]}).encode(),
                          {"Inference-Header-Content-Length": "5000"})
        check(s == 400, "header length past the body: 400")
        s, _, data = call(pp, "GET", "/v2/models/m")
        meta = json.loads(data)
        check(s == 200 and meta["name"] == "m" and meta["inputs"][0]["name"] == "input_ids", "metadata")
        s, _, _ = call(pp, "GET", "/v2/models/m/ready")
        check(s == 200, "model ready")
        s, _, data = call(pp, "GET", "/v2")
        check(s == 200 and "binary_tensor_data" in json.loads(data)["extensions"], "server metadata")
        s, _, _ = call(pp, "GET", "/v2/health/live")
        check(s == 200, "live")
        s, _, data = call(pp, "GET", "/v2/models/m/infer")
        check(s == 405 and "method_not_allowed" in json.loads(data)["error"], "GET infer: 405")
        s, _, data = call(pp, "GET", "/v2/nowhere")
        check(s == 404 and "not_found" in json.loads(data)["error"], "unknown v2 route: 404")
        s, _, data = call(pp, "POST", "/v2/models/m/infer", b"{}", {"Inference-Header-Content-Length": "abc"})
        check(s == 400 and "bad_header" in json.loads(data)["error"], "bad header length: 400")
        # the backend goes: health says so, and requests are refused at once
        e.terminate()
        e.wait(10)
        end = time.time() + 5
        while time.time() < end and call(pp, "GET", "/v2/health/ready")[0] != 503:
            time.sleep(0.1)
        s, _, _ = call(pp, "GET", "/v2/health/ready")
        check(s == 503, "not ready once the backend is gone: 503")
        s, _, _ = call(pp, "GET", "/v2/models/m/ready")
        check(s == 503, "model not ready: 503")
        status, body, _ = infer(pp, "m", [[1, 2]], False)
        check(status == 503 and "no_healthy_backend" in body["error"], "no backend: 503 %s" % body)
    finally:
        p.terminate()
        e.terminate()
        try:
            code = p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            code = "hung"
        check(code == 0, "lanepack exits 0 on SIGTERM (%s)" % code)
        e.wait(10)
        os.unlink(cfg.name)


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    scenario(lanepack, emulator, "4x64,2x256", ["--protocol", "v2"],
             {"protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}"}}, "v2 clients, v2 binary backend")
    scenario(lanepack, emulator, "4x64,2x256", [], {}, "v2 clients, lanepack-JSON backend")
    print("%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
