/* matmul_b32_avx512.c — the 32-element formats other than Q8_0 (Q4_0, Q5_0, IQ4_NL, MXFP4 × Q8_0; Q4_1,
 * Q5_1 × Q8_1), AVX-512 VNNI. The orders (gguf/quant_order_legacy.c), per block i of 32 elements:
 *   ONE   (vec_dot / tinyBLAS) eight lanes, lane l += (d_w·d_a)·Σ(elements 4l..4l+3), fused; hsum_float_8
 *   TWO   (IQ4_NL, MXFP4 vec_dot) the same with even and odd blocks in two lane sets, added lane-wise
 *         before the hsum; an odd last block's total added after it, fused
 *   MIN   (Q4_1, Q5_1) ONE on the unsigned codes plus summs += m_w·s_a (fused) per block, added at the end
 *   SPAN  (the repacked kernels of Q4_0, IQ4_NL, MXFP4, rows % 8 == 0) acc = fma(Σ all 32, d_w·d_a, acc)
 * Every order runs on 16 weight rows at once, one row per ZMM lane: a row tile's blocks are decoded (q +
 * off as u8, d_w, m_w as floats) and transposed so that group g (elements 4g..4g+3) of the 16 rows is one
 * vector; the token's 4 activations are a broadcast dword, vpdpbusd starts from the prepared correction
 * -off·Σa, and the float steps run 16 dot products per instruction. One activation row decodes and
 * multiplies block by block; batches decode the tile into tmp once per token chunk. */
#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <string.h>

#include "gguf/iq_tables.h"
#include "gguf/quant.h"
#include "gguf/quant_blocks.h"

#define B_INLINE static inline __attribute__((always_inline))

/* B_FMIN: the fast arithmetic's order of Q4_1 / Q5_1 (SPAN plus summs += m_w·s_a, added at the end) */
typedef enum BOrder { B_ONE, B_TWO, B_MIN, B_SPAN, B_FMIN } BOrder;

B_INLINE float f16at(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ---- transposed blocks -------------------------------------------------------------------------------- */

/* 16 rows' 8 dwords → 8 vectors of 16 rows: out[g] lane r = rows[r] dword g */
B_INLINE void transpose16x8(const __m256i *rows, __m512i *out) {
    __m512i v[8], t[8], u[8];
#pragma GCC unroll 16
    for (int r = 0; r < 8; r++) v[r] = _mm512_inserti64x4(_mm512_castsi256_si512(rows[r]), rows[r + 8], 1);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* u[c] (rows 0-3 | 8-11) and u[c+4] (rows 4-7 | 12-15) hold columns c (128-bit lanes 0, 2) and c+4 (1, 3) */
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        out[c] = _mm512_permutex2var_epi64(u[c], lo, u[c + 4]);
        out[c + 4] = _mm512_permutex2var_epi64(u[c], hi, u[c + 4]);
    }
}

/* the tile: per block 8 vectors of q (512 B), d_w[16], m_w[16] */
#define B_BLOCK_BYTES 640
static size_t b32_tmp_bytes(int64_t K) { return 2 * (size_t)(K / QK) * B_BLOCK_BYTES + 128; } /* two tiles */

/* Prepared activation pointers of one token. */
typedef struct BTok {
    const int8_t *qs;
    const float *d, *s;
    const int32_t *corr, *corr32;
} BTok;

B_INLINE BTok b_tok(const MmJob *j, int64_t t) {
    const uint8_t *r = mm_act_row(j, t);
    BTok k = {(const int8_t *)(r + j->al.qs), (const float *)(r + j->al.d), (const float *)(r + j->al.s),
              (const int32_t *)(r + j->al.corr), (const int32_t *)(r + j->al.corr32)};
    return k;
}

B_INLINE __m512i bc32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* The per-tile float state: C tokens. */
typedef struct BState {
    __m512 acc[4][8], acc2[2][8], summs[2], s[4];
} BState;

B_INLINE void b_init(const BOrder o, const int C, BState *st) {
    for (int c = 0; c < C; c++) {
        if (o == B_SPAN || o == B_FMIN) {
            st->s[c] = _mm512_setzero_ps();
            if (o == B_FMIN) st->summs[c] = _mm512_setzero_ps();
            continue;
        }
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) st->acc[c][g] = _mm512_setzero_ps();
        if (o == B_TWO)
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) st->acc2[c][g] = _mm512_setzero_ps();
        if (o == B_MIN) st->summs[c] = _mm512_setzero_ps();
    }
}

