#!/usr/bin/env bash
# The main job: builds lanepack, starts the accelerator emulator and the proxy
# in front of it on free loopback ports, sends a short verified load of real
# request lengths, prints the load generator's report, and stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
out=$(meson compile -C build 2>&1) || { echo "$out"; exit 1; }

RATE=${RATE:-3000}
DURATION=${DURATION:-10s}
LENGTHS=${LENGTHS:-tests/data/changelog-entries.lengths}
SHAPES=${SHAPES:-4x8192,8x2048}
# The changelog's long entries sit together in the file (lines 23,000-31,000):
# sent in file order they arrive as one burst of long sequences, which is not
# how traffic arrives. Shuffled once by a fixed seed, the run is repeatable.
SEED=${SEED:-1}
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

# Port 0 lets the kernel pick; both programs log the port they got.
port_of() { # log file
  for _ in $(seq 100); do
    p=$(grep -o '"port": [0-9]*' "$1" 2>/dev/null | head -1 | grep -o '[0-9]*$' || true)
    [ -n "$p" ] && { echo "$p"; return 0; }
    sleep 0.05
  done
  echo "demo: no port in $1:" >&2; cat "$1" >&2; return 1
}

build/loadgen/lanepack-emulator --listen 127.0.0.1:0 --shapes "$SHAPES" \
  --cost-ms 4x8192=20 --cost-ms 8x2048=8 2> "$tmp/emulator.log" &
pids+=($!)
emu_port=$(port_of "$tmp/emulator.log")

build/src/lanepack --listen 127.0.0.1:0 --backend "http://127.0.0.1:$emu_port" \
  --shapes "$SHAPES" --max-wait-ms 5 2> "$tmp/proxy.log" &
pids+=($!)
proxy_port=$(port_of "$tmp/proxy.log")

echo "emulator on 127.0.0.1:$emu_port (shapes $SHAPES), lanepack on 127.0.0.1:$proxy_port"
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$proxy_port/readyz" >/dev/null && break
  sleep 0.05
done
echo
build/loadgen/lanepack-loadgen --url "http://127.0.0.1:$proxy_port" --rate "$RATE" \
  --duration "$DURATION" --lengths "$LENGTHS" --shuffle --seed "$SEED" --verify
echo
echo "shapes as the proxy sees them (GET /v1/models):"
curl -s "http://127.0.0.1:$proxy_port/v1/models"
echo
echo "packing the same length mix offline (lanepack-packbench):"
build/loadgen/lanepack-packbench --lengths "$LENGTHS" --shapes "$SHAPES"
