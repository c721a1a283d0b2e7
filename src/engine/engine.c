/* engine.c — implements the engine and session parts of include/deltallm.h on top of model/ (forward pass,
 * state) and tokenizer/. One Forward (activation buffers, thread pool) is shared by every session of an
 * engine, which is why compute calls must not overlap. */
#include "deltallm.h"

#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(DlError *err, const Err *e) {
    if (err) snprintf(err->msg, sizeof err->msg, "%s", e->msg);
    return -1;
}

void dl_engine_params_init(DlEngineParams *p) {
    memset(p, 0, sizeof *p);
}

DlEngine *dl_engine_open(const DlEngineParams *p, DlError *err) {
    Err e = {{0}};
    if (!p || !p->model_path) {
        err_set(&e, "no model file given");
        return fail(err, &e), NULL;
    }
    DlEngine *en = calloc(1, sizeof *en);
    if (!en) return err_set(&e, "out of memory"), fail(err, &e), NULL;
    DeltaNetAlgo algo;
    Isa isa = ISA_REF;
    if (deltanet_algo_parse(p->deltanet, &algo, &e) || isa_parse(p->isa, &isa, &e)) goto fail;
    en->model = model_load(p->model_path, &e);
    if (!en->model) goto fail;
    const ModelConfig *c = &en->model->cfg;
    en->tok = tokenizer_load(en->model->gguf, &e);
    if (!en->tok) goto fail;
    if (tokenizer_n_vocab(en->tok) > c->n_vocab) {
        err_set(&e, "the tokenizer has %d tokens but the model only %d rows of embeddings", tokenizer_n_vocab(en->tok),
                c->n_vocab);
        goto fail;
    }
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : (c->n_ctx_train > 0 && c->n_ctx_train < 4096 ? c->n_ctx_train : 4096);
    int n_batch = p->n_batch > 0 ? p->n_batch : 512;
    if (n_batch > n_ctx) n_batch = n_ctx;
    int n_seq = p->n_seq_max > 0 ? p->n_seq_max : 1;
    if (n_seq > n_batch) n_batch = n_seq;
    /* the backend holds the weights (packed copies of the matrices the fast kernels read faster that way:
     * bit-identical results) */
    const BackendOptions bo = {.name = p->backend,
                               .isa = (int)isa,
                               .n_threads = p->n_threads,
                               .mode = p->exact ? MATMUL_EXACT : MATMUL_GGML,
                               .pack = !p->no_pack};
    if (!(en->be = backend_create(&bo, &e)) || en->be->vt->bind(en->be, en->model->weights, en->model->n_weights, &e))
        goto fail;
    ForwardOptions fo = {.max_batch = n_batch, .max_seqs = n_seq, .max_ctx = n_ctx, .algo = algo, .be = en->be};
    en->fw = forward_new(en->model, &fo, &e);
    if (!en->fw) goto fail;
    en->n_ctx = n_ctx;
    en->n_batch = n_batch;
    en->n_seq_max = n_seq;
    en->info = (DlModelInfo){c->arch_name,
                             c->name,
                             c->n_vocab,
                             c->n_ctx_train,
                             n_ctx,
                             c->n_layer,
                             c->n_embd,
                             gguf_file_size(en->model->gguf),
                             0,
                             seqstate_bytes(en->model, n_ctx),
                             model_decode_bytes(en->model),
                             forward_ops_name(en->fw),
                             forward_n_threads(en->fw)};
    for (int64_t i = 0; i < gguf_n_tensors(en->model->gguf); i++) en->info.weight_bytes += gguf_tensor(en->model->gguf, i)->nbytes;
    return en;
fail:
    fail(err, &e);
    dl_engine_close(en);
    return NULL;
}

void dl_engine_close(DlEngine *e) {
    if (!e) return;
    forward_free(e->fw);
    backend_destroy(e->be);
    tokenizer_free(e->tok);
    model_free(e->model);
    free(e);
}

const DlModelInfo *dl_engine_info(const DlEngine *e) { return &e->info; }

int dl_engine_prefetch(DlEngine *e, bool lock, DlError *err) {
    Err er = {{0}};
    if (e->be->vt->make_resident(e->be, lock, &er)) return fail(err, &er);
    return 0;
}

void dl_engine_profile(DlEngine *e, bool on) { forward_profile_enable(e->fw, on); }
int dl_engine_profile_report(const DlEngine *e, char *buf, size_t cap) { return forward_profile_report(e->fw, buf, cap); }

/* ---- sessions ---------------------------------------------------------------------------------------- */

