#!/usr/bin/env python3
"""Each model's output kind (issue 35): an answer of a value per token is
never presented as an input's embedding or a pair's score, whatever the
lengths (502 bad_backend_answer on /v1/embeddings, 424 on TEI's routes); a
cross-encoder's one score per pair is /rerank's score, on the lanepack wire and
on v2; a model configured with "outputs" refuses at once the routes it cannot
serve, and every answer not of its kind. Against the emulator per token,
per segment without --dims (one number per segment: a score) and with --dims.
Arguments: the lanepack and emulator binaries."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, stop_all, tei_error, write_config  # noqa: E402
from teihelp import emu_h, f32, model_cfg, post, sigmoid, spm_ids, spm_tokenizer, start_emulators, start_logged  # noqa: E402

TEMPLATE = "<s> $A </s></s> $B </s>"


def openai_error(st, js, status, code):
    return st == status and isinstance(js, dict) and js.get("error", {}).get("code") == code


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = spm_tokenizer(tmp, TEMPLATE)
        try:
            pt, ps, pv = start_emulators(emulator, tmp, [[], ["--per-segment"], ["--per-segment", "--dims", "4"]],
                                         procs)
            v2 = {"model": "lanepack_{lanes}x{bucket}"}

            def m(port, **kw):
                return model_cfg(port, tok, max_retries=0, **kw)
            cfg = {"log_level": "warn", "models": {
                "tok": m(pt), "tokv2": m(pt, protocol="v2", v2=v2),
                "score": m(ps), "scorev2": m(ps, protocol="v2", v2=dict(v2, output_kind="per_segment")),
                "scorecfg": m(ps, outputs="score", protocol="v2", v2=v2),
                "vec": m(pv),
                "said_seg": m(pt, outputs="per_segment"),
                "said_tok": m(pt, outputs="per_token"),
                "said_score": m(pv, outputs="score"),
            }}
            pl = start_logged(lanepack, tmp, "lp", cfg, procs)
            run_checks(pl, model)
            bad = {"listen": "127.0.0.1:1", "models": {"x": m(pt, outputs="score", protocol="v2",
                                                           v2=dict(v2, output_kind="per_token"))}}
            path = write_config(os.path.join(tmp, "lp.json"), bad)
            r = subprocess.run([lanepack, "--config", path, "--check-config"], capture_output=True, timeout=20)
            check("--check-config refuses outputs score with v2.output_kind per_token, naming both",
                  r.returncode != 0 and b"outputs" in r.stderr and b"output_kind" in r.stderr, r.stderr[-300:])
            bad["models"]["x"] = m(pt, labels=["a", "b"])
            write_config(path, bad)
            r = subprocess.run([lanepack, "--config", path, "--check-config"], capture_output=True, timeout=20)
            check("--check-config refuses labels on a model whose outputs are not scores",
                  r.returncode != 0 and b"labels" in r.stderr, r.stderr[-300:])
        finally:
            stop_all(procs)
    finish()


def run_checks(pl, model):
    # a value per token is never an embedding, even when every input has the same length
    for name in ("tok", "tokv2"):
        st, js = post(pl, "/v1/embeddings", {"model": name, "input": [[5, 6]]})
        check("%s: /v1/embeddings [[5, 6]] behind a per-token backend: 502 bad_backend_answer" % name,
              openai_error(st, js, 502, "bad_backend_answer"), (st, js))
        st, js = post(pl, "/v1/embeddings", {"model": name, "input": [[5, 6], [7, 8]]})
        check("%s: two inputs of one length: 502 too" % name, openai_error(st, js, 502, "bad_backend_answer"),
              (st, js))
        st, js = post(pl, "/embed", {"model": name, "inputs": ["the license", "the program"]})
        check("%s: /embed behind a per-token backend: 424 Backend" % name, tei_error(st, js, 424, "Backend"),
              (st, js))
        st, js = post(pl, "/rerank", {"model": name, "query": "what", "texts": ["a b", "the license"]})
        check("%s: /rerank behind a per-token backend: 424 Backend naming the kind" % name,
              tei_error(st, js, 424, "Backend", "per token"), (st, js))
        st, js = post(pl, "/v1/infer", {"model": name, "input_ids": [5, 6]})
        check("%s: /v1/infer returns the per-token outputs as they are" % name,
              st == 200 and len(js["output"]) == 2, (st, js))

    # a cross-encoder's one score per pair is /rerank's score
    query = "what does the license say"
    docs = ["a b c", "the license", "copies of the program", "warranty"]
    q = spm_ids(model, [query])[0]
    pairs = [[1] + q + [2, 2] + d + [2] for d in spm_ids(model, docs)]
    raw = [f32(emu_h(p)) for p in pairs]
    order = sorted(range(len(docs)), key=lambda i: (-raw[i], i))
    for name in ("score", "scorev2", "scorecfg", "vec"):
        st, js = post(pl, "/rerank", {"model": name, "query": query, "texts": docs, "raw_scores": True})
        want = [{"index": i, "score": raw[i]} for i in order]
        if name == "vec":  # the first value of a vector per pair
            vraw = [f32(emu_h(p) % 1000) for p in pairs]
            want = [{"index": i, "score": vraw[i]} for i in sorted(range(len(docs)), key=lambda i: (-vraw[i], i))]
        check("%s: /rerank raw_scores: each pair's score the backend's, by score" % name,
              st == 200 and js == want, (st, js, want))
    st, js = post(pl, "/rerank", {"model": "score", "query": query, "texts": docs})
    check("/rerank on a score per pair: sigmoid of each",
          st == 200 and sorted((r["index"], f32(r["score"])) for r in js) == [(i, sigmoid(x)) for i, x in enumerate(raw)],
          (st, js))
    st, js = post(pl, "/v1/embeddings", {"model": "score", "input": [[5, 6]]})
    check("a score per segment is not an embedding: 502", openai_error(st, js, 502, "bad_backend_answer"), (st, js))

    # configured kinds: refused at once, and every answer checked against them
    st, js = post(pl, "/v1/embeddings", {"model": "said_tok", "input": [[5, 6]]})
    check("outputs per_token: /v1/embeddings refused at once, 400 naming the kind",
          st == 400 and "per_token" in js["error"]["message"], (st, js))
    st, js = post(pl, "/embed", {"model": "said_tok", "inputs": "x"})
    check("outputs per_token: /embed 424 not an embedding model",
          tei_error(st, js, 424, "Backend", "not an embedding model"), (st, js))
    st, js = post(pl, "/embed", {"model": "scorecfg", "inputs": "x"})
    check("outputs score: /embed 424", tei_error(st, js, 424, "Backend"), (st, js))
    st, js = post(pl, "/v1/infer", {"model": "said_seg", "input_ids": [5, 6]})
    check("outputs per_segment answered per token: even /v1/infer is 502 bad_backend_answer",
          st == 502 and js["error"]["code"] == "bad_backend_answer", (st, js))
    st, js = post(pl, "/v1/infer", {"model": "said_score", "input_ids": [5, 6]})
    check("outputs score answered a vector per segment: 502",
          st == 502 and js["error"]["code"] == "bad_backend_answer", (st, js))
    st, js = post(pl, "/v1/infer", {"model": "scorecfg", "input_ids": [5, 6]})
    check("outputs score on v2 (output_kind from outputs): /v1/infer the one score",
          st == 200 and js["output"] == emu_h([5, 6]), (st, js))


if __name__ == "__main__":
    main()
