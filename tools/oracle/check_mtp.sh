#!/usr/bin/env bash
# check_mtp.sh [RECORD_DIR] — llama.cpp v0.4.0's MTP head (llmtp.cpp on the npm prebuilt library, fetched by
# ../shared/tools/build-llref.sh fetch-prebuilt) on the models tests/test_mtp.c compares against: the trained
# default model (its own MTP block) and test models of each arch with an MTP block added by
# `deltallm synth --add-mtp` (deterministic: the test makes the same files). With RECORD_DIR (tests/data/mtp)
# it writes the references there: NAME.tokens.txt, NAME.main.f32, NAME.mtp.f32, NAME.chain.f32, NAME.json. Not part of
# `make test`; docs/SPECULATIVE.md has the numbers.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$HERE/../.."
NLC_DIR="${NLC_DIR:-$HOME/.cache/llref}"
LIB="$NLC_DIR/x/package/bins/linux-x64"
SRC="$NLC_DIR/llama-src"
OUT="${OUT:-$(mktemp -d)}"
REC="${1:-}"
mkdir -p "$OUT"
[ -f "$LIB/libllama.v0.4.0.so" ] || { echo "no prebuilt llama.cpp in $LIB (run ../shared/tools/build-llref.sh fetch-prebuilt)"; exit 1; }
g++ -O2 -std=c++17 -I"$SRC/include" -I"$SRC/ggml/include" -I"$SRC/src" "$HERE/llmtp.cpp" -o "$OUT/llmtp" \
    -L"$LIB" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$LIB"
DL="$ROOT/build/deltallm"
# name, model, tokens file, tokens used
run() {
    local name=$1 model=$2 seq=$3 n=$4
    local toks
    toks=$(tr -s ' \n,' '\n' < "$seq" | grep -v '^$' | head -n "$n" | paste -sd, -)
    "$OUT/llmtp" "$model" "$toks" "$OUT/$name" 3 2 "$LIB"
    echo "$name: $(cat "$OUT/$name.json")"
    if [ -n "$REC" ]; then
        mkdir -p "$REC"
        echo "$toks" > "$REC/$name.tokens.txt"
        cp "$OUT/$name.main.f32" "$OUT/$name.mtp.f32" "$OUT/$name.chain.f32" "$REC/"
        sed "s#\"model\": \"[^\"]*\"#\"model\": \"$name\"#" "$OUT/$name.json" > "$REC/$name.json"
    fi
}
run tinybible "$ROOT/assets/tinybible-f16.gguf" "$ROOT/tests/data/trained/seq.txt" 32
for m in m1-qwen3next-legacy-f32 m4-qwen35moe-q8_0 m7-qwen35-wide-q8_0 m8-qwen3next-wide-mixed; do
    "$DL" synth --add-mtp "$ROOT/tests/data/models/$m.gguf" --seed 1 "$OUT/$m-mtp.gguf"
    run "$m" "$OUT/$m-mtp.gguf" "$ROOT/tests/data/seqs/$m/len65.txt" 24
done
