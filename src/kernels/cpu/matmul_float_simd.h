/* matmul_float_simd.h — F32, F16 and BF16 weights (matmul_cpu.h), included by matmul_float_avx2.c and
 * matmul_float_avx512.c, which define MF_FN(name) to add their suffix.
 *
 * The orders (base/fdot.c, gguf/quant_order_float.c) are those of llama.cpp's AVX-512 build, written in
 * 16-lane vectors: FV is one ZMM under AVX-512 and a pair of YMM (lanes 0-7, 8-15) under AVX2, every FV
 * operation computing the same 16 IEEE results, so both levels give identical bits.
 *   GEMV / ID (ggml_vec_dot_f32 / _f16): four 16-lane accumulators over 64-element steps (fused), folded
 *     (0+2, 1+3, then 0+1), reduced as _mm512_reduce_add_ps; the n % 64 tail added one product at a time
 *     (F32: in float, unfused but the last n % 8 fused; F16: in double). BF16 (ggml_vec_dot_bf16): two accumulators (elements
 *     [64k, 64k+32) and [64k+32, 64k+64)) of VDPBF16PS steps, each reduced, added in double with the tail.
 *   GEMM (tinyBLAS, when the pick says so): one accumulator per dot product, one fused step per 16
 *     elements (BF16: one VDPBF16PS step per 32), reduced.
 * VDPBF16PS is the instruction itself where the CPU has AVX512_BF16, else an emulation of its lane
 * arithmetic: acc = ftz(ftz(acc + x1·y1) + x0·y0) with denormal inputs read as zero (quant_order_float.c).
 * GEMM tiles are MF_R rows × MF_C tokens of accumulators; GEMV runs rows two at a time. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_cpu.h"

/* every multiply and add rounded as written (clang would fuse them within an expression) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define MF_INLINE static inline __attribute__((always_inline))

#if defined(__AVX512F__)
typedef __m512 FV;
#define MF_R 4
#define MF_C 4
MF_INLINE FV fv_zero(void) { return _mm512_setzero_ps(); }
MF_INLINE FV fv_f32(const float *p) { return _mm512_loadu_ps(p); }
MF_INLINE FV fv_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
MF_INLINE FV fv_fma(FV a, FV b, FV c) { return _mm512_fmadd_ps(a, b, c); }
MF_INLINE FV fv_add(FV a, FV b) { return _mm512_add_ps(a, b); }
MF_INLINE float fv_reduce(FV v) { /* fdot_reduce16 */
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}
/* BF16 pairs: 32 bf16 as 16 dwords; even element in the low half */
typedef __m512i BV;
MF_INLINE BV bv_load(const uint16_t *p) { return _mm512_loadu_si512(p); }
MF_INLINE FV bv_even(BV v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
MF_INLINE FV bv_odd(BV v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u))); }
MF_INLINE FV fv_daz(FV v) { /* denormal (exponent 0) → signed zero */
    const __mmask16 z = _mm512_testn_epi32_mask(_mm512_castps_si512(v), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_and_ps(v, z, v, _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u)));
}
#define fv_ftz fv_daz
MF_INLINE FV fv_mul(FV a, FV b) { return _mm512_mul_ps(a, b); }
#else
typedef struct FV {
    __m256 lo, hi;
} FV;
#define MF_R 2
#define MF_C 2
MF_INLINE FV fv_mk(__m256 lo, __m256 hi) {
    FV v = {lo, hi};
    return v;
}
MF_INLINE FV fv_zero(void) { return fv_mk(_mm256_setzero_ps(), _mm256_setzero_ps()); }
MF_INLINE FV fv_f32(const float *p) { return fv_mk(_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)); }
MF_INLINE FV fv_f16(const uint16_t *p) {
    return fv_mk(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8))));
}
MF_INLINE FV fv_fma(FV a, FV b, FV c) { return fv_mk(_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)); }
MF_INLINE FV fv_add(FV a, FV b) { return fv_mk(_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)); }
MF_INLINE FV fv_mul(FV a, FV b) { return fv_mk(_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)); }
MF_INLINE float fv_reduce(FV v) {
    __m256 a = _mm256_add_ps(v.lo, v.hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}
typedef struct BV {
    __m256i lo, hi;
} BV;
MF_INLINE BV bv_load(const uint16_t *p) {
    BV v = {_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)(p + 16))};
    return v;
}
MF_INLINE FV bv_even(BV v) {
    return fv_mk(_mm256_castsi256_ps(_mm256_slli_epi32(v.lo, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(v.hi, 16)));
}
MF_INLINE FV bv_odd(BV v) {
    const __m256i m = _mm256_set1_epi32((int)0xffff0000u);
    return fv_mk(_mm256_castsi256_ps(_mm256_and_si256(v.lo, m)), _mm256_castsi256_ps(_mm256_and_si256(v.hi, m)));
}
MF_INLINE __m256 daz8(__m256 v) {
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7f800000));
    const __m256 z = _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
    return _mm256_blendv_ps(v, _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u))), z);
}
MF_INLINE FV fv_daz(FV v) { return fv_mk(daz8(v.lo), daz8(v.hi)); }
#define fv_ftz fv_daz
#endif

