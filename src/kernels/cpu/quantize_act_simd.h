/* quantize_act_simd.h — the activation quantizers (Q8_0, Q8_1, Q8_K, F16, BF16) in SIMD, and the
 * matmul's prepared activation rows (matmul_cpu.h). Included by quantize_act_avx2.c and
 * quantize_act_avx512.c, which define QA_FN(name) to add their suffix; the body uses AVX2 + F16C only
 * (this is a few percent of a matmul's time, so one version serves both levels).
 *
 * Every value is bit-identical to the format table's from_float (gguf/quant_act.c, quant_float.c):
 *   Q8_0 / Q8_1: amax = max |x|; d = amax/127; id = amax ? 127/amax : 0; q = round-half-even(x·id)
 *                (cvtps_epi32 under the default rounding mode, as ggml's x86 code); Q8_1's s is
 *                fp16(d·Σq) with the float d
 *   Q8_K:        max = the signed value of the first element of largest magnitude; iscale = -127/max;
 *                q = min(127, round-half-even(iscale·x)); d = 1/iscale; bsums per 16
 *   F16:         vcvtps2ph round to nearest even; BF16: round to nearest even, NaNs quieted
 * Inputs are finite, as the scalar quantizers assume. */
#include <immintrin.h>
#include <string.h>

#include "base/fp16.h"
#include "gguf/quant_blocks.h"
#include "kernels/cpu/matmul_cpu.h"

#define QA_INLINE static inline __attribute__((always_inline))

QA_INLINE float qa_hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

QA_INLINE float qa_f16_round(float d) { return _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT)); }
QA_INLINE uint16_t qa_f16(float d) { return _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT); }

/* 32 int32 (4 vectors, in element order) → 32 int8 in element order */
QA_INLINE __m256i qa_pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
    const __m256i p01 = _mm256_packs_epi32(q0, q1), p23 = _mm256_packs_epi32(q2, q3);
    const __m256i p = _mm256_packs_epi16(p01, p23);
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* lane l = q[4l] + … + q[4l+3] (the 8 lanes of ggml's x86 dot products) */
QA_INLINE __m256i qa_lane_sums(__m256i q8) {
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q8);
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
}

QA_INLINE int qa_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* One Q8_0 / Q8_1 block: stores the 32 quants, returns the float d (before fp16 rounding), the lane
 * sums in *lanes. */
QA_INLINE float qa_q8_block(const float *x, int8_t *qs, __m256i *lanes) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                             _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    const float amax = qa_hmax8(m);
    const float d = amax / 127.f;
    const __m256 id = _mm256_set1_ps(amax != 0.f ? 127.f / amax : 0.f);
    const __m256i q = qa_pack32(_mm256_cvtps_epi32(_mm256_mul_ps(v0, id)), _mm256_cvtps_epi32(_mm256_mul_ps(v1, id)),
                                _mm256_cvtps_epi32(_mm256_mul_ps(v2, id)), _mm256_cvtps_epi32(_mm256_mul_ps(v3, id)));
    _mm256_storeu_si256((__m256i *)qs, q);
    *lanes = qa_lane_sums(q);
    return d;
}

void QA_FN(quantize_act_q8_0)(const float *x, void *dst, int64_t n) {
    BlockQ8_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        __m256i lanes;
        y[i].d = qa_f16(qa_q8_block(x + i * QK, y[i].qs, &lanes));
    }
}

void QA_FN(quantize_act_q8_1)(const float *x, void *dst, int64_t n) {
    BlockQ8_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        __m256i lanes;
        const float d = qa_q8_block(x + i * QK, y[i].qs, &lanes);
        y[i].d = qa_f16(d);
        y[i].s = qa_f16(d * (float)qa_hsum_i32(lanes));
    }
}

/* One Q8_K block: quants to qs, bsums to bs; returns d (0 for an all-zero block). */
QA_INLINE float qa_q8k_block(const float *x, int8_t *qs, int16_t *bs) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
    const float amax = qa_hmax8(m);
    if (amax == 0.f) {
        memset(qs, 0, QK_K);
        memset(bs, 0, 32);
        return 0.f;
    }
    /* the first element whose magnitude is amax, with its sign */
    const __m256 va = _mm256_set1_ps(amax);
    float max = 0;
    for (int j = 0; j < QK_K; j += 8) {
        const __m256 v = _mm256_loadu_ps(x + j);
        const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), va, _CMP_EQ_OQ));
        if (mask) {
            max = x[j + __builtin_ctz((unsigned)mask)];
            break;
        }
    }
    const float iscale = -127.f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int j = 0; j < QK_K; j += 32) {
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8 * k))), top);
        const __m256i p = qa_pack32(q[0], q[1], q[2], q[3]);
        _mm256_storeu_si256((__m256i *)(qs + j), p);
        /* two bsums: elements j..j+15 and j+16..j+31 */
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), p), _mm256_set1_epi16(1));
        /* s: 8 lanes of 4; lanes 0-3 → bsum 0, lanes 4-7 → bsum 1 */
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm_shuffle_epi32(_mm256_castsi256_si128(s), 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        __m128i g = _mm_add_epi32(_mm256_extracti128_si256(s, 1), _mm_shuffle_epi32(_mm256_extracti128_si256(s, 1), 0x4e));
        g = _mm_add_epi32(g, _mm_shuffle_epi32(g, 0xb1));
        bs[j / 16] = (int16_t)_mm_cvtsi128_si32(h);
        bs[j / 16 + 1] = (int16_t)_mm_cvtsi128_si32(g);
    }
    return 1 / iscale;
}

