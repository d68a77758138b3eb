#!/usr/bin/env python3
"""The tokenizer workers' hand-offs under ThreadSanitizer (suite 'threads',
issue 35): with 2 front threads and 2 workers, many clients' texts
(/embed with and without truncate, /v1/embeddings, /tokenize, bodies large
enough to be decoded on a worker) each answered with the ids spm_encode
gives; clients that leave while their text is being tokenized (the job
cancelled, its memory freed once, by whoever holds it last); a reload
(SIGHUP) with work in the pool, whose smaller tokenizer_queue_bytes then
refuses more text with 429 in each route's dialect, a changed
tokenizer_threads refused; and
SIGTERM with work in the pool: every accepted request answered 200, exit 0,
no sanitizer report. Arguments: lanepack, lanepack-emulator."""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, finish, loopback, model_config, start_emulator, start_proxy, stop_all,  # noqa: E402
                    train_spm, write_config)

TEXT = "/usr/share/common-licenses/GPL-3"
DIMS = 8


def emu_vector(ids):
    h = 7
    for t in ids:
        h = (h * 31 + t + 1) % 1000000007
    return [float((h % 1000) + 0.25 * k) for k in range(DIMS)]


def request(port, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body if isinstance(body, bytes) else json.dumps(body),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data
    except OSError as e:
        return -1, repr(e)
    finally:
        c.close()


def main():
    lanepack, emulator = sys.argv[1], sys.argv[2]
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        model = train_spm(tmp, TEXT, 400)
        words = open(TEXT, encoding="utf-8").read().split()

        def text(seed, n):
            return " ".join(words[(seed * 7919 + i) % len(words)] for i in range(n))
        texts = [text(s, n) for s, n in ((1, 3), (2, 40), (3, 300), (4, 1500), (5, 9), (6, 700))]
        ids = [[int(x) for x in line.split()] for line in subprocess.run(
            ["spm_encode", "--model=" + model, "--output_format=id"], input=("\n".join(texts) + "\n").encode(),
            capture_output=True, check=True).stdout.decode().splitlines()]
        big = [text(s, 3000) for s in range(7, 39)]  # 32 texts of ~18 KB (~6,500 ids): ~600 KB of work
        long = " ".join(texts) * 40  # a body over 64 KiB: decoded on a worker
        long_ids = [int(x) for x in subprocess.run(
            ["spm_encode", "--model=" + model, "--output_format=id"], input=(long + "\n").encode(),
            capture_output=True, check=True).stdout.split()]
        cfg_path = os.path.join(tmp, "lp.json")

        def config(**extra):
            cfg = {"log_level": "info", "threads": 2, "tokenizer_threads": 2, "drain_timeout_ms": 60000,
                   "models": {"default": model_config("2x8192,8x512", [pe], max_wait_ms=1, backend_timeout_ms=60000,
                                                      tokenizer={"sentencepiece": model, "extra_options": "bos:eos"})}}
            cfg.update(extra)
            return cfg

        def write_cfg(**extra):
            write_config(cfg_path, dict(config(**extra), listen=loopback(pl)))
        err_path = os.path.join(tmp, "stderr")
        err = open(err_path, "w+")
        try:
            emu, pe = start_emulator(emulator, "2x8192,8x512", ["--per-segment", "--dims", str(DIMS)],
                                     stdout=subprocess.DEVNULL)
            procs.append(emu)
            proxy, pl = start_proxy(lanepack, cfg_path, config(), stdout=subprocess.DEVNULL, stderr=err)
            procs.append(proxy)

            task = "/proc/%d/task" % proxy.pid
            names = sorted(open(os.path.join(task, t, "comm")).read().strip() for t in os.listdir(task))
            check("the workers are threads lp-tok-0 and lp-tok-1 beside lp-front-0, lp-front-1 and lp-sched",
                  all(n in names for n in ("lp-tok-0", "lp-tok-1", "lp-front-0", "lp-front-1", "lp-sched"))
                  and "lp-tok-2" not in names, names)

            # hand-offs: 8 clients at once, every answer the ids' vectors
            bad = []

            def client(k):
                for j in range(6):
                    pick = [(k + j + i) % len(texts) for i in range(1 + (k + j) % 4)]
                    want = [emu_vector([1] + ids[i] + [2]) for i in pick]
                    st, js = request(pl, "/embed", {"inputs": [texts[i] for i in pick], "normalize": False})
                    if st != 200 or js != want:
                        bad.append(("embed", k, j, st, str(js)[:120]))
                    st, js = request(pl, "/v1/embeddings", {"model": "default", "input": texts[pick[0]]})
                    if st != 200 or len(js["data"]) != 1:
                        bad.append(("openai", k, j, st, str(js)[:120]))
                    st, js = request(pl, "/tokenize", {"inputs": texts[pick[0]], "add_special_tokens": False})
                    if st != 200 or [t["id"] for t in js[0]] != ids[pick[0]]:
                        bad.append(("tokenize", k, j, st, str(js)[:120]))
                # a body decoded on a worker (over 64 KiB), cut: the first ids
                st, js = request(pl, "/embed", {"inputs": [long], "truncate": True, "normalize": False})
                want = [1] + long_ids[:8190] + [2]
                if st != 200 or js != [emu_vector(want)]:
                    bad.append(("long", k, st, str(js)[:120]))
            ts = [threading.Thread(target=client, args=(k,)) for k in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            check("8 clients at once: /embed, /v1/embeddings, /tokenize and a large body, every answer right",
                  not bad, bad[:4])

            # clients gone while their text is at the workers
            heavy = json.dumps({"inputs": big, "normalize": False}).encode()
            for i in range(24):
                s = socket.create_connection(("127.0.0.1", pl))
                s.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(heavy) + heavy)
                time.sleep(0.005 * (i % 5))
                s.close()
            st, js = request(pl, "/embed", {"inputs": texts[:2], "normalize": False})
            check("24 clients gone mid-tokenizing: the proxy serves on",
                  proxy.poll() is None and st == 200 and js == [emu_vector([1] + x + [2]) for x in ids[:2]], (st, js))

            def gauge(name):
                c = http.client.HTTPConnection("127.0.0.1", pl, timeout=30)
                c.request("GET", "/metrics")
                text = c.getresponse().read().decode()
                c.close()
                for line in text.splitlines():
                    if line.startswith(name + " "):
                        return int(float(line.split()[1]))
                return None

            def held():
                return gauge("lanepack_tokenizer_queue_bytes")
            end = time.time() + 30
            while held() != 0 and time.time() < end:
                time.sleep(0.1)
            check("... and once they are gone the workers hold no text (lanepack_tokenizer_queue_bytes 0)",
                  held() == 0, held())

            # a reload with work in the pool
            results = []

            def heavy_client():
                results.append(request(pl, "/embed", heavy))
            hs = [threading.Thread(target=heavy_client) for _ in range(3)]
            for h in hs:
                h.start()
            time.sleep(0.2)
            write_cfg(tokenizer_queue_bytes=32 << 20)
            proxy.send_signal(signal.SIGHUP)
            for h in hs:
                h.join()
            check("SIGHUP with work in the pool: the 3 heavy requests answered 200",
                  [st for st, _ in results] == [200] * 3, [(st, str(js)[:100]) for st, js in results])

            # the reloaded bound, 4 KiB of text: with heavy work in the pool, more is refused with 429 in
            # each route's dialect (a request alone always goes in)
            write_cfg(tokenizer_queue_bytes=4096)
            proxy.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            results.clear()
            # four clients post heavy text (some 600 KB a request) over and over, so the
            # pool stays busy however fast the workers are; each light request is sent
            # once the queue holds more than the bound (seen in /metrics) and must then
            # be refused. The pool may drain between that look and the request's arrival
            # (the native encoder takes a heavy text in tens of ms), so a light request
            # answered 200 is sent again, a bounded number of times: what is checked is
            # that a refusal comes and in which dialect, never that one timing holds.
            busy = threading.Event()
            busy.set()

            def heavy_loop():
                while busy.is_set():
                    heavy_client()
            hs = [threading.Thread(target=heavy_loop) for _ in range(4)]
            for h in hs:
                h.start()

            def refused(path, body):
                for _ in range(40):
                    end = time.time() + 10
                    while (held() or 0) <= 4096 and time.time() < end:
                        time.sleep(0.002)
                    st, js = request(pl, path, body)
                    if st != 200:
                        return st, js
                return st, js
            try:
                st_tei, js_tei = refused("/embed", {"inputs": [texts[3]] * 4})
                st_oai, js_oai = refused("/v1/embeddings", {"model": "default", "input": [texts[3]] * 4})
            finally:
                busy.clear()
                for h in hs:
                    h.join()
            check("past tokenizer_queue_bytes: /embed 429 Overloaded, /v1/embeddings 429 tokenizer_busy",
                  st_tei == 429 and isinstance(js_tei, dict) and js_tei.get("error_type") == "Overloaded"
                  and st_oai == 429 and isinstance(js_oai, dict)
                  and js_oai.get("error", {}).get("code") == "tokenizer_busy",
                  (st_tei, js_tei, st_oai, js_oai, [st for st, _ in results]))
            check("... and the heavy requests in the pool first: one at least answered 200 (a request alone goes in)",
                  sorted(st for st, _ in results)[0] in (200, 429) and 200 in [st for st, _ in results],
                  [(st, str(js)[:100]) for st, js in results])
            write_cfg()
            proxy.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            write_cfg(tokenizer_threads=3)
            proxy.send_signal(signal.SIGHUP)
            time.sleep(1)
            err.seek(0)
            log = err.read()
            check("a reload changing tokenizer_threads is refused", "tokenizer_threads changed" in log, log[-300:])

            # SIGTERM with work in the pool
            results.clear()
            hs = [threading.Thread(target=heavy_client) for _ in range(3)]
            for h in hs:
                h.start()
            # the three connections accepted (and this scrape's own) before the
            # signal: one still in the listener's queue is reset when a drain
            # closes the listener, as nginx's would be, and is not the proxy's
            # to answer
            end = time.time() + 10
            while (gauge("lanepack_connections") or 0) < 4 and time.time() < end:
                time.sleep(0.02)
            time.sleep(0.2)
            proxy.send_signal(signal.SIGTERM)
            for h in hs:
                h.join()
            try:
                code = proxy.wait(90)
            except subprocess.TimeoutExpired:
                code = None
            check("SIGTERM with work in the pool: every heavy request answered 200, exit 0",
                  [st for st, _ in results] == [200] * 3 and code == 0,
                  (code, [(st, str(js)[:100]) for st, js in results]))
        except Exception:
            err.seek(0)  # what the proxy said (a sanitizer's report first of all) goes with the traceback
            sys.stderr.write("the proxy (exit %s) said, last 6 KB:\n%s\n" % (procs[-1].poll(), err.read()[-6144:]))
            raise
        finally:
            stop_all(procs)
            err.seek(0)
            log = err.read()
        check("no sanitizer report", "Sanitizer" not in log and "runtime error" not in log, log[-3000:])
    finish()


if __name__ == "__main__":
    main()
