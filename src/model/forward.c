/* forward.c — the forward pass, written once against the backend (backend/backend.h), in three parts:
 *   embed:   hidden rows ← the token embeddings
 *   layers:  for each block l in [l0, l1):  x += Mixer(RMSNorm(x));  x += FFN(RMSNorm(x))
 *            (the mixer is a delta-net layer or gated attention, layer_*.c)
 *   head:    the final norm of the rows that want logits and the LM head (optionally a vocabulary range)
 * between forward_begin (checks the batch, uploads ids and positions) and forward_end (waits for the
 * backend, advances the states). forward_batch runs the three in a row; a pipeline stage runs a layer range
 * on hidden rows it received; forward_keep cuts a tentative batch back to its first k tokens. All buffers are
 * allocated in forward_new for max_batch rows; nothing after that allocates. The buffers that live only inside a
 * delta-net mixer, an attention mixer or an FFN share one region (a layer's mixer and its FFN never overlap, and
 * each writes its result to tmp): b1's buffers for 512 rows 90 → 57 MB (docs/MODEL.md, "Memory"). */
#include "model/forward_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* Where a buffer lives: the whole pass, or only inside one kind of layer part (those share a region) */
enum { LIVE_PASS = 0, LIVE_DELTANET, LIVE_ATTENTION, LIVE_FFN, LIVE_COUNT };

typedef struct BufSpec {
    BView *view;
    size_t elems; /* per row unless per_batch */
    bool per_batch; /* elems is the total, not per row */
    int live;       /* LIVE_* */
} BufSpec;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static size_t spec_bytes(const BufSpec *s, size_t rows) { return ALIGN64((s->per_batch ? 1 : rows) * s->elems * 4); }

int deltanet_algo_parse(const char *s, DeltaNetAlgo *out, Err *err) {
    if (!s || !*s || strcmp(s, "auto") == 0) *out = DELTANET_AUTO;
    else if (strcmp(s, "recurrent") == 0) *out = DELTANET_RECURRENT;
    else if (strcmp(s, "chunked") == 0) *out = DELTANET_CHUNKED;
    else return err_set(err, "delta-net algorithm must be auto, recurrent or chunked, not '%s'", s);
    return 0;
}

static int alloc_host_idx(Forward *f, size_t R, size_t kE, size_t nE, Err *err) {
    HostIdx *h = &f->hx;
    const size_t ints = 7 * R + 2 * R * kE + 2 * R * kE + 3 * nE;
    uint8_t *p = calloc(1, ints * sizeof(int32_t) + nE * sizeof *h->data + 64);
    if (!p) return err_set(err, "out of memory");
    f->host_mem = p;
    h->data = (const void *(*)[3])p;
    int32_t *q = (int32_t *)(p + nE * sizeof *h->data);
    h->ids = q, q += R;
    h->pos = q, q += R;
    h->hrows = q, q += R;
    h->kvrow = q, q += R;
    h->thw = q, q += 3 * R;
    h->es = q, q += R * kE;
    h->pes = q, q += R * kE;
    h->gs = q, q += 2 * R * kE;
    h->count = q, q += nE;
    h->start = q, q += nE;
    h->used = q;
    return 0;
}

