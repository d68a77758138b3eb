#!/usr/bin/env bash
# Requests/s through lanepack (in front of the emulator, batches cost 0 ms) next
# to nginx as a plain reverse proxy (to a static nginx upstream), for the same
# 600-token JSON bodies and the same client, in one run. The proxy under test
# gets core 1 to itself; the client and the upstream share core 0.
# Usage: loadgen/bench-vs-nginx.sh [BUILD_DIR] [DURATION] [CONCURRENCY]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${2:-10s}
conc=${3:-256}
command -v nginx >/dev/null || { echo "bench: nginx is not installed (apt-get install nginx-light)" >&2; exit 1; }
pin0="taskset -c 0"; pin1="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { pin0=""; pin1=""; }
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
pid $tmp/$1.pid;
error_log $tmp/$1-error.log warn;
events { worker_connections 8192; }
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

cpu_ticks() { # pid: user+system clock ticks so far
  awk '{print $14 + $15}' "/proc/$1/stat"
}

# The client's core can saturate before the proxy's: so besides requests/s the
# figure that compares proxies is requests per second of the proxy's own CPU.
run() { # name url proxy-pid
  local t0 t1
  t0=$(cpu_ticks "$3")
  $pin0 "$build/loadgen/lanepack-loadgen" --url "$2" --concurrency "$conc" --duration "$duration" \
    --lengths fixed:600 --json "$tmp/$1.json" > "$tmp/$1.txt" 2>/dev/null
  t1=$(cpu_ticks "$3")
  python3 -c "import json,os; d=json.load(open('$tmp/$1.json')); cpu=($t1-$t0)/os.sysconf('SC_CLK_TCK'); print('%-30s %8.0f req/s  p50 %6.2f ms  p99 %6.2f ms  failed %d  proxy CPU %5.2f s  %8.0f req per proxy CPU-second' % ('$1', d['requests_per_s'], d['latency_ms']['p50'], d['latency_ms']['p99'], d['failed'], cpu, d['ok']/cpu if cpu else 0))"
}

$pin0 nginx -c "$tmp/upstream.conf" -g 'daemon off;' & pids+=($!)
$pin1 nginx -c "$tmp/proxy.conf" -g 'daemon off;' & pids+=($!)
sleep 0.5
worker=$(pgrep -P "$(cat "$tmp/proxy.pid")" | head -1)
run "nginx reverse proxy (1 worker)" "http://127.0.0.1:$p_nginx/v1/infer" "$worker"

$pin0 "$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 8x4096 --cost-ms 0 \
  2> "$tmp/emu.log" & pids+=($!)
$pin1 "$build/src/lanepack" --listen "127.0.0.1:$p_lp" --backend "http://127.0.0.1:$p_emu" \
  --shapes 8x4096 --max-wait-ms 2 --log-level warn 2> "$tmp/lp.log" & pids+=($!)
lp_pid=$!
sleep 0.5
run "lanepack -> emulator (1 loop)" "http://127.0.0.1:$p_lp/v1/infer" "$lp_pid"
