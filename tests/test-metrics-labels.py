#!/usr/bin/env python3
"""/metrics stays valid Prometheus text whatever the operator names things: a
model name or backend URL with a double quote, a backslash or a newline is
escaped in every label value (one unescaped value made the whole scrape
unparseable), with one front and with several; the JSON pages keep the names
as they are; and each model is reached by its name percent-encoded in the
path, on /v1/models/{model}/infer and /v2/models/{model}/infer, as HTTP
libraries encode it.
Usage: test-metrics-labels.py LANEPACK EMULATOR"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, free_port, model_config, start_emulator, start_proxy, stop_all  # noqa: E402

lanepack, emulator = sys.argv[1], sys.argv[2]
NAMES = ['a"b', 'c\\d', 'e\nf', 'g h%20\u00e9<x>']


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read().decode()


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read() or b"{}")


def unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


# the text format's sample line: name{label="value",...} number
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{%s(,%s)*\})? \S+$' % (LABEL, LABEL))

tmp = tempfile.mkdtemp()
emu, pe = start_emulator(emulator, "2x64", ["--cost-ms", "1"])
procs = [emu]
try:
    for threads in (1, 2):
        models = {}
        for i, n in enumerate(NAMES):
            # the first model's second backend's URL holds a quote and a backslash too
            backends = [pe]
            if i == 0:
                backends.append('http://127.0.0.1:%d/"x\\y' % free_port())
            models[n] = model_config("2x64", backends)
        proxy, port = start_proxy(lanepack, os.path.join(tmp, "lp-%d.json" % threads), {
            "log_level": "error", "threads": threads, "models": models}, ready="/healthz", stderr=subprocess.DEVNULL)
        procs.append(proxy)
        st, text = get(port, "/metrics")
        check("threads %d: /metrics answers 200" % threads, st == 200, st)
        bad = [l for l in text.splitlines() if l and not l.startswith("#") and not LINE.match(l)]
        check("threads %d: every sample line is valid text format" % threads, not bad, bad[:3])
        if shutil.which("promtool"):
            pt = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
            check("threads %d: promtool check metrics parses it" % threads, pt.returncode == 0,
                  (pt.stdout + pt.stderr).decode()[:300])
        seen = set()
        for m in re.finditer(r'^lanepack_queue_sequences\{model="((?:[^"\\\n]|\\[\\"n])*)"\}', text, re.M):
            seen.add(unescape(m.group(1)))
        check("threads %d: each model's name comes back whole from its label" % threads, seen == set(NAMES),
              sorted(seen))
        urls = set(unescape(v) for v in re.findall(r'backend="((?:[^"\\\n]|\\[\\"n])*)"', text))
        check("threads %d: the backend URL with a quote and a backslash comes back whole" % threads,
              any(u.endswith('/"x\\y') for u in urls), sorted(urls)[:4])
        st, body = get(port, "/v1/models")
        names = set(m.get("name", m.get("id")) for m in json.loads(body).get("models", json.loads(body).get("data", [])))
        check("threads %d: /v1/models names them as configured" % threads, set(NAMES) <= names, sorted(names))
        reached_v1, reached_v2 = [], []
        for n in NAMES:
            q = urllib.parse.quote(n, safe="")
            st, js = post(port, "/v1/models/%s/infer" % q, {"input_ids": [1, 2, 3]})
            reached_v1.append((n, st) if st != 200 or "output" not in js else None)
            st, js = post(port, "/v2/models/%s/infer" % q,
                          {"inputs": [{"name": "input_ids", "datatype": "INT32", "shape": [1, 3], "data": [1, 2, 3]}]})
            reached_v2.append((n, st, js) if st != 200 or js.get("model_name") != n else None)
        check("threads %d: /v1/models/{model}/infer reaches each model by its encoded name" % threads,
              not any(reached_v1), [x for x in reached_v1 if x])
        check("threads %d: /v2/models/{model}/infer reaches each model by its encoded name" % threads,
              not any(reached_v2), [x for x in reached_v2 if x])
        st, js = post(port, "/v1/models/%s/infer" % "a%2", {"input_ids": [1]})
        check("threads %d: a malformed escape names no model (404 unknown_model)" % threads,
              st == 404 and js.get("error", {}).get("code") == "unknown_model", (st, js))
        stop_all([proxy])
        procs.remove(proxy)
        check("threads %d: exits 0" % threads, proxy.returncode == 0, proxy.returncode)
finally:
    stop_all(procs)
    shutil.rmtree(tmp, ignore_errors=True)
finish()
