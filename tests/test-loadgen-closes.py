#!/usr/bin/python3
"""lanepack-loadgen while servers close its connections (issue 33): the proxy's
idle timeout closing keep-alive connections between arrivals, the proxy's
max_requests_per_connection closing them after a few answers (with pipelined
requests behind), and a small server here that resets connections idle and
mid-request and answers some with Connection: close. Arrivals go on all the
while; loadgen must run to its end, exit 0, and account for every request it
sent (each answered, failed on its connection, or timed out). Before the fix a
connection closed while on loadgen's free list was freed and then taken again
(heap-use-after-free in take_free under ASan, a crash or a hang without).

Usage: test-loadgen-closes.py LANEPACK EMULATOR LOADGEN"""
import os
import random
import socket
import socketserver
import struct
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, finish, model_config, run_loadgen, start_emulator, start_proxy, stop_all  # noqa: E402

lanepack, emulator, loadgen = sys.argv[1], sys.argv[2], sys.argv[3]
SHAPES = "4x64,8x128"
# Idle closes, by the proxy and by the server here: short against the gaps
# between arrivals at RATE (Poisson, mean 1000/RATE ms), so most connections
# are closed while loadgen holds them idle on its free list.
IDLE_MS = 30
RATE = 60
LOAD_S = 3


def load(port, tmp, name, args, path=""):
    """One open-loop run; (exit code, its --json report, stderr)."""
    out = os.path.join(tmp, name + ".json")
    cmd = [loadgen, "--url", "http://127.0.0.1:%d%s" % (port, path), "--lengths", "uniform:1,100", "--vocab",
           "1000", "--duration", "%ds" % LOAD_S, "--timeout", "10s", "--json", out] + args
    return run_loadgen(cmd, out, 120)


def accounted(name, rc, rep, err, min_opened):
    """Exit 0; every request sent is answered, failed or timed out, each once;
    some succeeded; the server closed connections (more were opened than
    --connections allows at once)."""
    keys = ("sent", "answered", "ok", "failed", "connection_errors", "timeouts", "connections_opened", "by_status")
    print("# %s: %s" % (name, {k: rep.get(k) for k in keys}), flush=True)
    check("%s: loadgen exits 0, every request accounted, connections closed by the server" % name,
          rc == 0 and rep.get("sent", 0) > 0 and rep.get("sent") == rep.get("answered")
          and rep.get("ok", 0) + rep.get("failed", 0) == rep.get("answered") and rep.get("ok", 0) > 0
          and rep.get("connections_opened", 0) >= min_opened,
          (rc, {k: rep.get(k) for k in keys}, err[-1500:]))


class Closer(socketserver.ThreadingTCPServer):
    """A keep-alive HTTP/1.1 server that misbehaves at seeded rates: it resets
    a connection instead of answering, answers with Connection: close, and
    closes (FIN or reset, in turn) a connection idle for IDLE_MS."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr):
        super().__init__(addr, CloserHandler)
        self.lock = threading.Lock()
        self.counts = {"conns": 0, "answered": 0, "reset_request": 0, "answer_close": 0, "idle_close": 0}

    def count(self, k):
        with self.lock:
            self.counts[k] += 1


def reset(sock):
    """Closes sock with an RST (SO_LINGER 0), not a FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


class CloserHandler(socketserver.BaseRequestHandler):
    def handle(self):
        srv, sock = self.server, self.request
        srv.count("conns")
        rng = random.Random(srv.counts["conns"])
        sock.settimeout(IDLE_MS / 1000)
        buf = b""
        while True:
            try:
                while b"\r\n\r\n" not in buf:
                    d = sock.recv(65536)
                    if not d:
                        sock.close()
                        return
                    buf += d
                head, _, buf = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    k, _, v = line.partition(b":")
                    if k.strip().lower() == b"content-length":
                        length = int(v)
                sock.settimeout(5)
                while len(buf) < length:
                    d = sock.recv(65536)
                    if not d:
                        sock.close()
                        return
                    buf += d
                buf = buf[length:]
            except socket.timeout:
                # idle (or stuck): closed from this side, a FIN or a reset in turn
                srv.count("idle_close")
                if rng.random() < 0.5:
                    reset(sock)
                else:
                    sock.close()
                return
            u = rng.random()
            if u < 0.1:
                srv.count("reset_request")
                reset(sock)
                return
            close = u < 0.2
            body = b'{"output": 1}'
            sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s"
                         % (len(body), b"Connection: close\r\n" if close else b"", body))
            srv.count("answered")
            if close:
                srv.count("answer_close")
                sock.close()
                return
            sock.settimeout(IDLE_MS / 1000)


def main():
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        closer = Closer(("127.0.0.1", 0))
        threading.Thread(target=closer.serve_forever, daemon=True).start()
        try:
            p, emu = start_emulator(emulator, SHAPES, ["--cost-ms", "1"])
            procs.append(p)
            # two proxies: one closes idle connections, one after 3 answers each
            ports = {}
            for name, extra in (("idle", {"idle_timeout_ms": IDLE_MS}), ("maxreq", {"max_requests_per_connection": 3})):
                p, ports[name] = start_proxy(lanepack, os.path.join(tmp, name + ".json"), dict(
                    {"log_level": "warn", "models": {"default": model_config(SHAPES, [emu], max_wait_ms=1)}}, **extra))
                procs.append(p)

            rc, rep, err = load(ports["idle"], tmp, "idle", ["--rate", str(RATE), "--connections", "4"])
            accounted("proxy idle_timeout_ms %d, rate %d/s" % (IDLE_MS, RATE), rc, rep, err, 8)

            rc, rep, err = load(ports["maxreq"], tmp, "maxreq",
                                ["--rate", "200", "--connections", "4", "--pipeline", "2"])
            accounted("proxy max_requests_per_connection 3, 2 pipelined", rc, rep, err, 8)

            rc, rep, err = load(closer.server_address[1], tmp, "closer",
                                ["--rate", str(RATE * 2), "--connections", "4", "--pipeline", "2"])
            accounted("a server resetting and closing connections", rc, rep, err, 8)
            c = closer.counts
            check("the server reset connections mid-request, closed idle ones and answered with close",
                  c["reset_request"] > 0 and c["idle_close"] > 0 and c["answer_close"] > 0, c)
            check("loadgen counted every failure the server caused on its connections",
                  rep.get("connection_errors", 0) >= c["reset_request"] and rep.get("by_status", {}).get("200")
                  == rep.get("ok"), (rep.get("connection_errors"), c))
        finally:
            closer.shutdown()
            closer.server_close()
            stop_all(procs)
    finish()


main()
