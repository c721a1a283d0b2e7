/* matmul_b32_avx2.c — Q4_0, Q5_0, IQ4_NL, MXFP4 (× Q8_0) and Q4_1, Q5_1 (× Q8_1) at the AVX2 level; the
 * orders (ONE, TWO, MIN, SPAN) and paths are those of matmul_b32_avx512.c. One YMM of a block is exactly
 * ggml's eight lanes: signed values go through the sign trick (|q| × sign(a, q), vpmaddubsw, vpmaddwd
 * with ones; |q| ≤ 127), Q4_1 / Q5_1 codes are unsigned. A work item runs row by row, each block decoded
 * once for all tokens of the chunk (their float states wait in an array). */
#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "gguf/iq_tables.h"
#include "gguf/quant.h"
#include "gguf/quant_blocks.h"

#define B8_INLINE static inline __attribute__((always_inline))

/* B8_FMIN: the fast arithmetic's order of Q4_1 / Q5_1 (SPAN plus summs += m_w·s_a, added at the end) */
typedef enum B8Order { B8_ONE, B8_TWO, B8_MIN, B8_SPAN, B8_FMIN } B8Order;

B8_INLINE float f16at(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
B8_INLINE __m256i nib32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
}
B8_INLINE __m256i fifth_bit(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(16));
}
B8_INLINE __m256i lut16(const int8_t *tab, __m256i n) {
    return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tab)), n);
}

/* decoders: the block's 32 values (signed, or unsigned codes for Q4_1 / Q5_1), d_w, m_w */
B8_INLINE __m256i dec8_q4_0(const uint8_t *b, float *d, float *m) {
    *d = f16at(b), *m = 0;
    return _mm256_sub_epi8(nib32(b + 2), _mm256_set1_epi8(8));
}
B8_INLINE __m256i dec8_q5_0(const uint8_t *b, float *d, float *m) {
    *d = f16at(b), *m = 0;
    return _mm256_sub_epi8(_mm256_or_si256(nib32(b + 6), fifth_bit(b + 2)), _mm256_set1_epi8(16));
}
B8_INLINE __m256i dec8_iq4_nl(const uint8_t *b, float *d, float *m) {
    *d = f16at(b), *m = 0;
    return lut16(kvalues_iq4nl, nib32(b + 2));
}
B8_INLINE __m256i dec8_mxfp4(const uint8_t *b, float *d, float *m) {
    *d = quant_e8m0_half(b[0]), *m = 0;
    return lut16(kvalues_mxfp4, nib32(b + 1));
}
B8_INLINE __m256i dec8_q4_1(const uint8_t *b, float *d, float *m) {
    *d = f16at(b), *m = f16at(b + 2);
    return nib32(b + 4);
}
B8_INLINE __m256i dec8_q5_1(const uint8_t *b, float *d, float *m) {
    *d = f16at(b), *m = f16at(b + 2);
    return _mm256_or_si256(nib32(b + 8), fifth_bit(b + 4));
}

/* lane l = Σ q·a over elements 4l … 4l+3 */
B8_INLINE __m256i lanes(const bool sgn, __m256i q, const int8_t *a) {
    const __m256i av = _mm256_loadu_si256((const __m256i *)a);
    const __m256i p = sgn ? _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q)) : _mm256_maddubs_epi16(q, av);
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
B8_INLINE int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}
B8_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

typedef struct B8Acc {
    __m256 acc, acc2;
    float summs, s, dlast;
} B8Acc;

#define B8_TOKENS 64

