#!/usr/bin/env bash
# vision.sh — the vision encoder's CPU speed, deltallm against llama.cpp v0.4.0's mtmd, same projector, same
# pixels, same thread count, alternating in one run (the machine is shared: compare the ratios).
#
#   bench/vision.sh [--preset qwen3.5-small] [--sizes 448,1024] [--threads 1,2] [--reps 2] [--cold] [--out F]
#
# Each engine: one untimed encode, then the best of --reps timed ones; --cold: a single first encode each
# (what a one-shot `run --image` pays: the weights' pages touched for the first time included), to save time.
#
# Needs: build/deltallm and build/vision_bench (make all bench), llama.cpp's mtmd and our harness
# ($MTMD_REF, default ~/.cache/mtmd/mtmd_ref: tools/build-mtmd.sh), /usr/bin/python3 with numpy, and
# ../shared/tools/mkmodel.py (a small text model of the projector's width, loaded vocab-only: mtmd wants one).
# Files are kept in $WORK (default ~/.cache/dl-vision-bench). Images: W×W raw RGB (smooth colour fields and
# noise), sizes already on the 32-pixel grid so neither engine resizes; the projector's random F16 weights.
# Prints a table; writes one JSON object per measurement (list) to --out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PRESET=qwen3.5-small SIZES=448,1024 THREADS=1,2 REPS=2 COLD=0 OUT="$ROOT/bench/vision.json"
while [ $# -gt 0 ]; do
    case "$1" in
    --preset) PRESET="$2"; shift 2 ;;
    --sizes) SIZES="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --cold) COLD=1; shift ;;
    --out) OUT="$2"; shift 2 ;;
    *) sed -n '2,16p' "$0"; exit 2 ;;
    esac
done
WORK="${WORK:-$HOME/.cache/dl-vision-bench}"
MTMD_REF="${MTMD_REF:-$HOME/.cache/mtmd/mtmd_ref}"
MKMODEL="${MKMODEL:-$ROOT/../shared/tools/mkmodel.py}"
PY=/usr/bin/python3
[ -x "$MTMD_REF" ] || { echo "vision.sh: no $MTMD_REF (tools/build-mtmd.sh)"; exit 1; }
[ -x "$ROOT/build/vision_bench" ] || { echo "vision.sh: no build/vision_bench (make bench)"; exit 1; }
mkdir -p "$WORK"
MP="$WORK/mmproj-$PRESET.gguf"
[ -f "$MP" ] || "$ROOT/build/deltallm" synth --mmproj "$PRESET" "$MP"
PD=$("$ROOT/build/deltallm" inspect "$MP" 2>/dev/null | sed -n 's/.*projection_dim.*= *\([0-9][0-9]*\).*/\1/p' | head -1)
case "$PRESET" in qwen3.5-small) PD=${PD:-1024} ;; qwen3.5) PD=${PD:-2048} ;; esac
TM="$WORK/text-$PD.gguf"
[ -f "$TM" ] || $PY "$MKMODEL" --arch qwen35 --n-embd "$PD" --n-layer 2 --full-attn-interval 2 --n-head 4 --n-head-kv 2 \
    --head-dim 64 --n-ff 256 --small-vocab 1000 --types f32 --out "$TM" >/dev/null
RES="$WORK/results.jsonl"
: > "$RES"
for S in ${SIZES//,/ }; do
    IMG="$WORK/img-$S.rgb"
    [ -f "$IMG" ] || $PY - "$S" "$IMG" <<'EOF'
import sys, numpy as np
s = int(sys.argv[1]); y, x = np.mgrid[0:s, 0:s].astype(np.float64)
rng = np.random.default_rng(s)
img = np.stack([128 + 90 * np.sin(x / 37.0 + c) * np.cos(y / 23.0 - c) for c in range(3)], -1) + rng.normal(0, 12, (s, s, 3))
np.clip(img, 0, 255).astype(np.uint8).tofile(sys.argv[2])
EOF
    for T in ${THREADS//,/ }; do
        echo "== ${S}x${S}, $T thread(s)" >&2
        # --cold: one first encode each (mtmd's first encode; vision_bench without its warm-up)
        MB=$REPS; WU=""; [ "$COLD" = 1 ] && MB=0 && WU="--no-warmup --reps 1"
        "$MTMD_REF" -m "$TM" --vocab-only --mmproj "$MP" --image "$IMG" --rgb "${S}x${S}" -t "$T" --bench "$MB" \
            --json "$WORK/mtmd.json" >&2
        $PY -c "import json,sys; j=json.load(open('$WORK/mtmd.json')); k='first_encode_ms' if $MB == 0 else 'bench_min_ms'; print(json.dumps({'engine':'llama.cpp-mtmd','size':'${S}x${S}','tokens':j['n_img_tokens'],'threads':$T,'min_ms':j[k],'mean_ms':j[k] if $MB == 0 else j['bench_mean_ms'],'reps':$REPS}))" >> "$RES"
        "$ROOT/build/vision_bench" --mmproj "$MP" --rgb "$IMG" --size "${S}x${S}" --threads "$T" --reps "$REPS" $WU --profile | tee -a "$RES" >&2
    done
done
$PY - "$RES" "$OUT" "$PRESET" "$COLD" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump({"preset": sys.argv[3], "cold": sys.argv[4] == "1", "results": rows}, open(sys.argv[2], "w"), indent=1)
print("| image | tokens | threads | llama.cpp mtmd (ms) | deltallm (ms) | deltallm / llama.cpp speed |")
print("|---|---|---|---|---|---|")
for r in rows:
    if r["engine"] != "deltallm": continue
    m = [q for q in rows if q["engine"] != "deltallm" and q["size"] == r["size"] and q["threads"] == r["threads"]][0]
    print("| %s | %d | %d | %.0f | %.0f | %.2f× |" % (r["size"], r["tokens"], r["threads"], m["min_ms"], r["min_ms"], m["min_ms"] / r["min_ms"]))
EOF
