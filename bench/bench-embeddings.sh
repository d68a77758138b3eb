#!/usr/bin/env bash
# What tokenizing costs the proxy on /v1/embeddings: the same closed-loop load
# through lanepack (1 and 2 front threads) in front of the emulator at zero cost
# (--per-segment --dims 16), once as text (the lines of a Debian text, tokenized
# by the proxy's SentencePiece model, trained here with spm_train) and once as
# token-id arrays of the very same lengths (spm_encode's counts, in the same
# order). Prints requests per proxy CPU-second (lanepack's utime + stime from
# /proc around each run; every answer verified, text exactly) and, from the
# difference between text and ids, the proxy's CPU per token tokenized and so
# tokens/s per core; then the tokenizer alone (lanepack-tokrate: the same module
# and model, 1 and 2 threads on one loaded model). Not a timed test: figures
# move with the machine's load.
# Usage: [TOKENIZER_THREADS=N] bench/bench-embeddings.sh [BUILD_DIR] [DURATION] [RUNS] [BATCH] [TEXT]
# (TOKENIZER_THREADS: the proxy's tokenizer_threads, for builds that have the key)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
duration=${2:-3s}
runs=${3:-3}
# inputs per request: a batch, as LangChain sends, makes tokenizing a share of
# the proxy's work large enough to stand out of the per-request costs
batch=${4:-8}
text=${5:-/usr/share/common-licenses/GPL-3}
# enough requests in flight to keep the fronts busy, few enough that the one
# client thread is not what limits them on a small machine
conc=32
dims=16
. bench/bench-common.sh
hz=$(getconf CLK_TCK)

# the model, the lines the load generator sends (blank lines and lines without
# ids are left out, as it does) and their token counts for the ids runs
spm_train --input="$text" --model_prefix="$tmp/spm" --vocab_size=400 --character_coverage=1.0 \
  > "$tmp/spm_train.log" 2>&1
grep -v '^[[:space:]]*$' "$text" > "$tmp/lines.txt" || true
spm_encode --model="$tmp/spm.model" --output_format=id < "$tmp/lines.txt" \
  | awk 'NF > 0 {print NF}' > "$tmp/lengths.txt"
printf '%s: %d lines, %d tokens, %.1f tokens per line\n' "$text" "$(wc -l < "$tmp/lengths.txt")" \
  "$(awk '{s += $1} END {print s}' "$tmp/lengths.txt")" \
  "$(awk '{s += $1} END {print s / NR}' "$tmp/lengths.txt")"

p_emu=$(free_port)
"$build/loadgen/lanepack-emulator" --listen "127.0.0.1:$p_emu" --shapes 8x128,4x256 --cost-ms 0 \
  --per-segment --dims "$dims" 2> "$tmp/emu.log" & pids+=($!)
sleep 0.3

# threads kind run: one short run; prints "requests ok tokens cpu_s"
measure() {
  local threads=$1 kind=$2 port cfg lp c0 c1 input
  port=$(free_port)
  cfg="$tmp/lp-$threads.json"
  printf '{"listen": "127.0.0.1:%s", "log_level": "warn", "threads": %s, %s"models": {"default": {"shapes": "8x128,4x256", "max_wait_ms": 1, "backends": ["http://127.0.0.1:%s"], "tokenizer": {"sentencepiece": "%s"}}}}\n' \
    "$port" "$threads" "${TOKENIZER_THREADS:+\"tokenizer_threads\": $TOKENIZER_THREADS, }" "$p_emu" "$tmp/spm.model" > "$cfg"
  "$build/src/lanepack" --config "$cfg" 2> "$tmp/lp.log" & lp=$!
  pids+=($lp)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
  if [ "$kind" = text ]; then input=(--text "$tmp/lines.txt" --tokenizer "$tmp/spm.model")
  else input=(--lengths "$tmp/lengths.txt" --vocab 400); fi
  c0=$(cpu_ticks "$lp")
  "$build/loadgen/lanepack-loadgen" --url "http://127.0.0.1:$port" --protocol openai "${input[@]}" \
    --batch "$batch" --concurrency "$conc" --duration "$duration" --verify --dims "$dims" --json "$tmp/r.json" > /dev/null 2>&1 \
    || { echo "load run failed ($kind, $threads fronts)" >&2; cat "$tmp/lp.log" >&2; exit 1; }
  c1=$(cpu_ticks "$lp")
  kill "$lp"
  wait "$lp" 2>/dev/null || true
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))
if r["mismatches"] or r["failed"]: sys.exit("mismatches or failures: %r" % r)
print(r["ok"], round(r["tokens_per_s"] * r["duration_s"]), (int(sys.argv[2]) - int(sys.argv[3])) / int(sys.argv[4]))' \
    "$tmp/r.json" "$c1" "$c0" "$hz"
}

printf '%d inputs per request\n' "$batch"
printf '\n%-8s %-5s %-4s %10s %10s %12s %14s\n' "fronts" "input" "run" "requests" "tokens" "proxy CPU s" "req/CPU-s"
declare -A sum_req sum_tok sum_cpu
for threads in 1 2; do
  for r in $(seq "$runs"); do
    for kind in ids text; do # side by side, so both see the same machine
      read -r req tok cpu < <(measure "$threads" "$kind")
      printf '%-8s %-5s %-4s %10s %10s %12.2f %14.0f\n' "$threads" "$kind" "$r" "$req" "$tok" "$cpu" \
        "$(python3 -c "print($req / $cpu if $cpu > 0 else 0)")"
      k="$threads $kind"
      sum_req[$k]=$(( ${sum_req[$k]:-0} + req ))
      sum_tok[$k]=$(( ${sum_tok[$k]:-0} + tok ))
      sum_cpu[$k]=$(python3 -c "print(${sum_cpu[$k]:-0} + $cpu)")
    done
  done
done

printf '\n%-8s %16s %16s %12s %26s %22s\n' "fronts" "ids req/CPU-s" "text req/CPU-s" "text/ids" \
  "tokenizing CPU us/token" "tokens/s per core"
for threads in 1 2; do
  python3 - "$threads" "${sum_req[$threads ids]}" "${sum_cpu[$threads ids]}" "${sum_req[$threads text]}" \
    "${sum_cpu[$threads text]}" "${sum_tok[$threads text]}" <<'EOF'
import sys
t, ri, ci, rt, ct, tt = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
ids, txt = ri / ci, rt / ct
# the proxy's CPU per request with text less that with ids of the same
# lengths, per token of it: what tokenizing costs
us = (ct / rt - ci / ri) / (tt / rt) * 1e6
print("%-8s %16.0f %16.0f %12.3f %26.3f %22s" % (t, ids, txt, txt / ids, us, "%.0f" % (1e6 / us) if us > 0 else "n/a"))
EOF
done

printf '\nthe tokenizer alone (%s, %s):\n' "$build/bench/lanepack-tokrate" "${duration%s}s"
for threads in 1 2; do
  "$build/bench/lanepack-tokrate" "$tmp/spm.model" "$tmp/lines.txt" "${duration%s}" "$threads"
done
