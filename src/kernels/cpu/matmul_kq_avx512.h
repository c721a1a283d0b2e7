/* matmul_kq_avx512.h — the engine of the 256-element formats (K-quants, i-quants) at the AVX-512 VNNI
 * level. Included by matmul_k_avx512.c and matmul_iq_avx512.c, which supply the decoders.
 *
 * A decoder turns one super-block of one weight row into a KRow: the 256 integer values the activation
 * multiplies, as u8 q' = q + off (off per format; the prepared activations carry the matching
 * correction -off·Σa), the integer scale of each 16 elements, the per-16 minimum (or Q6_K's scale
 * again, for its -32·bsums·scale term) and the float factors. Integer sums are exact, so everything up to
 * the int32 lane values is computed however is fastest; the float steps follow the reference's order:
 *
 *   LANES8 (vec_dot): eight int32 lanes, lane l = Σ over the 4-element groups k ≡ l (mod 8) of
 *     sc(k)·Σq·a; per super-block acc[l] = fma(d·d8, lane[l], acc[l]) plus the format's minimum terms;
 *     hsum_float_8 at the end.
 *   SPAN (the repacked kernels, the i-quant panel): per span of `span` elements, one fma of the span's
 *     integer total into a scalar accumulator (and one of its minimum total into a second one).
 *
 * Two kernels serve every path:
 *   - per row (GEMV, small batches): a row's super-block is decoded into a KRow and dotted with 1-3
 *     tokens, 64 elements per vpdpbusd (lane j of the ZMM is ggml lane j mod 8);
 *   - P16 (GEMM, ≥ 4 tokens): a tile of 16 rows is decoded once per token chunk and transposed so that
 *     ZMM lane r is row r: group k of all 16 rows is one 64-byte load, the token's 4 activations one
 *     broadcast dword, and each lane is a dot product of its own. The float steps then run 16 dot
 *     products per instruction, and nothing is reduced across lanes. */
#ifndef DL_KERNELS_CPU_MATMUL_KQ_AVX512_H
#define DL_KERNELS_CPU_MATMUL_KQ_AVX512_H

#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "gguf/iq_tables.h"
#include "gguf/quant.h"
#include "gguf/quant_blocks.h"

#define KQ_INLINE static inline __attribute__((always_inline))

typedef enum KKind { K_Q2, K_Q3, K_Q4, K_Q5, K_Q6, K_IQ, K_IQ1S, K_IQ1M } KKind;

typedef struct KRow {
    uint8_t q[QK_K];  /* q + off, element order */
    uint8_t qd[QK_K]; /* IQ1_S / IQ1_M: the offset sign (±1) of each element + off */
    int32_t sc32[64]; /* the scale of each 4-element group (per-row kernel only: kq_expand) */
    int8_t sc[16];    /* integer scale per 16 elements */
    int16_t m[16] __attribute__((aligned(32))); /* Q2/Q4/Q5: minimum per 16; Q6: scale per 16 */
    float d, dmin;    /* K-quants: fp16 d, dmin; i-quants: d (vec) and dfac (panel) */
} __attribute__((aligned(64))) KRow;

/* ---- small helpers ------------------------------------------------------------------------------------- */

KQ_INLINE float kq_f16(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
KQ_INLINE float kq_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

KQ_INLINE int32_t kq_hsum_i32(__m512i v) { return _mm512_reduce_add_epi32(v); }

/* KRow.sc32 from KRow.sc (the per-row kernel's scale vectors: lane j of ZMM z = sc[(16z + j) / 4]) */
KQ_INLINE void kq_expand(KRow *k) {
    const __m512i s = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)k->sc));
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const __m512i idx = _mm512_set_epi32(4 * z + 3, 4 * z + 3, 4 * z + 3, 4 * z + 3, 4 * z + 2, 4 * z + 2, 4 * z + 2, 4 * z + 2,
                                             4 * z + 1, 4 * z + 1, 4 * z + 1, 4 * z + 1, 4 * z, 4 * z, 4 * z, 4 * z);
        _mm512_store_si512(k->sc32 + 16 * z, _mm512_permutexvar_epi32(idx, s));
    }
}

/* ---- per row: one super-block of a decoded row with one token --------------------------------------------
 * ZMM z (elements 64z … 64z+63): lane j = sc·Σq·a over group 16z + j (ggml lane j mod 8). corr: the token's
 * per-group corrections (signed formats). */
KQ_INLINE __m512i kq_row_groups_of(const bool sgn, const uint8_t *qv, const KRow *k, const int8_t *a, const int32_t *corr, int z) {
    const __m512i q = _mm512_load_si512(qv + 64 * z), av = _mm512_loadu_si512(a + 64 * z);
    const __m512i init = sgn ? _mm512_loadu_si512(corr + 16 * z) : _mm512_setzero_si512();
    return _mm512_mullo_epi32(_mm512_dpbusd_epi32(init, q, av), _mm512_load_si512(k->sc32 + 16 * z));
}
KQ_INLINE __m512i kq_row_groups(const bool sgn, const KRow *k, const int8_t *a, const int32_t *corr, int z) {
    return kq_row_groups_of(sgn, k->q, k, a, corr, z);
}
KQ_INLINE __m512i kq_row_sum4(const bool sgn, const uint8_t *qv, const KRow *k, const int8_t *a, const int32_t *corr) {
    return _mm512_add_epi32(_mm512_add_epi32(kq_row_groups_of(sgn, qv, k, a, corr, 0), kq_row_groups_of(sgn, qv, k, a, corr, 1)),
                            _mm512_add_epi32(kq_row_groups_of(sgn, qv, k, a, corr, 2), kq_row_groups_of(sgn, qv, k, a, corr, 3)));
}

