#!/usr/bin/env bash
# train_chat.sh [WORK_DIR] — the embedded chat model (assets/tinychat-f16.gguf), from Debian packages to the
# GGUF that make run / chat / serve use by default (docs/TRAINING.md, "The chat model").
#   1. apt-get install the corpus packages and python3-torch (once; needs root)
#   2. chat_corpus.py → WORK/data/{train,heldout}.txt, heldout_questions.json: rendered Qwen3.5 conversations
#   3. vocab.py --think --chat-template tinychat.jinja → WORK/data/hf: 6144 Qwen tokens + the Qwen3.5 template
#      with thinking off unless asked (enable_thinking=true)
#   4. deltallm tokenize --special → WORK/data/{train,heldout}.ids.json
#   5. train.py (MINUTES=60 by default; one torch thread) → WORK/train
#   6. release.py + deltallm convert → WORK/tinychat-f16.gguf
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$HERE/../.."
WORK="${1:-$ROOT/build/chat}"
PY=/usr/bin/python3
DL="$ROOT/build/deltallm"
if [ "${SKIP_APT:-0}" != 1 ]; then
    pkgs="bible-kjv bible-kjv-text fortunes fortunes-min wordnet-base dict-gcide python3-torch python3-numpy python3-regex"
    missing=""; for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
    [ -z "$missing" ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing; }
fi
[ -x "$DL" ] || make -C "$ROOT" -j2 build/deltallm
mkdir -p "$WORK/data"
$PY "$HERE/chat_corpus.py" "$WORK/data"
$PY "$HERE/vocab.py" "$ROOT/tests/data/vocab/ggml-vocab-qwen35.gguf" "$WORK/data/train.txt" "$WORK/data/hf" --size 6144 \
    --think --chat-template "$HERE/tinychat.jinja"
for part in train heldout; do
    "$DL" tokenize --special -m "$WORK/data/hf/vocab.gguf" -f "$WORK/data/$part.txt" > "$WORK/data/$part.ids.json"
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
(cd "$HERE" && $PY train.py "$WORK/data" "$WORK/data/hf" "$WORK/train" --minutes "${MINUTES:-60}" --steps "${STEPS:-1400}" \
     --threads 1 --batch 4 --seq 512 --eval-tokens 8192 \
     --config '{"intermediate_size": 512, "vocab_size": 6144, "eos_token_id": 6139, "pad_token_id": 6139}')
(cd "$HERE" && $PY release.py "$WORK/train" "$WORK/tinychat")
"$DL" convert "$WORK/tinychat" -o "$WORK/tinychat-f16.gguf"
echo "train_chat.sh: $WORK/tinychat-f16.gguf"
