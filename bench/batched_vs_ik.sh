#!/bin/sh
# bench/batched_vs_ik.sh — aggregate decode of N streams at once: deltallm's `bench -p 0 -n TG -d PP --slots
# NPL` (N sessions restored to a PP-token context, decoded together) against ik_llama.cpp's
# `llama-batched-bench -npp PP -ntg TG -npl NPL -pps` (the PP-token prompt evaluated once and shared, then
# TG steps of N sequences), same file, same run; S_TG (ik) against deltallm's t/s, both counting every
# stream's tokens.
#   IK_BATCHED=/path/to/llama-batched-bench bench/batched_vs_ik.sh MODEL.gguf
# env: DELTALLM (default build/deltallm), IK_BATCHED (required), THREADS (default "1"), PP (512), TG (64),
#      NPL (default "1,4,8,16"), IK_ARGS (more ik options; its default has flash attention on).
set -eu
DELTALLM=${DELTALLM:-build/deltallm}
IK_BATCHED=${IK_BATCHED:?IK_BATCHED names ik_llama.cpp llama-batched-bench}
THREADS=${THREADS:-1}; PP=${PP:-512}; TG=${TG:-64}; NPL=${NPL:-1,4,8,16}; IK_ARGS=${IK_ARGS:-}
m=${1:?usage: IK_BATCHED=llama-batched-bench bench/batched_vs_ik.sh MODEL.gguf}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rows() { grep '^|' "$1" | grep -v '^| model\|^| *--\|^| *PP' || true; }  # a table's data rows
maxn=$(echo "$NPL" | tr ',' '\n' | sort -n | tail -1)
echo "batched_vs_ik: $(basename "$m"), $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), load $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $THREADS; do
  "$DELTALLM" bench -m "$m" -t "$t" -r 1 -p 0 -n "$TG" -d "$PP" --slots "$NPL" > "$tmp/d.md" 2>&1 || { cat "$tmp/d.md" >&2; exit 1; }
  rows "$tmp/d.md"
  "$IK_BATCHED" -m "$m" -t "$t" -tb "$t" -c $((PP + maxn * TG + 16)) -b 2048 -ub 512 -npp "$PP" -ntg "$TG" -npl "$NPL" -pps $IK_ARGS > "$tmp/i.md" 2> "$tmp/i.err" || { tail -5 "$tmp/i.err" >&2; exit 1; }
  grep "^| *[0-9]" "$tmp/i.md" || grep "^| *[0-9]" "$tmp/i.err"
  { grep "^| *[0-9]" "$tmp/i.md"; grep "^| *[0-9]" "$tmp/i.err"; } > "$tmp/i.rows" || true
  echo
  echo "| threads | streams | deltallm aggregate t/s | ik S_TG t/s | deltallm / ik | deltallm × its one stream |"
  echo "|---:|---:|---:|---:|---:|---:|"
  one=""
  for n in $(echo "$NPL" | tr ',' ' '); do
    d=$(awk -F'|' -v n="$n" '{ x = $7; gsub(/ /, "", x); if (x ~ "^tg[0-9]+x"n"@") { v = $8; sub(/^ */, "", v); sub(/ *±.*/, "", v); print v; exit } }' "$tmp/d.md")
    [ -n "$d" ] || d=$(awk -F'|' -v n="$n" -v tg="$TG" '{ x = $7; gsub(/ /, "", x); if (n == 1 && x ~ "^tg"tg"@") { v = $8; sub(/^ */, "", v); sub(/ *±.*/, "", v); print v; exit } }' "$tmp/d.md")
    i=$(awk -F'|' -v n="$n" '{ b = $4; gsub(/ /, "", b); if (b == n) { v = $9; gsub(/ /, "", v); print v; exit } }' "$tmp/i.rows")
    [ "$n" = 1 ] && one=$d
    echo "| $t | $n | ${d:--} | ${i:--} | $(awk -v a="${d:-0}" -v b="${i:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }') | $(awk -v a="${d:-0}" -v b="${one:-0}" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }') |"
  done
done
