#!/usr/bin/env bash
# tokenizer.sh — tokenizer speed, deltallm vs llama.cpp v0.4.0, on the same 1 MiB mixed-language text.
#
#   bench/tokenizer.sh [MODEL.gguf]       (default: tests/data/vocab/ggml-vocab-qwen35.gguf)
#
# Environment: DELTALLM_BIN (default build/deltallm), NLC_DIR (default $HOME/.cache/llref: llref and the
# prebuilt llama.cpp libraries of ../shared/tools/build-llref.sh fetch-prebuilt + prebuilt), REPS
# (default 7).
#
# 1. The corpus (bench/tokenizer_corpus.py, deterministic) is tokenized by `deltallm tokenize` and by
#    `llref --tokenize-file`, special-token parsing on (llref's default): the ids must be identical.
# 2. Tokenizer speed, in-process: `deltallm tokenize --bench` and bench/tokenizer_llama.c (our harness
#    around llama_tokenize, same libraries as llref), best of REPS each, runs interleaved so that a
#    busy machine slows both alike. This is the number to quote.
# 3. End to end, for reference: best wall time of each whole command (vocabulary load + tokenizing +
#    printing the ids).
# Prints a summary and a Markdown table row for bench/RESULTS.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${DELTALLM_BIN:-$ROOT/build/deltallm}"
NLC_DIR="${NLC_DIR:-$HOME/.cache/llref}"
LLREF="$NLC_DIR/llref"
LIBDIR="$NLC_DIR/x/package/bins/linux-x64"
MODEL="${1:-$ROOT/tests/data/vocab/ggml-vocab-qwen35.gguf}"
REPS="${REPS:-7}"
PY="$(command -v python3)"

[ -x "$BIN" ] || { echo "no deltallm binary at $BIN (make first)"; exit 1; }
[ -x "$LLREF" ] || { echo "no llref in $NLC_DIR (../shared/tools/build-llref.sh fetch-prebuilt, then prebuilt)"; exit 1; }

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
"$PY" "$ROOT/bench/tokenizer_corpus.py" > "$TMP/corpus.txt"
cc -O2 -std=c11 -I"$NLC_DIR/llama-src/include" -I"$NLC_DIR/llama-src/ggml/include" "$ROOT/bench/tokenizer_llama.c" \
   -o "$TMP/tokenizer_llama" -L"$LIBDIR" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so \
   -Wl,-rpath,"$LIBDIR"

# 1. same ids
"$BIN" tokenize -m "$MODEL" --special -f "$TMP/corpus.txt" > "$TMP/ours.json"
"$LLREF" -m "$MODEL" --tokenize-file "$TMP/corpus.txt" > "$TMP/ref.json" 2>/dev/null
cmp -s "$TMP/ours.json" "$TMP/ref.json" || { echo "MISMATCH: deltallm and llama.cpp disagree on the ids"; exit 1; }

# 2. in-process, interleaved: best of REPS single runs each
ours_best=999999999; ref_best=999999999
for _ in $(seq "$REPS"); do
    o=$("$BIN" tokenize -m "$MODEL" --special -f "$TMP/corpus.txt" --bench 1 | awk '{print $8}')
    r=$("$TMP/tokenizer_llama" "$MODEL" "$TMP/corpus.txt" 1 | awk '{print $8}')
    ours_best=$(echo "if ($o < $ours_best) $o else $ours_best" | bc -l)
    ref_best=$(echo "if ($r < $ref_best) $r else $ref_best" | bc -l)
done

# 3. end to end: best wall time of the whole command
wall() {
    local best=999999999 t0 t1
    for _ in $(seq "$REPS"); do
        t0=$(date +%s%N); "$@" > /dev/null 2>&1; t1=$(date +%s%N)
        best=$(echo "d = ($t1 - $t0) / 1000000; if (d < $best) d else $best" | bc -l)
    done
    echo "$best"
}
ours_wall=$(wall "$BIN" tokenize -m "$MODEL" --special -f "$TMP/corpus.txt")
ref_wall=$(wall "$LLREF" -m "$MODEL" --tokenize-file "$TMP/corpus.txt")

"$PY" - "$(stat -c %s "$TMP/corpus.txt")" "$ours_best" "$ref_best" "$ours_wall" "$ref_wall" "$TMP/ours.json" <<'EOF'
import json, sys
b = int(sys.argv[1])
ours, ref, ow, rw = map(float, sys.argv[2:6])
n = len(json.load(open(sys.argv[6])))
print(f"corpus: {b} bytes, {n} tokens; ids identical to llama.cpp (llref --tokenize-file)")
print(f"tokenize, in-process (best):  deltallm {ours:8.1f} ms = {n/ours/1e3:6.2f} M tokens/s"
      f"   llama.cpp {ref:8.1f} ms = {n/ref/1e3:6.2f} M tokens/s   ratio {ref/ours:.1f}x")
print(f"whole command, load + tokenize + print (best):  deltallm {ow:.0f} ms   llref {rw:.0f} ms")
print()
print(f"| {b} B | {n} | {n/ours/1e3:.2f} M/s | {n/ref/1e3:.2f} M/s | {ref/ours:.1f}x | {ow:.0f} ms | {rw:.0f} ms |")
EOF
