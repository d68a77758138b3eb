#!/usr/bin/python3
"""lanepack-loadgen tells why (issue 35): GET /v1/models names the vocabulary of
a model with a tokenizer and loadgen draws ids below it by default (all were
refused with the old default of 32,000); error answers counted by the code in
their bodies in each dialect (lanepack's, OpenAI's, v2's, TEI's); exit 4 when
no request succeeded, and with --min-ok when too few did; with --verify and
every answer wrong, latency and throughput of the answers still reported,
mismatches counted apart from failures and each printed with what was expected
and what came at the first index that differs.

Usage: test-loadgen-why.py LANEPACK EMULATOR LOADGEN"""
import http.client
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, finish, loopback, model_config, run_loadgen_bounded, start_emulator, start_proxy,  # noqa: E402
                    stop_all, train_spm)

lanepack, emulator, loadgen = sys.argv[1], sys.argv[2], sys.argv[3]
TEXT = "/usr/share/common-licenses/GPL-3"
SHAPES = "4x64,8x128"
VOCAB = 400  # the tokenizer trained here: far below loadgen's fallback of 32,000
REQUESTS = 200
DIMS = 8


def load(port, tmp, name, args, path=""):
    """One bounded closed-loop run; (exit code, its --json report, stderr)."""
    return run_loadgen_bounded(loadgen, "http://127.0.0.1:%d%s" % (port, path), os.path.join(tmp, name + ".json"),
                               REQUESTS, args)


def vocab_line(port):
    """A short run without --vocab on port: (the report's token ids lines, the run)."""
    r = subprocess.run([loadgen, "--url", "http://127.0.0.1:%d" % port, "--concurrency", "2", "--max-requests", "4",
                        "--duration", "30s", "--model", "tok", "--lengths", "fixed:5"],
                       capture_output=True, text=True, timeout=60)
    return [l for l in r.stdout.splitlines() if l.startswith("token ids")], r


def brief(rep):
    keys = ("sent", "answered", "ok", "failed", "mismatches", "by_status", "by_error", "latency_answered_ms")
    return {k: rep.get(k) for k in keys}