/* One block i of the 16 rows (q: 8 vectors, dw, mw) with C tokens; `sgn`: the format has an offset. */
B_INLINE void b_step(const BOrder o, const bool sgn, const int C, const __m512i *q, __m512 dw, __m512 mw, const BTok *tk,
                     int64_t i, int64_t nb, BState *st) {
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        const int8_t *a = tk[c].qs + 32 * i;
        const __m512 dv = _mm512_mul_ps(dw, _mm512_set1_ps(tk[c].d[i]));
        if (o == B_SPAN || o == B_FMIN) {
            if (o == B_FMIN) st->summs[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(tk[c].s[i]), st->summs[c]);
            __m512i S = sgn ? _mm512_set1_epi32(tk[c].corr32[i]) : _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) S = _mm512_dpbusd_epi32(S, q[g], bc32(a + 4 * g));
            st->s[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), dv, st->s[c]);
            continue;
        }
        if (o == B_TWO && (nb & 1) && i == nb - 1) { /* the odd last block: its total, after the hsum */
            __m512i S = sgn ? _mm512_set1_epi32(tk[c].corr32[i]) : _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) S = _mm512_dpbusd_epi32(S, q[g], bc32(a + 4 * g));
            st->s[c] = _mm512_cvtepi32_ps(S);
            st->summs[c] = dv; /* kept for the end */
            continue;
        }
        __m512 *acc = (o == B_TWO && (i & 1)) ? st->acc2[c] : st->acc[c];
        if (o == B_MIN) st->summs[c] = _mm512_fmadd_ps(mw, _mm512_set1_ps(tk[c].s[i]), st->summs[c]);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i init = sgn ? _mm512_set1_epi32(tk[c].corr[8 * i + g]) : _mm512_setzero_si512();
            acc[g] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, q[g], bc32(a + 4 * g))), acc[g]);
        }
    }
}

B_INLINE __m512 fold8(const __m512 *a) {
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                         _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
}

B_INLINE __m512 b_result(const BOrder o, int64_t nb, const BState *st, int c) {
    if (o == B_SPAN) return st->s[c];
    if (o == B_FMIN) return _mm512_add_ps(st->s[c], st->summs[c]);
    if (o == B_TWO) {
        __m512 sum[8];
        for (int g = 0; g < 8; g++) sum[g] = _mm512_add_ps(st->acc[c][g], st->acc2[c][g]);
        __m512 r = fold8(sum);
        if (nb & 1) r = _mm512_fmadd_ps(st->summs[c], st->s[c], r);
        return r;
    }
    __m512 r = fold8(st->acc[c]);
    if (o == B_MIN) r = _mm512_add_ps(r, st->summs[c]);
    return r;
}

/* Raw dwords u[k] of 16 rows (lane r = row r) → the 8 group vectors: dword k gives group k (low nibbles) and
 * group k + 4 (high); lut: kvalues table (NULL: codes as they are), the result then offset by 128. */
B_INLINE void nib_split(const __m512i *u, const int8_t *lut, __m512i *q) {
    const __m512i m4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        q[k] = _mm512_and_si512(u[k], m4);
        q[k + 4] = _mm512_and_si512(_mm512_srli_epi16(u[k], 4), m4);
    }
    if (lut) {
        const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)lut)), x80 = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) q[g] = _mm512_xor_si512(_mm512_shuffle_epi8(tab, q[g]), x80);
    }
}

/* The nibble formats (Q4_0, IQ4_NL, MXFP4, Q4_1) decode 16 rows straight into the transposed layout: the
 * raw 16 bytes of each row are transposed as 4 dwords (zmm m holds rows 4L + m, L = 0..3, so that two
 * unpack stages leave the rows in order), then split into nibbles: raw dword k gives group k (low nibbles)
 * and group k + 4 (high). Half the shuffles of decoding first. lut: kvalues table (NULL: codes as they
 * are), the result then offset by 128. */
B_INLINE void nib16(const uint8_t *const *w, size_t off, const int8_t *lut, __m512i *q) {
    __m512i v[4];
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(w[m] + off)));
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w[4 + m] + off)), 1);
        z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w[8 + m] + off)), 2);
        v[m] = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(w[12 + m] + off)), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(v[0], v[1]), t1 = _mm512_unpackhi_epi32(v[0], v[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(v[2], v[3]), t3 = _mm512_unpackhi_epi32(v[2], v[3]);
    const __m512i u[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2), _mm512_unpacklo_epi64(t1, t3),
                          _mm512_unpackhi_epi64(t1, t3)};
    nib_split(u, lut, q);
}

