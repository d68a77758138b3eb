#!/usr/bin/env python3
"""No admin page can stall dispatch (issue 25): clients asking the simulated
shape advice (/v1/buckets/advice?k=3&p99_ms=N, a new N each time so no cache
helps), /v1/models and /metrics as fast as they are answered must not delay a
steady inference load. Before the advice ran on a worker, it simulated on the
scheduler's loop (0.1-0.2 s a call) and four such clients took inference p99
from milliseconds to seconds. Past the advisor's bound the answer is 429 with
Retry-After and a JSON error; equal requests share one computation.
Arguments: the lanepack and lanepack-emulator binaries, the thread count."""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, emu_outputs, finish, model_config,  # noqa: E402
                    start_emulator, start_proxy, stop_all, threads_args)

# the steady load: one request every STEP_S on each of CLIENTS connections
CLIENTS, STEP_S = 2, 0.02
QUIET_S, FLOOD_S = 3.0, 4.0


def get(port, path, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, r.getheader("Retry-After"), body


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))] if xs else float("inf")


def main():
    proxy_bin, emu_bin, nthreads = threads_args(1)
    tmp = tempfile.mkdtemp()
    emu_p, emu_port = start_emulator(emu_bin, "8x128,4x512", ["--cost-ms", "8x128=3", "--cost-ms", "4x512=6"])
    proxy = None
    phase = {"name": "warm"}
    lat = {"warm": [], "quiet": [], "flood": []}
    wrong = []
    stop = threading.Event()
    advice = {"ok": 0, "busy": 0, "busy_bad": [], "other": []}

    def steady(ci):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        i = 0
        while not stop.is_set():
            n = 5 + (i * 37 + ci * 11) % 300
            toks = [(i + k) % 1000 + 1 for k in range(n)]
            t0 = time.time()
            try:
                c.request("POST", "/v1/models/m/infer", json.dumps({"input_ids": toks}),
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                body = r.read()
                dt = time.time() - t0
                if r.status != 200 or json.loads(body)["output"] != emu_outputs(toks):
                    wrong.append((r.status, body[:120]))
                lat[phase["name"]].append(dt)
            except (OSError, http.client.HTTPException) as e:
                wrong.append(type(e).__name__)
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            i += 1
            time.sleep(STEP_S)

    def flooder(fi):
        n = 0
        while not stop.is_set():
            n += 1
            try:
                path = "/v1/buckets/advice?k=3&p99_ms=%d" % (20 + fi * 1000 + n)
                st, ra, body = get(port, path)
                if st == 200:
                    advice["ok"] += 1
                elif st == 429:
                    advice["busy"] += 1
                    if not ra or json.loads(body)["error"]["code"] != "advisor_busy":
                        advice["busy_bad"].append((ra, body[:120]))
                else:
                    advice["other"].append((st, body[:160]))
                get(port, "/v1/models")
                get(port, "/metrics")
            except (OSError, http.client.HTTPException, ValueError, KeyError) as e:
                advice["other"].append(type(e).__name__)

    try:
        proxy, port = start_proxy(proxy_bin, os.path.join(tmp, "lanepack.json"), {
            "threads": nthreads, "log_level": "warn",
            "models": {"m": model_config("8x128,4x512", [emu_port], max_wait_ms=2)}}, stderr=subprocess.DEVNULL)
        ts = [threading.Thread(target=steady, args=(i,)) for i in range(CLIENTS)]
        for t in ts:
            t.start()
        time.sleep(2.0)  # lengths and device times observed: the advice has data
        phase["name"] = "quiet"
        time.sleep(QUIET_S)
        fl = [threading.Thread(target=flooder, args=(i,)) for i in range(4)]
        phase["name"] = "flood"
        for t in fl:
            t.start()
        time.sleep(FLOOD_S)
        stop.set()
        for t in ts + fl:
            t.join(60)
        q, f = p99(lat["quiet"]), p99(lat["flood"])
        print("inference p99 quiet %.1f ms (%d), under the flood %.1f ms (%d); advice 200: %d, 429: %d"
              % (q * 1e3, len(lat["quiet"]), f * 1e3, len(lat["flood"]), advice["ok"], advice["busy"]))
        check("every inference answered right", not wrong, wrong[:3])
        check("inferences ran in both phases", len(lat["quiet"]) > 20 and len(lat["flood"]) > 20,
              (len(lat["quiet"]), len(lat["flood"])))
        # a loose bound (a shared 2-core machine, the sanitizer suite beside
        # this one): before the fix this was 1,130 ms against 9.5 quiet
        check("inference p99 under the advice flood within 3x quiet + 150 ms", f <= 3 * q + 0.150,
              (round(q * 1e3, 1), round(f * 1e3, 1)))
        check("advice computed under the flood", advice["ok"] >= 1, advice)
        check("advice answers are 200, or 429 with Retry-After and code advisor_busy",
              not advice["other"] and not advice["busy_bad"], advice)
        # equal requests share one computation: 6 at once, each answered 200 or 429
        res = []

        def same():
            res.append(get(port, "/v1/buckets/advice?k=2&p99_ms=77777")[0])
        sm = [threading.Thread(target=same) for _ in range(6)]
        for t in sm:
            t.start()
        for t in sm:
            t.join(60)
        check("six equal requests at once are answered 200", res == [200] * 6, res)
        st, _, body = get(port, "/v1/buckets/advice?k=2&p99_ms=77777")
        check("the same request again comes from the cache", st == 200 and json.loads(body)["cached"] is True,
              (st, body[:160]))
        # past the bound (one running, four queued): 429 with Retry-After, the rest computed
        burst = []

        def distinct(n):
            st, ra, body = get(port, "/v1/buckets/advice?k=2&p99_ms=%d" % (90000 + n))
            burst.append((st, ra, json.loads(body).get("error", {}).get("code") if st != 200 else None))
        bt = [threading.Thread(target=distinct, args=(n,)) for n in range(10)]
        for t in bt:
            t.start()
        for t in bt:
            t.join(60)
        busy = [b for b in burst if b[0] == 429]
        check("ten distinct requests at once: some 429 advisor_busy with Retry-After, the rest 200",
              busy and all(b == (429, "1", "advisor_busy") for b in busy)
              and all(b[0] == 200 for b in burst if b[0] != 429) and len(burst) == 10, burst)
    finally:
        stop.set()
        if proxy is not None and proxy.poll() is None:
            proxy.terminate()
            try:
                rc = proxy.wait(20)
            except subprocess.TimeoutExpired:
                proxy.kill()
                rc = proxy.wait()
            check("the proxy exits 0 on SIGTERM", rc == 0, rc)
        stop_all([emu_p])
    finish()


if __name__ == "__main__":
    main()
