#!/usr/bin/env bash
# train.sh [WORK_DIR] — the whole recipe, from Debian packages to the GGUF `make run` uses (docs/TRAINING.md).
#   1. apt-get install the corpus packages, python3-torch, libopenblas0-pthread (once; needs root)
#   2. corpus.py      → WORK/data/{train,heldout}.txt
#   3. vocab.py       → WORK/data/hf/{tokenizer.json,tokenizer_config.json,vocab.gguf}: 4096 Qwen tokens
#   4. deltallm tokenize with vocab.gguf → WORK/data/{train,heldout}.ids.json
#   5. train.py       → WORK/train/ (F32 checkpoint, training_log.json); MINUTES=55 STEPS=1600 by default
#   6. release.py     → WORK/tinybible/ (F16 matrices, F32 vectors: the Hugging Face layout)
#   7. deltallm convert → WORK/tinybible-f16.gguf (and export_logits.py for the checks)
# Single-threaded torch (OMP_NUM_THREADS=1): on 2 shared cores two threads were not faster and stalled badly
# when other jobs ran (docs/TRAINING.md). Run it niced: nice -n 10 tools/train/train.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$HERE/../.."
WORK="${1:-$ROOT/build/train}"
PY=/usr/bin/python3
DL="$ROOT/build/deltallm"
if [ "${SKIP_APT:-0}" != 1 ]; then
    pkgs="bible-kjv bible-kjv-text fortunes fortunes-min python3-torch python3-numpy python3-regex libopenblas0-pthread"
    missing=""; for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
    [ -z "$missing" ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; }
fi
[ -x "$DL" ] || make -C "$ROOT" -j2 build/deltallm
mkdir -p "$WORK/data"
$PY "$HERE/corpus.py" "$WORK/data"
$PY "$HERE/vocab.py" "$ROOT/tests/data/vocab/ggml-vocab-qwen35.gguf" "$WORK/data/train.txt" "$WORK/data/hf" --size 4096
for part in train heldout; do "$DL" tokenize -m "$WORK/data/hf/vocab.gguf" -f "$WORK/data/$part.txt" > "$WORK/data/$part.ids.json"; done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
(cd "$HERE" && $PY train.py "$WORK/data" "$WORK/data/hf" "$WORK/train" --minutes "${MINUTES:-55}" --steps "${STEPS:-1600}" \
     --threads 1 --config '{"intermediate_size": 512}')
(cd "$HERE" && $PY release.py "$WORK/train" "$WORK/tinybible")
"$DL" convert "$WORK/tinybible" -o "$WORK/tinybible-f16.gguf"
echo "train.sh: $WORK/tinybible-f16.gguf"