B_INLINE __m512 f16x16(const uint8_t *const *w, size_t off) {
    uint16_t h[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) memcpy(&h[r], w[r] + off, 2);
    return _mm512_cvtph_ps(_mm256_set_epi16((short)h[15], (short)h[14], (short)h[13], (short)h[12], (short)h[11], (short)h[10],
                                            (short)h[9], (short)h[8], (short)h[7], (short)h[6], (short)h[5], (short)h[4],
                                            (short)h[3], (short)h[2], (short)h[1], (short)h[0]));
}

#define DEC16_Q4_0(w, i, q, dwv, mwv)                                                                              \
    do {                                                                                                           \
        nib16((w), (size_t)(i) * 18 + 2, NULL, (q));                                                               \
        (dwv) = f16x16((w), (size_t)(i) * 18);                                                                     \
        (mwv) = _mm512_setzero_ps();                                                                               \
    } while (0)
#define DEC16_IQ4_NL(w, i, q, dwv, mwv)                                                                            \
    do {                                                                                                           \
        nib16((w), (size_t)(i) * 18 + 2, kvalues_iq4nl, (q));                                                      \
        (dwv) = f16x16((w), (size_t)(i) * 18);                                                                     \
        (mwv) = _mm512_setzero_ps();                                                                               \
    } while (0)
#define DEC16_Q4_1(w, i, q, dwv, mwv)                                                                              \
    do {                                                                                                           \
        nib16((w), (size_t)(i) * 20 + 4, NULL, (q));                                                               \
        (dwv) = f16x16((w), (size_t)(i) * 20);                                                                     \
        (mwv) = f16x16((w), (size_t)(i) * 20 + 2);                                                                 \
    } while (0)
/* MXFP4's 16 E8M0 scales halved (quant_e8m0_half: 2^(e-128), exact) in the lanes: (e - 1) << 23, or 0x200000 << e
 * for e < 2 (subnormal) */
B_INLINE __m512 e8m0x16(const uint8_t *const *w, size_t off) {
    uint8_t e[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) e[r] = w[r][off];
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)e));
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(v, _mm512_set1_epi32(1)), 23);
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), v);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(v, _mm512_set1_epi32(2)), big, small));
}
#define DEC16_MXFP4(w, i, q, dwv, mwv)                                                                             \
    do {                                                                                                           \
        nib16((w), (size_t)(i) * 17 + 1, kvalues_mxfp4, (q));                                                      \
        (dwv) = e8m0x16((w), (size_t)(i) * 17);                                                                    \
        (mwv) = _mm512_setzero_ps();                                                                               \
    } while (0)

/* The nibble formats' P16 panels (ops.h: n4p16_q / n4p16_s; the CPU backend packs them in the fast arithmetic):
 * block i's raw bytes already transposed, so decoding is 4 aligned loads and the nibble split. */
