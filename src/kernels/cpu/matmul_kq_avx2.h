/* matmul_kq_avx2.h — the engine of the 256-element formats (K-quants, i-quants) at the AVX2 level,
 * included by matmul_k_avx2.c and matmul_iq_avx2.c. The float orders are those of matmul_kq_avx512.h
 * (LANES8 and SPAN, gguf/quant_order_k.c / _iq.c); only the integer work differs.
 *
 * Without VNNI, the natural element order suits AVX2 best: one YMM of 32 elements gives exactly ggml's
 * eight lanes. A decoder writes a K8Row: the 256 values (unsigned codes, or signed values for the
 * i-quants and Q3_K, which go through the sign trick: |q| × sign(a, q)), and the integer scale of each
 * 16 elements as int16 pairs for vpmaddwd. Per 32 elements: vpmaddubsw (no saturation: |q| ≤ 127 and
 * |a| ≤ 127 keep pair sums ≤ 32258) and vpmaddwd with the scales give the scaled lane sums.
 *
 * A work item runs row by row: each super-block of a row is decoded once and applied to every token of
 * the chunk, whose float states wait in a small array (the lanes of LANES8, or the two SPAN sums); several
 * tokens go 4 at a time through k8_group (a chunk's codes and scales loaded once for the 4). */
#ifndef DL_KERNELS_CPU_MATMUL_KQ_AVX2_H
#define DL_KERNELS_CPU_MATMUL_KQ_AVX2_H

#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "gguf/iq_tables.h"
#include "gguf/quant.h"
#include "gguf/quant_blocks.h"

#define K8_INLINE static inline __attribute__((always_inline))

typedef enum K8Kind { K8_Q2, K8_Q3, K8_Q4, K8_Q5, K8_Q6, K8_IQ, K8_IQ1S, K8_IQ1M } K8Kind;

typedef struct K8Row {
    int8_t q[QK_K] __attribute__((aligned(32))); /* unsigned codes, or signed values (sgn formats) */
    int8_t qd[QK_K] __attribute__((aligned(32))); /* IQ1_S / IQ1_M: the offset sign (±1) of each element */
    int16_t sc[16] __attribute__((aligned(32)));  /* scale per 16 elements */
    int16_t m[16] __attribute__((aligned(32)));   /* Q2/Q4/Q5: minimum per 16; Q6: scale per 16 */
    float d, dmin;                                /* as KRow (matmul_kq_avx512.h) */
} K8Row;

K8_INLINE float k8_f16(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

K8_INLINE float k8_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
K8_INLINE int32_t k8_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* scaled lane sums of chunk ch (elements 32ch … 32ch+31): lane l = sc·Σ over elements 32ch+4l … +3 */
K8_INLINE __m256i k8_chunk_of(const bool sgn, const int8_t *qv, const K8Row *k, const int8_t *a, int ch) {
    const __m256i q = _mm256_load_si256((const __m256i *)(qv + 32 * ch));
    __m256i av = _mm256_loadu_si256((const __m256i *)(a + 32 * ch));
    __m256i p;
    if (sgn)
        p = _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q));
    else
        p = _mm256_maddubs_epi16(q, av);
    /* scales of the two 16-element halves, for the 8 pairs of each */
    const __m256i s = _mm256_set_m128i(_mm_set1_epi16(k->sc[2 * ch + 1]), _mm_set1_epi16(k->sc[2 * ch]));
    return _mm256_madd_epi16(p, s);
}
K8_INLINE __m256i k8_chunk(const bool sgn, const K8Row *k, const int8_t *a, int ch) { return k8_chunk_of(sgn, k->q, k, a, ch); }

K8_INLINE __m256i k8_min_pairs(const K8Row *k, const int16_t *bs) {
    return _mm256_madd_epi16(_mm256_load_si256((const __m256i *)k->m), _mm256_loadu_si256((const __m256i *)bs));
}

/* per-token float state */
typedef struct K8Acc {
    __m256 acc, acc2;
    __m128 accm;
    float summs, s, sm;
} K8Acc;

