#!/usr/bin/python3
"""Reference backend for lanepack: a small transformer encoder on PyTorch that
implements the backend contract (GET /v1/shapes, GET /healthz, POST /v1/batch)
like a static-shape device. Attention is block-diagonal by segment, so a packed
sequence computes exactly what it computes alone.

Port to an accelerator: build the model on the device (see DEVICE below) and keep
the shapes fixed; nothing else changes.
"""
import argparse
import json
import math
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from torch import nn


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
    """Embedding + position embedding, a few attention/MLP layers, a small head:
    float32, weights from a fixed seed."""

    def __init__(self, vocab, max_len, d=32, heads=4, layers=2, outputs=4, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.layers = nn.ModuleList(Layer(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, outputs)

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


class Device:
    """A static-shape device: one batch at a time, only its compiled shapes."""

    def __init__(self, args):
        self.shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
        self.causal = args.mask == "causal"
        self.per_segment = args.outputs == "per-segment"
        self.segment_mask = not args.no_segment_mask
        # DEVICE: torch.device("cpu") here. On a TPU host: import torch_xla.core.xla_model
        # as xm; device = xm.xla_device(). On Trainium: torch_neuronx.trace() the model
        # per shape. Move the model and each batch's tensors there; keep the shapes fixed.
        self.device = torch.device(args.device)
        max_len = max(b for _, b in self.shapes)
        self.model = Encoder(args.vocab, max_len, seed=args.seed).to(self.device).eval()
        self.lock = threading.Lock()

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
        kind = req.get("outputs", "per-segment" if self.per_segment else "per-token")
        with self.lock, torch.no_grad():
            hidden, out = self.model(ids.to(self.device), pos.to(self.device), seg.to(self.device),
                                     causal=self.causal, segment_mask=self.segment_mask)
        hidden, out = hidden.cpu(), out.cpu()
        if kind == "per-token":
            # padding answers zeros; a token's answer is its few output floats
            mask = (seg != 0)[:, :, None]
            out = out * mask
            return 200, {"batch_id": req.get("batch_id"),
                         "outputs": [[rounded(out[l, k]) for k in range(bucket)] for l in range(lanes)]}
        # per segment: the mean-pooled hidden state of the segment's tokens
        segs = []
        for lane in range(lanes):
            row = []
            for s in sorted(set(seg[lane].tolist()) - {0}):
                row.append(rounded(hidden[lane][seg[lane] == s].mean(dim=0)))
            segs.append(row)
        return 200, {"batch_id": req.get("batch_id"), "segment_outputs": segs}


def make_handler(device):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # quiet: one line per batch is noise
            pass

        def send(self, status, obj):
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/healthz":
                self.send(200, {"status": "ok"})
            elif self.path == "/v1/shapes":
                self.send(200, {"shapes": [list(s) for s in device.shapes]})
            else:
                self.send(404, {"error": {"code": "not_found", "message": "no such route"}})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-segment-mask", action="store_true",
                   help="debug: let tokens see their whole lane (breaks packing; for the control test)")
    args = p.parse_args(argv)
    host, port = args.listen.rsplit(":", 1)
    torch.set_num_threads(1)
    server = ThreadingHTTPServer((host, int(port)), make_handler(Device(args)))
    print(json.dumps({"msg": "reference backend listening", "port": server.server_address[1],
                      "shapes": args.shapes, "mask": args.mask, "outputs": args.outputs}),
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