/* Unsigned codes (Q2/Q4/Q5/Q6: q ≤ 63, so vpmaddubsw cannot saturate): Σ over ZMMs z0 … z1-1 of
 * vpdpwssd(maddubs(q, a), scales), lane j = Σ sc·q·a over group 16z + j — the same integers as
 * kq_row_groups, in 2 instructions per 64 elements instead of 4 (no zeroed accumulator, no vpmulld, no add). */
KQ_INLINE __m512i kq_row_sum_u(const KRow *k, const int8_t *a, int z0, int z1) {
    const __m512i s16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)k->sc)));
    __m512i t = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int z = z0; z < z1; z++) {
        /* int16 lane i of ZMM z: elements 64z + 2i, +1, sub-block 4z + i/8 */
        const __m512i idx = _mm512_set_epi16(4 * z + 3, 4 * z + 3, 4 * z + 3, 4 * z + 3, 4 * z + 3, 4 * z + 3, 4 * z + 3, 4 * z + 3,
                                             4 * z + 2, 4 * z + 2, 4 * z + 2, 4 * z + 2, 4 * z + 2, 4 * z + 2, 4 * z + 2, 4 * z + 2,
                                             4 * z + 1, 4 * z + 1, 4 * z + 1, 4 * z + 1, 4 * z + 1, 4 * z + 1, 4 * z + 1, 4 * z + 1,
                                             4 * z, 4 * z, 4 * z, 4 * z, 4 * z, 4 * z, 4 * z, 4 * z);
        const __m512i p = _mm512_maddubs_epi16(_mm512_load_si512(k->q + 64 * z), _mm512_loadu_si512(a + 64 * z));
        t = _mm512_dpwssd_epi32(t, p, _mm512_permutexvar_epi16(idx, s16));
    }
    return t;
}

/* m16[g]·bsums[g] summed per pair of groups: lane p = m[2p]·bs[2p] + m[2p+1]·bs[2p+1] */
KQ_INLINE __m256i kq_min_pairs(const KRow *k, const int16_t *bs) {
    return _mm256_madd_epi16(_mm256_load_si256((const __m256i *)k->m), _mm256_loadu_si256((const __m256i *)bs));
}

KQ_INLINE int32_t kq_hsum8_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The per-token float state of one dot product (per row kernel). */
typedef struct KAcc {
    __m256 acc;   /* LANES8 lanes */
    __m256 acc2;  /* IQ1_M's offset lanes */
    __m128 accm;  /* Q4_K's four minimum lanes */
    float summs;  /* Q5_K's minimum sum */
    float s, sm;  /* SPAN accumulators */
} KAcc;

