#!/usr/bin/env bash
# The packbench command line: its table and JSON on a real length file, and its
# errors for bad input. Usage: test-packbench.sh PACKBENCH TESTS_DIR
set -u
pb=$1
data=$2/data
fail=0
check() { # description, condition
  if eval "$2"; then echo "ok - $1"; else echo "not ok - $1"; fail=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$pb" --lengths "$data/manpages.lengths" --shapes 4x8192 --json > "$tmp/out.json" 2> "$tmp/err"
check "json run exits 0" "[ $? -eq 0 ]"
python3 - "$tmp/out.json" <<'PY' > "$tmp/check" 2>&1
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["algo"]: r for r in d["rows"]}
for a in ("ffd", "bfd", "spfhp", "online-bfd", "pad-bucket", "pad-longest-4"):
    assert a in rows, a
for r in d["rows"]:
    assert r["batches"] >= r["lower_bound"] > 0, r
    assert 0 < r["fill"] <= 1, r
    assert r["rejected"] > 0, r   # manpages has pages over 8192 tokens
# packing beats padding on a long-tailed mix
assert rows["bfd"]["fill"] > 0.9 and rows["bfd"]["fill"] > 2 * rows["pad-bucket"]["fill"], rows
print("ok")
PY
check "json rows are consistent" "grep -q '^ok$' '$tmp/check' || { cat '$tmp/check'; false; }"

printf '12\n40\nabc\n' > "$tmp/bad.lengths"
"$pb" --lengths "$tmp/bad.lengths" > /dev/null 2> "$tmp/err"
rc=$?
check "bad line exits 2" "[ $rc -eq 2 ]"
check "bad line names file and line" "grep -q 'bad.lengths:3' '$tmp/err'"

"$pb" --lengths "fixed:9000" --shapes 4x8192 > "$tmp/out" 2>&1
check "all too long: rejected, no crash" "[ $? -eq 0 ] && grep -q 'p50 9000' '$tmp/out'"

"$pb" --lengths "lognormal:mu=5,sigma=1,max=4000" --shapes bogus > /dev/null 2> "$tmp/err"
check "bad shapes rejected" "[ $? -eq 2 ] && grep -q \"bad shape 'bogus'\" '$tmp/err'"

"$pb" --lengths "nonsense:1" > /dev/null 2> "$tmp/err"
check "unknown mix is a missing file" "[ $? -eq 2 ] && grep -q 'nonsense:1' '$tmp/err'"

"$pb" --lengths "$data/changelog-entries.lengths" --shapes 4x8192 --advise 3 > "$tmp/adv" 2>&1
check "advise prints a proposal" "[ $? -eq 0 ] && grep -q 'least padding, packed' '$tmp/adv'"

"$pb" --lengths fixed:10 --algo nope > /dev/null 2> "$tmp/err"
check "unknown algo rejected" "[ $? -eq 2 ] && grep -q 'unknown --algo' '$tmp/err'"

if [ $fail -eq 0 ]; then echo "packbench-cli: all passed"; fi
exit $fail
