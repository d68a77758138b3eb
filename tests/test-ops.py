#!/usr/bin/python3
"""Operations: X-Request-Id (kept or made, echoed, passed on to the backend in
the batch, both wires), the JSON access log (fields, errors always, sampling),
and SIGHUP reload (limits, tokens, log level, access log, backends added and
removed; bad or structural changes refused with the old configuration kept;
no connection dropped and no queued request lost across it).

Usage: test-ops.py LANEPACK EMULATOR"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lphelp import (check, finish, free_port, loopback, model_config, start_emulator, start_proxy, stop_all,  # noqa: E402
                    stop_proxy, write_config)

lanepack, emulator = sys.argv[1], sys.argv[2]




def post(port, body, headers=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c.request("POST", "/v1/infer", body if isinstance(body, (bytes, str)) else json.dumps(body), h)
    r = c.getresponse()
    data = r.read()
    return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data


def read_lines(path, key=None):
    """JSON lines of a file (those with key, if given)."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if isinstance(d, dict) and (key is None or key in d):
                    out.append(d)
    except FileNotFoundError:
        pass
    return out


tmp = tempfile.mkdtemp()
procs = []
try:
    emu_logs = [os.path.join(tmp, "emu%d.log" % i) for i in range(2)]
    emu_ports = []
    for i, proto in enumerate(("lanepack", "both")):
        emu, port = start_emulator(emulator, "4x64", ["--cost-ms", "100", "--log-batches", "--protocol", proto],
                                   stderr=open(emu_logs[i], "w"))
        procs.append(emu)
        emu_ports.append(port)
    access = os.path.join(tmp, "access.log")
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write("secret-1\n")
    cfg_path = os.path.join(tmp, "lp.json")

    def config(lp_port, admin_port, **over):
        cfg = {"listen": loopback(lp_port), "admin_listen": loopback(admin_port),
               "log_level": "info", "access_log": access,
               "models": {"default": model_config("4x64", [emu_ports[0]], max_wait_ms=5)}}
        models = over.pop("models", None)
        cfg.update(over)
        if models:
            cfg["models"]["default"].update(models)
        return cfg

    def write_cfg(**over):
        write_config(cfg_path, config(lp_port, admin_port, **over))

    lp_err = os.path.join(tmp, "lp.err")
    # the admin listener's port first: readiness is asked there
    lp, admin_port, lp_port = start_proxy(lanepack, cfg_path, lambda admin, client: config(client, admin), nports=2,
                                          stderr=open(lp_err, "w"))
    procs.append(lp)

    def reload(**over):
        before = open(lp_err).read().count('"reload')
        write_cfg(**over)
        lp.send_signal(signal.SIGHUP)
        end = time.time() + 5
        while time.time() < end:
            lines = [l for l in open(lp_err).read().splitlines() if '"reload' in l]
            if len(lines) > before:
                return lines[-1]
            time.sleep(0.05)
        return ""

    # ---- request ids ----
    st, h, body = post(lp_port, {"input_ids": [5, 6, 7]}, {"X-Request-Id": "client-abc-1"})
    check("a client's X-Request-Id is echoed", st == 200 and h.get("x-request-id") == "client-abc-1", (st, h))
    st, h, _ = post(lp_port, {"input_ids": [8, 9]})
    made = h.get("x-request-id", "")
    check("without one, an id is made and echoed", st == 200 and re.fullmatch(r"[0-9a-f]{16}", made), h)
    st, h, _ = post(lp_port, {"input_ids": [8, 9]}, {"X-Request-Id": 'bad"id'})
    check("an id that cannot be echoed safely is replaced", re.fullmatch(r"[0-9a-f]{16}", h.get("x-request-id", "")), h)
    st, h, bad_body = post(lp_port, b'{"input_ids": [1, "x"]}', {"X-Request-Id": "client-bad-2"})
    check("errors carry the id too", st == 400 and h.get("x-request-id") == "client-bad-2", (st, h))
    try:
        bad_code = json.loads(bad_body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        bad_code = None
    time.sleep(2.1)  # the access log is flushed once a second
    log = read_lines(access)
    mine = [l for l in log if l.get("request_id") == "client-abc-1"]
    check("the access log has the request", len(mine) == 1, log[-3:])
    if mine:
        l = mine[0]
        keys = {"time", "client", "method", "path", "status", "request_id", "model", "sequences", "tokens",
                "batches", "queue_ms", "backend_ms", "total_ms"}
        check("its line has every field", keys <= set(l), sorted(l))
        check("its values are right", l["method"] == "POST" and l["path"] == "/v1/infer" and l["status"] == 200
              and l["sequences"] == 1 and l["tokens"] == 3 and len(l["batches"]) == 1
              and l["client"].startswith("127.0.0.1:") and l["total_ms"] >= l["backend_ms"], l)
        emu_lines = read_lines(emu_logs[0], "batch")
        joined = [e for e in emu_lines if e["batch"] == str(l["batches"][0])]
        check("the backend received the request id in that batch (JSON wire)",
              joined and "client-abc-1" in joined[0]["request_ids"], (l["batches"], emu_lines[-3:]))
    err_lines = [l for l in log if l.get("request_id") == "client-bad-2"]
    check("an error is logged with its status and the error code it was answered",
          err_lines and err_lines[0]["status"] == 400 and bad_code and err_lines[0].get("error") == bad_code,
          (bad_code, err_lines))

    # ---- reload: limits, tokens, access-log sampling, under load ----
    stop = False
    outcomes = []

    def background():
        c = http.client.HTTPConnection("127.0.0.1", lp_port, timeout=20)  # one keep-alive connection
        k = 0
        while not stop:
            k += 1
            try:
                st, _, _ = post(lp_port, {"input_ids": [1 + k % 50] * (1 + k % 30)},
                                {"Authorization": "Bearer secret-1"}, conn=c)
                outcomes.append(st)
            except (OSError, http.client.HTTPException) as e:
                outcomes.append("error %r" % e)
                c = http.client.HTTPConnection("127.0.0.1", lp_port, timeout=20)

    threads = [threading.Thread(target=background) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    line = reload(auth_tokens_file=tokens, max_body_bytes=2000, log_level="debug", access_log_sample=0.25)
    check("a good configuration is reloaded", '"reloaded"' in line, line)
    st, _, _ = post(lp_port, {"input_ids": [1, 2]})
    check("tokens apply after reload: no token, 401", st == 401, st)
    st, _, _ = post(lp_port, {"input_ids": [1, 2]}, {"Authorization": "Bearer secret-1"})
    check("with the token, 200", st == 200, st)
    st, _, _ = post(lp_port, {"input_ids": list(range(1, 60)) * 10}, {"Authorization": "Bearer secret-1"})
    check("max_body_bytes applies after reload: 413", st == 413, st)
    line = reload(auth_tokens_file=tokens, max_body_bytes=2000, access_log_sample=0.25,
                  models={"shapes": "4x64,8x16"})
    check("a shape change is refused, naming it", "refused" in line and "shapes" in line, line)
    write_cfg()
    with open(cfg_path, "w") as f:
        f.write('{"listen": "127.0.0.1:%d", "models": {"default": {"shapes": "4x64", "backends": ["x"]}}' % lp_port)
    before = open(lp_err).read().count('"reload')
    lp.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    text = open(lp_err).read()
    check("a broken file is refused with the reason", text.count('"reload') > before and "reload refused" in text,
          text[-300:])
    st, _, _ = post(lp_port, {"input_ids": [1, 2]}, {"Authorization": "Bearer secret-1"})
    check("the old configuration stays after a refusal (token still needed and accepted)",
          st == 200 and post(lp_port, {"input_ids": [1]})[0] == 401, st)
    # ---- reload: backends, v2 wire ----
    line = reload(auth_tokens_file=tokens, models={"backends": ["http://127.0.0.1:%d" % emu_ports[1]]})
    check("a backend change is reloaded", '"reloaded"' in line, line)
    time.sleep(0.3)
    count0 = len(read_lines(emu_logs[0], "batch"))
    for i in range(20):
        post(lp_port, {"input_ids": [7] * 5}, {"Authorization": "Bearer secret-1", "X-Request-Id": "b-%d" % i})
    time.sleep(0.3)
    after0 = read_lines(emu_logs[0], "batch")[count0:]
    got1 = [e for e in read_lines(emu_logs[1], "batch") if "b-" in e["request_ids"]]
    check("the removed backend gets no new batches", not any("b-" in e["request_ids"] for e in after0), after0[:3])
    check("the added backend gets them, with their request ids", len(got1) >= 1, got1[:3])
    stop = True
    for t in threads:
        t.join(30)
    bad = [o for o in outcomes if o != 200]
    check("across the reloads, one keep-alive connection per client stayed and every request was answered 200 "
          "(%d requests)" % len(outcomes), len(outcomes) > 20 and not bad, bad[:5])
    check("lanepack is still running", lp.poll() is None)
    # sampling (no other traffic now, so the quarter is exact): a quarter of the
    # successes, every error
    line = reload(auth_tokens_file=tokens, access_log_sample=0.25,
                  models={"backends": ["http://127.0.0.1:%d" % emu_ports[1]]})
    check("access_log_sample is reloaded", '"reloaded"' in line, line)
    n_before = len(read_lines(access))
    for i in range(40):
        post(lp_port, {"input_ids": [3, 4]}, {"Authorization": "Bearer secret-1", "X-Request-Id": "s-%d" % i})
    for i in range(4):
        post(lp_port, b"{", {"Authorization": "Bearer secret-1", "X-Request-Id": "e-%d" % i})
    time.sleep(2.1)
    new = read_lines(access)[n_before:]
    ok_logged = sum(1 for l in new if l["request_id"].startswith("s-"))
    err_logged = sum(1 for l in new if l["request_id"].startswith("e-"))
    check("access_log_sample 0.25 logs a quarter of the successes (%d of 40)" % ok_logged, ok_logged == 10,
          ok_logged)
    check("and every error (%d of 4)" % err_logged, err_logged == 4, err_logged)

    # ---- reload refusals that need a restart, and an access log that cannot open ----
    line = reload(auth_tokens_file=tokens, listen=loopback(free_port()),
                  models={"backends": ["http://127.0.0.1:%d" % emu_ports[1]]})
    check("a listen change is refused, naming it", "refused" in line and "listen" in line, line)
    line = reload(auth_tokens_file=tokens, access_log=os.path.join(tmp, "no-such-dir", "a.log"),
                  models={"backends": ["http://127.0.0.1:%d" % emu_ports[1]]})
    check("an access log that cannot open is refused, naming it", "refused" in line and "access_log" in line,
          line)
    st, _, _ = post(lp_port, {"input_ids": [1, 2]}, {"Authorization": "Bearer secret-1"})
    check("and the proxy serves on", st == 200, st)
    bad_cfg = write_config(os.path.join(tmp, "bad-log.json"), {
        "listen": loopback(free_port()), "access_log": os.path.join(tmp, "no-such-dir", "a.log"),
        "models": {"default": model_config("4x64", ["http://127.0.0.1:1"])}})
    r = subprocess.run([lanepack, "--config", bad_cfg], capture_output=True, text=True, timeout=20)
    check("at start, an access log that cannot open exits 1 and says why",
          r.returncode == 1 and "access_log" in r.stderr, (r.returncode, r.stderr[-300:]))

    # ---- lanepack --probe: the image's health check ----
    def probe(url):
        return subprocess.run([lanepack, "--probe", url], capture_output=True, text=True, timeout=20)
    r = probe("http://127.0.0.1:%d/healthz" % lp_port)
    check("--probe exits 0 on a 2xx", r.returncode == 0, (r.returncode, r.stderr))
    r = probe("http://127.0.0.1:%d/no-such-route" % lp_port)
    check("--probe exits 1 on a non-2xx, naming the status", r.returncode == 1 and "404" in r.stderr,
          (r.returncode, r.stderr))
    r = probe("http://127.0.0.1:%d/healthz" % free_port())
    check("--probe exits 1 when nothing answers", r.returncode == 1, (r.returncode, r.stderr))
    r = probe("ftp://example/healthz")
    check("--probe exits 2 on a URL it cannot use", r.returncode == 2 and "http://" in r.stderr,
          (r.returncode, r.stderr))

    # ---- the v2 wire: the ids ride as a request parameter ----
    lp2, v2_port = start_proxy(lanepack, os.path.join(tmp, "v2.json"), {
        "log_level": "warn", "models": {"default": model_config("4x64", [emu_ports[1]], max_wait_ms=5, protocol="v2",
                                                                v2={"model": "lanepack_{lanes}x{bucket}"})}},
        stderr=subprocess.DEVNULL)
    procs.append(lp2)
    st, h, _ = post(v2_port, {"input_ids": [4, 5, 6]}, {"X-Request-Id": "v2-req-1"})
    time.sleep(0.2)
    got = [e for e in read_lines(emu_logs[1], "batch") if "v2-req-1" in e["request_ids"]]
    check("the backend received the request id in the batch (v2 wire, request parameter)",
          st == 200 and h.get("x-request-id") == "v2-req-1" and got, (st, h, read_lines(emu_logs[1], "batch")[-2:]))
finally:
    for p in procs:
        if p.args[0] == lanepack:
            stop_proxy(p, "lanepack --config %s" % p.args[2])
    stop_all(procs)

finish()
