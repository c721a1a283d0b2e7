/* session.c — the session part of include/deltallm.h: a timeline on an engine (one state per stage of the
 * engine's pipeline), evaluation and batched decode through engine_run, snapshots (the state segments of
 * every stage in layer order, then the last logits), and tentative evaluation with keep. */
#include "deltallm.h"

#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define fail engine_fail

DlSession *dl_session_new(DlEngine *e, DlError *err) {
    Err er = {{0}};
    DlSession *s = calloc(1, sizeof *s);
    if (!s) return err_set(&er, "out of memory"), fail(err, &er), NULL;
    s->engine = e;
    s->n_tent = -1;
    s->pipe_id = -1;
    bool ok = true;
    for (int i = 0; ok && i < e->n_st; i++)
        ok = (s->states[i] = seqstate_new(e->model, e->st[i].be, e->n_ctx, e->st[i].l0, e->st[i].l1, &er)) != NULL;
    s->state = s->states[0];
    s->logits = malloc(sizeof(float) * (size_t)e->info.n_vocab);
    if (!ok || !s->logits || e->runner->session_new(s, &er)) {
        if (ok && !s->logits) err_set(&er, "out of memory for the logits");
        fail(err, &er);
        dl_session_free(s);
        return NULL;
    }
    return s;
}

void dl_session_free(DlSession *s) {
    if (!s) return;
    s->engine->runner->session_free(s);
    spec_free(s);
    for (int i = 0; i < DL_MAX_STAGES; i++) seqstate_free(s->states[i]);
    free(s->logits);
    free(s->tent_logits);
    free(s);
}

void dl_session_reset(DlSession *s) {
    s->engine->runner->session_reset(s);
    for (int i = 0; i < s->engine->n_st; i++) seqstate_reset(s->states[i]);
    s->has_logits = false;
    s->n_tent = -1;
    spec_reset(s, false);
}

int dl_session_n_past(const DlSession *s) { return s->state->n_past; }
int dl_session_n_ctx(const DlSession *s) { return s->state->n_ctx; }
const float *dl_session_logits(const DlSession *s) { return s->has_logits ? s->logits : NULL; }

int dl_session_eval(DlSession *s, const int32_t *tokens, size_t n, DlError *err) {
    Err e = {{0}};
    DlEngine *en = s->engine;
    if (n == 0) return err_set(&e, "no tokens to evaluate"), fail(err, &e);
    if (n > (size_t)(s->state->n_ctx - s->state->n_past))
        return err_set(&e, "context full: %d tokens + %zu new exceed the context size %d", s->state->n_past, n,
                       s->state->n_ctx),
               fail(err, &e);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= en->info.n_vocab)
            return err_set(&e, "token id %d out of range [0, %d)", tokens[i], en->info.n_vocab), fail(err, &e);
    for (size_t p = 0; p < n; p += (size_t)en->n_batch) {
        const int T = n - p < (size_t)en->n_batch ? (int)(n - p) : en->n_batch;
        const bool last = p + (size_t)T == n;
        const BatchSeq q = {NULL, tokens + p, T, last ? 1 : 0, last ? s->logits : NULL, false};
        if (engine_run(en, &s, &q, 1, &e)) {
            s->has_logits = false; /* a failure after validation leaves a partial prefix: say so */
            err_prefix(&e, "after %zu of %zu tokens", p, n);
            return fail(err, &e);
        }
    }
    s->has_logits = true;
    return 0;
}

int dl_decode_batch(DlSession **s, const int32_t *tokens, int n, DlError *err) {
    Err e = {{0}};
    if (n < 1) return err_set(&e, "empty batch"), fail(err, &e);
    DlEngine *en = s[0]->engine;
    if (n > en->n_seq_max) return err_set(&e, "%d sessions in one batch (at most %d)", n, en->n_seq_max), fail(err, &e);
    BatchSeq seqs[256];
    if (n > (int)(sizeof seqs / sizeof seqs[0])) return err_set(&e, "batch too large"), fail(err, &e);
    for (int i = 0; i < n; i++) {
        if (s[i]->engine != en) return err_set(&e, "sessions of different engines in one batch"), fail(err, &e);
        seqs[i] = (BatchSeq){NULL, &tokens[i], 1, 1, s[i]->logits, false};
    }
    if (engine_run(en, s, seqs, n, &e)) return fail(err, &e);
    for (int i = 0; i < n; i++) s[i]->has_logits = true;
    return 0;
}

/* ---- snapshots --------------------------------------------------------------------------------------- */

#define SNAP_MAGIC 0x50414e534c4c44ull /* "DLLSNAP" */

typedef struct SnapHeader {
    uint64_t magic;
    uint32_t n_layer, n_embd, n_vocab, n_ctx;
    int32_t n_past;
    /* bit 0: the logits are valid; bits 8-15 and 16-23: the K and V cache formats (DlEngine.kv_k / kv_v) + 1,
     * or 0 in snapshots written before they were recorded (whose sizes tell F32 from F16); bit 24: the
     * delta-net states are in the fused form's layout (backend_state_layout: the fast arithmetic on the CPU);
     * bit 25: an int32 position shift (SeqState.pos_delta: the timeline holds an image) follows the logits */
    uint32_t flags;
} SnapHeader;

