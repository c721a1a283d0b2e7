/* matmul_iq_avx512.c — the i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ4_XS × Q8_K, AVX-512
 * VNNI: decoders into the engine's KRow (matmul_kq_avx512.h). The orders (gguf/quant_order_iq.c):
 * LANES8 for one activation row and mul_mat_id below 8 rows, times the format's power of two at the end;
 * the IQ panel's SPAN (whole super-blocks, scale dfac·d8) for products the pick sends to DOT_GEMM.
 * Values go to vpdpbusd as q + 128 (the grids are signed after their sign bits), with the activation
 * correction -128·Σa. Grid entries come by scalar loads (see grid8); sign bits become a 64-bit lane
 * mask (masked negation; ksigns_iq2xs by pdep and a parity fold). IQ1_S and IQ1_M also decode their
 * offset signs into KRow.qd (a second set of lanes) for the per-row kernel; their products of 4+ tokens in the
 * fast arithmetic run the tiles instead, the offset signs folded into the values (8q ± 1: kq_iq1_fold). Where the CPU has
 * AVX512_VBMI, the tiles and the decode GEMV of all but IQ1_S / IQ1_M decode 16 rows at once instead
 * (matmul_iq_vbmi_avx512.h). */
#include "kernels/cpu/matmul_kq_avx512.h"
#include "kernels/cpu/matmul_iq_vbmi_avx512.h"

#include "gguf/iq_tables.h"

#include <pthread.h>

KQ_INLINE uint32_t ld32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Table rows by scalar loads (vpgather is slower than this on Zen 5: measured 0.74 vs 0.42 ms for an
 * IQ2_XXS 6144×1024 GEMV). */
KQ_INLINE __m512i grid8(const uint64_t *tab, const unsigned *ix) {
    return _mm512_set_epi64((long long)tab[ix[7]], (long long)tab[ix[6]], (long long)tab[ix[5]], (long long)tab[ix[4]],
                            (long long)tab[ix[3]], (long long)tab[ix[2]], (long long)tab[ix[1]], (long long)tab[ix[0]]);
}
KQ_INLINE __m512i grid16(const uint32_t *tab, const unsigned *ix) {
    return _mm512_set_epi32((int)tab[ix[15]], (int)tab[ix[14]], (int)tab[ix[13]], (int)tab[ix[12]], (int)tab[ix[11]],
                            (int)tab[ix[10]], (int)tab[ix[9]], (int)tab[ix[8]], (int)tab[ix[7]], (int)tab[ix[6]],
                            (int)tab[ix[5]], (int)tab[ix[4]], (int)tab[ix[3]], (int)tab[ix[2]], (int)tab[ix[1]], (int)tab[ix[0]]);
}

/* q + 128 of 64 elements: |grid| bytes g, negated where mask bit set */
KQ_INLINE void iq_store64(uint8_t *dst, __m512i g, __mmask64 neg) {
    const __m512i q = _mm512_mask_sub_epi8(g, neg, _mm512_setzero_si512(), g);
    _mm512_store_si512(dst, _mm512_xor_si512(q, _mm512_set1_epi8((char)0x80)));
}

/* ksigns_iq2xs for 8 packed 7-bit indices (28 bits from each word: bits 0, 7, 14, 21): the index with
 * its parity as bit 7, byte by byte — pdep spreads the fields, a xor fold finds each byte's parity */
KQ_INLINE uint64_t ksigns8(uint32_t w0, uint32_t w1) {
    const uint64_t x = _pdep_u64((uint64_t)(w0 & 0x0fffffffu) | (uint64_t)(w1 & 0x0fffffffu) << 28, 0x7f7f7f7f7f7f7f7full);
    uint64_t t = x ^ (x >> 4);
    t ^= t >> 2;
    t ^= t >> 1;
    return x | (t & 0x0101010101010101ull) << 7;
}