void QA_FN(quantize_act_q8_K)(const float *x, void *dst, int64_t n) {
    BlockQ8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) y[i].d = qa_q8k_block(x + i * QK_K, y[i].qs, y[i].bsums);
}

void QA_FN(quantize_act_f16)(const float *x, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = qa_f16(x[i]);
}

/* round to nearest even; NaN → quiet (bit 6 of the high half set), as fp32_to_bf16 */
QA_INLINE __m128i qa_bf16x8(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)))), 16);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    const __m256i b = _mm256_blendv_epi8(r, q, nan);
    const __m128i lo = _mm256_castsi256_si128(b), hi = _mm256_extracti128_si256(b, 1);
    return _mm_packus_epi32(lo, hi);
}

void QA_FN(quantize_act_bf16)(const float *x, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(d + i), qa_bf16x8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) d[i] = fp32_to_bf16(x[i]);
}

/* ---- prepared rows (matmul_cpu.h) -------------------------------------------------------------------- */

static const float qa_zero_row[QK_K] = {0};

/* MM_ACT_Q8_0P: one octet of tokens (rows n … 7 as zeros) */
QA_INLINE void qa_prep_q8p(int act_off, const float *x, int n, int64_t K, uint8_t *dst) {
    const __m256i neg_off = _mm256_set1_epi32(-act_off);
    for (int64_t i = 0; i < K / QK; i++) {
        uint8_t *b = dst + (size_t)i * MM_Q8P_BLOCK;
        float *da = (float *)(b + 512);
        for (int k = 0; k < 8; k++) {
            const int p = k >> 1, h = k & 1;
            __m256i lanes;
            const float *xr = k < n ? x + (size_t)k * (size_t)K + i * QK : qa_zero_row;
            const float d = qa_f16_round(qa_q8_block(xr, (int8_t *)(b + 64 * p + 32 * h), &lanes));
            _mm256_store_si256((__m256i *)(b + 256 + 64 * p + 32 * h), _mm256_mullo_epi32(lanes, neg_off));
            da[8 * h + p] = da[8 * h + 4 + p] = d;
        }
    }
}

void QA_FN(mm_act_prep)(MmActKind kind, int act_off, const float *x, int n, int64_t K, uint8_t *dst) {
    const MmActLayout l = mm_act_layout(kind, K);
    switch (kind) {
    case MM_ACT_Q8_0:
    case MM_ACT_Q8_1: {
        int8_t *qs = (int8_t *)(dst + l.qs);
        float *d = (float *)(dst + l.d), *s = (float *)(dst + l.s);
        int32_t *corr = (int32_t *)(dst + l.corr), *corr32 = (int32_t *)(dst + l.corr32);
        const __m256i neg_off = _mm256_set1_epi32(-act_off);
        for (int64_t i = 0; i < K / QK; i++) {
            __m256i lanes;
            const float df = qa_q8_block(x + i * QK, qs + i * QK, &lanes);
            const int sum = qa_hsum_i32(lanes);
            d[i] = qa_f16_round(df);
            if (kind == MM_ACT_Q8_1) s[i] = qa_f16_round(df * (float)sum);
            _mm256_storeu_si256((__m256i *)(corr + 8 * i), _mm256_mullo_epi32(lanes, neg_off));
            corr32[i] = -act_off * sum;
        }
        break;
    }
    case MM_ACT_Q8_0P: qa_prep_q8p(act_off, x, n, K, dst); break;
    case MM_ACT_Q8_K: {
        int8_t *qs = (int8_t *)(dst + l.qs);
        float *d = (float *)(dst + l.d);
        int16_t *bs = (int16_t *)(dst + l.bsums);
        for (int64_t i = 0; i < K / QK_K; i++) d[i] = qa_q8k_block(x + i * QK_K, qs + i * QK_K, bs + 16 * i);
        if (act_off) {
            int32_t *corr = (int32_t *)(dst + l.corr), *corr16 = (int32_t *)(dst + l.corr16);
            const __m256i neg_off = _mm256_set1_epi32(-act_off);
            for (int64_t j = 0; j < K / 32; j++)
                _mm256_storeu_si256((__m256i *)(corr + 8 * j),
                                    _mm256_mullo_epi32(qa_lane_sums(_mm256_loadu_si256((const __m256i *)(qs + 32 * j))), neg_off));
            for (int64_t j = 0; j < K / 16; j++) corr16[j] = -act_off * bs[j];
        }
        break;
    }
    case MM_ACT_F16: QA_FN(quantize_act_f16)(x, dst, K); break;
    case MM_ACT_BF16: QA_FN(quantize_act_bf16)(x, dst, K); break;
    case MM_ACT_F32: break;
    }
}