Forward *forward_new(const Model *m, const ForwardOptions *o, Err *err) {
    const ModelConfig *c = &m->cfg;
    ForwardOptions opt = *o;
    if (opt.max_batch < 1 || opt.max_batch > 65536)
        return err_set(err, "batch size %d out of range [1, 65536]", opt.max_batch), NULL;
    if (opt.max_seqs < 1) opt.max_seqs = 1;
    if (opt.max_ctx < 1 || opt.max_ctx > (1 << 24))
        return err_set(err, "context size %d out of range [1, %d]", opt.max_ctx, 1 << 24), NULL;
    if (opt.max_seqs > opt.max_batch) opt.max_seqs = opt.max_batch;
    Forward *f = calloc(1, sizeof *f);
    if (!f) return err_set(err, "out of memory"), NULL;
    f->m = m;
    f->be = opt.be;
    if (!f->be) {
        if (!(f->be = backend_create(&opt.backend, err))) {
            free(f);
            return NULL;
        }
        f->own_be = true;
        if (f->be->vt->bind(f->be, m->weights, m->n_weights, err)) {
            forward_free(f);
            return NULL;
        }
    }
    f->max_batch = opt.max_batch;
    f->graph_cap = -1;
    f->rows_on = f->be->vt->graph_capture != NULL;
    f->max_seqs = opt.max_seqs;
    f->max_ctx = opt.max_ctx;
    f->algo = opt.algo;
    /* AUTO: the default mode keeps llama.cpp's recurrent form (bit-identical results; the chunked form would
     * save ~1% of a prefill, docs/KERNELS.md); the exact mode takes the chunked form from 32 tokens, where
     * it is 1.2-1.4x faster */
    f->chunk_min_tokens = f->be->mode == MATMUL_EXACT ? 32 : 1 << 30;
    if (f->be->dn_chunk_min > 0) f->chunk_min_tokens = f->be->dn_chunk_min; /* a device's own measurement */

    const size_t E = (size_t)c->n_embd, conv = (size_t)c->ssm_conv_dim, val = (size_t)c->ssm_d_inner;
    const size_t Hv = (size_t)c->ssm_n_v_head, key = (size_t)c->ssm_key_dim;
    const size_t HD = (size_t)c->n_head * (size_t)c->head_dim, KVD = (size_t)c->n_head_kv * (size_t)c->head_dim;
    const size_t kE = c->moe ? (size_t)c->n_expert_used : 0, nE = c->moe ? (size_t)c->n_expert : 0;
    const size_t maxF = (size_t)max64(max64(c->n_ff, c->n_ff_shexp), c->n_ff_exp);
    bool legacy = false;
    for (int il = 0; il < c->n_layer; il++) legacy |= m->layers[il].legacy;
    const size_t R = (size_t)opt.max_batch;
    Bufs *b = &f->b;
    /* a backend that cannot write into the caller's memory gets the logits in a staging buffer; one that
     * groups experts itself (moe_ffn) gets the grouped activations and its work area */
    BView probe;
    float probe_host[1];
    const bool wraps = f->be->vt->wrap_host(f->be, probe_host, sizeof probe_host, &probe);
    const bool fused_moe = c->moe && f->be->vt->moe_ffn;
    /* logits staging: the rows of a multi-sequence batch (at most max_seqs), or for a device, chunks of the
     * rows that want logits (forward_head runs the head over them in turn) */
    int head_rows = opt.max_seqs > 1 ? opt.max_seqs : 0;
    const int chunk = opt.max_batch < 32 ? opt.max_batch : 32;
    if (!wraps && head_rows < chunk) head_rows = chunk;
    const size_t Fe = (size_t)c->n_ff_exp, moe_work = fused_moe ? MOE_WORK_INTS(R, kE, nE) : 0;
    enum { P = LIVE_PASS, D = LIVE_DELTANET, A = LIVE_ATTENTION, F = LIVE_FFN };
    BufSpec specs[] = {
        {&b->x, E, false, P},         {&b->h, E, false, P},         {&b->tmp, E, false, P},
        {&b->tmp2, c->moe ? E : 0, false, P},                       {&b->proj, legacy ? conv + val : 0, false, D},
        {&b->mixed, conv, false, D},  {&b->z, val, false, D},       {&b->ba, 2 * Hv, false, D},
        {&b->conv_y, conv, false, D}, {&b->q, key, false, D},       {&b->k, key, false, D},
        {&b->v, val, false, D},       {&b->g, Hv, false, D},        {&b->beta, Hv, false, D},
        {&b->o, val, false, D},       {&b->on, val, false, D},      {&b->qg, 2 * HD, false, A},
        {&b->qa, HD, false, A},       {&b->ka, KVD, false, A},      {&b->va, KVD, false, A},
        {&b->ao, HD, false, A},       {&b->fg, maxF, false, F},     {&b->fu, maxF, false, F},
        /* routing: the predicted selection (pes, pew; fwd_predict_experts) outlives the FFN */
        {&b->rl, nE, false, P},       {&b->ew, kE, false, P},       {&b->es, kE, false, P},
        {&b->pes, kE, false, P},      {&b->pew, kE, false, P},
        {&b->gidx, kE, false, P},     {&b->sidx, kE, false, P},     {&b->gx, c->moe ? E : 0, false, F},
        {&b->eo, kE * E, false, F},   {&b->sgate, 1, false, P},
        {&b->mg, fused_moe ? kE * Fe : 0, false, F},                {&b->mu, fused_moe ? kE * Fe : 0, false, F},
        {&b->mwork, moe_work, true, P},
        {&b->ids, 1, false, P},       {&b->pos, 1, false, P},       {&b->hrows, 1, false, P},
        {&b->kvrow, 1, false, P},     {&b->thw, 3, false, P},
    };
    const size_t n_specs = sizeof specs / sizeof specs[0];
    /* offsets: the pass's buffers first, then one region that each part's buffers take from its start */
    size_t used[LIVE_COUNT] = {0}, off[sizeof specs / sizeof specs[0]];
    for (size_t i = 0; i < n_specs; i++) {
        off[i] = used[specs[i].live];
        used[specs[i].live] += spec_bytes(&specs[i], R);
    }
    size_t region = 0;
    for (int p = LIVE_PASS + 1; p < LIVE_COUNT; p++) region = used[p] > region ? used[p] : region;
    const size_t total = used[LIVE_PASS] + region;
    const BackendSizes sizes = {
        .max_rows = (int)R,
        /* widest activation row any matmul sees, for the quantized-activation scratch */
        .max_cols = max64(max64(max64((int64_t)E, (int64_t)val), max64((int64_t)HD, (int64_t)maxF)),
                          m->n_mtp ? 2 * (int64_t)E : 0), /* an MTP block's eh_proj reads [embedding | hidden] */
        .max_ctx = opt.max_ctx,
        .head_dim = c->head_dim,
        .gqa_group = c->n_head / c->n_head_kv,
        .d_k = c->ssm_d_state,
        .d_v = c->ssm_head_v_dim,
    };
    if (f->be->vt->reserve(f->be, &sizes, err) || alloc_host_idx(f, R, kE, nE, err) ||
        !(f->row0 = calloc((size_t)opt.max_seqs, sizeof *f->row0))) {
        if (!f->row0) err_set(err, "out of memory");
        forward_free(f);
        return NULL;
    }
    if (!(f->mem = f->be->vt->alloc(f->be, total, err))) {
        err_prefix(err, "activation buffers for batch %d", opt.max_batch);
        forward_free(f);
        return NULL;
    }
    if (head_rows && forward_reserve_out(f, head_rows, err)) {
        forward_free(f);
        return NULL;
    }
    for (size_t i = 0; i < n_specs; i++) {
        const size_t at = (specs[i].live == LIVE_PASS ? 0 : used[LIVE_PASS]) + off[i];
        *specs[i].view = (BView){spec_bytes(&specs[i], R) ? f->mem : NULL, at};
    }
    return f;
}

