/* engine_internal.h — the structs behind the opaque types of include/deltallm.h, shared by the engine's
 * files (engine.c, tokens.c, sampling.c). */
#ifndef DL_ENGINE_ENGINE_INTERNAL_H
#define DL_ENGINE_ENGINE_INTERNAL_H

#include "deltallm.h"
#include "kernels/cpu/isa.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* One stage of the pipeline: a range of layers on a backend, with its forward pass (the first stage also
 * embeds, the last one runs the head). */
typedef struct Stage {
    Backend *be; /* holds the weights; the Forward and every session's state of the stage use it */
    Forward *fw;
    int l0, l1;
} Stage;

struct DlEngine {
    Model *model;
    Tokenizer *tok;
    Stage st[DL_MAX_STAGES];
    int n_st;
    float *hidden; /* [n_batch][n_embd]: the rows crossing from one stage to the next */
    int n_ctx, n_batch, n_seq_max;
    DlModelInfo info;
};

int engine_fail(DlError *err, const Err *e); /* copies e into err; returns -1 */
/* Runs a batch of n sequences (sess[i] with seqs[i]'s tokens and logits; seqs[i].state is ignored) through
 * every stage (engine.c). */
int engine_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err);
/* forward_keep on every stage's state of a session. */
int engine_keep(DlEngine *en, DlSession *s, int k, Err *err);

struct DlSession {
    DlEngine *engine;
    SeqState *states[DL_MAX_STAGES]; /* one per stage */
    SeqState *state; /* states[0] (position, context size) */
    float *logits; /* [n_vocab] of the last evaluated token */
    bool has_logits;
    float *tent_logits; /* [tent_cap][n_vocab]: the rows of the last tentative batch */
    int tent_cap, n_tent; /* n_tent: tokens of the tentative batch that can still be cut back, or -1 */
};

#endif
