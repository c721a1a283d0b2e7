/* engine.c — implements the engine and session parts of include/deltallm.h on top of model/ (forward pass,
 * state) and tokenizer/. One Forward (activation buffers, thread pool) is shared by every session of an
 * engine, which is why compute calls must not overlap. */
#include "deltallm.h"

#include "engine/engine_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
    DeltaNetAlgo algo = DELTANET_AUTO;
    if (p->deltanet && strcmp(p->deltanet, "recurrent") == 0) algo = DELTANET_RECURRENT;
    else if (p->deltanet && strcmp(p->deltanet, "chunked") == 0) algo = DELTANET_CHUNKED;
    else if (p->deltanet && strcmp(p->deltanet, "auto") != 0) {
        err_set(&e, "delta-net algorithm must be auto, recurrent or chunked, not '%s'", p->deltanet);
        goto fail;
    }
    ForwardOptions fo = {.max_batch = n_batch,
                         .max_seqs = n_seq,
                         .max_ctx = n_ctx,
                         .mode = p->exact ? MATMUL_EXACT : MATMUL_GGML,
                         .algo = algo,
                         .n_threads = p->n_threads};
    en->fw = forward_new(en->model, &fo, &e);
    if (!en->fw) goto fail;
    /* packed copies of the matrices the fast kernels read faster that way (bit-identical results);
     * DELTALLM_PACK=0 keeps the file's layout (for measurements) */
    const char *pk = getenv("DELTALLM_PACK");
    if (!p->exact && strcmp(forward_ops_name(en->fw), "ref") != 0 && !(pk && strcmp(pk, "0") == 0) &&
        model_pack(en->model, &e))
        goto fail;
    en->n_ctx = n_ctx;
    en->n_batch = n_batch;
    en->n_seq_max = n_seq;
    const Gguf *g = en->model->gguf;
    uint64_t weights = 0, decode = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        weights += t->nbytes;
        if (strcmp(t->name, "token_embd.weight") == 0) {
            decode += en->model->tied ? t->nbytes : t->nbytes / (uint64_t)c->n_vocab; /* one row, or the tied head */
        } else if (strstr(t->name, "_exps.")) {
            decode += t->nbytes / (uint64_t)c->n_expert * (uint64_t)c->n_expert_used;
        } else if (strncmp(t->name, "blk.", 4) == 0 && atoi(t->name + 4) >= c->n_layer) {
            continue; /* MTP blocks are not run */
        } else {
            decode += t->nbytes;
        }
    }
    en->info = (DlModelInfo){c->arch_name,
                             c->name,
                             c->n_vocab,
                             c->n_ctx_train,
                             n_ctx,
                             c->n_layer,
                             c->n_embd,
                             gguf_file_size(g),
                             weights,
                             seqstate_recurrent_bytes(en->model) +
                                 (size_t)n_ctx * 2 * (size_t)c->n_head_kv * (size_t)c->head_dim * 4 * (size_t)c->n_attention,
                             decode,
                             forward_ops_name(en->fw),
                             forward_n_threads(en->fw)};
    return en;
fail:
    fail(err, &e);
    dl_engine_close(en);
    return NULL;
}

void dl_engine_close(DlEngine *e) {
    if (!e) return;
    forward_free(e->fw);
    tokenizer_free(e->tok);
    model_free(e->model);
    free(e);
}

const DlModelInfo *dl_engine_info(const DlEngine *e) { return &e->info; }

