/* synth.h — synthetic models: real shapes, tensor names, metadata keys and vocabulary, random weights,
 * written with deltallm's own GGUF writer. They make the engine runnable (and benchmarkable) without
 * downloading a model; the text they produce is meaningless.
 *
 * Initialisation follows shared/tools/mkmodel.py's recipe (matrices N(0, 1/fan_in), norms 1 ± 0.1,
 * ssm_a = −A with A log-uniform in [0.05, 4], dt bias N(−0.5, 0.5), conv taps N(0, 0.5)), but the values
 * are deltallm's own (another generator): the files are not byte-identical to mkmodel's. */
#ifndef DL_MODEL_SYNTH_H
#define DL_MODEL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef struct SynthSpec {
    const char *arch; /* qwen3next, qwen35, qwen35moe */
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_rot;
    int n_ff, n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_conv;
    int full_attn_interval;
    float rope_base, rms_eps;
    int rope_sections[4];
    int ctx;
    bool tied;
    int n_vocab;       /* rows of token_embd; the vocabulary is padded with [PADi] tokens up to it */
    uint32_t wtype;    /* type of the 2-D matrices (FormatId); vectors and routers stay F32 */
    uint64_t seed;
    const char *name;
} SynthSpec;

/* Fills spec with a named preset ("qwen3.5-0.8b", "qwen3.5-9b", "qwen3.5-35b-a3b", "qwen3-next-80b-a3b");
 * -1 for an unknown name (err lists the names). */
int synth_preset(SynthSpec *spec, const char *name, Err *err);
/* Writes the model to path, taking the tokenizer (tokenizer.* metadata) from vocab_gguf. */
int synth_write(const SynthSpec *spec, const char *vocab_gguf, const char *path, Err *err);

/* Copies the model at src to dst with one MTP block added (block_count + 1, nextn_predict_layers 1): an
 * attention block with the model's FFN (dense or MoE) and blk.N.nextn.{eh_proj, enorm, hnorm, shared_head_norm},
 * random values in the weight type of the model's attention matrices; the head and embedding stay shared.
 * Makes real-shape (and test-sized) models with an MTP block for every arch. */
int synth_add_mtp(const char *src, const char *dst, uint64_t seed, Err *err);

#endif
