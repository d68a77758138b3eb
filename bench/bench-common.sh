# Sourced by the benchmark scripts (bash): a scratch directory removed at exit
# with every process whose PID was added to pids, a free loopback port, and a
# process's CPU ticks so far (utime + stime from /proc; getconf CLK_TCK a second).
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