int forward_reserve_out(Forward *f, int rows, Err *err) {
    if (rows <= f->max_out) return 0;
    BBuf *mem = f->be->vt->alloc(f->be, sizeof(float) * (size_t)rows * (size_t)f->m->cfg.n_vocab, err);
    if (!mem) return err_prefix(err, "logits staging for %d rows", rows), -1;
    if (f->head_mem) f->be->vt->free(f->be, f->head_mem);
    f->head_mem = mem;
    f->b.head = (BView){mem, 0};
    f->max_out = rows;
    return 0;
}

void forward_free(Forward *f) {
    if (!f) return;
    if (f->head_mem) f->be->vt->free(f->be, f->head_mem);
    if (f->mem) f->be->vt->free(f->be, f->mem);
    if (f->own_be) backend_destroy(f->be);
    free(f->host_mem);
    free(f->row0);
    free(f->dump_host);
    free(f);
}

Backend *forward_backend(const Forward *f) { return f->be; }
void forward_set_dump(Forward *f, Dump *d) { f->dump = d; }
const char *forward_ops_name(const Forward *f) { return f->be->name; }
int forward_n_threads(const Forward *f) { return f->be->n_threads; }
int forward_rows(const Forward *f) { return f->rows; }
BView forward_hidden(const Forward *f) { return f->b.x; }