B_INLINE void nibp(const uint8_t *qb, const int8_t *lut, __m512i *q) {
    __m512i u[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) u[k] = _mm512_loadu_si512(qb + 64 * k);
    nib_split(u, lut, q);
}
/* a decoded block in the tile layout (B_BLOCK_BYTES: the 8 group vectors, d_w, m_w) */
B_INLINE void b_store_block(uint8_t *bl, const __m512i *q, __m512 dwv, __m512 mwv) {
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) _mm512_store_si512(bl + 64 * g, q[g]);
    _mm512_store_ps((float *)(bl + 512), dwv);
    _mm512_store_ps((float *)(bl + 576), mwv);
}
B_INLINE __m512 f16p(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
#define DECP_Q4_0(pan, i, nb, q, dwv, mwv)                                                                         \
    do {                                                                                                           \
        nibp((pan) + n4p16_q((i), 32), NULL, (q));                                                                 \
        (dwv) = f16p((pan) + n4p16_s((i), (nb), 32));                                                              \
        (mwv) = _mm512_setzero_ps();                                                                               \
    } while (0)
#define DECP_IQ4_NL(pan, i, nb, q, dwv, mwv)                                                                       \
    do {                                                                                                           \
        nibp((pan) + n4p16_q((i), 32), kvalues_iq4nl, (q));                                                        \
        (dwv) = f16p((pan) + n4p16_s((i), (nb), 32));                                                              \
        (mwv) = _mm512_setzero_ps();                                                                               \
    } while (0)
#define DECP_Q4_1(pan, i, nb, q, dwv, mwv)                                                                         \
    do {                                                                                                           \
        nibp((pan) + n4p16_q((i), 64), NULL, (q));                                                                 \
        (dwv) = f16p((pan) + n4p16_s((i), (nb), 64));                                                              \
        (mwv) = f16p((pan) + n4p16_s((i), (nb), 64) + 32);                                                         \
    } while (0)
/* the formats without panels (never called: pack_p16_format refuses them) */
#define DECP_NONE(pan, i, nb, q, dwv, mwv) __builtin_unreachable()

/* Decodes block i of the 16 rows and transposes it (the formats without a DEC16_ decoder). */
#define B_DECODE16(DEC, BYTES, w, i, q, dwv, mwv)                                                                  \
    do {                                                                                                           \
        __m256i rr[16];                                                                                            \
        float dd[16] __attribute__((aligned(64))), mm[16] __attribute__((aligned(64)));                            \
        _Pragma("GCC unroll 16") for (int r = 0; r < 16; r++) rr[r] = DEC((w)[r] + (size_t)(i) * (BYTES), &dd[r], &mm[r]);                  \
        transpose16x8(rr, (q));                                                                                    \
        /* scalar reads (a 64-byte load of 16 scalar stores would miss store forwarding) */                        \
        (dwv) = _mm512_set_ps(dd[15], dd[14], dd[13], dd[12], dd[11], dd[10], dd[9], dd[8], dd[7], dd[6], dd[5],   \
                              dd[4], dd[3], dd[2], dd[1], dd[0]);                                                  \
        (mwv) = _mm512_set_ps(mm[15], mm[14], mm[13], mm[12], mm[11], mm[10], mm[9], mm[8], mm[7], mm[6], mm[5],   \
                              mm[4], mm[3], mm[2], mm[1], mm[0]);                                                  \
    } while (0)

/* Q5_0 / Q5_1: nib16's codes, then each group's fifth bits (bits 4g … 4g + 3 of the row's qh word) into bit 4 of
 * its bytes: the 16 rows' qh in the lanes, shifted so the group's bits are in byte 0, that byte copied to the dword's
 * four (vpshufb), one bit tested per byte and 16 added where set. The first 8 bytes of each row's block (Q5_0: d,
 * qh, 2 quant bytes; Q5_1: d, m, qh) come into the lanes as two dword vectors (x0: bytes 0-3, x1: 4-7) through a
 * 128-byte buffer, instead of 16 scalar inserts per field. (They decoded each row and transposed the result.) */
B_INLINE void hdr16(const uint8_t *const *w, size_t off, __m512i *x0, __m512i *x1) {
    uint64_t hd[16] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) memcpy(&hd[r], w[r] + off, 8);
    const __m512i h0 = _mm512_load_si512(hd), h1 = _mm512_load_si512(hd + 8);
    *x0 = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), h1);
    *x1 = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), h1);
}
B_INLINE void fifth16(__m512i qh, __m512i *q) {
    const __m512i b0 = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12));
    const __m512i bit = _mm512_set1_epi32(0x08040201), sixteen = _mm512_set1_epi8(16);
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        const __mmask64 m = _mm512_test_epi8_mask(_mm512_shuffle_epi8(_mm512_srli_epi32(qh, 4 * g), b0), bit);
        q[g] = _mm512_mask_add_epi8(q[g], m, q[g], sixteen);
    }
}
B_INLINE __m512 f16lo(__m512i x) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x)); }
#define DEC16_Q5_0(w, i, q, dwv, mwv)                                                                              \
    do {                                                                                                           \
        __m512i x0_, x1_;                                                                                          \
        hdr16((w), (size_t)(i) * 22, &x0_, &x1_);                                                                  \
        nib16((w), (size_t)(i) * 22 + 6, NULL, (q));                                                               \
        fifth16(_mm512_or_si512(_mm512_srli_epi32(x0_, 16), _mm512_slli_epi32(x1_, 16)), (q));                    \
        (dwv) = f16lo(x0_);                                                                                        \
        (mwv) = _mm512_setzero_ps();                                                                               \
    } while (0)