/* The float steps of one token and super-block, given its integer lane sums: reg[r] = Σ of the chunks of span
 * region r (one region of all 8 chunks when span is 0). The integers are exact, so whichever order the chunks
 * were summed in (k8_step: chunk by chunk for one token; k8_group: a chunk for several tokens at once), the
 * float steps see the same values: a row's result does not depend on its batch. */
K8_INLINE void k8_finish(const K8Kind kind, const int span, const K8Row *k, const __m256i *reg, float d8, const int16_t *bs,
                         K8Acc *st) {
    if (span) { /* Q2/Q4/Q5 also the minimum totals, Q6 less its 32·Σ sc·bsums */
        const bool mins = kind == K8_Q2 || kind == K8_Q4 || kind == K8_Q5;
        const float dd = (kind == K8_IQ ? k->dmin : k->d) * d8, dm = k->dmin * d8; /* IQ: dfac (panel) */
        const __m256i mp = (mins || kind == K8_Q6) ? k8_min_pairs(k, bs) : _mm256_setzero_si256();
        for (int e0 = 0; e0 < QK_K; e0 += span) {
            const __m256i t = reg[e0 / span];
            const __m256i keep = _mm256_and_si256(
                _mm256_cmpgt_epi32(_mm256_set1_epi32((e0 + span) / 32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                _mm256_cmpgt_epi32(_mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8), _mm256_set1_epi32(e0 / 32)));
            int32_t tot = k8_hsum_i32(t);
            if (kind == K8_Q6) tot -= 32 * k8_hsum_i32(_mm256_and_si256(mp, keep));
            st->s = fmaf((float)tot, dd, st->s);
            if (mins) st->sm = fmaf((float)k8_hsum_i32(_mm256_and_si256(mp, keep)), dm, st->sm);
        }
        return;
    }
    __m256i lane = reg[0];
    const float d = d8 * k->d;
    if (kind == K8_Q6) lane = _mm256_sub_epi32(lane, _mm256_slli_epi32(k8_min_pairs(k, bs), 5));
    if (kind == K8_Q2) {
        const float dmin = -d8 * k->dmin;
        st->acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k8_min_pairs(k, bs)), st->acc);
    }
    st->acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane), st->acc);
    if (kind == K8_Q4) {
        const float dmin = -d8 * k->dmin;
        const __m256i p = k8_min_pairs(k, bs);
        const __m128i q4 = _mm_hadd_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        st->accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(q4), st->accm);
    }
    if (kind == K8_Q5) {
        const float dmin = -d8 * k->dmin;
        st->summs = fmaf(dmin, (float)k8_hsum_i32(k8_min_pairs(k, bs)), st->summs);
    }
}

K8_INLINE void k8_step(const K8Kind kind, const bool sgn, const int span, const K8Row *k, const int8_t *a, float d8,
                       const int16_t *bs, K8Acc *st) {
    if (kind == K8_IQ1S || kind == K8_IQ1M) { /* lanes of q and of the offset signs; panel values 8q + delta */
        __m256i t = k8_chunk_of(sgn, k->q, k, a, 0), td = k8_chunk_of(sgn, k->qd, k, a, 0);
        for (int ch = 1; ch < 8; ch++) {
            t = _mm256_add_epi32(t, k8_chunk_of(sgn, k->q, k, a, ch));
            td = _mm256_add_epi32(td, k8_chunk_of(sgn, k->qd, k, a, ch));
        }
        if (span) {
            st->s = fmaf((float)(8 * k8_hsum_i32(t) + k8_hsum_i32(td)), k->dmin * d8, st->s);
            return;
        }
        const float d = k->d * d8;
        st->acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(t), st->acc);
        if (kind == K8_IQ1S)
            st->summs = fmaf(d, (float)k8_hsum_i32(td), st->summs);
        else
            st->acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(td), st->acc2);
        return;
    }
    const int R = span ? QK_K / span : 1, per = 8 / R;
    __m256i reg[8];
    for (int r = 0; r < R; r++) {
        reg[r] = k8_chunk(sgn, k, a, r * per);
        for (int ch = r * per + 1; ch < (r + 1) * per; ch++) reg[r] = _mm256_add_epi32(reg[r], k8_chunk(sgn, k, a, ch));
    }
    k8_finish(kind, span, k, reg, d8, bs, st);
}

