#!/usr/bin/python3
"""lanepack-loadgen --protocol openai --verify against lanepack and the emulator
(issue 26): token-id arrays in float and base64, one and several inputs per
request, over the lanepack JSON wire and v2 binary tensors, and text (a model
trained here with spm_train on a text Debian ships) checked exactly with the
proxy's tokenizer and by form without it: every vector right, nothing failed.
Then the verify path must fail: an emulator answering 8 floats where 16 are
expected, and text tokenized with other options than the proxy's.

Usage: test-loadgen-openai.py LANEPACK EMULATOR LOADGEN"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, finish, model_config, run_loadgen_bounded, start_emulator, start_proxy,  # noqa: E402
                    stop_proxy, train_spm)

lanepack, emulator, loadgen = sys.argv[1], sys.argv[2], sys.argv[3]
TEXT = "/usr/share/common-licenses/GPL-3"
DIMS = 16
SHAPES = "4x64,8x128"
# few enough to take a second or two, enough to fill many batches
REQUESTS = 400


# The trained tokenizer's vocabulary: token ids sent to its models stay below
# it (a model with a tokenizer and no vocab_size refuses ids past it).
VOCAB = 400

def load(port, tmp, name, args):
    """One bounded closed-loop run; (exit code, its --json report, stderr)."""
    return run_loadgen_bounded(loadgen, "http://127.0.0.1:%d" % port, os.path.join(tmp, name + ".json"), REQUESTS,
                               ["--protocol", "openai", "--verify", "--dims", str(DIMS)] + args)


def main():
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        spm = train_spm(tmp, TEXT, VOCAB)
        try:
            # one emulator on both wires, 16 floats per segment; another with 8
            p, emu = start_emulator(emulator, SHAPES,
                                    ["--per-segment", "--dims", str(DIMS), "--cost-ms", "0", "--protocol", "both"])
            procs.append(p)
            p, wrong = start_emulator(emulator, SHAPES, ["--per-segment", "--dims", "8", "--cost-ms", "0"])
            procs.append(p)
            tok = {"sentencepiece": spm}
            p, port = start_proxy(lanepack, os.path.join(tmp, "lanepack.json"), {"log_level": "warn", "models": {
                "emb": model_config(SHAPES, [emu], max_wait_ms=1, tokenizer=tok),
                "emb2": model_config(SHAPES, [emu], max_wait_ms=1, tokenizer=tok, protocol="v2",
                                     v2={"model": "lanepack_{lanes}x{bucket}", "output_kind": "per_segment"}),
                "wrong": model_config(SHAPES, [wrong], max_wait_ms=1, tokenizer=tok)}})
            procs.append(p)
            ids = ["--lengths", "uniform:1,120", "--vocab", str(VOCAB)]
            text = ["--text", TEXT]
            exact = text + ["--tokenizer", spm]
            good = [
                ("token ids, float, one input per request", "emb", ids + ["--encoding", "float"]),
                ("token ids, base64, 4 inputs per request", "emb", ids + ["--encoding", "base64", "--batch", "4"]),
                ("token ids over v2 binary tensors, float", "emb2", ids + ["--encoding", "float"]),
                ("token ids over v2 binary tensors, base64, 3 per request", "emb2",
                 ids + ["--encoding", "base64", "--batch", "3"]),
                ("text, exact with the proxy's tokenizer, base64, 5 per request", "emb",
                 exact + ["--encoding", "base64", "--batch", "5"]),
                ("text by form (no tokenizer here), float, 2 per request", "emb", text + ["--batch", "2"]),
            ]
            for i, (name, model, args) in enumerate(good):
                rc, rep, err = load(port, tmp, "good%d" % i, ["--model", model] + args)
                check("%s: %d answered, every vector verified" % (name, REQUESTS),
                      rc == 0 and rep.get("ok") == REQUESTS and rep.get("mismatches") == 0 and rep.get("failed") == 0,
                      (rc, {k: rep.get(k) for k in ("ok", "failed", "mismatches", "by_status")}, err[-300:]))
            bad = [
                ("an emulator answering 8 floats, 16 expected", "wrong", ids),
                ("the same, by form (text)", "wrong", text),
                ("text tokenized with bos:eos, the proxy without", "emb", exact + ["--tokenizer-options", "bos:eos", "--batch", "5"]),
            ]
            for i, (name, model, args) in enumerate(bad):
                rc, rep, err = load(port, tmp, "bad%d" % i, ["--model", model] + args)
                check("%s: every answer a mismatch, exit 3, the reason printed" % name,
                      rc == 3 and rep.get("mismatches") == REQUESTS and rep.get("ok") == 0
                      and "mismatch: data[0]" in err,
                      (rc, {k: rep.get(k) for k in ("ok", "mismatches", "by_status")}, err[-300:]))
        finally:
            for p in procs:
                if p.args[0] == lanepack:
                    stop_proxy(p)
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(10)
    finish()


main()