/* ---- BF16 pair step ------------------------------------------------------------------------------------ */

/* one emulated VDPBF16PS step: acc + x1·y1, then + x0·y0, denormals flushed (inputs and results) */
MF_INLINE FV bf_step_emul(FV acc, BV x, BV y) {
    acc = fv_ftz(fv_add(acc, fv_mul(fv_daz(bv_odd(x)), fv_daz(bv_odd(y)))));
    return fv_ftz(fv_add(acc, fv_mul(fv_daz(bv_even(x)), fv_daz(bv_even(y)))));
}
#if defined(__AVX512BF16__)
MF_INLINE FV bf_step_hw(FV acc, BV x, BV y) { return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)y); }
#endif

/* ---- one dot product, vec order (GEMV / ID) --------------------------------------------------------- */

MF_INLINE float vec_f32(const float *w, const float *x, int64_t n) {
    const int64_t np = n & ~(int64_t)63;
    FV a0 = fv_zero(), a1 = fv_zero(), a2 = fv_zero(), a3 = fv_zero();
    for (int64_t i = 0; i < np; i += 64) {
        a0 = fv_fma(fv_f32(w + i), fv_f32(x + i), a0);
        a1 = fv_fma(fv_f32(w + i + 16), fv_f32(x + i + 16), a1);
        a2 = fv_fma(fv_f32(w + i + 32), fv_f32(x + i + 32), a2);
        a3 = fv_fma(fv_f32(w + i + 48), fv_f32(x + i + 48), a3);
    }
    a0 = fv_add(a0, a2);
    a1 = fv_add(a1, a3);
    float sum = fv_reduce(fv_add(a0, a1));
    /* the n % 64 leftovers as ggml's compiled scalar loop: rounded products added one by one, except the
     * last n % 8, fused (base/fdot.c) */
    const int64_t nf = n - (n - np) % 8;
    for (int64_t i = np; i < nf; i++) {
        const float p = w[i] * x[i];
        sum += p;
    }
    for (int64_t i = nf; i < n; i++) sum = fmaf(w[i], x[i], sum);
    return sum;
}

MF_INLINE float vec_f16(const uint16_t *w, const uint16_t *x, int64_t n) {
    const int64_t np = n & ~(int64_t)63;
    FV a0 = fv_zero(), a1 = fv_zero(), a2 = fv_zero(), a3 = fv_zero();
    for (int64_t i = 0; i < np; i += 64) {
        a0 = fv_fma(fv_f16(w + i), fv_f16(x + i), a0);
        a1 = fv_fma(fv_f16(w + i + 16), fv_f16(x + i + 16), a1);
        a2 = fv_fma(fv_f16(w + i + 32), fv_f16(x + i + 32), a2);
        a3 = fv_fma(fv_f16(w + i + 48), fv_f16(x + i + 48), a3);
    }
    a0 = fv_add(a0, a2);
    a1 = fv_add(a1, a3);
    double sum = fv_reduce(fv_add(a0, a1));
    for (int64_t i = np; i < n; i++) sum += (double)(fp16_to_fp32(w[i]) * fp16_to_fp32(x[i]));
    return (float)sum;
}

