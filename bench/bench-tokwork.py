#!/usr/bin/env python3
"""Text in nobody's way (issue 35), figures: a light token-id load's p99 when
quiet, beside 2 keep-alive connections posting 1 MiB texts to /embed with
"truncate": true, and beside one connection posting requests of 2,048 short
texts, with threads 1, 2 and 4 (the posters in processes of their own, so
that the light load's figures are not Python's; beside them the proxy's own
p99 for it and how long its fronts waited for a core); and the time of a
4 MiB text with truncate against a 512-token text. With --before BINARY (a
lanepack built before the tokenizer workers) the same for it, side by side.
One line per figure; with threads 2 and 4 also the light p99 on the
connections a poster's front serves and on the others (the fronts read from
the access log's "thread"; --light-conns N spreads the light load over N
connections, so that both kinds are seen).
With --long ROUNDS only the second figure, for every build (--also NAME=BINARY
adds more), their proxies up at once and timed in turn, a 4 MiB and a 512-token
request from each build in every round (so a machine shared with other work
slows all alike), and the floor: the 4 MiB body posted to /healthz, which only
receives it (405): medians of the rounds.

  bench/bench-tokwork.py --proxy build/src/lanepack --emulator build/loadgen/lanepack-emulator \\
      [--before /tmp/lanepack-before] [--also NAME=BINARY ...] [--seconds 4] [--long ROUNDS] [--dims 8] [--light-conns 2]"""
import argparse
import http.client
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lphelp import free_port, stop_all, wait_http  # noqa: E402

TEXT = "/usr/share/common-licenses/GPL-3"


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))] * 1e3 if xs else float("nan")


def light(port, seconds, out, queue, total, by_port, every=0.02):
    """Token-id requests every `every` s on one keep-alive connection: the
    time at the client into out (and by_port[its local port], to tell apart
    later which front served it), the proxy's own wait in its scheduler's
    queue and its own time from the request read to its answer written (the
    answer's timing_ms.queue and .total) into queue and total, all in
    seconds."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.connect()
    mine = by_port.setdefault(c.sock.getsockname()[1], [])
    body = json.dumps({"input_ids": [5, 6, 7, 8, 9, 10, 11, 12]})
    end = time.time() + seconds
    while time.time() < end:
        t0 = time.perf_counter()
        c.request("POST", "/v1/infer", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        answer = r.read()
        if r.status == 200:
            out.append(time.perf_counter() - t0)
            mine.append(out[-1])
            timing = json.loads(answer)["timing_ms"]
            queue.append(timing["queue"] / 1e3)
            total.append(timing["total"] / 1e3)
        time.sleep(max(0, every - (time.perf_counter() - t0)))
    c.close()


def fronts_of(alog, since):
    """From the access log's lines after byte since: the front (its line's
    thread) of each client port that posted /v1/infer, and the fronts that
    served the posters (/embed)."""
    light, busy = {}, set()
    with open(alog, "rb") as f:
        f.seek(since)
        for line in f:
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if o.get("thread") is None:  # a build whose log does not name the front
                continue
            port = int(o["client"].rsplit(":", 1)[1])
            if o.get("path") == "/embed":
                busy.add(o.get("thread"))
            elif o.get("path") == "/v1/infer":
                light[port] = o.get("thread")
    return light, busy


def split_busy(alog, since, by_port):
    """The light load's p99 on connections served by a front that also
    served a poster, and on the others, with how many connections each."""
    if not alog:
        return float("nan"), 0, float("nan"), 0
    light, busy = fronts_of(alog, since)
    on = [x for p, xs in by_port.items() if light.get(p) in busy for x in xs]
    off = [x for p, xs in by_port.items() if p in light and light[p] not in busy for x in xs]
    n_on = sum(1 for p in by_port if light.get(p) in busy)
    return pct(on, 0.99), n_on, pct(off, 0.99), sum(1 for p in by_port if p in light) - n_on


def poster(port, path, body, stop, count):
    """Posts body until stop is set, counting the answers. Run in a process
    of its own: as a thread beside the light load's it held the GIL (reading
    a 2,048-vector answer, up to the interpreter's 5 ms switch interval) while
    a light answer waited to be read, which the light load's p99 counted as
    the proxy's (its time at the client less the proxy's own was 1.5-2.8 ms
    at p99 quiet, 4.9-7.4 ms beside the 2,048 texts)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    while not stop.is_set():
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        with count.get_lock():
            count.value += 1
    c.close()


def fronts_waited(pid):
    """Nanoseconds the proxy's front threads (lp-front-N) have waited for a
    core so far, and have run (schedstat's second and first fields)."""
    waited = ran = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/comm" % (pid, t)) as f:
                if not f.read().startswith("lp-front-"):
                    continue
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                fields = f.read().split()
            ran += int(fields[0])
            waited += int(fields[1])
        except OSError:
            pass  # a thread that ended
    return waited, ran


