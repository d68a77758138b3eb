#!/usr/bin/env python3
"""The simulator goals of issue 19, measured: for each length mix, shape set and
device count, lanepack-sim's p99 against the ideal's per load, the capacity
against the ideal's, and p99 with 1% of batches failing 5xx against no faults.

Usage: bench/sim-goals.py [--sim build/loadgen/lanepack-sim] [--policy core]
                            [--duration 20] [--seed 1] [--mixes a.lengths,...]"""
import argparse
import json
import subprocess
import sys

SHAPES = {
    "one": (["4x8192"], ["4x8192=20"]),
    "two": (["4x8192", "8x2048"], ["4x8192=20", "8x2048=8"]),
    "three": (["4x8192", "8x2048", "32x512"], ["4x8192=20", "8x2048=8", "32x512=5"]),
}
LOADS = [0.1, 0.2, 0.5, 0.8, 0.9]


def run(a, mix, shapes, devices, extra):
    names, costs = SHAPES[shapes]
    cmd = [a.sim, "--lengths", mix, "--shapes", ",".join(names), "--load", ",".join(map(str, LOADS)),
           "--duration", str(a.duration), "--seed", str(a.seed), "--devices", str(devices),
           "--policy", a.policy, "--json"] + sum((["--cost-ms", c] for c in costs), []) + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sim", default="build/loadgen/lanepack-sim")
    ap.add_argument("--policy", default="core")
    ap.add_argument("--duration", type=float, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mixes", default="tests/data/manpages.lengths,tests/data/changelog-entries.lengths,"
                                       "tests/data/copyright.lengths")
    a = ap.parse_args()
    print("%-26s %-5s %3s | %s | %6s %6s | %s" % (
        "mix", "shape", "dev", " ".join("p99x@%-3d" % (l * 100) for l in LOADS), "cap", "tok", "5xx 1%: p99 x no faults"))
    missed = 0
    for mix in a.mixes.split(","):
        for shapes in ("one", "two", "three"):
            for devices in (1, 4):
                rows = run(a, mix, shapes, devices, [])
                faulty = run(a, mix, shapes, devices, ["--fail-rate", "0.01", "--no-ideal"])
                ratios = [r["p99_ratio"] for r in rows]
                cap = rows[0]["lanepack_capacity_rps"] / rows[0]["capacity_rps"]
                tok = rows[0]["lanepack_capacity_tps"] / rows[0]["capacity_tps"]
                fault = [f["lanepack"]["p99_ms"] / r["lanepack"]["p99_ms"] for f, r in zip(faulty, rows)]
                ok = all(x <= (1.25 if l >= 0.9 else 1.1) for x, l in zip(ratios, LOADS)) and cap >= 0.99 and \
                    all(x <= 1.5 for x in fault)
                missed += not ok
                print("%-26s %-5s %3d | %s | %6.3f %6.3f | %s %s" % (
                    mix.split("/")[-1], shapes, devices, " ".join("%8.2f" % x for x in ratios), cap, tok,
                    " ".join("%5.2f" % x for x in fault), "" if ok else "MISSED"), flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
