/* simd16.h — a 16-lane float vector for the sequence kernels (delta-net, conv, attention), included only by
 * *_avx512.c and *_avx2.c files (which the Makefile compiles with those flags).
 *
 * llama.cpp's arithmetic, which the default mode reproduces, is that of its AVX-512 build: 16-lane fused
 * multiply-adds, _mm512_reduce_add_ps trees, the polynomial exp. V16 is one ZMM register under AVX-512 and a
 * pair of YMM registers (lanes 0-7, 8-15) under AVX2, and every V16 operation computes the same 16 IEEE
 * results either way, so a kernel written once against V16 gives identical bits on both ISAs.
 *
 * VN is the native register (16 lanes, or 8 under AVX2) for loops whose lanes carry no ggml meaning (e.g.
 * the output dimension of a probabilities×V product). */
#ifndef DL_KERNELS_CPU_SIMD16_H
#define DL_KERNELS_CPU_SIMD16_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#define SIMD_INLINE static inline __attribute__((always_inline))

#if defined(__AVX512F__)

typedef __m512 V16;

SIMD_INLINE V16 v16_zero(void) { return _mm512_setzero_ps(); }
SIMD_INLINE V16 v16_set1(float x) { return _mm512_set1_ps(x); }
SIMD_INLINE V16 v16_load(const float *p) { return _mm512_loadu_ps(p); }
SIMD_INLINE V16 v16_load_h(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
SIMD_INLINE void v16_store(float *p, V16 v) { _mm512_storeu_ps(p, v); }
/* the first n (0..16) lanes; the others read as zero and are not touched */
SIMD_INLINE V16 v16_load_n(const float *p, int n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p); }
SIMD_INLINE void v16_store_n(float *p, V16 v, int n) { _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v); }
/* v[l] = p[l·stride] */
SIMD_INLINE V16 v16_gather(const float *p, int stride) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(stride));
    return _mm512_i32gather_ps(idx, p, 4);
}
/* lanes ≥ n (n in 0..16) set to zero */
SIMD_INLINE V16 v16_keep(V16 v, int n) { return _mm512_maskz_mov_ps((__mmask16)((1u << n) - 1u), v); }
SIMD_INLINE V16 v16_add(V16 a, V16 b) { return _mm512_add_ps(a, b); }
SIMD_INLINE V16 v16_sub(V16 a, V16 b) { return _mm512_sub_ps(a, b); }
SIMD_INLINE V16 v16_mul(V16 a, V16 b) { return _mm512_mul_ps(a, b); }
SIMD_INLINE V16 v16_div(V16 a, V16 b) { return _mm512_div_ps(a, b); }
SIMD_INLINE V16 v16_max(V16 a, V16 b) { return _mm512_max_ps(a, b); }
SIMD_INLINE V16 v16_fmadd(V16 a, V16 b, V16 c) { return _mm512_fmadd_ps(a, b, c); }  /* a·b + c */
SIMD_INLINE V16 v16_fnmadd(V16 a, V16 b, V16 c) { return _mm512_fnmadd_ps(a, b, c); } /* c − a·b */

/* fdot_reduce16: (v[i] + v[i+8]), then + [i+4], + [i+2], [0] + [1] */
SIMD_INLINE float v16_hsum(V16 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}
SIMD_INLINE float v16_hmax(V16 v) { return _mm512_reduce_max_ps(v); }

/* r[i] = fdot_reduce16(x[i]) for 16 vectors: the same pairwise additions as v16_hsum, done for 16 rows at
 * once (each addition below adds exactly the two partial sums the tree adds). */
SIMD_INLINE V16 v16_reduce16x16(const V16 *x) {
    V16 y[8], z[4], w[2];
    #pragma GCC unroll 16
    for (int m = 0; m < 8; m++) /* rows 2m | 2m+1: lanes i and i+8 */
        y[m] = _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0x44),
                             _mm512_shuffle_f32x4(x[2 * m], x[2 * m + 1], 0xEE));
    #pragma GCC unroll 16
    for (int m = 0; m < 4; m++) /* one row per 128-bit block: i and i+4 */
        z[m] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * m], y[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(y[2 * m], y[2 * m + 1], 0xDD));
    #pragma GCC unroll 16
    for (int m = 0; m < 2; m++) /* i and i+2 */
        w[m] = _mm512_add_ps(_mm512_shuffle_ps(z[2 * m], z[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(z[2 * m], z[2 * m + 1], 0xEE));
    const V16 r = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
    /* lane 4b + i holds row 4i + b */
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
}

/* op_expf_poly lane for lane (ggml_v_expf of the AVX-512 build) */
SIMD_INLINE V16 v16_exp(V16 x) {
    const V16 r = _mm512_set1_ps(0x1.8p23f);
    const V16 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const V16 n = _mm512_sub_ps(z, r);
    const V16 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 d = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192), _CMP_GT_OQ);
    const V16 u = _mm512_mul_ps(b, b);
    const V16 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const V16 res = _mm512_scalef_ps(j, n);
    if (!d) return res;
    const V16 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                         _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(d, res, alt);
}

