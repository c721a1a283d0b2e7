/* quantize.h — `deltallm quantize`: rewrites a GGUF with llama-quantize's type mixes (llama.cpp v0.4.0
 * llama_model_quantize(), no importance matrix), so that for the same input and file type every tensor's
 * type and bytes equal llama.cpp's output, and so does the file: tensors in the loader's order (by layer,
 * then name), metadata copied with general.quantization_version and general.file_type moved to the end.
 *
 * The mix (llama-quant.cpp llama_tensor_get_type_impl, SPEC.md §7.3): only ≥ 2-D tensors whose name ends
 * in "weight" are quantized, never norms, routers (ffn_gate_inp) or ssm_conv1d; the tied embedding (or
 * output.weight) gets Q6_K; attn_v and the delta-net attn_qkv share one counter for use_more_bits;
 * ffn_down counts by layer (block_count, MTP blocks included); rows that are not whole blocks fall back. */
#ifndef DL_QUANTIZE_QUANTIZE_H
#define DL_QUANTIZE_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

typedef struct QuantFtype {
    const char *name; /* "Q4_K_M" */
    int id;           /* llama_ftype */
    uint32_t base;    /* default tensor type */
} QuantFtype;

/* The file type by name (case-insensitive), NULL if unknown or not writable here. */
const QuantFtype *quant_ftype_find(const char *name);
/* The names deltallm can write, space-separated. */
const char *quant_ftype_names(void);

typedef struct QuantizeOpts {
    const char *in, *out;
    const QuantFtype *ftype;
    bool leave_output; /* --leave-output-tensor */
    int n_threads;     /* 0: all CPUs */
    void (*progress)(void *ctx, int done, int total, const char *tensor, uint32_t type);
    void *progress_ctx;
} QuantizeOpts;

int gguf_quantize(const QuantizeOpts *o, Err *err);

/* The per-tensor decision, exposed for tests: fills types[i] for tensor i (in the loader's order given by
 * order[]) of g. */
int quant_plan(const Gguf *g, const QuantizeOpts *o, int64_t *order, uint32_t *types, Err *err);

#endif
