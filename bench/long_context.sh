#!/bin/sh
# bench/long_context.sh — deltallm against ik_llama.cpp's llama-bench at long contexts, same files, same run:
# prefill of PP tokens (each length in PPS) and TG tokens decoded after a context of DEPTH tokens (ik's
# `-gp DEPTH,TG`, deltallm's `-d DEPTH -n TG`). ik runs at its defaults (flash attention on) and, with
# IK_RTR=1, also with -rtr 1 (run-time repacking); the better ik setting per test is the ratio's denominator.
#   IK_BENCH=/path/to/llama-bench bench/long_context.sh MODEL.gguf [...]
# env: DELTALLM (default build/deltallm), DELTALLM_ARGS (more bench options, e.g. "-ctk q8_0 -ctv q8_0"),
#      IK_BENCH (required), IK_ARGS (more ik options), IK_RTR (0/1, default 1), THREADS (default "2"),
#      PPS (default "8192 32768"), DEPTH (default 32768; 0 skips the decode test), TG (default 128), REPS (default 1).
set -eu
DELTALLM=${DELTALLM:-build/deltallm}
IK_BENCH=${IK_BENCH:?IK_BENCH names ik_llama.cpp llama-bench}
THREADS=${THREADS:-2}; PPS=${PPS:-"8192 32768"}; DEPTH=${DEPTH:-32768}; TG=${TG:-128}; REPS=${REPS:-1}
IK_RTR=${IK_RTR:-1}
[ $# -ge 1 ] || { echo "usage: IK_BENCH=llama-bench bench/long_context.sh MODEL.gguf [...]" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rows() { grep '^|' "$1" | grep -v '^| model\|^| *--\|^| *PP' || true; }  # a table's data rows
# the t/s of test $2 in llama-bench-style table $1 (deltallm writes "tg128 @ d32768", ik "tg128@pp32768")
tps() { awk -F'|' -v t="$2" '{ for (i = 1; i <= NF; i++) { x = $i; gsub(/ /, "", x); if (x == t) { v = $(i+1); sub(/^ */, "", v); sub(/ *±.*/, "", v); print v; exit } } }' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
echo "long_context: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
out="$tmp/table.md"
echo "| model | threads | test | deltallm t/s | ik t/s (default / -rtr 1) | deltallm / best ik |" > "$out"
echo "|---|---:|---|---:|---:|---:|" >> "$out"
one() {  # model threads dl-test-label ik-test-label "deltallm args" "ik args"
  m=$1 t=$2 dl=$3 ik=$4
  "$DELTALLM" bench -m "$m" -t "$t" -r "$REPS" $5 ${DELTALLM_ARGS:-} > "$tmp/d.md" 2>&1 || { cat "$tmp/d.md" >&2; exit 1; }
  cat "$tmp/d.md" | grep "^| [^-m]" ; d=$(tps "$tmp/d.md" "$dl")
  "$IK_BENCH" -m "$m" -t "$t" -r "$REPS" $6 ${IK_ARGS:-} > "$tmp/i0.md" 2> "$tmp/i.err" || { tail -3 "$tmp/i.err" >&2; exit 1; }
  rows "$tmp/i0.md"; i0=$(tps "$tmp/i0.md" "$ik"); i1=-
  if [ "$IK_RTR" = 1 ]; then
    "$IK_BENCH" -m "$m" -t "$t" -r "$REPS" -rtr 1 $6 ${IK_ARGS:-} > "$tmp/i1.md" 2> "$tmp/i.err" || { tail -3 "$tmp/i.err" >&2; exit 1; }
    rows "$tmp/i1.md"; i1=$(tps "$tmp/i1.md" "$ik")
  fi
  b=$(best "${i0:-0}" "${i1:-0}")
  echo "| $(basename "$m") | $t | $dl | ${d:--} | ${i0:--} / ${i1:--} | $(ratio "${d:-0}" "$b") |" >> "$out"
  echo "[$(date -u '+%H:%M')] $(basename "$m") t=$t $dl: deltallm ${d:--}, ik ${i0:--} / ${i1:--}, load $(cut -d' ' -f1 /proc/loadavg)" >&2
}
for m in "$@"; do
  for t in $THREADS; do
    for p in $PPS; do one "$m" "$t" "pp$p" "pp$p" "-p $p -n 0" "-p $p -n 0"; done
    [ "$DEPTH" = 0 ] || one "$m" "$t" "tg$TG@d$DEPTH" "tg$TG@pp$DEPTH" "-p 0 -n $TG -d $DEPTH" "-p 0 -n 0 -gp $DEPTH,$TG"
  done
done
cat "$out"
