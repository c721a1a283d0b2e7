#!/bin/sh
# bench/compare.sh — deltallm and llama.cpp on the same files, in one run, with the ratios.
#
#   bench/compare.sh MODEL.gguf [MODEL.gguf ...]
#
# Environment:
#   DELTALLM     the deltallm binary (default build/deltallm); DELTALLM_ARGS more options for its bench
#                (e.g. --mlock on a machine where other processes push the weights out of memory)
#   LLAMA_BENCH  a llama-bench-compatible command; "-m FILE -t N" is appended. Default: llref (shared/tools)
#                "$HOME/.cache/llref/llref --bench-pp $PP --bench-tg $TG --reps $REPS --kv-type f16 --flash-attn auto",
#                i.e. llama.cpp's own defaults. For llama-bench itself: LLAMA_BENCH="llama-bench -p 512 -n 128 -r 3".
#   THREADS      thread counts (default "1 2"); PP, TG, REPS (default 512, 128, 3)
#   RESULTS      append the table to this markdown file (default: do not append)
# Prints one markdown table: t/s of both engines and deltallm/llama.cpp per model, threads and test.
set -eu
DELTALLM=${DELTALLM:-build/deltallm}
PP=${PP:-512}; TG=${TG:-128}; REPS=${REPS:-3}; THREADS=${THREADS:-"1 2"}
LLAMA_BENCH=${LLAMA_BENCH:-"$HOME/.cache/llref/llref --bench-pp $PP --bench-tg $TG --reps $REPS --kv-type f16 --flash-attn auto"}
[ $# -ge 1 ] || { echo "usage: bench/compare.sh MODEL.gguf [...]" >&2; exit 2; }
[ -x "$DELTALLM" ] || { echo "bench/compare.sh: $DELTALLM not built (make)" >&2; exit 2; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# t/s column of a llama-bench style markdown table for test $2 ("pp512"): the number before " ±"
tps() { awk -F'|' -v t="$2" '{ for (i = 1; i <= NF; i++) if ($i ~ "^ *"t" *$") { v = $(i+1); sub(/^ */, "", v); sub(/ *±.*/, "", v); print v; exit } }' "$1"; }

out="$tmp/table.md"
{
  echo "| model | threads | test | deltallm t/s | llama.cpp t/s | deltallm / llama.cpp | deltallm weights GB/s | probe GB/s |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} > "$out"
for m in "$@"; do
  for t in $THREADS; do
    "$DELTALLM" bench -m "$m" -p "$PP" -n "$TG" -r "$REPS" -t "$t" ${DELTALLM_ARGS:-} > "$tmp/d.md"
    $LLAMA_BENCH -m "$m" -t "$t" > "$tmp/l.md" 2> "$tmp/l.err" || { cat "$tmp/l.err" >&2; exit 1; }
    for test in "pp$PP" "tg$TG"; do
      d=$(tps "$tmp/d.md" "$test"); l=$(tps "$tmp/l.md" "$test")
      bw=$(awk -F'|' -v t="$test" '$7 ~ "^ *"t" *$" { gsub(/ /, "", $9); gsub(/ /, "", $10); print $9 "|" $10; exit }' "$tmp/d.md")
      ratio=$(awk -v a="$d" -v b="$l" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
      echo "| $(basename "$m") | $t | $test | $d | $l | $ratio | ${bw%%|*} | ${bw##*|} |" >> "$out"
    done
  done
done
cat "$out"
if [ -n "${RESULTS:-}" ]; then
  { echo; echo "### $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -m), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"; echo; cat "$out"; } >> "$RESULTS"
fi