def measure(port, seconds, busy_body=None, nbusy=0, pid=None, alog=None, conns=2):
    """p50 and p99 (ms) of the light load on conns connections (2 by default:
    100 requests a second in all whatever their number), beside nbusy
    posters (each a process); the posts answered; the p99 of its wait in the
    scheduler's queue; the p99 of the proxy's own time for it; the fronts'
    time waiting for a core and running meanwhile (ms a second: on a shared
    machine a front that is woken waits for a core, whatever it holds); then
    the p99 on connections sharing a front with a poster and on the others,
    with how many connections each (from the access log alog)."""
    mp = multiprocessing.get_context("fork")
    stop, count, lat, queue, total = mp.Event(), mp.Value("l", 0), [], [], []
    ps = [mp.Process(target=poster, args=(port, "/embed", busy_body, stop, count)) for _ in range(nbusy)]
    for p in ps:
        p.start()
    if nbusy:
        end = time.time() + 30
        while not count.value and time.time() < end:
            time.sleep(0.01)
    since = os.path.getsize(alog) if alog and os.path.exists(alog) else 0
    by_port = {}
    ls = [threading.Thread(target=light, args=(port, seconds, lat, queue, total, by_port, 0.01 * conns))
          for _ in range(conns)]
    w0, r0, t0 = fronts_waited(pid) + (time.perf_counter(),) if pid else (0, 0, 0)
    for t in ls:
        t.start()
    for t in ls:
        t.join()
    w1, r1, t1 = fronts_waited(pid) + (time.perf_counter(),) if pid else (0, 0, 1)
    stop.set()
    for p in ps:
        p.join()
    time.sleep(0.2)  # the access log's last lines written
    return (pct(lat, 0.5), pct(lat, 0.99), len(lat), count.value, pct(queue, 0.99), pct(total, 0.99),
            (w1 - w0) / 1e6 / (t1 - t0), (r1 - r0) / 1e6 / (t1 - t0)) + split_busy(alog, since, by_port)