/* One super-block into one token's state: kind, sgn and span are compile-time constants. */
KQ_INLINE void kq_row_step(const KKind kind, const bool sgn, const int span, const KRow *k, const int8_t *a, float d8,
                           const int16_t *bs, const int32_t *corr, KAcc *st) {
    if (kind == K_IQ1S || kind == K_IQ1M) {
        /* lanes of q and of the offset signs; the panel's values are 8q + delta */
        const __m512i t = kq_row_sum4(sgn, k->q, k, a, corr), td = kq_row_sum4(sgn, k->qd, k, a, corr);
        if (span) {
            st->s = fmaf((float)(8 * _mm512_reduce_add_epi32(t) + _mm512_reduce_add_epi32(td)), k->dmin * d8, st->s);
            return;
        }
        const __m256i lane = _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
        const __m256i dl = _mm256_add_epi32(_mm512_castsi512_si256(td), _mm512_extracti64x4_epi64(td, 1));
        const float d = k->d * d8;
        st->acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane), st->acc);
        if (kind == K_IQ1S) /* Σ (bs[2b] + bs[2b+1])·delta·sc: the offset lanes' total */
            st->summs = fmaf(d, (float)kq_hsum8_i32(dl), st->summs);
        else
            st->acc2 = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(dl), st->acc2);
        return;
    }
    if (span == QK_K) { /* a whole super-block (the fast arithmetic): one reduction, Q6_K's term in the lanes */
        const bool mins = kind == K_Q2 || kind == K_Q4 || kind == K_Q5;
        __m512i t = sgn ? kq_row_sum4(sgn, k->q, k, a, corr) : kq_row_sum_u(k, a, 0, 4);
        __m256i mp = _mm256_setzero_si256();
        if (mins || kind == K_Q6) mp = kq_min_pairs(k, bs);
        if (kind == K_Q6) t = _mm512_sub_epi32(t, _mm512_zextsi256_si512(_mm256_slli_epi32(mp, 5)));
        st->s = fmaf((float)_mm512_reduce_add_epi32(t), (kind == K_IQ ? k->dmin : k->d) * d8, st->s);
        if (mins) st->sm = fmaf((float)kq_hsum8_i32(mp), k->dmin * d8, st->sm);
        return;
    }
    if (span) {
        /* SPAN: totals of span elements; Q2/Q4/Q5 also the minimum totals, Q6 less its 32·Σ sc·bsums */
        const bool mins = kind == K_Q2 || kind == K_Q4 || kind == K_Q5;
        const float dd = (kind == K_IQ ? k->dmin : k->d) * d8, dm = k->dmin * d8; /* IQ: dfac (panel) */
        __m256i mp = _mm256_setzero_si256();
        if (mins || kind == K_Q6) mp = kq_min_pairs(k, bs);
#pragma GCC unroll 4
        for (int e0 = 0; e0 < QK_K; e0 += span) {
            __m512i t;
            if (!sgn)
                t = kq_row_sum_u(k, a, e0 / 64, (e0 + span) / 64);
            else {
                t = kq_row_groups(sgn, k, a, corr, e0 / 64);
#pragma GCC unroll 4
                for (int z = e0 / 64 + 1; z < (e0 + span) / 64; z++) t = _mm512_add_epi32(t, kq_row_groups(sgn, k, a, corr, z));
            }
            /* pairs e0/32 … (e0+span)/32 of the min (Q6: scale) products */
            const __m256i keep = _mm256_and_si256(
                _mm256_cmpgt_epi32(_mm256_set1_epi32((e0 + span) / 32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                _mm256_cmpgt_epi32(_mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8), _mm256_set1_epi32(e0 / 32)));
            int32_t tot = _mm512_reduce_add_epi32(t);
            if (kind == K_Q6) tot -= 32 * kq_hsum8_i32(_mm256_and_si256(mp, keep));
            st->s = fmaf((float)tot, dd, st->s);
            if (mins) st->sm = fmaf((float)kq_hsum8_i32(_mm256_and_si256(mp, keep)), dm, st->sm);
        }
        return;
    }
    /* LANES8 */
    const __m512i t = sgn ? kq_row_sum4(sgn, k->q, k, a, corr) : kq_row_sum_u(k, a, 0, 4);
    __m256i lane = _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    const float d = d8 * k->d;
    if (kind == K_Q6) /* lane l -= 32·(bs[2l]·sc[2l] + bs[2l+1]·sc[2l+1]) */
        lane = _mm256_sub_epi32(lane, _mm256_slli_epi32(kq_min_pairs(k, bs), 5));
    if (kind == K_Q2) { /* first acc[l] += dmin'·(m[2l]·bs[2l] + m[2l+1]·bs[2l+1]) */
        const float dmin = -d8 * k->dmin;
        st->acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(kq_min_pairs(k, bs)), st->acc);
    }
    st->acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(lane), st->acc);
    if (kind == K_Q4) { /* accm[j] += dmin'·Σ_{g=4j..4j+3} m·bs */
        const float dmin = -d8 * k->dmin;
        const __m256i p = kq_min_pairs(k, bs);
        const __m128i q4 = _mm_hadd_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        st->accm = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(q4), st->accm);
    }
    if (kind == K_Q5) {
        const float dmin = -d8 * k->dmin;
        st->summs = fmaf(dmin, (float)kq_hsum8_i32(kq_min_pairs(k, bs)), st->summs);
    }
}

KQ_INLINE float kq_row_result(const KKind kind, const int span, float post, const KAcc *st) {
    if (span) return (kind == K_Q2 || kind == K_Q4 || kind == K_Q5) ? st->s - st->sm : st->s;
    if (kind == K_IQ1S) return kq_hsum8(st->acc) + IQ1S_DELTA * st->summs;
    if (kind == K_IQ1M) return fmaf(IQ1M_DELTA, kq_hsum8(st->acc2), kq_hsum8(st->acc));
    float r = kq_hsum8(st->acc);
    if (kind == K_Q4) {
        float m[4];
        _mm_storeu_ps(m, st->accm);
        r = r + ((m[0] + m[2]) + (m[1] + m[3]));
    }
    if (kind == K_Q5) r = r + st->summs;
    if (kind == K_IQ && post != 1.f) r = post * r;
    return r;
}

/* ---- P16: 16 rows in the lanes ------------------------------------------------------------------------ */

/* The decoded tile of 16 rows, per super-block sb (pointers into the per-thread tmp):
 *   q   [nsb][64 groups][16 rows][4] u8      group k of every row (64 bytes)
 *   sc  [nsb][16][16 rows] int32             scale of 16-element block g of every row
 *   mp  [nsb][8][16 rows] int32              (m[2p], m[2p+1]) as two int16 (the pmaddwd pairs)
 *   d, dmin [nsb][16 rows] float */
#define KT_SB_BYTES (4096 + 1024 + 512 + 64 + 64)
typedef struct KTile {
    uint8_t *base;
} KTile;
KQ_INLINE uint8_t *kt_q(const KTile *t, int64_t sb) { return t->base + (size_t)sb * KT_SB_BYTES; }
KQ_INLINE int32_t *kt_sc(const KTile *t, int64_t sb) { return (int32_t *)(t->base + (size_t)sb * KT_SB_BYTES + 4096); }
KQ_INLINE int32_t *kt_mp(const KTile *t, int64_t sb) { return (int32_t *)(t->base + (size_t)sb * KT_SB_BYTES + 5120); }
KQ_INLINE float *kt_d(const KTile *t, int64_t sb) { return (float *)(t->base + (size_t)sb * KT_SB_BYTES + 5632); }
KQ_INLINE float *kt_dmin(const KTile *t, int64_t sb) { return (float *)(t->base + (size_t)sb * KT_SB_BYTES + 5696); }

/* a decoded 16-row tile, or the P16 kernels' two decoded panels (mm_k_p16_tmp_bytes), whichever is larger */
static inline size_t kq_tmp_bytes(int64_t K) {
    const size_t tile = (size_t)(K / QK_K) * KT_SB_BYTES + 256, p16 = mm_k_p16_tmp_bytes(K);
    return tile > p16 ? tile : p16;
}

