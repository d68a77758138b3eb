#!/usr/bin/env python3
"""A client pipelining text requests against everyone else (issue 35): one
connection writes 60 /tokenize requests of 100 lines each at once, another
sends a one-line /tokenize 5 ms later; prints, per build, the one-line
request's time to its answer and the pipelining client's time to its first
byte, each try (1 front, tokenizer_threads 1, so the tokenizer is shared).
Builds given with --also are started in turn, alternated try by try, so a
machine shared with other work slows all alike. Not a timed test.

  bench/bench-tok-pipeline.py --proxy build/src/lanepack --emulator build/loadgen/lanepack-emulator \\
      [--also NAME=BINARY ...] [--tries 3] [--requests 60] [--texts 100]"""
import argparse
import json
import os
import random
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lphelp import free_port, start_emulators, start_proxy, stop_all, train_spm  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"


def tokenize_request(inputs):
    b = json.dumps({"inputs": inputs}).encode()
    return (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(b)) + b


def one_try(port, lines, requests, texts):
    """(the one-line request's seconds, the pipelining client's first byte's)"""
    pipelined = b"".join(tokenize_request([random.choice(lines) for _ in range(texts)]) for _ in range(requests))
    a = socket.create_connection(("127.0.0.1", port))
    b = socket.create_connection(("127.0.0.1", port))
    a.settimeout(60)
    b.settimeout(60)
    try:
        t0 = time.perf_counter()
        a.sendall(pipelined)
        time.sleep(0.005)
        t1 = time.perf_counter()
        b.sendall(tokenize_request("one line"))
        if not b.recv(65536).startswith(b"HTTP/1.1 200"):
            sys.exit("the one-line request failed")
        other = time.perf_counter() - t1
        a.recv(1)
        return other, time.perf_counter() - t0
    finally:
        a.close()
        b.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--emulator", required=True)
    ap.add_argument("--also", action="append", default=[], help="NAME=BINARY: another build, alternated")
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--texts", type=int, default=100)
    a = ap.parse_args()
    builds = [("this", a.proxy)] + [tuple(x.split("=", 1)) for x in a.also]
    lines = [ln.strip() for ln in open(TEXT, encoding="utf-8") if ln.strip()]
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            model = train_spm(tmp, TEXT, 400)
            ports = {"emu": free_port()}
            urls = start_emulators(procs, a.emulator, ports, "8x128,4x256",
                                   {"emu": ["--cost-ms", "0", "--per-segment", "--dims", "16"]})
            models = {"default": {"shapes": "8x128,4x256", "max_wait_ms": 1, "backends": [urls["emu"]],
                                  "tokenizer": {"sentencepiece": model}}}
            got = {name: [] for name, _ in builds}
            for _ in range(a.tries):
                for name, binary in builds:
                    port = free_port()
                    proxy = []
                    start_proxy(proxy, binary, os.path.join(tmp, "lp.json"), port, models, threads=1,
                                tokenizer_threads=1)
                    try:
                        got[name].append(one_try(port, lines, a.requests, a.texts))
                    finally:
                        stop_all(proxy)
            print("%d pipelined /tokenize of %d lines on one connection, a one-line /tokenize on another"
                  % (a.requests, a.texts))
            for name, _ in builds:
                print("%-10s one-line answer: %s ms; pipelining client's first byte: %s ms" % (
                    name, " ".join("%.0f" % (o * 1e3) for o, _ in got[name]),
                    " ".join("%.0f" % (f * 1e3) for _, f in got[name])))
        finally:
            stop_all(procs)


if __name__ == "__main__":
    main()
