#!/usr/bin/python3
"""GET /v1/buckets/advice?k=K&p99_ms=X on a running proxy with some traffic
(issue 21): the simulated advice from the live length histogram, the device
times the backends' clocks learned and the observed rate; the same query again
answers from the cache; without p99_ms the padding answer stays; bad values get
400 with a JSON error naming the parameter.

Usage: test-advice-live.py LANEPACK EMULATOR"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, finish, loopback, model_config,  # noqa: E402
                    start_emulator, start_proxy, stop_all, stop_proxy)

lanepack, emulator = sys.argv[1], sys.argv[2]


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read().decode()
    try:
        return r.status, json.loads(body)
    except ValueError:
        return r.status, body


def infer(port, lens):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for n in lens:
        c.request("POST", "/v1/models/m/infer", json.dumps({"input_ids": list(range(1, n + 1))}),
                  {"Content-Type": "application/json"})
        c.getresponse().read()


with tempfile.TemporaryDirectory() as tmp:
    emu, be_port = start_emulator(emulator, "8x128,4x512",
                                  ["--cost-ms", "8x128=4", "--cost-ms", "4x512=9", "--devices", "1"])
    lp = None
    try:
        lp, lp_port, admin_port = start_proxy(lanepack, os.path.join(tmp, "lp.json"), lambda lp, adm: {
            "listen": loopback(lp), "admin_listen": loopback(adm), "log_level": "warn",
            "models": {"m": model_config("8x128,4x512", [be_port], max_wait_ms=2)}}, nports=2,
            stderr=subprocess.PIPE)
        # before any traffic: nothing to advise on
        st, body = get(admin_port, "/v1/buckets/advice?k=2&p99_ms=100")
        check("no traffic yet: 409", st == 409 and isinstance(body, dict), (st, body))

        # some traffic: short and long sequences from 4 clients
        mixes = [[20 + 7 * i % 90 for i in range(25)], [300 + 11 * i % 200 for i in range(10)],
                 [40 + 13 * i % 60 for i in range(25)], [60 + 5 * i % 50 for i in range(20)]]
        ts = [threading.Thread(target=infer, args=(lp_port, m)) for m in mixes]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

        st, a = get(admin_port, "/v1/buckets/advice?k=2&p99_ms=100")
        check("advice: 200 with JSON", st == 200 and isinstance(a, dict), (st, a))
        if st == 200 and isinstance(a, dict):
            check("advice: computed, not cached, on the 80 sequences seen",
                  a.get("cached") is False and a.get("observed") == 80, a)
            check("advice: the rate is the observed one", a.get("rate_from") == "observed" and a["rate"] > 0, a)
            cur, adv = a["current"], a["advice"]
            check("advice: the current set is the configured one",
                  [(s["lanes"], s["bucket"]) for s in cur["shapes"]] == [(8, 128), (4, 512)], cur)
            check("advice: the current shapes' costs are the device times learned (measured)",
                  all(s["cost"] == "measured" for s in cur["shapes"]) and
                  abs(cur["shapes"][1]["cost_ms"] - 9) < 3, cur)
            longest = max(max(m) for m in mixes)
            check("advice: at most 2 shapes, the largest holds the longest sequence (%d)" % longest,
                  1 <= len(adv["shapes"]) <= 2 and adv["shapes"][-1]["bucket"] >= longest and
                  a["longest"] == longest, (longest, a))
            check("advice: capacities and p99s simulated",
                  cur["capacity_rps"] > 0 and adv["capacity_rps"] > 0 and adv["p99_ms"] > 0 and
                  adv["devices_needed"] >= 1, a)
            check("advice: the cost model was fitted from the measured shapes",
                  a["cost_model"]["measured_shapes"] == 2 and a["cost_model"]["per_slot_us"] > 0, a)
            check("advice: bounded in CPU time (%s ms; well under 2 s even under ASan on a loaded machine)"
                  % a.get("cpu_ms"),
                  a.get("cpu_ms", 1e9) < 2000, a.get("cpu_ms"))
            st, b = get(admin_port, "/v1/buckets/advice?k=2&p99_ms=100")
            check("the same query again: from the cache, the same advice",
                  st == 200 and b.get("cached") is True and b["advice"] == adv, b)
            st, b = get(admin_port, "/v1/buckets/advice?k=1&p99_ms=50&rate=500")
            check("another query with a rate: computed for it",
                  st == 200 and b.get("cached") is False and b["rate_from"] == "query" and b["rate"] == 500 and
                  len(b["advice"]["shapes"]) == 1, b)

        st, b = get(admin_port, "/v1/buckets/advice?k=2")
        check("without p99_ms: the padding answer as before",
              st == 200 and isinstance(b, dict) and "proposals" in b and "current" in b, (st, b))

        for q, name in (("k=2&p99_ms=abc", "p99_ms"), ("k=2&p99_ms=0", "p99_ms"), ("k=2&p99_ms=-5", "p99_ms"),
                        ("k=2&p99_ms=1e400", "p99_ms"), ("k=0&p99_ms=10", "k"), ("k=9&p99_ms=10", "k"),
                        ("k=2&p99_ms=10&rate=x", "rate"), ("k=2&p99_ms=10&rate=0", "rate"), ("k=2&p99_ms=10&rate=1e-300", "rate"),
                        ("k=2&rate=10", "rate")):
            st, b = get(admin_port, "/v1/buckets/advice?" + q)
            text = json.dumps(b)
            check("?%s: 400 with a JSON error naming %s" % (q, name),
                  st == 400 and isinstance(b, dict) and name in text, (st, b))
    finally:
        if lp is not None:
            stop_proxy(lp)
        stop_all([emu])
finish()
