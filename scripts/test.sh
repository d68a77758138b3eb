#!/usr/bin/env bash
# The whole test suite: installs what it needs, builds with gcc and with clang,
# runs every test, then every test again under address and undefined-behaviour
# sanitizers (the servers the integration tests start are sanitized too), then
# each libFuzzer target for a bounded time. Ends with "N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/.."
LP_SETUP_TESTS=1 LP_SETUP_ASAN=1 LP_SETUP_TSAN=1 bash scripts/setup.sh || exit 1
for dir in build build-asan build-fuzz build-tsan; do
  out=$(meson compile -C "$dir" 2>&1) || { echo "$out"; exit 1; }
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
suite() { # title, meson test arguments...
  echo "== $1"
  shift
  meson test "$@" --print-errorlogs | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}
# The gcc build's tests and the sanitizer build's run at the same time: most
# integration tests wait on servers and timers (one at a time within a build),
# so the two builds together keep both cores busy; the gcc run's output is
# printed whole once it ends.
gcc_out=$(mktemp)
trap 'rm -f "$log" "$gcc_out" "$gcc_out.rc"' EXIT
( meson test -C build --num-processes 2 --print-errorlogs > "$gcc_out" 2>&1; echo $? > "$gcc_out.rc" ) &
gcc_pid=$!
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  suite "every test, built by clang with address+undefined sanitizers (leaks fail)" \
  -C build-asan --num-processes 2
wait "$gcc_pid"
echo "== every test, gcc release build (run beside the sanitizer build)"
tee -a "$log" < "$gcc_out"
[ "$(cat "$gcc_out.rc" 2>/dev/null)" = 0 ] || status=1
# the tests of what crosses threads, built by clang with ThreadSanitizer: a
# race fails the process that has it (the proxy's exit code, and the test)
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  suite "the threaded tests again, built with ThreadSanitizer (a data race fails)" \
  -C build-tsan --suite threads --num-processes 1
suite "fuzzing: each libFuzzer target for 20 s from its seeds (crash, leak or hang fails)" \
  -C build-fuzz --suite fuzz --num-processes 2
# issue 19's fault goal runs in the suite (test 'faults', seed 1); LP_TEST_FAULTS=1
# runs it again on more seeds (timing decides more than the seed: a soak)
if [ "${LP_TEST_FAULTS:-0}" = 1 ]; then
  echo "== the fault goal, seeds 2-11 (LP_TEST_FAULTS=1)"
  for seed in 2 3 4 5 6 7 8 9 10 11; do
    if python3 bench/bench-faults.py --proxy build/src/lanepack --emulator build/loadgen/lanepack-emulator \
        --seed "$seed"; then
      echo "Ok: 1" >> "$log"
    else
      echo "Fail: 1" >> "$log"
      status=1
    fi
  done
fi
# issue 33's soak runs in the suite for 60 s (tests 'fault-soak-1', 'fault-soak-2');
# LP_TEST_SOAK=1 runs it for 30 minutes with threads 1 and 2 (an hour in all)
if [ "${LP_TEST_SOAK:-0}" = 1 ]; then
  for threads in 1 2; do
    echo "== the soak, 30 minutes, threads $threads (LP_TEST_SOAK=1)"
    if python3 tests/test-soak.py build/src/lanepack build/loadgen/lanepack-emulator \
        build/loadgen/lanepack-loadgen --threads "$threads" --seconds 1800; then
      echo "Ok: 1" >> "$log"
    else
      echo "Fail: 1" >> "$log"
      status=1
    fi
  done
fi
# the container image, built and run (minutes; needs podman): opt-in
if [ "${LP_TEST_CONTAINER:-0}" = 1 ]; then
  echo "== the container image (LP_TEST_CONTAINER=1)"
  if bash tests/test-container.sh "$PWD" "$PWD/build"; then
    echo "Ok: 1" >> "$log"
  else
    echo "Fail: 1" >> "$log"
    status=1
  fi
fi
passed=$(awk '/^Ok:/ {s += $2} END {print s + 0}' "$log")
failed=$(awk '/^(Fail|Timeout|Unexpected Pass|Skipped):/ {s += $NF} END {print s + 0}' "$log")  # a skip hides a test: it counts against
echo
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && exit "$status"
exit 1
