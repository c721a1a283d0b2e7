/* engine.c — implements the engine part of include/deltallm.h on top of model/ (the forward pass over a
 * backend) and tokenizer/: the model, its stages (layer ranges each on a backend, run one after the other
 * with the hidden rows handed over), info, residency and profiling. One Forward per stage (activation
 * buffers, threads) is shared by every session of an engine, which is why compute calls must not overlap.
 * Sessions, snapshots and tentative evaluation are in session.c; the stages in one process and how a batch runs
 * through them are stages.c's (runner_stages), the MPI pipeline pipe.c's (runner_pipe). */
#include "deltallm.h"

#include "engine/engine_cache.h"
#include "base/pool.h"
#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define fail engine_fail

void dl_engine_params_init(DlEngineParams *p) {
    memset(p, 0, sizeof *p);
}

int dl_default_threads(uint64_t decode_bytes, int n_cpus) {
    if (n_cpus < 1) n_cpus = 1;
    const uint64_t n = decode_bytes / DL_THREAD_DECODE_BYTES;
    return n < 1 ? 1 : n > (uint64_t)n_cpus ? n_cpus : (int)n;
}

int dl_cpu_count(void) { return pool_default_threads(); }

DlEngine *dl_engine_open(const DlEngineParams *p, DlError *err) {
    Err e = {{0}};
    if (!p || !p->model_path) {
        err_set(&e, "no model file given");
        return fail(err, &e), NULL;
    }
    DlEngine *en = calloc(1, sizeof *en);
    if (!en) return err_set(&e, "out of memory"), fail(err, &e), NULL;
    en->runner = &runner_stages; /* pipe_open replaces it */
    DeltaNetAlgo algo;
    Isa isa = ISA_REF;
    MatMode mode;
    int kv_k, kv_v;
    uint32_t kv_fmt[2];
    if (deltanet_algo_parse(p->deltanet, &algo, &e) || isa_parse(p->isa, &isa, &e) ||
        engine_kv_types(p, &kv_k, &kv_v, &mode, kv_fmt, &e))
        goto fail;
    en->kv_k = kv_fmt[0], en->kv_v = kv_fmt[1]; /* a CPU stage's, for the memory estimate */
    if (p->mpi && p->no_mmap && dl_mpi_size() > 1) { /* each rank is to read only its own layers */
        err_set(&e, "over MPI the file is mapped (each rank reads only its layers): no_mmap does not apply");
        goto fail;
    }
    GgufOpenOptions go = {.read = p->no_mmap, .progress = p->progress, .progress_user = p->progress_user};
    Gguf *g = gguf_open_opts(p->model_path, &go, &e);
    en->model = g ? model_from_gguf(g, &e) : NULL;
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
    en->n_ctx = n_ctx;
    en->n_batch = n_batch;
    en->n_seq_max = n_seq;
    en->params = *p; /* for a draft model; the strings are copied, the stages and the path not kept */
    snprintf(en->backend, sizeof en->backend, "%s", p->backend ? p->backend : "");
    snprintf(en->isa, sizeof en->isa, "%s", p->isa ? p->isa : "");
    snprintf(en->deltanet, sizeof en->deltanet, "%s", p->deltanet ? p->deltanet : "");
    en->params.backend = p->backend ? en->backend : NULL;
    en->params.isa = p->isa ? en->isa : NULL;
    en->params.deltanet = p->deltanet ? en->deltanet : NULL;
    en->params.model_path = NULL;
    en->params.stages = NULL;
    en->params.n_stages = 0;
    en->params.progress = NULL;
    en->params.cache_policy = NULL; /* not kept: a draft model takes the default */
    if (seqstate_check_kv(en->model, en->kv_k, en->kv_v, &e) || engine_cache_open(en, p, &e) ||
        (p->mpi && dl_mpi_size() > 1 ? pipe_open(en, p, isa, algo, &e) : stages_open(en, p, isa, algo, &e)) ||
        engine_cache_attach(en, &e))
        goto fail;
    en->kv_k = en->st[en->n_st - 1].be->kv_k, en->kv_v = en->st[en->n_st - 1].be->kv_v; /* a device stage keeps F32 */
    en->info = (DlModelInfo){c->arch_name,
                             c->name,
                             c->n_vocab,
                             c->n_ctx_train,
                             n_ctx,
                             c->n_layer,
                             c->n_embd,
                             gguf_file_size(en->model->gguf),
                             0,
                             seqstate_bytes(en->model, n_ctx, en->st[0].be->kv_k, en->st[0].be->kv_v),
                             model_decode_bytes(en->model),
                             forward_ops_name(en->st[0].fw),
                             forward_n_threads(en->st[0].fw),
                             arith_name(mode),
                             kv_format_name(en->kv_k),
                             kv_format_name(en->kv_v)};
    for (int64_t i = 0; i < gguf_n_tensors(en->model->gguf); i++) en->info.weight_bytes += gguf_tensor(en->model->gguf, i)->nbytes;
    return en;
fail:
    fail(err, &e);
    dl_engine_close(en);
    return NULL;
}

