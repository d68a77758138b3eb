#!/usr/bin/env bash
# Cost per request of lanepack (in front of the emulator, batches cost 0 ms)
# next to nginx as a plain reverse proxy (one worker, keep-alive to a static
# nginx upstream), same 600-token JSON bodies, same client, in one run:
#  - requests per second of the proxy's own CPU (user+system from /proc around
#    each run; median of RUNS alternating runs, so a noisy neighbour hits both);
#  - resident bytes per idle keep-alive connection (IDLE connections, each
#    served once; RSS growth / IDLE, loadgen/idle-conns.py);
#  - a perf profile of lanepack's top functions (if perf works here).
# Each round runs lanepack twice: with the very client nginx gets, and with every
# answer verified (--verify: the client then does more work per answer, so it
# offers lanepack less load); both are reported.
# Usage: loadgen/bench-vs-nginx.sh [BUILD_DIR] [DURATION] [CONCURRENCY] [RUNS] [IDLE]
#   LP_BENCH_WIRE=lanepack|v2  the backend protocol lanepack speaks (default lanepack:
#                              JSON, as the emulator's default; v2 = binary tensors)
#   LP_BENCH_PERF=0            skip the profile
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${2:-10s}
conc=${3:-256}
runs=${4:-3}
idle=${5:-10000}
wire=${LP_BENCH_WIRE:-lanepack}
command -v nginx >/dev/null || { echo "bench: nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
pin0="taskset -c 0"; pin1="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { pin0=""; pin1=""; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
p_nginx=$(free_port); p_up=$(free_port); p_emu=$(free_port); p_lp=$(free_port)

# The upstream answers what lanepack would: 600 integers, from a file (nginx's
# "return" takes 4 KB at most; POSTs to a static file need the 405 trick).
mkdir -p "$tmp/www"
chmod a+rx "$tmp" "$tmp/www"  # nginx workers run as www-data when started by root
python3 -c 'print("{\"output\": [" + ",".join(str(100000000 + i) for i in range(600)) + "]}")' > "$tmp/www/answer.json"
nginx_conf() { # name, server block
cat > "$tmp/$1.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile 65536;
pid $tmp/$1.pid;
error_log $tmp/$1-error.log warn;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path $tmp/body-$1; proxy_temp_path $tmp/proxy-$1;
  fastcgi_temp_path $tmp/fcgi-$1; uwsgi_temp_path $tmp/uwsgi-$1; scgi_temp_path $tmp/scgi-$1;
  client_body_buffer_size 64k;
  upstream backend { server 127.0.0.1:$p_up; keepalive 64; }
  $2
}
CONF
}
nginx_conf upstream "server { listen 127.0.0.1:$p_up; root $tmp/www; default_type application/json;
  location / { try_files /answer.json =404; error_page 405 =200 \$uri; } }"
nginx_conf proxy "server { listen 127.0.0.1:$p_nginx; location / { proxy_pass http://backend;
  proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"

cpu_ticks() { awk '{print $14 " " $15}' "/proc/$1/stat"; }

# One run: prints "req_per_s ok cpu_s p50 p99 failed mismatches user_s sys_s"
# for the proxy pid.
run() { # name url proxy-pid [extra loadgen flags]
  local name=$1 url=$2 pid=$3; shift 3
  local t0 t1
  t0=$(cpu_ticks "$pid")
  $pin0 "$build/loadgen/lanepack-loadgen" --url "$url" --concurrency "$conc" --duration "$duration" \
    --lengths fixed:600 --json "$tmp/$name.json" "$@" > "$tmp/$name.txt" 2>&1 ||
    { echo "bench: the load generator failed against $name:" >&2; cat "$tmp/$name.txt" >&2; exit 1; }
  t1=$(cpu_ticks "$pid")
  python3 - "$tmp/$name.json" $t0 $t1 <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); hz = os.sysconf("SC_CLK_TCK")
u = (int(sys.argv[4]) - int(sys.argv[2])) / hz; s = (int(sys.argv[5]) - int(sys.argv[3])) / hz
print(d["requests_per_s"], d["ok"], u + s, d["latency_ms"]["p50"], d["latency_ms"]["p99"], d["failed"],
      d.get("mismatches", 0), u, s)
PY
}

$pin0 nginx -c "$tmp/upstream.conf" -g 'daemon off;' & pids+=($!)
$pin1 nginx -c "$tmp/proxy.conf" -g 'daemon off;' & pids+=($!)
emu_flags=()
v2_keys=""
if [ "$wire" = v2 ]; then
  emu_flags=(--protocol v2)
  v2_keys=', "protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}"}'
fi
printf '{"listen": "127.0.0.1:%s", "log_level": "warn", "max_connections": 20000, "models": {"default": {"shapes": "8x4096", "backends": ["http://127.0.0.1:%s"], "max_wait_ms": 2 %s}}}\n' \
  "$p_lp" "$p_emu" "$v2_keys" > "$tmp/lp.json"
$pin0 "$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 8x4096 --cost-ms 0 \
  "${emu_flags[@]}" 2> "$tmp/emu.log" & pids+=($!)