/* 16×16 int32 transpose: out[c] lane r = in[r] lane c */
KQ_INLINE void kq_transpose16(__m512i *r) {
    __m512i t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* r[4g + k], 128-bit block b: rows 4g..4g+3 of column 4b + k */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0x88);
        t[4 + i] = _mm512_shuffle_i32x4(r[i], r[4 + i], 0xDD);
        t[8 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0x88);
        t[12 + i] = _mm512_shuffle_i32x4(r[8 + i], r[12 + i], 0xDD);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_i32x4(t[i], t[8 + i], 0xDD);
        r[4 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0x88);
        r[12 + i] = _mm512_shuffle_i32x4(t[4 + i], t[12 + i], 0xDD);
    }
}

/* Moves 16 decoded rows' super-block sb into the tile. */
static void kq_tile_put(const KTile *t, int64_t sb, const KRow *rows) {
    __m512i v[16];
    uint8_t *q = kt_q(t, sb);
    for (int z = 0; z < 4; z++) {
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++) v[r] = _mm512_load_si512(rows[r].q + 64 * z);
        kq_transpose16(v);
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) _mm512_store_si512(q + (size_t)(16 * z + c) * 64, v[c]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) v[r] = _mm512_cvtepi8_epi32(_mm_load_si128((const __m128i *)rows[r].sc));
    kq_transpose16(v);
    int32_t *sc = kt_sc(t, sb);
#pragma GCC unroll 16
    for (int c = 0; c < 16; c++) _mm512_store_si512(sc + 16 * c, v[c]);
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) v[r] = _mm512_zextsi256_si512(_mm256_load_si256((const __m256i *)rows[r].m));
    kq_transpose16(v); /* columns 0-7: the int16 pairs as dwords */
    int32_t *mp = kt_mp(t, sb);
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) _mm512_store_si512(mp + 16 * c, v[c]);
    float *d = kt_d(t, sb), *dm = kt_dmin(t, sb);
    for (int r = 0; r < 16; r++) {
        d[r] = rows[r].d;
        dm[r] = rows[r].dmin;
    }
}

KQ_INLINE __m512i kq_bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* hsum_float_8 of each lane's eight accumulators */
KQ_INLINE __m512 kq_fold8(const __m512 *a) {
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                         _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
}

/* Prepared activation pointers of one token. */
typedef struct KTok {
    const int8_t *qs;
    const float *d;
    const int16_t *bs;
    const int32_t *corr, *corr16;
} KTok;

KQ_INLINE KTok kq_tok(const MmJob *j, int64_t t) {
    const uint8_t *r = mm_act_row(j, t);
    KTok k = {(const int8_t *)(r + j->al.qs), (const float *)(r + j->al.d), (const int16_t *)(r + j->al.bsums),
              (const int32_t *)(r + j->al.corr), (const int32_t *)(r + j->al.corr16)};
    return k;
}

/* LANES8 over a tile, C tokens (1 or 2). out[c][r]. */
KQ_INLINE void kq_p16_lanes(const KKind kind, const bool sgn, const int C, float post, const KTile *tl, int64_t nsb,
                            const KTok *tk, float out[][16]) {
    __m512 acc[2][8], accm[2][4], summs[2];
#pragma GCC unroll 2
    for (int c = 0; c < C; c++) {
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) acc[c][l] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) accm[c][l] = _mm512_setzero_ps();
        summs[c] = _mm512_setzero_ps();
    }
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *q = kt_q(tl, sb);
        const int32_t *sc = kt_sc(tl, sb), *mp = kt_mp(tl, sb);
        const __m512 dw = _mm512_load_ps(kt_d(tl, sb));
        __m512 dv[2], dmv[2];
        const int8_t *a[2];
        const int16_t *bs[2];
        const int32_t *cr[2];
#pragma GCC unroll 2
        for (int c = 0; c < C; c++) {
            const float d8 = tk[c].d[sb];
            dv[c] = _mm512_mul_ps(_mm512_set1_ps(d8), dw);
            if (kind == K_Q2 || kind == K_Q4 || kind == K_Q5)
                dmv[c] = _mm512_mul_ps(_mm512_set1_ps(-d8), _mm512_load_ps(kt_dmin(tl, sb)));
            a[c] = tk[c].qs + sb * QK_K;
            bs[c] = tk[c].bs + sb * 16;
            cr[c] = tk[c].corr + sb * 64;
        }
        if (kind == K_Q2) {
#pragma GCC unroll 8
            for (int l = 0; l < 8; l++) {
                const __m512i m = _mm512_load_si512(mp + 16 * l);
#pragma GCC unroll 2
                for (int c = 0; c < C; c++)
                    acc[c][l] = _mm512_fmadd_ps(dmv[c], _mm512_cvtepi32_ps(_mm512_madd_epi16(m, kq_bcast32(bs[c] + 2 * l))), acc[c][l]);
            }
        }
        if (kind == K_Q4) {
#pragma GCC unroll 4
            for (int jj = 0; jj < 4; jj++) {
                const __m512i m0 = _mm512_load_si512(mp + 16 * (2 * jj)), m1 = _mm512_load_si512(mp + 16 * (2 * jj + 1));
#pragma GCC unroll 2
                for (int c = 0; c < C; c++) {
                    const __m512i p = _mm512_add_epi32(_mm512_madd_epi16(m0, kq_bcast32(bs[c] + 4 * jj)),
                                                       _mm512_madd_epi16(m1, kq_bcast32(bs[c] + 4 * jj + 2)));
                    accm[c][jj] = _mm512_fmadd_ps(dmv[c], _mm512_cvtepi32_ps(p), accm[c][jj]);
                }
            }
        }
        if (kind == K_Q5) {
#pragma GCC unroll 2
            for (int c = 0; c < C; c++) {
                __m512i p = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int l = 0; l < 8; l++) p = _mm512_dpwssd_epi32(p, _mm512_load_si512(mp + 16 * l), kq_bcast32(bs[c] + 2 * l));
                summs[c] = _mm512_fmadd_ps(dmv[c], _mm512_cvtepi32_ps(p), summs[c]);
            }
        }
