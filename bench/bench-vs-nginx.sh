#!/usr/bin/env bash
# Cost per request of lanepack (in front of the emulator, batches cost 0 ms)
# next to nginx as a plain reverse proxy (keep-alive to a static nginx
# upstream), same 600-token JSON bodies, same clients, in one run:
#  - requests per second of the proxy's own CPU (user+system from /proc around
#    each run; median of RUNS alternating runs, so a noisy neighbour hits both);
#  - resident bytes per idle keep-alive connection (IDLE connections, each
#    served once; RSS growth / IDLE, bench/idle-conns.py);
#  - a perf profile of lanepack's top functions (if perf works here).
# Each round runs lanepack twice with the bundled client: with the very client
# nginx gets, and with every answer verified (--verify: the client then does
# more work per answer, so it offers lanepack less load); both are reported.
# With wrk installed, each round also runs nginx and lanepack under wrk (256
# connections, the same body; wrk cannot verify answers, so the bundled client's
# verified runs stand for those).
# For each thread count of --threads (lanepack --threads N; nginx then runs N
# workers): the figures above, and that packing is unchanged (sequences per
# batch and mean fill over the verified runs, from lanepack's /metrics, next to
# the first thread count's).
# Usage: bench/bench-vs-nginx.sh [--threads 1,2] [--client loadgen|wrk|both]
#                                  [BUILD_DIR] [DURATION] [CONCURRENCY] [RUNS] [IDLE]
#   LP_BENCH_WIRE=lanepack|v2  the backend protocol lanepack speaks (default lanepack:
#                              JSON, as the emulator's default; v2 = binary tensors)
#   LP_BENCH_PERF=0            skip the profile
#   LP_BENCH_IDLE_WAVE=N       idle connections served N at a time (default 64: what an
#                              idle connection holds; 5000: a burst of 5,000 concurrent
#                              requests, then idle, which measures what each allocator
#                              keeps of the burst, not a connection: doc/benchmarks.md)
set -euo pipefail
cd "$(dirname "$0")/.."
threads_list=1
client=""
pos=()
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads_list=${2:?--threads wants a list such as 1,2}; shift 2 ;;
    --threads=*) threads_list=${1#--threads=}; shift ;;
    --client) client=${2:?--client wants loadgen, wrk or both}; shift 2 ;;
    --client=*) client=${1#--client=}; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) pos+=("$1"); shift ;;
  esac
done
set -- "${pos[@]+"${pos[@]}"}"
build=${1:-build}
duration=${2:-10s}
conc=${3:-256}
runs=${4:-3}
idle=${5:-10000}
wire=${LP_BENCH_WIRE:-lanepack}
command -v nginx >/dev/null || { echo "bench: nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
if [ -z "$client" ]; then
  client=loadgen
  command -v wrk >/dev/null && client=both
fi
case $client in
  loadgen|both) ;;
  wrk) ;;
  *) echo "bench: --client is loadgen, wrk or both, not '$client'" >&2; exit 2 ;;
esac
if [ "$client" != loadgen ] && ! command -v wrk >/dev/null; then
  echo "bench: wrk is not installed (apt-get install wrk)" >&2; exit 1
fi
IFS=, read -r -a threads <<< "$threads_list"
for t in "${threads[@]}"; do
  [[ $t =~ ^[1-9][0-9]*$ ]] || { echo "bench: --threads wants counts such as 1,2, not '$threads_list'" >&2; exit 2; }
done
ncpu=$(nproc)
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
p_up=$(free_port); p_emu=$(free_port)

# Cores: the client and upstream on core 0, the proxy under test on cores
# 1..N when the machine has them; else everything shares every core (said in
# the output: the CPU-second figures still hold, requests/s then do not scale).
pin0="taskset -c 0"
pin_proxy() { # threads
  if [ "$ncpu" -ge $(($1 + 1)) ]; then echo "taskset -c 1-$1"; fi
}
[ "$ncpu" -ge 2 ] || pin0=""