/* native vector = V16 */
typedef __m512 VN;
#define VN_W 16
SIMD_INLINE VN vn_zero(void) { return _mm512_setzero_ps(); }
SIMD_INLINE VN vn_set1(float x) { return _mm512_set1_ps(x); }
SIMD_INLINE VN vn_load(const float *p) { return _mm512_loadu_ps(p); }
SIMD_INLINE VN vn_load_h(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
SIMD_INLINE void vn_store(float *p, VN v) { _mm512_storeu_ps(p, v); }
SIMD_INLINE VN vn_add(VN a, VN b) { return _mm512_add_ps(a, b); }
SIMD_INLINE VN vn_mul(VN a, VN b) { return _mm512_mul_ps(a, b); }
SIMD_INLINE VN vn_fmadd(VN a, VN b, VN c) { return _mm512_fmadd_ps(a, b, c); }

/* 16×16 transpose: dst[c·ldd + r] = src[r·lds + c] for r, c < 16 */
SIMD_INLINE void v16_transpose16(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m512 r[16], t[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * lds);
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    /* r[4g + k], 128-bit block b: rows 4g..4g+3 of column 4b + k */
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        /* t[i]: column i rows 0-3, column 8+i rows 0-3, column i rows 4-7, column 8+i rows 4-7 */
        t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xDD); /* the same for columns 4+i, 12+i */
        t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xDD);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        /* column i: blocks 0, 2 of t[i] (rows 0-7) and of t[8+i] (rows 8-15) */
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xDD);
        r[4 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_f32x4(t[4 + i], t[12 + i], 0xDD);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * ldd, r[i]);
}

#elif defined(__AVX2__)

typedef struct V16 {
    __m256 lo, hi;
} V16;

SIMD_INLINE V16 v16_mk(__m256 lo, __m256 hi) {
    V16 v = {lo, hi};
    return v;
}
SIMD_INLINE V16 v16_zero(void) { return v16_mk(_mm256_setzero_ps(), _mm256_setzero_ps()); }
SIMD_INLINE V16 v16_set1(float x) { return v16_mk(_mm256_set1_ps(x), _mm256_set1_ps(x)); }
SIMD_INLINE V16 v16_load(const float *p) { return v16_mk(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
SIMD_INLINE V16 v16_load_h(const uint16_t *p) {
    return v16_mk(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8))));
}
SIMD_INLINE void v16_store(float *p, V16 v) {
    _mm256_storeu_ps(p, v.lo);
    _mm256_storeu_ps(p + 8, v.hi);
}
SIMD_INLINE __m256i v8_mask(int n) { /* lanes < n set */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
SIMD_INLINE V16 v16_load_n(const float *p, int n) {
    return v16_mk(_mm256_maskload_ps(p, v8_mask(n)), _mm256_maskload_ps(p + 8, v8_mask(n - 8)));
}
SIMD_INLINE void v16_store_n(float *p, V16 v, int n) {
    _mm256_maskstore_ps(p, v8_mask(n), v.lo);
    _mm256_maskstore_ps(p + 8, v8_mask(n - 8), v.hi);
}
SIMD_INLINE V16 v16_gather(const float *p, int stride) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(stride));
    return v16_mk(_mm256_i32gather_ps(p, idx, 4), _mm256_i32gather_ps(p + 8 * stride, idx, 4));
}
SIMD_INLINE V16 v16_keep(V16 v, int n) {
    return v16_mk(_mm256_and_ps(v.lo, _mm256_castsi256_ps(v8_mask(n))), _mm256_and_ps(v.hi, _mm256_castsi256_ps(v8_mask(n - 8))));
}
#define V16_OP2(name, op)                                                                                  \
    SIMD_INLINE V16 v16_##name(V16 a, V16 b) { return v16_mk(op(a.lo, b.lo), op(a.hi, b.hi)); }
