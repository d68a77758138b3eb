#!/usr/bin/python3
"""Configuration keys that no other test sets, each checked by what a client or
the backend sees, beside a run without the key (so a key parsed and ignored
fails here):

- pad_id: the id written into padding reaches the backend (the emulator fails
  a batch holding its --poison-token: a short request padded with it fails, a
  request that fills its lane does not, and with the default pad both pass);
- max_queue_tokens: a request with more tokens than it gets 429 queue_full;
- access_log_sample below 1: that share of the successes is logged (every
  n-th, evenly), every error still is;
- max_unsent_bytes: a client that pipelines and never reads stops being read
  once that much of its answers waits unsent: the proxy answers far fewer of
  its requests than with a large bound.

Usage: test-keys.py LANEPACK EMULATOR"""
import http.client
import json
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, model_config, start_emulator, start_proxy, stop_proxy  # noqa: E402

lanepack, emulator = sys.argv[1], sys.argv[2]
POISON = 77           # the emulator fails a batch holding this id
SAMPLED_SUCCESSES = 200
SAMPLE = 0.25         # ... of which exactly 50 are logged (every 4th)
BAD_REQUESTS = 20     # errors: all logged whatever the share
BIG_LANE = 4096       # tokens per request in the unread-client case (~45 KB answers)
PIPELINED = 300       # its requests: ~12 MB of answers, three times the kernel's
                      # largest send buffer (tcp_wmem, 4 MiB by default)


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/v1/infer", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    try:
        js = json.loads(data)
    except ValueError:
        js = {}
    return r.status, js


def code_of(js):
    return js.get("error", {}).get("code") if isinstance(js.get("error"), dict) else None


def metric(port, name, labels):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    for line in text.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.split()[-1])
    return 0.0


class Stack:
    """An emulator and a lanepack in front of it, with top-level keys top and
    model keys model; stopped (lanepack checked to exit 0) by stop()."""

    def __init__(self, tmp, tag, shape, emu_args=(), top=None, model=None):
        self.tag, self.tmp = tag, tmp
        self.emu, self.emu_port = start_emulator(emulator, shape, ["--cost-ms", "1"] + list(emu_args), timeout=30)
        cfg = {"log_level": "warn",
               "models": {"default": model_config(shape, [self.emu_port], **dict({"max_wait_ms": 1}, **(model or {})))}}
        cfg.update(top or {})
        self.err = open(os.path.join(tmp, tag + ".err"), "w")
        try:
            self.lp, self.port = start_proxy(lanepack, os.path.join(tmp, tag + ".json"), cfg, stderr=self.err)
        except BaseException:
            self.emu.terminate()
            raise

    def stop(self):
        stop_proxy(self.lp, "%s: lanepack" % self.tag)
        self.emu.terminate()
        self.emu.wait(10)
        self.err.close()


def pad_id(tmp):
    short, full = {"input_ids": [1, 2, 3]}, {"input_ids": list(range(1, 65))}
    for pad in (POISON, None):
        tag = "pad_id %s" % (pad if pad is not None else "default")
        s = Stack(tmp, "pad-%s" % pad, "1x64", ["--poison-token", str(POISON)],
                  model=dict({"max_retries": 0}, **({"pad_id": pad} if pad is not None else {})))
        try:
            st, js = post(s.port, short)
            if pad == POISON:
                check(tag + ": a padded request carries the pad id to the backend (which fails it: 502)",
                      st == 502 and code_of(js) == "backend_error", (st, js))
            else:
                check(tag + ": the padded request is answered", st == 200, (st, js))
            st, js = post(s.port, full)
            check(tag + ": a request that fills its lane (no padding) is answered", st == 200, (st, js))
        finally:
            s.stop()


