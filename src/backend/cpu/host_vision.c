/* host_vision.c — the vision tower's ops on the host backends ("ref" and "cpu" alike): LayerNorm with bias,
 * bias + GELU, the 2-D rotary and full attention over the patches, each the scalar op of kernels/ops.h
 * ("vision tower ops") row by row, split over the backend's pool (rows, or heads for attention). Each row is
 * computed as on one thread, so results do not depend on the split and equal the CPU encoder's exact mode
 * (src/vision/encoder.c) bit for bit. */
#include "backend/cpu/host_backend.h"

#include <math.h>
#include <stdlib.h>

typedef struct VisJob {
    const float *x, *w, *b;
    float *y;
    const VecSet *s;
    float eps;
    int n, act;
    const int32_t *pos;
    const Rope2dArgs *r;
    float theta_scale;
    const FullAttnArgs *a;
    const float *q, *k, *v;
    float *o, *scores;
} VisJob;

static int64_t grain_of(int64_t n) { return n >= 4096 ? 1 : 4096 / (n > 0 ? n : 1); }

static void ln_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const VisJob *j = ctx;
    const VecSet *s = j->s;
    for (int64_t r = r0; r < r1; r++)
        for (int h = 0; h < s->heads; h++)
            op_layernorm(j->x + r * s->x_row + h * s->x_head, j->w, j->b, s->n, j->eps, j->y + r * s->y_row + h * s->y_head);
}

static void h_layer_norm(Backend *be, BView xv, BView yv, const Weight *w, const Weight *b, const VecSet *s, float eps) {
    VisJob j = {.x = hf(xv), .w = w ? w->host : NULL, .b = b ? b->host : NULL, .y = hf(yv), .s = s, .eps = eps};
    pool_for(host_of(be)->pool, s->rows, grain_of((int64_t)s->heads * s->n), ln_rows, &j);
}

static void bias_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const VisJob *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        if (j->b)
            for (int i = 0; i < j->n; i++) y[i] += j->b[i];
        if (j->act == ACT_GELU)
            for (int i = 0; i < j->n; i++) y[i] = op_gelu(y[i]);
    }
}

static void h_bias_act(Backend *be, BView yv, const Weight *b, int rows, int n, int act) {
    VisJob j = {.b = b ? b->host : NULL, .y = hf_n(yv, (int64_t)rows * n), .n = n, .act = act};
    pool_for(host_of(be)->pool, rows, grain_of(n), bias_rows, &j);
}

static void rope2d_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const VisJob *j = ctx;
    const Rope2dArgs *a = j->r;
    for (int64_t r = r0; r < r1; r++)
        for (int h = 0; h < a->heads; h++)
            op_rope_2d(j->y + r * a->row_stride + (int64_t)h * a->d, a->d, j->pos[2 * r], j->pos[2 * r + 1], j->theta_scale);
}

static void h_rope_2d(Backend *be, BView xv, BView posv, const Rope2dArgs *a) {
    ASSERT(a->d % 4 == 0);
    VisJob j = {.y = hf(xv), .pos = hi_n(posv, 2 * (int64_t)a->rows), .r = a, .theta_scale = powf(a->base, -4.0f / (float)a->d)};
    pool_for(host_of(be)->pool, a->rows, grain_of((int64_t)a->heads * a->d), rope2d_rows, &j);
}

static void attn_heads(void *ctx, int64_t h0, int64_t h1, int thread) {
    const VisJob *j = ctx;
    const FullAttnArgs *a = j->a;
    float *sc = j->scores + (size_t)thread * (size_t)a->T;
    for (int64_t h = h0; h < h1; h++)
        for (int t = 0; t < a->T; t++)
            op_attn_full_row(j->q + t * a->q_row + h * a->d, j->k + h * a->d, a->k_row, j->v + h * a->d, a->v_row, a->T, a->d,
                             a->scale, sc, j->o + t * a->o_row + h * a->d);
}

static void h_attention_full(Backend *be, const FullAttnArgs *a) {
    Pool *pool = host_of(be)->pool;
    float *sc = malloc(sizeof(float) * (size_t)a->T * (size_t)pool_size(pool));
    ASSERT(sc); /* T floats per thread; ops do not fail (backend.h) */
    VisJob j = {.a = a, .q = hf(a->q), .k = hf(a->k), .v = hf(a->v), .o = hf(a->out), .scores = sc};
    pool_for(pool, a->n_head, 1, attn_heads, &j);
    free(sc);
}

void host_vision_install(BackendVt *vt) {
    vt->layer_norm = h_layer_norm;
    vt->bias_act = h_bias_act;
    vt->rope_2d = h_rope_2d;
    vt->attention_full = h_attention_full;
}
