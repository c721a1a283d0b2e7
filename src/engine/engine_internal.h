/* engine_internal.h — the structs behind the opaque types of include/deltallm.h, shared by the engine's
 * files (engine.c, session.c, tokens.c, sampling.c, speculative.c, spec_mtp.c, stages.c, pipe.c), and the runner:
 * how a batch goes through the layers, in this process (stages.c) or over the MPI pipeline (pipe.c). */
#ifndef DL_ENGINE_ENGINE_INTERNAL_H
#define DL_ENGINE_ENGINE_INTERNAL_H

#include "deltallm.h"
#include "kernels/cpu/isa.h"
#include "model/expert_cache.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <stdio.h>

/* One stage of the pipeline: a range of layers on a backend, with its forward pass (the first stage also
 * embeds, the last one runs the head). */
typedef struct Stage {
    Backend *be; /* holds the weights; the Forward and every session's state of the stage use it */
    Forward *fw;
    int l0, l1;
} Stage;

typedef struct Pipe Pipe;
typedef struct Runner Runner;
typedef struct MtpPass MtpPass; /* model/mtp.h */
typedef struct Spec Spec;       /* speculative.c: a session's drafter */

struct DlEngine {
    Model *model;
    Tokenizer *tok;
    Stage st[DL_MAX_STAGES];
    int n_st;
    const Runner *runner; /* runner_stages, or runner_pipe over MPI */
    Pipe *pipe; /* over MPI (pipe.c's own): st[0] is rank 0's range, the other ranks hold the rest; NULL in one process */
    float *hidden; /* [n_batch][n_embd]: the rows crossing from one stage to the next */
    int n_ctx, n_batch, n_seq_max;
    DlModelInfo info;
    /* speculative decoding (speculative.c) */
    DlEngineParams params; /* as opened (strings not kept): a draft model opens with the same */
    char backend[32], isa[16], deltanet[16];
    MtpPass *mtp;          /* MTP passes on the last stage, made when a session first drafts with it */
    DlEngine *draft;       /* dl_engine_open_draft */
    int n_spec;            /* sessions with drafting on: engine_run calls the drafter's hooks */
    ExpertCache *cache;    /* NULL: the weights are mapped (the model fits the memory budget) */
    DlCacheStats cache_info; /* the cache's sizes */
    uint64_t tokens;       /* evaluated since the cache statistics were reset */
    /* the KV cache's formats (FormatIds): those a CPU stage keeps while the engine opens (the memory estimate),
     * then the last stage's (-ngl: the CPU's; a device alone: F32); snapshots record them */
    uint32_t kv_k, kv_v;
};

/* copies e into err; returns -1 */
static inline int engine_fail(DlError *err, const Err *e) {
    if (err) snprintf(err->msg, sizeof err->msg, "%s", e->msg);
    return -1;
}
/* The KV types the parameters ask for (backend.h's KV_*: kv_type_k / kv_type_v, else kv_type, each parsed by
 * kv_type_parse), the arithmetic, and (fmt, may be NULL) the K and V formats a CPU stage keeps for them; fails
 * with one line for a bad name or a quantized cache outside the fast arithmetic. */
int engine_kv_types(const DlEngineParams *p, int *k, int *v, MatMode *mode, uint32_t fmt[2], Err *e);
/* Appends a stage of layers [l0, l1) on a backend (NULL: the engine's) bound to w[0..n) (the registry or a
 * part of it), with its forward pass (stages.c). */
int engine_stage_open(DlEngine *en, const DlEngineParams *p, const char *backend, Isa isa, DeltaNetAlgo algo, int l0,
                      int l1, const Weight *w, int n, Err *e);
/* Cuts the layers into the stages asked for and makes each one's backend and forward pass (stages.c). */
int stages_open(DlEngine *en, const DlEngineParams *p, Isa isa, DeltaNetAlgo algo, Err *e);
/* forward_keep on every local stage's state of a session (stages.c). */
int stages_keep(DlEngine *en, DlSession *s, int k, Err *err);

