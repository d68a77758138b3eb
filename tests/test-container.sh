#!/usr/bin/env bash
# The container image, built and run (opt-in: LP_TEST_CONTAINER=1, it takes
# minutes): deploy/Dockerfile is built with podman (docker format, so the
# HEALTHCHECK is kept) from a Debian 12 base made here with debootstrap (no
# registry needed), then run with host networking beside the emulator:
# /healthz, /readyz, the image's own health check, verified /v1/infer load, and
# SIGTERM (podman stop) drains under load with nothing lost.
# Usage: test-container.sh SOURCE_ROOT BUILD_ROOT
set -euo pipefail
src=$1; build=$2
work=/var/tmp/lanepack-container
mkdir -p "$work"
need=()
for p in podman debootstrap runc; do command -v "$p" >/dev/null || need+=("$p"); done
if [ "${#need[@]}" -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# rootful podman as it runs here: runc, cgroupfs, vfs storage of its own, and
# ulimits lowered (raising them, even to the hard limit, is refused in a
# sandboxed host: "error setting rlimit type 6")
ulimits=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
cat > "$work/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
export CONTAINERS_CONF="$work/containers.conf"
pm() { podman --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }

fails=0
check() { # name, command...
  local name=$1; shift
  if "$@"; then echo "ok - $name"; else echo "not ok - $name"; fails=$((fails + 1)); fi
}

base=localhost/lanepack-base:bookworm
if ! pm image exists "$base"; then
  echo "# making the Debian 12 base image with debootstrap (once)"
  rm -rf "$work/rootfs"
  debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1
  tar -C "$work/rootfs" -c . | pm import - "$base" >/dev/null
  rm -rf "$work/rootfs"
fi
echo "# building deploy/Dockerfile"
t0=$(date +%s)
if ! pm build "${ulimits[@]}" --format docker --network host --build-arg BASE="$base" -f "$src/deploy/Dockerfile" \
     -t localhost/lanepack:test "$src" >"$work/build.log" 2>&1; then
  tail -30 "$work/build.log"
  echo "not ok - the image builds"; exit 1
fi
echo "ok - the image builds ($(( $(date +%s) - t0 )) s)"
size=$(pm image inspect localhost/lanepack:test --format '{{.Size}}')
echo "# image size: $((size / 1000000)) MB"
no_curl() { ! pm run "${ulimits[@]}" --rm --network host --entrypoint /bin/sh localhost/lanepack:test -c 'command -v curl' >/dev/null 2>&1; }
check "the image has no curl" no_curl
hc=$(pm image inspect localhost/lanepack:test --format '{{json .Config.Healthcheck}}' 2>/dev/null || true)
check "the HEALTHCHECK survives the build (docker format)" grep -q -- "--probe" <<<"$hc"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
p_emu=$(free_port)
p_lp=8080 # the image's own port, where its HEALTHCHECK looks
if curl -s -o /dev/null "http://127.0.0.1:$p_lp/" 2>/dev/null; then echo "not ok - port 8080 is taken here"; exit 1; fi
"$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 4x64,8x16 --cost-ms 20 \
  2>"$work/emu.log" & emu=$!
cfgdir=$(mktemp -d)
chmod 755 "$cfgdir"
cat > "$cfgdir/lanepack.json" <<CONF
{"listen": "127.0.0.1:$p_lp", "log_level": "info", "drain_delay_ms": 500, "drain_timeout_ms": 10000,
 "models": {"default": {"shapes": "4x64,8x16", "backends": ["http://127.0.0.1:$p_emu"], "max_wait_ms": 2}}}
CONF
chmod 644 "$cfgdir/lanepack.json"
name=lanepack-test-$$
cleanup() { pm rm -f "$name" >/dev/null 2>&1 || true; kill "$emu" 2>/dev/null || true; rm -rf "$cfgdir"; }
trap cleanup EXIT
# as the README runs it: the configuration mounted, host networking, the
# image's own command (--listen 0.0.0.0:8080)
pm run "${ulimits[@]}" -d --name "$name" --network host -v "$cfgdir/lanepack.json:/etc/lanepack/lanepack.json:ro" \
  localhost/lanepack:test >/dev/null
up=0
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p_lp/readyz" >/dev/null 2>&1 && { up=1; break; }; sleep 0.1; done
check "the container becomes ready" test "$up" = 1
check "/healthz answers 200" curl -sf "http://127.0.0.1:$p_lp/healthz" -o /dev/null
check "/readyz answers 200" curl -sf "http://127.0.0.1:$p_lp/readyz" -o /dev/null
check "the image's health check passes" pm healthcheck run "$name"
check "verified /v1/infer through the container" "$build/loadgen/lanepack-loadgen" \
  --url "http://127.0.0.1:$p_lp/v1/infer" --lengths uniform:1,64 --rate 300 --duration 3s --verify \
  --json "$work/load.json"
# SIGTERM under load: podman stop sends the image's STOPSIGNAL
"$build/loadgen/lanepack-loadgen" --url "http://127.0.0.1:$p_lp/v1/infer" --lengths uniform:1,64 \
  --concurrency 16 --duration 4s --verify --json "$work/drain.json" >"$work/drain.txt" 2>&1 & lg=$!
sleep 1.5
pm stop -t 20 "$name" >/dev/null
code=$(pm inspect "$name" --format '{{.State.ExitCode}}')
wait "$lg" || true
check "SIGTERM drains: lanepack exits 0" test "$code" = 0
check "every request the container took was answered 200" python3 -c "
import json, sys
d = json.load(open('$work/drain.json'))
bad = sum(v for k, v in d['by_status'].items() if k != '200')
print('# during SIGTERM: issued %d, answered 200 %d, error answers %d, connections lost %d, '
      'not sent because the listener had closed after the drain %d'
      % (d['sent'], d['ok'], bad, d['connection_errors'], d['unsent_timeouts']))
sys.exit(0 if d['ok'] > 0 and bad == 0 and d['mismatches'] == 0 else 1)"
pm logs "$name" 2>&1 | grep -E '"draining"|"drained"|shutting down' | head -3 | sed 's/^/# /'
echo "$fails failed"
[ "$fails" = 0 ]
