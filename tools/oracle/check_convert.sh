#!/usr/bin/env bash
# check_convert.sh MODEL.gguf TYPE [--no-mtp] — deltallm convert against llama.cpp v0.4.0's own
# convert_hf_to_gguf.py (tools/oracle/llconvert.py) on the same Hugging Face checkpoint, exported from MODEL by
# tools/train/gguf_to_hf.py; the two GGUF files must be byte-identical. Needs python3-torch and the llama.cpp
# source that ../shared/tools/build-llref.sh fetch-prebuilt unpacks. Not part of `make test`.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$HERE/../.."
OUT="${OUT:-$(mktemp -d)}"
mkdir -p "$OUT"
MODEL="$1" TYPE="$2"; shift 2
NAME=$(basename "$MODEL" .gguf)
HF="$OUT/$(echo "$NAME" | tr -cd 'a-z0-9')"   # one lower-case word: both converters name it the same way
/usr/bin/python3 "$ROOT/tools/train/gguf_to_hf.py" "$MODEL" "$HF" >/dev/null
/usr/bin/python3 "$HERE/llconvert.py" "$HF" "$OUT/ll.gguf" --outtype "$TYPE" "$@" >"$OUT/llconvert.log" 2>&1 ||
    { tail -5 "$OUT/llconvert.log"; exit 1; }
"$ROOT/build/deltallm" convert "$HF" -o "$OUT/dl.gguf" --type "$TYPE" "$@" 2>/dev/null
if cmp -s "$OUT/ll.gguf" "$OUT/dl.gguf"; then
    echo "$NAME ($TYPE): identical files ($(stat -c %s "$OUT/dl.gguf") bytes)"
else
    echo "$NAME ($TYPE): files differ"; /usr/bin/python3 "$HERE/tensor_diff.py" "$OUT/ll.gguf" "$OUT/dl.gguf"; exit 1
fi