def timed(port, body, n=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        c.request("POST", "/embed", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        ts.append(time.perf_counter() - t0)
        status = r.status
    c.close()
    return sorted(ts)[len(ts) // 2] * 1e3, status


DIMS = [8]  # the emulator's values per vector (--dims): the size of the 2,048 texts' answer


def start(name, proxy, emulator, model, threads, tmp, procs):
    """The emulator and a proxy in front of it; returns the proxy's port."""
    pe, pl = free_port(), free_port()
    procs.append(subprocess.Popen([emulator, "--listen", "127.0.0.1:%d" % pe, "--shapes", "4x512,16x64",
                                   "--per-segment", "--dims", str(DIMS[0])],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_http(pe, "/healthz")
    cfg = {"listen": "127.0.0.1:%d" % pl, "log_level": "warn", "threads": threads,
           "access_log": os.path.join(tmp, "access-%s-%d.log" % (name, threads)),
           "max_sequences_per_request": 4096, "max_body_bytes": 16 << 20,
           "models": {"default": {"shapes": "4x512,16x64", "max_wait_ms": 1,
                                  "backends": ["http://127.0.0.1:%d" % pe],
                                  "tokenizer": {"sentencepiece": model, "extra_options": "bos:eos"}}}}
    path = os.path.join(tmp, "lp-%s-%d.json" % (name, threads))
    with open(path, "w") as f:
        json.dump(cfg, f)
    procs.append(subprocess.Popen([proxy, "--config", path], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL))
    wait_http(pl, "/readyz")
    return pl


def run(name, proxy, emulator, model, threads, seconds, texts, tmp, conns=2):
    procs = []
    try:
        pl = start(name, proxy, emulator, model, threads, tmp, procs)
        pid = procs[-1].pid
        alog = os.path.join(tmp, "access-%s-%d.log" % (name, threads))
        q = measure(pl, seconds, pid=pid, alog=alog, conns=conns)
        b = measure(pl, seconds, texts["1mib"], 2, pid, alog, conns)
        m = measure(pl, seconds, texts["2048"], 1, pid, alog, conns)
        print("%-6s threads %d: light p50/p99 quiet %.1f/%.1f ms | beside 2 x 1 MiB truncate %.1f/%.1f ms "
              "(%d posts) | beside 2,048 texts %.1f/%.1f ms (%d posts) | p99 in the scheduler's queue %.1f, "
              "%.1f, %.1f ms | p99 in the proxy (timing_ms.total) %.1f, %.1f, %.1f ms | the fronts waited for a "
              "core %.0f, %.0f, %.0f ms/s (ran %.0f, %.0f, %.0f) | load %s"
              % (name, threads, q[0], q[1], b[0], b[1], b[3], m[0], m[1], m[3], q[4], b[4], m[4], q[5], b[5], m[5],
                 q[6], b[6], m[6], q[7], b[7], m[7], open("/proc/loadavg").read().split()[0]), flush=True)
        if threads > 1:  # one front serves everything: no other front to tell apart
            print("%-6s threads %d: light p99 on the posters' fronts / on the others (connections): beside 2 x 1 "
                  "MiB truncate %.1f (%d) / %.1f (%d) ms | beside 2,048 texts %.1f (%d) / %.1f (%d) ms"
                  % ((name, threads) + b[8:12] + m[8:12]), flush=True)
        if threads == 1:
            t4, s4 = timed(pl, texts["4mib"])
            t512, s512 = timed(pl, texts["512"])
            print("%-6s threads 1: a 4 MiB text with truncate %.1f ms (status %d), a 512-token text %.1f ms "
                  "(status %d): %.2fx" % (name, t4, s4, t512, s512, t4 / t512), flush=True)
    finally:
        stop_all(procs)


def cpu_ns(pid):
    """The CPU time a process's threads have run, in ns (schedstat: not ticks)."""
    total = 0
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass  # a thread that ended
    return total


def long_rounds(builds, emulator, model, rounds, texts, tmp):
    """The 4 MiB and the 512-token text on every build in turn, rounds times;
    wall time at the client and the proxy's CPU time (all its threads)."""
    procs = []
    try:
        ports, pids = [], []
        for name, binary in builds:
            ports.append(start(name, binary, emulator, model, 1, tmp, procs))
            pids.append(procs[-1].pid)
        conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=120) for p in ports]
        ts = {name: ([], [], []) for name, _ in builds}
        cpu = {name: ([], [], []) for name, _ in builds}
        # the floor: the same 4 MiB body to a route that only reads it (GET
        # only: 405 once the body is in), what receiving it costs alone
        asks = (("/embed", "4mib", 200), ("/embed", "512", 200), ("/healthz", "4mib", 405))
        for _ in range(rounds):
            for (name, _), c, pid in zip(builds, conns, pids):
                for k, (path, key, want) in enumerate(asks):
                    c0, t0 = cpu_ns(pid), time.perf_counter()
                    c.request("POST", path, texts[key], {"Content-Type": "application/json"})
                    r = c.getresponse()
                    r.read()
                    if r.status != want:
                        sys.exit("%s: %s to %s answered %d" % (name, key, path, r.status))
                    ts[name][k].append(time.perf_counter() - t0)
                    cpu[name][k].append((cpu_ns(pid) - c0) / 1e9)

        def med(x):
            return sorted(x)[len(x) // 2] * 1e3
        for name, _ in builds:
            t4, t512 = med(ts[name][0]), med(ts[name][1])
            c4, c512 = med(cpu[name][0]), med(cpu[name][1])
            print("%-6s threads 1: a 4 MiB text with truncate %.1f ms (min %.1f; proxy CPU %.1f ms), a 512-token "
                  "text %.1f ms (min %.1f; CPU %.1f ms): %.2fx, CPU %.2fx; the 4 MiB body to /healthz (405: "
                  "received only) %.1f ms (CPU %.1f ms) (medians of %d rounds)"
                  % (name, t4, min(ts[name][0]) * 1e3, c4, t512, min(ts[name][1]) * 1e3, c512, t4 / t512,
                     c4 / c512 if c512 else float("nan"), med(ts[name][2]), med(cpu[name][2]), rounds), flush=True)
    finally:
        stop_all(procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--emulator", required=True)
    ap.add_argument("--before", help="a lanepack built before the tokenizer workers")
    ap.add_argument("--seconds", type=float, default=4)
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--also", action="append", default=[], help="NAME=BINARY: one more build")
    ap.add_argument("--long", type=int, help="only the long-text figure, this many rounds")
    ap.add_argument("--dims", type=int, default=8, help="values per vector the emulator answers (at most 64)")
    ap.add_argument("--light-conns", type=int, default=2,
                    help="connections of the light load (100 requests a second in all): more of them land on "
                         "more fronts, to compare the posters' fronts with the others")
    a = ap.parse_args()
    DIMS[0] = a.dims
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "spm")
        subprocess.run(["spm_train", "--input=" + TEXT, "--model_prefix=" + prefix, "--vocab_size=400",
                        "--character_coverage=1.0"], capture_output=True, check=True)
        words = open(TEXT, encoding="utf-8").read().split()

        def text(nbytes, seed=0):
            out, n, i = [], 0, seed
            while n < nbytes:
                w = words[i % len(words)]
                out.append(w)
                n += len(w) + 1
                i += 1
            return " ".join(out)[:nbytes]
        short = [text(60, s) for s in range(2048)]
        t512 = text(2000)  # about 500 tokens with this model's 400 pieces
        texts = {"1mib": json.dumps({"inputs": text(1 << 20), "truncate": True}),
                 "4mib": json.dumps({"inputs": text(4 << 20), "truncate": True}),
                 "512": json.dumps({"inputs": t512, "truncate": True}),
                 "2048": json.dumps({"inputs": short, "truncate": True})}
        builds = [("after", a.proxy)] + ([("before", a.before)] if a.before else [])
        builds += [tuple(x.split("=", 1)) for x in a.also]
        if a.long:
            long_rounds(builds, a.emulator, prefix + ".model", a.long, texts, tmp)
            return
        for threads in [int(x) for x in a.threads.split(",")]:
            for name, binary in builds:
                run(name, binary, a.emulator, prefix + ".model", threads, a.seconds, texts, tmp, a.light_conns)


if __name__ == "__main__":
    main()