V16_OP2(add, _mm256_add_ps)
V16_OP2(sub, _mm256_sub_ps)
V16_OP2(mul, _mm256_mul_ps)
V16_OP2(div, _mm256_div_ps)
V16_OP2(max, _mm256_max_ps)
#undef V16_OP2
SIMD_INLINE V16 v16_fmadd(V16 a, V16 b, V16 c) {
    return v16_mk(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi));
}
SIMD_INLINE V16 v16_fnmadd(V16 a, V16 b, V16 c) {
    return v16_mk(_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi));
}
SIMD_INLINE float v16_hsum(V16 v) {
    __m256 a = _mm256_add_ps(v.lo, v.hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}
SIMD_INLINE float v16_hmax(V16 v) {
    __m256 a = _mm256_max_ps(v.lo, v.hi);
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)));
}
/* eight rows of 8 partial sums (already v[i] + v[i+8]) → one vector, lane r = row r */
SIMD_INLINE __m256 v8_reduce8x8(const __m256 *y) {
    __m256 z[4], w[2];
    #pragma GCC unroll 16
    for (int m = 0; m < 4; m++) /* block 0 = row 2m, block 1 = row 2m+1: i and i+4 */
        z[m] = _mm256_add_ps(_mm256_permute2f128_ps(y[2 * m], y[2 * m + 1], 0x20),
                             _mm256_permute2f128_ps(y[2 * m], y[2 * m + 1], 0x31));
    #pragma GCC unroll 16
    for (int m = 0; m < 2; m++) /* i and i+2 */
        w[m] = _mm256_add_ps(_mm256_shuffle_ps(z[2 * m], z[2 * m + 1], 0x44),
                             _mm256_shuffle_ps(z[2 * m], z[2 * m + 1], 0xEE));
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(w[0], w[1], 0x88), _mm256_shuffle_ps(w[0], w[1], 0xDD));
    /* block 0: rows 0, 2, 4, 6; block 1: rows 1, 3, 5, 7 */
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
SIMD_INLINE V16 v16_reduce16x16(const V16 *x) {
    __m256 y[16];
    #pragma GCC unroll 16
    for (int i = 0; i < 16; i++) y[i] = _mm256_add_ps(x[i].lo, x[i].hi);
    return v16_mk(v8_reduce8x8(y), v8_reduce8x8(y + 8));
}

/* op_expf_poly on 8 lanes: the same polynomial; 2^n applied as two exact power-of-two factors (the first
 * product is exact, the second rounds once: the correctly rounded j·2^n that ldexpf and vscalefps give) */
SIMD_INLINE __m256 v8_exp(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 d = _mm256_cmp_ps(an, _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    /* n is an integer in [-192, 192] where it matters; clamp so the exponent arithmetic stays in range */
    const __m256 nc = _mm256_min_ps(_mm256_max_ps(n, _mm256_set1_ps(-192.0f)), _mm256_set1_ps(192.0f));
    const __m256 n1 = _mm256_floor_ps(_mm256_mul_ps(nc, _mm256_set1_ps(0.5f)));
    const __m256 n2 = _mm256_sub_ps(nc, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n1), bias), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n2), bias), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    if (!_mm256_movemask_ps(d)) return res;
    const __m256 alt = _mm256_blendv_ps(_mm256_setzero_ps(), _mm256_set1_ps(INFINITY),
                                        _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ));
    return _mm256_blendv_ps(res, alt, d);
}
SIMD_INLINE V16 v16_exp(V16 x) { return v16_mk(v8_exp(x.lo), v8_exp(x.hi)); }

typedef __m256 VN;
#define VN_W 8
SIMD_INLINE VN vn_zero(void) { return _mm256_setzero_ps(); }
SIMD_INLINE VN vn_set1(float x) { return _mm256_set1_ps(x); }
SIMD_INLINE VN vn_load(const float *p) { return _mm256_loadu_ps(p); }
SIMD_INLINE VN vn_load_h(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
SIMD_INLINE void vn_store(float *p, VN v) { _mm256_storeu_ps(p, v); }
SIMD_INLINE VN vn_add(VN a, VN b) { return _mm256_add_ps(a, b); }
SIMD_INLINE VN vn_mul(VN a, VN b) { return _mm256_mul_ps(a, b); }
SIMD_INLINE VN vn_fmadd(VN a, VN b, VN c) { return _mm256_fmadd_ps(a, b, c); }

SIMD_INLINE void v8_transpose8(const float *src, int64_t lds, float *dst, int64_t ldd) {
    __m256 r[8], t[8];
    #pragma GCC unroll 16
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * lds);
    #pragma GCC unroll 16
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x20);
        t[4 + i] = _mm256_permute2f128_ps(r[i], r[4 + i], 0x31);
    }
    #pragma GCC unroll 16
    for (int i = 0; i < 8; i++) _mm256_storeu_ps(dst + i * ldd, t[i]);
}
SIMD_INLINE void v16_transpose16(const float *src, int64_t lds, float *dst, int64_t ldd) {
    #pragma GCC unroll 16
    for (int a = 0; a < 16; a += 8)
        #pragma GCC unroll 16
        for (int b = 0; b < 16; b += 8) v8_transpose8(src + a * lds + b, lds, dst + b * ldd + a, ldd);
}

#else
#error "simd16.h is for the *_avx2.c and *_avx512.c files"
#endif

#endif
