/* model.h — the data contract of a loaded model: config, the weight registry, per-sequence state as a table
 * of segments, and the forward pass in three parts (embed, a range of layers, head) over a backend.
 *
 * Weights are bound once by name (model_load.c) into one registry (Weight, backend/backend.h): matrices keep
 * their file format and point into the GGUF mapping; small vectors (norms, conv taps, dt bias, ssm_a) are
 * F32, copied and converted at load when a file stores them otherwise. A backend is given the registry once
 * (forward_new) and keeps whatever layout it wants. Shapes are C-style, outermost first: [out][in] for a
 * matrix is ggml's {in, out}. */
#ifndef DL_MODEL_MODEL_H
#define DL_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/err.h"
#include "gguf/gguf.h"
#include "model/config.h"

/* The role of a bound tensor in a Qwen3-Next / Qwen3.5 model (Weight.role). */
typedef enum WRole {
    W_TOK_EMBD, W_OUTPUT_NORM, W_OUTPUT,
    W_ATTN_NORM, W_POST_NORM,
    W_ATTN_Q, W_ATTN_K, W_ATTN_V, W_ATTN_OUT, W_ATTN_Q_NORM, W_ATTN_K_NORM,
    W_SSM_QKV, W_SSM_GATE, W_SSM_IN, W_SSM_BA, W_SSM_BETA, W_SSM_ALPHA, W_SSM_CONV, W_SSM_DT, W_SSM_A,
    W_SSM_NORM, W_SSM_OUT,
    W_FFN_GATE, W_FFN_UP, W_FFN_DOWN,
    W_MOE_ROUTER, W_MOE_GATE_EXPS, W_MOE_UP_EXPS, W_MOE_DOWN_EXPS,
    W_SHEXP_GATE_INP, W_SHEXP_GATE, W_SHEXP_UP, W_SHEXP_DOWN,
    /* an MTP block (layer ≥ the trunk's): blk.N.nextn.* beside its attention and FFN entries */
    W_NEXTN_EH_PROJ, W_NEXTN_ENORM, W_NEXTN_HNORM, W_NEXTN_HEAD_NORM, W_NEXTN_HEAD, W_NEXTN_EMBD,
    W_ROLE_COUNT
} WRole;

typedef struct LayerW {
    bool recurrent;
    const Weight *attn_norm; /* [E] */
    const Weight *post_norm; /* [E] post_attention_norm */

    /* full attention (recurrent == false) */
    const Weight *wq;        /* [2·H·D][E]: per head [q (D) | gate (D)] */
    const Weight *wk, *wv;   /* [Hkv·D][E] */
    const Weight *wo;        /* [E][H·D] */
    const Weight *q_norm, *k_norm; /* [D] */

    /* gated delta net (recurrent == true) */
    bool legacy;             /* qwen3next fused ssm_in instead of attn_qkv + attn_gate */
    const Weight *qkv;       /* [conv_dim][E]: [Q all k-heads | K all k-heads | V all v-heads] */
    const Weight *z;         /* [val_dim][E] attn_gate */
    const Weight *ssm_in;    /* legacy: [2·key_dim + 2·val_dim][E], per key group [q | k | v (r·Dv) | z (r·Dv)] */
    const Weight *ba;        /* qwen3next: [2·Hv][E], per key group [b (r) | a (r)] */
    const Weight *beta, *alpha; /* qwen35*: [Hv][E] each */
    const Weight *conv1d;    /* [conv_dim][Kc] */
    const Weight *dt_bias;   /* [Hv] */
    const Weight *ssm_a;     /* [Hv] = −exp(A_log) */
    const Weight *ssm_norm;  /* [Dv] (no +1) */
    const Weight *ssm_out;   /* [E][val_dim] */

    /* feed-forward: dense (qwen35) */
    const Weight *ffn_gate, *ffn_up; /* [F][E] */
    const Weight *ffn_down;  /* [E][F] */
    /* feed-forward: MoE (qwen3next, qwen35moe) */
    const Weight *router;    /* [nE][E] ffn_gate_inp */
    const Weight *gate_exps, *up_exps; /* n × [Fe][E] */
    const Weight *down_exps; /* n × [E][Fe] */
    const Weight *shexp_gate; /* [1][E] ffn_gate_inp_shexp */
    const Weight *gate_shexp, *up_shexp; /* [Fs][E] */
    const Weight *down_shexp; /* [E][Fs] */
} LayerW;

/* An MTP (multi-token prediction) block, as the released checkpoints hold it: blk.N.nextn.{eh_proj, enorm,
 * hnorm} plus an ordinary attention block with its FFN at layers[N] (N = n_layer + i), and optionally its own
 * head norm, head and embedding (NULL: the model's output_norm, output and token_embd). model/mtp.h runs it. */