#define VEC_BF16(NAME, STEP)                                                                               \
    MF_INLINE float NAME(const uint16_t *w, const uint16_t *x, int64_t n) {                                \
        FV c1 = fv_zero(), c2 = fv_zero();                                                                 \
        int64_t i = 0;                                                                                     \
        for (; i + 64 <= n; i += 64) {                                                                     \
            c1 = STEP(c1, bv_load(w + i), bv_load(x + i));                                                 \
            c2 = STEP(c2, bv_load(w + i + 32), bv_load(x + i + 32));                                       \
        }                                                                                                  \
        double sum = 0;                                                                                    \
        sum += (double)fv_reduce(c1);                                                                      \
        sum += (double)fv_reduce(c2);                                                                      \
        for (; i < n; i++) sum += (double)(bf16_to_fp32(w[i]) * bf16_to_fp32(x[i]));                       \
        return (float)sum;                                                                                 \
    }
VEC_BF16(vec_bf16_emul, bf_step_emul)
#if defined(__AVX512BF16__)
VEC_BF16(vec_bf16_hw, bf_step_hw)
#endif

/* ---- GEMM tiles: MF_R rows × MF_C tokens, one accumulator each -------------------------------------- */

#define GEMM_TILE(NAME, WT, VT, STEPW, LOADW, LOADX, FMA)                                                   \
    static void NAME(const WT *const *w, const WT *const *x, int64_t n, float out[MF_R][MF_C]) {           \
        FV acc[MF_R][MF_C];                                                                                \
        _Pragma("GCC unroll 4") for (int r = 0; r < MF_R; r++)                                             \
            _Pragma("GCC unroll 4") for (int c = 0; c < MF_C; c++) acc[r][c] = fv_zero();                  \
        for (int64_t i = 0; i < n; i += STEPW) {                                                           \
            VT xv[MF_C];                                                                                   \
            _Pragma("GCC unroll 4") for (int c = 0; c < MF_C; c++) xv[c] = LOADX(x[c] + i);                \
            _Pragma("GCC unroll 4") for (int r = 0; r < MF_R; r++) {                                       \
                const VT wv = LOADW(w[r] + i);                                                             \
                _Pragma("GCC unroll 4") for (int c = 0; c < MF_C; c++) acc[r][c] = FMA(acc[r][c], wv, xv[c]); \
            }                                                                                              \
        }                                                                                                  \
        _Pragma("GCC unroll 4") for (int r = 0; r < MF_R; r++)                                             \
            _Pragma("GCC unroll 4") for (int c = 0; c < MF_C; c++) out[r][c] = fv_reduce(acc[r][c]);       \
    }

MF_INLINE FV fma_acc(FV acc, FV a, FV b) { return fv_fma(a, b, acc); }
GEMM_TILE(tile_f32, float, FV, 16, fv_f32, fv_f32, fma_acc)
GEMM_TILE(tile_f16, uint16_t, FV, 16, fv_f16, fv_f16, fma_acc)
GEMM_TILE(tile_bf16_emul, uint16_t, BV, 32, bv_load, bv_load, bf_step_emul)
#if defined(__AVX512BF16__)
GEMM_TILE(tile_bf16_hw, uint16_t, BV, 32, bv_load, bv_load, bf_step_hw)
#endif

/* ---- per format --------------------------------------------------------------------------------------- */

typedef enum MfKind { MF_F32, MF_F16, MF_BF16 } MfKind;

static bool bf16_hw(void) {
#if defined(__AVX512BF16__)
    return isa_has_avx512_bf16();
#else
    return false;
#endif
}

static float vec_one(MfKind k, const void *w, const void *x, int64_t n, bool hw) {
    switch (k) {
    case MF_F32: return vec_f32(w, x, n);
    case MF_F16: return vec_f16(w, x, n);
    default:
#if defined(__AVX512BF16__)
        if (hw) return vec_bf16_hw(w, x, n);
#endif
        (void)hw;
        return vec_bf16_emul(w, x, n);
    }
}