#pragma GCC unroll 1
        for (int l = 0; l < 8; l++) {
            __m512i I[2];
#pragma GCC unroll 2
            for (int c = 0; c < C; c++) I[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int ch = 0; ch < 8; ch++) {
                const int k = 8 * ch + l;
                const __m512i w = _mm512_load_si512(q + 64 * k);
                const __m512i s = _mm512_load_si512(sc + 16 * (k >> 2));
#pragma GCC unroll 2
                for (int c = 0; c < C; c++) {
                    const __m512i init = sgn ? kq_bcast32(cr[c] + k) : _mm512_setzero_si512();
                    I[c] = _mm512_add_epi32(I[c], _mm512_mullo_epi32(_mm512_dpbusd_epi32(init, w, kq_bcast32(a[c] + 4 * k)), s));
                }
            }
            if (kind == K_Q6) {
                const __m512i m = _mm512_load_si512(mp + 16 * l);
#pragma GCC unroll 2
                for (int c = 0; c < C; c++)
                    I[c] = _mm512_sub_epi32(I[c], _mm512_slli_epi32(_mm512_madd_epi16(m, kq_bcast32(bs[c] + 2 * l)), 5));
            }
#pragma GCC unroll 2
            for (int c = 0; c < C; c++) acc[c][l] = _mm512_fmadd_ps(dv[c], _mm512_cvtepi32_ps(I[c]), acc[c][l]);
        }
    }
#pragma GCC unroll 2
    for (int c = 0; c < C; c++) {
        __m512 r = kq_fold8(acc[c]);
        if (kind == K_Q4) r = _mm512_add_ps(r, _mm512_add_ps(_mm512_add_ps(accm[c][0], accm[c][2]), _mm512_add_ps(accm[c][1], accm[c][3])));
        if (kind == K_Q5) r = _mm512_add_ps(r, summs[c]);
        if (kind == K_IQ && post != 1.f) r = _mm512_mul_ps(_mm512_set1_ps(post), r);
        _mm512_storeu_ps(out[c], r);
    }
}

/* SPAN over a tile, 4 tokens: llama.cpp's repacked / IQ-panel gemm orders (Q2_K, Q4_K and the i-quants; the fast
 * arithmetic's tiles are kq_p16_fast's). Sub-blocks of 16 elements of equal scale pairs (Q4_K: per 32) could be
 * merged before the scale multiply; the scales are per 16 in general. */
KQ_INLINE void kq_p16_span(const KKind kind, const bool sgn, const int span, const KTile *tl, int64_t nsb, const KTok *tk,
                           float out[][16]) {
    enum { C = 4 };
    __m512 acc[C], accm[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *q = kt_q(tl, sb);
        const int32_t *sc = kt_sc(tl, sb), *mp = kt_mp(tl, sb);
        const __m512 dw = _mm512_load_ps(kind == K_IQ ? kt_dmin(tl, sb) : kt_d(tl, sb)); /* IQ: dfac (panel) */
        __m512 dv[C], dmv[C];
        const int8_t *a[C];
        const int16_t *bs[C];
        const int32_t *cr[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const float d8 = tk[c].d[sb];
            dv[c] = _mm512_mul_ps(dw, _mm512_set1_ps(d8));
            if (kind == K_Q2 || kind == K_Q4) dmv[c] = _mm512_mul_ps(_mm512_load_ps(kt_dmin(tl, sb)), _mm512_set1_ps(d8));
            a[c] = tk[c].qs + sb * QK_K;
            bs[c] = tk[c].bs + sb * 16;
            cr[c] = tk[c].corr16 + sb * 16;
        }
#pragma GCC unroll 1
        for (int e0 = 0; e0 < QK_K; e0 += span) {
            __m512i S[C];
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) S[c] = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int g = e0 / 16; g < (e0 + span) / 16; g++) {
                __m512i I[C];
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) I[c] = sgn ? _mm512_set1_epi32(cr[c][g]) : _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int k = 4 * g; k < 4 * g + 4; k++) {
                    const __m512i w = _mm512_load_si512(q + 64 * k);
#pragma GCC unroll 4
                    for (int c = 0; c < C; c++) I[c] = _mm512_dpbusd_epi32(I[c], w, kq_bcast32(a[c] + 4 * k));
                }
                const __m512i s = _mm512_load_si512(sc + 16 * g);
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) S[c] = _mm512_add_epi32(S[c], _mm512_mullo_epi32(I[c], s));
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[c]), dv[c], acc[c]);
            if (kind == K_Q2 || kind == K_Q4) {
#pragma GCC unroll 4
                for (int c = 0; c < C; c++) {
                    __m512i M = _mm512_setzero_si512();
#pragma GCC unroll 8
                    for (int p = e0 / 32; p < (e0 + span) / 32; p++)
                        M = _mm512_dpwssd_epi32(M, _mm512_load_si512(mp + 16 * p), kq_bcast32(bs[c] + 2 * p));
                    accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), dmv[c], accm[c]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
        _mm512_storeu_ps(out[c], (kind == K_Q2 || kind == K_Q4) ? _mm512_sub_ps(acc[c], accm[c]) : acc[c]);
}