K8_INLINE float k8_result(const K8Kind kind, const int span, float post, const K8Acc *st) {
    if (span) return (kind == K8_Q2 || kind == K8_Q4 || kind == K8_Q5) ? st->s - st->sm : st->s;
    if (kind == K8_IQ1S) return k8_hsum8(st->acc) + IQ1S_DELTA * st->summs;
    if (kind == K8_IQ1M) return fmaf(IQ1M_DELTA, k8_hsum8(st->acc2), k8_hsum8(st->acc));
    float r = k8_hsum8(st->acc);
    if (kind == K8_Q4) {
        float m[4];
        _mm_storeu_ps(m, st->accm);
        r = r + ((m[0] + m[2]) + (m[1] + m[3]));
    }
    if (kind == K8_Q5) r = r + st->summs;
    if (kind == K8_IQ && post != 1.f) r = post * r;
    return r;
}

/* C tokens (1-4) of one decoded super-block at once: each chunk's codes and scales are loaded once and applied
 * to the C tokens' activations (vpmaddubsw + vpmaddwd + add per token and chunk, instead of re-deriving the
 * scale pair per token), the same integer sums as k8_step, then the same float steps per token (k8_finish).
 * Not for IQ1_S / IQ1_M (two lanes of sums). */
K8_INLINE void k8_group(const K8Kind kind, const bool sgn, const int span, const K8Row *k, const MmJob *j, int64_t t,
                        int64_t sb, const int C, K8Acc *st) {
    const int R = span ? QK_K / span : 1, per = 8 / R;
    const int8_t *a[4];
    __m256i reg[4][8]; /* [token][region] */
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) a[c] = (const int8_t *)(mm_act_row(j, t + c) + j->al.qs) + sb * QK_K;
    for (int r = 0; r < R; r++) {
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) reg[c][r] = _mm256_setzero_si256();
        for (int ch = r * per; ch < (r + 1) * per; ch++) {
            const __m256i q = _mm256_load_si256((const __m256i *)(k->q + 32 * ch));
            const __m256i qa = sgn ? _mm256_sign_epi8(q, q) : q;
            const __m256i s = _mm256_set_m128i(_mm_set1_epi16(k->sc[2 * ch + 1]), _mm_set1_epi16(k->sc[2 * ch]));
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m256i av = _mm256_loadu_si256((const __m256i *)(a[c] + 32 * ch));
                if (sgn) av = _mm256_sign_epi8(av, q);
                reg[c][r] = _mm256_add_epi32(reg[c][r], _mm256_madd_epi16(_mm256_maddubs_epi16(qa, av), s));
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const uint8_t *ar = mm_act_row(j, t + c);
        k8_finish(kind, span, k, reg[c], ((const float *)(ar + j->al.d))[sb], (const int16_t *)(ar + j->al.bsums) + sb * 16, &st[c]);
    }
}

/* the nt tokens of a chunk in groups of 4 (k8_group) */
K8_INLINE void k8_groups(const K8Kind kind, const bool sgn, const int span, const K8Row *k, const MmJob *j, int64_t tb,
                         int64_t sb, int nt, K8Acc *st) {
    int c = 0;
    for (; c + 4 <= nt; c += 4) k8_group(kind, sgn, span, k, j, tb + c, sb, 4, st + c);
    switch (nt - c) {
    case 3: k8_group(kind, sgn, span, k, j, tb + c, sb, 3, st + c); break;
    case 2: k8_group(kind, sgn, span, k, j, tb + c, sb, 2, st + c); break;
    case 1: k8_group(kind, sgn, span, k, j, tb + c, sb, 1, st + c); break;
    default: break;
    }
}

/* at most this many tokens per pass over a row (their states live in K8Acc[]) */
#define K8_TOKENS 64

