/* model.h — the data contract of a loaded model: config, bound weights, per-sequence state, and the
 * forward pass over a batch of tokens.
 *
 * Weights point into the GGUF mapping (matrices keep their file format); small vectors (norms, conv taps,
 * dt bias, ssm_a) are F32 — copied and converted at load if a file stores them otherwise. Shapes are
 * given C-style, outermost first: [out][in] for a matrix is ggml's {in, out}. */
#ifndef DL_MODEL_MODEL_H
#define DL_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "model/config.h"

/* A stack of n expert matrices inside one 3-D tensor; expert e's matrix starts at
 * data + e * expert_bytes + offset (offset selects gate or up in a fused gate_up tensor). */
typedef struct ExpertW {
    const uint8_t *data;
    uint32_t type;
    int64_t cols, rows;
    size_t row_bytes, expert_bytes, offset;
    int n;
} ExpertW;

static inline MatW expert_mat(const ExpertW *x, int e) {
    MatW m = {x->data + (size_t)e * x->expert_bytes + x->offset, x->type, x->cols, x->rows, x->row_bytes, true, NULL};
    return m;
}

typedef struct PackedRange {
    const void *src;
    size_t bytes;
} PackedRange;

typedef struct LayerW {
    bool recurrent;
    const float *attn_norm; /* [E] */
    const float *post_norm; /* [E] post_attention_norm */

    /* full attention (recurrent == false) */
    MatW wq;                 /* [2·H·D][E]: per head [q (D) | gate (D)] */
    MatW wk, wv;             /* [Hkv·D][E] */
    MatW wo;                 /* [E][H·D] */
    const float *q_norm, *k_norm; /* [D] */

    /* gated delta net (recurrent == true) */
    bool legacy;             /* qwen3next fused ssm_in instead of attn_qkv + attn_gate */
    MatW qkv;                /* [conv_dim][E]: [Q all k-heads | K all k-heads | V all v-heads] */
    MatW z;                  /* [val_dim][E] attn_gate */
    MatW ssm_in;             /* legacy: [2·key_dim + 2·val_dim][E], per key group [q | k | v (r·Dv) | z (r·Dv)] */
    MatW ba;                 /* qwen3next: [2·Hv][E], per key group [b (r) | a (r)] */
    MatW beta, alpha;        /* qwen35*: [Hv][E] each */
    const float *conv1d;     /* [conv_dim][Kc] */
    const float *dt_bias;    /* [Hv] */
    const float *ssm_a;      /* [Hv] = −exp(A_log) */
    const float *ssm_norm;   /* [Dv] (no +1) */
    MatW ssm_out;            /* [E][val_dim] */

    /* feed-forward: dense (qwen35) */
    MatW ffn_gate, ffn_up;   /* [F][E] */
    MatW ffn_down;           /* [E][F] */
    /* feed-forward: MoE (qwen3next, qwen35moe) */
    MatW router;             /* [nE][E] ffn_gate_inp */
    ExpertW gate_exps, up_exps; /* n × [Fe][E] */
    ExpertW down_exps;       /* n × [E][Fe] */
    MatW shexp_gate;         /* [1][E] ffn_gate_inp_shexp */
    MatW gate_shexp, up_shexp; /* [Fs][E] */
    MatW down_shexp;         /* [E][Fs] */
} LayerW;

typedef struct Model {
    ModelConfig cfg;
    Gguf *gguf;              /* owned */
    MatW tok_embd;           /* [n_vocab][E] */
    const float *output_norm; /* [E] */
    MatW output;             /* [n_vocab][E]; token_embd when tied */
    bool tied;
    LayerW *layers;          /* [n_layer] (MTP blocks not bound) */
    int n_tensors_bound;
    void **owned;            /* F32 copies made at load */
    int n_owned;
    void *pack_arena;        /* the packed copies (MatW.pack points into it) */
    size_t pack_bytes;
    PackedRange *packed;     /* the file ranges of the packed matrices, by address */
    int n_packed;
} Model;

/* Opens the file, reads the config and binds every tensor, checking type and shape (the error names the
 * tensor with expected and found shapes). */
Model *model_load(const char *path, Err *err);
/* Binds an already-open file (takes ownership of g on success and on failure). */
Model *model_from_gguf(Gguf *g, Err *err);
void model_free(Model *m);
/* Gives the matrices the fast kernels read faster in another layout a packed copy (MatW.pack; today:
 * Q8_0 with rows a multiple of 8) and drops the file's pages of those matrices from memory (pack.c).
 * For the default mode with the fast kernels; results are bit-identical with or without. */
