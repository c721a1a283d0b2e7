/* rowops_simd.h — SiLU and SwiGLU over rows, written once against simd16.h and compiled by rowops_avx512.c
 * and rowops_avx2.c; bit-identical to op_silu_row / op_swiglu_row: each row's whole 16-element chunks go
 * through the exp polynomial lane for lane (what ggml's AVX-512 loops compute), the tail through libm.
 * Rows are spread over the pool. */
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/simd16.h"

#include <math.h>

typedef struct RowJob {
    const float *a, *b;
    float *y;
    int n;
} RowJob;

SIMD_INLINE V16 rowops_silu16(V16 x) {
    return v16_div(x, v16_add(v16_set1(1.0f), v16_exp(v16_sub(v16_zero(), x))));
}

static void ROWOPS_FN(silu_job)(void *ctx, int64_t b, int64_t e, int thread) {
    const RowJob *j = ctx;
    (void)thread;
    for (int64_t r = b; r < e; r++) {
        const float *x = j->a + r * j->n;
        float *y = j->y + r * j->n;
        int i = 0;
        for (; i + 16 <= j->n; i += 16) v16_store(y + i, rowops_silu16(v16_load(x + i)));
        for (; i < j->n; i++) y[i] = op_silu(x[i]);
    }
}

static void ROWOPS_FN(swiglu_job)(void *ctx, int64_t b, int64_t e, int thread) {
    const RowJob *j = ctx;
    (void)thread;
    for (int64_t r = b; r < e; r++) {
        const float *g = j->a + r * j->n, *u = j->b + r * j->n;
        float *y = j->y + r * j->n;
        int i = 0;
        for (; i + 16 <= j->n; i += 16) v16_store(y + i, v16_mul(rowops_silu16(v16_load(g + i)), v16_load(u + i)));
        for (; i < j->n; i++) y[i] = op_silu(g[i]) * u[i];
    }
}

/* about 16 KiB of floats per work item */
static int64_t rowops_grain(int n) { return n >= 4096 ? 1 : 4096 / (n > 0 ? n : 1); }

void ROWOPS_FN(silu_rows)(const OpCtx *c, const float *x, float *y, int rows, int n) {
    RowJob j = {x, NULL, y, n};
    pool_for(c->pool, rows, rowops_grain(n), ROWOPS_FN(silu_job), &j);
}

void ROWOPS_FN(swiglu_rows)(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n) {
    RowJob j = {g, u, y, n};
    pool_for(c->pool, rows, rowops_grain(n), ROWOPS_FN(swiglu_job), &j);
}