static void tile_any(MfKind k, const void *const *w, const void *const *x, int64_t n, float out[MF_R][MF_C], bool hw) {
    switch (k) {
    case MF_F32: tile_f32((const float *const *)w, (const float *const *)x, n, out); break;
    case MF_F16: tile_f16((const uint16_t *const *)w, (const uint16_t *const *)x, n, out); break;
    default:
#if defined(__AVX512BF16__)
        if (hw) {
            tile_bf16_hw((const uint16_t *const *)w, (const uint16_t *const *)x, n, out);
            break;
        }
#endif
        (void)hw;
        tile_bf16_emul((const uint16_t *const *)w, (const uint16_t *const *)x, n, out);
        break;
    }
}

static const void *xrow(const MmJob *j, MfKind k, int64_t t) {
    return k == MF_F32 ? (const void *)(j->x + t * j->K) : (const void *)mm_act_row(j, t);
}

static void compute_kind(MfKind k, const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1) {
    const bool hw = k == MF_BF16 && bf16_hw();
    const int64_t n = j->K;
    /* tinyBLAS's conditions are in the pick (rows % 4, cols % 16 or 32); a GEMM path whose width the
     * tile step does not divide takes the vec order, as the reference does */
    const int64_t step = k == MF_BF16 ? 32 : 16;
    if (j->path != DOT_GEMM || n % step != 0) {
        for (int64_t t = t0; t < t1; t++) {
            const void *x = xrow(j, k, t);
            for (int64_t o = o0; o < o1; o++) j->y[t * j->O + o] = vec_one(k, mm_w_row(j, o), x, n, hw);
        }
        return;
    }
    for (int64_t o = o0; o < o1; o += MF_R) {
        const int nr = o1 - o < MF_R ? (int)(o1 - o) : MF_R;
        const void *w[MF_R];
        for (int r = 0; r < MF_R; r++) w[r] = mm_w_row(j, o + (r < nr ? r : nr - 1));
        for (int64_t t = t0; t < t1; t += MF_C) {
            const int nc = t1 - t < MF_C ? (int)(t1 - t) : MF_C;
            const void *x[MF_C];
            for (int c = 0; c < MF_C; c++) x[c] = xrow(j, k, t + (c < nc ? c : nc - 1));
            float out[MF_R][MF_C];
            tile_any(k, w, x, n, out, hw);
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[r][c];
        }
    }
}

static void compute_f32(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    compute_kind(MF_F32, j, o0, o1, t0, t1);
}
static void compute_f16(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    compute_kind(MF_F16, j, o0, o1, t0, t1);
}
static void compute_bf16(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    compute_kind(MF_BF16, j, o0, o1, t0, t1);
}

/* ---- the fast arithmetic (format_fast_float_dot): F32 activations, one 16-lane accumulator per dot product,
 * the n % 16 leftovers fused one by one after the reduction; tiles of MF_R rows × C tokens, C = 1 … MF_C ---- */

MF_INLINE FV fw_load(MfKind k, const void *w, int64_t i) {
    if (k == MF_F32) return fv_f32((const float *)w + i);
    if (k == MF_F16) return fv_f16((const uint16_t *)w + i);
#if defined(__AVX512F__)
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i))), 16));
#else
    const uint16_t *p = (const uint16_t *)w + i;
    return fv_mk(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16)),
                 _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 8))), 16)));
#endif
}
MF_INLINE float fw_one(MfKind k, const void *w, int64_t i) {
    return k == MF_F32 ? ((const float *)w)[i] : k == MF_F16 ? fp16_to_fp32(((const uint16_t *)w)[i]) : bf16_to_fp32(((const uint16_t *)w)[i]);
}

MF_INLINE void fast_tile(MfKind k, const void *const *w, const float *const *x, int64_t n, const int C, float out[MF_R][MF_C]) {
    FV acc[MF_R][MF_C];
    _Pragma("GCC unroll 4") for (int r = 0; r < MF_R; r++) _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = fv_zero();
    const int64_t n16 = n & ~(int64_t)15;
    for (int64_t i = 0; i < n16; i += 16) {
        FV xv[MF_C];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) xv[c] = fv_f32(x[c] + i);
        _Pragma("GCC unroll 4") for (int r = 0; r < MF_R; r++) {
            const FV wv = fw_load(k, w[r], i);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[r][c] = fv_fma(wv, xv[c], acc[r][c]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < MF_R; r++) _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        float s = fv_reduce(acc[r][c]);
        for (int64_t i = n16; i < n; i++) s = fmaf(fw_one(k, w[r], i), x[c][i], s);
        out[r][c] = s;
    }
}