void forward_set_expert_provider(Forward *f, const ExpertProvider *p) {
    f->has_provider = p != NULL;
    if (p) f->provider = *p;
}

int forward_set_head_range(Forward *f, int v0, int v1, Err *err) {
    const int V = f->m->cfg.n_vocab;
    if (v0 == 0 && (v1 == 0 || v1 == V)) {
        f->v0 = f->v1 = 0;
        return 0;
    }
    if (v0 < 0 || v0 >= v1 || v1 > V || v0 % 8 || (v1 % 8 && v1 != V))
        return err_set(err, "head range [%d, %d) of a %d-token vocabulary (multiples of 8, or up to the end)", v0, v1, V);
    f->v0 = v0;
    f->v1 = v1;
    return 0;
}

DeltaNetAlgo forward_deltanet_algo(const Forward *f, int T) {
    if (f->algo != DELTANET_AUTO) return f->algo;
    return T >= f->chunk_min_tokens ? DELTANET_CHUNKED : DELTANET_RECURRENT;
}

void fwd_dump_view(Forward *f, const char *name, int il, BView v, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                   bool ints) {
    const size_t n = (size_t)(ne0 * ne1 * ne2 * ne3);
    if (n > f->dump_cap) { /* dumps are a debugging path: growing the staging here is fine */
        float *p = realloc(f->dump_host, n * sizeof *p);
        if (!p) return;
        f->dump_host = p;
        f->dump_cap = n;
    }
    f->be->vt->download(f->be, f->dump_host, v, n * 4);
    if (ints) /* int32 selections are dumped as floats, as llama.cpp writes them */
        for (size_t i = 0; i < n; i++) {
            int32_t x;
            memcpy(&x, &f->dump_host[i], 4);
            f->dump_host[i] = (float)x;
        }
    dump_tensor(f->dump, name, il, f->dump_host, ne0, ne1, ne2, ne3);
}

void fwd_dump_dn_state(Forward *f, const char *name, int il, BView v, int Dk, int Dv, int Hv) {
    if (backend_state_layout(f->be) != STATE_FUSED) {
        fwd_dump_view(f, name, il, v, Dk, Dv, Hv, 1, false);
        return;
    }
    const size_t n = (size_t)Hv * Dv * Dk;
    float *fu = malloc(DELTANET_FUSED_FLOATS(Hv, Dk, Dv) * sizeof *fu), *st = malloc(n * sizeof *st);
    if (fu && st) {
        f->be->vt->download(f->be, fu, v, DELTANET_FUSED_FLOATS(Hv, Dk, Dv) * 4);
        deltanet_fused_to_state(fu, st, Hv, Dk, Dv);
        dump_tensor(f->dump, name, il, st, Dk, Dv, Hv, 1);
    }
    free(fu), free(st);
}

/* ---- the parts -------------------------------------------------------------------------------------------- */