/* IQ2_XXS: per 32 elements 8 bytes: 4 grid indices (8 magnitudes each), then 4×7 sign bits | 4-bit scale. One
 * super-block decoded: u[z] = q + 128 of elements 64z … 64z+63 (vpdpbusd's operand: the grid rows, negated where
 * the sign bit is set), sc[z] the scales of sub-blocks 2z and 2z + 1 as dwords (lanes 0-7, 8-15). */
KQ_INLINE void iq2xxs_decode(const BlockIQ2_XXS *b, __m512i u[4], __m512i sc[4]) {
    const uint8_t *qs = (const uint8_t *)b->qs;
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) {
        const uint8_t *q = qs + 16 * z;
        const uint32_t w0 = ld32(q + 4), w1 = ld32(q + 12);
        const __m512i g = _mm512_set_epi64((long long)iq2xxs_grid[q[11]], (long long)iq2xxs_grid[q[10]], (long long)iq2xxs_grid[q[9]],
                                           (long long)iq2xxs_grid[q[8]], (long long)iq2xxs_grid[q[3]], (long long)iq2xxs_grid[q[2]],
                                           (long long)iq2xxs_grid[q[1]], (long long)iq2xxs_grid[q[0]]);
        u[z] = _mm512_xor_si512(_mm512_mask_sub_epi8(g, (__mmask64)ksigns8(w0, w1), _mm512_setzero_si512(), g),
                                _mm512_set1_epi8((char)0x80));
        sc[z] = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32((int)(2 * (w0 >> 28) + 1)), _mm512_set1_epi32((int)(2 * (w1 >> 28) + 1)));
    }
}

/* A decoded super-block into a KRow (the GEMM tiles' input): the values, a scale per 16 elements (sub-block s's
 * twice: dword lanes 0 and 8 of sc[s / 2]), d and dfac */
KQ_INLINE void iq2xxs_krow(const BlockIQ2_XXS *b, const __m512i u[4], const __m512i sc[4], KRow *k) {
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++) _mm512_store_si512(k->q + 64 * z, u[z]);
    const __m512i pick = _mm512_set_epi32(24, 24, 16, 16, 8, 8, 0, 0, 24, 24, 16, 16, 8, 8, 0, 0);
    const __m512i s01 = _mm512_permutex2var_epi32(sc[0], pick, sc[1]), s23 = _mm512_permutex2var_epi32(sc[2], pick, sc[3]);
    _mm_store_si128((__m128i *)k->sc, _mm512_cvtepi32_epi8(_mm512_mask_blend_epi32(0xff00, s01, s23)));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = kq_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

KQ_INLINE void dec_iq2_xxs(const uint8_t *p, KRow *k) {
    const BlockIQ2_XXS *b = (const BlockIQ2_XXS *)p;
    __m512i u[4], sc[4];
    iq2xxs_decode(b, u, sc);
    iq2xxs_krow(b, u, sc, k);
}