/* K8_FORMAT(NAME, KIND, BYTES, SGN, DECODE, POST, SPAN_OF): compute_<NAME> and mm_<NAME>_avx2 */
#define K8_SPAN_FN(NAME, KIND, BYTES, SGN, DECODE, POST, SPAN)                                                     \
    static void rows_##NAME##_##SPAN(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1) {          \
        const int64_t nsb = j->K / QK_K;                                                                          \
        K8Acc st[K8_TOKENS];                                                                                      \
        for (int64_t tb = t0; tb < t1; tb += K8_TOKENS) {                                                         \
            const int nt = t1 - tb < K8_TOKENS ? (int)(t1 - tb) : K8_TOKENS;                                      \
            for (int64_t o = o0; o < o1; o++) {                                                                   \
                const uint8_t *w = mm_w_row(j, o);                                                                \
                for (int c = 0; c < nt; c++) {                                                                    \
                    st[c].acc = st[c].acc2 = _mm256_setzero_ps();                                                 \
                    st[c].accm = _mm_setzero_ps();                                                                \
                    st[c].summs = st[c].s = st[c].sm = 0;                                                         \
                }                                                                                                 \
                for (int64_t sb = 0; sb < nsb; sb++) {                                                            \
                    K8Row kr;                                                                                     \
                    DECODE(w + sb * (BYTES), &kr);                                                                \
                    if (nt > 1 && KIND != K8_IQ1S && KIND != K8_IQ1M)                                             \
                        k8_groups(KIND, SGN, SPAN, &kr, j, tb, sb, nt, st);                                       \
                    else                                                                                          \
                        for (int c = 0; c < nt; c++) {                                                            \
                            const uint8_t *ar = mm_act_row(j, tb + c);                                            \
                            kq8_step_tok(KIND, SGN, SPAN, &kr, ar, j, sb, &st[c]);                                \
                        }                                                                                         \
                }                                                                                                 \
                for (int c = 0; c < nt; c++) j->y[(tb + c) * j->O + o] = k8_result(KIND, SPAN, POST, &st[c]);     \
            }                                                                                                     \
        }                                                                                                         \
    }

K8_INLINE void kq8_step_tok(const K8Kind kind, const bool sgn, const int span, const K8Row *k, const uint8_t *ar,
                            const MmJob *j, int64_t sb, K8Acc *st) {
    const int8_t *a = (const int8_t *)(ar + j->al.qs) + sb * QK_K;
    const float d8 = ((const float *)(ar + j->al.d))[sb];
    const int16_t *bs = (const int16_t *)(ar + j->al.bsums) + sb * 16;
    k8_step(kind, sgn, span, k, a, d8, bs, st);
}

#define K8_FORMAT(NAME, KIND, BYTES, SGN, DECODE, POST, SPAN_OF)                                                   \
    K8_SPAN_FN(NAME, KIND, BYTES, SGN, DECODE, POST, 0)                                                           \
    K8_SPAN_FN(NAME, KIND, BYTES, SGN, DECODE, POST, 64)                                                          \
    K8_SPAN_FN(NAME, KIND, BYTES, SGN, DECODE, POST, 128)                                                         \
    K8_SPAN_FN(NAME, KIND, BYTES, SGN, DECODE, POST, 256)                                                         \
    static void compute_##NAME(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {   \
        (void)tmp;                                                                                                \
        switch (SPAN_OF(j->path)) {                                                                               \
        case 64: rows_##NAME##_64(j, o0, o1, t0, t1); break;                                                      \
        case 128: rows_##NAME##_128(j, o0, o1, t0, t1); break;                                                    \
        case 256: rows_##NAME##_256(j, o0, o1, t0, t1); break;                                                    \
        default: rows_##NAME##_0(j, o0, o1, t0, t1); break;                                                       \
        }                                                                                                         \
    }                                                                                                             \
    const MmFormat mm_##NAME##_avx2 = {.act_kind = MM_ACT_Q8_K, .act_off = 0, .compute = compute_##NAME, .fast = true};

#endif
