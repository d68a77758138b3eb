#!/usr/bin/env bash
# What one core of lanepack holds: lanepack on core 1 in front of the emulator
# (batches cost 0 ms, so the proxy is the limit) with the client and emulator
# on core 0, for a chat-like mix (Debian changelog entries) and a document-like
# one (manual pages), over both backend wires. Requests per second of lanepack's
# own CPU time (user+system from /proc) is the rate one saturated core holds.
# Usage: loadgen/bench-core.sh [BUILD_DIR] [DURATION] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${2:-5s}
conc=${3:-256}
pin0="taskset -c 0"; pin1="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { pin0=""; pin1=""; }
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
data=tests/data
[ -f "$data/changelog-entries.lengths" ] || data=../shared/data

printf '%-10s %-10s %9s %12s %22s %16s %8s\n' mix wire "req/s" "tokens/s" "req per lanepack CPU-s" "tokens per CPU-s" rejected
for wire in lanepack v2; do
  p_emu=$(free_port); p_lp=$(free_port)
  emu_flags=(); v2_keys=""
  if [ "$wire" = v2 ]; then
    emu_flags=(--protocol v2); v2_keys=', "protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}"}'
  fi
  $pin0 "$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 4x8192,8x2048 \
    --cost-ms 0 "${emu_flags[@]}" 2> "$tmp/emu.log" & emu=$!; pids+=($emu)
  printf '{"listen": "127.0.0.1:%s", "log_level": "warn", "models": {"default": {"shapes": "4x8192,8x2048", "backends": ["http://127.0.0.1:%s"], "max_wait_ms": 2 %s}}}\n' \
    "$p_lp" "$p_emu" "$v2_keys" > "$tmp/lp.json"
  $pin1 "$build/src/lanepack" --config "$tmp/lp.json" 2> "$tmp/lp.log" & lp=$!; pids+=($lp)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$p_lp/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
  for mix in changelog-entries manpages; do
    t0=$(awk '{print $14 + $15}' "/proc/$lp/stat")
    $pin0 "$build/loadgen/lanepack-loadgen" --url "http://127.0.0.1:$p_lp/v1/infer" --concurrency "$conc" \
      --duration "$duration" --lengths "$data/$mix.lengths" --verify --json "$tmp/out.json" > "$tmp/lg.txt" 2>&1 || true
    t1=$(awk '{print $14 + $15}' "/proc/$lp/stat")
    python3 - "$tmp/out.json" "$t0" "$t1" "$mix" "$wire" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); cpu = (int(sys.argv[3]) - int(sys.argv[2])) / os.sysconf("SC_CLK_TCK")
if d["mismatches"]:
    sys.exit("bench-core: %d answers failed verification" % d["mismatches"])
secs = d["ok"] / d["requests_per_s"] if d["requests_per_s"] else 1
toks = d.get("tokens_per_s", 0)
print("%-10s %-10s %9.0f %12.0f %22.0f %16.0f %8d" % (sys.argv[4].split("-")[0], sys.argv[5],
      d["requests_per_s"], toks, d["ok"] / cpu if cpu else 0, toks * secs / cpu if cpu else 0,
      d["failed"]))
PY
  done
  kill "$lp" "$emu"; wait "$lp" "$emu" 2>/dev/null || true
done
