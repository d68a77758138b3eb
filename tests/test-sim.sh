#!/usr/bin/env bash
# lanepack-sim on fixed seeds: the same seed gives the same JSON, bad arguments
# exit 2 with a message, the figures are sane (every request answered once,
# served = offered below capacity, the ideal's capacity > 0), a trace replays,
# and the goals of issue 19 that the dispatch core meets.
# Usage: test-sim.sh SIM TESTS_DIR
set -u
sim=$1
data=$2/data
fail=0
check() { # description, condition
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=(--shapes 4x8192,8x2048 --cost-ms 4x8192=20 --cost-ms 8x2048=8)

# ---- determinism ----
for policy in legacy core; do
  "$sim" --lengths "$data/manpages.lengths" "${base[@]}" --load 0.3,0.7 --duration 3 --seed 3 \
    --policy $policy --json > "$tmp/a.json" 2> "$tmp/err"
  check "$policy: json run exits 0" "[ $? -eq 0 ]"
  "$sim" --lengths "$data/manpages.lengths" "${base[@]}" --load 0.3,0.7 --duration 3 --seed 3 \
    --policy $policy --json > "$tmp/b.json" 2>> "$tmp/err"
  check "$policy: the same seed gives the same JSON" "cmp -s '$tmp/a.json' '$tmp/b.json'"
  "$sim" --lengths "$data/manpages.lengths" "${base[@]}" --load 0.3,0.7 --duration 3 --seed 4 \
    --policy $policy --json > "$tmp/c.json" 2>> "$tmp/err"
  check "$policy: another seed gives other figures" "! cmp -s '$tmp/a.json' '$tmp/c.json'"
  python3 - "$tmp/a.json" <<'PY' > "$tmp/check" 2>&1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2, rows
for r in rows:
    assert r["capacity_rps"] > 0 and r["lanepack_capacity_rps"] > 0, r
    assert abs(r["offered_rps"] / (r["load"] * r["capacity_rps"]) - 1) < 0.1, r
    for who in ("lanepack", "ideal", "ideal_oldest", "ideal_any"):
        f = r[who]
        # every request answered exactly once, and without faults all with 200
        assert f["requests"] == r["requests"] > 0, (who, f)
        assert f["unanswered"] == 0 and f["double_answered"] == 0, (who, f)
        assert f["ok"] + f["errors"] == f["requests"] and f["errors"] == 0, (who, f)
        # below capacity what is offered is served
        assert abs(f["served_rps"] / r["offered_rps"] - 1) < 0.03, (who, f, r["offered_rps"])
        assert 0 < f["util"] <= 1 and 0 < f["fill"] <= 1, (who, f)
        assert 0 < f["p50_ms"] <= f["p99_ms"] <= f["p999_ms"] <= f["max_ms"], (who, f)
        # no request is answered before one batch's device time
        assert f["p50_ms"] >= 8, (who, f)
    assert r["ideal"]["p99_ms"] == min(r["ideal_oldest"]["p99_ms"], r["ideal_any"]["p99_ms"]), r
    assert abs(r["p99_ratio"] - r["lanepack"]["p99_ms"] / r["ideal"]["p99_ms"]) < 1e-3, r
# more load, more fill
assert rows[1]["ideal"]["fill"] > rows[0]["ideal"]["fill"], rows
print("ok")
PY
  check "$policy: figures are sane" "grep -q '^ok$' '$tmp/check' || { cat '$tmp/check'; false; }"
done

# ---- --compare: the second policy's figures are its own run's ----
"$sim" --lengths "$data/manpages.lengths" "${base[@]}" --load 0.3,0.7 --duration 3 --seed 3 \
  --policy core --compare legacy --json > "$tmp/cmp.json" 2> "$tmp/err"
check "compare run exits 0" "[ $? -eq 0 ]"
"$sim" --lengths "$data/manpages.lengths" "${base[@]}" --load 0.3,0.7 --duration 3 --seed 3 \
  --policy legacy --json > "$tmp/leg.json" 2> "$tmp/err"
python3 - "$tmp/cmp.json" "$tmp/a.json" "$tmp/leg.json" <<'PY' > "$tmp/check" 2>&1
import json, sys
cmp, core, leg = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
for c, a, l in zip(cmp, core, leg):
    assert c["lanepack"] == a["lanepack"] and c["ideal"] == a["ideal"], (c, a)
    assert c["compared_policy"] == "legacy" and c["compared"] == l["lanepack"], (c, l)
    assert c["compared_capacity_rps"] == l["lanepack_capacity_rps"], (c, l)
    assert abs(c["compared_p99_ratio"] - l["p99_ratio"]) < 1e-3, (c, l)
print("ok")
PY
check "compare: each policy's figures as when run alone" "grep -q '^ok$' '$tmp/check' || { cat '$tmp/check'; false; }"

# ---- the command of issue 19, shortened, prints its table ----
"$sim" --lengths "$data/manpages.lengths" "${base[@]}" --load 0.2,0.5,0.8,0.9 --duration 3 --seed 1 \
  > "$tmp/table" 2> "$tmp/err"
check "table run exits 0" "[ $? -eq 0 ]"
check "table has a lanepack and an ideal row per load" \
  "[ \$(grep -c '^ *[0-9]*% ' '$tmp/table') -eq 4 ] && [ \$(grep -c 'ideal' '$tmp/table') -ge 4 ]"
check "table says the capacity" "grep -q 'capacity under overload: ideal [1-9]' '$tmp/table'"
check "stderr says the time taken" "grep -q 'requests through .* in [0-9.]* s' '$tmp/err'"

# ---- faults: every request still answered once ----
"$sim" --lengths "$data/changelog-entries.lengths" "${base[@]}" --rate 3000 --duration 3 --seed 2 \
  --fail-rate 0.02 --stall-rate 0.01 --slow-error-rate 0.01 --jitter 0.2 --lead-ms 2 --devices 2 \
  --backends 2 --json > "$tmp/f.json" 2> "$tmp/err"
check "faulty run exits 0" "[ $? -eq 0 ]"
python3 - "$tmp/f.json" <<'PY' > "$tmp/check" 2>&1
import json, sys
r = json.loads(open(sys.argv[1]).readline())
f = r["lanepack"]
assert f["unanswered"] == 0 and f["double_answered"] == 0, f
assert f["ok"] + f["errors"] == f["requests"], f
assert f["failed_batches"] > 0, f
assert f["ok"] > 0.95 * f["requests"], f
assert r["ideal"]["failed_batches"] == 0, r["ideal"]
print("ok")
PY
check "faults: every request answered once" "grep -q '^ok$' '$tmp/check' || { cat '$tmp/check'; false; }"

# ---- issue 33: mixed faults with the invariants checked at every step ----
# (the core's own, and no request waiting 2 s on nothing while a device is
# idle). Seed 1 with 5% stalls broke the second at 33 s before stall times were
# anchored (a stalled batch held its device to its 30 s transfer timeout).
"$sim" --lengths 'lognormal:mu=4.5,sigma=1,max=2000' --shapes 8x512,4x2048 --cost-ms 8x512=2 \
  --cost-ms 4x2048=2 --rate 800 --duration 60 --seed 1 --lead-ms 1 --jitter 0.2 --fail-rate 0.02 \
  --reset-rate 0.01 --stall-rate 0.05 --no-ideal --check > "$tmp/inv.txt" 2>&1
check "faults: the invariants hold at every step (stalls, resets, 5xx)" \
  "[ $? -eq 0 ] || { cat '$tmp/inv.txt'; false; }"

# The same checks through the capacity run, the ideal's and the core's, at
# 1.5x capacity: under overload a request waits seconds behind the backlog and
# a device is idle for the instant between batches, which is no breach (the
# check once counted the wait alone and failed every --load with --check).
"$sim" --lengths "$data/manpages.lengths" --shapes 8x512 --cost-ms 8x512=3 --load 0.5 --requests 500 \
  --capacity-s 5 --check > "$tmp/invload.txt" 2>&1
check "faults: the invariants hold through an overloaded capacity run (--load with --check)" \
  "[ $? -eq 0 ] && grep -q 'capacity under overload' '$tmp/invload.txt' || { cat '$tmp/invload.txt'; false; }"

# ---- a trace ----
printf '# ms len prio deadline\n0 100\n0.5 3000 1\n1,9000\n2 500 0 50\n\n30 7000\n' > "$tmp/trace"
"$sim" --trace "$tmp/trace" "${base[@]}" --json > "$tmp/t.json" 2> "$tmp/err"
check "trace run exits 0" "[ $? -eq 0 ] || { cat '$tmp/err'; false; }"
python3 - "$tmp/t.json" <<'PY' > "$tmp/check" 2>&1
import json, sys
r = json.loads(open(sys.argv[1]).readline())
f = r["lanepack"]
# the 9000-token request no shape holds gets its error, the rest their answer
assert r["requests"] == 5 and f["unanswered"] == 0 and f["ok"] == 4 and f["errors"] == 1, r
print("ok")
PY
check "trace: five requests, one too long" "grep -q '^ok$' '$tmp/check' || { cat '$tmp/check'; false; }"

# ---- the goals of issue 19 that the core meets, as thresholds ----
# p99 within 1.1x of the ideal at 10-80% load and 1.25x at 90%; capacity at
# least 0.99 of the ideal's; with 1% of batches failing 5xx, p99 within 1.5x of
# no faults. (Measured over more mixes, shape sets and devices by
# bench/sim-goals.py; these are the cases met, on short runs.)
goal() { # mix, seconds, shapes, cost args... (the seconds give each load a few thousand requests)
  local mix=$1 secs=$2 shapes=$3
  shift 3
  local args=(--lengths "$data/$mix.lengths" --shapes "$shapes" "$@" --load 0.1,0.5,0.8,0.9
              --duration $secs --seed 1 --policy core --json)
  "$sim" "${args[@]}" > "$tmp/g.json" 2> "$tmp/err" &&
    "$sim" "${args[@]}" --fail-rate 0.01 --no-ideal > "$tmp/gf.json" 2>> "$tmp/err"
  check "goals on $mix, $shapes $*: runs exit 0" "[ $? -eq 0 ] || { cat '$tmp/err'; false; }"
  python3 - "$tmp/g.json" "$tmp/gf.json" <<'PY' > "$tmp/check" 2>&1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
faulty = [json.loads(l) for l in open(sys.argv[2])]
bad = []
for r, f in zip(rows, faulty):
    limit = 1.25 if r["load"] >= 0.9 else 1.1
    if r["p99_ratio"] > limit:
        bad.append("p99 %.2fx the ideal's at %.0f%% load (limit %.2f)" % (r["p99_ratio"], r["load"] * 100, limit))
    x = f["lanepack"]["p99_ms"] / r["lanepack"]["p99_ms"]
    if x > 1.5:
        bad.append("with 1%% failing, p99 %.2fx no faults' at %.0f%% load" % (x, r["load"] * 100))
    assert f["lanepack"]["failed_batches"] > 0 and f["lanepack"]["unanswered"] == 0, f
cap = rows[0]["lanepack_capacity_rps"] / rows[0]["capacity_rps"]
if cap < 0.99:
    bad.append("capacity %.3f of the ideal's" % cap)
print("\n".join(bad) if bad else "ok")
PY
  check "goals on $mix, $shapes $*: met" "grep -q '^ok$' '$tmp/check' || { cat '$tmp/check'; false; }"
}
goal manpages 5 4x8192,8x2048 --cost-ms 4x8192=20 --cost-ms 8x2048=8
goal changelog-entries 2 4x8192,8x2048 --cost-ms 4x8192=20 --cost-ms 8x2048=8
# met since a short sequence no longer rides a slow rectangle when a cheaper
# batch on another device answers it sooner (p99 1.13-1.16x at 50-80% before)
goal changelog-entries 0.5 4x8192,8x2048 --cost-ms 4x8192=20 --cost-ms 8x2048=8 --devices 4
goal changelog-entries 0.5 4x8192,8x2048,32x512 --cost-ms 4x8192=20 --cost-ms 8x2048=8 --cost-ms 32x512=5 --devices 4
# met since the window holds 8 of the largest rectangles (capacity 0.982 before)
goal manpages 5 4x8192,8x2048,32x512 --cost-ms 4x8192=20 --cost-ms 8x2048=8 --cost-ms 32x512=5
goal copyright 5 4x8192 --cost-ms 4x8192=20 --devices 4

# ---- --big: requests of many sequences beside one-sequence ones ----
# every sequence answered once under faults and the invariants; the light
# requests' figures apart; the fair share: their p99 well below the age order's
"$sim" --lengths "$data/changelog-entries.lengths" --shapes 4x8192,8x2048,32x512 --cost-ms 4x8192=20 \
  --cost-ms 8x2048=8 --cost-ms 32x512=5 --rate 6000 --duration 3 --big 2048,1000 --seed 5 \
  --policy core --compare core-age --no-ideal --check --fail-rate 0.005 --json > "$tmp/big.json" 2> "$tmp/err"
check "big: run exits 0" "[ $? -eq 0 ] || { cat '$tmp/err'; false; }"
python3 - "$tmp/big.json" <<'PY' > "$tmp/check" 2>&1
import json, sys
r = json.loads(open(sys.argv[1]).readline())
fair, age = r["lanepack"], r["compared"]
for f in (fair, age):
    assert f["requests"] == r["requests"] > 3 * 2048, f
    assert f["unanswered"] == 0 and f["double_answered"] == 0, f
    assert f["ok"] + f["errors"] == f["requests"], f
    assert 0 < f["light_requests"] <= f["ok"] - 2048, f
    assert 0 < f["light_wait_p99_ms"] < f["light_p99_ms"], f
assert fair["light_p99_ms"] < 0.5 * age["light_p99_ms"], (fair, age)
assert fair["fill"] >= 0.98 * age["fill"], (fair, age)
print("ok")
PY
check "big: every sequence answered once, the light ones not behind the large ones" \
  "grep -q '^ok$' '$tmp/check' || { cat '$tmp/check'; false; }"
"$sim" --lengths "$data/manpages.lengths" "${base[@]}" --load 0.3 --duration 3 --seed 3 --json > "$tmp/nobig.json" 2> "$tmp/err"
check "without --big no light figures" "! grep -q light_ '$tmp/nobig.json'"

# ---- bad arguments: exit 2 and say what is wrong ----
bad() { # description, expected message (grep -E), args...
  local what=$1 msg=$2
  shift 2
  "$sim" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  check "bad args ($what): exit 2" "[ $rc -eq 2 ]"
  check "bad args ($what): says so" "grep -Eq -- '$msg' '$tmp/err' || { cat '$tmp/err'; false; }"
}
L=(--lengths "$data/manpages.lengths")
bad "nothing" "one of --lengths"
bad "no shapes" "--shapes is required" "${L[@]}" --rate 5
bad "bad shapes" "--shapes" "${L[@]}" --shapes 4y8192 --cost-ms 4x8192=20 --rate 5
bad "no cost" "no --cost-ms" "${L[@]}" --shapes 4x8192,8x2048 --cost-ms 4x8192=20 --rate 5
bad "cost of an unknown shape" "not in --shapes" "${L[@]}" "${base[@]}" --cost-ms 2x512=3 --rate 5
bad "cost syntax" "--cost-ms: expected" "${L[@]}" "${base[@]}" --cost-ms 4x8192 --rate 5
bad "no load nor rate" "one of --load" "${L[@]}" "${base[@]}"
bad "load and rate" "one of --load" "${L[@]}" "${base[@]}" --load 0.5 --rate 5
bad "bad load" "--load: expected" "${L[@]}" "${base[@]}" --load 0.5,x
bad "negative rate" "--rate: expected" "${L[@]}" "${base[@]}" --rate -3
bad "zero devices" "--devices: expected" "${L[@]}" "${base[@]}" --rate 5 --devices 0
bad "too many backends for the core" "at most 16" "${L[@]}" "${base[@]}" --rate 5 --backends 17
bad "fault rates over 1" "more than 1" "${L[@]}" "${base[@]}" --rate 5 --fail-rate 0.6 --stall-rate 0.6
bad "reset rate over 1" "--reset-rate: expected 0..1" "${L[@]}" "${base[@]}" --rate 5 --reset-rate 2
bad "fault rates with resets over 1" "more than 1" "${L[@]}" "${base[@]}" --rate 5 --fail-rate 0.6 --reset-rate 0.6
bad "unknown option" "unknown option .--frobnicate" "${L[@]}" "${base[@]}" --rate 5 --frobnicate
bad "missing value" "--seed needs a value" "${L[@]}" "${base[@]}" --rate 5 --seed
bad "unknown policy" "--policy: expected" "${L[@]}" "${base[@]}" --rate 5 --policy magic
bad "compare with itself" "is the policy already" "${L[@]}" "${base[@]}" --rate 5 --compare core
bad "missing lengths file" "no-such.lengths" --lengths "$tmp/no-such.lengths" "${base[@]}" --rate 5
bad "trace with a rate" "--trace brings" --trace "$tmp/trace" "${base[@]}" --rate 5
printf '0 100\n1 abc\n' > "$tmp/bad.trace"
bad "bad trace line" "bad.trace:2" --trace "$tmp/bad.trace" "${base[@]}"
bad "big of one" "--big: expected N,MS" "${L[@]}" "${base[@]}" --rate 5 --big 1,100
bad "big without a period" "--big: expected N,MS" "${L[@]}" "${base[@]}" --rate 5 --big 64
bad "big with a trace" "--big does not apply" --trace "$tmp/trace" "${base[@]}" --big 64,100
bad "stray argument" "unexpected argument .extra" "${L[@]}" "${base[@]}" --rate 5 extra

exit $fail
