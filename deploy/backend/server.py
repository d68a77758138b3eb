#!/usr/bin/python3
"""Reference backend for lanepack: a small transformer encoder on PyTorch that
implements the backend contract (GET /v1/shapes, GET /healthz, POST /v1/batch)
and the Open Inference Protocol (KServe v2, binary tensors decoded with numpy:
GET /v2/health/ready, /v2/models/NAME[/ready], POST /v2/models/NAME/infer, one
model per compiled shape) like a static-shape device. Attention is block-diagonal
by segment, so a packed sequence computes exactly what it computes alone. Heads:
vectors (per token, or a pooled embedding per segment) or a score (a reranker's
one float per segment, or per token).

Port to an accelerator: build the model on the device (see DEVICE below) and keep
the shapes fixed; nothing else changes.
"""
import argparse
import json
import math
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import torch
from torch import nn

V2_DTYPES = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
             "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
             "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64}


class Layer(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, allowed):
        b, n, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(b, n, h, d // h).transpose(1, 2)
        k = k.view(b, n, h, d // h).transpose(1, 2)
        v = v.view(b, n, h, d // h).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // h)
        scores = scores.masked_fill(~allowed[:, None, :, :], float("-inf"))
        att = torch.softmax(scores, dim=-1) @ v
        x = x + self.out(att.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.ln2(x))


class Encoder(nn.Module):
    """Embedding + position embedding, a few attention/MLP layers, a small head
    and a score head: float32, weights from a fixed seed."""

    def __init__(self, vocab, max_len, d=32, heads=4, layers=2, outputs=4, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, outputs)
        # made last, so the seed gives the other weights what it gave before
        self.score_head = nn.Linear(d, 1)

    def score(self, states):
        """A cross-encoder reranker's score: one float per state [..., d] -> [...]
        (a segment's pooled state is its query and text read together)."""
        return self.score_head(states)[..., 0]

    def forward(self, ids, pos, seg, causal=False, segment_mask=True):
        """ids, pos, seg: [lanes, bucket] long tensors. Returns the hidden states
        [lanes, bucket, d] and per-token outputs [lanes, bucket, outputs]."""
        n = ids.shape[1]
        if segment_mask:
            allowed = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] != 0)
        else:  # debug only: every token sees its whole lane
            allowed = torch.ones(seg.shape[0], n, n, dtype=torch.bool)
        if causal:  # segments are contiguous, so lane order is segment order
            allowed = allowed & torch.ones(n, n, dtype=torch.bool).tril()[None]
        # padding attends to itself so its (ignored) softmax row is defined
        allowed = allowed | torch.eye(n, dtype=torch.bool)[None]
        x = self.emb(ids) + self.pos(pos)
        for layer in self.layers:
            x = layer(x, allowed)
        x = self.ln(x)
        return x, self.head(x)


def run_alone(model, tokens, causal=False):
    """The model on one sequence, unpacked and unpadded: the reference."""
    ids = torch.tensor([tokens], dtype=torch.long)
    pos = torch.arange(len(tokens), dtype=torch.long)[None]
    seg = torch.ones_like(ids)
    with torch.no_grad():
        hidden, out = model(ids, pos, seg, causal=causal)
    return hidden[0], out[0]


def rounded(values):
    return [float(v) for v in values]


def bench_codec(lanes=4, bucket=8192, features=4, repeat=5):
    """What the wire costs the accelerator host per 4x8192 batch, in each form:
    turning the request into tensors and the per-token outputs into the answer."""
    import time
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 32000, size=(lanes, bucket), dtype=np.int32)
    out = rng.standard_normal((lanes, bucket, features)).astype(np.float32)
    json_req = json.dumps({"input_ids": ids.tolist(), "segment_ids": ids.tolist(),
                           "position_ids": ids.tolist()}).encode()
    bin_req = ids.tobytes() * 3

    def best(f):
        t = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
        return min(t) * 1000

    def dec_json():
        r = json.loads(json_req)
        for k in ("input_ids", "segment_ids", "position_ids"):
            torch.tensor(r[k], dtype=torch.long)

    def dec_bin():
        n = lanes * bucket
        for k in range(3):
            torch.from_numpy(np.frombuffer(bin_req, dtype=np.int32, count=n, offset=k * n * 4)
                             .reshape(lanes, bucket).astype(np.int64))

    rows = [("lanepack JSON", best(dec_json), best(lambda: json.dumps({"outputs": out.tolist()}))),
            ("v2 binary tensors", best(dec_bin), best(lambda: out.tobytes()))]
    print("reference server, one %dx%d batch, %d floats per token out:" % (lanes, bucket, features))
    print("%-20s %16s %16s" % ("form", "decode inputs ms", "encode outputs ms"))
    for name, d, e in rows:
        print("%-20s %16.3f %16.3f" % (name, d, e))


