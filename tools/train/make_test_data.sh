#!/usr/bin/env bash
# make_test_data.sh HF_DIR MODEL.gguf HELDOUT_IDS.json [OUT_DIR] — the fixtures tests/test_trained.c checks the
# converted model against (default OUT_DIR tests/data/trained):
#   seq.txt            96 held-out token ids
#   torch.main.f32     the PyTorch model's logits for them, torch.mtp.f32 its MTP head's, torch.json (argmaxes)
#   greedy.txt         a prompt's ids and PyTorch's 24 greedy tokens after it
#   llama.f32          llama.cpp v0.4.0's logits on MODEL.gguf (llref, ../shared/tools/build-llref.sh), if built
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$HERE/../.."
HF="$1" MODEL="$2" IDS="$3" OUT="${4:-$ROOT/tests/data/trained}"
mkdir -p "$OUT"
/usr/bin/python3 -c "import json,sys; ids=json.load(open('$IDS')); print(','.join(map(str, ids[2000:2096])))" > "$OUT/seq.txt"
"$ROOT/build/deltallm" tokenize -m "$MODEL" "In the beginning God created" > "$OUT/prompt.json"
(cd "$HERE" && OMP_NUM_THREADS=1 /usr/bin/python3 export_logits.py "$HF" "$OUT/seq.txt" "$OUT/torch")
(cd "$HERE" && OMP_NUM_THREADS=1 /usr/bin/python3 export_logits.py "$HF" "$OUT/prompt.json" "$OUT/prompt" --greedy 24)
mv "$OUT/prompt.greedy.txt" "$OUT/greedy.txt"
rm -f "$OUT"/prompt.*
LLREF="${LLREF:-$HOME/.cache/llref/llref}"
if [ -x "$LLREF" ]; then
    "$LLREF" -m "$MODEL" --tokens-file "$OUT/seq.txt" --mode prefill --logits-out "$OUT/llama.f32" 2>/dev/null
    rm -f "$OUT/llama.f32.json"
fi
ls -la "$OUT"
