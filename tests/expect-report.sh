#!/bin/sh
# An expected-failure probe passes only on its sanitizer's own report: runs
# PROGRAM and succeeds only when it exits non-zero having written a line that
# matches PATTERN (an extended regex), so a probe that crashes for any other
# reason, or a build that stops instrumenting, fails.
# Usage: expect-report.sh PATTERN PROGRAM [ARGS...]
pattern=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
  echo "expect-report: $1 exited 0: no sanitizer stopped it" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq "$pattern"; then
  echo "expect-report: $1 exited $rc without the sanitizer's report /$pattern/" >&2
  exit 1
fi
echo "expect-report: exit $rc with the report: $(printf '%s\n' "$out" | grep -Em1 "$pattern")"