int forward_begin(Forward *f, const BatchSeq *seqs, int n_seqs, Err *err) {
    const ModelConfig *c = &f->m->cfg;
    if (n_seqs < 1 || n_seqs > f->max_seqs)
        return err_set(err, "a batch of %d sequences (this context takes at most %d)", n_seqs, f->max_seqs);
    int rows = 0, n_out = 0;
    for (int s = 0; s < n_seqs; s++) {
        const BatchSeq *q = &seqs[s];
        if (q->n_tokens < 1) return err_set(err, "empty token list for sequence %d of the batch", s);
        if (q->n_out < 0 || q->n_out > q->n_tokens || (q->n_out && !q->logits))
            return err_set(err, "bad logits request (%d rows of %d tokens)", q->n_out, q->n_tokens);
        if (q->n_tokens > f->max_batch - rows)
            return err_set(err, "batch of more than %d tokens (the batch size)", f->max_batch);
        if (q->state->n_ctx > f->max_ctx)
            return err_set(err, "a sequence of context %d on a forward pass sized for %d", q->state->n_ctx, f->max_ctx);
        if (q->state->be != f->be) return err_set(err, "a sequence state of another backend");
        if (q->n_tokens > q->state->n_ctx - q->state->n_past)
            return err_set(err, "context full: %d tokens + %d new exceed the context size %d", q->state->n_past,
                           q->n_tokens, q->state->n_ctx);
        if (q->tentative && (q->state->rb.n > 0 ? q->state->rb.n : 0) + q->n_tokens > q->state->rb.cap)
            return err_set(err, "a tentative batch of %d tokens (the state has rollback room for %d)",
                           (q->state->rb.n > 0 ? q->state->rb.n : 0) + q->n_tokens, q->state->rb.cap);
        if (q->tokens)
            for (int t = 0; t < q->n_tokens; t++)
                if (q->tokens[t] < 0 || q->tokens[t] >= c->n_vocab)
                    return err_set(err, "token id %d out of range [0, %d)", q->tokens[t], c->n_vocab);
        for (int r = 0; r < s; r++)
            if (seqs[r].state == q->state) return err_set(err, "the same sequence twice in one batch");
        f->row0[s] = rows;
        rows += q->n_tokens;
        n_out += q->n_out;
    }
    if (n_seqs > 1 && n_out > f->max_out)
        return err_set(err, "%d logit rows requested from a multi-sequence batch (at most %d)", n_out, f->max_out);
    f->seqs = seqs;
    f->n_seqs = n_seqs;
    f->rows = rows;
    f->n_out = n_out;
    f->failed = false;
    err_clear(&f->err);
    HostIdx *h = &f->hx;
    f->thw_on = false;
    for (int s = 0, r = 0; s < n_seqs; s++)
        for (int t = 0; t < seqs[s].n_tokens; t++, r++) {
            h->ids[r] = seqs[s].tokens ? seqs[s].tokens[t] : 0;
            h->pos[r] = seqs[s].state->n_past + seqs[s].state->pos_delta + t;
            h->kvrow[r] = seqs[s].state->n_past + t;
        }
    f->thw_on = f->mm.pos_thw != NULL;
    if (f->thw_on) /* multi-axis positions (images), uploaded to b.thw below for the rope (RopeArgs.thw) */
        for (int s = 0, r = 0; s < n_seqs; s++)
            for (int t = 0; t < seqs[s].n_tokens; t++, r++)
                for (int k = 0; k < 3; k++) h->thw[3 * r + k] = s == 0 ? f->mm.pos_thw[3 * t + k] : h->pos[r];
    Backend *be = f->be;
    if (f->prof.enabled) fwd_prof_begin(f);
    fwd_count_begin(f);
    be->vt->begin(be);
    be->vt->upload(be, f->b.ids, h->ids, sizeof(int32_t) * (size_t)rows);
    be->vt->upload(be, f->b.pos, h->pos, sizeof(int32_t) * (size_t)rows);
    if (f->rows_on) be->vt->upload(be, f->b.kvrow, h->kvrow, sizeof(int32_t) * (size_t)rows);
    if (f->thw_on) be->vt->upload(be, f->b.thw, h->thw, 3 * sizeof(int32_t) * (size_t)rows);
    if (f->dump && n_seqs == 1) dump_begin_ubatch(f->dump, seqs[0].state->n_past, rows);
    return 0;
}

void forward_embed(Forward *f) {
    const Model *m = f->m;
    double t0 = fwd_phase_start(f);
    f->be->vt->get_rows(f->be, m->tok_embd, f->b.ids, f->rows, f->b.x);
    const int E = m->cfg.n_embd;
    if (f->mm.embd) /* image rows (forward_set_mm) replace their token's embedding */
        for (int t = 0; t < f->seqs[0].n_tokens; t++)
            if (!f->mm.embd_row || f->mm.embd_row[t])
                f->be->vt->upload(f->be, bv_f32(f->b.x, (f->row0[0] + t) * (int64_t)E), f->mm.embd + (size_t)t * E,
                                  sizeof(float) * (size_t)E);
    fwd_dump(f, m->cfg.arch == ARCH_QWEN3NEXT ? "model.embed_tokens" : "model.input_embed", -1, f->b.x, m->cfg.n_embd,
             f->rows, 1, 1);
    fwd_phase(f, PH_EMBED, &t0);
}

/* every product of b->h takes the folded norm (MatArgs.x_norm) in all three of a block's matmul wrappers
 * (fwd_matmul, fwd_matmul_pair, fwd_gate_up): no expert provider (its experts arrive per product) */
