#!/usr/bin/env bash
# The scheduler thread's share of the proxy's CPU, and requests per proxy
# CPU-second, for each front count (issue 25: the one serial part must only
# decide; its share bounds how many cores one process can use).
# Drives lanepack in front of the emulator (batches cost 0 ms) with wrk,
# 600-token bodies, on two wires:
#   json: clients POST /v1/infer (lanepack JSON), the backend speaks lanepack JSON;
#   v2:   clients POST /v2/models/default/infer with a binary INT32 tensor and ask
#         for a binary answer, the backend speaks v2 binary tensors.
# Per-thread user+system ticks come from /proc/PID/task/*/stat before and after
# each run. The scheduler thread is the one named lp-sched when threads are
# named, else the main thread (task id = PID). Builds before issue 34 ran 1
# front on the scheduler's loop: their share is not reported there.
# Packing is printed from /metrics (sequences per batch, mean fill) so a
# change of the byte path can be checked to leave it alone.
# Usage: bench/bench-sched-share.sh [--threads 1,2] [--wires json,v2]
#                                     [BUILD_DIR] [DURATION] [CONNECTIONS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
threads_list=1,2
wires_list=json,v2
pos=()
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads_list=${2:?--threads wants a list such as 1,2}; shift 2 ;;
    --wires) wires_list=${2:?--wires wants a list such as json,v2}; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) pos+=("$1"); shift ;;
  esac
done
set -- "${pos[@]+"${pos[@]}"}"
build=${1:-build}
duration=${2:-10s}
conc=${3:-256}
runs=${4:-3}
command -v wrk >/dev/null || { echo "bench: wrk is not installed (apt-get install wrk)" >&2; exit 1; }
IFS=, read -r -a threads <<< "$threads_list"
IFS=, read -r -a wires <<< "$wires_list"
for t in "${threads[@]}"; do
  [[ $t =~ ^[1-9][0-9]*$ ]] || { echo "bench: --threads wants counts such as 1,2, not '$threads_list'" >&2; exit 2; }
done
for w in "${wires[@]}"; do
  case $w in json|v2) ;; *) echo "bench: --wires takes json and v2, not '$w'" >&2; exit 2 ;; esac
done
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The wrk scripts: the same 600 token ids on both wires (the v2 body as a Lua
# string with every byte escaped, so the binary tensor survives).
python3 - "$tmp" <<'PY'
import json, random, struct, sys
tmp = sys.argv[1]
random.seed(1)
ids = [random.randrange(32000) for _ in range(600)]
body = '{"input_ids": [' + ", ".join(map(str, ids)) + "]}"
open(tmp + "/json.lua", "w").write(
    'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = \'%s\'\n' % body)
raw = struct.pack("<%di" % len(ids), *ids)
head = json.dumps({"inputs": [{"name": "input_ids", "datatype": "INT32", "shape": [1, len(ids)],
                               "parameters": {"binary_data_size": len(raw)}}],
                   "parameters": {"binary_data_output": True}}).encode()
esc = "".join("\\%d" % b for b in head + raw)
open(tmp + "/v2.lua", "w").write(
    'wrk.method = "POST"\nwrk.path = "/v2/models/default/infer"\n'
    'wrk.headers["Content-Type"] = "application/octet-stream"\n'
    'wrk.headers["Inference-Header-Content-Length"] = "%d"\nwrk.body = "%s"\n' % (len(head), esc))
PY

# "tid ticks name" for every thread of a process (ticks: user+system).
thread_ticks() {
  for f in /proc/"$1"/task/*/stat; do
    awk -v f="$f" '{ s = $0; sub(/^[^(]*\(/, "", s); name = s; sub(/\).*/, "", name); sub(/^.*\) /, "", s);
      split(s, a, " "); split(f, p, "/"); print p[5], a[12] + a[13], name }' "$f" 2>/dev/null || true
  done
}
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v p="$2" 'index($0, p) == 1 {s += $NF} END {printf "%.6f\n", s + 0}'; }

