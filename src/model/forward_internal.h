/* forward_internal.h — the Forward object shared by forward.c, forward_profile.c and the layer files
 * (layer_*.c): the model, the backend, and every activation buffer as a view of one backend allocation,
 * allocated once for max_batch rows.
 *
 * Rows: a batch concatenates the tokens of its sequences; sequence s owns rows [row0[s], row0[s] + n[s]).
 * Buffers are row-major [rows][width] F32 unless marked int32. */
#ifndef DL_MODEL_FORWARD_INTERNAL_H
#define DL_MODEL_FORWARD_INTERNAL_H

#include "model/dump.h"
#include "model/model.h"
#include "base/clock.h"

/* Named activation buffers (see forward.c for widths). */
typedef struct Bufs {
    BView x;       /* [R][E]      residual stream (the hidden rows) */
    BView h;       /* [R][E]      normed input of the current sub-layer */
    BView tmp;     /* [R][E]      sub-layer output */
    BView tmp2;    /* [R][E]      shared-expert output */
    /* delta-net */
    BView proj;    /* [R][conv+val] legacy ssm_in output */
    BView mixed;   /* [R][conv]   qkv projection (conv input) */
    BView z;       /* [R][val] */
    BView ba;      /* [R][2Hv] */
    BView conv_y;  /* [R][conv] */
    BView q, k;    /* [R][key_dim] L2-normed */
    BView v;       /* [R][val] */
    BView g, beta; /* [R][Hv] */
    BView o;       /* [R][val]    core delta-net output */
    BView on;      /* [R][val]    gated-norm output */
    /* attention */
    BView qg;      /* [R][2HD] */
    BView qa;      /* [R][HD] */
    BView ka, va;  /* [R][Hkv·D] */
    BView ao;      /* [R][HD] */
    /* feed-forward */
    BView fg, fu;  /* [R][maxF] */
    BView rl;      /* [R][nE] router logits, then probabilities */
    BView ew;      /* [R][kE] expert weights */
    BView es;      /* int32 [R][kE] selected experts */
    BView pes, pew; /* int32 [R][kE], [R][kE]: the next layer's predicted selection (expert provider) */
    BView gidx;    /* int32 [R·kE] rows routed to each expert, grouped by expert */
    BView sidx;    /* int32 [R·kE] their (row·kE + slot) places in eo */
    BView gx;      /* [R][E]  gathered expert inputs */
    BView eo;      /* [R][kE][E] expert outputs */
    BView sgate;   /* [R] */
    BView mg, mu;  /* [R·kE][Fe] grouped expert activations (a backend with moe_ffn only) */
    BView mwork;   /* int32 MOE_WORK_INTS: its grouping */
    BView head;    /* [max_out][n_vocab] logits staging (several sequences, or a device: the head in chunks); its own buffer */
    BView ids;     /* int32 [R] token ids */
    BView pos;     /* int32 [R] positions */
    BView thw;     /* int32 [R][3] (time, height, width) positions of a batch with images (thw_on) */
    BView kvrow;   /* int32 [R] cache rows (its sequence's n_past + t; a device reads them: forward_graph.c) */
    BView hrows;   /* int32 [R] rows that want logits */
} Bufs;

/* Host-side index work of a batch (no activations): token ids, positions, the expert grouping. */
typedef struct HostIdx {
    int32_t *ids, *pos, *hrows, *kvrow; /* [R] */
    int32_t *thw;                    /* [R][3] multi-axis rotary positions, when a sequence gives them */
    int32_t *es;                     /* [R·kE] the selection, downloaded */
    int32_t *pes;                    /* [R·kE] a predicted selection, downloaded */
    int32_t *gs;                     /* [2·R·kE] gidx then sidx */
    int32_t *count, *start, *used;   /* [nE] */
    const void *(*data)[3];          /* [nE] provider answers */
} HostIdx;

/* A recorded pass (forward_graph.c): what decides that a batch may replay it. */
typedef struct GraphKey {
    const SeqState *st;
    uint64_t segs;    /* where the state's segments are (a tentative batch swaps its delta-net states) */
    int rows, n_out;  /* the batch's tokens and logit rows (one sequence) */
    int bucket;       /* the cache rows the pass may reach, rounded up to a power of two ≥ 256 */
    int v0, v1;       /* the head's columns */
} GraphKey;

typedef struct FwdGraph {
    bool valid;
    uint64_t id;      /* the backend's id of the capture (graph_capture) */
    GraphKey key;
    uint64_t used;    /* graph_tick at its last use: the least recently used slot is captured over */
    uint64_t layer_steps, layer_dispatches, layer_barriers; /* its counts inside the layer loop (replays add them) */
} FwdGraph;

#define GRAPH_MAX_ROWS 8 /* batches of at most this many tokens of one sequence are recorded once */