#define B8_ORDER_FN(NAME, DEC, BYTES, SGN, ORD)                                                                      \
    static void rows_##NAME##_##ORD(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1) {             \
        const int64_t nb = j->K / QK;                                                                             \
        B8Acc st[B8_TOKENS];                                                                                      \
        for (int64_t tb = t0; tb < t1; tb += B8_TOKENS) {                                                         \
            const int nt = t1 - tb < B8_TOKENS ? (int)(t1 - tb) : B8_TOKENS;                                      \
            for (int64_t o = o0; o < o1; o++) {                                                                   \
                const uint8_t *w = mm_w_row(j, o);                                                                \
                for (int c = 0; c < nt; c++) {                                                                    \
                    st[c].acc = st[c].acc2 = _mm256_setzero_ps();                                                 \
                    st[c].summs = st[c].s = st[c].dlast = 0;                                                      \
                }                                                                                                 \
                for (int64_t i = 0; i < nb; i++) {                                                                \
                    float dw, mw;                                                                                 \
                    const __m256i q = DEC(w + i * (BYTES), &dw, &mw);                                             \
                    for (int c = 0; c < nt; c++) {                                                                \
                        const uint8_t *ar = mm_act_row(j, tb + c);                                                \
                        const int8_t *a = (const int8_t *)(ar + j->al.qs) + 32 * i;                               \
                        const float da = ((const float *)(ar + j->al.d))[i];                                      \
                        const __m256i l = lanes(SGN, q, a);                                                       \
                        if (ORD == B8_SPAN || ORD == B8_FMIN) {                                                     \
                            if (ORD == B8_FMIN) st[c].summs = fmaf(mw, ((const float *)(ar + j->al.s))[i], st[c].summs); \
                            st[c].s = fmaf((float)hsum_i32(l), dw * da, st[c].s);                                 \
                        } else if (ORD == B8_TWO && (nb & 1) && i == nb - 1) {                                      \
                            st[c].s = (float)hsum_i32(l);                                                         \
                            st[c].dlast = da * dw;                                                                \
                        } else {                                                                                  \
                            if (ORD == B8_MIN) st[c].summs = fmaf(mw, ((const float *)(ar + j->al.s))[i], st[c].summs); \
                            __m256 *acc = (ORD == B8_TWO && (i & 1)) ? &st[c].acc2 : &st[c].acc;                    \
                            *acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * da), _mm256_cvtepi32_ps(l), *acc);         \
                        }                                                                                         \
                    }                                                                                             \
                }                                                                                                 \
                for (int c = 0; c < nt; c++) {                                                                    \
                    float r;                                                                                      \
                    if (ORD == B8_SPAN || ORD == B8_FMIN)                                                           \
                        r = ORD == B8_FMIN ? st[c].s + st[c].summs : st[c].s;                                     \
                    else if (ORD == B8_TWO) {                                                                       \
                        r = hsum8(_mm256_add_ps(st[c].acc, st[c].acc2));                                          \
                        if (nb & 1) r = fmaf(st[c].dlast, st[c].s, r);                                            \
                    } else {                                                                                      \
                        r = hsum8(st[c].acc);                                                                     \
                        if (ORD == B8_MIN) r = r + st[c].summs;                                                     \
                    }                                                                                             \
                    j->y[(tb + c) * j->O + o] = r;                                                                \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
    }

/* The SPAN order of the signed formats, eight rows at a time in the lanes of one YMM: each block is decoded
 * once per row for all the tile's tokens, each row's block total (vpmaddubsw / vpmaddwd lanes, then a vphaddd
 * tree: integers, exact) lands in lane r, then one vcvtdq2ps, one vmulps (d_w·d_a) and one vfmadd per token —
 * lane for lane the operations of the row-by-row SPAN's fmaf((float)Σ, d_w·d_a, s), so the same bits, for a
 * third of the instructions and eight independent rows in flight (a decode GEMV ran one row's dependent chain
 * at a time: Q8_0, 1 thread, 1024 → 3584: T = 1 0.535 → 0.294 ms, T = 512 152.7 → 87.1 ms). Tiles: 8 rows × up
 * to SPAN8_C tokens; the rows left over go row by row. Q8_0 has its own tile below (its values are the block's
 * bytes, loaded where used: faster than eight decoded registers kept across the tokens, 0.23 vs 0.31 ms). */
enum { SPAN8_C = 4 };
typedef __m256i (*B8Dec)(const uint8_t *b, float *d, float *m);

B8_INLINE __m256i span8_pair(__m256i qa, __m256i qb, __m256i av) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i la = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(qa, qa), _mm256_sign_epi8(av, qa)), ones);
    const __m256i lb = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(qb, qb), _mm256_sign_epi8(av, qb)), ones);
    return _mm256_hadd_epi32(la, lb);
}

/* the tile's tokens: their Q8_0 values and block scales; their sums start at 0 */
B8_INLINE void span8_acts(const MmJob *j, int64_t t, int nc, const int8_t **qa, const float **da, __m256 *s) {
    for (int c = 0; c < nc; c++) {
        const uint8_t *ar = mm_act_row(j, t + c);
        qa[c] = (const int8_t *)(ar + j->al.qs), da[c] = (const float *)(ar + j->al.d);
        s[c] = _mm256_setzero_ps();
    }
}

/* lo, hi: span8_pair trees of rows 0-3 and 4-7 (each row's lanes 0-3 in the low half, 4-7 in the high half):
 * the eight totals as floats, times d_w·d_a, onto s */
