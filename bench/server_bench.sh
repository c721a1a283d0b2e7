#!/bin/sh
# bench/server_bench.sh — benchmark of `deltallm serve` (not a test): TTFT of the 2nd turn of a ~4,000-token
# conversation with and without prefix reuse, and throughput with 1/2/4 parallel clients. Starts the server
# on a free port, runs bench/server_bench.mjs (Node, no packages), stops the server.
#   bench/server_bench.sh [MODEL.gguf]
# env: DELTALLM_BIN (default build/deltallm), THREADS (default: all), CTX (default 8192), and
#      TARGET_TOKENS / REPS / GEN_TOKENS for the script.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DELTALLM_BIN:-$root/build/deltallm}
MODEL=${1:-$root/tests/data/models/m1-qwen3next-legacy-f32.gguf}
TMP=$(mktemp -d)
trap 'kill "$PID" 2>/dev/null || true; rm -rf "$TMP"' EXIT
"$BIN" serve -m "$MODEL" --port 0 --parallel 4 --ctx-size "${CTX:-8192}" --threads "${THREADS:-0}" \
    --cache-chunk 256 --batch-size 256 >"$TMP/out" 2>"$TMP/err" &
PID=$!
while ! grep -q "listening on" "$TMP/out" 2>/dev/null; do
    kill -0 "$PID" 2>/dev/null || { cat "$TMP/err"; exit 1; }
    sleep 0.1
done
PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/out")
echo "deltallm serve on port $PORT: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
DELTALLM_URL="http://127.0.0.1:$PORT" node "$root/bench/server_bench.mjs"
kill -TERM "$PID"
wait "$PID" || true