#define DEC16_Q5_1(w, i, q, dwv, mwv)                                                                              \
    do {                                                                                                           \
        __m512i x0_, x1_;                                                                                          \
        hdr16((w), (size_t)(i) * 24, &x0_, &x1_);                                                                  \
        nib16((w), (size_t)(i) * 24 + 8, NULL, (q));                                                               \
        fifth16(x1_, (q));                                                                                         \
        (dwv) = f16lo(x0_);                                                                                        \
        (mwv) = f16lo(_mm512_srli_epi32(x0_, 16));                                                                 \
    } while (0)

/* B32_FORMAT(NAME, DEC16, DECP, BYTES, OFF, ACT, ORDER_OF): compute_<NAME> and mm_<NAME>_avx512; DEC16(w, i, q,
 * dwv, mwv) decodes block i of 16 rows, DECP(pan, i, nb, …) the same from a P16 panel; ORDER_OF(path) → BOrder. */
#define B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, O, C)                                                             \
    /* one row tile (its panel pan, or the file's rows w), C tokens from t, decoding as it goes */                 \
    static void direct_##NAME##_##O##_##C(const MmJob *j, const uint8_t *pan, const uint8_t *const *w, int64_t t,  \
                                          float out[4][16]) {                                                      \
        const int64_t nb = j->K / QK;                                                                              \
        BTok tk[C];                                                                                                \
        for (int c = 0; c < (C); c++) tk[c] = b_tok(j, t + c);                                                     \
        BState st;                                                                                                 \
        b_init(O, C, &st);                                                                                         \
        /* the next tile (rows are contiguous): 16 short rows are 16 streams the hardware prefetcher               \
         * would not follow */                                                                                     \
        const char *pf = (const char *)(pan ? pan : w[0]) + 16 * j->w->row_bytes;                                  \
        for (int64_t i = 0; i < nb; i++) {                                                                         \
            __m512i q[8];                                                                                          \
            __m512 dwv, mwv;                                                                                       \
            for (int k = 0; k < 16 * (BYTES) / 64 + 1; k++) _mm_prefetch(pf + 16 * (BYTES) * i + 64 * k, _MM_HINT_T0); \
            if (pan) DECP(pan, i, nb, q, dwv, mwv);                                                                \
            else DEC(w, i, q, dwv, mwv);                                                                           \
            b_step(O, (OFF) != 0, C, q, dwv, mwv, tk, i, nb, &st);                                                 \
        }                                                                                                          \
        for (int c = 0; c < (C); c++) _mm512_storeu_ps(out[c], b_result(O, nb, &st, c));                           \
    }                                                                                                              \
    /* one decoded tile (tmp), C tokens from t */                                                                  \
    static void tiled_##NAME##_##O##_##C(const MmJob *j, const uint8_t *tile, int64_t t, float out[4][16]) {       \
        const int64_t nb = j->K / QK;                                                                              \
        BTok tk[C];                                                                                                \
        for (int c = 0; c < (C); c++) tk[c] = b_tok(j, t + c);                                                     \
        BState st;                                                                                                 \
        b_init(O, C, &st);                                                                                         \
        for (int64_t i = 0; i < nb; i++) {                                                                         \
            const uint8_t *bl = tile + (size_t)i * B_BLOCK_BYTES;                                                  \
            __m512i q[8];                                                                                          \
            _Pragma("GCC unroll 16") for (int g = 0; g < 8; g++) q[g] = _mm512_load_si512(bl + 64 * g);                                     \
            b_step(O, (OFF) != 0, C, q, _mm512_load_ps((const float *)(bl + 512)), _mm512_load_ps((const float *)(bl + 576)), \
                   tk, i, nb, &st);                                                                                \
        }                                                                                                          \
        for (int c = 0; c < (C); c++) _mm512_storeu_ps(out[c], b_result(O, nb, &st, c));                           \
    }

/* Two decoded tiles (32 rows: two panels, decoded once per token chunk) with 4 tokens in the SPAN / FMIN orders
 * (prefill): each activation broadcast feeds both tiles (a 16 × 4 tile loads one broadcast per vpdpbusd); the
 * same steps per (row, token) as b_step. out[c][r], r < 32. */