static bool matmul_only_h(const Forward *f) { return !f->has_provider; }

void forward_layers(Forward *f, int l0, int l1) {
    const Model *m = f->m;
    const ModelConfig *c = &m->cfg;
    Backend *be = f->be;
    Bufs *b = &f->b;
    const int rows = f->rows, E = c->n_embd;
    const VecSet rs = vs_rows(rows, E);
    ASSERT(l0 >= 0 && l0 <= l1 && l1 <= c->n_layer + m->n_mtp); /* MTP blocks follow the trunk */
    for (int s = 0; s < f->n_seqs; s++) ASSERT(f->seqs[s].state->l0 <= l0 && l1 <= f->seqs[s].state->l1);
    const bool predict = f->has_provider && f->provider.predict && f->provider.prefetch && c->moe;
    if (predict && l0 < l1) fwd_predict_experts(f, b, l0); /* the first layer's experts, from the stream as it comes */
    uint64_t d0 = 0, b0 = 0;
    fwd_count_layers(f, &d0, &b0, 0);
    for (int il = l0; il < l1; il++) {
        /* the norms folded into the products where every reader of b->h is one (rows within the backend's
         * limit, nothing dumped; the FFN's only when dense) */
        const bool fold = rows <= be->fold_norm_rows && !fwd_dumping(f, il) && matmul_only_h(f);
        if (fold) f->hn = m->layers[il].attn_norm, f->hn_eps = c->rms_eps;
        else be->vt->rms_norm(be, b->x, b->h, m->layers[il].attn_norm, &rs, c->rms_eps);
        fwd_dump(f, "attn_norm", il, b->h, E, rows, 1, 1);
        f->res_done = false;
        if (m->layers[il].recurrent) layer_deltanet(f, b, il);
        else layer_attention(f, b, il);
        if (!f->res_done) be->vt->add(be, b->x, b->tmp, (int64_t)rows * E);
        fwd_dump(f, "attn_residual", il, b->x, E, rows, 1, 1);
        f->hn = NULL;
        if (fold && !c->moe) f->hn = m->layers[il].post_norm, f->hn_eps = c->rms_eps;
        else be->vt->rms_norm(be, b->x, b->h, m->layers[il].post_norm, &rs, c->rms_eps);
        fwd_dump(f, "attn_post_norm", il, b->h, E, rows, 1, 1);
        f->res_done = false;
        layer_ffn(f, b, il);
        fwd_dump(f, "ffn_out", il, b->tmp, E, rows, 1, 1);
        f->hn = NULL;
        if (!f->res_done) be->vt->add(be, b->x, b->tmp, (int64_t)rows * E);
        fwd_dump(f, "l_out", il, b->x, E, rows, 1, 1);
        if (predict && il + 1 < l1 && !f->failed) fwd_predict_experts(f, b, il + 1);
    }
    fwd_count_layers(f, &d0, &b0, l1 - l0);
}

void fwd_head(Forward *f, const Weight *norm, const Weight *out, int v0, int v1) {
    const Model *m = f->m;
    Backend *be = f->be;
    Bufs *b = &f->b;
    const int64_t E = m->cfg.n_embd;
    const int V = v1 ? v1 - v0 : m->cfg.n_vocab;
    double t0 = fwd_phase_start(f);
    /* the rows that want logits, gathered and normed into h */
    int n = 0;
    for (int s = 0; s < f->n_seqs; s++) {
        const BatchSeq *q = &f->seqs[s];
        for (int t = q->n_tokens - q->n_out; t < q->n_tokens; t++) f->hx.hrows[n++] = f->row0[s] + t;
    }
    if (n == 0) return;
    be->vt->upload(be, b->hrows, f->hx.hrows, sizeof(int32_t) * (size_t)n);
    be->vt->gather_rows(be, b->h, b->x, b->hrows, n, (int)E);
    const VecSet hs = vs_rows(n, (int)E);
    be->vt->rms_norm(be, b->h, b->h, norm, &hs, m->cfg.rms_eps);
    fwd_dump(f, "result_norm", -1, b->h, E, n, 1, 1);
    MatArgs a = {out, -1, NULL, v0, v1, b->h, b->head, n, NULL, 0};
    BView direct;
    const bool one = f->n_seqs == 1;
    if (one && be->vt->wrap_host(be, f->seqs[0].logits, sizeof(float) * (size_t)n * V, &direct)) {
        a.y = direct; /* straight into the caller's buffer */
        f->be->vt->matmul(be, &a);
    } else {
        /* several sequences (or a device): the head over the staging rows (all of a multi-sequence batch's at
         * once: one pass over the head weights; a device's in chunks), then each sequence's rows out */
        for (int r0 = 0; r0 < n; r0 += f->max_out) {
            a.x = bv_f32(b->h, (int64_t)r0 * E);
            a.T = n - r0 < f->max_out ? n - r0 : f->max_out;
            f->be->vt->matmul(be, &a);
            if (r0 + a.T >= n) fwd_graph_end(f); /* a pass being recorded ends before the last downloads */
            fwd_head_download(f, r0, (int)a.T, V);
        }
    }
    if (fwd_dumping(f, -1)) dump_tensor(f->dump, "result_output", -1, f->seqs[0].logits, V, n, 1, 1);
    fwd_phase(f, PH_HEAD, &t0);
}

