/* config.h — the hyperparameters of a qwen3next / qwen35 / qwen35moe model, read from the canonical GGUF
 * keys (docs/GGUF.md) and checked for consistency. Nothing here touches tensors except to read the
 * vocabulary size from token_embd's shape. */
#ifndef DL_MODEL_CONFIG_H
#define DL_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

#define MODEL_MAX_LAYERS 512

typedef enum Arch { ARCH_QWEN3NEXT, ARCH_QWEN35, ARCH_QWEN35MOE } Arch;

typedef struct ModelConfig {
    Arch arch;
    char arch_name[16];
    char name[128];   /* general.name, may be empty */
    int n_vocab;      /* rows of token_embd.weight (0 when the file has no tensors) */
    int n_ctx_train;
    int n_embd;       /* E */
    int n_layer_all;  /* block_count, MTP blocks included */
    int n_nextn;      /* nextn_predict_layers (MTP blocks at the end, skipped) */
    int n_layer;      /* trunk layers executed: n_layer_all - n_nextn */
    float rms_eps;

    /* full attention */
    int n_head, n_head_kv; /* H, Hkv */
    int head_dim;          /* D = attention.key_length (= value_length) */
    int n_rot;             /* R = rope.dimension_count */
    float rope_base;
    float rope_freq_scale; /* 1/rope.scaling.factor, 1 when absent */
    int rope_sections[4];  /* qwen35*: rope.dimension_sections */
    bool rope_imrope;      /* qwen35*: IMROPE; qwen3next: NEOX */

    /* gated delta net */
    int ssm_d_conv;   /* Kc */
    int ssm_d_inner;  /* val_dim = Hv * Dv */
    int ssm_d_state;  /* Dk */
    int ssm_n_v_head; /* Hv = ssm.time_step_rank */
    int ssm_n_k_head; /* Hk = ssm.group_count */
    int ssm_head_v_dim; /* Dv = d_inner / Hv, must equal Dk */
    int ssm_key_dim;  /* Hk * Dk */
    int ssm_conv_dim; /* 2 key_dim + val_dim */
    int full_attention_interval; /* 0 when recurrent_layers is given explicitly */
    bool recurrent[MODEL_MAX_LAYERS];
    int n_recurrent, n_attention;

    /* feed-forward */
    bool moe;
    int n_ff;       /* dense FFN width (qwen35) */
    int n_expert, n_expert_used;
    int n_ff_exp;   /* Fe */
    int n_ff_shexp; /* Fs */
} ModelConfig;

/* Reads and checks the config. Fails with one line for an unknown arch, a missing required key, a key
 * of the wrong type, or sizes that do not fit together. */
int model_config_read(ModelConfig *c, const Gguf *g, Err *err);
/* "qwen3next" etc.; returns -1 for an arch deltallm does not run. */
int arch_from_name(const char *name);

#endif