#define B32_PANEL2X4(NAME, OFF, O)                                                                                 \
    static void p2x4_##NAME##_##O(const MmJob *j, const uint8_t *p0, const uint8_t *p1, int64_t t, float out[4][32]) { \
        const int64_t nb = j->K / QK;                                                                              \
        BTok tk[4];                                                                                                \
        for (int c = 0; c < 4; c++) tk[c] = b_tok(j, t + c);                                                       \
        __m512 s0[4], s1[4], m0[4], m1[4];                                                                         \
        for (int c = 0; c < 4; c++) s0[c] = s1[c] = m0[c] = m1[c] = _mm512_setzero_ps();                           \
        for (int64_t i = 0; i < nb; i++) {                                                                         \
            const uint8_t *b0 = p0 + (size_t)i * B_BLOCK_BYTES, *b1 = p1 + (size_t)i * B_BLOCK_BYTES;              \
            __m512i q0[8], q1[8];                                                                                  \
            for (int g = 0; g < 8; g++)                                                                            \
                q0[g] = _mm512_load_si512(b0 + 64 * g), q1[g] = _mm512_load_si512(b1 + 64 * g);                    \
            const __m512 dw0 = _mm512_load_ps((const float *)(b0 + 512)),                                          \
                         mw0 = _mm512_load_ps((const float *)(b0 + 576));                                          \
            const __m512 dw1 = _mm512_load_ps((const float *)(b1 + 512)),                                          \
                         mw1 = _mm512_load_ps((const float *)(b1 + 576));                                          \
            __m512i S0[4], S1[4];                                                                                  \
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) S0[c] = S1[c] =                                    \
                (OFF) ? _mm512_set1_epi32(tk[c].corr32[i]) : _mm512_setzero_si512();                               \
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) {                                                  \
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                              \
                    const __m512i b = bc32(tk[c].qs + 32 * i + 4 * g);                                             \
                    S0[c] = _mm512_dpbusd_epi32(S0[c], q0[g], b);                                                  \
                    S1[c] = _mm512_dpbusd_epi32(S1[c], q1[g], b);                                                  \
                }                                                                                                  \
            }                                                                                                      \
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                                  \
                const __m512 da = _mm512_set1_ps(tk[c].d[i]);                                                      \
                s0[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S0[c]), _mm512_mul_ps(dw0, da), s0[c]);                 \
                s1[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S1[c]), _mm512_mul_ps(dw1, da), s1[c]);                 \
                if (O == B_FMIN) {                                                                                 \
                    const __m512 sa = _mm512_set1_ps(tk[c].s[i]);                                                  \
                    m0[c] = _mm512_fmadd_ps(mw0, sa, m0[c]);                                                       \
                    m1[c] = _mm512_fmadd_ps(mw1, sa, m1[c]);                                                       \
                }                                                                                                  \
            }                                                                                                      \
        }                                                                                                          \
        for (int c = 0; c < 4; c++) {                                                                              \
            _mm512_storeu_ps(out[c], O == B_FMIN ? _mm512_add_ps(s0[c], m0[c]) : s0[c]);                           \
            _mm512_storeu_ps(out[c] + 16, O == B_FMIN ? _mm512_add_ps(s1[c], m1[c]) : s1[c]);                      \
        }                                                                                                          \
    }