/* ---- the runner: where the layers run. engine.c and session.c call through it and never name one ---------------
 * runner_stages (stages.c): every layer in this process. runner_pipe (pipe.c): rank 0's layers here, the rest on
 * the other ranks of an MPI job; its session hooks keep the other ranks' states in step. */
#define ENGINE_MAX_BATCH_SEQS 256
struct Runner {
    const char *name;
    bool speculates; /* speculative decoding runs on it */
    void (*close)(DlEngine *en);
    int (*prefetch)(DlEngine *en, bool lock, Err *err); /* beyond the local stages' make_resident */
    /* a batch of n sequences (sess[i] with seqs[i]'s tokens and logits; seqs[i].state is ignored) */
    int (*run)(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err);
    int (*keep)(DlEngine *en, DlSession *s, int k, Err *err); /* forward_keep everywhere */
    int (*quiesce)(DlSession *s, Err *err); /* none of the session's batches still running */
    int (*session_new)(DlSession *s, Err *err);
    void (*session_free)(DlSession *s);
    void (*session_reset)(DlSession *s);
    int (*session_copy)(DlSession *dst, const DlSession *src, Err *err);
    int (*session_rollback)(DlSession *s, int n_max, Err *err);
    /* the parts of a snapshot held elsewhere (layer order, after the local stages'): size at n_past, save, restore */
    size_t (*saved_bytes)(const DlSession *s, int n_past);
    int (*snapshot)(const DlSession *s, uint8_t *out, Err *err);
    int (*restore)(DlSession *s, const uint8_t *in, int n_past, Err *err);
};
extern const Runner runner_stages; /* stages.c */

/* Runs a batch through the engine's runner (counting its tokens for the cache statistics). */
static inline int engine_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    if (n > ENGINE_MAX_BATCH_SEQS) return err_set(err, "batch too large");
    for (int i = 0; i < n; i++) en->tokens += (uint64_t)seqs[i].n_tokens;
    return en->runner->run(en, sess, seqs, n, err);
}
/* forward_keep on every state of a session, wherever its layers are. */
static inline int engine_keep(DlEngine *en, DlSession *s, int k, Err *err) { return en->runner->keep(en, s, k, err); }

/* The drafter's hooks (speculative.c, spec_mtp.c), called only while en->n_spec > 0: before a batch runs,
 * between the last stage's head and its forward_end (f: that stage's pass, the batch's hidden rows still in
 * it), and after it; on keep; when a session is reset (resync: its state jumped, by restore or copy); freed
 * with the session and the engine. */
int spec_before_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err);
void spec_capture(DlEngine *en, Forward *f, DlSession *const *sess, const BatchSeq *seqs, int n);
int spec_after_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err);
void spec_reset(DlSession *s, bool resync);
void spec_free(DlSession *s);
void spec_engine_free(DlEngine *en);

struct DlSession {
    DlEngine *engine;
    SeqState *states[DL_MAX_STAGES]; /* one per stage */
    SeqState *state; /* states[0] (position, context size) */
    float *logits; /* [n_vocab] of the last evaluated token */
    bool has_logits;
    float *tent_logits; /* [tent_cap][n_vocab]: the rows of the last tentative batch */
    int tent_cap, n_tent; /* n_tent: tokens of the tentative batch that can still be cut back, or -1 */
    int pipe_id;   /* over MPI: the session's number on the other ranks */
    int pipe_busy; /* over MPI: its batches still in the pipe */
    Spec *spec;           /* drafting (dl_session_set_draft), or NULL */
};

/* ---- over MPI (pipe.c) ------------------------------------------------------------------------------------------
 * Opens the pipeline (rank 0's stage here) and sets en->runner = &runner_pipe. */
int pipe_open(DlEngine *en, const DlEngineParams *p, Isa isa, DeltaNetAlgo algo, Err *err);

#endif
