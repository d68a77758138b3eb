#!/usr/bin/env bash
# What one core of lanepack holds: lanepack on core 1 in front of the emulator
# (batches cost 0 ms, so the proxy is the limit) with the client and emulator
# on core 0, for a chat-like mix (Debian changelog entries) and a document-like
# one (manual pages), over both backend wires. Requests per second of lanepack's
# own CPU time (user+system from /proc) is the rate one saturated core holds.
# With --threads 1,2 (lanepack --threads N, on cores 1..N when the machine has
# them, else sharing every core with the client): each row per thread count,
# with p99, every answer verified, and packing on the same traffic (requests
# per batch and mean fill, from /metrics) to compare with the first count.
# Usage: bench/bench-core.sh [--threads 1,2] [BUILD_DIR] [DURATION] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
threads_list=1
pos=()
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads_list=${2:?--threads wants a list such as 1,2}; shift 2 ;;
    --threads=*) threads_list=${1#--threads=}; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) pos+=("$1"); shift ;;
  esac
done
set -- "${pos[@]+"${pos[@]}"}"
build=${1:-build}
duration=${2:-5s}
conc=${3:-256}
IFS=, read -r -a threads <<< "$threads_list"
for t in "${threads[@]}"; do
  [[ $t =~ ^[1-9][0-9]*$ ]] || { echo "bench-core: --threads wants counts such as 1,2, not '$threads_list'" >&2; exit 2; }
done
ncpu=$(nproc)
pin0="taskset -c 0"
[ "$ncpu" -ge 2 ] || pin0=""
pin_proxy() { if [ "$ncpu" -ge $(($1 + 1)) ]; then echo "taskset -c 1-$1"; fi; }
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v p="$2" 'index($0, p) == 1 {s += $NF} END {printf "%.6f\n", s + 0}'; }
data=tests/data
[ -f "$data/changelog-entries.lengths" ] || data=../shared/data

printf '%-7s %-10s %-10s %9s %12s %22s %16s %8s %9s %8s %10s\n' threads mix wire "req/s" "tokens/s" "req per lanepack CPU-s" \
  "tokens per CPU-s" rejected "p99 ms" "req/batch" "mean fill"
for nt in "${threads[@]}"; do
  pin1=$(pin_proxy "$nt")
  [ -n "$pin1" ] || echo "# threads $nt: lanepack shares all $ncpu cores with the client and emulator (too few cores to pin)"
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
    $pin1 "$build/src/lanepack" --config "$tmp/lp.json" --threads "$nt" 2> "$tmp/lp.log" & lp=$!; pids+=($lp)
    for _ in $(seq 50); do curl -sf "http://127.0.0.1:$p_lp/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
    for mix in changelog-entries manpages; do
      b0=$(metric "$p_lp" lanepack_batches_total); f0=$(metric "$p_lp" lanepack_batch_fill_ratio_sum); n0=$(metric "$p_lp" lanepack_batch_fill_ratio_count)
      t0=$(awk '{print $14 + $15}' "/proc/$lp/stat")
      $pin0 "$build/loadgen/lanepack-loadgen" --url "http://127.0.0.1:$p_lp/v1/infer" --concurrency "$conc" \
        --duration "$duration" --lengths "$data/$mix.lengths" --verify --json "$tmp/out.json" > "$tmp/lg.txt" 2>&1 || true
      t1=$(awk '{print $14 + $15}' "/proc/$lp/stat")
      b1=$(metric "$p_lp" lanepack_batches_total); f1=$(metric "$p_lp" lanepack_batch_fill_ratio_sum); n1=$(metric "$p_lp" lanepack_batch_fill_ratio_count)
      python3 - "$tmp/out.json" "$t0" "$t1" "$mix" "$wire" "$nt" "$b0" "$b1" "$f0" "$f1" "$n0" "$n1" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); cpu = (int(sys.argv[3]) - int(sys.argv[2])) / os.sysconf("SC_CLK_TCK")
if d["mismatches"]:
    sys.exit("bench-core: %d answers failed verification" % d["mismatches"])
secs = d["ok"] / d["requests_per_s"] if d["requests_per_s"] else 1
toks = d.get("tokens_per_s", 0)
b = float(sys.argv[8]) - float(sys.argv[7]); fs = float(sys.argv[10]) - float(sys.argv[9]); fn = float(sys.argv[12]) - float(sys.argv[11])
print("%-7s %-10s %-10s %9.0f %12.0f %22.0f %16.0f %8d %9.2f %9.1f %10.4f" % (sys.argv[6], sys.argv[4].split("-")[0], sys.argv[5],
      d["requests_per_s"], toks, d["ok"] / cpu if cpu else 0, toks * secs / cpu if cpu else 0,
      d["failed"], d["latency_ms"]["p99"], d["ok"] / b if b else 0, fs / fn if fn else 0))
PY
    done
    kill "$lp" "$emu"; wait "$lp" "$emu" 2>/dev/null || true
  done
done
echo "(every answer verified: a mismatch stops the script; req/batch and mean fill are the run's batches, from lanepack's /metrics)"