static uint32_t snap_kv_flags(const DlEngine *en) { return (en->kv_k + 1) << 8 | (en->kv_v + 1) << 16; }
#define SNAP_FUSED (1u << 24)
#define SNAP_POS_DELTA (1u << 25)
static uint32_t snap_layout_flag(const DlSession *s) { return backend_state_layout(s->states[0]->be) == STATE_FUSED ? SNAP_FUSED : 0; }

static size_t states_bytes(const DlSession *s, int n_past) {
    size_t n = 0;
    for (int i = 0; i < s->engine->n_st; i++) n += seqstate_saved_bytes(s->states[i], n_past);
    return n + s->engine->runner->saved_bytes(s, n_past);
}

static size_t snapshot_size_at(const DlSession *s, int n_past, bool pos_delta) {
    const ModelConfig *c = &s->engine->model->cfg;
    return sizeof(SnapHeader) + states_bytes(s, n_past) + sizeof(float) * (size_t)c->n_vocab +
           (pos_delta ? sizeof(int32_t) : 0);
}

size_t dl_session_snapshot_size(const DlSession *s) {
    return snapshot_size_at(s, s->state->n_past, s->state->pos_delta != 0);
}

int dl_session_snapshot(const DlSession *s, void *buf, size_t size, DlError *err) {
    Err e = {{0}};
    const ModelConfig *c = &s->engine->model->cfg;
    const SeqState *st = s->state;
    if (size < dl_session_snapshot_size(s)) return err_set(&e, "snapshot buffer too small"), fail(err, &e);
    if (s->engine->runner->quiesce((DlSession *)s, &e)) return fail(err, &e); /* its batches are done */
    SnapHeader h = {SNAP_MAGIC, (uint32_t)c->n_layer, (uint32_t)c->n_embd, (uint32_t)c->n_vocab, (uint32_t)st->n_ctx,
                    st->n_past,
                    (s->has_logits ? 1u : 0u) | snap_kv_flags(s->engine) | snap_layout_flag(s) |
                        (st->pos_delta ? SNAP_POS_DELTA : 0u)};
    uint8_t *p = buf;
    memcpy(p, &h, sizeof h), p += sizeof h;
    for (int i = 0; i < s->engine->n_st; i++) { /* layer order: the stages are */
        seqstate_save(s->states[i], p);
        p += seqstate_saved_bytes(s->states[i], st->n_past);
    }
    if (s->engine->runner->snapshot(s, p, &e)) return fail(err, &e); /* the layers held elsewhere follow */
    p += s->engine->runner->saved_bytes(s, st->n_past);
    memcpy(p, s->logits, sizeof(float) * (size_t)c->n_vocab);
    if (st->pos_delta) memcpy(p + sizeof(float) * (size_t)c->n_vocab, &st->pos_delta, sizeof(int32_t));
    return 0;
}

int dl_session_restore(DlSession *s, const void *buf, size_t size, DlError *err) {
    Err e = {{0}};
    const ModelConfig *c = &s->engine->model->cfg;
    SeqState *st = s->state;
    SnapHeader h;
    if (size < sizeof h) return err_set(&e, "snapshot truncated"), fail(err, &e);
    memcpy(&h, buf, sizeof h);
    if (h.magic != SNAP_MAGIC || h.n_layer != (uint32_t)c->n_layer || h.n_embd != (uint32_t)c->n_embd ||
        h.n_vocab != (uint32_t)c->n_vocab)
        return err_set(&e, "snapshot is not of this model"), fail(err, &e);
    const uint32_t kv = h.flags & 0xffff00u;
    if (kv && kv != snap_kv_flags(s->engine))
        return err_set(&e, "snapshot of a %s K / %s V cache; this session keeps %s / %s", kv_format_name((kv >> 8 & 255) - 1),
                       kv_format_name((kv >> 16) - 1), kv_format_name(s->engine->kv_k), kv_format_name(s->engine->kv_v)),
               fail(err, &e);
    if ((h.flags & SNAP_FUSED) != snap_layout_flag(s))
        return err_set(&e, "snapshot of the %s arithmetic's delta-net states; this session keeps the %s one's",
                       h.flags & SNAP_FUSED ? "fast" : "llama or exact", snap_layout_flag(s) ? "fast" : "llama or exact"),
               fail(err, &e);
    if (h.n_past < 0 || h.n_past > st->n_ctx)
        return err_set(&e, "snapshot of %d tokens does not fit a context of %d", h.n_past, st->n_ctx), fail(err, &e);
    if (size != snapshot_size_at(s, h.n_past, (h.flags & SNAP_POS_DELTA) != 0))
        return err_set(&e, "snapshot size mismatch"), fail(err, &e);
    if (s->engine->runner->quiesce(s, &e)) return fail(err, &e);
    const uint8_t *p = (const uint8_t *)buf + sizeof h;
    for (int i = 0; i < s->engine->n_st; i++) {
        seqstate_restore(s->states[i], p, h.n_past);
        p += seqstate_saved_bytes(s->states[i], h.n_past);
    }
    if (s->engine->runner->restore(s, p, h.n_past, &e)) return fail(err, &e);
    p += s->engine->runner->saved_bytes(s, h.n_past);
    memcpy(s->logits, p, sizeof(float) * (size_t)c->n_vocab);
    int32_t pos_delta = 0;
    if (h.flags & SNAP_POS_DELTA) memcpy(&pos_delta, p + sizeof(float) * (size_t)c->n_vocab, sizeof pos_delta);
    for (int i = 0; i < s->engine->n_st; i++) s->states[i]->pos_delta = pos_delta;
    s->has_logits = (h.flags & 1) != 0;
    s->n_tent = -1;
    spec_reset(s, true);
    return 0;
}

