/* state.c — per-sequence state as a table of segments (model.h): per recurrent layer its conv window and
 * delta-net state, per attention layer its K and V caches, for a range of layers, in one backend
 * allocation (K and V each in the backend's type for it: F32, F16, Q8_0 or Q4_0, Backend.kv_k / kv_v).
 * Saving, restoring and copying walk the table (the engine's snapshots and the server's checkpoints use
 * it), and the rollback room for tentative batches is allocated here. */
#include "model/model.h"

#include "gguf/format.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

static size_t conv_floats(const ModelConfig *c) { return (size_t)c->ssm_conv_dim * (size_t)(c->ssm_d_conv - 1); }
/* the delta-net state: [n_v_head][d_v][d_k], or the fused form's layout, which adds the chunk's pending keys
 * and updates and two floats per head (ops.h); every arithmetic gets the larger size */
static size_t ssm_floats(const ModelConfig *c) {
    return DELTANET_FUSED_FLOATS(c->ssm_n_v_head, c->ssm_d_state, c->ssm_head_v_dim);
}
static int64_t kv_row_values(const ModelConfig *c) { return (int64_t)c->n_head_kv * c->head_dim; }
/* floats per token of a rollback log: conv input, q | k | v, g and β */
static size_t log_floats(const ModelConfig *c) { return 2 * (size_t)c->ssm_conv_dim + 2 * (size_t)c->ssm_n_v_head; }

/* The segments of layer il: bytes of the first and second (conv and ssm, or K and V) and their bytes per token
 * (0 for the recurrent ones); K and V in the formats kv_k and kv_v. */
static void layer_segs(const ModelConfig *c, int il, int n_ctx, uint32_t kv_k, uint32_t kv_v, size_t *a, size_t *b,
                       size_t *row_a, size_t *row_b) {
    const bool rec = c->recurrent[il];
    *row_a = rec ? 0 : kv_row_bytes(kv_k, kv_row_values(c));
    *row_b = rec ? 0 : kv_row_bytes(kv_v, kv_row_values(c));
    *a = rec ? conv_floats(c) * 4 : (size_t)n_ctx * *row_a;
    *b = rec ? ssm_floats(c) * 4 : (size_t)n_ctx * *row_b;
}

size_t seqstate_bytes(const Model *m, int n_ctx, uint32_t kv_k, uint32_t kv_v) {
    size_t n = 0, a, b, ra, rb;
    for (int il = 0; il < m->cfg.n_layer; il++) layer_segs(&m->cfg, il, n_ctx, kv_k, kv_v, &a, &b, &ra, &rb), n += a + b;
    return n;
}

int seqstate_check_kv(const Model *m, uint32_t kv_k, uint32_t kv_v, Err *err) {
    const uint32_t t[2] = {kv_k, kv_v};
    for (int i = 0; i < 2; i++) {
        const Format *f = format_get(t[i]);
        if (f && f->block > 1 && m->cfg.head_dim % f->block)
            return err_set(err, "head_dim %d is not a multiple of %d: a %s %c cache needs whole blocks per head (use f16 or f32)",
                           m->cfg.head_dim, f->block, kv_format_name(t[i]), i ? 'V' : 'K');
    }
    return 0;
}

SeqState *seqstate_new(const Model *m, Backend *be, int n_ctx, int l0, int l1, Err *err) {
    const ModelConfig *c = &m->cfg;
    if (n_ctx < 1 || n_ctx > (1 << 24)) return err_set(err, "context size %d out of range [1, %d]", n_ctx, 1 << 24), NULL;
    if (l1 == 0) l1 = c->n_layer;
    const int NL = c->n_layer_all; /* per-layer tables cover the MTP blocks too */
    if (l0 < 0 || l0 >= l1 || l1 > c->n_layer + m->n_mtp)
        return err_set(err, "layer range [%d, %d) outside the model's %d layers", l0, l1, c->n_layer + m->n_mtp), NULL;
    if (seqstate_check_kv(m, be->kv_k, be->kv_v, err)) return NULL;
    SeqState *s = calloc(1, sizeof *s);
    int *idx = calloc(4 * (size_t)NL, sizeof *idx);
    StateSeg *segs = calloc(2 * (size_t)(l1 - l0), sizeof *segs);
    if (!s || !idx || !segs) {
        free(s), free(idx), free(segs);
        return err_set(err, "out of memory"), NULL;
    }
    s->n_ctx = n_ctx;
    s->l0 = l0;
    s->l1 = l1;
    s->be = be;
    s->segs = segs;
    s->seg_conv = idx;
    s->seg_ssm = idx + NL;
    s->seg_k = idx + 2 * NL;
    s->seg_v = idx + 3 * NL;
    for (int i = 0; i < 4 * NL; i++) idx[i] = -1;
    size_t bytes = 0;
    for (int il = l0; il < l1; il++) {
        const bool rec = c->recurrent[il];
        size_t a, b, row_a, row_b;
        layer_segs(c, il, n_ctx, be->kv_k, be->kv_v, &a, &b, &row_a, &row_b);
        (rec ? s->seg_conv : s->seg_k)[il] = s->n_segs;
        segs[s->n_segs++] = (StateSeg){il, rec ? SEG_CONV : SEG_K, {NULL, bytes}, a, row_a};
        bytes += ALIGN64(a);
        (rec ? s->seg_ssm : s->seg_v)[il] = s->n_segs;
        segs[s->n_segs++] = (StateSeg){il, rec ? SEG_SSM : SEG_V, {NULL, bytes}, b, row_b};
        bytes += ALIGN64(b);
    }
    if (!(s->mem = be->vt->alloc(be, bytes, err))) {
        err_prefix(err, "the sequence state at context %d", n_ctx);
        seqstate_free(s);
        return NULL;
    }
    for (int i = 0; i < s->n_segs; i++) segs[i].view.buf = s->mem;
    s->bytes = bytes;
    s->rb.n = -1;
    return s; /* alloc returns zeroed memory: an empty sequence */
}

