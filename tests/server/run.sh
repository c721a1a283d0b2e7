#!/bin/sh
# tests/server/run.sh — the end-to-end server suite. Builds nothing: starts `$DELTALLM_BIN serve` (default
# build/deltallm) on a free port with a test model, runs the Node scripts against it (the official openai
# client, load, malformed requests, disconnects, prefix reuse), restarts it on the same --state-dir for the
# disk-checkpoint check, and stops it. Needs node and `npm ci` in tests/server. Exit status 0 = all passed.
#
# Environment: DELTALLM_BIN, DELTALLM_TEST_MODEL (default tests/data/models/m1-qwen3next-legacy-f32.gguf),
# DELTALLM_TEST_TMP (scratch dir; default a new mktemp dir), DELTALLM_LOAD_ARGS (load.mjs's "N CONC", default
# "200 8"), DELTALLM_SUITE (the scripts before prefix.mjs; default: client responses load malformed disconnect),
# DELTALLM_LAUNCH and DELTALLM_SERVE_ARGS (the server over MPI: "mpirun -np 2" and "--mpi", see mpi.sh; it is then
# stopped through rank 0, whose pid its log gives).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN=${DELTALLM_BIN:-$root/build/deltallm}
case "$BIN" in /*) ;; *) BIN="$root/$BIN" ;; esac
MODEL=${DELTALLM_TEST_MODEL:-$root/tests/data/models/m1-qwen3next-legacy-f32.gguf}
TMP=${DELTALLM_TEST_TMP:-$(mktemp -d)}
mkdir -p "$TMP"
export DELTALLM_TEST_TMP="$TMP"
KEY="test-key-$$"
PID=""

[ -x "$BIN" ] || { echo "not ok run.sh — no server binary at $BIN"; exit 1; }
[ -d "$here/node_modules/openai" ] || { echo "not ok run.sh — run 'npm ci' in tests/server first"; exit 1; }

start_server() { # $1: name of the log files
    rm -f "$TMP/$1.out"
    # shellcheck disable=SC2086 # the launcher and the extra arguments are word lists
    ${DELTALLM_LAUNCH:-} "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port 0 --parallel 4 --ctx-size 2048 --threads 1 --queue 16 \
        --api-key "$KEY,second-$KEY" --chat-template-file "$root/tests/data/chat/Qwen3.5-4B.jinja" \
        --cache-chunk 128 --batch-size 128 --state-dir "$TMP/state" --max-body 1 ${DELTALLM_SERVE_ARGS:-} \
        >"$TMP/$1.out" 2>"$TMP/$1.err" &
    PID=$!
    NAME=$1
    i=0
    while ! grep -q "listening on" "$TMP/$1.out" 2>/dev/null; do
        if ! kill -0 "$PID" 2>/dev/null; then
            echo "not ok run.sh — the server did not start:"; cat "$TMP/$1.err"; exit 1
        fi
        i=$((i + 1))
        [ "$i" -lt 600 ] || { echo "not ok run.sh — the server did not start within 60 s"; exit 1; }
        sleep 0.1
    done
    PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$TMP/$1.out")
    export DELTALLM_URL="http://127.0.0.1:$PORT" DELTALLM_KEY="$KEY"
    # load.mjs reports the server's RSS (not over a launcher: PID is then mpirun's)
    if [ -z "${DELTALLM_LAUNCH:-}" ]; then export DELTALLM_SERVER_PID="$PID"; fi
    echo "server ($1) on port $PORT, pid $PID"
}

stop_server() {
    # over MPI the server is rank 0 (its log names its pid), not the launcher
    rank0=$(sed -n 's/.* rank 0 ([^,]*, pid \([0-9]*\)).*/\1/p' "$TMP/$NAME.err" | head -n 1)
    kill -TERM "${rank0:-$PID}"
    if wait "$PID"; then echo "ok server stopped cleanly"; else echo "not ok server exit status $?"; status=1; fi
    PID=""
}

trap '[ -z "$PID" ] || kill "$PID" 2>/dev/null || true' EXIT
status=0
start_server server1
for t in ${DELTALLM_SUITE:-client responses llama anthropic load malformed disconnect}; do
    # DELTALLM_LOAD_ARGS: load.mjs's N CONC (a slow device runs fewer requests; the CPU run keeps 200 x 8)
    args=""
    [ "$t" = load ] && args=${DELTALLM_LOAD_ARGS:-}
    node "$here/$t.mjs" $args || status=1
done
node "$here/prefix.mjs" save || status=1
if ! kill -0 "$PID" 2>/dev/null; then echo "not ok the server died during the tests"; cat "$TMP/server1.err"; exit 1; fi
stop_server
start_server server2
node "$here/prefix.mjs" restart || status=1
stop_server
[ "$status" -eq 0 ] && echo "ok run.sh: all server tests passed" || { echo "not ok run.sh: failures above (server log: $TMP/server1.err)"; }
exit "$status"