# The upstream answers what lanepack would: 600 integers, from a file (nginx's
# "return" takes 4 KB at most; POSTs to a static file need the 405 trick).
mkdir -p "$tmp/www"
chmod a+rx "$tmp" "$tmp/www"  # nginx workers run as www-data when started by root
python3 -c 'print("{\"output\": [" + ",".join(str(100000000 + i) for i in range(600)) + "]}")' > "$tmp/www/answer.json"
body=$(python3 -c 'import random; random.seed(1); print("{\"input_ids\": [" + ", ".join(str(random.randrange(32000)) for _ in range(600)) + "]}")')
cat > "$tmp/post.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '$body'
LUA
nginx_conf() { # name, workers, server block
cat > "$tmp/$1.conf" <<CONF
worker_processes $2;
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
  $3
}
CONF
}
nginx_conf upstream 1 "server { listen 127.0.0.1:$p_up; root $tmp/www; default_type application/json;
  location / { try_files /answer.json =404; error_page 405 =200 \$uri; }
  location /idle/ { try_files /idle.json =404; error_page 405 =200 \$uri; } }"

# CPU ticks (user system) summed over the processes given.
cpu_ticks() { local u=0 s=0 a b; for p in "$@"; do read -r a b < <(awk '{print $14 " " $15}' "/proc/$p/stat"); u=$((u + a)); s=$((s + b)); done; echo "$u $s"; }
# A counter of lanepack's /metrics: the sum of the samples whose line starts with the prefix.
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v p="$2" 'index($0, p) == 1 {s += $NF} END {printf "%.6f\n", s + 0}'; }

# One run with the bundled client: prints "req_per_s ok cpu_s p50 p99 failed
# mismatches user_s sys_s" for the proxy's processes.
run() { # name url "pids" [extra loadgen flags]
  local name=$1 url=$2 ps=$3; shift 3
  local t0 t1
  t0=$(cpu_ticks $ps)
  $pin0 "$build/loadgen/lanepack-loadgen" --url "$url" --concurrency "$conc" --duration "$duration" \
    --lengths fixed:600 --json "$tmp/$name.json" "$@" > "$tmp/$name.txt" 2>&1 ||
    { echo "bench: the load generator failed against $name:" >&2; cat "$tmp/$name.txt" >&2; exit 1; }
  t1=$(cpu_ticks $ps)
  python3 - "$tmp/$name.json" $t0 $t1 <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); hz = os.sysconf("SC_CLK_TCK")
u = (int(sys.argv[4]) - int(sys.argv[2])) / hz; s = (int(sys.argv[5]) - int(sys.argv[3])) / hz
print(d["requests_per_s"], d["ok"], u + s, d["latency_ms"]["p50"], d["latency_ms"]["p99"], d["failed"],
      d.get("mismatches", 0), u, s)
PY
}

# One run with wrk (one thread on the client's core): the same fields; failed
# counts non-2xx answers and socket errors; wrk verifies nothing (mismatches 0).
run_wrk() { # name url "pids"
  local name=$1 url=$2 ps=$3
  local t0 t1
  t0=$(cpu_ticks $ps)
  $pin0 wrk -t 1 -c "$conc" -d "$duration" --latency -s "$tmp/post.lua" "$url" > "$tmp/$name-wrk.txt" 2>&1 ||
    { echo "bench: wrk failed against $name:" >&2; cat "$tmp/$name-wrk.txt" >&2; exit 1; }
  t1=$(cpu_ticks $ps)
  python3 - "$tmp/$name-wrk.txt" $t0 $t1 <<'PY'
import os, re, sys
t = open(sys.argv[1]).read(); hz = os.sysconf("SC_CLK_TCK")
u = (int(sys.argv[4]) - int(sys.argv[2])) / hz; s = (int(sys.argv[5]) - int(sys.argv[3])) / hz
def ms(x):
    v, unit = re.match(r"([0-9.]+)(us|ms|s|m)", x).groups()
    return float(v) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]