/* The context bucket of a pass that reaches n cache rows: a power of two from 256 (GraphKey.bucket,
 * AttentionArgs.keys_max) */
static inline int fwd_bucket(int n) {
    int b = 256;
    while (b < n) b *= 2;
    return b;
}

/* Profiling (model.h: forward_profile_*): phases of a forward pass and time per op. */
typedef enum Phase { PH_EMBED, PH_ATTN, PH_DN_PRE, PH_DN_SCAN, PH_DN_POST, PH_FFN, PH_HEAD, PH_COUNT } Phase;

#define PROFILE_MAX_OPS 48

typedef struct ProfOp {
    const char *name; /* static string */
    double seconds;   /* host time (on a device: recording) */
    double dev_seconds; /* device time between its timestamps (a backend with marks) */
    uint64_t calls;
} ProfOp;

typedef struct Profile {
    bool enabled;
    double phase[PH_COUNT];
    ProfOp ops[PROFILE_MAX_OPS];
    int n_ops;
    uint64_t forwards, tokens;
    long majflt; /* major page faults (disk reads) during forward passes */
    double total;
    /* a backend with timestamps (a device): the same phases and ops on the device's clock, and the traffic */
    bool device;
    double dev_phase[PH_COUNT], dev_total;
    uint64_t h2d, d2h, h2d0, d2h0;
    long flt0;   /* at forward_begin */
    double t0;
} Profile;

struct Forward {
    const Model *m;
    Backend *be;
    bool own_be;
    Dump *dump;
    float *dump_host; /* staging for dumps */
    size_t dump_cap;
    int max_batch, max_seqs, max_ctx;
    int max_out;          /* logit rows a multi-sequence batch may ask for (forward_reserve_out) */
    BBuf *head_mem;       /* the staging of b.head */
    DeltaNetAlgo algo;
    int chunk_min_tokens; /* AUTO: chunked form from this many tokens of one sequence */
    int v0, v1;           /* head columns */
    ExpertProvider provider;
    bool has_provider;
    Err err;              /* the first failure inside the parts (a provider's), reported by forward_end */
    bool failed;

    /* the current batch */
    const BatchSeq *seqs;
    int n_seqs, rows, n_out;
    int *row0; /* [max_seqs] */

    Bufs b;
    HostIdx hx;
    bool thw_on; /* this batch's rope takes b.thw, uploaded from hx.thw (images) */
    BatchMM mm;  /* forward_set_mm: the next batch's first sequence's image rows */
    BBuf *mem; /* all buffers */
    void *host_mem;
    Profile prof;
    DevCounts cnt;  /* a device's command counts (forward_device_counts) */
    bool res_done;  /* the layer's mixer / FFN added its output to b->x itself (fwd_out_matmul) */
    const Weight *hn; /* set: b->h is not written, the products read rms_norm(b->x) with hn (fwd_fold) */
    float hn_eps;
    uint64_t cnt_d0, cnt_b0, cnt_h0, cnt_r0, cnt_p0; /* at the pass's start */
    /* recorded passes (forward_graph.c): the backend's slots, the one being captured (-1: none) and its key */
    bool rows_on;     /* the backend reads cache rows on the device (b.kvrow is uploaded, AttentionArgs.rows_at) */
    FwdGraph graphs[BACKEND_GRAPHS];
    int graph_cap;
    uint64_t graph_id;
    bool graph_spoiled; /* an op of the pass being captured took a per-token value from the host */
    GraphKey graph_key;
    DevCounts graph_c0;
    uint64_t graph_tick;
};

/* Ops through these wrappers are timed when profiling is on (name: a static label such as "ssm_out"). */
void fwd_matmul(Forward *f, const char *name, const Weight *w, BView x, int64_t T, BView y);
/* ya = wa·x and yc = wc·x: the backend's matmul_pair (profiled as name[2]) or two products (name[0], name[1]) */
void fwd_matmul_pair(Forward *f, const char *const name[3], const Weight *wa, const Weight *wc, BView x, int64_t T,
                     BView ya, BView yc);
/* A half-block's output product: into b->tmp (forward_layers adds it to the residual), or, with the backend's
 * matmul_add and nothing dumped at layer il, added to b->x in the product's epilogue (sets f->res_done). */
void fwd_out_matmul(Forward *f, const char *name, const Weight *w, BView x, int64_t T, int il);
/* b.x += w·gated_norm(x, z) through the backend's matmul_add_gated (the gated norm of n-float heads with weight nw
 * in the product's activation load); false (nothing done) where the backend has none, declines or the layer is
 * dumped */
bool fwd_out_matmul_gated(Forward *f, const char *name, const Weight *w, BView x, BView z, const Weight *nw, int n,
                          float eps, int64_t T, int il);
/* g = silu(wg·x) ⊙ (wu·x) for T rows (u: a work area): the backend's one-pass op, profiled as label[2], or the
 * three calls (label[0], label[1], "swiglu"); labels are kept by the profile: static strings */
