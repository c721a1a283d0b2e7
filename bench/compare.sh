#!/bin/sh
# bench/compare.sh — deltallm, llama.cpp and (when IK_BENCH names its llama-bench) ik_llama.cpp on the same files,
# in one run, with the ratios.
#
#   bench/compare.sh MODEL.gguf [MODEL.gguf ...]
#
# Environment:
#   DELTALLM     the deltallm binary (default build/deltallm); DELTALLM_ARGS more options for its bench
#                (e.g. --mlock on a machine where other processes push the weights out of memory, --arith llama)
#   LLAMA_BENCH  a llama-bench-compatible command; "-m FILE -t N" is appended. Default: llref (shared/tools)
#                "$HOME/.cache/llref/llref --bench-pp $PP --bench-tg $TG --reps $REPS --kv-type f16 --flash-attn auto",
#                i.e. llama.cpp's own defaults. For llama-bench itself: LLAMA_BENCH="llama-bench -p 512 -n 128 -r 3".
#   IK_BENCH     ik_llama.cpp's llama-bench (../shared/tools/build-ik.sh builds it); run at its defaults and with
#                -rtr 1 (run-time repacking), the better of the two per test is the ratio's denominator
#   THREADS      thread counts (default "1 2"); PP, TG, REPS (default 512, 128, 3)
#   ROUNDS       run every engine this many times per model and thread count, the engines alternating, and keep
#                each engine's best t/s per test (default 1). On a shared machine the noise only ever slows a run
#                down, and it comes in bursts of minutes: one round can put a burst on one engine and not on the
#                others; the best of 2-3 alternating rounds compares the engines at the same machine state.
#   RESULTS      append the table to this markdown file (default: do not append)
#   COLD         1 (default): drop the model file from the page cache before each engine's run (GNU dd
#                iflag=nocache), so that every engine reads it in the same page sizes. The kernel's page cache
#                keeps whatever folio size a file was first read in: read once in 4 KiB folios, every engine then
#                misses the TLB on every 4 KiB page of a weight (b3's decode: 34-44 vs 52-54 t/s with 2 MiB
#                folios); 0 keeps the cache as it is.
# Prints one markdown table: t/s of every engine (the best of ROUNDS rounds) and deltallm's ratio to llama.cpp and to the better ik_llama.cpp
# setting, per model, threads and test.
set -eu
DELTALLM=${DELTALLM:-build/deltallm}
PP=${PP:-512}; TG=${TG:-128}; REPS=${REPS:-3}; THREADS=${THREADS:-"1 2"}; ROUNDS=${ROUNDS:-1}
LLAMA_BENCH=${LLAMA_BENCH:-"$HOME/.cache/llref/llref --bench-pp $PP --bench-tg $TG --reps $REPS --kv-type f16 --flash-attn auto"}
IK_BENCH=${IK_BENCH:-}
[ $# -ge 1 ] || { echo "usage: bench/compare.sh MODEL.gguf [...]" >&2; exit 2; }
[ -x "$DELTALLM" ] || { echo "bench/compare.sh: $DELTALLM not built (make)" >&2; exit 2; }
case "$ROUNDS" in ''|*[!0-9]*|0) echo "bench/compare.sh: ROUNDS=$ROUNDS is not a positive integer" >&2; exit 2 ;; esac
[ -z "$IK_BENCH" ] || [ -x "$IK_BENCH" ] || { echo "bench/compare.sh: IK_BENCH=$IK_BENCH is not executable" >&2; exit 2; }

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# t/s column of llama-bench style markdown tables for test $2 ("pp512"): the number before " ±", the largest
# over the rounds' tables in $1
tps() { awk -F'|' -v t="$2" '{ for (i = 1; i <= NF; i++) if ($i ~ "^ *"t" *$") { v = $(i+1); sub(/^ */, "", v); sub(/ *±.*/, "", v); if (!n++ || v + 0 > b + 0) b = v; break } } END { if (n) print b }' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
cold() { [ "${COLD:-1}" = 0 ] || dd if="$1" iflag=nocache count=0 status=none 2>/dev/null || true; }

out="$tmp/table.md"
if [ -n "$IK_BENCH" ]; then
  {
    echo "| model | threads | test | deltallm t/s | llama.cpp t/s | ik_llama.cpp t/s (default / -rtr 1) | deltallm / llama.cpp | deltallm / best ik | deltallm weights GB/s | probe GB/s |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  } > "$out"
else
  {
    echo "| model | threads | test | deltallm t/s | llama.cpp t/s | deltallm / llama.cpp | deltallm weights GB/s | probe GB/s |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
  } > "$out"
fi
for m in "$@"; do
  for t in $THREADS; do
    rm -f "$tmp"/*.all
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
      r=$((r + 1))
      cold "$m"; "$DELTALLM" bench -m "$m" -p "$PP" -n "$TG" -r "$REPS" -t "$t" ${DELTALLM_ARGS:-} > "$tmp/d.md" ||
        { echo "bench/compare.sh: deltallm bench failed on $m with $t threads (its message above; major page faults: DELTALLM_ARGS=--mlock)" >&2; exit 1; }
      cat "$tmp/d.md" >> "$tmp/d.all"
      cold "$m"; $LLAMA_BENCH -m "$m" -t "$t" > "$tmp/l.md" 2> "$tmp/l.err" || { cat "$tmp/l.err" >&2; exit 1; }
      cat "$tmp/l.md" >> "$tmp/l.all"
      if [ -n "$IK_BENCH" ]; then
        cold "$m"; "$IK_BENCH" -m "$m" -t "$t" -p "$PP" -n "$TG" -r "$REPS" > "$tmp/i0.md" 2> "$tmp/i.err" || { cat "$tmp/i.err" >&2; exit 1; }
        cat "$tmp/i0.md" >> "$tmp/i0.all"
        cold "$m"; "$IK_BENCH" -m "$m" -t "$t" -p "$PP" -n "$TG" -r "$REPS" -rtr 1 > "$tmp/i1.md" 2> "$tmp/i.err" || { cat "$tmp/i.err" >&2; exit 1; }
        cat "$tmp/i1.md" >> "$tmp/i1.all"
      fi
    done
    for test in "pp$PP" "tg$TG"; do
      d=$(tps "$tmp/d.all" "$test"); l=$(tps "$tmp/l.all" "$test")
      # deltallm's weights GB/s and the probe's, from the round of its best t/s
      bw=$(awk -F'|' -v t="$test" '$7 ~ "^ *"t" *$" { v = $8; sub(/ *±.*/, "", v); if (!n++ || v + 0 > b + 0) { b = v; x = $9; y = $10; gsub(/ /, "", x); gsub(/ /, "", y) } } END { print x "|" y }' "$tmp/d.all")
      if [ -n "$IK_BENCH" ]; then
        i0=$(tps "$tmp/i0.all" "$test"); i1=$(tps "$tmp/i1.all" "$test")
        echo "| $(basename "$m") | $t | $test | $d | $l | $i0 / $i1 | $(ratio "$d" "$l") | $(ratio "$d" "$(best "$i0" "$i1")") | ${bw%%|*} | ${bw##*|} |" >> "$out"
      else
        echo "| $(basename "$m") | $t | $test | $d | $l | $(ratio "$d" "$l") | ${bw%%|*} | ${bw##*|} |" >> "$out"
      fi
    done
  done
done
cat "$out"
if [ -n "${RESULTS:-}" ]; then
  { echo; echo "### $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -m), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"; echo; cat "$out"; } >> "$RESULTS"
fi
