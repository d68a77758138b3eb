#!/usr/bin/env bash
# The wire to the backend, measured: the same closed-loop load (600-token
# requests, every answer verified) through lanepack in front of the emulator at
# zero cost, once with the lanepack JSON protocol upstream and once with v2
# binary tensors (and v2 JSON tensors). For each: requests/s, lanepack's CPU-
# seconds per 1,000 requests and the backend's CPU-milliseconds per batch, read
# from /proc around each run. Then the reference PyTorch server's time to decode
# a 4x8192 batch's inputs and encode its outputs in each form (when torch is there).
# Usage: bench/bench-wire.sh [BUILD_DIR] [DURATION] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${2:-10s}
conc=${3:-256}
. bench/bench-common.sh
metric() { # port prefix: sum of the samples
  curl -s "http://127.0.0.1:$1/metrics" | awk -v p="$2" 'index($0, p) == 1 {s += $NF} END {print s + 0}'
}

p_emu=$(free_port)
"$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 8x4096 --cost-ms 0 \
  --protocol both 2> "$tmp/emu.log" & pids+=($!)
emu_pid=$!
sleep 0.3

printf '%-34s %9s %8s %8s %12s %14s %10s\n' "upstream protocol" "req/s" "p50 ms" "p99 ms" \
  "lp CPU s/1k" "backend ms/batch" "verified"
run() { # name, model JSON keys
  local port cfg lp t0 e0 b0 t1 e1 b1
  port=$(free_port)
  cfg="$tmp/$1.json"
  printf '{"listen": "127.0.0.1:%s", "log_level": "warn", "models": {"m": {"shapes": "8x4096", "backends": ["http://127.0.0.1:%s"], "max_wait_ms": 2 %s}}}\n' \
    "$port" "$p_emu" "$2" > "$cfg"
  "$build/src/lanepack" --config "$cfg" 2> "$tmp/$1.log" & lp=$!
  pids+=($lp)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  t0=$(cpu_ticks "$lp"); e0=$(cpu_ticks "$emu_pid"); b0=$(metric "$port" "lanepack_batches_total{")
  "$build/loadgen/lanepack-loadgen" --url "http://127.0.0.1:$port" --concurrency "$conc" \
    --duration "$duration" --lengths fixed:600 --verify --json "$tmp/$1.out" > /dev/null 2>&1
  t1=$(cpu_ticks "$lp"); e1=$(cpu_ticks "$emu_pid"); b1=$(metric "$port" "lanepack_batches_total{")
  kill "$lp"; wait "$lp" 2>/dev/null || true
  python3 - "$tmp/$1.out" "$1" "$t0" "$t1" "$e0" "$e1" "$b0" "$b1" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); hz = os.sysconf('SC_CLK_TCK')
t0, t1, e0, e1, b0, b1 = (float(x) for x in sys.argv[3:9])
lp = (t1 - t0) / hz; emu = (e1 - e0) / hz; batches = max(b1 - b0, 1)
ok = d['ok']
print('%-34s %9.0f %8.2f %8.2f %12.3f %14.3f %10s' % (sys.argv[2], d['requests_per_s'],
      d['latency_ms']['p50'], d['latency_ms']['p99'], lp / max(ok, 1) * 1000, emu / batches * 1000,
      '%d/%d' % (ok - d['mismatches'], d['sent'])))
PY
}
run "lanepack JSON" ''
run "v2 binary tensors" ', "protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}"}'
run "v2 JSON tensors" ', "protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}", "binary": false}'

if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo
  /usr/bin/python3 deploy/backend/server.py --bench-codec
fi
