/* conv_attn_ref.c — reference causal depthwise conv + SiLU, and reference causal attention (ops.h).
 *
 * The conv follows ggml's SSM_CONV: a plain float sum over the K taps, oldest first, then SiLU. The
 * attention computes, per query row, max, Σexp (in double) and the probability-weighted sum of V, as
 * ggml's non-flash path does with an F32 cache; it recomputes the scores instead of keeping a row buffer. */
#include "kernels/ops.h"

#include <math.h>
#include <string.h>

#define MAX_TAPS 16

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
            for (int i = 0; i < K; i++) acc += w[i] * win[i];
            j->y[(int64_t)t * j->C + c] = op_silu(acc);
            for (int i = 0; i < K - 1; i++) win[i] = win[i + 1];
        }
        for (int i = 0; i < K - 1; i++) st[i] = win[i];
    }
}

void conv_silu_ref(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, float *y) {
    ConvJob j = {x, w, T, C, K, state, y};
    if (K > MAX_TAPS) return; /* refused at model load */
    pool_for(c->pool, C, 64, conv_channels, &j);
}

typedef struct AttnJob {
    const AttnArgs *a;
} AttnJob;

static float dotf(const float *a, const float *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return (float)s;
}

static void attn_rows(void *ctx, int64_t b, int64_t e, int thread) {
    const AttnArgs *a = ((const AttnJob *)ctx)->a;
    const int d = a->d, group = a->n_head / a->n_head_kv;
    const int64_t kv_stride = (int64_t)a->n_head_kv * d;
    for (int64_t r = b; r < e; r++) { /* r = t * n_head + h */
        const int t = (int)(r / a->n_head), h = (int)(r % a->n_head), hk = h / group;
        const float *q = a->q + r * d;
        float *out = a->out + r * d;
        const int n_keys = a->pos0 + t + 1;
        const float *k0 = a->k + (int64_t)hk * d, *v0 = a->v + (int64_t)hk * d;
        float max = -INFINITY;
        for (int tau = 0; tau < n_keys; tau++) max = fmaxf(max, dotf(q, k0 + tau * kv_stride, d) * a->scale);
        double sum = 0.0;
        for (int tau = 0; tau < n_keys; tau++) sum += (double)expf(dotf(q, k0 + tau * kv_stride, d) * a->scale - max);
        const float inv = (float)(1.0 / sum);
        memset(out, 0, sizeof(float) * (size_t)d);
        for (int tau = 0; tau < n_keys; tau++) {
            const float p = expf(dotf(q, k0 + tau * kv_stride, d) * a->scale - max) * inv;
            const float *v = v0 + tau * kv_stride;
            for (int i = 0; i < d; i++) out[i] += p * v[i];
        }
    }
}

void attention_ref(const OpCtx *c, const AttnArgs *a) {
    AttnJob j = {a};
    pool_for(c->pool, (int64_t)a->T * a->n_head, 1, attn_rows, &j);
}