/* The fast arithmetic's tile kernel (DOT_FAST: a whole super-block per integer total): C ≤ 8 tokens. Per
 * scale group (GS elements of one integer scale: 32 for Q4_K / Q5_K and the i-quants with scales per 32, 16
 * for the others) each token's total grows by a chain of vpdpbusd from the group's correction, then one
 * vpmulld by the 16 rows' scales into the super-block's total; per super-block one fma per token (two for the
 * formats with minimums, Q6_K's -32·Σ sc·bsums in integers). The same integers and float steps as
 * kq_p16_span with span 256 and the per-row kernel, in fewer instructions: eight tokens share each weight
 * vector, and the chains are long enough to keep vpdpbusd busy. */
#define KQ_FAST_T 8
KQ_INLINE void kq_p16_fast(const KKind kind, const bool sgn, const int GS, const int C, const KTile *tl, int64_t nsb,
                           const KTok *tk, float out[][16]) {
    const bool mins = kind == K_Q2 || kind == K_Q4 || kind == K_Q5;
    __m512 acc[KQ_FAST_T], accm[KQ_FAST_T];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *q = kt_q(tl, sb);
        const int32_t *sc = kt_sc(tl, sb), *mp = kt_mp(tl, sb);
        __m512i S[KQ_FAST_T];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) S[c] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int g0 = 0; g0 < 16; g0 += GS / 16) {
            __m512i I[KQ_FAST_T];
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                const int32_t *cr = tk[c].corr16 + sb * 16 + g0;
                I[c] = sgn ? _mm512_set1_epi32(GS == 32 ? cr[0] + cr[1] : cr[0]) : _mm512_setzero_si512();
            }
#pragma GCC unroll 8
            for (int k = 4 * g0; k < 4 * g0 + GS / 4; k++) {
                const __m512i w = _mm512_load_si512(q + 64 * k);
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) I[c] = _mm512_dpbusd_epi32(I[c], w, kq_bcast32(tk[c].qs + sb * QK_K + 4 * k));
            }
            const __m512i s = _mm512_load_si512(sc + 16 * g0);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) S[c] = _mm512_add_epi32(S[c], _mm512_mullo_epi32(I[c], s));
        }
        /* IQ: dfac (panel); IQ1_S, IQ1_M: d/8 */
        const __m512 dw = _mm512_load_ps(kind == K_IQ || kind == K_IQ1S || kind == K_IQ1M ? kt_dmin(tl, sb) : kt_d(tl, sb));
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const int16_t *bs = tk[c].bs + sb * 16;
            const __m512 d8 = _mm512_set1_ps(tk[c].d[sb]);
            if (kind == K_Q6 || mins) {
                __m512i M = _mm512_setzero_si512();
#pragma GCC unroll 8
                for (int p = 0; p < 8; p++) M = _mm512_dpwssd_epi32(M, _mm512_load_si512(mp + 16 * p), kq_bcast32(bs + 2 * p));
                if (kind == K_Q6) S[c] = _mm512_sub_epi32(S[c], _mm512_slli_epi32(M, 5));
                else accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(_mm512_load_ps(kt_dmin(tl, sb)), d8), accm[c]);
            }
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[c]), _mm512_mul_ps(dw, d8), acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out[c], mins ? _mm512_sub_ps(acc[c], accm[c]) : acc[c]);
}

/* IQ1_S / IQ1_M in a tile (the fast arithmetic only): 8q + s as one value, s the ±1 offset sign of the element
 * (|8q + s| ≤ 9), so one vpdpbusd pass sums Σ sc·(8q + s)·a = 8·T + TD, the per-row kernel's integer. */
KQ_INLINE void kq_iq1_fold(KRow *k) {
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const __m512i q = _mm512_xor_si512(_mm512_load_si512(k->q + 64 * z), x80), s = _mm512_xor_si512(_mm512_load_si512(k->qd + 64 * z), x80);
        const __m512i q8 = _mm512_and_si512(_mm512_slli_epi16(q, 3), _mm512_set1_epi8((char)0xf8)); /* 8q per byte */
        _mm512_store_si512(k->q + 64 * z, _mm512_xor_si512(_mm512_add_epi8(q8, s), x80));
    }
}

/* ---- the compute function of a format ------------------------------------------------------------------
 * KQ_FORMAT(name, KIND, BLOCK_BYTES, OFF, DECODE, POST, SPAN_OF) defines compute_<name> and the MmFormat
 * mm_<name>_avx512; DECODE(const uint8_t *block, KRow *out), SPAN_OF(path) → 0 (LANES8) or the span. */
#define KQ_GEMM_MIN_T 4
static inline bool kq_no_tile_dec(const MmJob *j, int64_t o, int nr, int64_t nsb, const KTile *tl) {
    (void)j, (void)o, (void)nr, (void)nsb, (void)tl;
    return false;
}

/* the per-row kernel for one span (compile-time) and C (1, 2) tokens from t */
#define KQ_PF_ROWS 4
/* The row KQ_PF_ROWS ahead of row o, line by line, past the end of the work item too (the next item's rows are
 * the next ones read); at an item's first row also the rows before that (an expert's rows start cold). */
