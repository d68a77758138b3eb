#!/usr/bin/env bash
# Runs one libFuzzer target for a bounded time: new inputs go to a scratch
# directory, the seeds in the repository are only read. A crash, leak, hang
# (-timeout) or failed check fails the test; what crashed is kept in the log.
# Usage: run-fuzz.sh TARGET SEED_DIR SECONDS (LP_FUZZ_SECONDS overrides: run longer by hand)
set -u
target=$1 seeds=$2 secs=${LP_FUZZ_SECONDS:-$3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# libFuzzer's own exit codes (77 on a crash, 70 on a timeout) must not reach
# meson as 77, which it reads as "skipped": any failure exits 1
"$target" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -error_exitcode=1 -timeout_exitcode=1 \
  -artifact_prefix="$work/" "$work" "$seeds" 2>&1 | tail -25
rc=${PIPESTATUS[0]}
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-*; do
  [ -e "$f" ] && { echo "failing input ($f):"; od -c "$f" | head -20; }
done
[ "$rc" -eq 0 ] || exit 1
exit 0
