#!/usr/bin/env python3
"""text-embeddings-inference's routes on lanepack (issue 26), with plain HTTP
as TEI's curl examples send it: POST /embed, /rerank and /tokenize against the
emulator (--per-segment --dims, on the lanepack JSON wire and on v2) with a
SentencePiece model trained here by spm_train on a text Debian ships. Every
vector and score is checked against the emulator's formula for the ids
spm_encode gives; /rerank's order, sigmoid and raw scores, return_text;
truncation both ways; /tokenize's ids and offsets; and each error's status and
TEI-shaped body (413 too many inputs, 422 too long, 400/422 bad JSON and
types, a model without a tokenizer or pair template, 424 a failing backend,
429 a full queue), the bearer token, the only-model rule, and a pair template
naming a piece the vocabulary lacks refused by --check-config.
Arguments: the lanepack and emulator binaries."""
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, loopback, model_config, stop_proxy, tei_error, write_config  # noqa: E402
import teihelp  # noqa: E402
from teihelp import train_spm, emu_h, f32, normalized, post, sigmoid, spm_ids, start_emulators, start_logged  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"
DIMS = 8
LIMIT = 64  # the largest bucket of the shapes below
TEMPLATE = "<s> $A </s></s> $B </s>"


def emu_vector(ids):
    return teihelp.emu_vector(ids, DIMS)


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        model, r = train_spm(tmp)
        check("spm_train trained a model on %s" % TEXT, r.returncode == 0, r.stderr[-300:])
        tok = {"sentencepiece": model, "extra_options": "bos:eos", "pair_template": TEMPLATE}
        try:
            base = ["--per-segment", "--dims", str(DIMS)]
            # one that answers, one that fails every batch, a slow one
            pe, pf, ps = start_emulators(emulator, tmp, [base, base + ["--fail-rate", "1"], base + ["--delay-ms", "1500"]],
                                         procs)

            def m(port, **kw):
                return model_config("4x64", [port], **dict({"max_wait_ms": 1, "tokenizer": tok}, **kw))
            cfg = {"log_level": "warn", "max_sequences_per_request": 100,
                   "models": {
                       "emb": m(pe),
                       "v2": m(pe, protocol="v2", v2={"output_kind": "per_segment", "model": "lanepack_{lanes}x{bucket}"}),
                       "plain": m(pe, tokenizer={"sentencepiece": model}),
                       "ids": model_config("4x64", [pe], max_wait_ms=1),
                       "fail": m(pf, max_retries=0),
                       "slow": m(ps, max_queue_requests=1, max_inflight=1, backend_timeout_ms=5000),
                   }}
            pl = start_logged(lanepack, tmp, "lp", cfg, procs)
            run_checks(pl, model, tmp, lanepack, pe)
        finally:
            for p in procs:
                if p.args[0] == lanepack:
                    stop_proxy(p)
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
    finish()