$pin1 "$build/src/lanepack" --config "$tmp/lp.json" 2> "$tmp/lp.log" & pids+=($!)
lp_pid=$!
for _ in $(seq 50); do
  [ -f "$tmp/proxy.pid" ] && curl -sf "http://127.0.0.1:$p_lp/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
worker=$(pgrep -P "$(cat "$tmp/proxy.pid")" | head -1)
nginx_url="http://127.0.0.1:$p_nginx/v1/infer"
lp_url="http://127.0.0.1:$p_lp/v1/infer"

# Idle connections first, on fresh processes: memory already touched by the
# load runs would hide what a connection costs.
idle_n=""; idle_l=""
if [ "$idle" -gt 0 ]; then
  idle_n=$(python3 loadgen/idle-conns.py --port "$p_nginx" --pid "$worker" --count "$idle" | grep -o '[0-9]* bytes per' | cut -d' ' -f1)
  idle_l=$(python3 loadgen/idle-conns.py --port "$p_lp" --pid "$lp_pid" --count "$idle" | grep -o '[0-9]* bytes per' | cut -d' ' -f1)
fi

echo "# $runs alternating runs of $duration, $conc connections, 600-token JSON bodies; lanepack backend wire: $wire"
: > "$tmp/nginx.runs"; : > "$tmp/lanepack.runs"; : > "$tmp/same.runs"
for i in $(seq "$runs"); do
  r=$(run nginx "$nginx_url" "$worker"); echo "$r" >> "$tmp/nginx.runs"
  echo "run $i nginx:    $r" | awk '{printf "run %s %-9s %8.0f req/s  %8.0f req per proxy CPU-second  p99 %6.2f ms\n", $2, $3, $4, $5/$6, $8}'
  r=$(run lanepack "$lp_url" "$lp_pid"); echo "$r" >> "$tmp/same.runs"
  echo "run $i lanepack: $r" | awk '{printf "run %s %-9s %8.0f req/s  %8.0f req per proxy CPU-second  p99 %6.2f ms  failed %d  (the same client as nginx)\n", $2, $3, $4, $5/$6, $8, $9}'
  r=$(run lanepack "$lp_url" "$lp_pid" --verify); echo "$r" >> "$tmp/lanepack.runs"
  echo "run $i lanepack: $r" | awk '{printf "run %s %-9s %8.0f req/s  %8.0f req per proxy CPU-second  p99 %6.2f ms  failed %d  mismatches %d  (every answer verified)\n", $2, $3, $4, $5/$6, $8, $9, $10}'
done

python3 - "$tmp/nginx.runs" "$tmp/lanepack.runs" "$idle_n" "$idle_l" "$idle" "$tmp/same.runs" <<'PY'
import statistics, sys
def load(p):
    rows = [list(map(float, l.split())) for l in open(p) if l.strip()]
    return {"rps": statistics.median(r[0] for r in rows),
            "cpu": statistics.median(r[1] / r[2] for r in rows),
            "p99": statistics.median(r[4] for r in rows),
            "failed": sum(r[5] for r in rows), "mismatch": sum(r[6] for r in rows),
            "user": statistics.median(r[7] / r[1] * 1e6 for r in rows),
            "sys": statistics.median(r[8] / r[1] * 1e6 for r in rows)}
n, l, same = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[6])
print()
print("%-20s %9s %25s %16s %10s" % ("median", "req/s", "req per proxy CPU-second",
      "user+sys us/req", "p99 ms"))
for name, x in (("nginx (1 worker)", n), ("lanepack, same client", same), ("lanepack, verified", l)):
    print("%-22s %9.0f %25.0f %9.1f+%-6.1f %10.2f" % (name, x["rps"], x["cpu"], x["user"], x["sys"], x["p99"]))
print("lanepack / nginx per CPU-second: %.2fx with the same client, %.2fx with every answer verified"
      "   (lanepack failed %d, verify mismatches %d)"
      % (same["cpu"] / n["cpu"], l["cpu"] / n["cpu"], l["failed"] + same["failed"], l["mismatch"]))
if sys.argv[3] and sys.argv[4]:
    print("bytes per idle connection (%s): nginx %s, lanepack %s  (%.2fx)"
          % (sys.argv[5], sys.argv[3], sys.argv[4], float(sys.argv[4]) / max(1.0, float(sys.argv[3]))))
PY

if [ "${LP_BENCH_PERF:-1}" != 0 ] && command -v perf >/dev/null && \
   perf record -q -o "$tmp/probe.data" -- true >/dev/null 2>&1; then
  perf record -q -g -o "$tmp/perf.data" -p "$lp_pid" -- sleep 5 >/dev/null 2>&1 &
  perf_pid=$!
  run lanepack "$lp_url" "$lp_pid" --duration 5s > /dev/null
  wait "$perf_pid" || true
  echo
  echo "lanepack profile (perf, 5 s under the same load; self time, top 20):"
  perf report -i "$tmp/perf.data" --no-children --stdio --sort symbol 2>/dev/null |
    grep -E '^ +[0-9.]+%' | head -20
fi
