/* session_mm.c — multimodal input for a session (include/deltallm.h, dl_session_eval_embd): rows given as
 * embeddings (an image's tokens from src/vision/) with their own (time, height, width) rotary positions, and
 * the text position that follows them. One process, no drafting: the batch goes to engine_run with
 * the stages' forward_set_mm set. */
#include "deltallm.h"

#include "engine/engine_internal.h"

#define fail engine_fail

int dl_session_next_pos(const DlSession *s) { return s->state->n_past + s->state->pos_delta; }

int dl_session_eval_embd(DlSession *s, const int32_t *tokens, const float *embd, const uint8_t *is_embd,
                         const int32_t *pos_thw, size_t n, int next_pos, DlError *err) {
    Err e = {{0}};
    DlEngine *en = s->engine;
    if (n == 0) return err_set(&e, "no tokens to evaluate"), fail(err, &e);
    if (en->pipe) return err_set(&e, "images are not supported over --mpi yet"), fail(err, &e);
    if (s->spec) return err_set(&e, "images are not supported with a draft model or MTP yet"), fail(err, &e);
    if (n > (size_t)(s->state->n_ctx - s->state->n_past))
        return err_set(&e, "context full: %d tokens + %zu new (with the image) exceed the context size %d",
                       s->state->n_past, n, s->state->n_ctx),
               fail(err, &e);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= en->info.n_vocab)
            return err_set(&e, "token id %d out of range [0, %d)", tokens[i], en->info.n_vocab), fail(err, &e);
    const size_t E = (size_t)en->info.n_embd;
    for (size_t p = 0; p < n; p += (size_t)en->n_batch) {
        const int T = n - p < (size_t)en->n_batch ? (int)(n - p) : en->n_batch;
        const bool last = p + (size_t)T == n;
        const BatchSeq q = {NULL, tokens + p, T, last ? 1 : 0, last ? s->logits : NULL, false};
        const BatchMM mm = {embd ? embd + p * E : NULL, is_embd ? is_embd + p : NULL, pos_thw ? pos_thw + 3 * p : NULL};
        for (int i = 0; i < en->n_st; i++) forward_set_mm(en->st[i].fw, &mm);
        const int rc = engine_run(en, &s, &q, 1, &e);
        for (int i = 0; i < en->n_st; i++) forward_set_mm(en->st[i].fw, NULL);
        if (rc) {
            s->has_logits = false;
            err_prefix(&e, "after %zu of %zu positions", p, n);
            return fail(err, &e);
        }
    }
    for (int i = 0; i < en->n_st; i++) s->states[i]->pos_delta = next_pos - s->states[i]->n_past;
    s->has_logits = true;
    return 0;
}