/* IQ2_XS: per 8 elements a u16: 9-bit grid index | 7-bit sign index; per 16 a 4-bit scale */
KQ_INLINE void dec_iq2_xs(const uint8_t *p, KRow *k) {
    const BlockIQ2_XS *b = (const BlockIQ2_XS *)p;
#pragma GCC unroll 4
    for (int s2 = 0; s2 < 4; s2++) {
        unsigned ix[8];
        for (int l = 0; l < 8; l++) ix[l] = b->qs[8 * s2 + l] & 511u;
        const __m512i g = grid8(iq2xs_grid, ix);
        uint64_t q0, q1;
        memcpy(&q0, b->qs + 8 * s2, 8);
        memcpy(&q1, b->qs + 8 * s2 + 4, 8);
        iq_store64(k->q + 64 * s2, g,
                   (__mmask64)ksigns8((uint32_t)_pext_u64(q0, 0xfe00fe00fe00fe00ull), (uint32_t)_pext_u64(q1, 0xfe00fe00fe00fe00ull)));
    }
    const __m128i s8 = _mm_loadl_epi64((const __m128i *)b->scales);
    const __m128i lohi = _mm_unpacklo_epi8(_mm_and_si128(s8, _mm_set1_epi8(15)), _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
    _mm_store_si128((__m128i *)k->sc, _mm_add_epi8(_mm_add_epi8(lohi, lohi), _mm_set1_epi8(1)));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = kq_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

/* IQ2_S: per 8 elements a 10-bit grid index (low byte in qs, 2 bits in qh) and a sign byte; per 16 a
 * 4-bit scale */
KQ_INLINE void dec_iq2_s(const uint8_t *p, KRow *k) {
    const BlockIQ2_S *b = (const BlockIQ2_S *)p;
    const uint8_t *signs = b->qs + QK_K / 8;
#pragma GCC unroll 4
    for (int s2 = 0; s2 < 4; s2++) {
        /* index of group l (0..7) of sub-blocks 2·s2, 2·s2+1: qs[8·s2 + l] | (qh[2·s2 + l/4] >> 2(l%4) & 3) << 8 */
        const unsigned qh = (unsigned)(b->qh[2 * s2] | b->qh[2 * s2 + 1] << 8);
        unsigned ix[8];
        for (int l = 0; l < 8; l++) ix[l] = b->qs[8 * s2 + l] | ((qh >> (2 * l)) & 3u) << 8;
        const __m512i g = grid8(iq2s_grid, ix);
        uint64_t m;
        memcpy(&m, signs + 8 * s2, 8);
        iq_store64(k->q + 64 * s2, g, (__mmask64)m);
    }
    const __m128i s8 = _mm_loadl_epi64((const __m128i *)b->scales);
    const __m128i lohi = _mm_unpacklo_epi8(_mm_and_si128(s8, _mm_set1_epi8(15)), _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
    _mm_store_si128((__m128i *)k->sc, _mm_add_epi8(_mm_add_epi8(lohi, lohi), _mm_set1_epi8(1)));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = kq_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

/* IQ3_XXS: 64 grid index bytes (4 magnitudes each, 8 per 32 elements), then per 32 elements a u32: 4×7 sign
 * bits | 4-bit scale */
KQ_INLINE void dec_iq3_xxs(const uint8_t *p, KRow *k) {
    const BlockIQ3_XXS *b = (const BlockIQ3_XXS *)p;
    uint8_t sc[16] __attribute__((aligned(16)));
#pragma GCC unroll 4
    for (int s2 = 0; s2 < 4; s2++) {
        unsigned ix[16];
        for (int m = 0; m < 16; m++) ix[m] = b->qs[16 * s2 + m];
        const __m512i g = grid16(iq3xxs_grid, ix);
        const uint32_t w0 = ld32(b->qs + QK_K / 4 + 4 * (2 * s2)), w1 = ld32(b->qs + QK_K / 4 + 4 * (2 * s2 + 1));
        iq_store64(k->q + 64 * s2, g, (__mmask64)ksigns8(w0, w1));
        sc[4 * s2] = sc[4 * s2 + 1] = (uint8_t)(2 * (w0 >> 28) + 1);
        sc[4 * s2 + 2] = sc[4 * s2 + 3] = (uint8_t)(2 * (w1 >> 28) + 1);
    }
    _mm_store_si128((__m128i *)k->sc, _mm_load_si128((const __m128i *)sc));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = kq_f16(&b->d);
    k->dmin = k->d * 0.25f;
}

/* IQ3_S: per 4 elements a 9-bit grid index (qs byte | qh bit), sign bytes per 8, a 4-bit scale per 32 */
KQ_INLINE void dec_iq3_s(const uint8_t *p, KRow *k) {
    const BlockIQ3_S *b = (const BlockIQ3_S *)p;
    uint8_t sc[16] __attribute__((aligned(16)));
#pragma GCC unroll 4
    for (int s2 = 0; s2 < 4; s2++) {
        /* index m (0..15): qs[16·s2 + m] | ((qh[2·s2 + m/8] >> (m % 8)) & 1) << 8 */
        const unsigned qh = (unsigned)(b->qh[2 * s2] | b->qh[2 * s2 + 1] << 8);
        unsigned ix[16];
        for (int m = 0; m < 16; m++) ix[m] = b->qs[16 * s2 + m] | ((qh >> m) & 1u) << 8;
        const __m512i g = grid16(iq3s_grid, ix);
        uint64_t m;
        memcpy(&m, b->signs + 8 * s2, 8);
        iq_store64(k->q + 64 * s2, g, (__mmask64)m);
        const uint8_t s = b->scales[s2];
        sc[4 * s2] = sc[4 * s2 + 1] = (uint8_t)(1 + 2 * (s & 15));
        sc[4 * s2 + 2] = sc[4 * s2 + 3] = (uint8_t)(1 + 2 * (s >> 4));
    }
    _mm_store_si128((__m128i *)k->sc, _mm_load_si128((const __m128i *)sc));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = k->dmin = kq_f16(&b->d);
}

/* IQ4_XS: per 32 elements 16 bytes of nibbles (element j: low nibble of byte j, j + 16: high), values from
 * kvalues_iq4nl; a 6-bit scale (4 low bits in scales_l, 2 high in scales_h) minus 32 */
KQ_INLINE void dec_iq4_xs(const uint8_t *p, KRow *k) {
    const BlockIQ4_XS *b = (const BlockIQ4_XS *)p;
    const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    uint8_t sc[16] __attribute__((aligned(16)));
#pragma GCC unroll 4
    for (int s2 = 0; s2 < 4; s2++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * s2));
        const __m512i w = _mm512_shuffle_i64x2(_mm512_castsi256_si512(v), _mm512_castsi256_si512(v), 0x50); /* A A B B */
        const __m512i n = _mm512_and_si512(_mm512_srlv_epi16(w, _mm512_setr_epi64(0, 0, 0x0004000400040004, 0x0004000400040004, 0, 0,
                                                                                  0x0004000400040004, 0x0004000400040004)),
                                           _mm512_set1_epi8(15));
        _mm512_store_si512(k->q + 64 * s2, _mm512_xor_si512(_mm512_shuffle_epi8(tab, n), _mm512_set1_epi8((char)0x80)));
        for (int h = 0; h < 2; h++) {
            const int sb = 2 * s2 + h;
            const int ls = (((b->scales_l[sb / 2] >> (4 * (sb % 2))) & 15) | ((b->scales_h >> (2 * sb)) & 3) << 4) - 32;
            sc[2 * sb] = sc[2 * sb + 1] = (uint8_t)ls;
        }
    }
    _mm_store_si128((__m128i *)k->sc, _mm_load_si128((const __m128i *)sc));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = k->dmin = kq_f16(&b->d);
}

/* IQ1_S: per 32 elements 4 grid bytes (8 values in {-1, 0, 1} per entry, 11-bit index with 3 bits from
 * qh) and a u16 qh: 3-bit scale (bits 12-14), offset sign (bit 15) */
KQ_INLINE void dec_iq1_s(const uint8_t *p, KRow *k) {
    const BlockIQ1_S *b = (const BlockIQ1_S *)p;
    uint8_t sc[16] __attribute__((aligned(16)));
#pragma GCC unroll 4
    for (int s2 = 0; s2 < 4; s2++) {
        unsigned ix[8];
        uint64_t dm = 0;
        for (int h = 0; h < 2; h++) {
            const int sb = 2 * s2 + h;
            const unsigned qh = b->qh[sb];
            for (int l = 0; l < 4; l++) ix[4 * h + l] = b->qs[4 * sb + l] | ((qh >> (3 * l)) & 7u) << 8;
            dm |= (uint64_t)(0xffffffffu & -(uint32_t)(qh >> 15)) << (32 * h); /* branch-free: random bits */
            sc[2 * sb] = sc[2 * sb + 1] = (uint8_t)(2 * ((qh >> 12) & 7) + 1);
        }
        _mm512_store_si512(k->q + 64 * s2, _mm512_xor_si512(grid8(iq1s_grid, ix), _mm512_set1_epi8((char)0x80)));
        iq_store64(k->qd + 64 * s2, _mm512_set1_epi8(1), (__mmask64)dm);
    }
    _mm_store_si128((__m128i *)k->sc, _mm_load_si128((const __m128i *)sc));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = kq_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

/* IQ1_M: grid as IQ1_S with the 3 high index bits and the offset sign in nibbles of qh (per 8
 * elements); 3-bit scales per 16; the fp16 d in the top nibbles of the four scale words */
KQ_INLINE void dec_iq1_m(const uint8_t *p, KRow *k) {
    const BlockIQ1_M *b = (const BlockIQ1_M *)p;
    uint16_t scw[4];
    memcpy(scw, b->scales, 8);
    uint8_t sc[16] __attribute__((aligned(16)));
#pragma GCC unroll 4
    for (int s2 = 0; s2 < 4; s2++) {
        unsigned ix[8];
        uint64_t dm = 0;
        for (int h = 0; h < 2; h++) {
            const int sb = 2 * s2 + h;
            for (int l = 0; l < 4; l++) {
                const unsigned nib = (b->qh[2 * sb + l / 2] >> (4 * (l % 2))) & 15u;
                ix[4 * h + l] = b->qs[4 * sb + l] | (nib & 7u) << 8;
                dm |= (uint64_t)(0xffu & -(nib >> 3)) << (8 * (4 * h + l)); /* branch-free: random bits */
            }
            for (int hh = 0; hh < 2; hh++) sc[2 * sb + hh] = (uint8_t)(2 * ((scw[sb / 2] >> (6 * (sb % 2) + 3 * hh)) & 7) + 1);
        }
        _mm512_store_si512(k->q + 64 * s2, _mm512_xor_si512(grid8(iq1s_grid, ix), _mm512_set1_epi8((char)0x80)));
        iq_store64(k->qd + 64 * s2, _mm512_set1_epi8(1), (__mmask64)dm);
    }
    _mm_store_si128((__m128i *)k->sc, _mm_load_si128((const __m128i *)sc));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    const uint16_t dh = (uint16_t)((scw[0] >> 12) | ((scw[1] >> 8) & 0x00f0) | ((scw[2] >> 4) & 0x0f00) | (scw[3] & 0xf000));
    k->d = kq_f16(&dh);
    k->dmin = k->d * 0.125f;
}


/* IQ2_XXS decode in the fast arithmetic (1-2 tokens): the per-row kernel's integers and float steps (span 256)
 * with nothing stored between decoding and the dot products: +128 for vpdpbusd (from the group's correction
 * -128·Σa), and the two sub-block scales by vpmaddwd (a 4-element lane total |Σ q·a| ≤ 4·43·128 fits int16, so
 * (total, ±0)·(scale, 0) is exact) — no KRow round trip, no expanded scale vectors, no vpmulld. One decoded
 * super-block sb into C tokens' sums s: */
KQ_INLINE void iq2xxs_sb_dot(const KTok *tk, const int C, int64_t sb, const __m512i u[4], const __m512i sc[4], float dfac,
                             float *s) {
    __m512i T[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 4
    for (int z = 0; z < 4; z++)
#pragma GCC unroll 2
        for (int c = 0; c < C; c++) {
            const __m512i I = _mm512_dpbusd_epi32(_mm512_loadu_si512(tk[c].corr + sb * 64 + 16 * z), u[z],
                                                  _mm512_loadu_si512(tk[c].qs + sb * QK_K + 64 * z));
            T[c] = _mm512_add_epi32(T[c], _mm512_madd_epi16(I, sc[z]));
        }
#pragma GCC unroll 2
    for (int c = 0; c < C; c++) s[c] = fmaf((float)_mm512_reduce_add_epi32(T[c]), dfac * tk[c].d[sb], s[c]);
}

/* The rows o0 … o1-1 with the plain decoder (without VBMI) */
KQ_INLINE void iq2xxs_fast_rows_c(const MmJob *j, int64_t o0, int64_t o1, int64_t t, const int C) {
    const int64_t nsb = j->K / QK_K;
    KTok tk[2];
    for (int c = 0; c < C; c++) tk[c] = kq_tok(j, t + c);
    for (int64_t o = o0; o < o1; o++) {
        const uint8_t *w = mm_w_row(j, o);
        kq_row_prefetch(j, w, o, o0);
        float s[2] = {0.f, 0.f};
        for (int64_t sb = 0; sb < nsb; sb++) {
            const BlockIQ2_XXS *b = (const BlockIQ2_XXS *)(w + sb * 66);
            __m512i u[4], sc[4];
            iq2xxs_decode(b, u, sc);
            iq2xxs_sb_dot(tk, C, sb, u, sc, kq_f16(&b->d) * 0.125f, s);
        }
        for (int c = 0; c < C; c++) j->y[(t + c) * j->O + o] = s[c];
    }
}


/* the tile-decode hook of KQ_FORMAT_GSR: true when it decoded the tile */
static bool iq2xxs_tile_dec(const MmJob *j, int64_t o, int nr, int64_t nsb, const KTile *tl) {
    if (!vbmi_ready()) return false;
    iq2xxs_vbmi_tile(j, o, nr, nsb, tl);
    return true;
}

static void iq2xxs_fast_rows(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, int span) {
    (void)span;
    if (vbmi_ready()) { /* one token here: iq2xxs_fast_rows_t */
        for (int64_t t = t0; t < t1; t++) iq2xxs_vbmi_gemv(j, o0, o1, t);
        return;
    }
    for (int64_t t = t0; t < t1; t += 2) {
        const bool two = t1 - t >= 2;
        if (two) iq2xxs_fast_rows_c(j, o0, o1, t, 2);
        else iq2xxs_fast_rows_c(j, o0, o1, t, 1);
    }
}

/* Below how many tokens the fast arithmetic runs iq2xxs_fast_rows: with VBMI the tiles from 2 tokens (matmul_bench
 * 512x2048, 1 thread: T = 2 61 vs 40-50 GFLOP/s with the row kernel, T = 3 83 vs 34-41) and the GEMV for one,
 * without it the row kernel below KQ_GEMM_MIN_T. */
static int iq2xxs_fast_rows_t(void) { return vbmi_ready() ? 2 : KQ_GEMM_MIN_T; }

KQ_FORMAT_GSR(iq2_xxs, K_IQ, 66, 128, dec_iq2_xxs, 0.125f, mm_span_iq, 32, iq2xxs_fast_rows_t(), iq2xxs_fast_rows, iq2xxs_tile_dec)
KQ_FORMAT_GSR(iq2_xs, K_IQ, 74, 128, dec_iq2_xs, 0.125f, mm_span_iq, 16, iq2xs_fast_rows_t(), iq2xs_fast_rows, iq2xs_tile_dec)
KQ_FORMAT_GSR(iq2_s, K_IQ, 82, 128, dec_iq2_s, 0.125f, mm_span_iq, 16, iq2s_fast_rows_t(), iq2s_fast_rows, iq2s_tile_dec)
KQ_FORMAT_GSR(iq3_xxs, K_IQ, 98, 128, dec_iq3_xxs, 0.25f, mm_span_iq, 32, iq3xxs_fast_rows_t(), iq3xxs_fast_rows,
              iq3xxs_tile_dec)
KQ_FORMAT_GSR(iq3_s, K_IQ, 110, 128, dec_iq3_s, 1.f, mm_span_iq, 32, iq3s_fast_rows_t(), iq3s_fast_rows, iq3s_tile_dec)
KQ_FORMAT_GSR(iq4_xs, K_IQ, 136, 128, dec_iq4_xs, 1.f, mm_span_iq, 32, iq4xs_fast_rows_t(), iq4xs_fast_rows, iq4xs_tile_dec)
KQ_FORMAT_GS(iq1_s, K_IQ1S, 50, 128, dec_iq1_s, 1.f, mm_span_iq, 32)
KQ_FORMAT(iq1_m, K_IQ1M, 56, 128, dec_iq1_m, 1.f, mm_span_iq)
