/* conv_attn_ref.c — reference causal depthwise conv + SiLU, and reference causal attention (ops.h).
 *
 * The conv follows ggml's SSM_CONV: a plain float sum over the K taps, oldest first, then SiLU per token
 * row. The attention follows ggml's non-flash path with an F32 cache (see attn_rows); an F16 cache is widened
 * exactly, a Q8_0 or Q4_0 one dequantized by the format table (ggml's to_float bits), and then read the same
 * way: the F32 path on the cache's values. */
#include "kernels/ops.h"

#include "base/fdot.h"
#include "base/fp16.h"

#include "base/err.h"
#include "gguf/format.h"

#include <math.h>
#include <string.h>

#define MAX_TAPS 16
#define ATTN_REF_MAX_D 1024 /* head dims the reference takes (models have 64-256) */

typedef struct ConvJob {
    const float *x, *w;
    int T, C, K;
    float *state, *y;
} ConvJob;

static void conv_channels(void *ctx, int64_t b, int64_t e, int thread) {
    const ConvJob *j = ctx;
    const int K = j->K;
    for (int64_t c = b; c < e; c++) {
        float win[MAX_TAPS];
        const float *w = j->w + c * K;
        float *st = j->state + c * (K - 1);
        for (int i = 0; i < K - 1; i++) win[i] = st[i];
        for (int t = 0; t < j->T; t++) {
            win[K - 1] = j->x[(int64_t)t * j->C + c];
            float acc = 0.0f;
            for (int i = 0; i < K; i++) acc = fmaf(win[i], w[i], acc); /* ggml's build fuses this */
            j->y[(int64_t)t * j->C + c] = acc;
            for (int i = 0; i < K - 1; i++) win[i] = win[i + 1];
        }
        for (int i = 0; i < K - 1; i++) st[i] = win[i];
    }
}

/* SiLU row by row (ggml applies it to each token's row of C channels) */
static void silu_rows(void *ctx, int64_t b, int64_t e, int thread) {
    const ConvJob *j = ctx;
    for (int64_t t = b; t < e; t++) op_silu_row(j->y + t * j->C, j->y + t * j->C, j->C);
}

void conv_silu_ref(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, float *y) {
    ConvJob j = {x, w, T, C, K, state, y};
    if (K > MAX_TAPS) return; /* refused at model load */
    pool_for(c->pool, C, 64, conv_channels, &j);
    pool_for(c->pool, T, 1, silu_rows, &j);
}

void conv_silu_seqs_ref(const OpCtx *c, const ConvSeqArgs *s, int n, int C, int K, const float *w) {
    for (int i = 0; i < n; i++) conv_silu_ref(c, s[i].x, s[i].T, C, K, w, s[i].state, s[i].y);
}

typedef struct AttnJob {
    const AttnArgs *a;
    float *scratch; /* per thread: [n_pad] probabilities + [n_pad] gathered V column */
    int64_t n_pad;
    bool batch_order; /* P·V in tinyBLAS's order: batches of ≥ 2, and any batch in the fast arithmetic */
} AttnJob;

/* Element i of a cache in format `type` (FMT_F32, FMT_F16, or a block format dequantized by the table). */
static float kv_elem(const void *base, uint32_t type, int64_t i) {
    if (type == FMT_F32) return ((const float *)base)[i];
    if (type == FMT_F16) return fp16_to_fp32(((const uint16_t *)base)[i]);
    const Format *f = format_get(type);
    float blk[32];
    ASSERT(f && f->block <= 32);
    f->to_float((const uint8_t *)base + (size_t)(i / f->block) * (size_t)f->bytes, blk, f->block);
    return blk[i % f->block];
}

/* n elements of the cache from element i0 as floats: the cache itself when it is F32, else widened or
 * dequantized into buf */
static const float *kv_row(const void *base, uint32_t type, int64_t i0, int n, float *buf) {
    if (type == FMT_F32) return (const float *)base + i0;
    const Format *f = format_get(type);
    if (f && f->to_float && i0 % f->block == 0 && n % f->block == 0)
        f->to_float((const uint8_t *)base + (size_t)(i0 / f->block) * (size_t)f->bytes, buf, n);
    else
        for (int i = 0; i < n; i++) buf[i] = kv_elem(base, type, i0 + i);
    return buf;
}

/* One query row as ggml's non-flash path computes it with an F32 cache: kq = K·q (ggml_vec_dot_f32: q is a
 * permuted view, which keeps tinyBLAS out), softmax over the cache row padded to 256 (masked entries are
 * 0), then each output dim as the dot of the transposed V column with the probabilities over the padded
 * length (tinyBLAS order for batches of ≥ 2 queries, ggml_vec_dot_f32 for one; the fast arithmetic takes
 * tinyBLAS's for every batch, so that a query's result does not depend on its batch). Another cache type is
 * read as the F32 values it holds. */
static void attn_rows(void *ctx, int64_t b, int64_t e, int thread) {
    const AttnJob *j = ctx;
    const AttnArgs *a = j->a;
    const int d = a->d, group = a->n_head / a->n_head_kv;
    const int64_t kv_stride = (int64_t)a->n_head_kv * d;
    float *p = j->scratch + (int64_t)thread * 2 * j->n_pad, *vcol = p + j->n_pad;
    for (int64_t r = b; r < e; r++) { /* r = t * n_head + h */
        const int t = (int)(r / a->n_head), h = (int)(r % a->n_head), hk = h / group;
        const float *q = a->q + r * d;
        float *out = a->out + r * d;
        const int n_keys = a->pos0 + t + 1;
        const int n_pad = (n_keys + 255) / 256 * 256;
        const int64_t kv0 = (int64_t)hk * d;
        float krow[ATTN_REF_MAX_D];
        for (int tau = 0; tau < n_keys; tau++)
            p[tau] = fdot_vec_f32(kv_row(a->k, a->k_type, kv0 + tau * kv_stride, d, krow), q, d) * a->scale;
        for (int tau = n_keys; tau < n_pad; tau++) p[tau] = -INFINITY;
        op_softmax(p, n_pad);
        for (int i = 0; i < d; i++) {
            for (int tau = 0; tau < n_keys; tau++) vcol[tau] = kv_elem(a->v, a->v_type, kv0 + tau * kv_stride + i);
            for (int tau = n_keys; tau < n_pad; tau++) vcol[tau] = 0.0f;
            out[i] = j->batch_order ? fdot_gemm_f32(vcol, p, n_pad) : fdot_vec_f32(vcol, p, n_pad);
        }
    }
}

size_t attention_scratch_bytes(int n_ctx, int n_threads) {
    return (size_t)n_threads * 2 * (size_t)((n_ctx + 255) / 256 * 256) * sizeof(float);
}

void attention_ref(const OpCtx *c, const AttnArgs *a) {
    ASSERT(a->d <= ATTN_REF_MAX_D);
    const int64_t n_pad = (a->pos0 + a->T + 255) / 256 * 256;
    ASSERT(attention_scratch_bytes(a->pos0 + a->T, pool_size(c->pool)) <= c->scratch_bytes);
    AttnJob j = {a, c->scratch, n_pad, a->T >= 2 || c->mode == MATMUL_FAST};
    pool_for(c->pool, (int64_t)a->T * a->n_head, 1, attn_rows, &j);
}
