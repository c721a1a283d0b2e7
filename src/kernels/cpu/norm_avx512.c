/* norm_avx512.c — Ops.norm_rows for AVX-512: the RMS / L2 norms of up to 8 rows with op_rmsnorm's and
 * op_l2norm's bits. The scalar norm sums x[i]² (a float product) in double, one element after another: a
 * chain of dependent double adds, ~4 cycles per element. Here lane k of a ZMM of doubles is row k's sum:
 * 8 floats of each of the 8 rows are squared, transposed (8 × 8) and added column after column, so every
 * lane adds its row's products in the row's order (the same roundings) while 8 chains run at once. The
 * scaling that follows is ZMM multiplies in the scalar order ((x · scale) · w, then · z). */
#include "kernels/ops.h"

#include <immintrin.h>
#include <math.h>

/* the columns of the 8 × 8 block r[0..7] (r[k] = 8 floats of row k): c[j] lane k = r[k][j] */
static inline void transpose8(const __m256 r[8], __m256 c[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    c[0] = _mm256_permute2f128_ps(u0, u4, 0x20), c[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    c[2] = _mm256_permute2f128_ps(u2, u6, 0x20), c[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    c[4] = _mm256_permute2f128_ps(u0, u4, 0x31), c[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    c[6] = _mm256_permute2f128_ps(u2, u6, 0x31), c[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

void norm_rows_avx512(const NormRows *a) {
    const int m = a->m, n = a->n;
    if (m <= 0) return;
    /* rows past m repeat the last one (computed, never stored) */
    const float *x[8];
    for (int k = 0; k < 8; k++) x[k] = a->x[k < m ? k : m - 1];
    __m512d acc = _mm512_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 r[8], c[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            if ((i & 15) == 0) _mm_prefetch((const char *)(x[k] + i + 128), _MM_HINT_T0);
            const __m256 v = _mm256_loadu_ps(x[k] + i);
            r[k] = _mm256_mul_ps(v, v);
        }
        transpose8(r, c);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) acc = _mm512_add_pd(acc, _mm512_cvtps_pd(c[j]));
    }
    double sum[8];
    _mm512_storeu_pd(sum, acc);
    for (int k = 0; k < m; k++) {
        const float *xk = a->x[k];
        double s = sum[k];
        for (int t = i; t < n; t++) s += (double)(xk[t] * xk[t]);
        float scale;
        if (a->l2) scale = 1.0f / fmaxf(sqrtf((float)s), a->eps);
        else {
            const float mean = (float)(s / n);
            scale = 1.0f / sqrtf(mean + a->eps);
        }
        float *y = a->y[k];
        const float *w = a->l2 ? NULL : a->w, *z = a->z_on ? a->z[k] : NULL;
        const __m512 vs = _mm512_set1_ps(scale);
        int t = 0;
        for (; t + 16 <= n; t += 16) {
            __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xk + t), vs);
            if (w) v = _mm512_mul_ps(v, _mm512_loadu_ps(w + t));
            if (z) v = _mm512_mul_ps(v, _mm512_loadu_ps(z + t));
            _mm512_storeu_ps(y + t, v);
        }
        for (; t < n; t++) {
            float v = xk[t] * scale;
            if (w) v = v * w[t];
            if (z) v = v * z[t];
            y[t] = v;
        }
    }
}