DlSession *dl_session_new(DlEngine *e, DlError *err) {
    Err er = {{0}};
    DlSession *s = calloc(1, sizeof *s);
    if (!s) return err_set(&er, "out of memory"), fail(err, &er), NULL;
    s->engine = e;
    s->n_tent = -1;
    s->state = seqstate_new(e->model, e->be, e->n_ctx, 0, 0, &er);
    s->logits = malloc(sizeof(float) * (size_t)e->info.n_vocab);
    if (!s->state || !s->logits) {
        if (s->state) err_set(&er, "out of memory for the logits");
        fail(err, &er);
        dl_session_free(s);
        return NULL;
    }
    return s;
}

void dl_session_free(DlSession *s) {
    if (!s) return;
    seqstate_free(s->state);
    free(s->logits);
    free(s->tent_logits);
    free(s);
}

void dl_session_reset(DlSession *s) {
    seqstate_reset(s->state);
    s->has_logits = false;
    s->n_tent = -1;
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
        if (forward_run(en->fw, s->state, tokens + p, T, last ? s->logits : NULL, last ? 1 : 0, &e)) {
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
        seqs[i] = (BatchSeq){s[i]->state, &tokens[i], 1, 1, s[i]->logits, false};
    }
    if (forward_batch(en->fw, seqs, n, &e)) return fail(err, &e);
    for (int i = 0; i < n; i++) s[i]->has_logits = true;
    return 0;
}

/* ---- snapshots --------------------------------------------------------------------------------------- */

#define SNAP_MAGIC 0x50414e534c4c44ull /* "DLLSNAP" */

typedef struct SnapHeader {
    uint64_t magic;
    uint32_t n_layer, n_embd, n_vocab, n_ctx;
    int32_t n_past;
    uint32_t has_logits;
} SnapHeader;

static size_t snapshot_size_at(const DlSession *s, int n_past) {
    const ModelConfig *c = &s->engine->model->cfg;
    return sizeof(SnapHeader) + seqstate_saved_bytes(s->state, n_past) + sizeof(float) * (size_t)c->n_vocab;
}

size_t dl_session_snapshot_size(const DlSession *s) { return snapshot_size_at(s, s->state->n_past); }

int dl_session_snapshot(const DlSession *s, void *buf, size_t size, DlError *err) {
    Err e = {{0}};
    const ModelConfig *c = &s->engine->model->cfg;
    const SeqState *st = s->state;
    if (size < dl_session_snapshot_size(s)) return err_set(&e, "snapshot buffer too small"), fail(err, &e);
    SnapHeader h = {SNAP_MAGIC, (uint32_t)c->n_layer, (uint32_t)c->n_embd, (uint32_t)c->n_vocab, (uint32_t)st->n_ctx,
                    st->n_past, s->has_logits};
    uint8_t *p = buf;
    memcpy(p, &h, sizeof h), p += sizeof h;
    seqstate_save(st, p);
    p += seqstate_saved_bytes(st, st->n_past);
    memcpy(p, s->logits, sizeof(float) * (size_t)c->n_vocab);
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
    if (h.n_past < 0 || h.n_past > st->n_ctx)
        return err_set(&e, "snapshot of %d tokens does not fit a context of %d", h.n_past, st->n_ctx), fail(err, &e);
    if (size != snapshot_size_at(s, h.n_past)) return err_set(&e, "snapshot size mismatch"), fail(err, &e);
    const uint8_t *p = (const uint8_t *)buf + sizeof h;
    seqstate_restore(st, p, h.n_past);
    p += seqstate_saved_bytes(st, h.n_past);
    memcpy(s->logits, p, sizeof(float) * (size_t)c->n_vocab);
    s->has_logits = h.has_logits != 0;
    s->n_tent = -1;
    return 0;
}

int dl_session_copy(DlSession *dst, const DlSession *src, DlError *err) {
    Err e = {{0}};
    if (dst->engine != src->engine) return err_set(&e, "sessions of different engines"), fail(err, &e);
    seqstate_copy(dst->state, src->state);
    dst->n_tent = -1;
    memcpy(dst->logits, src->logits, sizeof(float) * (size_t)src->engine->info.n_vocab);
    dst->has_logits = src->has_logits;
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
    if (seqstate_enable_rollback(s->state, en->model, n_max, &e)) return fail(err, &e);
    if (n_max && !(s->tent_logits = malloc(sizeof(float) * (size_t)n_max * (size_t)en->info.n_vocab))) {
        seqstate_enable_rollback(s->state, en->model, 0, &e);
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
    BatchSeq q = {s->state, tokens, (int)n, (int)n, s->tent_logits, true};
    if (forward_batch(en->fw, &q, 1, &e)) return fail(err, &e);
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
    if (forward_keep(s->engine->fw, s->state, (int)k, &e)) return fail(err, &e);
    if (k > 0) {
        const size_t V = (size_t)s->engine->info.n_vocab;
        memcpy(s->logits, s->tent_logits + (k - 1) * V, sizeof(float) * V);
        s->has_logits = true;
    }
    s->n_tent = -1;
    return 0;
}
