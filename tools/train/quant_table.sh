#!/usr/bin/env bash
# quant_table.sh MODEL-F16.gguf HELDOUT.txt [TYPES...] — perplexity and KL divergence against the F16 model for
# each quantization type on the held-out text (deltallm quantize + deltallm perplexity --kl-base), as a
# markdown table. CTX (default 512) and CHUNKS (default: all windows) pass through to perplexity.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DL="$ROOT/build/deltallm"
F16="$1" TEXT="$2"; shift 2
TYPES="${*:-Q8_0 Q6_K Q5_K_M Q4_K_M IQ4_XS Q4_0 Q3_K_M Q2_K}"
TMP="$(mktemp -d)"
CH=${CHUNKS:+--chunks $CHUNKS}
base=$("$DL" perplexity -m "$F16" -f "$TEXT" -c "${CTX:-512}" $CH -t "${THREADS:-2}" 2>/dev/null | grep "Final estimate")
echo "| type | file size | PPL | Δ vs F16 | mean KL vs F16 | 99% KL | same top token |"
echo "|---|---|---|---|---|---|---|"
echo "| F16 | $(du -k "$F16" | cut -f1) KiB | ${base#*PPL = } | — | — | — | — |"
for t in $TYPES; do
    "$DL" quantize "$F16" "$TMP/$t.gguf" "$t" 2>/dev/null
    out=$("$DL" perplexity -m "$TMP/$t.gguf" -f "$TEXT" -c "${CTX:-512}" $CH -t "${THREADS:-2}" --kl-base "$F16" 2>/dev/null)
    ppl=$(echo "$out" | sed -n 's/^Final estimate: PPL = //p')
    ratio=$(echo "$out" | sed -n 's/^Mean PPL(Q)\/PPL(base) *: *//p')
    kl=$(echo "$out" | sed -n 's/^Mean    KLD: *//p')
    kl99=$(echo "$out" | sed -n 's/^99.0%   KLD: *//p')
    same=$(echo "$out" | sed -n 's/^Same top p : *//p')
    echo "| $t | $(du -k "$TMP/$t.gguf" | cut -f1) KiB | $ppl | ×$ratio | $kl | $kl99 | $same |"
done
rm -rf "$TMP"
