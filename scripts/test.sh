#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds, runs every test, then the
# unit tests again under address and undefined-behaviour sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
LP_SETUP_ASAN=1 bash scripts/setup.sh
meson compile -C build >/dev/null
meson compile -C build-asan >/dev/null
echo "== tests (release build)"
meson test -C build --print-errorlogs --num-processes 2
echo "== unit tests under address+undefined sanitizers"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  meson test -C build-asan --suite unit --print-errorlogs --num-processes 2
