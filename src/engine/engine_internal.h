/* engine_internal.h — the structs behind the opaque types of include/deltallm.h, shared by the engine's
 * files (engine.c, tokens.c, sampling.c). */
#ifndef DL_ENGINE_ENGINE_INTERNAL_H
#define DL_ENGINE_ENGINE_INTERNAL_H

#include "deltallm.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

struct DlEngine {
    Model *model;
    Tokenizer *tok;
    Forward *fw;
    int n_ctx, n_batch, n_seq_max;
    DlModelInfo info;
};

struct DlSession {
    DlEngine *engine;
    SeqState *state;
    float *logits; /* [n_vocab] of the last evaluated token */
    bool has_logits;
};

#endif