def max_queue_tokens(tmp):
    over, under = {"input_ids": list(range(1, 61))}, {"input_ids": list(range(1, 41))}
    s = Stack(tmp, "qtokens", "1x64", model={"max_queue_tokens": 50})
    try:
        st, js = post(s.port, over)
        check("max_queue_tokens 50: a 60-token request gets 429 queue_full",
              st == 429 and code_of(js) == "queue_full", (st, js))
        st, js = post(s.port, under)
        check("max_queue_tokens 50: a 40-token request is answered", st == 200, (st, js))
    finally:
        s.stop()
    s = Stack(tmp, "qtokens-default", "1x64")
    try:
        st, js = post(s.port, over)
        check("the default max_queue_tokens: the 60-token request is answered", st == 200, (st, js))
    finally:
        s.stop()


def access_log_sample(tmp):
    log = os.path.join(tmp, "access.log")
    s = Stack(tmp, "sample", "4x64", top={"access_log": log, "access_log_sample": SAMPLE})
    try:
        oks = sum(post(s.port, {"input_ids": [i + 1, 2, 3]})[0] == 200 for i in range(SAMPLED_SUCCESSES))
        check("the sampled requests were answered", oks == SAMPLED_SUCCESSES, oks)
        bads = sum(post(s.port, {"input_ids": "x"})[0] == 400 for _ in range(BAD_REQUESTS))
        check("the bad requests got 400", bads == BAD_REQUESTS, bads)
    finally:
        s.stop()  # the log is flushed at exit
    lines = [json.loads(ln) for ln in open(log) if ln.strip()]
    ok_lines = sum(1 for e in lines if e.get("status") == 200)
    bad_lines = sum(1 for e in lines if e.get("status") == 400)
    check("access_log_sample %g: exactly that share of the %d successes logged (%d)"
          % (SAMPLE, SAMPLED_SUCCESSES, int(SAMPLED_SUCCESSES * SAMPLE)),
          ok_lines == int(SAMPLED_SUCCESSES * SAMPLE), ok_lines)
    check("access_log_sample %g: every error logged" % SAMPLE, bad_lines == BAD_REQUESTS, bad_lines)


def unread_client(port, stop):
    """Pipelines PIPELINED requests on one connection with a small receive
    buffer and reads nothing until stop is set."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    body = json.dumps({"input_ids": [(i % 900) + 1 for i in range(BIG_LANE)]}).encode()
    req = (b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    s.settimeout(0.5)
    sent = 0
    while not stop.is_set() and sent < PIPELINED:
        try:
            s.sendall(req)
            sent += 1
        except socket.timeout:
            break  # the proxy stopped reading us
    stop.wait(60)
    s.close()


def answered_unread(tmp, tag, unsent):
    s = Stack(tmp, tag, "1x%d" % BIG_LANE, top={"max_unsent_bytes": unsent})
    stop = threading.Event()
    t = threading.Thread(target=unread_client, args=(s.port, stop))
    t.start()
    try:
        # until the count settles: the proxy has stopped reading, or answered all
        last, same, end = -1.0, 0, time.time() + 60
        while time.time() < end and same < 10:
            n = metric(s.port, "lanepack_requests_total", '{route="infer",status="200"}')
            same = same + 1 if n == last else 0
            last = n
            time.sleep(0.2)
        return int(last)
    finally:
        stop.set()
        t.join(30)
        s.stop()


def max_unsent_bytes(tmp):
    small = answered_unread(tmp, "unsent-small", 4096)
    large = answered_unread(tmp, "unsent-large", 1 << 30)
    check("max_unsent_bytes 1 GiB: every pipelined request of a client that reads nothing is answered",
          large == PIPELINED, large)
    check("max_unsent_bytes 4096: the proxy stops reading that client (%d of %d answered)"
          % (small, PIPELINED), 0 < small < PIPELINED, small)


with tempfile.TemporaryDirectory() as tmp:
    pad_id(tmp)
    max_queue_tokens(tmp)
    access_log_sample(tmp)
    max_unsent_bytes(tmp)
finish()