void dl_engine_close(DlEngine *e) {
    if (!e) return;
    spec_engine_free(e);
    e->runner->close(e);
    for (int s = 0; s < e->n_st; s++) {
        forward_free(e->st[s].fw);
        backend_destroy(e->st[s].be);
    }
    free(e->hidden);
    engine_cache_close(e);
    tokenizer_free(e->tok);
    model_free(e->model);
    free(e);
}

const DlModelInfo *dl_engine_info(const DlEngine *e) { return &e->info; }

int dl_engine_prefetch(DlEngine *e, bool lock, DlError *err) {
    Err er = {{0}};
    for (int s = 0; s < e->n_st; s++)
        if (e->st[s].be->vt->make_resident(e->st[s].be, lock, &er)) return fail(err, &er);
    return e->runner->prefetch(e, lock, &er) ? fail(err, &er) : 0;
}

void dl_engine_profile(DlEngine *e, bool on) {
    for (int s = 0; s < e->n_st; s++) forward_profile_enable(e->st[s].fw, on);
    DlCacheStats cs;
    if (on) dl_engine_cache_stats(e, &cs, true); /* the cache's counters cover the same passes */
}

int dl_engine_device_counts(DlEngine *e, DlDeviceCounts *out, bool reset) {
    memset(out, 0, sizeof *out);
    bool any = false;
    for (int s = 0; s < e->n_st; s++) {
        DevCounts c;
        if (!forward_device_counts(e->st[s].fw, &c, reset)) continue;
        any = true;
        out->passes = c.passes > out->passes ? c.passes : out->passes; /* stages run the same passes */
        out->tokens = c.tokens > out->tokens ? c.tokens : out->tokens;
        out->dispatches += c.dispatches, out->barriers += c.barriers;
        out->layer_steps += c.layer_steps, out->layer_dispatches += c.layer_dispatches;
        out->layer_barriers += c.layer_barriers, out->host_s += c.host_s;
        out->recorded += c.recorded, out->replays += c.replays;
    }
    return any ? 0 : -1;
}

int dl_engine_profile_report(const DlEngine *e, char *buf, size_t cap) {
    size_t n = 0;
    for (int s = 0; s < e->n_st; s++) {
        if (e->n_st > 1)
            n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, "stage %d: layers [%d, %d) on %s\n", s,
                                  e->st[s].l0, e->st[s].l1, e->st[s].be->name);
        n += (size_t)forward_profile_report(e->st[s].fw, buf + (n < cap ? n : cap), n < cap ? cap - n : 0);
    }
    n += (size_t)engine_cache_report((DlEngine *)e, buf + (n < cap ? n : cap), n < cap ? cap - n : 0);
    return (int)n;
}