typedef struct MtpW {
    int layer;               /* N: its index in layers[] and in the registry */
    const Weight *eh_proj;   /* [E][2E] over concat(enorm(embed(token)), hnorm(h)) */
    const Weight *enorm, *hnorm; /* [E] */
    const Weight *head_norm; /* [E] nextn.shared_head_norm, or output_norm */
    const Weight *head;      /* [n_vocab][E] nextn.shared_head_head, or output */
    const Weight *embd;      /* [n_vocab][E] nextn.embed_tokens, or token_embd */
} MtpW;

typedef struct Model {
    ModelConfig cfg;
    Gguf *gguf;               /* owned */
    Weight *weights;          /* the registry: every bound tensor, in binding order */
    int n_weights;
    const Weight *tok_embd;   /* [n_vocab][E] */
    const Weight *output_norm; /* [E] */
    const Weight *output;     /* [n_vocab][E]; token_embd when tied */
    bool tied;
    LayerW *layers;           /* [n_layer + n_mtp]: the trunk, then the bound MTP blocks */
    MtpW *mtp;                /* [n_mtp] */
    int n_mtp;                /* MTP blocks bound: cfg.n_nextn, or 0 when the file has none (or a broken one) */
    char mtp_missing[600];    /* why n_mtp is 0 although cfg.n_nextn > 0 ("" otherwise) */
    int n_tensors_bound;      /* file tensors bound (a fused tensor once) */
    void **owned;             /* F32 copies made at load */
    int n_owned;
} Model;

/* Opens the file, reads the config and binds every tensor, checking type and shape (the error names the
 * tensor with expected and found shapes). */
Model *model_load(const char *path, Err *err);
/* Binds an already-open file (takes ownership of g on success and on failure). */
Model *model_from_gguf(Gguf *g, Err *err);
void model_free(Model *m);
/* The registry entry of a file tensor (the first, for a fused one), or NULL. */
const Weight *model_weight(const Model *m, const char *name);
/* Weight bytes one decoded token reads: every trunk matrix, one embedding row (the whole table when the head
 * is tied to it), and of each expert stack the share of n_expert_used experts (MTP blocks not counted). */
uint64_t model_decode_bytes(const Model *m);

/* ---- per-sequence state: a table of segments -------------------------------------------------------------- */

typedef enum SegKind { SEG_CONV, SEG_SSM, SEG_K, SEG_V } SegKind;

/* One piece of a sequence's state on the backend: a layer's conv window ([conv_dim][Kc−1]), its delta-net
 * state ([Hv][Dv][Dk], transposed), or its K or V cache ([n_ctx][Hkv·D]). Whole segments are saved whole,
 * KV segments up to the tokens in use (row_bytes per token). */
typedef struct StateSeg {
    int layer;
    SegKind kind;
    BView view;
    size_t bytes;     /* capacity */
    size_t row_bytes; /* KV: bytes per token; 0 for whole segments */
} StateSeg;

/* What a tentative batch keeps so that forward_keep can return to the state after any of its tokens
 * (docs/MODEL.md, "Rollback"): the delta-net state before the batch (the scan writes the new one beside
 * it, so nothing is copied), the conv windows before it, and per token the scan's inputs. */
typedef struct Rollback {
    int cap;          /* most tokens a tentative batch may hold (0: no rollback) */
    int n, pos0;      /* the last tentative batch: its tokens and first position; n < 0: none to roll back */
    BView *ssm_alt;   /* per layer (recurrent ones): the second state buffer */
    BView *conv_prev; /* per layer: the conv window before the batch */
    BView *log;       /* per layer: [cap][conv_dim (conv input) + conv_dim (q | k | v) + 2·Hv (g, β)] */
    BBuf *mem;
} Rollback;

typedef struct SeqState {
    int n_ctx;   /* KV capacity in tokens */
    int n_past;  /* tokens consumed so far */
    int pos_delta; /* rotary position − cache row: 0 for text; an image of gw×gh tokens moves the positions after
                    * it by max(gw, gh) instead of gw·gh (BatchSeq.pos_thw, docs/VISION.md) */
    int l0, l1;  /* the layers this state covers */
    StateSeg *segs;
    int n_segs;
    int *seg_conv, *seg_ssm, *seg_k, *seg_v; /* per layer: index into segs, or −1 */
    Backend *be; /* not owned */
    BBuf *mem;
    size_t bytes;
    Rollback rb;
} SeqState;

/* A state for layers [l0, l1) (l1 = 0: every trunk layer; up to n_layer + n_mtp: an MTP block's KV) at
 * context n_ctx, allocated by be. */