#define B32_FORMAT(NAME, DEC, DECP, BYTES, OFF, ACT, ORDER_OF)                                                     \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_ONE, 1)                                                             \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_ONE, 2)                                                             \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_TWO, 1)                                                             \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_MIN, 1)                                                             \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_MIN, 2)                                                             \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_SPAN, 1)                                                            \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_SPAN, 4)                                                            \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_FMIN, 1)                                                            \
    B32_KERNELS(NAME, DEC, DECP, BYTES, OFF, B_FMIN, 2)                                                            \
    B32_PANEL2X4(NAME, OFF, B_SPAN)                                                                                \
    B32_PANEL2X4(NAME, OFF, B_FMIN)                                                                                \
    static void compute_##NAME(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {     \
        const BOrder o = ORDER_OF(j->path);                                                                        \
        const int64_t nb = j->K / QK;                                                                              \
        const bool tiled = t1 - t0 >= 4;                                                                           \
        uint8_t *tile = (uint8_t *)(((uintptr_t)tmp + 63) & ~(uintptr_t)63);                                       \
        for (int64_t r0 = o0; r0 < o1; r0 += 16) {                                                                 \
            const int nr = o1 - r0 < 16 ? (int)(o1 - r0) : 16;                                                     \
            const uint8_t *w[16];                                                                                  \
            for (int r = 0; r < 16; r++) w[r] = mm_w_row(j, r0 + (r < nr ? r : nr - 1));                           \
            /* the panel of these 16 rows (items lie on panel edges) */                                            \
            const uint8_t *pan = j->w->pack_kind == PACK_P16 && j->w->pack                                         \
                                     ? (const uint8_t *)j->w->pack + (size_t)(r0 / 16) * 16 * j->w->row_bytes      \
                                     : NULL;                                                                       \
            if (pan && (o == B_SPAN || o == B_FMIN) && t1 - t0 >= 8 && r0 + 32 <= o1) {                            \
                /* prefill on panels: both decoded into tmp, 32 rows × 4 tokens, the last tokens one at a time */  \
                const uint8_t *pan1 = pan + 16 * j->w->row_bytes; /* (unused where DECP is NONE) */                \
                (void)pan1;                                                                                        \
                uint8_t *tile1 = tile + (size_t)nb * B_BLOCK_BYTES;                                                \
                for (int64_t i = 0; i < nb; i++)                                                                   \
                    for (int h = 0; h < 2; h++) {                                                                  \
                        __m512i q[8];                                                                              \
                        __m512 dwv, mwv;                                                                           \
                        DECP(h ? pan1 : pan, i, nb, q, dwv, mwv);                                                  \
                        b_store_block((h ? tile1 : tile) + (size_t)i * B_BLOCK_BYTES, q, dwv, mwv);                \
                    }                                                                                              \
                int64_t t = t0;                                                                                    \
                for (; t + 4 <= t1; t += 4) {                                                                      \
                    float out[4][32];                                                                              \
                    if (o == B_SPAN) p2x4_##NAME##_B_SPAN(j, tile, tile1, t, out);                                 \
                    else p2x4_##NAME##_B_FMIN(j, tile, tile1, t, out);                                             \
                    for (int c = 0; c < 4; c++)                                                                    \
                        for (int r = 0; r < 32; r++) j->y[(t + c) * j->O + r0 + r] = out[c][r];                    \
                }                                                                                                  \
                for (; t < t1; t++)                                                                                \
                    for (int h = 0; h < 2; h++) {                                                                  \
                        float out[4][16];                                                                          \
                        if (o == B_SPAN) tiled_##NAME##_B_SPAN_1(j, h ? tile1 : tile, t, out);                     \
                        else tiled_##NAME##_B_FMIN_1(j, h ? tile1 : tile, t, out);                                 \
                        for (int r = 0; r < 16; r++) j->y[t * j->O + r0 + 16 * h + r] = out[0][r];                 \
                    }                                                                                              \
                r0 += 16; /* and the loop's 16 */                                                                  \
                continue;                                                                                          \
            }                                                                                                      \
            if (tiled)                                                                                             \
                for (int64_t i = 0; i < nb; i++) {                                                                 \
                    __m512i q[8];                                                                                  \
                    __m512 dwv, mwv;                                                                               \
                    if (pan) DECP(pan, i, nb, q, dwv, mwv);                                                        \
                    else DEC(w, i, q, dwv, mwv);                                                                   \
                    b_store_block(tile + (size_t)i * B_BLOCK_BYTES, q, dwv, mwv);                                  \
                }                                                                                                  \
            for (int64_t t = t0; t < t1;) {                                                                        \
                const int64_t left = t1 - t;                                                                       \
                float out[4][16];                                                                                  \
                int nc;                                                                                            \
                if (o == B_SPAN && left >= 4) {                                                                    \
                    nc = 4;                                                                                        \
                    if (tiled) tiled_##NAME##_B_SPAN_4(j, tile, t, out); else direct_##NAME##_B_SPAN_4(j, pan, w, t, out); \
                } else if (o == B_SPAN) {                                                                          \
                    nc = 1;                                                                                        \
                    if (tiled) tiled_##NAME##_B_SPAN_1(j, tile, t, out); else direct_##NAME##_B_SPAN_1(j, pan, w, t, out); \
                } else if (o == B_FMIN) {                                                                          \
                    nc = left >= 2 ? 2 : 1;                                                                        \
                    if (nc == 2) {                                                                                 \
                        if (tiled) tiled_##NAME##_B_FMIN_2(j, tile, t, out); else direct_##NAME##_B_FMIN_2(j, pan, w, t, out); \
                    } else {                                                                                       \
                        if (tiled) tiled_##NAME##_B_FMIN_1(j, tile, t, out); else direct_##NAME##_B_FMIN_1(j, pan, w, t, out); \
                    }                                                                                              \
                } else if (o == B_TWO) {                                                                           \
                    nc = 1;                                                                                        \
                    if (tiled) tiled_##NAME##_B_TWO_1(j, tile, t, out); else direct_##NAME##_B_TWO_1(j, pan, w, t, out); \
                } else if (o == B_MIN) {                                                                           \
                    nc = left >= 2 ? 2 : 1;                                                                        \
                    if (nc == 2) {                                                                                 \
                        if (tiled) tiled_##NAME##_B_MIN_2(j, tile, t, out); else direct_##NAME##_B_MIN_2(j, pan, w, t, out); \
                    } else {                                                                                       \
                        if (tiled) tiled_##NAME##_B_MIN_1(j, tile, t, out); else direct_##NAME##_B_MIN_1(j, pan, w, t, out); \
                    }                                                                                              \
                } else {                                                                                           \
                    nc = left >= 2 ? 2 : 1;                                                                        \
                    if (nc == 2) {                                                                                 \
                        if (tiled) tiled_##NAME##_B_ONE_2(j, tile, t, out); else direct_##NAME##_B_ONE_2(j, pan, w, t, out); \
                    } else {                                                                                       \
                        if (tiled) tiled_##NAME##_B_ONE_1(j, tile, t, out); else direct_##NAME##_B_ONE_1(j, pan, w, t, out); \
                    }                                                                                              \
                }                                                                                                  \
                for (int c = 0; c < nc; c++)                                                                       \
                    for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + r0 + r] = out[c][r];                        \
                t += nc;                                                                                           \
            }                                                                                                      \
        }                                                                                                          \
    }                                                                                                              \
    const MmFormat mm_##NAME##_avx512 = {.act_kind = ACT, .act_off = (OFF), .tmp_bytes = b32_tmp_bytes,            \
                                         .compute = compute_##NAME, .fast = true};