class Device:
    """A static-shape device: one batch at a time, only its compiled shapes."""

    def __init__(self, args):
        self.v2_model = args.v2_model
        self.v2_output = args.v2_output
        self.shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
        self.causal = args.mask == "causal"
        self.per_segment = args.outputs == "per-segment"
        self.scores = args.head == "score"
        self.segment_mask = not args.no_segment_mask
        # DEVICE: torch.device("cpu") here. On a TPU host: import torch_xla.core.xla_model
        # as xm; device = xm.xla_device(). On Trainium: torch_neuronx.trace() the model
        # per shape. Move the model and each batch's tensors there; keep the shapes fixed.
        self.device = torch.device(args.device)
        max_len = max(b for _, b in self.shapes)
        self.model = Encoder(args.vocab, max_len, seed=args.seed).to(self.device).eval()
        self.lock = threading.Lock()

    def compute(self, ids, pos, seg):
        """[lanes, bucket] long tensors in; per-token outputs [lanes, bucket, 4]
        (padding zeros) or per-segment pooled states [lanes, max_segments, d];
        with the score head, one score per token [lanes, bucket] or per segment
        [lanes, max_segments] (padding and absent segments zeros)."""
        with self.lock, torch.no_grad():
            hidden, out = self.model(ids.to(self.device), pos.to(self.device), seg.to(self.device),
                                     causal=self.causal, segment_mask=self.segment_mask)
            if not self.per_segment:
                if self.scores:
                    return self.model.score(hidden).cpu() * (seg != 0)
                return out.cpu() * (seg != 0)[:, :, None]
            hidden = hidden.cpu()
            lanes = seg.shape[0]
            nseg = max(int(seg.max()), 1)
            pooled = torch.zeros(lanes, nseg, hidden.shape[-1])
            present = torch.zeros(lanes, nseg, dtype=torch.bool)
            for lane in range(lanes):
                for s in range(1, int(seg[lane].max()) + 1):
                    pooled[lane, s - 1] = hidden[lane][seg[lane] == s].mean(dim=0)
                    present[lane, s - 1] = True
            if self.scores:
                return self.model.score(pooled.to(self.device)).cpu() * present
            return pooled

    def batch(self, req):
        shape = tuple(req.get("shape") or ())
        if shape not in self.shapes:
            return 500, {"error": {"code": "shape_mismatch",
                                   "message": "shape mismatch: %s is not compiled" % (list(shape),)}}
        lanes, bucket = shape
        try:
            ids = torch.tensor(req["input_ids"], dtype=torch.long)
            pos = torch.tensor(req["position_ids"], dtype=torch.long)
            seg = torch.tensor(req["segment_ids"], dtype=torch.long)
        except (KeyError, ValueError, TypeError) as e:
            return 400, {"error": {"code": "bad_batch", "message": "bad arrays: %s" % e}}
        for name, t in (("input_ids", ids), ("position_ids", pos), ("segment_ids", seg)):
            if tuple(t.shape) != (lanes, bucket):
                return 400, {"error": {"code": "bad_batch",
                                       "message": "%s is %s, the shape says %s" % (name, list(t.shape), [lanes, bucket])}}
        res = self.compute(ids, pos, seg)
        if not self.per_segment:
            return 200, {"batch_id": req.get("batch_id"), "outputs": res.tolist()}
        segs = [res[lane, :int(seg[lane].max())].tolist() for lane in range(lanes)]
        return 200, {"batch_id": req.get("batch_id"), "segment_outputs": segs}

    # ---- the Open Inference Protocol ----

    def v2_shape(self, name):
        for lanes, bucket in self.shapes:
            if self.v2_model.replace("{lanes}", str(lanes)).replace("{bucket}", str(bucket)) == name:
                return lanes, bucket
        return None

    def v2_infer(self, name, raw, header_len):
        """Returns (status, header dict, binary tail or None)."""
        shape = self.v2_shape(name)
        if shape is None:
            return 404, {"error": "unknown model '%s'" % name}, None
        try:
            head = json.loads(raw[:header_len] if header_len is not None else raw)
            offset = header_len or 0
            tensors = {}
            for t in head["inputs"]:
                dt = V2_DTYPES[t["datatype"]]
                size = (t.get("parameters") or {}).get("binary_data_size")
                if size is not None:
                    arr = np.frombuffer(raw, dtype=dt, count=size // np.dtype(dt).itemsize, offset=offset)
                    offset += size
                else:
                    arr = np.asarray(t["data"], dtype=dt)
                tensors[t["name"]] = torch.from_numpy(arr.reshape(t["shape"]).astype(np.int64))
            ids, seg, pos = tensors["input_ids"], tensors["segment_ids"], tensors["position_ids"]
        except (KeyError, ValueError, TypeError) as e:
            return 400, {"error": "bad request: %s" % e}, None
        for n, t in (("input_ids", ids), ("segment_ids", seg), ("position_ids", pos)):
            if tuple(t.shape) != shape:
                return 400, {"error": "%s is %s, model %s takes %s" % (n, list(t.shape), name, list(shape))}, None
        res = self.compute(ids, pos, seg).numpy().astype(np.float32)
        asked = head.get("outputs") or []
        binary = bool((head.get("parameters") or {}).get("binary_data_output")) or any(
            (o.get("parameters") or {}).get("binary_data") for o in asked)
        out = {"name": self.v2_output, "datatype": "FP32", "shape": list(res.shape)}
        if binary:
            tail = res.tobytes()
            out["parameters"] = {"binary_data_size": len(tail)}
        else:
            tail = None
            out["data"] = res.ravel().tolist()
        return 200, {"model_name": name, "model_version": "1", "id": head.get("id", ""),
                     "outputs": [out]}, tail


def make_handler(device):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # quiet: one line per batch is noise
            pass

        def send(self, status, obj, tail=None):
            body = json.dumps(obj).encode()
            self.send_response(status)
            if tail is not None:  # v2 binary: the JSON header, then the raw tensors
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Inference-Header-Content-Length", str(len(body)))
                body += tail
            else:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            path = self.path
            if path in ("/healthz", "/v2/health/live", "/v2/health/ready"):
                self.send(200, {"status": "ok"})
            elif path == "/v1/shapes":
                self.send(200, {"shapes": [list(s) for s in device.shapes]})
            elif path == "/v2":
                self.send(200, {"name": "lanepack-reference", "version": "1",
                                "extensions": ["binary_tensor_data"]})
            elif path.startswith("/v2/models/"):
                name, _, rest = path[len("/v2/models/"):].partition("/")
                shape = device.v2_shape(name)
                if shape is None:
                    self.send(404, {"error": "unknown model '%s'" % name})
                elif rest == "ready":
                    self.send(200, {})
                elif rest == "":
                    self.send(200, {"name": name, "versions": ["1"], "platform": "pytorch",
                                    "inputs": [{"name": n, "datatype": "INT64", "shape": list(shape)}
                                               for n in ("input_ids", "segment_ids", "position_ids")],
                                    "outputs": [{"name": device.v2_output, "datatype": "FP32",
                                                 "shape": [shape[0], -1] if device.scores
                                                 else [shape[0], -1, -1]}]})
                else:
                    self.send(404, {"error": "no such route"})
            else:
                self.send(404, {"error": {"code": "not_found", "message": "no such route"}})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            if self.path.startswith("/v2/models/") and self.path.endswith("/infer"):
                name = self.path[len("/v2/models/"):-len("/infer")]
                hl = self.headers.get("Inference-Header-Content-Length")
                self.send(*device.v2_infer(name, raw, int(hl) if hl is not None else None))
                return
            if self.path != "/v1/batch":
                self.send(404, {"error": {"code": "not_found", "message": "no such route"}})
                return
            try:
                req = json.loads(raw)
            except ValueError as e:
                self.send(400, {"error": {"code": "bad_batch", "message": "not JSON: %s" % e}})
                return
            self.send(*device.batch(req))

    return Handler


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--listen", default="127.0.0.1:9000")
    p.add_argument("--shapes", default="4x512,16x128")
    p.add_argument("--mask", choices=["bidirectional", "causal"], default="bidirectional")
    p.add_argument("--outputs", choices=["per-token", "per-segment"], default="per-token")
    p.add_argument("--head", choices=["vector", "score"], default="vector",
                   help="vector: 4 floats per token or the pooled state per segment; "
                        "score: one float per token or per segment (a reranker's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-segment-mask", action="store_true",
                   help="debug: let tokens see their whole lane (breaks packing; for the control test)")
    p.add_argument("--v2-model", default="lanepack_{lanes}x{bucket}",
                   help="v2 model name per compiled shape")
    p.add_argument("--v2-output", default="output", help="v2 output tensor name")
    p.add_argument("--bench-codec", action="store_true",
                   help="print the time to decode a 4x8192 batch and encode its outputs, JSON vs v2 binary")
    args = p.parse_args(argv)
    if args.bench_codec:
        bench_codec()
        return
    host, port = args.listen.rsplit(":", 1)
    torch.set_num_threads(1)
    server = ThreadingHTTPServer((host, int(port)), make_handler(Device(args)))
    print(json.dumps({"msg": "reference backend listening", "port": server.server_address[1],
                      "shapes": args.shapes, "mask": args.mask, "outputs": args.outputs,
                      "head": args.head}),
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