#define FAST_TILE_FN(KIND, KN, C)                                                                           \
    static void fast_##KN##_##C(const void *const *w, const float *const *x, int64_t n, float out[MF_R][MF_C]) { \
        fast_tile(KIND, w, x, n, C, out);                                                                  \
    }
#if MF_C == 4
#define FAST_TILES(KIND, KN)                                                                                \
    FAST_TILE_FN(KIND, KN, 1) FAST_TILE_FN(KIND, KN, 2) FAST_TILE_FN(KIND, KN, 3) FAST_TILE_FN(KIND, KN, 4)   \
    static void fast_##KN(const void *const *w, const float *const *x, int64_t n, int C, float out[MF_R][MF_C]) { \
        switch (C) {                                                                                       \
        case 1: fast_##KN##_1(w, x, n, out); break;                                                        \
        case 2: fast_##KN##_2(w, x, n, out); break;                                                        \
        case 3: fast_##KN##_3(w, x, n, out); break;                                                        \
        default: fast_##KN##_4(w, x, n, out); break;                                                       \
        }                                                                                                  \
    }
#else /* MF_C == 2 */
#define FAST_TILES(KIND, KN)                                                                                \
    FAST_TILE_FN(KIND, KN, 1) FAST_TILE_FN(KIND, KN, 2)                                                     \
    static void fast_##KN(const void *const *w, const float *const *x, int64_t n, int C, float out[MF_R][MF_C]) { \
        if (C == 1) fast_##KN##_1(w, x, n, out);                                                           \
        else fast_##KN##_2(w, x, n, out);                                                                  \
    }
#endif
FAST_TILES(MF_F32, f32)
FAST_TILES(MF_F16, f16)
FAST_TILES(MF_BF16, bf16)

static void compute_fast_kind(MfKind k, const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1) {
    for (int64_t o = o0; o < o1; o += MF_R) {
        const int nr = o1 - o < MF_R ? (int)(o1 - o) : MF_R;
        const void *w[MF_R];
        for (int r = 0; r < MF_R; r++) w[r] = mm_w_row(j, o + (r < nr ? r : nr - 1));
        for (int64_t t = t0; t < t1; t += MF_C) {
            const int nc = t1 - t < MF_C ? (int)(t1 - t) : MF_C;
            const float *x[MF_C];
            for (int c = 0; c < nc; c++) x[c] = j->x + (t + c) * j->K;
            float out[MF_R][MF_C];
            if (k == MF_F32) fast_f32(w, x, j->K, nc, out);
            else if (k == MF_F16) fast_f16(w, x, j->K, nc, out);
            else fast_bf16(w, x, j->K, nc, out);
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[r][c];
        }
    }
}
static void compute_fast_f32(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    compute_fast_kind(MF_F32, j, o0, o1, t0, t1);
}
static void compute_fast_f16(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    compute_fast_kind(MF_F16, j, o0, o1, t0, t1);
}
static void compute_fast_bf16(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    compute_fast_kind(MF_BF16, j, o0, o1, t0, t1);
}

const MmFormat MF_FN(mm_f32_fast) = {.act_kind = MM_ACT_F32, .compute = compute_fast_f32, .fast = true};
const MmFormat MF_FN(mm_f16_fast) = {.act_kind = MM_ACT_F32, .compute = compute_fast_f16, .fast = true};
const MmFormat MF_FN(mm_bf16_fast) = {.act_kind = MM_ACT_F32, .compute = compute_fast_bf16, .fast = true};

const MmFormat MF_FN(mm_f32) = {.act_kind = MM_ACT_F32, .compute = compute_f32};
const MmFormat MF_FN(mm_f16) = {.act_kind = MM_ACT_F16, .compute = compute_f16};
const MmFormat MF_FN(mm_bf16) = {.act_kind = MM_ACT_BF16, .compute = compute_bf16};
