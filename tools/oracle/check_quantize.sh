#!/usr/bin/env bash
# check_quantize.sh MODEL.gguf [TYPE ...] — deltallm quantize against llama.cpp v0.4.0's llama_model_quantize()
# (the npm prebuilt library, fetched by ../shared/tools/build-llref.sh fetch-prebuilt) on the same input:
# the output files must be byte-identical; when they are not, tensor_diff.py says which tensors differ.
# Not part of `make test` (it needs the prebuilt library); results are recorded in docs/CONVERT.md.
# RECORD=FILE.json appends llama.cpp's output size and FNV-1a-64 per type to FILE.json: the goldens
# tests/test_quantize.c checks `deltallm quantize` against on a clean clone.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$HERE/../.."
NLC_DIR="${NLC_DIR:-$HOME/.cache/llref}"
LIB="$NLC_DIR/x/package/bins/linux-x64"
SRC="$NLC_DIR/llama-src"
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
[ -f "$LIB/libllama.v0.4.0.so" ] || { echo "no prebuilt llama.cpp in $LIB (run ../shared/tools/build-llref.sh fetch-prebuilt)"; exit 1; }
cc -O2 -std=c11 -I"$SRC/include" -I"$SRC/ggml/include" "$HERE/llquant.c" -o "$OUT/llquant" \
   -L"$LIB" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$LIB"
MODEL="$1"; shift
TYPES="${*:-Q8_0 Q6_K Q5_K_M Q5_K_S Q4_K_M Q4_K_S Q3_K_M Q3_K_L Q2_K IQ4_XS IQ4_NL Q4_0 Q4_1 Q5_0 Q5_1 F16 BF16}"
declare -A ID=([F32]=0 [F16]=1 [Q4_0]=2 [Q4_1]=3 [Q8_0]=7 [Q5_0]=8 [Q5_1]=9 [Q2_K]=10 [Q3_K_S]=11 [Q3_K_M]=12
               [Q3_K_L]=13 [Q4_K_S]=14 [Q4_K_M]=15 [Q5_K_S]=16 [Q5_K_M]=17 [Q6_K]=18 [IQ4_NL]=25 [IQ4_XS]=30 [BF16]=32)
fail=0
for t in $TYPES; do
    "$OUT/llquant" "$MODEL" "$OUT/ll-$t.gguf" "${ID[$t]}" 2 2>"$OUT/ll-$t.log" || { echo "$t: llama.cpp failed"; cat "$OUT/ll-$t.log"; fail=1; continue; }
    "$ROOT/build/deltallm" quantize "$MODEL" "$OUT/dl-$t.gguf" "$t" -t 2 2>/dev/null
    if cmp -s "$OUT/ll-$t.gguf" "$OUT/dl-$t.gguf"; then
        echo "$t: identical files ($(stat -c %s "$OUT/dl-$t.gguf") bytes)"
    else
        echo "$t: files differ"; /usr/bin/python3 "$HERE/tensor_diff.py" "$OUT/ll-$t.gguf" "$OUT/dl-$t.gguf"; fail=1
    fi
done
if [ -n "${RECORD:-}" ]; then
    /usr/bin/python3 - "$RECORD" "$(basename "$MODEL")" "$OUT" $TYPES <<'PY'
import json, os, sys
rec, model, out, types = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def fnv(path):
    h = 0xcbf29ce484222325
    for b in open(path, "rb").read():
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return f"{h:016x}"
d = json.load(open(rec)) if os.path.exists(rec) else {}
d[model] = {t: {"bytes": os.path.getsize(f"{out}/ll-{t}.gguf"), "fnv1a64": fnv(f"{out}/ll-{t}.gguf")} for t in types}
json.dump(d, open(rec, "w"), indent=1, sort_keys=True)
PY
fi
exit $fail
