#!/usr/bin/python3
"""Packing changes nothing: the reference PyTorch backend behind lanepack, a few
hundred sequences of mixed lengths sent at once (so they share lanes), each
answer compared with the same model run on that sequence alone: per-token
outputs, per-segment embeddings (pooled vectors) and a reranker's scores (the
score head, per segment and per token), and /rerank's scores behind the
reference cross-encoder. Then the controls: with the segment
mask off, the same comparison must find mismatches, for vectors and scores.

Usage: test-reference-model.py LANEPACK SERVER_PY"""
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import tempfile
import urllib.request

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import model_config, start_proxy, start_server  # noqa: E402

lanepack, server_py = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(server_py))
import server  # noqa: E402  (the same model code, for the unpacked reference)

SHAPES = "4x256,16x64"
TOL = 1e-4
N = int(os.environ.get("LP_REF_SEQUENCES", "240"))


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def start_backend(tmp, args):
    """The reference backend (server.py) with args, its log in tmp: (its Popen,
    its port); it loads PyTorch, which takes a while."""
    return start_server("the reference backend", lambda listen: [sys.executable, server_py, "--listen", listen] + args,
                        timeout=60, stderr=open(os.path.join(tmp, "backend.log"), "w"))


def start_in_front(tmp, backend, cfg):
    """lanepack with the configuration cfg, in front of backend (stopped when
    lanepack never gets ready): (its Popen, its port)."""
    try:
        return start_proxy(lanepack, os.path.join(tmp, "lp.json"), cfg, timeout=60,
                           stderr=open(os.path.join(tmp, "proxy.log"), "w"))
    except BaseException:
        backend.terminate()
        raise


def stop(proxy, backend):
    """SIGTERM to both; lanepack's exit status kept in exits ("hung" past 30 s)."""
    proxy.terminate()
    backend.terminate()
    try:
        code = proxy.wait(30)
    except subprocess.TimeoutExpired:
        proxy.kill()
        code = "hung"
    backend.wait(10)
    exits.append(code)


def run(mask, outputs, segment_mask=True, protocol="lanepack", head="vector"):
    """Returns (sequences compared, packed with others, largest difference)."""
    tmp = tempfile.mkdtemp()
    args = ["--shapes", SHAPES, "--mask", mask, "--outputs", outputs, "--head", head, "--vocab", "1000"]
    if not segment_mask:
        args.append("--no-segment-mask")
    backend, bport = start_backend(tmp, args)
    model_cfg = model_config(SHAPES, [bport], vocab_size=1000, max_wait_ms=50, max_inflight=1)
    if protocol == "v2":  # binary tensors, one v2 model per shape
        model_cfg.update({"protocol": "v2", "v2": {
            "model": "lanepack_{lanes}x{bucket}", "output": "output",
            "output_kind": outputs.replace("-", "_"), "datatype": "INT64"}})
    proxy, pport = start_in_front(tmp, backend, {"health_interval_ms": 200, "models": {"default": model_cfg}})
    try:
        rng = random.Random(1234)
        seqs = []
        for _ in range(N):
            n = min(256, max(1, int(rng.lognormvariate(3.2, 1.0))))
            seqs.append([rng.randrange(1000) for _ in range(n)])
        url = "http://127.0.0.1:%d/v1/infer" % pport
        with concurrent.futures.ThreadPoolExecutor(max_workers=48) as ex:
            answers = list(ex.map(lambda s: post(url, {"input_ids": s}), seqs))
        model = server.Encoder(1000, 256, seed=0).eval()
        worst, packed = 0.0, 0
        for s, a in zip(seqs, answers):
            hidden, out = server.run_alone(model, s, causal=(mask == "causal"))
            got = torch.tensor(a["output"])
            want = out if outputs == "per-token" else hidden.mean(dim=0)
            if head == "score":  # the score of each token's state, or of the pooled one
                with torch.no_grad():
                    want = model.score(hidden if outputs == "per-token" else hidden.mean(dim=0))
            if got.shape != want.shape:
                raise AssertionError("shape %s vs %s" % (tuple(got.shape), tuple(want.shape)))
            worst = max(worst, float((got - want).abs().max()))
            packed += a["batch"]["offset"] > 0
        return len(seqs), packed, worst
    finally:
        stop(proxy, backend)


