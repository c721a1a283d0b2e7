#!/bin/sh
# bench/expert_cache.sh — an MoE model bigger than memory: deltallm's expert cache at several budgets, deltallm
# with the plain mapping, and llama.cpp (mmap), decode and prefill, each run starting cold (page cache
# dropped: needs root), warm numbers from a second repetition (the cache lives in the process) or a second
# run (the page cache). One part per call, so that each hold of the team's bench lock stays short:
#
#   flock /work/notes/bench.lock nice -n -20 bench/expert_cache.sh PART MODEL.gguf OUTDIR
#
# PART: tg-cache (tg64 at BUDGETS), tg-mmap (deltallm mapped, llama.cpp; tg64), pp-cache, pp-mmap (pp256),
# tg-nopredict (tg64 at the first budget without the next-layer prediction), or "runs" with RUNS, a list of
# TEST:GIB:POLICY[:nopredict|:ioN] (e.g. "tg:12:lru pp:8:lfu tg:12:lru:io2") run one after the other with the cache, or "cg":
# a smaller machine emulated for every engine alike: with CGROUP, a cgroup-v1 memory directory this script
# may write, each run of llama.cpp, deltallm mapped and deltallm with --mem-budget (LIMIT_GIB − 1.5) runs
# inside it with memory.limit_in_bytes = LIMIT_GIB (CG_LIMITS, default "12"), decode only.
# Environment: BUDGETS (default "16 12 8", GiB), TG (64), PP (256), THREADS (2), LIMIT (seconds per run, 200),
# DELTALLM (build/deltallm), LLREF ($HOME/.cache/llref/llref). Writes OUTDIR/<part>-<engine>.{json,txt}; a run
# that does not finish within LIMIT leaves "timeout" in its file. docs/EXPERT_CACHE.md has the results.
set -u
PART=$1; MODEL=$2; OUT=$3
DELTALLM=${DELTALLM:-build/deltallm}; LLREF=${LLREF:-$HOME/.cache/llref/llref}
BUDGETS=${BUDGETS:-"16 12 8"}; TG=${TG:-64}; PP=${PP:-256}; THREADS=${THREADS:-2}; LIMIT=${LIMIT:-200}
mkdir -p "$OUT"
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }
run() { # name command...: one timed run, stdout to OUT/name.json, stderr to OUT/name.txt
  name=$1; shift
  t0=$(date +%s.%N)
  timeout "$LIMIT" "$@" > "$OUT/$name.json" 2> "$OUT/$name.txt" || echo "exit $? (124 = timeout after ${LIMIT}s)" >> "$OUT/$name.txt"
  echo "$name: $(echo "$(date +%s.%N) - $t0" | bc) s wall" | tee -a "$OUT/summary.txt"
}
case "$PART" in
  tg-cache)
    for b in $BUDGETS; do cold; run "tg-cache-${b}G" "$DELTALLM" bench -m "$MODEL" -p 0 -n "$TG" -r 2 -t "$THREADS" --mem-budget "${b}G" --json; done ;;
  tg-nopredict)
    b=${BUDGETS%% *}; export DELTALLM_CACHE_PREDICT=0; cold; run "tg-nopredict-${b}G" "$DELTALLM" bench -m "$MODEL" -p 0 -n "$TG" -r 2 -t "$THREADS" --mem-budget "${b}G" --json ;;
  pp-cache)
    for b in $BUDGETS; do cold; run "pp-cache-${b}G" "$DELTALLM" bench -m "$MODEL" -p "$PP" -n 0 -r 1 -t "$THREADS" --mem-budget "${b}G" --json; done ;;
  tg-mmap)
    cold; run tg-mmap-cold "$DELTALLM" bench -m "$MODEL" -p 0 -n "$TG" -r 1 -t "$THREADS" --no-prefetch --mem-budget 64G --json
    run tg-mmap-warm "$DELTALLM" bench -m "$MODEL" -p 0 -n "$TG" -r 1 -t "$THREADS" --no-prefetch --mem-budget 64G --json
    cold; run tg-llama-cold "$LLREF" -m "$MODEL" -t "$THREADS" --bench-tg "$TG" --reps 1 --kv-type f16 --flash-attn auto
    run tg-llama-warm "$LLREF" -m "$MODEL" -t "$THREADS" --bench-tg "$TG" --reps 1 --kv-type f16 --flash-attn auto ;;
  pp-mmap)
    cold; run pp-mmap-cold "$DELTALLM" bench -m "$MODEL" -p "$PP" -n 0 -r 1 -t "$THREADS" --no-prefetch --mem-budget 64G --json
    cold; run pp-llama-cold "$LLREF" -m "$MODEL" -t "$THREADS" --bench-pp "$PP" --reps 1 --kv-type f16 --flash-attn auto ;;
  runs)
    for r in $RUNS; do
      t=$(echo "$r" | cut -d: -f1); b=$(echo "$r" | cut -d: -f2); pol=$(echo "$r" | cut -d: -f3); np=$(echo "$r" | cut -d: -f4)
      if [ "$t" = tg ]; then args="-p 0 -n $TG -r 2"; else args="-p $PP -n 0 -r 1"; fi
      pr=1; [ "$np" = nopredict ] && pr=0
      io=0; case "$np" in io*) io=${np#io} ;; esac
      export DELTALLM_CACHE_PREDICT=$pr DELTALLM_CACHE_IO_THREADS=$io; cold; run "$t-cache-${b}G-$pol${np:+-$np}" "$DELTALLM" bench -m "$MODEL" $args -t "$THREADS" \
        --mem-budget "${b}G" --cache-policy "$pol" --json --profile
    done ;;
  cg)
    IN='echo $$ > "$0/tasks"; exec "$@"' # joins the cgroup, then runs the command
    for g in ${CG_LIMITS:-12}; do
      echo $((g * 1024 * 1024 * 1024)) > "$CGROUP/memory.limit_in_bytes"
      cold; run "cg${g}-tg-llama" sh -c "$IN" "$CGROUP" "$LLREF" -m "$MODEL" -t "$THREADS" --bench-tg "$TG" --reps 1 --kv-type f16 --flash-attn auto
      cold; run "cg${g}-tg-mmap" sh -c "$IN" "$CGROUP" "$DELTALLM" bench -m "$MODEL" -p 0 -n "$TG" -r 1 -t "$THREADS" --no-prefetch --mem-budget 64G --json
      cold; run "cg${g}-tg-cache" sh -c "$IN" "$CGROUP" "$DELTALLM" bench -m "$MODEL" -p 0 -n "$TG" -r 2 -t "$THREADS" --mem-budget "$(echo "$g - 1.5" | bc)G" --json --profile
    done ;;
  *) echo "bench/expert_cache.sh: unknown part '$PART'" >&2; exit 2 ;;
esac
