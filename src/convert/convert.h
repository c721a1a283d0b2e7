/* convert.h — `deltallm convert`: a Hugging Face checkpoint directory of Qwen3.5 (dense), Qwen3.5/3.6-MoE or
 * Qwen3-Next → one GGUF file, with the tensor names, layouts, transforms and metadata that llama.cpp
 * v0.4.0's convert_hf_to_gguf.py writes (conversion/qwen.py, base.py; SPEC.md §1.3):
 *   - every *norm.weight but linear_attn.norm gets +1, A_log becomes ssm_a = −exp(A_log), conv1d is
 *     squeezed to {K, C}, dt_bias becomes ssm_dt.bias;
 *   - qwen35 / qwen35moe: V heads reordered from grouped to tiled (in_proj_qkv V rows, z, b, a, A_log,
 *     dt_bias, conv1d V channels, out_proj columns); qwen3next: in_proj_qkvz regrouped into attn_qkv +
 *     attn_gate;
 *   - experts stacked into 3-D tensors (or a fused gate_up_proj split), routers and conv kept F32;
 *   - mtp.* renamed to the block after the trunk (blk.L.nextn.*), counted in block_count, with
 *     nextn_predict_layers;
 *   - the tokenizer (tokenizer.json + tokenizer_config.json) as llama.cpp's gpt2 vocabulary metadata.
 * Tensors stream from the mapped safetensors to the output one at a time (memory: the largest tensor).
 * Decisions where llama.cpp's converter cannot be followed exactly are in docs/CONVERT.md. */
#ifndef DL_CONVERT_CONVERT_H
#define DL_CONVERT_CONVERT_H

#include <stdbool.h>

#include "base/err.h"

typedef enum HfOutType { HF_OUT_AUTO, HF_OUT_F32, HF_OUT_F16, HF_OUT_BF16, HF_OUT_Q8_0 } HfOutType;

typedef struct HfConvertOpts {
    const char *dir;      /* the checkpoint directory */
    const char *out;      /* the GGUF to write */
    HfOutType type;       /* AUTO: BF16 if the first matrix is BF16, else F16 (the converter's "auto") */
    const char *name;     /* general.name; NULL: the directory's name */
    bool no_mtp;          /* drop the MTP block (llama.cpp's --no-mtp) */
    void (*progress)(void *ctx, int done, int total, const char *tensor); /* NULL: quiet */
    void *progress_ctx;
} HfConvertOpts;

int hf_convert(const HfConvertOpts *o, Err *err);

/* The pieces, for tests: maps one (already prefix-stripped) HF tensor name to its GGUF name; returns 0,
 * or -1 for a name the archs do not have. L = trunk layers. */
int hf_gguf_name(const char *hf, int L, char *out, int cap);

#endif
