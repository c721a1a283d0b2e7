#!/bin/sh
# bench/server_vs_ik.sh — total generation throughput of `deltallm serve` against ik_llama.cpp's (or
# llama.cpp's) `llama-server` on the same file: NP slots, CLIENTS parallel clients each sending PER_CLIENT
# /v1/completions requests back to back (GEN_TOKENS tokens each, ignore_eos, no prompt cache), through
# bench/server_bench.mjs's throughput part. The servers run one at a time, alternating for ROUNDS rounds.
#   IK_SERVER=/path/to/llama-server bench/server_vs_ik.sh MODEL.gguf
# env: DELTALLM_BIN (default build/deltallm), IK_SERVER (required), NP (slots, default 8), CLIENTS (default
#      "$NP"), THREADS (default 2), CTX (per slot, default 1024), GEN_TOKENS (default 64), PER_CLIENT (default
#      2), ROUNDS (default 1), PORT (default 18431), STREAM (default 1: the requests stream their tokens, which
#      llama-server needs on a random-weight model: it answers a non-streamed text that is not UTF-8 with HTTP 500).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
BIN=${DELTALLM_BIN:-$root/build/deltallm}
MODEL=${1:?usage: IK_SERVER=llama-server bench/server_vs_ik.sh MODEL.gguf}
IK_SERVER=${IK_SERVER:?IK_SERVER names the llama-server of ik_llama.cpp}
NP=${NP:-8}; THREADS=${THREADS:-2}; CTX=${CTX:-1024}; ROUNDS=${ROUNDS:-1}; PORT=${PORT:-18431}
export CLIENTS="${CLIENTS:-$NP}" GEN_TOKENS="${GEN_TOKENS:-64}" PER_CLIENT="${PER_CLIENT:-2}" THROUGHPUT_ONLY=1
export STREAM="${STREAM:-1}"
export DELTALLM_URL="http://127.0.0.1:$PORT"
TMP=$(mktemp -d); PID=
trap '[ -z "$PID" ] || kill "$PID" 2>/dev/null; rm -rf "$TMP"' EXIT
up() {  # waits for /health to answer 200 (the model loaded)
  i=0
  while [ "$(curl -s -o /dev/null -w '%{http_code}' "$DELTALLM_URL/health" 2>/dev/null)" != 200 ]; do
    kill -0 "$PID" 2>/dev/null || { echo "server_vs_ik: $1 exited:"; tail -5 "$TMP/err"; exit 1; }
    i=$((i + 1)); [ "$i" -lt 1200 ] || { echo "server_vs_ik: $1 did not come up in 10 minutes"; exit 1; }
    sleep 0.5
  done
}
run() {  # name, command...
  name=$1; shift
  "$@" >"$TMP/out" 2>"$TMP/err" &
  PID=$!
  up "$name"
  echo "#### $name ($(date -u '+%H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg))"
  node "$root/bench/server_bench.mjs" | sed -n '/^| [0-9]/p'
  kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=
  # the next server listens on the next port: after llama-server's exit its port stayed refused to a new
  # listener for a while (EADDRINUSE in the second round, with SO_REUSEADDR and nothing listening)
  PORT=$((PORT + 1)); DELTALLM_URL="http://127.0.0.1:$PORT"
}
echo "server_vs_ik: $(basename "$MODEL"), $NP slots, clients $CLIENTS, $THREADS threads, $GEN_TOKENS tokens x $PER_CLIENT requests per client, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "| parallel clients | requests | generated tokens | wall (s) | aggregate tok/s | median per-request tok/s |"
r=0
while [ "$r" -lt "$ROUNDS" ]; do
  r=$((r + 1))
  run "deltallm serve -np $NP" "$BIN" serve -m "$MODEL" --port "$PORT" --parallel "$NP" --ctx-size "$CTX" --threads "$THREADS"
  run "ik llama-server -np $NP" "$IK_SERVER" -m "$MODEL" --port "$PORT" -np "$NP" -c $((CTX * NP)) -t "$THREADS"
done
