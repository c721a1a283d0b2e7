/* forward_internal.h — the Forward object shared by forward.c and the layer files (layer_*.c): the
 * model, the ops, and every activation buffer, allocated once for max_batch rows.
 *
 * Rows: a batch concatenates the tokens of its sequences; sequence s owns rows [row0[s], row0[s] + n[s]).
 * Buffers are row-major [rows][width]. */
#ifndef DL_MODEL_FORWARD_INTERNAL_H
#define DL_MODEL_FORWARD_INTERNAL_H

#include "model/dump.h"
#include "model/model.h"

/* Named activation buffers (see forward.c for widths). */
typedef struct Bufs {
    float *x;       /* [R][E]      residual stream */
    float *h;       /* [R][E]      normed input of the current sub-layer */
    float *tmp;     /* [R][E]      sub-layer output */
    float *tmp2;    /* [R][E]      shared-expert output */
    /* delta-net */
    float *proj;    /* [R][conv+val] legacy ssm_in output */
    float *mixed;   /* [R][conv]   qkv projection (conv input) */
    float *z;       /* [R][val] */
    float *ba;      /* [R][2Hv] */
    float *conv_y;  /* [R][conv] */
    float *q, *k;   /* [R][key_dim] L2-normed */
    float *v;       /* [R][val] */
    float *g, *beta; /* [R][Hv] */
    float *o;       /* [R][val]    core delta-net output */
    float *on;      /* [R][val]    gated-norm output */
    /* attention */
    float *qg;      /* [R][2HD] */
    float *qa;      /* [R][HD] */
    float *ka, *va; /* [R][Hkv·D] */
    float *ao;      /* [R][HD] */
    /* feed-forward */
    float *fg, *fu; /* [R][maxF] */
    float *rl;      /* [R][nE] router logits, then probabilities */
    float *ew;      /* [R][kE] expert weights */
    int32_t *es;    /* [R][kE] selected experts */
    int32_t *erows; /* [R·kE]  rows routed to the current expert (row·kE + slot) */
    float *gx;      /* [R][E]  gathered expert inputs */
    float *eo;      /* [R][kE][E] expert outputs */
    float *sgate;   /* [R] */
    float *head;    /* [max_seqs][n_vocab] logits staging when several sequences want logits */
} Bufs;

/* Profiling (model.h: forward_profile_*): phases of a forward pass and time per op. */
typedef enum Phase { PH_EMBED, PH_ATTN, PH_DN_PRE, PH_DN_SCAN, PH_DN_POST, PH_FFN, PH_HEAD, PH_COUNT } Phase;

#define PROFILE_MAX_OPS 48

typedef struct ProfOp {
    const char *name; /* static string */
    double seconds;
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
} Profile;

struct Forward {
    const Model *m;
    const Ops *ops;
    OpCtx oc;
    Pool *pool;
    Dump *dump;
    int max_batch, max_seqs, max_ctx;
    DeltaNetAlgo algo;
    int chunk_min_tokens; /* AUTO: chunked form from this many tokens of one sequence */

    /* the current batch */
    const BatchSeq *seqs;
    int n_seqs, rows;
    int *row0; /* [max_seqs] */

    Bufs b;
    void *mem; /* all buffers */
    Profile prof;
};

/* Ops through these wrappers are timed when profiling is on (name: a static label such as "ssm_out"). */
void fwd_matmul(Forward *f, const char *name, const MatW *w, const float *x, int64_t T, float *y);
void fwd_conv_silu(Forward *f, const float *x, int T, int C, int K, const float *w, float *state, float *y);
void fwd_deltanet(Forward *f, const DeltaNetArgs *a, bool chunked);
void fwd_attention(Forward *f, const AttnArgs *a);
void fwd_silu_rows(Forward *f, float *x, int rows, int n);                /* in place */
void fwd_swiglu_rows(Forward *f, float *g, const float *u, int rows, int n); /* g = silu(g)·u */
double fwd_now(void);
/* Adds the time since *t0 to a phase and resets *t0 (no-op unless profiling). */
void fwd_phase(Forward *f, Phase ph, double *t0);

void layer_deltanet(Forward *f, Bufs *b, int il);
void layer_attention(Forward *f, Bufs *b, int il);
void layer_ffn(Forward *f, Bufs *b, int il);

/* dump helper: whole-batch tensors are only dumped for single-sequence batches */
static inline void fwd_dump(Forward *f, const char *name, int il, const float *data, int64_t ne0, int64_t ne1,
                            int64_t ne2, int64_t ne3) {
    if (f->dump && f->n_seqs == 1) dump_tensor(f->dump, name, il, data, ne0, ne1, ne2, ne3);
}

#endif
