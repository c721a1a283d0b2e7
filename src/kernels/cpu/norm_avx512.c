/* norm_avx512.c — Ops.norm_rows and Ops.mul_sigmoid for AVX-512: the RMS / L2 norms of up to 8 rows with op_rmsnorm's and
 * op_l2norm's bits. The scalar norm sums x[i]² (a float product) in double, one element after another: a
 * chain of dependent double adds, ~4 cycles per element. Here lane k of a ZMM of doubles is row k's sum:
 * 8 floats of each of the 8 rows are squared, transposed (8 × 8) and added column after column, so every
 * lane adds its row's products in the row's order (the same roundings) while 8 chains run at once. The
 * scaling that follows is ZMM multiplies in the scalar order ((x · scale) · w, then · z). */
#include "kernels/ops.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

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
        const float scale = op_norm_scale(s, n, a->eps, a->l2);
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

/* ---- the sigmoid gate: o[i] *= 1 / (1 + expf(-g[i])) with libm's expf bits ---------------------------------- */

/* glibc's expf (2.27+, sysdeps/ieee754/flt-32/e_expf.c, the FMA build that AVX-512 machines run): with
 * N = 32, kd = fma(32/ln2, x, 0x1.8p52) rounds x·32/ln2 to an integer ki (its low bits), r = 32/ln2·x − (kd −
 * 0x1.8p52) fused, s = 2^(ki/32) from the table + ki << 47, y = (fma(C0, r, C1)·r² + fma(C2, r, 1))·s rounded
 * to float. Lanes with |x| ≥ 0x1p6·1.375 (top bits ≥ 0x42b: overflow, underflow, NaN) go to libm itself.
 * sigmoid_fast_ok() checks these bits against the running libm before the op table takes this kernel. */
static const uint64_t expf_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

static inline __m512d pd_bits(uint64_t u) { return _mm512_castsi512_pd(_mm512_set1_epi64((long long)u)); }

/* expf of 8 floats (no special lanes) as doubles → floats */
static inline __m256 expf8(__m256 x) {
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d inv = pd_bits(0x40471547652b82fe), shift = pd_bits(0x4338000000000000);
    const __m512d kd0 = _mm512_fmadd_pd(inv, xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd0);
    const __m512d kd = _mm512_sub_pd(kd0, shift);
    const __m512d r = _mm512_fmsub_pd(inv, xd, kd);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
    const __m512i t = _mm512_add_epi64(_mm512_i64gather_epi64(idx, (const void *)expf_tab, 8), _mm512_slli_epi64(ki, 47));
    const __m512d z = _mm512_fmadd_pd(r, pd_bits(0x3ebc6af84b912394), pd_bits(0x3f2ebfce50fac4f3));
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d y0 = _mm512_fmadd_pd(r, pd_bits(0x3f962e42ff0c52d6), _mm512_set1_pd(1.0));
    const __m512d y = _mm512_mul_pd(_mm512_fmadd_pd(z, r2, y0), _mm512_castsi512_pd(t));
    return _mm512_cvtpd_ps(y);
}

/* 16 lanes of expf; lanes with large |x| through libm */
static inline __m512 expf16(__m512 x) {
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    const __mmask16 big = _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(0x42a));
    __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(expf8(_mm512_castps512_ps256(x))), expf8(_mm512_extractf32x8_ps(x, 1)), 1);
    if (big) {
        float xs[16], es[16];
        _mm512_storeu_ps(xs, x), _mm512_storeu_ps(es, e);
        for (int k = 0; k < 16; k++)
            if (big >> k & 1) es[k] = expf(xs[k]);
        e = _mm512_loadu_ps(es);
    }
    return e;
}

void mul_sigmoid_avx512(float *o, const float *g, int n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_loadu_ps(g + i)));
        _mm512_storeu_ps(o + i, _mm512_mul_ps(_mm512_loadu_ps(o + i), _mm512_div_ps(one, _mm512_add_ps(one, e))));
    }
    for (; i < n; i++) o[i] *= op_sigmoid(g[i]);
}

bool sigmoid_fast_ok(void) {
    /* a sweep of [-100, 100] by an irrational step, the binade edges and the special lanes */
    float x[4096 + 16], o[4096 + 16], r[4096 + 16], g[4096 + 16];
    int n = 0;
    for (int k = 0; k < 4096; k++) x[n++] = -100.0f + (float)k * 0.0488758553f;
    const float edge[16] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.7f, -88.7f, 89.0f, -104.0f, -87.3f, 87.3f, 0.5f, -0.5f, 20.0f, -20.0f, 1e-7f, 3.0e-4f};
    for (int k = 0; k < 16; k++) x[n++] = edge[k];
    for (int k = 0; k < n; k++) g[k] = x[k], o[k] = r[k] = 1.0f + (float)k * 0x1p-12f;
    mul_sigmoid_avx512(o, g, n);
    mul_sigmoid_ref(r, g, n);
    return memcmp(o, r, sizeof(float) * (size_t)n) == 0;
}
