#!/usr/bin/env python3
"""Bytes of a server's resident memory per idle keep-alive connection: opens N
connections, sends one request on each, reads every answer (checked 200), then
reads the server's RSS from /proc and divides the growth by N.
--save-answer FILE keeps the body of one answer: what a plain reverse proxy's
upstream must send back for the comparison to be fair (the same bytes).
Usage: idle-conns.py --port P --pid PID[,PID...] [--count 5000] [--path /v1/infer] [--tokens 16]
                     [--save-answer FILE]"""
import argparse
import resource
import selectors
import socket
import sys
import time


def rss_kb(pids):
    """Resident KiB summed over the processes (a server's workers)."""
    total = 0
    for pid in str(pids).split(","):
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
                    break
            else:
                raise RuntimeError("no VmRSS")
    return total


def settle_rss(pid, quiet_s=1.0, limit_s=6.0):
    """RSS once it has stopped moving (a server may trim on its own timer)."""
    end = time.monotonic() + limit_s
    last = rss_kb(pid)
    while time.monotonic() < end:
        time.sleep(quiet_s)
        now = rss_kb(pid)
        if now == last:
            break
        last = now
    return last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", required=True, help="a pid, or several comma-separated (summed)")
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--path", default="/v1/infer")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--hold", type=float, default=0.0, help="seconds to keep them open after")
    ap.add_argument("--wave", type=int, default=64,
                    help="requests in flight at once: what stays is per connection, "
                         "not the peak of N requests served together")
    ap.add_argument("--save-answer", help="write the body of one answer to this file")
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.count + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))

    body = ('{"input_ids": [' + ",".join(str(1000 + i) for i in range(a.tokens)) + "]}").encode()
    req = (f"POST {a.path} HTTP/1.1\r\nHost: {a.host}\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    # Warm-up rounds on 64 connections so that the baseline holds the server's
    # steady state (buffers, pools, the allocator's raised mmap threshold after
    # its first large free), not its first requests' growth.
    before = None
    socks = []
    for phase, n in (("warm", 64), ("warm", 64), ("warm", 64), ("idle", a.count)):
        if phase == "warm" or phase == "idle":
            for s in socks:
                s.close()
            socks = []
            time.sleep(0.3)
            if phase == "idle":
                before = settle_rss(a.pid)
        new = []
        for _ in range(n):
            s = socket.create_connection((a.host, a.port))
            s.setblocking(False)
            new.append(s)
        socks += new
        for w in range(0, n, a.wave):
            body = serve(new[w:w + a.wave], req)
            if a.save_answer and body is not None:
                with open(a.save_answer, "wb") as f:
                    f.write(body)
                a.save_answer = None
    time.sleep(0.3)
    after = settle_rss(a.pid)
    per = (after - before) * 1024 / a.count
    print(f"connections {a.count}  rss before {before} KiB  after {after} KiB  "
          f"{per:.0f} bytes per idle connection")
    if a.hold:
        time.sleep(a.hold)
    for s in socks:
        s.close()


def serve(conns, req):
    """Sends req on each connection and reads each answer whole (a 200);
    returns the body of the last answer read."""
    last = None
    n = len(conns)
    if n:
        sel = selectors.DefaultSelector()
        pend = {}
        for s in conns:
            pend[s] = b""
            sel.register(s, selectors.EVENT_WRITE)
        out = {s: req for s in pend}
        done = 0
        deadline = time.monotonic() + 60
        while done < n:
            if time.monotonic() > deadline:
                sys.exit(f"idle-conns: {n - done} answers missing after 60 s")
            for key, ev in sel.select(1.0):
                s = key.fileobj
                if ev & selectors.EVENT_WRITE:
                    k = s.send(out[s])
                    out[s] = out[s][k:]
                    if not out[s]:
                        sel.modify(s, selectors.EVENT_READ)
                    continue
                data = s.recv(65536)
                if not data:
                    sys.exit("idle-conns: a connection closed before its answer")
                pend[s] += data
                buf = pend[s]
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    continue
                head = buf[:head_end].decode("latin-1").lower()
                if not head.startswith("http/1.1 200"):
                    sys.exit("idle-conns: answer " + head.split("\r\n")[0])
                clen = 0
                for line in head.split("\r\n"):
                    if line.startswith("content-length:"):
                        clen = int(line.split(":")[1])
                if len(buf) >= head_end + 4 + clen:
                    sel.unregister(s)
                    last = buf[head_end + 4:head_end + 4 + clen]
                    done += 1
        sel.close()
    return last


if __name__ == "__main__":
    main()