/* ---- the paths of each format ------------------------------------------------------------------------- */

/* DOT_FAST: SPAN (FMIN for the formats with a minimum) */
static bool span_path(DotPath p) { return p == DOT_REPACK || p == DOT_REPACK_GEMM || p == DOT_FAST; }
static BOrder ord_q4_0(DotPath p) { return span_path(p) ? B_SPAN : B_ONE; }
static BOrder ord_q5_0(DotPath p) { return p == DOT_FAST ? B_SPAN : B_ONE; }
static BOrder ord_iq4_nl(DotPath p) { return span_path(p) ? B_SPAN : p == DOT_GEMM ? B_ONE : B_TWO; }
static BOrder ord_mxfp4(DotPath p) { return span_path(p) ? B_SPAN : B_TWO; }
static BOrder ord_min(DotPath p) { return p == DOT_FAST ? B_FMIN : B_MIN; }
static BOrder ord_fast(DotPath p) {
    (void)p;
    return B_SPAN;
}
/* Q8_0's one-row decoder (the other formats decode 16 rows at once, above): one block → 32 bytes of q + 128 in
 * element order, d_w, m_w */
B_INLINE __m256i dec_q8_0(const uint8_t *b, float *d, float *m) { /* q + 128 */
    *d = f16at(b);
    *m = 0;
    return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + 2)), _mm256_set1_epi8((char)0x80));
}
#define DEC16_Q8_0(w, i, q, dwv, mwv) B_DECODE16(dec_q8_0, 34, w, i, q, dwv, mwv)

B32_FORMAT(q4_0, DEC16_Q4_0, DECP_Q4_0, 18, 8, MM_ACT_Q8_0, ord_q4_0)
B32_FORMAT(q5_0, DEC16_Q5_0, DECP_NONE, 22, 16, MM_ACT_Q8_0, ord_q5_0)
B32_FORMAT(iq4_nl, DEC16_IQ4_NL, DECP_IQ4_NL, 18, 128, MM_ACT_Q8_0, ord_iq4_nl)
B32_FORMAT(mxfp4, DEC16_MXFP4, DECP_NONE, 17, 128, MM_ACT_Q8_0, ord_mxfp4)
B32_FORMAT(q4_1, DEC16_Q4_1, DECP_Q4_1, 20, 0, MM_ACT_Q8_1, ord_min)
B32_FORMAT(q5_1, DEC16_Q5_1, DECP_NONE, 24, 0, MM_ACT_Q8_1, ord_min)
/* Q8_0 in the fast arithmetic from the file's layout (matmul_q8_0p_avx512.c reads the P16 panels; the llama.cpp
 * orders are matmul_q8_0_avx512.c's) */
B32_FORMAT(q8_0_dec, DEC16_Q8_0, DECP_NONE, 34, 128, MM_ACT_Q8_0, ord_fast)
