#!/usr/bin/env python3
"""Which saturation signal predicts the p99 knee: runs lanepack-sim across loads
on several mixes, shape sets, cost models and device counts, computes each
candidate signal as the proxy computes it, and reports, per signal, the one
target value whose crossing lands nearest the knee over all scenarios.

The knee of a scenario is the highest load before the p99 takes off: the first
load L whose p99 is less than 1/KNEE of the p99 at L + 0.1 (a tenth more load
doubles the tail: the queue no longer drains between bursts), where that p99 is
also more than 3 x the light-load p99 (the least at loads <= 0.5; a move to a
bigger shape at light load doubles a small p99 too, and is no knee). Candidates:
  busy   device busy time / (devices x time)  (lanepack_device_busy_seconds_total)
  useful busy x fill: device time doing real tokens (lanepack_device_useful_seconds_total)
  queue  mean queue delay / mean device time per batch (Triton's users'
         queue-duration / compute-duration; lanepack_saturation)
Usage: bench/saturation.py [--sim build/loadgen/lanepack-sim] [--policy core|legacy]
"""
import argparse
import json
import subprocess
import sys

LOADS = [round(0.1 + 0.05 * i, 2) for i in range(29)]  # 0.10 .. 1.50
KNEE = 2.0

# (name, lengths, shapes, {shape: ms}); two cost models per shape set: a fixed
# part plus a part per slot, and time proportional to the slots
def costs(shapes, fixed_ms, per_kslot_ms):
    out = {}
    for s in shapes.split(","):
        lanes, bucket = (int(x) for x in s.split("x"))
        out[s] = round(fixed_ms + per_kslot_ms * lanes * bucket / 1000.0, 3)
    return out

SETS = [
    ("changelog", "tests/data/changelog-entries.lengths", "8x512,4x2048,1x8192"),
    ("changelog", "tests/data/changelog-entries.lengths", "16x256,4x1024,1x4096"),
    ("manpages", "tests/data/manpages.lengths", "8x1024,4x4096,1x16384"),
    ("manpages", "tests/data/manpages.lengths", "4x2048,1x8192"),
    ("copyright", "tests/data/copyright.lengths", "16x1024,4x4096,1x8192"),
    ("copyright", "tests/data/copyright.lengths", "8x2048,2x8192"),
    # inputs of one size that fill a lane only half (image patches, fixed
    # windows): packing cannot fill the slots, so busy x fill stays low
    ("uniform 520-620", "uniform:520,620", "8x1024,1x1024"),
]
COSTS = [("fixed+slot", 8.0, 2.0), ("per-slot", 0.5, 3.0)]
DEVICES = [1, 4]