KQ_INLINE void kq_row_prefetch(const MmJob *j, const uint8_t *w, int64_t o, int64_t o0) {
    const size_t rb = j->w->row_bytes;
    for (int r = o == o0 ? 1 : KQ_PF_ROWS; r <= KQ_PF_ROWS; r++)
        if (o + r < j->O)
            for (size_t b_ = 0; b_ < rb; b_ += 64) _mm_prefetch((const char *)w + (size_t)r * rb + b_, _MM_HINT_T0);
}
#define KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, SPAN, C)                                                     \
    static void rows_##NAME##_##SPAN##_##C(const MmJob *j, int64_t o0, int64_t o1, int64_t t) {                  \
        const int64_t nsb = j->K / QK_K;                                                                          \
        KTok tk[C];                                                                                               \
        for (int c = 0; c < (C); c++) tk[c] = kq_tok(j, t + c);                                                   \
        for (int64_t o = o0; o < o1; o++) {                                                                       \
            const uint8_t *w = mm_w_row(j, o);                                                                    \
            /* decode streams the rows from memory: the row KQ_PF_ROWS ahead, line by line (the prefetchers \
             * alone left a 248320-row Q6_K head at ~17 GB/s) */                                                  \
            kq_row_prefetch(j, w, o, o0);                                                                         \
            KAcc st[C];                                                                                           \
            for (int c = 0; c < (C); c++) {                                                                       \
                st[c].acc = st[c].acc2 = _mm256_setzero_ps();                                                     \
                st[c].accm = _mm_setzero_ps();                                                                    \
                st[c].summs = st[c].s = st[c].sm = 0;                                                             \
            }                                                                                                     \
            for (int64_t sb = 0; sb < nsb; sb++) {                                                                \
                KRow kr;                                                                                          \
                DECODE(w + sb * (BYTES), &kr);                                                                    \
                if ((OFF) != 0) kq_expand(&kr);                                                                   \
                for (int c = 0; c < (C); c++)                                                                     \
                    kq_row_step(KIND, (OFF) != 0, SPAN, &kr, tk[c].qs + sb * QK_K, tk[c].d[sb], tk[c].bs + sb * 16, \
                                tk[c].corr + sb * 64, &st[c]);                                                    \
            }                                                                                                     \
            for (int c = 0; c < (C); c++) j->y[(t + c) * j->O + o] = kq_row_result(KIND, SPAN, POST, &st[c]);     \
        }                                                                                                         \
    }

#define KQ_FAST_FN(NAME, KIND, OFF, GS, C)                                                                         \
    static void p16fast##C##_##NAME(const KTile *tl, int64_t nsb, const KTok *tk, float out[][16]) {             \
        kq_p16_fast(KIND, (OFF) != 0, GS, C, tl, nsb, tk, out);                                                   \
    }
