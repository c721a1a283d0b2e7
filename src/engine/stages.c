/* stages.c — the engine's layers in this process: the stages (layer ranges each on a backend, run one after the
 * other with the hidden rows handed over), opening them (engine_stage_open, stages_open) and the runner that runs a
 * batch through them (runner_stages). The MPI pipeline (pipe.c) opens its rank-0 stage here too and keeps with
 * stages_keep; engine.c and session.c reach either through DlEngine.runner, never by name. */
#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int engine_kv_types(const DlEngineParams *p, int *k, int *v, MatMode *mode, uint32_t fmt[2], Err *e) {
    uint32_t f[2];
    if (arith_parse(p->arith, p->exact, mode, e) || kv_type_parse(p->kv_type_k ? p->kv_type_k : p->kv_type, k, e) ||
        kv_type_parse(p->kv_type_v ? p->kv_type_v : p->kv_type, v, e) || kv_type_format(*k, *mode, &f[0], e) ||
        kv_type_format(*v, *mode, &f[1], e))
        return -1;
    if (fmt) fmt[0] = f[0], fmt[1] = f[1];
    return 0;
}

int engine_stage_open(DlEngine *en, const DlEngineParams *p, const char *backend, Isa isa, DeltaNetAlgo algo, int l0,
                      int l1, const Weight *w, int n, Err *e) {
    MatMode mode;
    int kv_k, kv_v;
    if (engine_kv_types(p, &kv_k, &kv_v, &mode, NULL, e)) return -1;
    const BackendOptions bo = {.name = backend ? backend : p->backend,
                               .cpu = {.isa = (int)isa, .pack = !p->no_pack},
                               .n_threads = p->n_threads > 0 ? p->n_threads
                                                             : dl_default_threads(model_decode_bytes(en->model),
                                                                                  dl_cpu_count()),
                               .mode = mode,
                               .kv_k = kv_k,
                               .kv_v = kv_v,
                               .tune = p->device_tune,
                               .device_lib = p->device_lib,
                               .progress = p->progress,
                               .progress_user = p->progress_user};
    Stage *st = &en->st[en->n_st++];
    st->l0 = l0;
    st->l1 = l1;
    if (!(st->be = backend_create(&bo, e)) || st->be->vt->bind(st->be, w, n, e)) return -1;
    ForwardOptions fo = {.max_batch = en->n_batch, .max_seqs = en->n_seq_max, .max_ctx = en->n_ctx, .algo = algo,
                         .be = st->be};
    return (st->fw = forward_new(en->model, &fo, e)) ? 0 : -1;
}

/* Cuts the layers into the stages asked for and makes each one's backend (weights bound) and forward pass. */
int stages_open(DlEngine *en, const DlEngineParams *p, Isa isa, DeltaNetAlgo algo, Err *e) {
    const int L = en->model->cfg.n_layer;
    const DlStage one = {p->backend, 0};
    const DlStage *sp = p->n_stages > 0 ? p->stages : &one;
    const int n = p->n_stages > 0 ? p->n_stages : 1;
    if (n > DL_MAX_STAGES || (p->n_stages > 0 && !p->stages))
        return err_set(e, "%d stages (at most %d)", p->n_stages, DL_MAX_STAGES);
    int l0 = 0;
    for (int s = 0; s < n; s++) {
        const int want = sp[s].n_layers > 0 ? sp[s].n_layers : L - l0;
        if (sp[s].n_layers < 0 || want < 1 || l0 + want > L || (s == n - 1 && l0 + want != L))
            return err_set(e, "the stages' layer counts do not cut the model's %d layers into %d non-empty ranges", L, n);
        if (engine_stage_open(en, p, sp[s].backend, isa, algo, l0, l0 + want, en->model->weights, en->model->n_weights, e))
            return -1;
        l0 += want;
    }
    if (n > 1 && !(en->hidden = malloc(sizeof(float) * (size_t)en->n_batch * (size_t)en->model->cfg.n_embd)))
        return err_set(e, "out of memory");
    return 0;
}

/* ---- running the stages ------------------------------------------------------------------------------------ */

static int stages_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    BatchSeq q[ENGINE_MAX_BATCH_SEQS];
    for (int i = 0; i < n; i++)
        if (!seqs[i].tokens) return err_set(err, "no tokens for sequence %d of the batch", i);
    if (en->n_spec && spec_before_run(en, sess, seqs, n, err)) return -1;
    for (int s = 0; s < en->n_st; s++) {
        const Stage *st = &en->st[s];
        const bool first = s == 0, last = s == en->n_st - 1;
        for (int i = 0; i < n; i++) {
            q[i] = seqs[i];
            q[i].state = sess[i]->states[s];
            if (!last) q[i].n_out = 0, q[i].logits = NULL;
        }
        if (forward_begin(st->fw, q, n, err)) return -1; /* the first stage's checks refuse before anything runs */
        if (first && last && st->l0 == 0 && st->l1 == en->model->cfg.n_layer) { /* a device may replay a decode pass */
            forward_model(st->fw);
            if (en->n_spec) spec_capture(en, st->fw, sess, seqs, n);
            if (forward_end(st->fw, err)) return -1;
            continue;
        }
        if (first) forward_embed(st->fw);
        else forward_hidden_write(st->fw, en->hidden);
        forward_layers(st->fw, st->l0, st->l1);
        if (last) {
            forward_head(st->fw);
            if (en->n_spec) spec_capture(en, st->fw, sess, seqs, n);
        } else {
            forward_hidden_read(st->fw, en->hidden);
        }
        if (forward_end(st->fw, err)) return -1;
    }
    return en->n_spec ? spec_after_run(en, sess, seqs, n, err) : 0;
}

int stages_keep(DlEngine *en, DlSession *s, int k, Err *err) {
    for (int i = 0; i < en->n_st; i++)
        if (forward_keep(en->st[i].fw, s->states[i], k, err)) return -1;
    return 0;
}

/* ---- the runner: in one process every layer is here, so the session and engine hooks have nothing to do ---- */

static void stages_close(DlEngine *en) { (void)en; }
static int stages_prefetch(DlEngine *en, bool lock, Err *err) { return 0; }
static int stages_quiesce(DlSession *s, Err *err) { return 0; }
static int stages_session_new(DlSession *s, Err *err) { return 0; }
static void stages_session_free(DlSession *s) { (void)s; }
static void stages_session_reset(DlSession *s) { (void)s; }
static int stages_session_copy(DlSession *dst, const DlSession *src, Err *err) { return 0; }
static int stages_session_rollback(DlSession *s, int n_max, Err *err) { return 0; }
static size_t stages_saved_bytes(const DlSession *s, int n_past) { return 0; }
static int stages_snapshot(const DlSession *s, uint8_t *out, Err *err) { return 0; }
static int stages_restore(DlSession *s, const uint8_t *in, int n_past, Err *err) { return 0; }

const Runner runner_stages = {
    .name = "stages",
    .speculates = true,
    .close = stages_close,
    .prefetch = stages_prefetch,
    .run = stages_run,
    .keep = stages_keep,
    .quiesce = stages_quiesce,
    .session_new = stages_session_new,
    .session_free = stages_session_free,
    .session_reset = stages_session_reset,
    .session_copy = stages_session_copy,
    .session_rollback = stages_session_rollback,
    .saved_bytes = stages_saved_bytes,
    .snapshot = stages_snapshot,
    .restore = stages_restore,
};