static void rollback_free(SeqState *s) {
    Rollback *rb = &s->rb;
    if (rb->mem) s->be->vt->free(s->be, rb->mem);
    free(rb->ssm_alt);
    memset(rb, 0, sizeof *rb);
    rb->n = -1;
}

void seqstate_free(SeqState *s) {
    if (!s) return;
    rollback_free(s);
    if (s->mem) s->be->vt->free(s->be, s->mem);
    free(s->seg_conv);
    free(s->segs);
    free(s);
}

void seqstate_reset(SeqState *s) {
    s->n_past = 0;
    s->pos_delta = 0;
    s->rb.n = -1;
    /* only the recurrent state must be zero; KV rows are written before they are read */
    for (int i = 0; i < s->n_segs; i++)
        if (!s->segs[i].row_bytes) s->be->vt->fill(s->be, s->segs[i].view, 0, s->segs[i].bytes);
}

static size_t seg_used(const StateSeg *g, int n_past) {
    return g->row_bytes ? (size_t)n_past * g->row_bytes : g->bytes;
}

void seqstate_copy(SeqState *dst, const SeqState *src) {
    ASSERT(dst->n_ctx == src->n_ctx && dst->n_segs == src->n_segs && dst->l0 == src->l0);
    dst->n_past = src->n_past;
    dst->pos_delta = src->pos_delta;
    dst->rb.n = -1;
    for (int i = 0; i < src->n_segs; i++)
        dst->be->vt->copy(dst->be, dst->segs[i].view, src->segs[i].view, seg_used(&src->segs[i], src->n_past));
}

size_t seqstate_saved_bytes(const SeqState *s, int n_past) {
    size_t n = 0;
    for (int i = 0; i < s->n_segs; i++) n += seg_used(&s->segs[i], n_past);
    return n;
}

void seqstate_save(const SeqState *s, void *buf) {
    uint8_t *p = buf;
    for (int i = 0; i < s->n_segs; i++) {
        const size_t n = seg_used(&s->segs[i], s->n_past);
        s->be->vt->download(s->be, p, s->segs[i].view, n);
        p += n;
    }
}

void seqstate_restore(SeqState *s, const void *buf, int n_past) {
    ASSERT(n_past >= 0 && n_past <= s->n_ctx);
    const uint8_t *p = buf;
    for (int i = 0; i < s->n_segs; i++) {
        const size_t n = seg_used(&s->segs[i], n_past);
        s->be->vt->upload(s->be, s->segs[i].view, p, n);
        p += n;
    }
    s->n_past = n_past;
    s->rb.n = -1;
}

int seqstate_enable_rollback(SeqState *s, const Model *m, int cap, Err *err) {
    const ModelConfig *c = &m->cfg;
    if (cap < 0 || cap > 4096) return err_set(err, "rollback room for %d tokens out of range [0, 4096]", cap);
    rollback_free(s);
    if (cap == 0) return 0;
    Rollback *rb = &s->rb;
    const int NL = c->n_layer_all;
    rb->ssm_alt = calloc(3 * (size_t)NL, sizeof *rb->ssm_alt);
    if (!rb->ssm_alt) return err_set(err, "out of memory");
    rb->conv_prev = rb->ssm_alt + NL;
    rb->log = rb->ssm_alt + 2 * NL;
    size_t bytes = 0;
    for (int il = s->l0; il < s->l1; il++) {
        if (!c->recurrent[il]) continue;
        rb->ssm_alt[il].off = bytes, bytes += ALIGN64(ssm_floats(c) * 4);
        rb->conv_prev[il].off = bytes, bytes += ALIGN64(conv_floats(c) * 4);
        rb->log[il].off = bytes, bytes += ALIGN64((size_t)cap * log_floats(c) * 4);
    }
    if (!(rb->mem = s->be->vt->alloc(s->be, bytes ? bytes : 64, err))) {
        err_prefix(err, "rollback room for %d tokens", cap);
        rollback_free(s);
        return -1;
    }
    for (int il = s->l0; il < s->l1; il++)
        if (c->recurrent[il]) rb->ssm_alt[il].buf = rb->conv_prev[il].buf = rb->log[il].buf = rb->mem;
    rb->cap = cap;
    rb->n = -1;
    return 0;
}