B8_INLINE __m256 span8_fma(__m256i lo, __m256i hi, __m256 dw, float da, __m256 s) {
    const __m256i tot = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(dw, _mm256_set1_ps(da)), s);
}

B8_INLINE void span8_tile(const MmJob *j, const uint8_t *const w[8], size_t bytes, B8Dec dec, int64_t t, int nc,
                          float *out) {
    const int64_t nb = j->K / QK;
    __m256 s[SPAN8_C];
    const int8_t *qa[SPAN8_C];
    const float *da[SPAN8_C];
    span8_acts(j, t, nc, qa, da, s);
    for (int64_t i = 0; i < nb; i++) {
        __m256i q[8];
        float d[8], m;
        for (int r = 0; r < 8; r++) q[r] = dec(w[r] + (size_t)i * bytes, &d[r], &m);
        const __m256 dw = _mm256_loadu_ps(d);
        for (int c = 0; c < nc; c++) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)(qa[c] + 32 * i));
            const __m256i lo = _mm256_hadd_epi32(span8_pair(q[0], q[1], av), span8_pair(q[2], q[3], av));
            const __m256i hi = _mm256_hadd_epi32(span8_pair(q[4], q[5], av), span8_pair(q[6], q[7], av));
            s[c] = span8_fma(lo, hi, dw, da[c][i], s[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(out + 8 * c, s[c]);
}

typedef void (*B8Rows)(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1);
static void q8f_tile(const MmJob *j, const uint8_t *const w[8], int64_t t, int nc, float *out);

/* dec NULL: Q8_0's own tile (q8f_tile) */
B8_INLINE void span8_compute(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, size_t bytes, B8Dec dec,
                             B8Rows rows) {
    int64_t o = o0;
    for (; o + 8 <= o1; o += 8) {
        const uint8_t *w[8];
        for (int r = 0; r < 8; r++) w[r] = mm_w_row(j, o + r);
        for (int64_t t = t0; t < t1; t += SPAN8_C) {
            const int nc = t1 - t < SPAN8_C ? (int)(t1 - t) : SPAN8_C;
            float y[SPAN8_C * 8];
            if (dec) span8_tile(j, w, bytes, dec, t, nc, y);
            else q8f_tile(j, w, t, nc, y);
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < 8; r++) j->y[(t + c) * j->O + o + r] = y[8 * c + r];
        }
    }
    if (o < o1) rows(j, o, o1, t0, t1);
}

#define B8_FORMAT(NAME, DEC, BYTES, SGN, ACT, ORDER_OF)                                                            \
    B8_ORDER_FN(NAME, DEC, BYTES, SGN, B8_ONE)                                                                    \
    B8_ORDER_FN(NAME, DEC, BYTES, SGN, B8_TWO)                                                                    \
    B8_ORDER_FN(NAME, DEC, BYTES, SGN, B8_MIN)                                                                    \
    B8_ORDER_FN(NAME, DEC, BYTES, SGN, B8_SPAN)                                                                   \
    B8_ORDER_FN(NAME, DEC, BYTES, SGN, B8_FMIN)                                                                   \
    static void compute_##NAME(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {   \
        (void)tmp;                                                                                                \
        switch (ORDER_OF(j->path)) {                                                                              \
        case B8_SPAN:                                                                                             \
            if (SGN) span8_compute(j, o0, o1, t0, t1, BYTES, DEC, rows_##NAME##_B8_SPAN);                         \
            else rows_##NAME##_B8_SPAN(j, o0, o1, t0, t1);                                                        \
            break;                                                                                                \
        case B8_TWO: rows_##NAME##_B8_TWO(j, o0, o1, t0, t1); break;                                              \
        case B8_MIN: rows_##NAME##_B8_MIN(j, o0, o1, t0, t1); break;                                              \
        case B8_FMIN: rows_##NAME##_B8_FMIN(j, o0, o1, t0, t1); break;                                            \
        default: rows_##NAME##_B8_ONE(j, o0, o1, t0, t1); break;                                                  \
        }                                                                                                         \
    }                                                                                                             \
    const MmFormat mm_##NAME##_avx2 = {.act_kind = ACT, .act_off = 0, .compute = compute_##NAME, .fast = true};

