#!/usr/bin/env python3
"""Latency across load, lanepack against an ideal device-aware policy.

Finds the chip's capacity for a length mix and a shape set with their costs,
then for 10%..95% of it runs lanepack in front of the emulator (one device)
under an open-loop Poisson load (lanepack-loadgen) and prints p50/p99, device
utilization and fill per step, next to the ideal policy simulated on the same
lengths: a batch leaves the moment the device is free, packed (first fit
decreasing) into the shape with the least device time per real token.

Usage: loadgen/sweep.py [--build build] [--lengths FILE] [--shapes 4x8192,8x2048]
                        [--cost 4x8192=20,8x2048=8] [--duration 5] [--steps 10,20,...]"""
import argparse
import heapq
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pack(queue, shapes, costs):
    """FFD of the queue (arrival, length) into the best shape; returns (shape,
    placed indices, real tokens)."""
    best = None
    order = sorted(range(len(queue)), key=lambda i: -queue[i][1])
    for (lanes, bucket), cost in zip(shapes, costs):
        free = [bucket] * lanes
        placed, real = [], 0
        for i in order:
            n = queue[i][1]
            if n > bucket:
                continue
            for lane in range(lanes):
                if free[lane] >= n:
                    free[lane] -= n
                    placed.append(i)
                    real += n
                    break
        if real and (best is None or cost / real < best[0]):
            best = (cost / real, (lanes, bucket), placed, real, cost)
    return best


def simulate(lengths, rate, seconds, shapes, costs, seed=7):
    """The ideal policy on one device: p50, p99 (ms), utilization, fill."""
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    while t < seconds:
        t += rng.expovariate(rate)
        n = lengths[rng.randrange(len(lengths))]
        if n <= max(b for _, b in shapes):
            arrivals.append((t, n))
    lat, busy, real_total, slots_total = [], 0.0, 0, 0
    queue, i, now = [], 0, 0.0
    while i < len(arrivals) or queue:
        if not queue:
            now = max(now, arrivals[i][0])
        while i < len(arrivals) and arrivals[i][0] <= now:
            queue.append(arrivals[i])
            i += 1
        _, (lanes, bucket), placed, real, cost = pack(queue, shapes, costs)
        now += cost / 1000.0
        busy += cost / 1000.0
        real_total += real
        slots_total += lanes * bucket
        for k in sorted(placed, reverse=True):
            lat.append((now - queue[k][0]) * 1000)
            queue.pop(k)
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
    return q(0.5), q(0.99), busy / max(now, 1e-9), real_total / max(slots_total, 1)


def capacity(lengths, shapes, costs):
    """Requests/s the device sustains under the ideal policy: the largest rate
    (bisection) at which its queue stays bounded, p99 under 20 batch times."""
    limit = 20 * max(costs)
    lo, hi = 1.0, 1.0
    while simulate(lengths, hi, 20, shapes, costs)[1] < limit:
        lo, hi = hi, hi * 2
    for _ in range(12):
        mid = (lo + hi) / 2
        if simulate(lengths, mid, 20, shapes, costs)[1] < limit:
            lo = mid
        else:
            hi = mid
    return lo


def metric(port, prefix):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        return sum(float(l.split()[-1]) for l in r.read().decode().splitlines() if l.startswith(prefix))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--lengths", default="tests/data/manpages.lengths")
    ap.add_argument("--shapes", default="4x8192,8x2048")
    ap.add_argument("--cost", default="4x8192=20,8x2048=8")
    ap.add_argument("--duration", type=float, default=5)
    ap.add_argument("--steps", default="10,20,40,60,80,90,95")
    ap.add_argument("--protocol", default="lanepack", choices=["v2", "lanepack"],
                    help="to the emulator: lanepack JSON (default) or v2 binary tensors")
    a = ap.parse_args()
    lengths = [int(l) for l in open(a.lengths) if l.strip()]
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    cost_of = dict(c.split("=") for c in a.cost.split(","))
    costs = [float(cost_of["%dx%d" % s]) for s in shapes]
    cap = capacity(lengths, shapes, costs)
    print("capacity of one device for %s on %s (costs %s ms): %.0f requests/s; upstream %s"
          % (os.path.basename(a.lengths), a.shapes, a.cost, cap, a.protocol))
    ep, pp = free_port(), free_port()
    tmp = tempfile.mkdtemp()
    emu = subprocess.Popen([a.build + "/loadgen/lanepack-emulator", "--listen", "127.0.0.1:%d" % ep,
                            "--shapes", a.shapes, "--protocol", "both"] +
                           sum((["--cost-ms", c] for c in a.cost.split(",")), []),
                           stderr=open(os.path.join(tmp, "emu.log"), "w"))
    cfg = os.path.join(tmp, "lp.json")
    model = {"shapes": a.shapes, "backends": ["http://127.0.0.1:%d" % ep]}
    if a.protocol == "v2":
        model.update({"protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}"}})
    json.dump({"listen": "127.0.0.1:%d" % pp, "log_level": "warn", "models": {"default": model}},
              open(cfg, "w"))
    lp = subprocess.Popen([a.build + "/src/lanepack", "--config", cfg], stderr=open(os.path.join(tmp, "lp.log"), "w"))
    try:
        time.sleep(0.8)
        print("%5s %9s | %9s %9s %6s %6s | %9s %9s %6s %6s | %6s" % (
            "load", "req/s", "p50 ms", "p99 ms", "util", "fill", "ideal p50", "ideal p99", "util", "fill", "p99/id"))
        for step in a.steps.split(","):
            rate = cap * int(step) / 100.0
            busy0, real0, pad0 = (metric(pp, "lanepack_device_busy_seconds_total"),
                                  metric(pp, 'lanepack_tokens_total{model="default",kind="real"}'),
                                  metric(pp, 'lanepack_tokens_total{model="default",kind="pad"}'))
            out = os.path.join(tmp, "lg.json")
            subprocess.run([a.build + "/loadgen/lanepack-loadgen", "--url", "http://127.0.0.1:%d" % pp,
                            "--rate", "%.1f" % rate, "--duration", "%gs" % a.duration, "--lengths", a.lengths,
                            "--json", out, "--timeout", "20s"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            d = json.load(open(out))
            busy = metric(pp, "lanepack_device_busy_seconds_total") - busy0
            real = metric(pp, 'lanepack_tokens_total{model="default",kind="real"}') - real0
            pad = metric(pp, 'lanepack_tokens_total{model="default",kind="pad"}') - pad0
            ip50, ip99, iutil, ifill = simulate(lengths, rate, a.duration, shapes, costs)
            p99 = d["latency_ms"]["p99"]
            print("%4s%% %9.0f | %9.1f %9.1f %6.2f %6.2f | %9.1f %9.1f %6.2f %6.2f | %6.2f" % (
                step, d["requests_per_s"], d["latency_ms"]["p50"], p99, busy / d["duration_s"],
                real / max(real + pad, 1), ip50, ip99, iutil, ifill, p99 / max(ip99, 1e-9)), flush=True)
    finally:
        lp.terminate()
        emu.terminate()
        lp.wait(10)
        emu.wait(10)


if __name__ == "__main__":
    sys.exit(main())