def run(sim, policy, lengths, shapes, cost, devices, seed):
    args = [sim, "--lengths", lengths, "--shapes", shapes, "--load", ",".join(str(x) for x in LOADS),
            "--duration", "30", "--devices", str(devices), "--no-ideal", "--json", "--seed", str(seed),
            "--policy", policy]
    for s, ms in cost.items():
        args += ["--cost-ms", f"{s}={ms}"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        r = json.loads(line)
        f = r["lanepack"]
        rows.append({"load": r["load"], "p99": f["p99_ms"], "busy": f["util"],
                     "useful": f["util"] * f["fill"],
                     "queue": f["queue_ms"] / f["service_ms"] if f["service_ms"] else 0.0})
    return rows


def knee(rows):
    base = min(r["p99"] for r in rows if r["load"] <= 0.5)
    by = {round(r["load"], 2): r for r in rows}
    for r in rows:
        up = by.get(round(r["load"] + 0.1, 2))
        if up and up["p99"] > KNEE * r["p99"] and up["p99"] > 3 * base:
            return r["load"], base
    return None, base


def crossing(rows, sig, target):
    """The first load where the signal reaches target (linear between loads), or None."""
    prev = None
    for r in rows:
        if r[sig] >= target:
            if prev is None or r[sig] == prev[sig]:
                return r["load"]
            f = (target - prev[sig]) / (r[sig] - prev[sig])
            return prev["load"] + f * (r["load"] - prev["load"])
        prev = r
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sim", default="build/loadgen/lanepack-sim")
    ap.add_argument("--policy", default="core")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--target", type=float, default=0.7, help="the queue target to show per scenario")
    a = ap.parse_args()
    scen = []
    for mix, lengths, shapes in SETS:
        for cname, fixed, per in COSTS:
            for dev in DEVICES:
                rows = run(a.sim, a.policy, lengths, shapes, costs(shapes, fixed, per), dev, a.seed)
                k, base = knee(rows)
                scen.append((f"{mix} {shapes} {cname} x{dev}", rows, k, base))
    print(f"policy {a.policy}; knee: the first load L with p99(L + 0.1) > {KNEE} x p99(L) and > 3 x the light-load p99")
    print(f"{'scenario':52s} {'knee':>5s} {'p99@light':>9s} | signal at the knee: {'busy':>6s} {'useful':>6s} {'queue':>6s}"
          f" | load where queue reaches {a.target} (p99 there)")
    for name, rows, k, base in scen:
        at = next((r for r in rows if r["load"] == k), None)
        c = crossing(rows, "queue", a.target)
        near = min(rows, key=lambda r: abs(r["load"] - c)) if c is not None else None
        tail = f" | {c:5.2f} ({near['p99']:.0f} ms)" if c is not None else " |     -"
        if at is None:
            print(f"{name:52s} {'-':>5s} {base:9.1f} | {'':40s}{tail}")
            continue
        print(f"{name:52s} {k:5.2f} {base:9.1f} | {'':20s}{at['busy']:6.3f} {at['useful']:6.3f} {at['queue']:6.2f}{tail}")
    print()
    print("per signal: the target whose crossing is nearest the knee over all scenarios")
    print(f"{'signal':8s} {'target':>7s} {'mean |load error|':>18s} {'worst':>6s} {'never crosses':>14s}")
    for sig, grid in (("busy", [0.5 + 0.01 * i for i in range(51)]),
                      ("useful", [0.2 + 0.01 * i for i in range(81)]),
                      ("queue", [0.1 * i for i in range(1, 101)])):
        best = None
        for t in grid:
            errs, miss = [], 0
            for name, rows, k, base in scen:
                if k is None:
                    continue
                c = crossing(rows, sig, t)
                if c is None:
                    miss += 1
                    errs.append(1.0)
                else:
                    errs.append(abs(c - k))
            score = (sum(errs) / len(errs), max(errs), miss)
            if best is None or score < best[1]:
                best = (t, score)
        t, (mean, worst, miss) = best
        at = [r[sig] for name, rows, k, base in scen if k is not None for r in rows if r["load"] == k]
        # the safe target: the highest one crossed at or before the knee in 90%
        # of the scenarios, and how far before the knee it is crossed
        safe = None
        for u in grid:
            leads = []
            for name, rows, k, base in scen:
                if k is None:
                    continue
                c = crossing(rows, sig, u)
                leads.append(k - c if c is not None else -1.0)
            if sum(1 for x in leads if x >= -1e-9) >= 0.9 * len(leads):
                safe = (u, sum(leads) / len(leads), min(leads))
        print(f"{sig:8s} {t:7.2f} {mean:18.3f} {worst:6.2f} {miss:14d}   at the knees: "
              f"min {min(at):.2f} median {sorted(at)[len(at) // 2]:.2f} max {max(at):.2f}", end="")
        if safe:
            print(f"; crossed before 90% of knees up to {safe[0]:.2f} (mean lead {safe[1]:.2f} load)")
        else:
            print("; no target is crossed before 90% of the knees")
    return 0


if __name__ == "__main__":
    sys.exit(main())
