/* engine_internal.h — the structs behind the opaque types of include/deltallm.h, shared by the engine's
 * files (engine.c, tokens.c, sampling.c). */
#ifndef DL_ENGINE_ENGINE_INTERNAL_H
#define DL_ENGINE_ENGINE_INTERNAL_H

#include "deltallm.h"
#include "kernels/cpu/isa.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct DlEngine {
    Model *model;
    Tokenizer *tok;
    Backend *be; /* holds the weights; the Forward and every session's state use it */
    Forward *fw;
    int n_ctx, n_batch, n_seq_max;
    DlModelInfo info;
};

struct DlSession {
    DlEngine *engine;
    SeqState *state;
    float *logits; /* [n_vocab] of the last evaluated token */
    bool has_logits;
    float *tent_logits; /* [tent_cap][n_vocab]: the rows of the last tentative batch */
    int tent_cap, n_tent; /* n_tent: tokens of the tentative batch that can still be cut back, or -1 */
};

#endif