def run_checks(pl, model, tmp, lanepack, pe):
    gpl = [line.strip() for line in open(TEXT, encoding="utf-8") if len(line.strip()) > 20]
    texts = gpl[10:15]
    want = spm_ids(model, texts, "bos:eos")

    # /embed: a string and strings, normalized by default and raw on request, both wires
    for name in ("emb", "v2"):
        st, js = post(pl, "/embed", {"model": name, "inputs": texts, "normalize": False})
        check("%s /embed of %d strings, normalize false: the emulator's vector of spm_encode's ids each" %
              (name, len(texts)), st == 200 and js == [emu_vector(ids) for ids in want], (st, js))
        st, js = post(pl, "/embed", {"model": name, "inputs": texts[0]})
        check("%s /embed of one string: [[...]], unit length by default" % name,
              st == 200 and [[f32(x) for x in v] for v in js] == [normalized(emu_vector(want[0]))], (st, js))

    # /embed truncation: cut to the largest bucket, the end or the start, the model's bos/eos kept
    long_text = " ".join(gpl[20:40])
    plain = spm_ids(model, [long_text])[0]
    check("the long text is longer than the model's %d tokens" % LIMIT, len(plain) > 2 * LIMIT, len(plain))
    st, js = post(pl, "/embed", {"model": "emb", "inputs": [long_text], "normalize": False})
    # refused from a prefix, the rest never tokenized: "at least N" with N over the limit, within the count
    given = re.search(r"Given: at least (\d+)", js.get("error", "") if isinstance(js, dict) else "")
    check("/embed too long without truncate: 422 tokenizer naming the limit, refused from a prefix",
          tei_error(st, js, 422, "Tokenizer", "at most %d tokens" % LIMIT) and given
          and LIMIT < int(given.group(1)) <= len(plain) + 2, (st, js, len(plain) + 2))
    for direction, cut in (("Right", [1] + plain[:LIMIT - 2] + [2]), ("Left", [1] + plain[-(LIMIT - 2):] + [2]),
                           ("left", [1] + plain[-(LIMIT - 2):] + [2])):
        st, js = post(pl, "/embed", {"model": "emb", "inputs": [long_text], "normalize": False, "truncate": True,
                                     "truncation_direction": direction})
        check("/embed truncate, direction %s: the vector of the cut ids" % direction,
              st == 200 and js == [emu_vector(cut)], (st, js))

    # /rerank: one packed sequence per (query, text) built by the pair template
    query = "What does the license say about warranty?"
    docs = gpl[40:52]
    q = spm_ids(model, [query])[0]
    pairs = [[1] + q + [2, 2] + d + [2] for d in spm_ids(model, docs)]
    raw = [f32(emu_h(p) % 1000) for p in pairs]
    order = sorted(range(len(docs)), key=lambda i: (-raw[i], i))
    for name in ("emb", "v2"):
        st, js = post(pl, "/rerank", {"model": name, "query": query, "texts": docs, "raw_scores": True})
        check("%s /rerank raw_scores: each score the emulator's for the template's ids, by score descending" % name,
              st == 200 and js == [{"index": i, "score": raw[i]} for i in order], (st, js, order, raw))
    st, js = post(pl, "/rerank", {"model": "emb", "query": query, "texts": docs, "return_text": True})
    sig = [sigmoid(x) for x in raw]
    sorder = sorted(range(len(docs)), key=lambda i: (-sig[i], i))
    check("/rerank default: sigmoid scores, sorted, each with its text",
          st == 200 and [dict(r, score=f32(r["score"])) for r in js]
          == [{"index": i, "text": docs[i], "score": sig[i]} for i in sorder], (st, js))
    small = ["a", "b", "of", "the", "is"]
    sp = [[1] + q + [2, 2] + d + [2] for d in spm_ids(model, small)]
    st, js = post(pl, "/rerank", {"model": "emb", "query": query, "texts": small})
    check("/rerank sigmoid of small logits in (0, 1): the values themselves",
          st == 200 and sorted((r["index"], f32(r["score"])) for r in js)
          == [(i, sigmoid(f32(emu_h(p) % 1000))) for i, p in enumerate(sp)], (st, js))
    hundred = [gpl[i % len(gpl)][:60] for i in range(100)]
    st, js = post(pl, "/rerank", {"model": "emb", "query": query, "texts": hundred, "raw_scores": True})
    check("/rerank of 100 passages: 100 ranks, every index once",
          st == 200 and sorted(r["index"] for r in js) == list(range(100)), (st, str(js)[:200]))
    room = LIMIT - len(q) - 4
    for direction, cut in (("Right", plain[:room]), ("Left", plain[-room:])):
        st, js = post(pl, "/rerank", {"model": "emb", "query": query, "texts": [long_text], "raw_scores": True,
                                      "truncate": True, "truncation_direction": direction})
        ids = [1] + q + [2, 2] + cut + [2]
        check("/rerank truncate %s: the text cut, the query and the template's pieces kept" % direction,
              st == 200 and js == [{"index": 0, "score": f32(emu_h(ids) % 1000)}], (st, js))
    st, js = post(pl, "/rerank", {"model": "emb", "query": query, "texts": [long_text]})
    check("/rerank too long without truncate: 422 tokenizer naming the limit",
          tei_error(st, js, 422, "Tokenizer", "at most %d tokens" % LIMIT), (st, js))
    st, js = post(pl, "/rerank", {"model": "emb", "query": long_text, "texts": ["a"], "truncate": True})
    check("/rerank whose query alone is too long, truncate: 422 saying there is no room",
          tei_error(st, js, 422, "Tokenizer", "no room"), (st, js))

    # /tokenize: spm_encode's ids, offsets into the input, special pieces marked
    sample = "Everyone is permitted to copy 日本語"
    ids_opts = spm_ids(model, [sample], "bos:eos")[0]
    st, js = post(pl, "/tokenize", {"model": "emb", "inputs": [sample, texts[0]]})
    ok = st == 200 and len(js) == 2 and [t["id"] for t in js[0]] == ids_opts \
        and [t["id"] for t in js[1]] == want[0]
    body = sample.encode()
    for t in (js[0] if ok else []):
        if t["special"]:
            ok = ok and t["start"] is None and t["stop"] is None and t["text"] in ("<s>", "</s>")
        else:
            ok = ok and body[t["start"]:t["stop"]].decode() == t["text"]
    check("/tokenize: spm_encode's ids (bos:eos), each text the input's bytes [start, stop), <s> </s> special",
          ok and js[0][0]["special"] and js[0][-1]["special"], (st, js))
    st, js = post(pl, "/tokenize", {"model": "emb", "inputs": sample, "add_special_tokens": False})
    check("/tokenize add_special_tokens false: the ids without the options, none special",
          st == 200 and [t["id"] for t in js[0]] == spm_ids(model, [sample])[0]
          and not any(t["special"] for t in js[0]), (st, js))

    # errors, each in TEI's shape
    st, js = post(pl, "/embed", {"model": "emb", "inputs": ["x"] * 101})
    check("/embed of 101 inputs: 413 validation naming the limit 100",
          tei_error(st, js, 413, "Validation", "101", "100"), (st, js))
    st, js = post(pl, "/rerank", {"model": "emb", "query": "q", "texts": ["x"] * 101})
    check("/rerank of 101 texts: 413 validation", tei_error(st, js, 413, "Validation", "100"), (st, js))
    st, js = post(pl, "/embed", None, raw=b'{"inputs": ')
    check("malformed JSON: 400 naming it", tei_error(st, js, 400, "Validation", "not valid JSON"), (st, js))
    for body, word in (({"model": "emb", "inputs": 5}, "inputs"), ({"model": "emb", "inputs": "a", "normalize": 1},
                       "normalize"), ({"model": "emb", "input": "a"}, "inputs"),
                       ({"model": "emb", "inputs": "a", "truncation_direction": "up"}, "truncation_direction")):
        st, js = post(pl, "/embed", body)
        check("/embed %s: 422 naming `%s`" % (json.dumps(body), word),
              tei_error(st, js, 422, "Validation", "`%s`" % word), (st, js))
    st, js = post(pl, "/rerank", {"model": "emb", "query": "q"})
    check("/rerank without texts: 422 missing field", tei_error(st, js, 422, "Validation", "`texts`"), (st, js))
    st, js = post(pl, "/rerank", {"model": "emb", "query": "q", "texts": []})
    check("/rerank with no texts: 400 empty", tei_error(st, js, 400, "Empty", "`texts`"), (st, js))
    st, js = post(pl, "/embed", {"model": "ids", "inputs": "hello"})
    check("a model without a tokenizer: 400 naming the key",
          tei_error(st, js, 400, "Validation", "models.ids.tokenizer"), (st, js))
    st, js = post(pl, "/rerank", {"model": "plain", "query": "q", "texts": ["a"]})
    check("/rerank on a model without a pair template: 400 naming the key",
          tei_error(st, js, 400, "Validation", "models.plain.tokenizer.pair_template"), (st, js))
    st, js = post(pl, "/embed", {"inputs": "hello"})
    check("no model named with several served: 400 listing them",
          tei_error(st, js, 400, "Validation", "\"model\"", "emb", "slow"), (st, js))
    st, js = post(pl, "/embed", {"model": "nope", "inputs": "hello"})
    check("an unknown model: 404 naming it", tei_error(st, js, 404, "Validation", "nope"), (st, js))
    st, js = post(pl, "/embed", {"model": "fail", "inputs": "hello"})
    check("a backend that fails the batch: 424 backend", tei_error(st, js, 424, "Backend"), (st, js))
    st, js = post(pl, "/rerank", {"model": "fail", "query": "q", "texts": ["a", "b"]})
    check("/rerank on a failing backend: 424 backend", tei_error(st, js, 424, "Backend"), (st, js))

    # 429: a slow backend holding one batch, a queue of one
    results = []

    def slow():
        results.append(post(pl, "/embed", {"model": "slow", "inputs": "hello"}))
    threads = [threading.Thread(target=slow) for _ in range(4)]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=20)
    over = [r for r in results if r[0] == 429]
    check("a full queue: 429 overloaded (others answered 200)",
          over and all(tei_error(s, j, 429, "Overloaded") for s, j in over) and any(s == 200 for s, _ in results),
          results)

    # metrics: each route its own label
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % pl, timeout=5) as r:
        text = r.read().decode()
    check("metrics count each TEI route by its label and status",
          all(s in text for s in ('route="embed",status="200"', 'route="rerank",status="200"',
                                  'route="tokenize",status="200"', 'route="embed",status="422"',
                                  'route="embed",status="424"', 'route="embed",status="413"')), "")

    # the only model, a bearer token, and a template refused at --check-config
    tokens = os.path.join(tmp, "tokens")
    open(tokens, "w").write("s3cret\n")
    cfg1 = {"log_level": "warn", "auth_tokens_file": tokens,
            "models": {"only": model_config("4x64", [pe], max_wait_ms=1,
                                            tokenizer={"sentencepiece": model, "extra_options": "bos:eos"})}}
    started = []
    p1 = start_logged(lanepack, tmp, "one", cfg1, started, ready="/healthz")
    one = started[0]
    try:
        for route, body in (("/embed", {"inputs": "x"}), ("/rerank", {"query": "q", "texts": ["x"]}),
                            ("/tokenize", {"inputs": "x"})):
            st, _ = post(p1, route, body)
            check("%s without the bearer token: 401" % route, st == 401, st)
        st, js = post(p1, "/embed", {"inputs": texts[1], "normalize": False}, token="s3cret")
        check("the only model serves a request naming none",
              st == 200 and js == [emu_vector(want[1])], (st, js))
        # a reload to a vocab_size below the tokenizer's is refused as at start
        low = dict(cfg1, listen=loopback(p1), models={"only": dict(cfg1["models"]["only"], vocab_size=100)})
        write_config(os.path.join(tmp, "one.json"), low)
        one.send_signal(signal.SIGHUP)
        log, deadline = "", time.time() + 20
        while "reload" not in log and time.time() < deadline:
            time.sleep(0.1)
            log = open(os.path.join(tmp, "one.log")).read()
        check("SIGHUP to vocab_size 100 below the tokenizer's 400 pieces: reload refused, naming both",
              "reload refused" in log and "models.only.vocab_size" in log and "400 pieces" in log, log[-400:])
        st, js = post(p1, "/embed", {"inputs": texts[1], "normalize": False}, token="s3cret")
        check("... the running configuration stays", st == 200 and js == [emu_vector(want[1])], (st, js))
    finally:
        stop_proxy(one, "the one-model lanepack")
    bad = dict(cfg1, listen=loopback(p1))
    bad["models"] = {"only": dict(cfg1["models"]["only"])}
    bad["models"]["only"]["tokenizer"] = {"sentencepiece": model, "pair_template": "<s> $A <zz> $B </s>"}
    path2 = write_config(os.path.join(tmp, "bad.json"), bad)
    r = subprocess.run([lanepack, "--config", path2, "--check-config"], capture_output=True, timeout=20)
    check("--check-config refuses a pair template naming a piece the vocabulary lacks, naming it",
          r.returncode != 0 and b"pair_template" in r.stderr and b"<zz>" in r.stderr, r.stderr[-300:])
    # a vocab_size below the tokenizer's 400 pieces: its own ids (</s>, a text's)
    # would be refused as the client's, so the configuration is refused, naming
    # both numbers; the tokenizer's own size, or none, is taken
    for vocab, ok in ((100, False), (400, True), (None, True)):
        m = dict(cfg1["models"]["only"])
        if vocab:
            m["vocab_size"] = vocab
        path3 = write_config(os.path.join(tmp, "vocab.json"), dict(cfg1, listen=loopback(p1), models={"only": m}))
        r = subprocess.run([lanepack, "--config", path3, "--check-config"], capture_output=True, timeout=20)
        if ok:
            check("--check-config takes vocab_size %s with a 400-piece tokenizer" % vocab, r.returncode == 0,
                  r.stderr[-300:])
        else:
            check("--check-config refuses vocab_size 100 below the tokenizer's 400 pieces, naming both",
                  r.returncode != 0 and b"models.only.vocab_size" in r.stderr and b"100" in r.stderr
                  and b"400 pieces" in r.stderr, r.stderr[-300:])


if __name__ == "__main__":
    main()