rps = float(re.search(r"Requests/sec:\s*([0-9.]+)", t).group(1))
n = int(re.search(r"([0-9]+) requests in", t).group(1))
# the latency distribution's own lines (a "+/- Stdev" column such as 75.50% is not one)
p50 = ms(re.search(r"^\s*50%\s+(\S+)", t, re.M).group(1)); p99 = ms(re.search(r"^\s*99%\s+(\S+)", t, re.M).group(1))
bad = sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses:\s*([0-9]+)", t))
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
if m: bad += sum(int(x) for x in m.groups())
print(rps, n - bad, u + s, p50, p99, bad, 0, u, s)
PY
}

emu_flags=()
v2_keys=""
if [ "$wire" = v2 ]; then
  emu_flags=(--protocol v2)
  v2_keys=', "protocol": "v2", "v2": {"model": "lanepack_{lanes}x{bucket}"}'
fi
$pin0 nginx -c "$tmp/upstream.conf" -g 'daemon off;' & pids+=($!)
$pin0 "$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 8x4096 --cost-ms 0 \
  "${emu_flags[@]}" 2> "$tmp/emu.log" & pids+=($!)

fmt_run='{printf "run %s %-9s %8.0f req/s  %8.0f req per proxy CPU-second  p99 %6.2f ms", $2, $3, $4, $5/$6, $8}'
: > "$tmp/summary.txt"
for nt in "${threads[@]}"; do
  pin1=$(pin_proxy "$nt")
  p_nginx=$(free_port); p_lp=$(free_port)
  nginx_conf "proxy$nt" "$nt" "server { listen 127.0.0.1:$p_nginx; location / { proxy_pass http://backend;
  proxy_http_version 1.1; proxy_set_header Connection \"\"; } }"
  $pin1 nginx -c "$tmp/proxy$nt.conf" -g 'daemon off;' & nginx_master=$!; pids+=($nginx_master)
  printf '{"listen": "127.0.0.1:%s", "log_level": "warn", "max_connections": 20000, "models": {"default": {"shapes": "8x4096", "backends": ["http://127.0.0.1:%s"], "max_wait_ms": 2 %s}}}\n' \
    "$p_lp" "$p_emu" "$v2_keys" > "$tmp/lp$nt.json"
  $pin1 "$build/src/lanepack" --config "$tmp/lp$nt.json" --threads "$nt" 2> "$tmp/lp$nt.log" & lp_pid=$!; pids+=($lp_pid)
  for _ in $(seq 50); do
    [ -f "$tmp/proxy$nt.pid" ] && curl -sf "http://127.0.0.1:$p_lp/readyz" >/dev/null 2>&1 &&
      [ "$(pgrep -c -P "$(cat "$tmp/proxy$nt.pid")")" -ge "$nt" ] && break
    sleep 0.1
  done
  workers=$(pgrep -P "$(cat "$tmp/proxy$nt.pid")" | tr '\n' ' ')
  nginx_url="http://127.0.0.1:$p_nginx/v1/infer"
  lp_url="http://127.0.0.1:$p_lp/v1/infer"

  # Idle connections first, on fresh processes: memory already touched by the
  # load runs would hide what a connection costs.
  idle_n=""; idle_l=""
  if [ "$idle" -gt 0 ]; then
    wave=${LP_BENCH_IDLE_WAVE:-64}
    # Fair: nginx's upstream answers the idle requests with the very bytes
    # lanepack answered them (a 16-token answer), not the 600-value load
    # answer, which made nginx hold proxy buffers lanepack never needed.
    idle_l=$(python3 bench/idle-conns.py --port "$p_lp" --pid "$lp_pid" --count "$idle" --wave "$wave" \
      --save-answer "$tmp/www/idle.json" | grep -o '[0-9]* bytes per' | cut -d' ' -f1)
    chmod a+r "$tmp/www/idle.json"
    idle_n=$(python3 bench/idle-conns.py --port "$p_nginx" --path /idle/v1/infer --pid "$(echo $workers | tr ' ' ',')" \
      --count "$idle" --wave "$wave" | grep -o '[0-9]* bytes per' | cut -d' ' -f1)
  fi

  echo "# threads $nt: $runs alternating runs of $duration, $conc connections, 600-token JSON bodies; lanepack backend wire: $wire;" \
    "clients: $client; proxy cores: $(if [ -n "$pin1" ]; then echo "${pin1#taskset -c }"; else echo "all $ncpu, shared with the client and upstream"; fi)"
  : > "$tmp/nginx.runs"; : > "$tmp/lanepack.runs"; : > "$tmp/same.runs"; : > "$tmp/nginx-wrk.runs"; : > "$tmp/lanepack-wrk.runs"
  b0=0; f0=0; fc0=0; ok_verified=0
  for i in $(seq "$runs"); do
    if [ "$client" != wrk ]; then
      r=$(run nginx "$nginx_url" "$workers"); echo "$r" >> "$tmp/nginx.runs"
      echo "run $i nginx: $r" | awk "$fmt_run"'{printf "\n"}'
      r=$(run lanepack "$lp_url" "$lp_pid"); echo "$r" >> "$tmp/same.runs"
      echo "run $i lanepack: $r" | awk "$fmt_run"'{printf "  failed %d  (the same client as nginx)\n", $9}'
      b1=$(metric "$p_lp" lanepack_batches_total); f1=$(metric "$p_lp" lanepack_batch_fill_ratio_sum); fc1=$(metric "$p_lp" lanepack_batch_fill_ratio_count)
      r=$(run lanepack "$lp_url" "$lp_pid" --verify); echo "$r" >> "$tmp/lanepack.runs"
      b2=$(metric "$p_lp" lanepack_batches_total); f2=$(metric "$p_lp" lanepack_batch_fill_ratio_sum); fc2=$(metric "$p_lp" lanepack_batch_fill_ratio_count)
      echo "run $i lanepack: $r" | awk "$fmt_run"'{printf "  failed %d  mismatches %d  (every answer verified)\n", $9, $10}'
      b0=$(python3 -c "print($b0 + $b2 - $b1)"); f0=$(python3 -c "print($f0 + $f2 - $f1)"); fc0=$(python3 -c "print($fc0 + $fc2 - $fc1)")
      ok_verified=$((ok_verified + $(echo "$r" | awk '{print $2}')))
    fi
    if [ "$client" != loadgen ]; then
      r=$(run_wrk nginx "$nginx_url" "$workers"); echo "$r" >> "$tmp/nginx-wrk.runs"
      echo "run $i nginx: $r" | awk "$fmt_run"'{printf "  non-2xx or errors %d  (wrk)\n", $9}'
      r=$(run_wrk lanepack "$lp_url" "$lp_pid"); echo "$r" >> "$tmp/lanepack-wrk.runs"
      echo "run $i lanepack: $r" | awk "$fmt_run"'{printf "  non-2xx or errors %d  (wrk)\n", $9}'
    fi
  done

  python3 - "$tmp" "$nt" "$idle_n" "$idle_l" "$idle" "$b0" "$f0" "$fc0" "$ok_verified" "$tmp/summary.txt" <<'PY'
import os, statistics, sys
tmp, nt, idle_n, idle_l, idle = sys.argv[1:6]
batches, fill_sum, fill_n, ok_v = float(sys.argv[6]), float(sys.argv[7]), float(sys.argv[8]), int(sys.argv[9])
def load(name):
    p = os.path.join(tmp, name + ".runs")
    rows = [list(map(float, l.split())) for l in open(p) if l.strip()]
    if not rows:
        return None
    return {"rps": statistics.median(r[0] for r in rows),
            "cpu": statistics.median(r[1] / r[2] if r[2] else 0 for r in rows),
            "p99": statistics.median(r[4] for r in rows),
            "failed": sum(r[5] for r in rows), "mismatch": sum(r[6] for r in rows),
            "user": statistics.median(r[7] / r[1] * 1e6 if r[1] else 0 for r in rows),
            "sys": statistics.median(r[8] / r[1] * 1e6 if r[1] else 0 for r in rows)}
n, l, same, nw, lw = (load(x) for x in ("nginx", "lanepack", "same", "nginx-wrk", "lanepack-wrk"))
print()
print("%-34s %9s %25s %16s %10s" % ("median, threads %s" % nt, "req/s", "req per proxy CPU-second",
      "user+sys us/req", "p99 ms"))
rows = (("nginx (%s worker%s)" % (nt, "" if nt == "1" else "s"), n), ("lanepack, same client", same),
        ("lanepack, verified", l), ("nginx, wrk", nw), ("lanepack, wrk", lw))
for name, x in rows:
    if x:
        print("%-34s %9.0f %25.0f %9.1f+%-6.1f %10.2f" % (name, x["rps"], x["cpu"], x["user"], x["sys"], x["p99"]))
out = open(sys.argv[10], "a")
def say(s):
    print(s)
    out.write("threads %s: %s\n" % (nt, s))
if n and l:
    say("lanepack / nginx per CPU-second: %.2fx with the same client, %.2fx with every answer verified"
        "   (lanepack failed %d, verify mismatches %d, verified answers %d)"
        % (same["cpu"] / n["cpu"], l["cpu"] / n["cpu"], l["failed"] + same["failed"], l["mismatch"], ok_v))
if nw and lw:
    say("lanepack / nginx per CPU-second with wrk: %.2fx   (%.0f vs %.0f; non-2xx or errors: lanepack %d, nginx %d)"
        % (lw["cpu"] / nw["cpu"], lw["cpu"], nw["cpu"], lw["failed"], nw["failed"]))
if l:
    say("lanepack requests/s: %.0f verified, %.0f same client%s; p99 %.2f ms verified"
        % (l["rps"], same["rps"], ", %.0f wrk" % lw["rps"] if lw else "", l["p99"]))
    say("lanepack per CPU-second: %.0f verified, %.0f same client%s"
        % (l["cpu"], same["cpu"], ", %.0f wrk" % lw["cpu"] if lw else ""))
if batches > 0 and fill_n > 0:
    say("packing over the verified runs: %.1f sequences per batch, mean fill %.4f (%d batches)"
        % (ok_v / batches, fill_sum / fill_n, batches))
if idle_n and idle_l:
    say("bytes per idle connection (%s, served %s at a time): nginx %s, lanepack %s  (%.2fx)"
        % (idle, os.environ.get("LP_BENCH_IDLE_WAVE", "64"), idle_n, idle_l, float(idle_l) / max(1.0, float(idle_n))))
PY

  if [ "${LP_BENCH_PERF:-1}" != 0 ] && command -v perf >/dev/null && \
     perf record -q -o "$tmp/probe.data" -- true >/dev/null 2>&1; then
    perf record -q -g -o "$tmp/perf.data" -p "$lp_pid" -- sleep 5 >/dev/null 2>&1 &
    perf_pid=$!
    run lanepack "$lp_url" "$lp_pid" --duration 5s > /dev/null
    wait "$perf_pid" || true
    echo
    echo "lanepack profile, threads $nt (perf, 5 s under the same load; self time, top 20):"
    perf report -i "$tmp/perf.data" --no-children --stdio --sort symbol 2>/dev/null |
      grep -E '^ +[0-9.]+%' | head -20 || true
  fi
  kill "$lp_pid" "$nginx_master" 2>/dev/null || true
  wait "$lp_pid" "$nginx_master" 2>/dev/null || true
  echo
done

if [ "${#threads[@]}" -gt 1 ]; then
  echo "# by thread count (each ratio to the nginx of its own runs; packing next to threads ${threads[0]}):"
  cat "$tmp/summary.txt"
fi