int dl_engine_prefetch(DlEngine *e, bool lock, DlError *err) {
    Err er = {{0}};
    const Gguf *g = e->model->gguf;
    const long page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    /* packed matrices: their file pages only into the page cache, not the process (the embedding lookup
     * of a tied head still reads some) */
    for (int i = 0; i < e->model->n_packed; i++) {
        const uintptr_t b0 = (uintptr_t)e->model->packed[i].src & ~(uintptr_t)(page - 1);
        madvise((void *)b0, (uintptr_t)e->model->packed[i].src + e->model->packed[i].bytes - b0, MADV_WILLNEED);
    }
    for (int i = 0; i < gguf_n_splits(g); i++) {
        const void *base;
        size_t size;
        gguf_split_mapping(g, i, &base, &size);
        if (!base) continue;
        /* pages of matrices model_pack replaced are not needed: the packed copies are read instead */
        const uint8_t *b = base;
        const PackedRange *pr = e->model->packed;
        int k = 0; /* the first packed range (by address) that does not end before the page */
        size_t run = 0; /* bytes of needed pages before off, not yet locked */
        volatile uint8_t sink = 0;
        for (size_t off = 0; off <= size; off += (size_t)page) {
            const size_t n = size - off < (size_t)page ? size - off : (size_t)page;
            while (k < e->model->n_packed && (const uint8_t *)pr[k].src + pr[k].bytes <= b + off) k++;
            const bool packed = k < e->model->n_packed && b + off >= (const uint8_t *)pr[k].src &&
                                b + off + n <= (const uint8_t *)pr[k].src + pr[k].bytes;
            const bool need = off < size && !packed;
            if (need) {
                if (!run) madvise((void *)(b + off), size - off, MADV_WILLNEED);
                sink ^= ((const volatile uint8_t *)b)[off];
                run += n;
                continue;
            }
            if (run && lock && mlock(b + off - run, run) != 0)
                return err_set(&er, "cannot lock %zu MiB of weights in memory: %s (raise `ulimit -l`)", size >> 20,
                               strerror(errno)),
                       fail(err, &er);
            run = 0;
        }
        (void)sink;
    }
    if (lock && e->model->pack_arena && mlock(e->model->pack_arena, e->model->pack_bytes) != 0)
        return err_set(&er, "cannot lock %zu MiB of packed weights in memory: %s (raise `ulimit -l`)",
                       e->model->pack_bytes >> 20, strerror(errno)),
               fail(err, &er);
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
    s->state = seqstate_new(e->model, e->n_ctx, &er);
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
    free(s);
}

void dl_session_reset(DlSession *s) {
    seqstate_reset(s->state, s->engine->model);
    s->has_logits = false;
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
        seqs[i] = (BatchSeq){s[i]->state, &tokens[i], 1, 1, s[i]->logits};
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

static size_t kv_row_bytes(const ModelConfig *c) { return (size_t)c->n_head_kv * (size_t)c->head_dim * sizeof(float); }
static size_t conv_bytes(const ModelConfig *c) { return (size_t)c->ssm_conv_dim * (size_t)(c->ssm_d_conv - 1) * 4; }
static size_t ssm_bytes(const ModelConfig *c) {
    return (size_t)c->ssm_n_v_head * (size_t)c->ssm_head_v_dim * (size_t)c->ssm_d_state * 4;
}

static size_t snapshot_size_at(const DlSession *s, int n_past) {
    const ModelConfig *c = &s->engine->model->cfg;
    return sizeof(SnapHeader) + seqstate_recurrent_bytes(s->engine->model) +
           (size_t)n_past * 2 * kv_row_bytes(c) * (size_t)c->n_attention + sizeof(float) * (size_t)c->n_vocab;
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
    for (int il = 0; il < c->n_layer; il++) {
        if (c->recurrent[il]) {
            memcpy(p, st->conv[il], conv_bytes(c)), p += conv_bytes(c);
            memcpy(p, st->ssm[il], ssm_bytes(c)), p += ssm_bytes(c);
        } else {
            size_t kv = (size_t)st->n_past * kv_row_bytes(c);
            memcpy(p, st->k[il], kv), p += kv;
            memcpy(p, st->v[il], kv), p += kv;
        }
    }
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
    for (int il = 0; il < c->n_layer; il++) {
        if (c->recurrent[il]) {
            memcpy(st->conv[il], p, conv_bytes(c)), p += conv_bytes(c);
            memcpy(st->ssm[il], p, ssm_bytes(c)), p += ssm_bytes(c);
        } else {
            size_t kv = (size_t)h.n_past * kv_row_bytes(c);
            memcpy(st->k[il], p, kv), p += kv;
            memcpy(st->v[il], p, kv), p += kv;
        }
    }
    memcpy(s->logits, p, sizeof(float) * (size_t)c->n_vocab);
    st->n_past = h.n_past;
    s->has_logits = h.has_logits != 0;
    return 0;
}

int dl_session_copy(DlSession *dst, const DlSession *src, DlError *err) {
    Err e = {{0}};
    if (dst->engine != src->engine) return err_set(&e, "sessions of different engines"), fail(err, &e);
    seqstate_copy(dst->state, src->state, src->engine->model);
    memcpy(dst->logits, src->logits, sizeof(float) * (size_t)src->engine->info.n_vocab);
    dst->has_logits = src->has_logits;
    return 0;
}
