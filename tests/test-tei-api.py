#!/usr/bin/env python3
"""TEI 1.9's API as its openapi.json describes it, on lanepack (issue 35):
/embed with token ids, ids mixed with strings, `dimensions` and fields it does
not know (ignored); GET /health and GET /info (the model's limits from the
configuration); POST /predict (a classifier's labelled scores, softmax or raw,
a pair, a batch; a cross-encoder's one score through a sigmoid); POST
/embed_all (a vector per token); POST /similarity (cosine to the source);
POST /decode (ids to text, spm_decode's); /embed_sparse answered as TEI
answers a model without sparse outputs; each error in TEI's shape. Every
number checked against the emulator's formula for spm_encode's ids.
Arguments: the lanepack and emulator binaries."""
import json
import math
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, free_port, model_config, stop_all, tei_error  # noqa: E402
from teihelp import (emu_h, emu_vector, f32, model_cfg, normalized, post, sigmoid, spm_ids,  # noqa: E402
                     spm_tokenizer, start_emulators, start_logged)

TEMPLATE = "<s> $A </s></s> $B </s>"
LABELS = ["negative", "neutral", "positive"]
DIMS = 3
LIMIT = 64


def get(port, path):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def emu_prefix_hashes(ids):
    out, h = [], 7
    for t in ids:
        h = (h * 31 + t + 1) % 1000000007
        out.append(h)
    return out


def softmax(v):
    m = max(v)
    e = [math.exp(x - m) for x in v]
    return [f32(x / sum(e)) for x in e]


def predictions(scores, labels):
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    return [{"score": scores[i], "label": labels[i]} for i in order]


def cosine(a, b):
    dot = sum(float(x) * float(y) for x, y in zip(a, b))
    na = sum(float(x) * float(x) for x in a)
    nb = sum(float(x) * float(x) for x in b)
    return f32(dot / (math.sqrt(na) * math.sqrt(nb)))


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = spm_tokenizer(tmp, TEMPLATE)
        try:
            pv, ps, pt = start_emulators(emulator, tmp, [["--per-segment", "--dims", str(DIMS)], ["--per-segment"],
                                                         ["--dims", "2"]], procs)

            def m(port, **kw):
                return model_cfg(port, tok, **kw)
            # two fronts: answers and /health cross threads as every job and page does
            cfg = {"log_level": "warn", "max_sequences_per_request": 50, "threads": 2, "tokenizer_threads": 3,
                   "models": {
                       "emb": m(pv, outputs="per_segment", embedding={"dimensions": DIMS}),
                       "cls": m(pv, outputs="score", labels=LABELS),
                       "cls2": m(pv, outputs="score", labels=LABELS[:2]),  # fewer labels than scores
                       "rr": m(ps, outputs="score"),
                       "tok": m(pt, outputs="per_token"),
                       "ids": model_config("4x64", [pv], max_wait_ms=1),
                   }}
            pl = start_logged(lanepack, tmp, "lp", cfg, procs)
            run_checks(pl, model)
            # one model, its backend down (a free port nobody listens on): /health 503 Unhealthy; /info without ?model
            one = {"log_level": "warn", "health_interval_ms": 50, "models": {"only": m(free_port())}}
            p1 = start_logged(lanepack, tmp, "one", one, procs, ready="/healthz")
            st, body = get(p1, "/health")
            check("GET /health with no healthy backend: 503 in TEI's shape",
                  tei_error(st, json.loads(body or b"{}"), 503, "Unhealthy"), (st, body))
            st, body = get(p1, "/info")
            info = json.loads(body) if st == 200 else {}
            check("GET /info of the only model needs no ?model", st == 200 and info.get("model_id") == "only",
                  (st, body))
        finally:
            stop_all(procs)
    finish()


def longest_first(na, nb, room):
    """The ids of a pair of na and nb that tokenizers' truncate_encodings
    keeps with LongestFirst within room (its code, step by step)."""
    if na + nb <= room:
        return na, nb
    n1, n2, swap = na, nb, na > nb
    if swap:
        n1, n2 = n2, n1
    n2 = n1 if n1 > room else max(n1, room - n1)
    if n1 + n2 > room:
        n1 = room // 2
        n2 = n1 + room % 2
    if swap:
        n1, n2 = n2, n1
    return min(na, n1), min(nb, n2)