SeqState *seqstate_new(const Model *m, Backend *be, int n_ctx, int l0, int l1, Err *err);
void seqstate_free(SeqState *s);
void seqstate_reset(SeqState *s); /* back to an empty sequence */
/* Copies everything in use (same model, layers and n_ctx). */
void seqstate_copy(SeqState *dst, const SeqState *src);
/* Fails with one line when KV caches in the formats kv_k, kv_v (Backend.kv_k / kv_v) cannot hold the model's
 * heads (a block format needs head_dim a multiple of its 32); seqstate_new checks it, the engine at load. */
int seqstate_check_kv(const Model *m, uint32_t kv_k, uint32_t kv_v, Err *err);
/* Bytes one state of every layer takes at context n_ctx (its segments) with K and V caches in the formats kv_k,
 * kv_v (Backend.kv_k / kv_v), and of one saved state at n_past. */
size_t seqstate_bytes(const Model *m, int n_ctx, uint32_t kv_k, uint32_t kv_v);
size_t seqstate_saved_bytes(const SeqState *s, int n_past);
/* Saves the segments in use (layer order; conv then ssm, or k then v) into buf (seqstate_saved_bytes),
 * or restores them from it and sets n_past. */
void seqstate_save(const SeqState *s, void *buf);
void seqstate_restore(SeqState *s, const void *buf, int n_past);
/* Gives the state room to take tentative batches of up to cap tokens (0 frees it). */
int seqstate_enable_rollback(SeqState *s, const Model *m, int cap, Err *err);

/* ---- the forward pass ------------------------------------------------------------------------------------ */

typedef enum DeltaNetAlgo { DELTANET_AUTO = 0, DELTANET_RECURRENT, DELTANET_CHUNKED } DeltaNetAlgo;
/* "auto", "recurrent" or "chunked" (NULL or "" = auto); the one parser of that option. */
int deltanet_algo_parse(const char *s, DeltaNetAlgo *out, Err *err);

typedef struct Dump Dump; /* model/dump.h */

/* Everything a forward pass needs besides the model and the states: the backend, the algorithm choice and
 * activation buffers for up to max_batch rows (allocated once: no allocation per token). */
typedef struct Forward Forward;

typedef struct ForwardOptions {
    int max_batch;     /* largest number of tokens per forward call, all sequences together (the ubatch) */
    int max_seqs;      /* most sequences in one call (0 = 1) */
    int max_ctx;       /* largest context (SeqState n_ctx) used with this Forward */
    DeltaNetAlgo algo; /* AUTO picks by T */
    /* the backend: be (not owned), or one made from backend (owned; mode, threads, ISA, packing) */
    Backend *be;
    BackendOptions backend;
} ForwardOptions;

/* Binds the model's weights to the backend (once) and allocates the activation buffers. */
Forward *forward_new(const Model *m, const ForwardOptions *o, Err *err);
void forward_free(Forward *f);
Backend *forward_backend(const Forward *f);
void forward_set_dump(Forward *f, Dump *d); /* NULL disables */
const char *forward_ops_name(const Forward *f); /* the backend: "ref", "cpu:avx2", "cpu:avx512" */
int forward_n_threads(const Forward *f);

/* One sequence's part of a batch: n_tokens tokens continuing from state->n_past; logits (NULL, or
 * [n_out][vocab columns]) receives the rows of its last n_out tokens (1 for generation, n_tokens for
 * evaluation). A tentative batch can be cut back afterwards (forward_keep); it needs rollback room in the
 * state for n_tokens. */
typedef struct BatchSeq {
    SeqState *state;
    const int32_t *tokens;
    int n_tokens;
    int n_out;
    float *logits;
    bool tentative;
} BatchSeq;

/* Multimodal input for the next batch's first sequence (images: src/vision/), set before forward_begin and
 * cleared by forward_end. embd [n_tokens][n_embd]: the rows where embd_row[t] is set (every row when
 * embd_row is NULL) come from here instead of the token embedding. pos_thw [n_tokens][3], or NULL: each token's
 * (time, height, width) rotary positions for IMROPE (text tokens p, p, p), uploaded like the positions and applied by
 * the backend's rope (RopeArgs.thw) on any backend. */
typedef struct BatchMM {
    const float *embd;
    const uint8_t *embd_row;
    const int32_t *pos_thw;
} BatchMM;
void forward_set_mm(Forward *f, const BatchMM *mm); /* NULL clears */

/* Room for `rows` rows of logits in a multi-sequence batch (at first max_seqs: one per sequence; speculative
 * decoding's verify batches want every row of each sequence). */
int forward_reserve_out(Forward *f, int rows, Err *err);

/* Runs the tokens of n_seqs sequences (Σ n_tokens ≤ max_batch, n_seqs ≤ max_seqs) through the model in one
 * pass: the matrix products see all rows at once, the recurrences and attention run per sequence. Each
 * state advances by its n_tokens. Fails with every state untouched if a context would overflow, a token id
 * is out of range or the batch is too big. It is the three parts below in a row. */