: > "$tmp/summary.txt"
for wire in "${wires[@]}"; do
  p_emu=$(free_port)
  emu_flags=(); v2_keys=""; url_path=/v1/infer
  if [ "$wire" = v2 ]; then
    emu_flags=(--protocol v2)
    v2_keys=', "protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}"}'
    url_path=/v2/models/default/infer
  fi
  "$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 8x4096 --cost-ms 0 \
    "${emu_flags[@]}" 2> "$tmp/emu-$wire.log" & emu_pid=$!; pids+=($emu_pid)
  for nt in "${threads[@]}"; do
    p_lp=$(free_port)
    printf '{"listen": "127.0.0.1:%s", "log_level": "warn", "max_connections": 20000, "models": {"default": {"shapes": "8x4096", "backends": ["http://127.0.0.1:%s"], "max_wait_ms": 2 %s}}}\n' \
      "$p_lp" "$p_emu" "$v2_keys" > "$tmp/lp.json"
    "$build/src/lanepack" --config "$tmp/lp.json" --threads "$nt" 2> "$tmp/lp-$wire-$nt.log" & lp_pid=$!; pids+=($lp_pid)
    for _ in $(seq 50); do curl -sf "http://127.0.0.1:$p_lp/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
    b0=$(metric "$p_lp" lanepack_batches_total); f0=$(metric "$p_lp" lanepack_batch_fill_ratio_sum)
    fc0=$(metric "$p_lp" lanepack_batch_fill_ratio_count)
    : > "$tmp/runs"
    for i in $(seq "$runs"); do
      thread_ticks "$lp_pid" > "$tmp/t0"
      wrk -t 1 -c "$conc" -d "$duration" -s "$tmp/$wire.lua" "http://127.0.0.1:$p_lp$url_path" > "$tmp/wrk.txt" 2>&1 ||
        { echo "bench: wrk failed against lanepack ($wire, $nt fronts):" >&2; cat "$tmp/wrk.txt" >&2; exit 1; }
      thread_ticks "$lp_pid" > "$tmp/t1"
      python3 - "$tmp" "$lp_pid" "$nt" "$wire" "$i" >> "$tmp/runs" <<'PY'
import os, re, sys
tmp, pid, nt, wire, run = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
def load(p):
    d = {}
    for l in open(p):
        tid, ticks, name = l.split(None, 2)
        d[tid] = (int(ticks), name.strip())
    return d
a, b = load(tmp + "/t0"), load(tmp + "/t1")
delta = {t: b[t][0] - a.get(t, (0, ""))[0] for t in b}
total = sum(delta.values())
named = [t for t in b if b[t][1] == "lp-sched"]
sched = named[0] if named else pid
# the front runs on a thread of its own (lp-front-N) since one path through the
# threads (issue 34): the scheduler's share is its own with 1 front too
fronts_apart = any(b[t][1].startswith("lp-front-") for t in b)
share = delta.get(sched, 0) / total if total and (nt >= 2 or fronts_apart) else float("nan")
t = open(tmp + "/wrk.txt").read()
n = int(re.search(r"([0-9]+) requests in", t).group(1))
bad = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses:\s*([0-9]+)", t))
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
if m: bad += sum(int(x) for x in m.groups())
rps = float(re.search(r"Requests/sec:\s*([0-9.]+)", t).group(1))
cpu_s = total / os.sysconf("SC_CLK_TCK")
print(rps, n - bad, cpu_s, share, bad)
sys.stderr.write("run %s %-4s threads %d: %7.0f req/s  %7.0f req per proxy CPU-second  scheduler share %5.1f%%  non-2xx or errors %d\n"
                 % (run, wire, nt, rps, (n - bad) / cpu_s if cpu_s else 0, share * 100, bad))
PY
    done
    b1=$(metric "$p_lp" lanepack_batches_total); f1=$(metric "$p_lp" lanepack_batch_fill_ratio_sum)
    fc1=$(metric "$p_lp" lanepack_batch_fill_ratio_count)
    python3 - "$tmp/runs" "$wire" "$nt" "$b1" "$b0" "$f1" "$f0" "$fc1" "$fc0" <<'PY' | tee -a "$tmp/summary.txt"
import math, statistics, sys
rows = [list(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
wire, nt = sys.argv[2], sys.argv[3]
b1, b0, f1, f0, fc1, fc0 = map(float, sys.argv[4:10])
per_cpu = statistics.median(r[1] / r[2] if r[2] else 0 for r in rows)
shares = [r[3] for r in rows if not math.isnan(r[3])]
ok = sum(r[1] for r in rows)
share = "%.1f%%" % (100 * statistics.median(shares)) if shares else "n/a (1 front shares its thread)"
pack = ("%.1f sequences per batch, mean fill %.4f" % (ok / (b1 - b0), (f1 - f0) / (fc1 - fc0))
        if b1 > b0 and fc1 > fc0 else "no batches counted")
print("%-4s threads %s: median of %d: %.0f req/s, %.0f req per proxy CPU-second, scheduler share %s, "
      "non-2xx or errors %d; packing %s"
      % (wire, nt, len(rows), statistics.median(r[0] for r in rows), per_cpu, share, sum(r[4] for r in rows), pack))
PY
    kill "$lp_pid" 2>/dev/null || true
    wait "$lp_pid" 2>/dev/null || true
  done
  kill "$emu_pid" 2>/dev/null || true
  wait "$emu_pid" 2>/dev/null || true
done
echo
echo "# summary ($duration runs, $conc connections, 600-token bodies, emulator at 0 ms, $(nproc) cores shared):"
cat "$tmp/summary.txt"