def run_checks(pl, model):
    text = "Everyone is permitted to copy and distribute"
    tid = spm_ids(model, [text], "bos:eos")[0]

    # /embed: token ids, ids mixed with text, dimensions, unknown fields ignored
    st, js = post(pl, "/embed", {"model": "emb", "inputs": [5, 6, 7], "normalize": False})
    check("/embed of token ids [5, 6, 7]: one vector of those ids", st == 200 and js == [emu_vector([5, 6, 7], DIMS)],
          (st, js))
    st, js = post(pl, "/embed", {"model": "emb", "inputs": [text, [5, 6], [9]], "normalize": False})
    check("/embed of a text mixed with token ids: each input's vector",
          st == 200 and js == [emu_vector(tid, DIMS), emu_vector([5, 6], DIMS), emu_vector([9], DIMS)], (st, js))
    st, js = post(pl, "/embed", {"model": "ids", "inputs": [[5, 6]], "normalize": False})
    check("/embed of token ids on a model without a tokenizer", st == 200 and js == [emu_vector([5, 6], DIMS)],
          (st, js))
    long_ids = list(range(3, 3 + 100))
    st, js = post(pl, "/embed", {"model": "emb", "inputs": long_ids})
    check("/embed of 100 ids without truncate: 422 naming the limit",
          tei_error(st, js, 422, "Tokenizer", "at most %d" % LIMIT), (st, js))
    for direction, cut in (("Right", long_ids[:LIMIT]), ("Left", long_ids[-LIMIT:])):
        st, js = post(pl, "/embed", {"model": "emb", "inputs": long_ids, "truncate": True, "normalize": False,
                                     "truncation_direction": direction})
        check("/embed of 100 ids, truncate %s: the kept ids' vector" % direction,
              st == 200 and js == [emu_vector(cut, DIMS)], (st, js))
    st, js = post(pl, "/embed", {"model": "emb", "inputs": [5, 6], "dimensions": 2, "normalize": False,
                                 "unknown_field": {"x": 1}, "encoding_format": "float"})
    check("/embed dimensions 2 (unknown fields ignored): the first 2 values",
          st == 200 and js == [emu_vector([5, 6], DIMS)[:2]], (st, js))
    st, js = post(pl, "/embed", {"model": "emb", "inputs": [5, 6], "dimensions": 2})
    check("/embed dimensions 2, normalized: unit length of the first 2",
          st == 200 and [[f32(x) for x in js[0]]] == [normalized(emu_vector([5, 6], DIMS)[:2])], (st, js))
    # a \u0000 is valid JSON (TEI's serde takes it): refused as a value lanepack
    # does not take, not as a body that is not JSON, short text or long
    for nul_text in ("a\u0000b", "\u0000" + "the license " * 20000):
        st, js = post(pl, "/embed", {"model": "emb", "inputs": [nul_text]})
        check("/embed of a text holding U+0000 (%d bytes): 422 Validation naming \\u0000" % len(nul_text),
              tei_error(st, js, 422, "Validation", "\\u0000") and "not valid JSON" not in js["error"]
              and "JSON_ALLOW_NUL" not in js["error"], (st, str(js)[:200]))
    st, js = post(pl, "/embed", {"model": "emb", "inputs": "x", "dimensions": DIMS + 1})
    check("/embed dimensions over the model's: 422 Validation", tei_error(st, js, 422, "Validation", "dimensions"),
          (st, js))
    st, js = post(pl, "/embed", {"model": "ids", "inputs": [5], "dimensions": 2})
    check("/embed dimensions on a model without embedding.dimensions: 422 naming the key",
          tei_error(st, js, 422, "Validation", "embedding.dimensions"), (st, js))

    # GET /health, GET /info
    st, body = get(pl, "/health")
    check("GET /health: 200, no body", st == 200 and body == b"", (st, body))
    st, body = get(pl, "/info?model=cls")
    info = json.loads(body) if st == 200 else {}
    required = ["model_id", "model_dtype", "served_model_name", "model_type", "max_concurrent_requests",
                "max_input_length", "max_batch_tokens", "max_client_batch_size", "auto_truncate",
                "tokenization_workers", "version"]
    check("GET /info?model=cls: every required field, the limits from the configuration",
          st == 200 and all(k in info for k in required) and info["model_id"] == "cls"
          and info["max_input_length"] == LIMIT and info["max_client_batch_size"] == 50
          and info["max_batch_tokens"] == 4 * 64 and info["tokenization_workers"] == 3
          and info["model_type"] == {"classifier": {"id2label": {str(i): l for i, l in enumerate(LABELS)},
                                                    "label2id": {l: i for i, l in enumerate(LABELS)}}}, (st, body))
    st, body = get(pl, "/info?model=emb")
    check("GET /info of an embedding model: model_type embedding",
          st == 200 and "embedding" in json.loads(body)["model_type"], (st, body))
    st, body = get(pl, "/info")
    check("GET /info with several models and none named: 400 in TEI's shape",
          tei_error(st, json.loads(body), 400, "Validation", "model"), (st, body))
    st, body = get(pl, "/info?xmodel=cls")
    check("GET /info?xmodel=cls names no model (not the tail of another parameter): 400",
          tei_error(st, json.loads(body), 400, "Validation", "model"), (st, body))
    st, body = get(pl, "/info?model=%63l%73")
    check("GET /info?model=%63l%73: the name percent-decoded (cls), as a model in a path is",
          st == 200 and json.loads(body)["model_id"] == "cls", (st, body))
    st, body = get(pl, "/info?x=1&model=cls")
    check("GET /info?x=1&model=cls: the model named after another parameter",
          st == 200 and json.loads(body)["model_id"] == "cls", (st, body))

    # /predict: a classifier's labelled scores
    raw = emu_vector(tid, DIMS)
    st, js = post(pl, "/predict", {"model": "cls", "inputs": text})
    check("/predict of one text: [{score, label}] softmax over the labels, by score",
          st == 200 and [dict(p, score=f32(p["score"])) for p in js] == predictions(softmax(raw), LABELS), (st, js))
    st, js = post(pl, "/predict", {"model": "cls", "inputs": text, "raw_scores": True})
    check("/predict raw_scores: the backend's scores", st == 200 and js == predictions(raw, LABELS), (st, js))
    a, b = "the license", "copies of the program"
    ia, ib = spm_ids(model, [a, b])
    pair = [1] + ia + [2, 2] + ib + [2]
    st, js = post(pl, "/predict", {"model": "cls", "inputs": [a, b], "raw_scores": True})
    check("/predict of a pair [a, b]: one sequence laid out by the pair template",
          st == 200 and js == predictions(emu_vector(pair, DIMS), LABELS), (st, js))
    st, js = post(pl, "/predict", {"model": "cls", "inputs": [[text], [a, b]], "raw_scores": True})
    check("/predict of a batch [[text], [a, b]]: a list per input",
          st == 200 and js == [predictions(raw, LABELS), predictions(emu_vector(pair, DIMS), LABELS)], (st, js))
    # a pair with truncate is cut as TEI cuts it (tokenizers' LongestFirst within
    # the limit less the template's 4 pieces): the first text too when it alone
    # is over the limit (it was 422), both to half when both are long
    long_a, long_b = "the license " * LIMIT, "copies of the program " * LIMIT
    ila, ilb = spm_ids(model, [long_a, long_b])
    for x, y, ix, iy in ((long_a, b, ila, ib), (a, long_b, ia, ilb), (long_a, long_b, ila, ilb)):
        kx, ky = longest_first(len(ix), len(iy), LIMIT - 4)
        for direction in ("Right", "Left"):
            def cut(ids, k):
                return ids[:k] if direction == "Right" else ids[len(ids) - k:]
            want = [1] + cut(ix, kx) + [2, 2] + cut(iy, ky) + [2]
            st, js = post(pl, "/predict", {"model": "cls", "inputs": [x, y], "raw_scores": True, "truncate": True,
                                           "truncation_direction": direction})
            check("/predict of a pair of %d and %d tokens, truncate %s: %d and %d kept (LongestFirst)"
                  % (len(ix), len(iy), direction, kx, ky),
                  st == 200 and js == predictions(emu_vector(want, DIMS), LABELS), (st, js))
    st, js = post(pl, "/predict", {"model": "cls", "inputs": [long_a, b]})
    check("/predict of a pair over the limit without truncate: 422 naming it",
          tei_error(st, js, 422, "Tokenizer", str(LIMIT)), (st, js))

    # TEI's PredictInput: a list starting with a string is one sequence ([a] a
    # text, [a, b] a pair), never a batch: a third string is 422 invalid length 3
    st, js = post(pl, "/predict", {"model": "cls", "inputs": [text], "raw_scores": True})
    check("/predict of [text]: one text, answered as one (not a list of one)",
          st == 200 and js == predictions(raw, LABELS), (st, js))
    st, js = post(pl, "/predict", {"model": "cls", "inputs": [a, b, text]})
    check("/predict of [a, b, c]: 422, TEI's invalid length 3 (not a batch of three)",
          tei_error(st, js, 422, "Validation", "inputs: invalid length 3, expected a string, a pair of strings"),
          (st, js))
    for bad in ([a, [b]], [[a], b], []):
        st, js = post(pl, "/predict", {"model": "cls", "inputs": bad})
        check("/predict of %s: 422 as TEI" % json.dumps(bad)[:40], tei_error(st, js, 422, "Validation", "inputs"),
              (st, js))
    st, js = post(pl, "/predict", {"model": "rr", "inputs": [a, b]})
    check("/predict on a cross-encoder (one score): its sigmoid, LABEL_0",
          st == 200 and [dict(p, score=f32(p["score"])) for p in js]
          == [{"score": sigmoid(f32(emu_h(pair))), "label": "LABEL_0"}], (st, js))
    st, js = post(pl, "/predict", {"model": "emb", "inputs": text})
    check("/predict on an embedding model: 424 not a classifier",
          tei_error(st, js, 424, "Backend", "not a classifier"), (st, js))
    st, js = post(pl, "/predict", {"model": "cls2", "inputs": text})
    check("/predict, %d scores for 2 labels: 424 naming the labels key" % DIMS,
          tei_error(st, js, 424, "Backend", "one per label", "models.cls2.labels"), (st, js))
    st, js = post(pl, "/predict", {"model": "cls", "inputs": [[a]] * 51})
    check("/predict of 51 inputs: 413", tei_error(st, js, 413, "Validation", "51"), (st, js))

    # /embed_all: a vector per token
    st, js = post(pl, "/embed_all", {"model": "tok", "inputs": [text, [5, 6]]})
    want = [[[f32(h % 1000 + 0.25 * k) for k in range(2)] for h in emu_prefix_hashes(ids)] for ids in (tid, [5, 6])]
    check("/embed_all: each input's vector per token", st == 200 and js == want, (st, str(js)[:300]))
    st, js = post(pl, "/embed_all", {"model": "emb", "inputs": "x"})
    check("/embed_all on a per-segment model: 424 Backend", tei_error(st, js, 424, "Backend"), (st, js))

    # /similarity: cosine between the source and each sentence
    sents = ["the license", "copies of the program", text]
    ids = spm_ids(model, ["warranty"] + sents, "bos:eos")
    vs = [emu_vector(i, DIMS) for i in ids]
    st, js = post(pl, "/similarity", {"model": "emb", "inputs": {"source_sentence": "warranty", "sentences": sents}})
    check("/similarity: cosine of each sentence's vector with the source's",
          st == 200 and [f32(x) for x in js] == [cosine(vs[0], v) for v in vs[1:]], (st, js))
    st, js = post(pl, "/similarity", {"model": "emb", "inputs": {"source_sentence": "x", "sentences": []}})
    check("/similarity with no sentences: 400 Empty", tei_error(st, js, 400, "Empty"), (st, js))
    long = "the license " * LIMIT
    for src, sents, field in ((long, ["x"], "`inputs.source_sentence`"), ("x", ["y", long], "`inputs.sentences[1]`")):
        st, js = post(pl, "/similarity", {"model": "emb", "inputs": {"source_sentence": src, "sentences": sents}})
        check("/similarity, %s too long: 422 naming it as sent, and the limit" % field,
              tei_error(st, js, 422, "Tokenizer", field, str(LIMIT)), (st, js))

    # /decode: spm_decode's text
    plain = spm_ids(model, [text])[0]
    st, js = post(pl, "/decode", {"model": "emb", "ids": tid})
    check("/decode of one list of ids (with <s> </s>): [the text]", st == 200 and js == [text], (st, js))
    st, js = post(pl, "/decode", {"model": "emb", "ids": [tid, plain], "skip_special_tokens": False})
    check("/decode skip_special_tokens false: the control pieces by name",
          st == 200 and js == ["<s>" + text + "</s>", text], (st, js))
    st, js = post(pl, "/decode", {"model": "emb", "ids": [[], plain]})
    check("/decode of an empty list of ids: an empty text", st == 200 and js == ["", text], (st, js))
    st, js = post(pl, "/decode", {"model": "emb", "ids": [100000]})
    check("/decode of an id past the vocabulary: 422 Tokenizer", tei_error(st, js, 422, "Tokenizer"), (st, js))

    # /embed_sparse: TEI's answer for a model without sparse outputs
    st, js = post(pl, "/embed_sparse", {"model": "emb", "inputs": "x"})
    check("/embed_sparse: 424 Backend, no sparse outputs", tei_error(st, js, 424, "Backend", "SPLADE"), (st, js))

    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % pl, timeout=5) as r:
        metrics = r.read().decode()
    check("each new route counted by its label",
          all('route="%s",status="200"' % n in metrics for n in ("predict", "embed_all", "similarity", "decode",
                                                                  "info", "health")), "")


if __name__ == "__main__":
    main()
