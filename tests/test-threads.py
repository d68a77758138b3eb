#!/usr/bin/env python3
"""Several front threads around one scheduler (configuration key threads):
thousands of requests over many connections, every answer checked against the
emulator's function of its tokens; every thread served some
(lanepack_front_requests_total{thread=...}); clients that leave mid-flight;
a reload that gives every front new tokens and takes them away again; access
log lines whole and request ids unique across threads; and SIGTERM with
requests queued: each answered, the process exits 0.
Arguments: the lanepack and lanepack-emulator binaries, and the thread count."""
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from lphelp import (check, emu_outputs, finish, loopback, model_config,
                    start_emulator, start_proxy, threads_args, write_config)

def post(c, body, headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", "/v1/infer", body=json.dumps(body), headers=h)
    r = c.getresponse()
    return r.status, r.read()


def metrics(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    return text


def metric(text, name, labels=""):
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def wait_taken(port, results, timeout=10):
    """Waits until the proxy has taken in every request whose result slot is
    in results, counted as the proxy counts them (requests waiting plus
    requests at the backend of model m) plus those already answered; returns
    how many it holds, None if not all were taken in time. A request still in
    a socket the proxy has not accepted is reset when a drain closes the
    listener, as nginx's would be: a test sending SIGTERM waits for this.
    Counting batches or sleeping was not enough (CI: one request of six reset).
    The answers are read before the page, so none is counted twice (an
    answered request has left the model's gauges)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        answered = sum(r is not None for r in results)
        text = metrics(port)
        held = (metric(text, "lanepack_requests_waiting", '{model="m"}') or 0) + \
               (metric(text, "lanepack_requests_running", '{model="m"}') or 0)
        if held + answered >= len(results):
            return held
        time.sleep(0.02)
    return None


def load(port, nconn, per_conn, seed, errors, served, headers=None):
    """per_conn requests on each of nconn connections at once; every answer
    checked against the emulator's function."""
    def client(k):
        rng = random.Random(seed * 1000 + k)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for _ in range(per_conn):
            try:
                if rng.random() < 0.2:
                    seqs = [[rng.randrange(50000) for _ in range(rng.randint(1, 64))] for _ in range(rng.randint(2, 4))]
                    st, body = post(c, {"inputs": seqs, "id": k}, headers)
                    ans = json.loads(body) if st == 200 else None
                    ok = st == 200 and ans["id"] == k and ans["outputs"] == [emu_outputs(s) for s in seqs]
                else:
                    toks = [rng.randrange(50000) for _ in range(rng.randint(1, 64))]
                    st, body = post(c, {"input_ids": toks}, headers)
                    ok = st == 200 and json.loads(body)["output"] == emu_outputs(toks)
            except (OSError, http.client.HTTPException, ValueError) as e:
                ok, st, body = False, type(e).__name__, str(e)
            if ok:
                served.append(1)
            else:
                errors.append((st, body[:200] if isinstance(body, (bytes, str)) else body))
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.close()
    ts = [threading.Thread(target=client, args=(k,)) for k in range(nconn)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def main():
    proxy_bin, emu_bin, nthreads = threads_args(2)
    tmp = tempfile.mkdtemp()
    alog = os.path.join(tmp, "access.log")
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("sekrit-token-1\n")
    cfg_path = os.path.join(tmp, "lanepack.json")
    emu_p, emu_port = start_emulator(emu_bin, "4x64", ["--cost-ms", "1"])
    slow_p, slow_port = start_emulator(emu_bin, "4x64", ["--cost-ms", "300"])
    base = {"health_interval_ms": 100, "access_log": alog, "threads": nthreads,
            "models": {"m": model_config("4x64", [emu_port], max_wait_ms=2)}}

    def config(**kw):
        c = json.loads(json.dumps(base))
        models = kw.pop("models", None)
        if models:
            c["models"]["m"].update(models)
        c.update(kw)
        return c

    def write_cfg(**kw):
        write_config(cfg_path, dict(config(**kw), listen=loopback(port)))

    err = open(os.path.join(tmp, "stderr"), "w+")
    proxy = None
    rc = None
    try:
        proxy, port = start_proxy(proxy_bin, cfg_path, config(), stderr=err)  # the key; the flag below

        # 1. load over many connections, every answer verified
        errors, served = [], []
        t0 = time.time()
        load(port, 48, 50, 1, errors, served)
        dt = time.time() - t0
        check("load: %d answers verified in %.1f s" % (len(served), dt), not errors and len(served) == 48 * 50,
              errors[:3])
        text = metrics(port)
        per = [metric(text, "lanepack_front_requests_total", '{thread="%d"}' % i) for i in range(nthreads)]
        check("every front thread served requests: %s" % per, all(v and v > 0 for v in per), per)
        check("no thread past the last", metric(text, "lanepack_front_requests_total",
                                                 '{thread="%d"}' % nthreads) is None)
        ok200 = metric(text, "lanepack_requests_total", '{route="infer",status="200"}')
        check("requests_total sums the fronts: %s" % ok200, ok200 == 48 * 50, ok200)

        # a second lanepack on the same port does not join this one's
        # SO_REUSEPORT group: it fails to start, as with one thread
        try:
            second = subprocess.run([proxy_bin, "--config", cfg_path, "--threads", str(nthreads)],
                                    stderr=subprocess.PIPE, timeout=10)
            second = (second.returncode, second.stderr[-200:])
        except subprocess.TimeoutExpired:
            second = ("still running: it joined the port", b"")
        check("a second lanepack on the port exits 1 (address in use)",
              second[0] == 1 and b"already in use" in second[1], second)

        # pages of the scheduler's state, asked from every front (new
        # connections spread over them), and v2 clients
        def get(path, body=None):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("POST" if body is not None else "GET", path, body=body,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            c.close()
            return r.status, data
        pages = []
        for i in range(12):
            st, data = get("/v1/models")
            pages.append(st == 200 and json.loads(data)["models"][0]["name"] == "m")
            st, data = get("/readyz")
            pages.append(st == 200 and json.loads(data)["ready"] is True)
            st, data = get("/v1/buckets/advice?k=1")
            # (409 no_data until the advisor has seen enough: as with one thread)
            pages.append((st == 200 and "current" in json.loads(data)) or
                         (st == 409 and json.loads(data)["error"]["code"] == "no_data"))
            st, data = get("/v1/buckets/advice?k=99")
            pages.append(st == 400 and json.loads(data)["error"]["code"] == "bad_parameter")
            st, data = get("/v2/health/ready")
            pages.append(st == 200)
            st, data = get("/v2/models/m")
            pages.append(st == 200 and json.loads(data)["name"] == "m")
            st, data = get("/v2/models/m/ready")
            pages.append(st == 200)
            st, data = get("/v2/models/nope/ready")
            pages.append(st == 404)
            toks = [random.randrange(50000) for _ in range(random.randint(1, 64))]
            st, data = get("/v2/models/m/infer", json.dumps(
                {"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [len(toks)], "data": toks}]}))
            pages.append(st == 200 and json.loads(data)["outputs"][0]["data"] == [float(x) for x in emu_outputs(toks)])
            st, data = get("/v1/infer", json.dumps({"input_ids": list(range(65))}))
            pages.append(st == 413 and json.loads(data)["error"]["code"] == "sequence_too_long"
                         and json.loads(data)["error"]["max_len"] == 64)
        check("pages, v2 clients and the scheduler's refusals from every front", all(pages),
              [i for i, v in enumerate(pages) if not v])

        # 2. clients that leave mid-flight, many at once: the proxy stays whole
        socks = []
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", port))
            body = json.dumps({"input_ids": list(range(1, 1 + (i % 60) + 1))}).encode()
            s.sendall(b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            if i % 2:
                s.close()
            else:
                socks.append(s)
        time.sleep(0.05)
        for s in socks:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
            s.close()
        errors, served = [], []
        load(port, 8, 20, 2, errors, served)
        check("after 200 clients left mid-flight, answers still verified", not errors and len(served) == 160,
              errors[:3])
        deadline = time.time() + 5
        while time.time() < deadline:
            text = metrics(port)
            if metric(text, 'lanepack_queue_sequences', '{model="m"}') == 0 and \
               metric(text, "lanepack_inflight_batches") == 0:
                break
            time.sleep(0.05)
        check("nothing left queued or in flight",
              metric(text, 'lanepack_queue_sequences', '{model="m"}') == 0 and
              metric(text, "lanepack_inflight_batches") == 0,
              [l for l in text.splitlines() if "queue_sequences" in l or "inflight_batches" in l])

        # 3. reload: a new thread count is refused (restart to apply), the
        # running ones serve on; tokens reach every front, and go again
        write_cfg(threads=nthreads + 1)
        proxy.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while time.time() < deadline and "threads changed" not in open(err.name).read():
            time.sleep(0.02)
        check("a reload changing threads is refused, naming it", "threads changed" in open(err.name).read())
        write_cfg(auth_tokens_file=tokens)
        proxy.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        codes = []
        for i in range(24):  # new connections: spread over the fronts
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            codes.append(post(c, {"input_ids": [1, 2, 3]})[0])
            codes.append(post(c, {"input_ids": [1, 2, 3]}, {"Authorization": "Bearer sekrit-token-1"})[0])
            c.close()
        check("after reload with tokens every front asks for one",
              codes[0::2] == [401] * 24 and codes[1::2] == [200] * 24, codes)
        errors, served = [], []
        load(port, 16, 10, 3, errors, served, {"Authorization": "Bearer sekrit-token-1"})
        check("load with the token: answers verified", not errors and len(served) == 160, errors[:3])
        write_cfg()
        proxy.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        # the tokens are gone on every front
        codes, seqs = [], []
        conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(24)]
        for c in conns:
            seqs.append([random.randrange(50000) for _ in range(64)])  # a lane each: 4 fill a batch
        outs = [None] * 24

        def lane(i):
            st, body = post(conns[i], {"input_ids": seqs[i]})
            outs[i] = st == 200 and json.loads(body)["output"] == emu_outputs(seqs[i])
        ts = [threading.Thread(target=lane, args=(i,)) for i in range(24)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        for c in conns:
            c.close()
        check("after a reload without tokens every front serves without one", outs == [True] * 24, outs)

        # 4. SIGTERM with requests in flight and queued (a reload moves the
        # model to a backend taking 300 ms a batch): each is answered,
        # correctly, and the process exits 0
        write_cfg(models={"backends": [f"http://127.0.0.1:{slow_port}"]})
        proxy.send_signal(signal.SIGHUP)
        deadline = time.time() + 5
        while time.time() < deadline and open(err.name).read().count('"reloaded"') < 3:  # refused one not counted
            time.sleep(0.02)
        time.sleep(0.3)  # the new backend probed
        results = [None] * 6
        seqs = [[random.randrange(50000) for _ in range(60)] for _ in range(6)]

        def one(i):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
                c.request("POST", "/v1/infer", body=json.dumps({"input_ids": seqs[i]}),
                          headers={"Content-Type": "application/json"})
                r = c.getresponse()
                st, body = r.status, r.read()
                results[i] = st == 200 and json.loads(body)["output"] == emu_outputs(seqs[i])
            except (OSError, http.client.HTTPException, ValueError) as e:
                results[i] = repr(e)
        ts = [threading.Thread(target=one, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        held = wait_taken(port, results)
        check("all six requests taken in, %s queued or in flight at the slow backend" % held, held is not None and held >= 2, held)
        proxy.send_signal(signal.SIGTERM)
        for t in ts:
            t.join(20)
        check("SIGTERM: every request in flight or queued answered and verified", results == [True] * 6, results)
        rc = proxy.wait(15)
        check("the proxy exits 0 after the drain", rc == 0, rc)

        # 5. past drain_timeout_ms: what is still at the backend gets 503
        # shutting_down, every request one answer, and the process exits 0
        proxy, port2 = start_proxy(proxy_bin, os.path.join(tmp, "hard.json"), {
            "drain_timeout_ms": 100, "health_interval_ms": 100, "models": {"m": model_config("4x64", [slow_port])}},
            args=["--threads", str(nthreads)], stderr=err)
        answers = [None] * 10

        def hard(i):
            toks = [i + 1] * 10
            try:
                c = http.client.HTTPConnection("127.0.0.1", port2, timeout=20)
                st, body = post(c, {"input_ids": toks})
                o = json.loads(body)
                answers[i] = (st == 200 and o["output"] == emu_outputs(toks)) or \
                    (st == 503 and o["error"]["code"] == "shutting_down")
            except (OSError, http.client.HTTPException, ValueError) as e:
                answers[i] = repr(e)
        ts = [threading.Thread(target=hard, args=(i,)) for i in range(10)]
        for t in ts:
            t.start()
        check("past the drain timeout: all ten requests taken in", wait_taken(port2, answers) is not None)
        proxy.send_signal(signal.SIGTERM)
        for t in ts:
            t.join(20)
        check("past the drain timeout: every request one answer (verified, or 503 shutting_down)",
              answers == [True] * 10, answers)
        rc = proxy.wait(15)
        check("... and the proxy exits 0", rc == 0, rc)
    except BaseException:
        # a step that could not go on (the proxy gone, say): what it said, a
        # sanitizer's report first of all, goes with the traceback
        err.seek(0)
        sys.stderr.write("the proxy (exit %s) said, last 6 KB:\n%s\n" % (proxy and proxy.poll(), err.read()[-6144:]))
        raise
    finally:
        if proxy is not None and proxy.poll() is None:
            proxy.kill()
            proxy.wait()
        for e in (emu_p, slow_p):
            e.terminate()
            e.wait(10)
    err.seek(0)
    log = err.read()
    check("no sanitizer report", "Sanitizer" not in log and "runtime error" not in log,
          [l for l in log.splitlines() if "Sanitizer" in l or "runtime error" in l][:5])

    # the access log: whole JSON lines, request ids unique across threads
    lines = open(alog).read().splitlines()
    bad, ids, fronts = 0, set(), []
    dup = 0
    for l in lines:
        try:
            o = json.loads(l)
        except ValueError:
            bad += 1
            continue
        dup += o["request_id"] in ids
        ids.add(o["request_id"])
        fronts.append(o.get("thread"))
    check("access log: %d lines, each whole JSON" % len(lines), bad == 0 and len(lines) >= 48 * 50, bad)
    # which front served each request: one of the threads, as the metrics' label, each of them seen
    check("access log: each line names the front that served it (thread 0..%d), every front seen" % (nthreads - 1),
          all(t in range(nthreads) for t in fronts) and set(fronts) == set(range(nthreads)),
          sorted(set(map(str, fronts))))
    check("request ids unique across threads", dup == 0, dup)
    finish()


if __name__ == "__main__":
    main()
