#!/usr/bin/env python3
"""/metrics stays valid Prometheus text whatever the operator names things: a
model name or backend URL with a double quote, a backslash or a newline is
escaped in every label value (one unescaped value made the whole scrape
unparseable), with one front and with several; the JSON pages keep the names
as they are.
Usage: test-metrics-labels.py LANEPACK EMULATOR"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, free_port, stop_all, wait_http  # noqa: E402

lanepack, emulator = sys.argv[1], sys.argv[2]
NAMES = ['a"b', 'c\\d', 'e\nf', 'g h%20\u00e9<x>']


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read().decode()


def unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), v)


# the text format's sample line: name{label="value",...} number
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{%s(,%s)*\})? \S+$' % (LABEL, LABEL))

tmp = tempfile.mkdtemp()
pe = free_port()
procs = [subprocess.Popen([emulator, "--listen", "127.0.0.1:%d" % pe, "--shapes", "2x64", "--cost-ms", "1"],
                          stderr=subprocess.DEVNULL)]
try:
    wait_http(pe, "/healthz")
    for threads in (1, 2):
        port = free_port()
        models = {}
        for i, n in enumerate(NAMES):
            # the first model's second backend's URL holds a quote and a backslash too
            backends = ["http://127.0.0.1:%d" % pe]
            if i == 0:
                backends.append('http://127.0.0.1:%d/"x\\y' % free_port())
            models[n] = {"shapes": "2x64", "backends": backends}
        cfg = os.path.join(tmp, "lp-%d.json" % threads)
        with open(cfg, "w") as f:
            json.dump({"listen": "127.0.0.1:%d" % port, "log_level": "error", "threads": threads,
                       "models": models}, f)
        proxy = subprocess.Popen([lanepack, "--config", cfg], stderr=subprocess.DEVNULL)
        procs.append(proxy)
        wait_http(port, "/healthz")
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
        stop_all([proxy])
        procs.remove(proxy)
        check("threads %d: exits 0" % threads, proxy.returncode == 0, proxy.returncode)
finally:
    stop_all(procs)
    shutil.rmtree(tmp, ignore_errors=True)
finish()
