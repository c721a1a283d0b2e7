#!/bin/sh
# tests/server/mpi.sh — the server over MPI (ranks on loopback):
#   1. run.sh (the official openai client suite, then prefix checkpoints saved and, after a restart, restored
#      from --state-dir: snapshots that cross the ranks) against `mpirun -np 2 deltallm serve --mpi`;
#   2. rank 1 killed (SIGKILL) in the middle of a streamed and a plain request on `mpirun -np 2` (the last
#      rank) and `-np 3` (a middle one): both end with an error that names the rank (mpi_kill.mjs), rank 0
#      logs one line saying why, every rank is gone and the launcher has returned, within seconds.
# Environment: DELTALLM_BIN, DELTALLM_MPIRUN (the launcher without -np; default "mpirun"), DELTALLM_TEST_TMP.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN=${DELTALLM_BIN:-$root/build/deltallm}
case "$BIN" in /*) ;; *) BIN="$root/$BIN" ;; esac
MPIRUN=${DELTALLM_MPIRUN:-mpirun}
TMP=${DELTALLM_TEST_TMP:-$(mktemp -d)}
mkdir -p "$TMP"
MODEL=$root/tests/data/models/m1-qwen3next-legacy-f32.gguf
status=0

echo "== run.sh over mpirun -np 2"
DELTALLM_LAUNCH="$MPIRUN -np 2" DELTALLM_SERVE_ARGS="--mpi" DELTALLM_SUITE="client" DELTALLM_TEST_TMP="$TMP/suite" \
    sh "$here/run.sh" || status=1

# kill_check NP: a server on NP ranks, rank 1 killed in the middle of a streamed and a plain request
kill_check() {
    NP=$1
    K=$TMP/kill-$NP
    echo "== a rank killed mid-request (mpirun -np $NP)"
    PID=""
    # shellcheck disable=SC2086 # MPIRUN is a word list
    $MPIRUN -np "$NP" "$BIN" serve -m "$MODEL" --host 127.0.0.1 --port 0 --parallel 2 --ctx-size 8192 --threads 1 --mpi \
        >"$K.out" 2>"$K.err" &
    PID=$!
    i=0
    while ! grep -q "listening on" "$K.out" 2>/dev/null; do
        kill -0 "$PID" 2>/dev/null || { echo "not ok mpi -np $NP: the server did not start:"; cat "$K.err"; status=1; return; }
        i=$((i + 1))
        [ "$i" -lt 600 ] || { echo "not ok mpi -np $NP: the server did not start within 60 s"; status=1; return; }
        sleep 0.1
    done
    PORT=$(sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\) .*/\1/p' "$K.out")
    pid_of() { sed -n "s/.* rank $1 ([^,]*, pid \([0-9]*\)).*/\1/p" "$K.err" | head -n 1; }
    RANKS=""
    r=0
    while [ "$r" -lt "$NP" ]; do RANKS="$RANKS $(pid_of $r)"; r=$((r + 1)); done
    R1=$(pid_of 1)
    echo "server on port $PORT: ranks$RANKS (launcher $PID)"
    DELTALLM_URL="http://127.0.0.1:$PORT" DELTALLM_KILL_PID="$R1" node "$here/mpi_kill.mjs" || status=1
    i=0
    while kill -0 "$PID" 2>/dev/null; do
        i=$((i + 1))
        if [ "$i" -ge 300 ]; then echo "not ok mpi -np $NP: the ranks still run 30 s after the kill"; status=1; kill -9 "$PID"; break; fi
        sleep 0.1
    done
    rc=0
    wait "$PID" || rc=$?
    PID=""
    echo "launcher gone after $((i / 10)).$((i % 10)) s, exit status $rc"
    [ "$rc" -ne 0 ] && echo "ok mpi -np $NP: the launcher reports the failure (exit $rc)" || { echo "not ok mpi -np $NP: the launcher exited 0"; status=1; }
    j=0 left="x"
    while [ -n "$left" ] && [ "$j" -lt 200 ]; do # the launcher may return before the ranks are gone
        left=""
        for p in $RANKS; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
        [ -z "$left" ] || sleep 0.1
        j=$((j + 1))
    done
    [ -z "$left" ] && echo "ok mpi -np $NP: every rank exited" || { echo "not ok mpi -np $NP: ranks left after 20 s:$left"; status=1; }
    grep -q "every rank stops" "$K.err" && echo "ok mpi -np $NP: $(grep -m1 "every rank stops" "$K.err")" ||
        { echo "not ok mpi -np $NP: no closing line from rank 0"; status=1; }
    if grep -q "rank 1 (pid $R1 on [^)]*) died" "$K.err"; then
        echo "ok mpi -np $NP: rank 0 says why — $(grep -m1 "rank 1 (pid $R1 on" "$K.err" | sed 's/^[0-9:. -]*//')"
    else
        echo "not ok mpi -np $NP: no line naming the dead rank in the log:"; cat "$K.err"; status=1
    fi
}

PID=""
trap '[ -z "$PID" ] || kill "$PID" 2>/dev/null || true' EXIT
kill_check 2 # rank 1 is the last rank
kill_check 3 # rank 1 is a middle rank
[ "$status" -eq 0 ] && echo "ok mpi.sh: all passed" || echo "not ok mpi.sh: failures above"
exit "$status"