/* DOT_FAST: SPAN (FMIN for the formats with a minimum) */
static bool span_path(DotPath p) { return p == DOT_REPACK || p == DOT_REPACK_GEMM || p == DOT_FAST; }
static B8Order ord_q4_0(DotPath p) { return span_path(p) ? B8_SPAN : B8_ONE; }
static B8Order ord_q5_0(DotPath p) { return p == DOT_FAST ? B8_SPAN : B8_ONE; }
static B8Order ord_iq4_nl(DotPath p) { return span_path(p) ? B8_SPAN : p == DOT_GEMM ? B8_ONE : B8_TWO; }
static B8Order ord_mxfp4(DotPath p) { return span_path(p) ? B8_SPAN : B8_TWO; }
static B8Order ord_min(DotPath p) { return p == DOT_FAST ? B8_FMIN : B8_MIN; }
static B8Order ord_fast(DotPath p) {
    (void)p;
    return B8_SPAN;
}
B8_INLINE __m256i dec8_q8_0(const uint8_t *b, float *d, float *m) {
    *d = f16at(b), *m = 0;
    return _mm256_loadu_si256((const __m256i *)(b + 2));
}

B8_FORMAT(q4_0, dec8_q4_0, 18, true, MM_ACT_Q8_0, ord_q4_0)
B8_FORMAT(q5_0, dec8_q5_0, 22, true, MM_ACT_Q8_0, ord_q5_0)
B8_FORMAT(iq4_nl, dec8_iq4_nl, 18, true, MM_ACT_Q8_0, ord_iq4_nl)
B8_FORMAT(mxfp4, dec8_mxfp4, 17, true, MM_ACT_Q8_0, ord_mxfp4)
B8_FORMAT(q4_1, dec8_q4_1, 20, false, MM_ACT_Q8_1, ord_min)
B8_FORMAT(q5_1, dec8_q5_1, 24, false, MM_ACT_Q8_1, ord_min)
/* Q8_0 in the fast arithmetic (its llama.cpp orders are matmul_q8_0_avx2.c's): row by row for the rows left
 * over by the 8-row tiles below (and as their definition) */
B8_FORMAT(q8_0_rows, dec8_q8_0, 34, true, MM_ACT_Q8_0, ord_fast)

/* The same order, eight rows at a time in the lanes of one YMM: each row's block total (vpmaddubsw / vpmaddwd
 * lanes, then a vphaddd tree: integers, exact) lands in lane r, then one vcvtdq2ps, one vmulps (d_w·d_a) and
 * one vfmadd per token — lane for lane the operations of rows_q8_0_rows_B8_SPAN's fmaf((float)Σ, d_w·d_a, s),
 * so the same bits, for a third of the instructions and eight independent rows in flight (a decode GEMV ran
 * one row's dependent chain at a time). Tiles: 8 rows × up to SPAN8_C tokens. */

B8_INLINE __m256i q8f_pair(const uint8_t *a, const uint8_t *b, __m256i av) { /* two rows' block values, where used */
    return span8_pair(_mm256_loadu_si256((const __m256i *)(a + 2)), _mm256_loadu_si256((const __m256i *)(b + 2)), av);
}

static void q8f_tile(const MmJob *j, const uint8_t *const w[8], int64_t t, int nc, float *out) {
    const int64_t nb = j->K / QK;
    __m256 s[SPAN8_C];
    const int8_t *qa[SPAN8_C];
    const float *da[SPAN8_C];
    span8_acts(j, t, nc, qa, da, s);
    for (int64_t i = 0; i < nb; i++) {
        const size_t off = (size_t)i * 34;
        uint16_t h[8];
        for (int r = 0; r < 8; r++) memcpy(&h[r], w[r] + off, 2);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
        for (int c = 0; c < nc; c++) {
            const __m256i av = _mm256_loadu_si256((const __m256i *)(qa[c] + 32 * i));
            const __m256i lo = _mm256_hadd_epi32(q8f_pair(w[0] + off, w[1] + off, av), q8f_pair(w[2] + off, w[3] + off, av));
            const __m256i hi = _mm256_hadd_epi32(q8f_pair(w[4] + off, w[5] + off, av), q8f_pair(w[6] + off, w[7] + off, av));
            s[c] = span8_fma(lo, hi, dw, da[c][i], s[c]);
        }
    }
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(out + 8 * c, s[c]);
}

static void compute_q8_0_fast(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    (void)tmp;
    span8_compute(j, o0, o1, t0, t1, 34, NULL, rows_q8_0_rows_B8_SPAN);
}
const MmFormat mm_q8_0_fast_avx2 = {.act_kind = MM_ACT_Q8_0, .act_off = 0, .compute = compute_q8_0_fast, .fast = true};