int dl_session_copy(DlSession *dst, const DlSession *src, DlError *err) {
    Err e = {{0}};
    if (dst->engine != src->engine) return err_set(&e, "sessions of different engines"), fail(err, &e);
    if (dst->engine->runner->session_copy(dst, src, &e)) return fail(err, &e);
    for (int i = 0; i < src->engine->n_st; i++) seqstate_copy(dst->states[i], src->states[i]);
    dst->n_tent = -1;
    memcpy(dst->logits, src->logits, sizeof(float) * (size_t)src->engine->info.n_vocab);
    dst->has_logits = src->has_logits;
    spec_reset(dst, true);
    return 0;
}

/* ---- tentative evaluation ------------------------------------------------------------------------------- */

int dl_session_set_rollback(DlSession *s, int n_max, DlError *err) {
    Err e = {{0}};
    DlEngine *en = s->engine;
    if (n_max < 0 || n_max > en->n_batch)
        return err_set(&e, "rollback room for %d tokens (at most the batch size, %d)", n_max, en->n_batch), fail(err, &e);
    free(s->tent_logits);
    s->tent_logits = NULL;
    s->n_tent = -1;
    s->tent_cap = 0;
    if (en->runner->session_rollback(s, n_max, &e)) return fail(err, &e);
    for (int i = 0; i < en->n_st; i++)
        if (seqstate_enable_rollback(s->states[i], en->model, n_max, &e)) {
            for (int j = 0; j < i; j++) seqstate_enable_rollback(s->states[j], en->model, 0, &e);
            return fail(err, &e);
        }
    if (n_max && !(s->tent_logits = malloc(sizeof(float) * (size_t)n_max * (size_t)en->info.n_vocab))) {
        for (int i = 0; i < en->n_st; i++) seqstate_enable_rollback(s->states[i], en->model, 0, &e);
        return err_set(&e, "out of memory for %d rows of logits", n_max), fail(err, &e);
    }
    s->tent_cap = n_max;
    return 0;
}

int dl_session_eval_tentative(DlSession *s, const int32_t *tokens, size_t n, DlError *err) {
    Err e = {{0}};
    DlEngine *en = s->engine;
    if (!s->tent_cap && dl_session_set_rollback(s, en->n_batch < 16 ? en->n_batch : 16, err)) return -1;
    if (n == 0 || n > (size_t)s->tent_cap)
        return err_set(&e, "a tentative batch of %zu tokens (this session has room for 1 to %d)", n, s->tent_cap),
               fail(err, &e);
    s->n_tent = -1;
    for (int i = 0; i < en->n_st; i++) s->states[i]->rb.n = -1; /* an earlier tentative batch is kept whole */
    const BatchSeq q = {NULL, tokens, (int)n, (int)n, s->tent_logits, true};
    if (engine_run(en, &s, &q, 1, &e)) return fail(err, &e);
    s->n_tent = (int)n;
    return 0;
}

const float *dl_session_tentative_logits(const DlSession *s) { return s->n_tent > 0 ? s->tent_logits : NULL; }

int dl_session_keep(DlSession *s, size_t k, DlError *err) {
    Err e = {{0}};
    if (s->n_tent < 0 || s->state->rb.n != s->n_tent)
        return err_set(&e, "no tentative batch to keep tokens of"), fail(err, &e);
    if (k > (size_t)s->n_tent)
        return err_set(&e, "keeping %zu tokens of a tentative batch of %d", k, s->n_tent), fail(err, &e);
    if (engine_keep(s->engine, s, (int)k, &e)) return fail(err, &e);
    if (k > 0) {
        const size_t V = (size_t)s->engine->info.n_vocab;
        memcpy(s->logits, s->tent_logits + (k - 1) * V, sizeof(float) * V);
        s->has_logits = true;
    }
    s->n_tent = -1;
    return 0;
}