void fwd_gate_up(Forward *f, const char *const label[3], const Weight *wg, const Weight *wu, BView x, int64_t T, BView g,
                 BView u);
void fwd_matmul_expert(Forward *f, const char *name, const Weight *w, int e, const void *data, BView x, int64_t T, BView y);
void fwd_conv_silu(Forward *f, BView x, int T, int C, int K, const Weight *w, BView state, BView y);
void fwd_deltanet(Forward *f, const DeltaArgs *a);
/* conv_silu_seqs / deltanet_seqs (the backend has them): profiled as the single ops */
void fwd_conv_silu_seqs(Forward *f, const ConvSeq *s, int n, int C, int K, const Weight *w);
void fwd_deltanet_seqs(Forward *f, const DeltaArgs *a, int n);
void fwd_attention(Forward *f, const AttentionArgs *a);
void fwd_attention_gated(Forward *f, const AttentionArgs *a, BView gate, int64_t g_row, int64_t g_head);
void fwd_moe_ffn(Forward *f, const MoeArgs *a);
/* the routed experts and their weighted sum in selection order into out (moe_ffn, moe_combine) in one op where the
 * backend has moe_ffn_combine and takes it; false: nothing done */
bool fwd_moe_ffn_combine(Forward *f, const MoeArgs *a, BView w, BView out);
/* b.tmp += (w·x)·σ(g[t]) and b.x += b.tmp in one op (the shared expert's down, gate and the residual: the backend's
 * matmul_add_sigmoid, which sets f->res_done); false (nothing done) where the backend has none, declines, the batch
 * is past fold_norm_rows or the layer is dumped */
bool fwd_out_matmul_sigmoid(Forward *f, const char *name, const Weight *w, BView x, BView g, int64_t T, int il);
void fwd_swiglu(Forward *f, BView g, BView u, int rows, int n); /* g = silu(g)·u */
/* The start of a phase: the host time, and a device timestamp when profiling on a device. */
double fwd_phase_start(Forward *f);
/* Adds the time since *t0 to a phase and resets *t0 (no-op unless profiling). */
void fwd_phase(Forward *f, Phase ph, double *t0);
void fwd_prof_op(Forward *f, const char *name, double seconds);
void fwd_prof_begin(Forward *f); /* a forward pass starts / ends: totals and page faults */
/* a device's command counts (Forward.cnt): a pass starts / ends; around a range of n layers (n 0: its start) */
void fwd_count_begin(Forward *f);
void fwd_count_end(Forward *f);
void fwd_count_layers(Forward *f, uint64_t *d0, uint64_t *b0, int n);
void fwd_prof_end(Forward *f);

/* Recorded passes (forward_graph.c): the capture of the current pass ends (before the head's downloads); an op
 * that takes a value changing per token from the host (not from b.kvrow / b.pos) spoils the capture. */
void fwd_graph_end(Forward *f);
static inline void fwd_graph_spoil(Forward *f) { f->graph_spoiled = true; }
/* The logit rows of the batch, from the staging rows [r0, r0 + T) of b.head, into each sequence's logits. */
void fwd_head_download(Forward *f, int r0, int T, int V);

/* The head over the rows that want logits: gathered into b->h, normed with norm (they stay there, normed),
 * multiplied by out for vocabulary columns [v0, v1) (0, 0: all) into each sequence's logits. forward_head
 * is the model's output_norm and output; an MTP block passes its own. */
void fwd_head(Forward *f, const Weight *norm, const Weight *out, int v0, int v1);

void layer_deltanet(Forward *f, Bufs *b, int il);
void layer_attention(Forward *f, Bufs *b, int il);
void layer_ffn(Forward *f, Bufs *b, int il);
void fwd_predict_experts(Forward *f, Bufs *b, int il);

/* A VecSet of rows contiguous vectors of n (one head per row). */
static inline VecSet vs_rows(int rows, int n) { return (VecSet){rows, 1, n, n, n, n, n}; }

/* Dumps (whole-batch tensors only for single-sequence batches): downloads the view and records it. */
void fwd_dump_view(Forward *f, const char *name, int il, BView v, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                   bool ints);
/* A delta-net state ([Hv][Dv][Dk] as dumped, converted from the fused layout where the backend keeps that) */
void fwd_dump_dn_state(Forward *f, const char *name, int il, BView v, int Dk, int Dv, int Hv);
static inline bool fwd_dumping(const Forward *f, int il) {
    return f->dump && f->n_seqs == 1 && dump_wants_layer(f->dump, il);
}
static inline void fwd_dump(Forward *f, const char *name, int il, BView v, int64_t ne0, int64_t ne1, int64_t ne2,
                            int64_t ne3) {
    if (fwd_dumping(f, il)) fwd_dump_view(f, name, il, v, ne0, ne1, ne2, ne3, false);
}

#endif