void fwd_head_download(Forward *f, int r0, int T, int V) {
    for (int s = 0, r = 0; s < f->n_seqs; s++) { /* rows [r, r + n_out) are sequence s's */
        const BatchSeq *q = &f->seqs[s];
        const int lo = r > r0 ? r : r0, hi = r + q->n_out < r0 + T ? r + q->n_out : r0 + T;
        if (lo < hi)
            f->be->vt->download(f->be, (float *)q->logits + (size_t)(lo - r) * V, bv_f32(f->b.head, (int64_t)(lo - r0) * V),
                                sizeof(float) * (size_t)(hi - lo) * V);
        r += q->n_out;
    }
}

void forward_head(Forward *f) { fwd_head(f, f->m->output_norm, f->m->output, f->v0, f->v1); }

void forward_set_mm(Forward *f, const BatchMM *mm) {
    if (mm) f->mm = *mm;
    else memset(&f->mm, 0, sizeof f->mm);
}

int forward_end(Forward *f, Err *err) {
    Err e = {{0}};
    memset(&f->mm, 0, sizeof f->mm); /* image rows are for one batch */
    int rc = f->be->vt->submit(f->be, &e);
    if (rc == 0) rc = f->be->vt->wait(f->be, &e);
    if (f->prof.enabled) fwd_prof_end(f);
    fwd_count_end(f);
    if (f->failed) return err_set(err, "%s", f->err.msg);
    if (rc) return err_set(err, "%s", e.msg);
    for (int s = 0; s < f->n_seqs; s++) {
        SeqState *st = f->seqs[s].state;
        if (f->seqs[s].tentative && st->rb.n > 0) { /* extends the unresolved tentative batch */
            st->rb.n += f->seqs[s].n_tokens;
        } else if (f->seqs[s].tentative) {
            st->rb.n = f->seqs[s].n_tokens;
            st->rb.pos0 = st->n_past;
        } else {
            st->rb.n = -1;
        }
        st->n_past += f->seqs[s].n_tokens;
    }
    return 0;
}

void forward_hidden_read(Forward *f, float *dst) {
    f->be->vt->download(f->be, dst, f->b.x, sizeof(float) * (size_t)f->rows * (size_t)f->m->cfg.n_embd);
}

void forward_hidden_write(Forward *f, const float *src) {
    f->be->vt->upload(f->be, f->b.x, src, sizeof(float) * (size_t)f->rows * (size_t)f->m->cfg.n_embd);
}

int forward_batch(Forward *f, const BatchSeq *seqs, int n_seqs, Err *err) {
    for (int s = 0; s < n_seqs; s++)
        if (!seqs[s].tokens) return err_set(err, "no tokens for sequence %d of the batch", s);
    if (forward_begin(f, seqs, n_seqs, err)) return -1;
    forward_model(f);
    return forward_end(f, err);
}

int forward_run(Forward *f, SeqState *s, const int32_t *tokens, int T, float *logits, int n_out, Err *err) {
    BatchSeq seq = {s, tokens, T, n_out, logits, false};
    return forward_batch(f, &seq, 1, err);
}
