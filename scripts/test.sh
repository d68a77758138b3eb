#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds with gcc and with clang,
# runs every test, then every test again under address and undefined-behaviour
# sanitizers (the servers the integration tests start are sanitized too).
set -euo pipefail
cd "$(dirname "$0")/.."
LP_SETUP_ASAN=1 bash scripts/setup.sh
for dir in build build-asan; do
  out=$(meson compile -C "$dir" 2>&1) || { echo "$out"; exit 1; }
done
echo "== tests (release build)"
meson test -C build --print-errorlogs --num-processes 2
echo "== every test again, built by clang with address+undefined sanitizers (leaks fail)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  meson test -C build-asan --print-errorlogs --num-processes 2