int forward_batch(Forward *f, const BatchSeq *seqs, int n_seqs, Err *err);
/* forward_batch for one sequence. */
int forward_run(Forward *f, SeqState *s, const int32_t *tokens, int T, float *logits, int n_out, Err *err);

/* The parts. forward_begin checks the batch and makes it current; then any of embed, layers and head run on
 * the hidden rows (forward_hidden: [rows][n_embd], rows in batch order), and forward_end advances the states.
 * A pipeline stage runs forward_layers on its range with hidden rows it received; an MTP block reads the
 * hidden rows after the trunk. States must cover the layers run. */
int forward_begin(Forward *f, const BatchSeq *seqs, int n_seqs, Err *err);
void forward_embed(Forward *f);
void forward_layers(Forward *f, int l0, int l1);
/* Logits of the rows that want them, for vocabulary columns [v0, v1) (forward_set_head_range; all by
 * default): the final norm, then the output matrix. */
void forward_head(Forward *f);
/* embed, every trunk layer and head in a row — or, on a device that keeps recorded passes, for a decode-shaped
 * batch (one sequence of at most 8 tokens, nothing dumped, profiled, provided or injected), the replay of the pass
 * recorded for its shape (forward_graph.c; docs/VULKAN.md "A decode pass recorded once"): the same bits */
void forward_model(Forward *f);
int forward_end(Forward *f, Err *err); /* waits for the backend; fails if the device did */
int forward_rows(const Forward *f);
BView forward_hidden(const Forward *f);
void forward_hidden_read(Forward *f, float *dst);        /* [rows][n_embd] */
void forward_hidden_write(Forward *f, const float *src);
/* Columns [v0, v1) of the vocabulary for forward_head (multiples of 8, or v1 = n_vocab; 0, 0 = all). The
 * logits of a column are the same bits as with the whole head when n_vocab is a multiple of 8. */
int forward_set_head_range(Forward *f, int v0, int v1, Err *err);

/* After a tentative batch of n tokens of s: keeps its first k (0 ≤ k ≤ n), leaving s exactly as the
 * batch's arithmetic had it after token k (recurrent state, conv window, KV length). Tentative batches that
 * follow an unresolved one extend it (a draft model's one-token steps): n is then their sum, and keep(k)
 * replays k tokens of them all. */
int forward_keep(Forward *f, SeqState *s, int k, Err *err);

/* The expert-provider hook: between routing and the expert matmuls of an MoE layer, the forward pass tells
 * the provider which experts the batch uses (ascending, each once) and gets each one's gate, up and down
 * matrix bytes (host memory; NULL: the bound weights). release is called when the layer is done.
 *
 * Optional (zero: not used): max_acquire caps the experts of one acquire call (the forward pass then runs
 * a layer's experts in groups, acquire … release per group); prefetch, when set, is told ahead what will be
 * acquired: exact = true is the layer's whole list right after its routing (before the first group's
 * acquire); exact = false is a prediction for layer `layer` (the one after the layer being computed), made
 * when predict is set by applying that layer's norm and router to the residual stream after the current
 * layer (forward_layers). Predictions change nothing in the results. */
typedef struct ExpertProvider {
    void *ctx;
    int (*acquire)(void *ctx, int layer, const int32_t *experts, int n, const void *(*data)[3], Err *err);
    void (*release)(void *ctx, int layer);
    void (*prefetch)(void *ctx, int layer, const int32_t *experts, int n, bool exact);
    int max_acquire;
    bool predict;
} ExpertProvider;
void forward_set_expert_provider(Forward *f, const ExpertProvider *p); /* NULL: the bound weights */

/* Profiling: time per phase (embedding, attention, delta-net pre-scan / scan / post-scan, FFN, head) and
 * per op, and major page faults during compute. enable resets the counters. */
void forward_profile_enable(Forward *f, bool on);
/* A device backend's command counts (the fields of include/deltallm.h DlDeviceCounts). */
typedef struct DevCounts {
    uint64_t passes, tokens, dispatches, barriers;
    uint64_t layer_steps, layer_dispatches, layer_barriers;
    double host_s;
    uint64_t recorded, replays; /* commands the host recorded; passes replayed (dispatches count both) */
} DevCounts;
/* A device backend's command counts since the last reset; false when the
 * backend is not a device. Counted on every pass (two stats reads per pass and per layer range). */
bool forward_device_counts(Forward *f, DevCounts *out, bool reset);
/* Formats the report into buf (truncated to cap); returns the length it needed. */
int forward_profile_report(const Forward *f, char *buf, size_t cap);
/* The algorithm the delta-net layers use for a sequence chunk of T tokens. */
DeltaNetAlgo forward_deltanet_algo(const Forward *f, int T);

#endif