#define KQ_FORMAT(NAME, KIND, BYTES, OFF, DECODE, POST, SPAN_OF) KQ_FORMAT_GS(NAME, KIND, BYTES, OFF, DECODE, POST, SPAN_OF, 16)
/* GS: the elements of one integer scale (32 where the format's scales are per 32) */
#define KQ_FORMAT_GS(NAME, KIND, BYTES, OFF, DECODE, POST, SPAN_OF, GS)                                            \
    KQ_FORMAT_GSR(NAME, KIND, BYTES, OFF, DECODE, POST, SPAN_OF, GS, 0, rows_##NAME, kq_no_tile_dec)
/* FAST_ROWS, ROWS_FN: a format's own decode kernel for the fast arithmetic (FAST_ROWS: for fewer tokens than
 * this, the tiles from there on; 0: none),
 * the same integers and float steps as the per-row kernel with span 256; TILE_DEC(j, o, nr, nsb, tile): a faster
 * decoder of a GEMM tile's 16 rows into the same bytes, false when it cannot run here */
#define KQ_FORMAT_GSR(NAME, KIND, BYTES, OFF, DECODE, POST, SPAN_OF, GS, FAST_ROWS, ROWS_FN, TILE_DEC)           \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 1)                                                                            \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 2)                                                                            \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 3)                                                                            \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 4)                                                                            \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 5)                                                                            \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 6)                                                                            \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 7)                                                                            \
    KQ_FAST_FN(NAME, KIND, OFF, GS, 8)                                                                            \
    static void (*const p16fast_##NAME[KQ_FAST_T + 1])(const KTile *, int64_t, const KTok *, float (*)[16]) = {    \
        NULL, p16fast1_##NAME, p16fast2_##NAME, p16fast3_##NAME, p16fast4_##NAME, p16fast5_##NAME, p16fast6_##NAME, \
        p16fast7_##NAME, p16fast8_##NAME};                                                                        \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 0, 1)                                                           \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 0, 2)                                                           \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 64, 1)                                                          \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 64, 2)                                                          \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 128, 1)                                                         \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 128, 2)                                                         \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 256, 1)                                                         \
    KQ_ROWS(NAME, KIND, BYTES, OFF, DECODE, POST, 256, 2)                                                         \
    static void rows_##NAME(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, const int span) {    \
        for (int64_t t = t0; t < t1;) {                                                                           \
            const int c2 = t1 - t >= 2;                                                                           \
            switch (span) {                                                                                       \
            case 64: (c2 ? rows_##NAME##_64_2 : rows_##NAME##_64_1)(j, o0, o1, t); break;                          \
            case 128: (c2 ? rows_##NAME##_128_2 : rows_##NAME##_128_1)(j, o0, o1, t); break;                       \
            case 256: (c2 ? rows_##NAME##_256_2 : rows_##NAME##_256_1)(j, o0, o1, t); break;                       \
            default: (c2 ? rows_##NAME##_0_2 : rows_##NAME##_0_1)(j, o0, o1, t); break;                            \
            }                                                                                                     \
            t += c2 ? 2 : 1;                                                                                      \
        }                                                                                                         \
    }                                                                                                             \
    static void p16lanes1_##NAME(const KTile *tl, int64_t nsb, const KTok *tk, float out[][16]) {                \
        kq_p16_lanes(KIND, (OFF) != 0, 1, POST, tl, nsb, tk, out);                                                \
    }                                                                                                             \
    static void p16lanes2_##NAME(const KTile *tl, int64_t nsb, const KTok *tk, float out[][16]) {                \
        kq_p16_lanes(KIND, (OFF) != 0, 2, POST, tl, nsb, tk, out);                                                \
    }                                                                                                             \
    static void p16span_##NAME(const KTile *tl, int64_t nsb, const KTok *tk, int span, float out[][16]) {        \
        if (span == 64)                                                                                           \
            kq_p16_span(KIND, (OFF) != 0, 64, tl, nsb, tk, out);                                                  \
        else if (span == 128)                                                                                     \
            kq_p16_span(KIND, (OFF) != 0, 128, tl, nsb, tk, out);                                                 \
        else                                                                                                      \
            kq_p16_span(KIND, (OFF) != 0, 256, tl, nsb, tk, out);                                                 \
    }                                                                                                             \
    static void tiles_##NAME(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, const int span,     \
                             uint8_t *tmp) {                                                                      \
        const int64_t nsb = j->K / QK_K;                                                                          \
        const KTile tl = {(uint8_t *)(((uintptr_t)tmp + 63) & ~(uintptr_t)63)};                                   \
        KRow rows[16];                                                                                            \
        for (int64_t o = o0; o < o1; o += 16) {                                                                   \
            const int nr = o1 - o < 16 ? (int)(o1 - o) : 16;                                                      \
            if (!TILE_DEC(j, o, nr, nsb, &tl))                                                                    \
                for (int64_t sb = 0; sb < nsb; sb++) {                                                            \
                    for (int r = 0; r < 16; r++) {                                                                \
                        DECODE(mm_w_row(j, o + (r < nr ? r : nr - 1)) + sb * (BYTES), &rows[r]);                   \
                        if ((KIND) == K_IQ1S || (KIND) == K_IQ1M) kq_iq1_fold(&rows[r]);                             \
                    }                                                                                             \
                    kq_tile_put(&tl, sb, rows);                                                                   \
                }                                                                                                 \
            const bool fast = j->path == DOT_FAST;                                                                \
            const int step = fast ? KQ_FAST_T : span ? 4 : 2;                                                     \
            for (int64_t t = t0; t < t1; t += step) {                                                             \
                const int nc = t1 - t < step ? (int)(t1 - t) : step;                                              \
                KTok tk[KQ_FAST_T];                                                                               \
                for (int c = 0; c < step; c++) tk[c] = kq_tok(j, t + (c < nc ? c : nc - 1));                      \
                float out[KQ_FAST_T][16];                                                                         \
                if (fast)                                                                                         \
                    p16fast_##NAME[nc](&tl, nsb, tk, out);                                                        \
                else if (span)                                                                                    \
                    p16span_##NAME(&tl, nsb, tk, span, out);                                                      \
                else if (nc == 1)                                                                                 \
                    p16lanes1_##NAME(&tl, nsb, tk, out);                                                          \
                else                                                                                              \
                    p16lanes2_##NAME(&tl, nsb, tk, out);                                                          \
                for (int c = 0; c < nc; c++)                                                                      \
                    for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[c][r];                        \
            }                                                                                                     \
        }                                                                                                         \
    }                                                                                                             \
    static void compute_##NAME(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {   \
        if (((KIND) == K_Q4 || (KIND) == K_Q5 || (KIND) == K_Q6) && j->w->pack_kind == PACK_P16 && j->path == DOT_FAST) \
        { /* panels */                                                                                            \
            mm_k_p16_compute(j, o0, o1, t0, t1, tmp);                                                            \
            return;                                                                                               \
        }                                                                                                         \
        const int span = SPAN_OF(j->path);                                                                        \
        const int fast_rows_t = j->path == DOT_FAST ? (FAST_ROWS) : 0;                                           \
        if (t1 - t0 < fast_rows_t) {                                                                              \
            ROWS_FN(j, o0, o1, t0, t1, span);                                                                     \
            return;                                                                                               \
        }                                                                                                         \
        if ((t1 - t0 >= KQ_GEMM_MIN_T || fast_rows_t > 0) &&                                                    \
            (((KIND) != K_IQ1S && (KIND) != K_IQ1M) || j->path == DOT_FAST))                                      \
            tiles_##NAME(j, o0, o1, t0, t1, span, tmp);                                                           \
        else                                                                                                      \
            rows_##NAME(j, o0, o1, t0, t1, span);                                                                 \
    }                                                                                                             \
    const MmFormat mm_##NAME##_avx512 = {.act_kind = MM_ACT_Q8_K, .act_off = (OFF), .tmp_bytes = kq_tmp_bytes,    \
                                         .compute = compute_##NAME, .fast = true};

#endif