def main():
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        spm = train_spm(tmp, TEXT, VOCAB)
        try:
            # "seg": one vector of DIMS values per segment, where the JSON
            # route's --verify expects one value per token: every answer a mismatch
            p, emu = start_emulator(emulator, SHAPES, ["--cost-ms", "0", "--protocol", "both"])
            procs.append(p)
            p, seg = start_emulator(emulator, SHAPES, ["--cost-ms", "0", "--per-segment", "--dims", str(DIMS)])
            procs.append(p)
            tok = {"sentencepiece": spm}
            p, port = start_proxy(lanepack, os.path.join(tmp, "lanepack.json"), {"log_level": "warn", "models": {
                "tok": model_config(SHAPES, [emu], max_wait_ms=1, tokenizer=tok),
                "tok2": model_config(SHAPES, [emu], max_wait_ms=1, tokenizer=tok,
                                     protocol="v2", v2={"model": "lanepack_{lanes}x{bucket}"}),
                # OpenAI's route needs a vector per sequence (a value per token is refused)
                "tokseg": model_config(SHAPES, [seg], max_wait_ms=1, tokenizer=tok),
                "plain": model_config(SHAPES, [emu], max_wait_ms=1),
                "seg": model_config(SHAPES, [seg], max_wait_ms=1)}})
            procs.append(p)

            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/v1/models")
            models = {m["name"]: m for m in json.loads(c.getresponse().read())["models"]}
            check("GET /v1/models names the vocabulary of a model with a tokenizer, none for one without",
                  models["tok"].get("vocab_size") == VOCAB and "vocab_size" not in models["plain"],
                  {k: m.get("vocab_size") for k, m in models.items()})

            # ---- --vocab defaults to the model's ----
            rc, rep, err = load(port, tmp, "vocab", ["--model", "tok", "--lengths", "uniform:1,100"])
            check("without --vocab, ids below the model's vocabulary: every request ok",
                  rc == 0 and rep.get("ok") == REQUESTS, (rc, brief(rep), err[-300:]))
            rc, rep, err = load(port, tmp, "vocab-openai",
                                ["--protocol", "openai", "--model", "tokseg", "--lengths", "uniform:1,100"])
            check("the same on OpenAI's route", rc == 0 and rep.get("ok") == REQUESTS, (rc, brief(rep), err[-300:]))
            rc, rep, err = load(port, tmp, "vocab-path", ["--lengths", "uniform:1,100"], "/v1/models/tok/infer")
            check("the same with the model named in the URL's path", rc == 0 and rep.get("ok") == REQUESTS,
                  (rc, brief(rep), err[-300:]))

            # ---- GET /v1/models unreadable: the default, and why, said ----
            # (admin_listen puts /v1/models on the other port: 404 here)
            models_cfg = {"tok": model_config(SHAPES, [emu], max_wait_ms=1, tokenizer=tok)}
            p, aport, _ = start_proxy(lanepack, os.path.join(tmp, "admin.json"), lambda a, b: {
                "log_level": "warn", "listen": loopback(a), "admin_listen": loopback(b), "models": models_cfg},
                nports=2)
            procs.append(p)
            line, r = vocab_line(aport)
            check("/v1/models on the admin port: the report's line and stderr say the default and GET /v1/models' 404",
                  line and "32000" in line[0] and "GET /v1/models answered 404" in line[0]
                  and "GET /v1/models answered 404" in r.stderr, (line, r.stderr[-300:]))
            tokens = os.path.join(tmp, "tokens")
            open(tokens, "w").write("s3cret\n")
            p, tport = start_proxy(lanepack, os.path.join(tmp, "auth.json"), {
                "log_level": "warn", "auth_tokens_file": tokens, "models": models_cfg})
            procs.append(p)
            line, r = vocab_line(tport)
            check("auth tokens, none sent: the report's line and stderr say GET /v1/models answered 401",
                  line and "GET /v1/models answered 401" in line[0] and "GET /v1/models answered 401" in r.stderr,
                  (line, r.stderr[-300:]))

            # ---- error codes in each dialect; exit 4 when none succeeded ----
            dialects = [
                ("lanepack's", ["--model", "tok"], ""),
                ("OpenAI's", ["--protocol", "openai", "--model", "tok"], ""),
                ("v2's", ["--protocol", "v2", "--model", "tok2"], ""),
                ("TEI's", ["--model", "tok"], "/embed"),
            ]
            for name, args, path in dialects:
                rc, rep, err = load(port, tmp, "codes", args + ["--lengths", "fixed:20", "--vocab", "100000"], path)
                by_error = rep.get("by_error") or {}
                codes = [k for k in by_error if k != "-"]
                check("%s errors: counted by their code (%s), every refusal once; exit 4, said why" % (name, codes),
                      rc == 4 and rep.get("ok") == 0 and rep.get("failed") == REQUESTS and len(by_error) == 1
                      and len(codes) == 1 and by_error[codes[0]] == REQUESTS and "none succeeded" in err,
                      (rc, brief(rep), err[-300:]))

            # the text report of a run with no ok answer gives no p99 of 0.00 (a fast run, read so)
            r = subprocess.run([loadgen, "--url", "http://127.0.0.1:%d" % port, "--concurrency", "8", "--max-requests",
                                "50", "--duration", "30s", "--model", "tok", "--lengths", "fixed:20", "--vocab", "100000"],
                               capture_output=True, text=True, timeout=60)
            summary = [l for l in r.stdout.splitlines() if l.startswith("summary")]
            check("no ok answer: the summary line says so, no p99 0.00", summary and "no ok answer" in summary[0]
                  and "p99 0.00" not in summary[0], (summary, r.stdout[-400:]))

            # ---- --min-ok: half the requests are too long for the largest shape ----
            mix = ["--model", "plain", "--vocab", "1000", "--lengths", "0.5*fixed:20+0.5*fixed:300"]
            rc, rep, err = load(port, tmp, "minok-high", mix + ["--min-ok", "0.9"])
            frac = rep.get("ok", 0) / max(rep.get("sent", 1), 1)
            check("--min-ok 0.9 with %.2f ok: exit 4, said why" % frac,
                  rc == 4 and 0.2 < frac < 0.8 and "below --min-ok 0.9" in err
                  and (rep.get("by_error") or {}).get("sequence_too_long") == rep.get("failed"),
                  (rc, brief(rep), err[-300:]))
            rc, rep, err = load(port, tmp, "minok-low", mix + ["--min-ok", "0.1"])
            check("--min-ok 0.1 with some ok: exit 0", rc == 0 and rep.get("ok", 0) > 0, (rc, brief(rep), err[-300:]))
            rc, rep, err = load(port, tmp, "minok-default", mix)
            check("without --min-ok, some ok: exit 0", rc == 0 and rep.get("ok", 0) > 0, (rc, brief(rep), err[-300:]))

            # ---- --verify, every answer wrong ----
            rc, rep, err = load(port, tmp, "verify", ["--model", "seg", "--vocab", "1000", "--lengths",
                                                      "fixed:%d" % DIMS, "--verify"])
            lat = rep.get("latency_answered_ms") or {}
            lines = [l for l in err.splitlines() if "mismatch:" in l]
            check("every answer a mismatch, counted apart from failures; exit 3",
                  rc == 3 and rep.get("mismatches") == REQUESTS and rep.get("failed") == 0 and rep.get("ok") == 0,
                  (rc, brief(rep), err[-300:]))
            check("latency and throughput of the answers reported (p50 %.2f ms, %.1f answered/s)"
                  % (lat.get("p50", 0), rep.get("answered_per_s", 0)),
                  lat.get("p50", 0) > 0 and lat.get("max", 0) >= lat.get("p50", 0) and rep.get("answered_per_s", 0) > 0,
                  brief(rep))
            print("# %s" % (lines[0] if lines else "(no mismatch line)"))
            check("a mismatch line says what was expected and what came at the first differing index",
                  lines and "expected" in lines[0] and "got" in lines[0] and "output[" in lines[0], lines[:3])
        finally:
            stop_all(procs)
    finish()


main()