def rerank_run(protocol):
    """/rerank behind the reference cross-encoder (--outputs per-segment --head
    score, lanepack's "outputs": "score"): each pair's raw score against the
    model's score of that pair alone. Returns (pairs, largest difference)."""
    tmp = tempfile.mkdtemp()
    prefix = os.path.join(tmp, "spm")
    subprocess.run(["spm_train", "--input=/usr/share/common-licenses/GPL-3", "--model_prefix=" + prefix,
                    "--vocab_size=400", "--character_coverage=1.0"], capture_output=True, check=True)
    backend, bport = start_backend(tmp, ["--shapes", SHAPES, "--outputs", "per-segment", "--head", "score",
                                         "--vocab", "1000"])
    model_cfg = model_config(SHAPES, [bport], max_wait_ms=50, outputs="score",
                             tokenizer={"sentencepiece": prefix + ".model", "extra_options": "bos:eos",
                                        "pair_template": "<s> $A </s></s> $B </s>"})
    if protocol == "v2":
        model_cfg.update({"protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}", "output": "output",
                                                   "datatype": "INT64"}})
    proxy, pport = start_in_front(tmp, backend, {"health_interval_ms": 200, "models": {"ce": model_cfg}})
    try:
        lines = [ln.strip() for ln in open("/usr/share/common-licenses/GPL-3") if len(ln.strip()) > 20]
        query, texts = "what does the license say about warranty?", lines[30:70]
        got = post("http://127.0.0.1:%d/rerank" % pport, {"query": query, "texts": texts, "raw_scores": True})
        enc = subprocess.run(["spm_encode", "--model=" + prefix + ".model", "--output_format=id"],
                             input=("\n".join([query] + texts) + "\n").encode(), capture_output=True, check=True)
        ids = [[int(x) for x in ln.split()] for ln in enc.stdout.decode().splitlines()]
        model = server.Encoder(1000, 256, seed=0).eval()
        worst = 0.0
        for r in got:
            pair = [1] + ids[0] + [2, 2] + ids[1 + r["index"]] + [2]
            hidden, _ = server.run_alone(model, pair, causal=False)
            with torch.no_grad():
                want = float(model.score(hidden.mean(dim=0)))
            worst = max(worst, abs(r["score"] - want))
        if sorted(r["index"] for r in got) != list(range(len(texts))):
            raise AssertionError("/rerank did not rank every text once: %s" % got)
        return len(got), worst
    finally:
        stop(proxy, backend)


passed = failed = 0
exits = []  # lanepack's exit status after each run's SIGTERM
# a cross-encoder's one score per pair is /rerank's score, on both wires
for protocol in ("lanepack", "v2"):
    n, worst = rerank_run(protocol)
    ok = worst <= TOL
    print("%-8s /rerank behind --outputs per-segment --head score: %d pairs, largest difference %.3g: %s"
          % (protocol, n, worst, "ok" if ok else "FAIL"), flush=True)
    passed += ok
    failed += not ok
cases = [(m, o, "lanepack", "vector") for m in ("bidirectional", "causal") for o in ("per-token", "per-segment")]
cases += [("bidirectional", o, "v2", "vector") for o in ("per-token", "per-segment")]
cases += [("bidirectional", "per-segment", p, "score") for p in ("lanepack", "v2")]
cases += [("causal", "per-token", "lanepack", "score")]
for mask, outputs, protocol, head in cases:
    n, packed, worst = run(mask, outputs, protocol=protocol, head=head)
    ok = worst <= TOL and packed > n // 4
    print("%-8s %-13s %-11s %-6s %d sequences, %d packed behind another in a lane, largest difference %.3g: %s"
          % (protocol, mask, outputs, head, n, packed, worst, "ok" if ok else "FAIL"), flush=True)
    passed += ok
    failed += not ok
# the controls: without the segment mask, packing must show
for outputs, head in (("per-token", "vector"), ("per-segment", "score")):
    n, packed, worst = run("bidirectional", outputs, segment_mask=False, head=head)
    ok = worst > 1e-2
    print("control (segment mask off, %s %s): %d sequences, largest difference %.3g: %s"
          % (outputs, head, n, worst, "ok, mismatches found" if ok else "FAIL, the comparison cannot fail"),
          flush=True)
    passed += ok
    failed += not ok
ok = exits and all(code == 0 for code in exits)
print("lanepack exits 0 on SIGTERM after every run: %s" % ("ok" if ok else "FAIL %s" % exits), flush=True)
passed += bool(ok)
failed += not ok
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
