#!/usr/bin/env python3
"""Issue 33's soak: the mixed load of three lanepack-loadgen at once (v1 token
ids, v2 binary tensors, OpenAI text through a SentencePiece tokenizer) against
one emulator that fails 2% of its batches, resets 1% and stalls 0.5%, for
--seconds (60 in the suite; LP_TEST_SOAK=1 runs 30 minutes from
scripts/test.sh). Checks: every request answered (no connection error nor
client timeout), none over 2 s in the proxy (the access log's queue_ms and
total_ms), no load generator crashed, and the proxy's RSS, printed every 10 s,
flat after the first minute (runs shorter than two minutes print it only).

The proxy's /metrics must show no time with work waiting while the device was
idle (lanepack_idle_with_work_seconds_total). A debug build (the sanitizers')
also checks the dispatch core's invariants after every event and aborts.

Usage: test-soak.py LANEPACK EMULATOR LOADGEN [--threads N] [--seconds S]
    [--scale F] [--backend-v2] [--log-level L] [--keep DIR]"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lphelp  # noqa: E402
from lphelp import check, finish, model_config, rss_kb, start_emulator, start_proxy, stop_all, train_spm  # noqa: E402


def lphelp_results():
    return lphelp._results

TEXT = "/usr/share/common-licenses/GPL-3"
SHAPES = "8x512,4x2048"
FAULTS = ["--fail-rate", "0.02", "--reset-rate", "0.01", "--stall-rate", "0.005"]
# the bound: no request over 2 s in the proxy (the freeze was 30 s)
LIMIT_MS = 2000.0
# lanepack_idle_with_work_seconds_total may count this much: the core sends at
# once when a device frees, so anything but rounding is the freeze
IDLE_SLACK_S = 0.5
# RSS after the first minute may grow by this much over its value at one
# minute (allocator noise, a histogram's buckets) and no more
RSS_SLACK_KB = 16 * 1024


def loadgens(port, seconds, scale):
    def rate(r):
        return str(max(1, int(r * scale)))
    base = [
        "--url", "http://127.0.0.1:%d" % port, "--duration", "%ds" % seconds, "--timeout", "60s",
        "--model", "default"]
    return [
        ("v1", base + ["--lengths", "lognormal:mu=4,sigma=1,max=2000", "--vocab", "800", "--rate", rate(300),
                       "--connections", "32"]),
        ("v2", base + ["--protocol", "v2", "--binary", "--lengths", "lognormal:mu=5,sigma=0.7,max=2000",
                       "--vocab", "800", "--rate", rate(150), "--connections", "16"]),
        ("openai", base + ["--protocol", "openai", "--text", TEXT, "--batch", "4", "--rate", rate(100),
                           "--connections", "16"]),
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lanepack")
    ap.add_argument("emulator")
    ap.add_argument("loadgen")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--keep", default="", help="keep the logs in this directory")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="the loadgens' rates times this (the sanitizer builds run at half)")
    ap.add_argument("--backend-v2", action="store_true", help="the model speaks v2 to the emulator")
    a = ap.parse_args()
    tmp = a.keep or tempfile.mkdtemp(prefix="lp-soak-")
    os.makedirs(tmp, exist_ok=True)
    procs = []
    try:
        spm = train_spm(tmp, TEXT, 800)
        emu, emu_port = start_emulator(a.emulator, SHAPES, ["--cost-ms", "2", "--protocol", "both", "--per-segment",
                                                            "--dims", "8", "--seed", "33"] + FAULTS,
                                       stderr=open(os.path.join(tmp, "emu.log"), "wb"))
        procs.append(emu)
        alog = os.path.join(tmp, "access.log")
        model = model_config(SHAPES, [emu_port], max_wait_ms=3, tokenizer={"sentencepiece": spm})
        if a.backend_v2:
            model.update({"protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}", "output_kind": "per_segment"}})
        proxy, port = start_proxy(a.lanepack, os.path.join(tmp, "lanepack.json"), {
            "log_level": a.log_level, "access_log": alog, "threads": a.threads, "models": {"default": model}},
            stderr=open(os.path.join(tmp, "proxy.log"), "wb"))
        procs.append(proxy)
        gens = []
        for name, args in loadgens(port, a.seconds, a.scale):
            out = os.path.join(tmp, "loadgen-%s.json" % name)
            p = subprocess.Popen([a.loadgen] + args + ["--json", out], stdout=subprocess.DEVNULL,
                                 stderr=open(os.path.join(tmp, "loadgen-%s.log" % name), "wb"))
            gens.append((name, p, out))
        t0 = time.monotonic()
        rss = []  # (seconds, KiB)
        while any(p.poll() is None for _, p, _ in gens):
            time.sleep(1)
            t = time.monotonic() - t0
            if proxy.poll() is not None:
                break
            if t >= 10 * (len(rss) + 1):
                rss.append((t, rss_kb(proxy.pid)))
                print("# %4.0f s: proxy RSS %d KiB" % rss[-1], flush=True)
            if t > a.seconds + 120:
                break
        check("the proxy ran through the soak", proxy.poll() is None, "exit %s" % proxy.poll())
        idle = None
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith("lanepack_idle_with_work_seconds_total{"):
                        idle = float(line.split()[-1])
        except OSError as e:
            idle = "unreadable: %s" % e
        print("# lanepack_idle_with_work_seconds_total %s" % idle, flush=True)
        check("no time with work waiting and the device idle (by the core's view)",
              isinstance(idle, float) and idle <= IDLE_SLACK_S, idle)
        for name, p, out in gens:
            if p.poll() is None:
                p.kill()
            rc = p.wait()
            rep = {}
            try:
                with open(out) as f:
                    rep = json.load(f)
            except (OSError, ValueError):
                pass
            check("loadgen %s exited 0" % name, rc == 0, "exit %d (%s)" % (rc, tmp))
            sent = rep.get("sent", 0)
            lost = {k: rep.get(k) for k in ("connection_errors", "timeouts", "client_errors") if rep.get(k)}
            print("# loadgen %s: %s, latency_ms %s" % (name, json.dumps({k: rep.get(k) for k in (
                "sent", "answered", "ok", "by_status")}), json.dumps(rep.get("latency_ms"))), flush=True)
            check("loadgen %s: every request answered" % name,
                  sent > 0 and rep.get("answered") == sent and not lost, json.dumps(rep)[:300])
        worst_q = worst_t = 0.0
        n = over = 0
        with open(alog) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("path", "").startswith(("/healthz", "/readyz", "/metrics")):
                    continue
                n += 1
                q, t = float(e.get("queue_ms", 0)), float(e.get("total_ms", 0))
                worst_q, worst_t = max(worst_q, q), max(worst_t, t)
                over += max(q, t) > LIMIT_MS
        print("# access log: %d requests, max queue_ms %.1f, max total_ms %.1f" % (n, worst_q, worst_t))
        check("the access log has the soak's requests", n > a.seconds * 100, n)
        check("no request over %.0f ms in the proxy" % LIMIT_MS, over == 0,
              "%d over; max queue_ms %.1f, total_ms %.1f (%s)" % (over, worst_q, worst_t, tmp))
        after = [kb for t, kb in rss if t >= 60]
        if len(after) >= 2:
            check("RSS flat after the first minute", max(after) - after[0] <= RSS_SLACK_KB,
                  "%d KiB at 1 min, %d KiB at most after" % (after[0], max(after)))
    finally:
        stop_all(procs)
    if not a.keep and all(_ok for _ok in lphelp_results()):
        shutil.rmtree(tmp, ignore_errors=True)  # kept (and named above) when a check failed
    finish()


if __name__ == "__main__":
    main()