int model_pack(Model *m, Err *err);
void model_pack_free(Model *m); /* model_free's part */
/* The R8 layout (MatW.pack): rows (a multiple of 8) of row_bytes, blocks of block_bytes, interleaved by 8
 * per block: block i of row 8g+r goes to dst + g·8·row_bytes + (8i + r)·block_bytes. */
void pack_rows8(void *dst, const void *src, int64_t rows, size_t row_bytes, size_t block_bytes);


/* ---- per-sequence state -------------------------------------------------------------------------------- */

typedef struct SeqState {
    int n_ctx;   /* KV capacity in tokens */
    int n_past;  /* tokens consumed so far */
    float **conv; /* per layer: [conv_dim][Kc-1] (NULL on attention layers) */
    float **ssm;  /* per layer: [Hv][Dv][Dk], transposed (NULL on attention layers) */
    float **k, **v; /* per layer: [n_ctx][Hkv·D] (NULL on recurrent layers) */
    void *mem;
    size_t bytes;
} SeqState;

SeqState *seqstate_new(const Model *m, int n_ctx, Err *err);
void seqstate_free(SeqState *s);
void seqstate_reset(SeqState *s, const Model *m); /* back to an empty sequence */
/* Copies everything (n_ctx must match). */
void seqstate_copy(SeqState *dst, const SeqState *src, const Model *m);
/* Bytes of recurrent state (conv + ssm) and of KV per token, for sizing. */
size_t seqstate_recurrent_bytes(const Model *m);

/* ---- the forward pass ------------------------------------------------------------------------------------ */

typedef enum DeltaNetAlgo { DELTANET_AUTO = 0, DELTANET_RECURRENT, DELTANET_CHUNKED } DeltaNetAlgo;

typedef struct Dump Dump; /* model/dump.h */

/* Everything a forward pass needs besides the model and the state: the ops, the mode, threads, and
 * activation buffers for up to max_batch tokens (allocated once: no allocation per token). */
typedef struct Forward Forward;

typedef struct ForwardOptions {
    int max_batch;       /* largest number of tokens per forward call, all sequences together (the ubatch) */
    int max_seqs;        /* most sequences in one call (0 = 1) */
    int max_ctx;         /* largest context (SeqState n_ctx) used with this Forward */
    MatMode mode;        /* MATMUL_GGML (default) or MATMUL_EXACT */
    DeltaNetAlgo algo;   /* AUTO picks by T */
    int n_threads;       /* 0 = all CPUs */
    const Ops *ops;      /* NULL = the best for this CPU (or DELTALLM_ISA's choice) */
} ForwardOptions;

Forward *forward_new(const Model *m, const ForwardOptions *o, Err *err);
void forward_free(Forward *f);
void forward_set_dump(Forward *f, Dump *d); /* NULL disables */
const char *forward_ops_name(const Forward *f); /* the op table in use: "ref", "avx2", "avx512" */
int forward_n_threads(const Forward *f);

/* One sequence's part of a batch: n_tokens tokens continuing from state->n_past; logits (NULL, or
 * [n_out][n_vocab]) receives the rows of its last n_out tokens (1 for generation, n_tokens for evaluation). */
typedef struct BatchSeq {
    SeqState *state;
    const int32_t *tokens;
    int n_tokens;
    int n_out;
    float *logits;
} BatchSeq;

/* Runs the tokens of n_seqs sequences (Σ n_tokens ≤ max_batch, n_seqs ≤ max_seqs) through the model in one
 * pass: the matrix products see all rows at once, the recurrences and attention run per sequence. Each
 * state advances by its n_tokens. Fails with every state untouched if a context would overflow, a token id
 * is out of range or the batch is too big. */
int forward_batch(Forward *f, const BatchSeq *seqs, int n_seqs, Err *err);
/* forward_batch for one sequence. */
int forward_run(Forward *f, SeqState *s, const int32_t *tokens, int T, float *logits, int n_out, Err *err);
/* Profiling: time per phase (embedding, attention, delta-net pre-scan / scan / post-scan, FFN, head) and
 * per op, and major page faults during compute. enable resets the counters. */
void forward_profile_enable(Forward *f, bool on);
/* Formats the report into buf (truncated to cap); returns the length it needed. */
int forward_profile_report(const Forward *f, char *buf, size_t cap);
/* The algorithm the delta-net layers use for a sequence chunk of T tokens. */
DeltaNetAlgo forward_deltanet_algo(const Forward *f, int T);

#endif
