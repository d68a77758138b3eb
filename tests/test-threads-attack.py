#!/usr/bin/env python3
"""Hostile clients of a threaded proxy (run in the ThreadSanitizer build too,
suite threads): connections reset mid-request and mid-answer, deep pipelines
left unread, slowloris, bodies past the limit, /metrics scraped in a loop
(each scrape counts the process's descriptors while the fronts open and close
connections), SIGHUP in a loop; honest clients' answers checked against the
emulator's function; then SIGTERM with pipelined requests queued: each one
answered, exit 0, and no sanitizer report on standard error.
Arguments: the lanepack and lanepack-emulator binaries, the thread count and
the seconds of hostile load."""
import http.client, json, os, random, signal, socket, subprocess, sys, tempfile, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import check, emu_outputs, finish, model_config, start_emulator, start_proxy, threads_args

proxy_bin, emu_bin, nthreads = threads_args(3)
dur = float(sys.argv[4]) if len(sys.argv) > 4 else 6
tmp = tempfile.mkdtemp()
ep, emu_port = start_emulator(emu_bin, "4x64,8x128", ["--cost-ms", "2"])
cfg = {"threads": nthreads, "health_interval_ms": 50,
       "access_log": os.path.join(tmp, "access.log"), "drain_timeout_ms": 1500, "request_timeout_ms": 2000,
       "max_body_bytes": 1 << 20, "models": {"m": model_config("4x64,8x128", [emu_port], max_wait_ms=3)}}
errf = open(os.path.join(tmp, "err"), "w+")
env = dict(os.environ)
try:
    pp, port = start_proxy(proxy_bin, os.path.join(tmp, "c.json"), cfg, stderr=errf, env=env)
except BaseException:
    ep.terminate()
    raise
stop = threading.Event()
bad = []
good = [0]
def req_bytes(toks, extra=b""):
    body = json.dumps({"input_ids": toks}).encode()
    return (b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)

def honest(k):
    rng = random.Random(k)
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            for _ in range(20):
                toks = [rng.randrange(50000) for _ in range(rng.randint(1, 100))]
                c.request("POST", "/v1/infer", body=json.dumps({"input_ids": toks}),
                          headers={"Content-Type": "application/json", "X-Request-Id": "h%d-%d" % (k, rng.randrange(1 << 30))})
                r = c.getresponse(); d = r.read()
                if r.status == 200:
                    if json.loads(d)["output"] != emu_outputs(toks): bad.append(("wrong", d[:200]))
                    else: good[0] += 1
                elif r.status not in (429, 503):  # busy, said as such
                    bad.append((r.status, d[:200]))
            c.close()
        except (OSError, http.client.HTTPException) as e:
            if not stop.is_set(): pass

def rude(k):
    rng = random.Random(1000 + k)
    while not stop.is_set():
        try:
            s = socket.create_connection(("127.0.0.1", port)); s.settimeout(5)
            mode = rng.randrange(6)
            n = rng.randint(1, 40)
            pipe = b"".join(req_bytes([rng.randrange(50000) for _ in range(rng.randint(1, 120))]) for _ in range(n))
            if mode == 0:  # reset mid-request
                s.sendall(pipe[:rng.randrange(len(pipe))])
            elif mode == 1:  # reset mid-answer / right after sending
                s.sendall(pipe)
                time.sleep(rng.random() * 0.01)
                try: s.recv(rng.randint(1, 300))
                except OSError: pass
            elif mode == 2:  # pipelining, don't read, then reset
                s.sendall(pipe); time.sleep(0.02)
            elif mode == 3:  # slowloris
                for b in pipe[:200]:
                    s.send(bytes([b])); time.sleep(0.002)
                    if stop.is_set(): break
            elif mode == 4:  # big body
                s.sendall(b"POST /v1/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 900000\r\n\r\n" + b"[" * 300000)
            else:  # metrics / admin pages then reset
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
                try: s.recv(100)
                except OSError: pass
            if rng.random() < 0.7:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        except OSError:
            time.sleep(0.01)

def hup():
    while not stop.is_set():
        pp.send_signal(signal.SIGHUP); time.sleep(0.15)

def scrape():
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/metrics"); c.getresponse().read(); c.close()
        except (OSError, http.client.HTTPException):
            pass

try:
    ts = [threading.Thread(target=honest, args=(k,)) for k in range(6)]
    ts += [threading.Thread(target=rude, args=(k,)) for k in range(10)]
    ts += [threading.Thread(target=hup), threading.Thread(target=scrape)]
    for t in ts: t.daemon = True; t.start()
    time.sleep(dur)
    # SIGTERM mid-load: pending pipelined requests must all be answered
    check("the proxy lived through the hostile load", pp.poll() is None, pp.poll())
    socks = []
    for i in range(20):
        try:
            s = socket.create_connection(("127.0.0.1", port)); s.settimeout(15)
            toks = [[random.randrange(50000) for _ in range(random.randint(1, 60))] for _ in range(5)]
            s.sendall(b"".join(req_bytes(t) for t in toks))
            socks.append((s, toks))
        except OSError as e:
            socks.append((None, str(e)))
    time.sleep(0.05)
    if pp.poll() is None:
        pp.send_signal(signal.SIGTERM)
    stop.set()
    answered = 0; lost = []
    for s, toks in socks:
        if s is None:
            lost.append((0, toks))
            continue
        buf = b""
        try:
            while buf.count(b"HTTP/1.1 ") < 5 or not buf.endswith(b"\n"):
                d = s.recv(65536)
                if not d: break
                buf += d
        except OSError as e:
            pass
        n = buf.count(b"HTTP/1.1 ")
        answered += n
        if n < 5: lost.append((n, buf[-200:]))
        s.close()
    t0 = time.time()
    try:
        rc = pp.wait(25)
    except subprocess.TimeoutExpired:
        rc = "hang"; pp.kill()
    check("sigterm: exit %s in %.1fs" % (rc, time.time() - t0), rc == 0, rc)
    check("pipelined before SIGTERM all answered (%d of 100)" % answered, not lost, lost[:3])
    check("honest clients: %d right, none wrong" % good[0], not bad and good[0] > 0, bad[:5])
    errf.seek(0); err = errf.read()
    check("no sanitizer report", "Sanitizer" not in err and "runtime error" not in err,
          "\n".join(l for l in err.splitlines() if "Sanitizer" in l or "#" in l or "runtime" in l)[:3000])
finally:
    stop.set()
    if pp.poll() is None: pp.kill()
    ep.terminate()
finish()
