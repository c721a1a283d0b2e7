/* matmul_ref.c — the reference matrix multiply over every weight format, in both modes (ops.h).
 *
 * MATMUL_GGML: each activation row is rounded to the weight format's vec_dot partner with the format
 * table's from_float, then dotted with each weight row in the summation order of the kernel llama.cpp would
 * run (Format.dot_path) — ggml's arithmetic. MATMUL_EXACT: each weight row is dequantized once and dotted
 * with the F32 activations, accumulating in double. MATMUL_FAST: rounded as MATMUL_GGML, every row in the
 * order of format_fast_path (DOT_FAST for the integer formats), whatever T. Parallel over output rows; outputs are disjoint, so the
 * thread count never changes a result. */
#include "kernels/ops.h"

#include "base/fdot.h"

#include "base/err.h"
#include "gguf/format.h"

#include <math.h>
#include <string.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

size_t ops_scratch_bytes(int64_t rows, int64_t cols, int n_threads) {
    /* quantized activations: at most 4 bytes per element for any partner, plus 256 per row for the fast
     * kernels' section alignment and 7 rows for their padding to octets of tokens (kernels/cpu/
     * matmul_cpu.h); per thread, one F32 row here or the fast
     * kernels' decoded weight tiles (≤ 32 bytes per element + 4 KiB: two 16-row panels of K-quant codes) */
    return ALIGN64((size_t)(rows + 7) * ((size_t)cols * 4 + 256) + 64) + (size_t)n_threads * ALIGN64((size_t)cols * 32 + 4096) + 64;
}

typedef struct MatJob {
    const OpCtx *c;
    const MatW *w;
    const Format *wf, *af;
    const float *x;
    int64_t T;
    float *y;
    uint8_t *qact; /* quantized activation rows */
    size_t qrow;   /* bytes per quantized row */
    float *rowbuf; /* per-thread F32 rows */
} MatJob;

static void quantize_rows(void *ctx, int64_t b, int64_t e, int thread) {
    MatJob *j = ctx;
    for (int64_t t = b; t < e; t++) j->af->from_float(j->x + t * j->w->cols, j->qact + t * j->qrow, j->w->cols);
}

static void rows_ggml(void *ctx, int64_t b, int64_t e, int thread) {
    MatJob *j = ctx;
    const MatW *w = j->w;
    for (int64_t o = b; o < e; o++) {
        const uint8_t *wr = (const uint8_t *)w->data + o * w->row_bytes;
        for (int64_t t = 0; t < j->T; t++) {
            /* the summation order of the kernel llama.cpp would use for this activation row */
            const DotPath path = j->c->mode == MATMUL_FAST ? format_fast_path(j->wf, w->cols)
                                                           : format_pick_path_row(j->wf, w->rows, w->cols, j->T, w->gemv, t);
            const uint8_t *a = j->qact + t * j->qrow;
            j->y[t * w->rows + o] = j->wf->dot_path ? j->wf->dot_path(path, w->cols, wr, a) : j->wf->vec_dot(w->cols, wr, a);
        }
    }
}

/* the fast arithmetic's float formats: F32 activations, format_fast_float_dot's order */
static void rows_fast_float(void *ctx, int64_t b, int64_t e, int thread) {
    MatJob *j = ctx;
    const MatW *w = j->w;
    for (int64_t o = b; o < e; o++)
        for (int64_t t = 0; t < j->T; t++)
            j->y[t * w->rows + o] = format_fast_float_dot(w->type, (const uint8_t *)w->data + o * w->row_bytes, j->x + t * w->cols, w->cols);
}

static void rows_exact(void *ctx, int64_t b, int64_t e, int thread) {
    MatJob *j = ctx;
    const MatW *w = j->w;
    float *row = j->rowbuf + (size_t)thread * (ALIGN64((size_t)w->cols * 4) / 4);
    for (int64_t o = b; o < e; o++) {
        j->wf->to_float((const uint8_t *)w->data + o * w->row_bytes, row, w->cols);
        for (int64_t t = 0; t < j->T; t++) {
            const float *x = j->x + t * w->cols;
            double acc = 0.0;
            for (int64_t i = 0; i < w->cols; i++) acc += (double)row[i] * (double)x[i];
            j->y[t * w->rows + o] = (float)acc;
        }
    }
}

void matmul_ref(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y) {
    const Format *wf = format_get(w->type);
    ASSERT(wf && wf->to_float);
    MatJob j = {c, w, wf, NULL, x, T, y, NULL, 0, NULL};
    uint8_t *s = (uint8_t *)(((uintptr_t)c->scratch + 63) & ~(uintptr_t)63);
    const bool exact = c->mode == MATMUL_EXACT || !wf->vec_dot;
    if (exact) {
        j.rowbuf = (float *)s;
        ASSERT((size_t)(s - (uint8_t *)c->scratch) + (size_t)pool_size(c->pool) * ALIGN64((size_t)w->cols * 4) <=
               c->scratch_bytes);
        pool_for(c->pool, w->rows, 4, rows_exact, &j);
        return;
    }
    if (c->mode == MATMUL_FAST && format_is_float(wf->id)) {
        pool_for(c->pool, w->rows, 4, rows_fast_float, &j);
        return;
    }
    j.af = format_get(wf->vec_dot_type);
    ASSERT(j.af && j.af->from_float);
    j.qact = s;
    j.qrow = format_row_bytes(j.af, w->cols);
    ASSERT((size_t)(s - (uint8_t *)c->scratch) + j.qrow * (size_t)T <= c->scratch_bytes);
    pool_for(c->pool, T, 1, quantize_rows, &j);
    pool_for(c->pool, w->rows, 4, rows_ggml, &j);
}
