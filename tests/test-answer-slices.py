#!/usr/bin/env python3
"""A large embeddings answer is written a slice a loop turn (front/deliver.c),
so that its front serves its other connections between slices: 2,048 vectors
of 64 values to /embed and /v1/embeddings (floats and base64) take several
turns (lanepack_answer_slices_total grows; before, one turn held the front for
all of it and the metric did not exist), and each answer is the same as the
answers to its inputs asked 64 at a time (one turn each: the metric stays 0).
Clients that leave while their answers are being written, and a drain with
answers being written: every request still there gets exactly one whole
answer, and the proxy exits 0 (under ASan: nothing leaked or freed twice).
Arguments: the lanepack and lanepack-emulator binaries, the thread count."""
import http.client
import json
import os
import socket
import struct
import tempfile
import threading
import time

from lphelp import (check, finish, metric, model_config, read_answer, start_emulator, start_proxy, stop_all,
                    stop_proxy, threads_args)

DIMS = 64


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def vectors(path, data):
    """The answer's vectors, in input order."""
    js = json.loads(data)
    if path == "/embed":
        return js
    return [d["embedding"] for d in sorted(js["data"], key=lambda d: d["index"])]


def main():
    proxy_bin, emu_bin, nthreads = threads_args(1)
    tmp = tempfile.mkdtemp()
    emu_p, emu_port = start_emulator(emu_bin, "4x512,16x64", ["--per-segment", "--dims", str(DIMS)])
    proxy = None
    try:
        proxy, port = start_proxy(proxy_bin, os.path.join(tmp, "lanepack.json"), {
            "threads": nthreads, "max_sequences_per_request": 4096, "max_body_bytes": 16 << 20,
            "models": {"m": model_config("4x512,16x64", [emu_port], max_wait_ms=1)}})
        ids = [[5 + (i * 7 + k) % 300 for k in range(3 + i % 40)] for i in range(2048)]
        asks = [("/embed", lambda xs: {"inputs": xs}),
                ("/v1/embeddings", lambda xs: {"input": xs, "model": "m"}),
                ("/v1/embeddings", lambda xs: {"input": xs, "model": "m", "encoding_format": "base64"})]
        # the same inputs 64 at a time: 64 x 64 values, each answer in one turn
        small = {}
        for k, (path, make) in enumerate(asks):
            parts = []
            for i in range(0, len(ids), 64):
                st, data = post(port, path, make(ids[i:i + 64]))
                parts.append(vectors(path, data) if st == 200 else None)
            small[k] = None if None in parts else [v for p in parts for v in p]
        check("answers of 64 x %d values are written in one turn (lanepack_answer_slices_total 0)" % DIMS,
              metric(port, "lanepack_answer_slices_total") == 0, metric(port, "lanepack_answer_slices_total"))
        for k, (path, make) in enumerate(asks):
            before = metric(port, "lanepack_answer_slices_total") or 0
            st, data = post(port, path, make(ids))
            after = metric(port, "lanepack_answer_slices_total")
            name = "%s%s" % (path, " base64" if k == 2 else "")
            check("%s: 2,048 x %d values answered 200" % (name, DIMS), st == 200, (st, data[:200]))
            check("%s: written in slices, over several loop turns (lanepack_answer_slices_total %s -> %s)"
                  % (name, before, after), after is not None and after > before, (before, after))
            if st != 200:
                continue
            got, want = vectors(path, data), small[k]  # base64: the same strings
            check("%s: the sliced answer's %d vectors equal the 64-at-a-time answers'" % (name, len(got)),
                  want is not None and got == want, "first difference at %s" % next(
                      (i for i, (a, b) in enumerate(zip(got, want or [])) if a != b), None))
        # clients that leave while their answers are written (interleaved, a
        # slice each a turn): 2,048 vectors each, closing after different waits
        big = json.dumps({"input": ids, "model": "m"}).encode()
        req = (b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(big))

        def leaver(wait, took):
            s = socket.create_connection(("127.0.0.1", port))
            t0 = time.time()
            s.sendall(req + big)
            if wait is None:  # stays for its answer: how long 8 at once take
                read_answer(s, timeout=60)
                took.append(time.time() - t0)
            else:
                time.sleep(wait)
            # a reset, not a half-close (after which the answer is still owed)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()

        def together(waits):
            took = []
            ts = [threading.Thread(target=leaver, args=(w, took)) for w in waits]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            return took
        # 8 answers at once are written in turn, each a slice a turn: resets
        # spread around the time 8 took; some land mid-answer (not every run:
        # about one in two hit lp__sliced_cancel here), the rest before or after
        took = together([None] * 8)
        for rnd in range(3):
            end = min(took) if took else 0.5
            together([end * (0.9 + 0.04 * i) for i in range(8)])
        st, data = post(port, "/embed", {"inputs": ids[:8]})
        check("after clients left mid-answer, the proxy answers", st == 200 and len(json.loads(data)) == 8,
              (st, data[:200]))
        # a drain with large answers being written: each is answered whole
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        for s in socks:
            s.sendall(req + big)
        time.sleep(0.05)
        proxy.terminate()
        answers = [read_answer(s, timeout=30) for s in socks]
        for s in socks:
            s.close()
        oks = [a[0] == 200 and len(json.loads(a[2])["data"]) == 2048 for a in answers]
        check("a drain answers each request being written, whole (%d of 4)" % sum(oks), all(oks),
              [(a[0], a[2][:100]) for a in answers])
    finally:
        if proxy is not None:
            stop_proxy(proxy)
        stop_all([emu_p])
    finish()


if __name__ == "__main__":
    main()
