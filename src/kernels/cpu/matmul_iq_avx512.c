/* matmul_iq_avx512.c — the i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ4_XS × Q8_K, AVX-512
 * VNNI: decoders into the engine's KRow (matmul_kq_avx512.h). The orders (gguf/quant_order_iq.c):
 * LANES8 for one activation row and mul_mat_id below 8 rows, times the format's power of two at the end;
 * the IQ panel's SPAN (whole super-blocks, scale dfac·d8) for products the pick sends to DOT_GEMM.
 * Values go to vpdpbusd as q + 128 (the grids are signed after their sign bits), with the activation
 * correction -128·Σa. Grid entries come by scalar loads (see grid8); sign bits become a 64-bit lane
 * mask (masked negation; ksigns_iq2xs by pdep and a parity fold). IQ1_S and IQ1_M also decode their
 * offset signs into KRow.qd (a second set of lanes) and run the per-row kernel on every path. */
#include "kernels/cpu/matmul_kq_avx512.h"

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

/* With AVX512_VBMI: the grid and the sign table in registers instead of scalar loads and pdep, and 16 rows
 * decoded at once straight into the layout of a GEMM tile (lane r = row r, 4 elements per dword; kq_tile_put's
 * bytes without decoding rows and transposing them — that round trip was 3/4 of an expert product of ~10
 * tokens). Per super-block the 16 rows' quant words are transposed once as dwords (vector 2s: the 4 grid indices
 * of sub-block s of every row, 2s + 1: its sign / scale word), then per sub-block
 *   - each grid row (8 magnitudes from {8, 25, 43}) as a 16-bit code of 2-bit level numbers, looked up 64 at a
 *     time (vpermi2b over 128-byte halves of the code's low- and high-byte tables, bit 7 of the index choosing
 *     the half), each sign field's ksigns byte (vpmultishiftqb, vpermi2b) and the scales (the 4 top bits);
 *   - per group and half (4 elements of 16 rows: one tile vector) the row's code into its dword (vpermi2b over
 *     the low / high code bytes), the 4 levels into bytes (vpmultishiftqb), the sign bits into a mask (vpermb,
 *     vptestmb) and 128 ± magnitude (vpermb; vpdpbusd's operand).
 * The GEMM tiles take the vectors through the tile (iq2xxs_vbmi_tile), the decode GEMV straight into vpdpbusd
 * (iq2xxs_vbmi_gemv); the integers are those of the per-row kernel, the float steps the same. */
typedef struct Iq2xxsVbmiTabs {
    uint8_t lo[256], hi[256]; /* the 16-bit level code of each grid row, low and high byte */
    uint8_t ks[128];          /* ksigns_iq2xs */
    uint8_t pos[64], neg[64]; /* level number (low 2 bits of the byte) → 128 + magnitude, 128 − magnitude */
    bool ok;                  /* the grid holds only the three magnitudes */
} Iq2xxsVbmiTabs;
static Iq2xxsVbmiTabs vb_tabs __attribute__((aligned(64)));
static pthread_once_t vb_once = PTHREAD_ONCE_INIT;

static void vb_init(void) {
    static const uint8_t mag[3] = {8, 25, 43};
    bool ok = true;
    for (int e = 0; e < 256; e++) {
        unsigned code = 0;
        for (int i = 0; i < 8; i++) {
            const uint8_t v = (uint8_t)(iq2xxs_grid[e] >> (8 * i));
            const unsigned lv = v == mag[0] ? 0u : v == mag[1] ? 1u : 2u;
            ok = ok && v == mag[lv];
            code |= lv << (2 * i);
        }
        vb_tabs.lo[e] = (uint8_t)code, vb_tabs.hi[e] = (uint8_t)(code >> 8);
    }
    memcpy(vb_tabs.ks, ksigns_iq2xs, 128);
    for (int x = 0; x < 64; x++) {
        const int m = (x & 3) < 3 ? mag[x & 3] : 0;
        vb_tabs.pos[x] = (uint8_t)(128 + m), vb_tabs.neg[x] = (uint8_t)(128 - m);
    }
    vb_tabs.ok = ok;
}

/* The VBMI decoder's tables and constants in registers, loaded once per call. */
typedef struct VbConst {
    __m512i lo0, lo1, lo2, lo3, hi0, hi1, hi2, hi3, ks0, ks1, pos, neg; /* the tables */
    __m512i cbase, cstep, lsh0, lsh1, sb0, sb1, fctl, m63;
} VbConst;

#define VB_TARGET __attribute__((target("avx512vbmi")))
#define VB_INLINE VB_TARGET static inline __attribute__((always_inline))

VB_INLINE void vb_const(VbConst *k) {
    const Iq2xxsVbmiTabs *tb = &vb_tabs;
    k->lo0 = _mm512_load_si512(tb->lo), k->lo1 = _mm512_load_si512(tb->lo + 64);
    k->lo2 = _mm512_load_si512(tb->lo + 128), k->lo3 = _mm512_load_si512(tb->lo + 192);
    k->hi0 = _mm512_load_si512(tb->hi), k->hi1 = _mm512_load_si512(tb->hi + 64);
    k->hi2 = _mm512_load_si512(tb->hi + 128), k->hi3 = _mm512_load_si512(tb->hi + 192);
    k->ks0 = _mm512_load_si512(tb->ks), k->ks1 = _mm512_load_si512(tb->ks + 64);
    k->pos = _mm512_load_si512(tb->pos), k->neg = _mm512_load_si512(tb->neg);
    /* dword r of the code vector of group g4: bytes 4r + g4 of the low (byte 0) and the high code bytes (byte 1) */
    k->cbase = _mm512_add_epi8(_mm512_set1_epi32(0x00004000),
                               _mm512_set_epi32(60 * 0x01010101, 56 * 0x01010101, 52 * 0x01010101, 48 * 0x01010101,
                                                44 * 0x01010101, 40 * 0x01010101, 36 * 0x01010101, 32 * 0x01010101,
                                                28 * 0x01010101, 24 * 0x01010101, 20 * 0x01010101, 16 * 0x01010101,
                                                12 * 0x01010101, 8 * 0x01010101, 4 * 0x01010101, 0));
    k->cstep = _mm512_set1_epi32(0x01010101);
    /* byte j of a qword (dword j / 4, level j % 4): bits 32·(j / 4) + 8h + 2·(j % 4) of the code */
    k->lsh0 = _mm512_set1_epi64(0x2624222006040200), k->lsh1 = _mm512_set1_epi64(0x2e2c2a280e0c0a08);
    /* byte j of a dword: sign bit 4h + j of the group's ksigns byte */
    k->sb0 = _mm512_set1_epi32(0x08040201), k->sb1 = _mm512_set1_epi32((int)0x80402010u);
    k->fctl = _mm512_set1_epi64(0x352e2720150e0700); /* each dword's four 7-bit sign fields */
    k->m63 = _mm512_set1_epi8(63);
}

/* Super-block sb of 16 rows: the quant words transposed (v[2s]: sub-block s's grid indices of every row, v[2s+1]:
 * its sign / scale words) and the fp16 d of each row */
VB_INLINE void vbt_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512 *d) {
    uint16_t dh[16];
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * 66;
        v[r] = _mm512_loadu_si512(b + 2);
        memcpy(&dh[r], b, 2);
    }
    kq_transpose16(v);
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
}

/* One sub-block of 16 rows: the lookups shared by its 8 tile vectors, and its scales (dword r: row r's) */
typedef struct VbtSub {
    __m512i lo, hi, sg, sc;
} VbtSub;

VB_INLINE VbtSub vbt_sub(const VbConst *k, __m512i ix, __m512i w) {
    VbtSub u;
    const __mmask64 top = _mm512_movepi8_mask(ix);
    u.lo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->lo0, ix, k->lo1), _mm512_permutex2var_epi8(k->lo2, ix, k->lo3));
    u.hi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->hi0, ix, k->hi1), _mm512_permutex2var_epi8(k->hi2, ix, k->hi3));
    u.sg = _mm512_permutex2var_epi8(k->ks0, _mm512_multishift_epi64_epi8(k->fctl, w), k->ks1);
    u.sc = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(w, 28), 1), _mm512_set1_epi32(1));
    return u;
}

/* The two tile vectors (elements 4·(2·g4 + h) … +3 of the 16 rows, q + 128) of group g4; ci: its code index */
VB_INLINE void vbt_group(const VbConst *k, const VbtSub *u, __m512i ci, __m512i *q0, __m512i *q1) {
    const __m512i code = _mm512_permutex2var_epi8(u->lo, ci, u->hi);
    const __m512i sgn = _mm512_permutexvar_epi8(_mm512_and_si512(ci, k->m63), u->sg);
    const __m512i lv0 = _mm512_multishift_epi64_epi8(k->lsh0, code), lv1 = _mm512_multishift_epi64_epi8(k->lsh1, code);
    const __mmask64 n0 = _mm512_test_epi8_mask(sgn, k->sb0), n1 = _mm512_test_epi8_mask(sgn, k->sb1);
    *q0 = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(lv0, k->pos), n0, lv0, k->neg);
    *q1 = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(lv1, k->pos), n1, lv1, k->neg);
}

/* The GEMM's tile decode: rows o … o+nr-1 (the last repeated to 16), every super-block */
VB_TARGET static void iq2xxs_vbmi_tile(const MmJob *j, int64_t o, int nr, int64_t nsb, const KTile *tl) {
    VbConst k;
    vb_const(&k);
    const uint8_t *row[16];
    for (int r = 0; r < 16; r++) row[r] = mm_w_row(j, o + (r < nr ? r : nr - 1));
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t sb = 0; sb < nsb; sb++) {
        __m512i v[16];
        __m512 d;
        vbt_load(row, sb, v, &d);
        uint8_t *q = kt_q(tl, sb);
        int32_t *sc = kt_sc(tl, sb);
        for (int s = 0; s < 8; s++) {
            const VbtSub u = vbt_sub(&k, v[2 * s], v[2 * s + 1]);
            _mm512_store_si512(sc + 16 * (2 * s), u.sc);
            _mm512_store_si512(sc + 16 * (2 * s + 1), u.sc);
            __m512i ci = k.cbase;
#pragma GCC unroll 4
            for (int g4 = 0; g4 < 4; g4++) {
                __m512i q0, q1;
                vbt_group(&k, &u, ci, &q0, &q1);
                _mm512_store_si512(q + 64 * (8 * s + 2 * g4), q0);
                _mm512_store_si512(q + 64 * (8 * s + 2 * g4 + 1), q1);
                ci = _mm512_add_epi8(ci, k.cstep);
            }
        }
        int32_t *mp = kt_mp(tl, sb);
        for (int i = 0; i < 8; i++) _mm512_store_si512(mp + 16 * i, zero);
        _mm512_store_ps(kt_d(tl, sb), d);
        _mm512_store_ps(kt_dmin(tl, sb), _mm512_mul_ps(d, _mm512_set1_ps(0.125f)));
    }
}

/* The decode GEMV (one token t) with the same decoder, 16 rows at a time, its vectors going straight into
 * vpdpbusd instead of through a tile: kq_p16_fast's integers and float steps with C = 1 (a 32-element group's
 * total from its correction, one vpmulld by the rows' scales, one fma per super-block), so the bits of the row
 * kernel and the tiles. The rows of a group are contiguous (row_bytes apart): the next group is prefetched
 * 16 · 66 bytes per super-block. */
VB_TARGET static void iq2xxs_vbmi_gemv(const MmJob *j, int64_t o0, int64_t o1, int64_t t) {
    VbConst k;
    vb_const(&k);
    const int64_t nsb = j->K / QK_K;
    const KTok tk = kq_tok(j, t);
    for (int64_t o = o0; o < o1; o += 16) {
        const int nr = o1 - o < 16 ? (int)(o1 - o) : 16;
        const uint8_t *row[16];
        for (int r = 0; r < 16; r++) row[r] = mm_w_row(j, o + (r < nr ? r : nr - 1));
        const uint8_t *next = mm_w_row(j, o) + 16 * j->w->row_bytes;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t sb = 0; sb < nsb; sb++) {
            for (int l = 0; l < 16 * 66; l += 64) _mm_prefetch((const char *)next + sb * 16 * 66 + l, _MM_HINT_T0);
            __m512i v[16];
            __m512 d;
            vbt_load(row, sb, v, &d);
            const int8_t *a = tk.qs + sb * QK_K;
            const int32_t *cr = tk.corr16 + sb * 16;
            __m512i S = _mm512_setzero_si512();
            for (int s = 0; s < 8; s++) {
                const VbtSub u = vbt_sub(&k, v[2 * s], v[2 * s + 1]);
                __m512i I = _mm512_set1_epi32(cr[2 * s] + cr[2 * s + 1]), ci = k.cbase;
#pragma GCC unroll 4
                for (int g4 = 0; g4 < 4; g4++) {
                    __m512i q0, q1;
                    vbt_group(&k, &u, ci, &q0, &q1);
                    I = _mm512_dpbusd_epi32(I, q0, kq_bcast32(a + 32 * s + 8 * g4));
                    I = _mm512_dpbusd_epi32(I, q1, kq_bcast32(a + 32 * s + 8 * g4 + 4));
                    ci = _mm512_add_epi8(ci, k.cstep);
                }
                S = _mm512_add_epi32(S, _mm512_mullo_epi32(I, u.sc));
            }
            const __m512 dw = _mm512_mul_ps(d, _mm512_set1_ps(0.125f));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, _mm512_set1_ps(tk.d[sb])), acc);
        }
        float out[16];
        _mm512_storeu_ps(out, acc);
        for (int r = 0; r < nr; r++) j->y[t * j->O + o + r] = out[r];
    }
}

/* the VBMI decoder can run here: the CPU has VBMI and the grid holds only its three magnitudes */
static bool vbmi_ready(void) {
    if (!mm_vbmi()) return false;
    pthread_once(&vb_once, vb_init);
    return vb_tabs.ok;
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

/* IQ3_XXS and IQ3_S with AVX512_VBMI, the same scheme as IQ2_XXS's: each grid row (4 magnitudes of at most 8
 * values) as a 12-bit code of 3-bit level numbers (low and high byte tables, looked up 64 indices at a time by
 * vpermi2b over 128-entry quarters, the index's top bits choosing); per 4-element group of 16 rows (one tile vector)
 * the rows' codes into dwords (vpermi2b), the 4 levels into bytes (vpmultishiftqb: the level tables repeat every 8
 * entries, so the bits above a level do not matter), the group's half of its sign byte into a mask (vpermb,
 * vptestmb) and 128 ± magnitude (vpermb). Super-block sb of 16 rows: the 64 index bytes transposed as dwords
 * (v[2s + h]: the indices of groups 4h … 4h + 3 of sub-block s) and the rest of the block likewise (w). Same
 * integers and float steps as the per-row kernel. */
typedef struct Vb3Tabs {
    uint8_t lo[512], hi[512]; /* the 12-bit level code of each grid row, low and high byte */
    uint8_t pos[64], neg[64]; /* level (x mod 8) → 128 + magnitude, 128 − magnitude */
    bool ok;                  /* the grid holds at most 8 magnitudes, each < 128 */
} Vb3Tabs;
static Vb3Tabs vb3_xxs __attribute__((aligned(64))), vb3_s __attribute__((aligned(64))), vb4_xs __attribute__((aligned(64)));
static pthread_once_t vb3_once = PTHREAD_ONCE_INIT;

static void vb3_build(Vb3Tabs *t, const uint32_t *grid, int n) {
    uint8_t mag[8] = {0};
    int nm = 0;
    bool ok = true;
    for (int e = 0; e < n; e++) {
        unsigned code = 0;
        for (int i = 0; i < 4; i++) {
            const uint8_t v = (uint8_t)(grid[e] >> (8 * i));
            int l = 0;
            while (l < nm && mag[l] != v) l++;
            if (l == nm) {
                if (nm == 8 || v > 127) {
                    ok = false;
                    l = 0;
                } else
                    mag[nm++] = v;
            }
            code |= (unsigned)l << (3 * i);
        }
        t->lo[e] = (uint8_t)code, t->hi[e] = (uint8_t)(code >> 8);
    }
    for (int x = 0; x < 64; x++) t->pos[x] = (uint8_t)(128 + mag[x & 7]), t->neg[x] = (uint8_t)(128 - mag[x & 7]);
    t->ok = ok;
}
static void vb3_init(void) {
    vb3_build(&vb3_xxs, iq3xxs_grid, 256);
    vb3_build(&vb3_s, iq3s_grid, 512);
    for (int x = 0; x < 64; x++) vb4_xs.pos[x] = (uint8_t)(128 + kvalues_iq4nl[x & 15]); /* vpshufb's 16 per lane */
    vb4_xs.ok = true;
}

typedef struct Vb3Const {
    __m512i lo[8], hi[8], pos, neg, ks0, ks1; /* the tables (IQ3_XXS: lo[0..3], hi[0..3]) */
    __m512i cbase, sbase, step, lsh, sb0, sb1, fctl;
} Vb3Const;

VB_INLINE void vb3_const(Vb3Const *k, const Vb3Tabs *tb, int n) {
    for (int i = 0; i < n / 64; i++) k->lo[i] = _mm512_load_si512(tb->lo + 64 * i), k->hi[i] = _mm512_load_si512(tb->hi + 64 * i);
    k->pos = _mm512_load_si512(tb->pos), k->neg = _mm512_load_si512(tb->neg);
    k->ks0 = _mm512_loadu_si512(ksigns_iq2xs), k->ks1 = _mm512_loadu_si512(ksigns_iq2xs + 64);
    /* every byte of dword r: 4r (+ the group or the byte wanted); byte 1 of a code index: the high table (+ 64) */
    k->sbase = _mm512_set_epi32(60 * 0x01010101, 56 * 0x01010101, 52 * 0x01010101, 48 * 0x01010101, 44 * 0x01010101,
                                40 * 0x01010101, 36 * 0x01010101, 32 * 0x01010101, 28 * 0x01010101, 24 * 0x01010101,
                                20 * 0x01010101, 16 * 0x01010101, 12 * 0x01010101, 8 * 0x01010101, 4 * 0x01010101, 0);
    k->cbase = _mm512_add_epi8(_mm512_set1_epi32(0x00004000), k->sbase);
    k->step = _mm512_set1_epi32(0x01010101);
    k->lsh = _mm512_set1_epi64(0x2926232009060300); /* byte j of a qword: bit 32·(j / 4) + 3·(j % 4) */
    k->sb0 = _mm512_set1_epi32(0x08040201), k->sb1 = _mm512_set1_epi32((int)0x80402010u);
    k->fctl = _mm512_set1_epi64(0x352e2720150e0700);
}

/* dword r of x: byte b of dword r of x in all four bytes */
VB_INLINE __m512i vb3_byte(const Vb3Const *k, __m512i x, int b) {
    return _mm512_permutexvar_epi8(_mm512_add_epi8(k->sbase, _mm512_set1_epi8((char)b)), x);
}

/* The 8 tile vectors of a sub-block from its codes (lo[h], hi[h]: groups 4h … 4h + 3, byte 4r + i) and its sign
 * bytes (dword r: row r's four, byte l for elements 8l … 8l + 7) */
VB_INLINE void vb3_groups(const Vb3Const *k, const __m512i lo[2], const __m512i hi[2], __m512i sg, __m512i q[8]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i ci = k->cbase;
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const __m512i sgn = vb3_byte(k, sg, 2 * h + p);
#pragma GCC unroll 2
            for (int e = 0; e < 2; e++) {
                const __m512i lv = _mm512_multishift_epi64_epi8(k->lsh, _mm512_permutex2var_epi8(lo[h], ci, hi[h]));
                const __mmask64 n = _mm512_test_epi8_mask(sgn, e ? k->sb1 : k->sb0);
                q[4 * h + 2 * p + e] = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(lv, k->pos), n, lv, k->neg);
                ci = _mm512_add_epi8(ci, k->step);
            }
        }
    }
}

/* IQ3_XXS (98-byte blocks: d, 64 index bytes, 8 sign / scale words) */
VB_INLINE void vb3x_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512i w[16], __m512i x[2], __m512 *d) {
    (void)x;
    uint16_t dh[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * 98;
        v[r] = _mm512_loadu_si512(b + 2);
        w[r] = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)(b + 66)));
        memcpy(&dh[r], b, 2);
    }
    kq_transpose16(v);
    kq_transpose16(w);
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
}
/* sub-block s: its tile vectors and scales (dword r: row r's) */
VB_INLINE __m512i vb3x_sub(const Vb3Const *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8]) {
    (void)x;
    __m512i lo[2], hi[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i ix = v[2 * s + h];
        const __mmask64 top = _mm512_movepi8_mask(ix);
        lo[h] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->lo[0], ix, k->lo[1]), _mm512_permutex2var_epi8(k->lo[2], ix, k->lo[3]));
        hi[h] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->hi[0], ix, k->hi[1]), _mm512_permutex2var_epi8(k->hi[2], ix, k->hi[3]));
    }
    vb3_groups(k, lo, hi, _mm512_permutex2var_epi8(k->ks0, _mm512_multishift_epi64_epi8(k->fctl, w[s]), k->ks1), q);
    return _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(w[s], 28), 1), _mm512_set1_epi32(1));
}

/* IQ3_S (110-byte blocks: d, 64 index bytes, 8 bytes of their 9th bits, 32 sign bytes, 4 scale bytes): w[0..1] the
 * high bits, w[2 + s] sub-block s's signs, w[10] the scales */
VB_INLINE void vb3s_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512i w[16], __m512i x[2], __m512 *d) {
    (void)x;
    uint16_t dh[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * 110;
        v[r] = _mm512_loadu_si512(b + 2);
        w[r] = _mm512_maskz_loadu_epi8((__mmask64)0xfffffffffffull, b + 66); /* 44 bytes: no read past the block */
        memcpy(&dh[r], b, 2);
    }
    kq_transpose16(v);
    kq_transpose16(w);
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
}
VB_INLINE __m512i vb3s_sub(const Vb3Const *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8]) {
    (void)x;
    __m512i lo[2], hi[2];
    const __m512i qh = vb3_byte(k, w[s / 4], s % 4); /* the 9th bits of the sub-block's 8 groups */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i ix = v[2 * s + h];
        const __mmask64 top = _mm512_movepi8_mask(ix), b8 = _mm512_test_epi8_mask(qh, h ? k->sb1 : k->sb0);
        lo[h] = _mm512_mask_blend_epi8(
            b8, _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->lo[0], ix, k->lo[1]), _mm512_permutex2var_epi8(k->lo[2], ix, k->lo[3])),
            _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->lo[4], ix, k->lo[5]), _mm512_permutex2var_epi8(k->lo[6], ix, k->lo[7])));
        hi[h] = _mm512_mask_blend_epi8(
            b8, _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->hi[0], ix, k->hi[1]), _mm512_permutex2var_epi8(k->hi[2], ix, k->hi[3])),
            _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->hi[4], ix, k->hi[5]), _mm512_permutex2var_epi8(k->hi[6], ix, k->hi[7])));
    }
    vb3_groups(k, lo, hi, w[2 + s], q);
    const __m512i nib = _mm512_and_si512(_mm512_srli_epi32(w[10], 4 * s), _mm512_set1_epi32(15));
    return _mm512_or_si512(_mm512_slli_epi32(nib, 1), _mm512_set1_epi32(1));
}

/* IQ4_XS (136-byte blocks: d, scales_h, scales_l[4], 128 bytes of nibbles) the same way, without grids: the 16 rows'
 * nibble bytes transposed as dwords (v: bytes 0-63, w: 64-127; dword 4s + m of sub-block s: its elements 4m … 4m + 3
 * in the low nibbles, 16 + 4m … in the high ones), 128 + kvalues_iq4nl by vpshufb, and the first two dwords of each
 * block (x[0]: d | scales_h << 16, x[1]: scales_l) for the 6-bit scales. (Needs AVX512BW only; it rides with the
 * VBMI kernels, whose test passes check both ways.) */
VB_INLINE void vb4_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512i w[16], __m512i x[2], __m512 *d) {
    uint64_t hd[16] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * 136;
        v[r] = _mm512_loadu_si512(b + 8);
        w[r] = _mm512_loadu_si512(b + 72);
        memcpy(&hd[r], b, 8);
    }
    kq_transpose16(v);
    kq_transpose16(w);
    const __m512i h0 = _mm512_load_si512(hd), h1 = _mm512_load_si512(hd + 8);
    x[0] = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), h1);
    x[1] = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), h1);
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x[0]));
}
VB_INLINE __m512i vb4_sub(const Vb3Const *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8]) {
    const __m512i *src = s < 4 ? v + 4 * s : w + 4 * (s - 4), m4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        q[m] = _mm512_shuffle_epi8(k->pos, _mm512_and_si512(src[m], m4));
        q[4 + m] = _mm512_shuffle_epi8(k->pos, _mm512_and_si512(_mm512_srli_epi16(src[m], 4), m4));
    }
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(x[1], 4 * s), _mm512_set1_epi32(15));
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(x[0], 16 + 2 * s), _mm512_set1_epi32(3));
    return _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
}

/* the 16 row pointers of rows o … o + nr − 1, the last repeated */
KQ_INLINE void vb_rows(const MmJob *j, int64_t o, int nr, const uint8_t *row[16]) {
    for (int r = 0; r < 16; r++) row[r] = mm_w_row(j, o + (r < nr ? r : nr - 1));
}

/* A format's tile decoder and decode GEMV (iq2xxs_vbmi_gemv's integers and float steps); DFAC: d's factor */
#define VB3_KERNELS(NAME, TABS, N, BYTES, LOAD, SUB, DFAC)                                                          \
    VB_TARGET static void NAME##_vbmi_tile(const MmJob *j, int64_t o, int nr, int64_t nsb, const KTile *tl) {       \
        Vb3Const k;                                                                                                 \
        vb3_const(&k, &TABS, N);                                                                                    \
        const uint8_t *row[16];                                                                                     \
        vb_rows(j, o, nr, row);                                                                                     \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                                      \
            __m512i v[16], w[16], x[2];                                                                             \
            __m512 d;                                                                                               \
            LOAD(row, sb, v, w, x, &d);                                                                                \
            uint8_t *q = kt_q(tl, sb);                                                                              \
            int32_t *sc = kt_sc(tl, sb);                                                                            \
            for (int s = 0; s < 8; s++) {                                                                           \
                __m512i qv[8];                                                                                      \
                const __m512i scv = SUB(&k, v, w, x, s, qv);                                                           \
                _mm512_store_si512(sc + 16 * (2 * s), scv);                                                         \
                _mm512_store_si512(sc + 16 * (2 * s + 1), scv);                                                     \
                for (int g = 0; g < 8; g++) _mm512_store_si512(q + 64 * (8 * s + g), qv[g]);                        \
            }                                                                                                       \
            int32_t *mp = kt_mp(tl, sb);                                                                            \
            for (int i = 0; i < 8; i++) _mm512_store_si512(mp + 16 * i, _mm512_setzero_si512());                   \
            _mm512_store_ps(kt_d(tl, sb), d);                                                                       \
            _mm512_store_ps(kt_dmin(tl, sb), _mm512_mul_ps(d, _mm512_set1_ps(DFAC)));                               \
        }                                                                                                           \
    }                                                                                                               \
    VB_TARGET static void NAME##_vbmi_gemv(const MmJob *j, int64_t o0, int64_t o1, int64_t t) {                     \
        Vb3Const k;                                                                                                 \
        vb3_const(&k, &TABS, N);                                                                                    \
        const int64_t nsb = j->K / QK_K;                                                                            \
        const KTok tk = kq_tok(j, t);                                                                               \
        for (int64_t o = o0; o < o1; o += 16) {                                                                     \
            const int nr = o1 - o < 16 ? (int)(o1 - o) : 16;                                                        \
            const uint8_t *row[16];                                                                                 \
            vb_rows(j, o, nr, row);                                                                                 \
            const uint8_t *next = mm_w_row(j, o) + 16 * j->w->row_bytes;                                            \
            __m512 acc = _mm512_setzero_ps();                                                                       \
            for (int64_t sb = 0; sb < nsb; sb++) {                                                                  \
                for (int l = 0; l < 16 * (BYTES); l += 64) _mm_prefetch((const char *)next + sb * 16 * (BYTES) + l, _MM_HINT_T0); \
                __m512i v[16], w[16], x[2];                                                                         \
                __m512 d;                                                                                           \
                LOAD(row, sb, v, w, x, &d);                                                                            \
                const int8_t *a = tk.qs + sb * QK_K;                                                                \
                const int32_t *cr = tk.corr16 + sb * 16;                                                            \
                __m512i S = _mm512_setzero_si512();                                                                 \
                for (int s = 0; s < 8; s++) {                                                                       \
                    __m512i qv[8];                                                                                  \
                    const __m512i scv = SUB(&k, v, w, x, s, qv);                                                       \
                    __m512i I = _mm512_set1_epi32(cr[2 * s] + cr[2 * s + 1]);                                       \
                    for (int g = 0; g < 8; g++) I = _mm512_dpbusd_epi32(I, qv[g], kq_bcast32(a + 32 * s + 4 * g));  \
                    S = _mm512_add_epi32(S, _mm512_mullo_epi32(I, scv));                                            \
                }                                                                                                   \
                const __m512 dw = _mm512_mul_ps(d, _mm512_set1_ps(DFAC));                                           \
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, _mm512_set1_ps(tk.d[sb])), acc);     \
            }                                                                                                       \
            float out[16];                                                                                          \
            _mm512_storeu_ps(out, acc);                                                                             \
            for (int r = 0; r < nr; r++) j->y[t * j->O + o + r] = out[r];                                           \
        }                                                                                                           \
    }                                                                                                               \
    static bool NAME##_ready(void) {                                                                                \
        if (!mm_vbmi()) return false;                                                                               \
        pthread_once(&vb3_once, vb3_init);                                                                          \
        return TABS.ok;                                                                                             \
    }                                                                                                               \
    static bool NAME##_tile_dec(const MmJob *j, int64_t o, int nr, int64_t nsb, const KTile *tl) {                  \
        if (!NAME##_ready()) return false;                                                                          \
        NAME##_vbmi_tile(j, o, nr, nsb, tl);                                                                        \
        return true;                                                                                                \
    }                                                                                                               \
    /* only called when NAME##_fast_rows_t() > 0, i.e. with VBMI */                                                 \
    static void NAME##_fast_rows(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, int span) {        \
        (void)span;                                                                                                 \
        for (int64_t t = t0; t < t1; t++) NAME##_vbmi_gemv(j, o0, o1, t);                                           \
    }                                                                                                               \
    /* with VBMI the GEMV for one token, the tiles from two; without, the plain kernels */                          \
    static int NAME##_fast_rows_t(void) { return NAME##_ready() ? 2 : 0; }

VB3_KERNELS(iq3xxs, vb3_xxs, 256, 98, vb3x_load, vb3x_sub, 0.25f)
VB3_KERNELS(iq3s, vb3_s, 512, 110, vb3s_load, vb3s_sub, 1.f)
VB3_KERNELS(iq4xs, vb4_xs, 0, 136, vb4_load, vb4_sub, 1.f)

KQ_FORMAT_GSR(iq2_xxs, K_IQ, 66, 128, dec_iq2_xxs, 0.125f, mm_span_iq, 32, iq2xxs_fast_rows_t(), iq2xxs_fast_rows, iq2xxs_tile_dec)
KQ_FORMAT(iq2_xs, K_IQ, 74, 128, dec_iq2_xs, 0.125f, mm_span_iq)
KQ_FORMAT(iq2_s, K_IQ, 82, 128, dec_iq2_s, 0.125f, mm_span_iq)
KQ_FORMAT_GSR(iq3_xxs, K_IQ, 98, 128, dec_iq3_xxs, 0.25f, mm_span_iq, 32, iq3xxs_fast_rows_t(), iq3xxs_fast_rows,
              iq3xxs_tile_dec)
KQ_FORMAT_GSR(iq3_s, K_IQ, 110, 128, dec_iq3_s, 1.f, mm_span_iq, 32, iq3s_fast_rows_t(), iq3s_fast_rows, iq3s_tile_dec)
KQ_FORMAT_GSR(iq4_xs, K_IQ, 136, 128, dec_iq4_xs, 1.f, mm_span_iq, 32, iq4xs_fast_rows_t(), iq4xs_fast_rows, iq4xs_tile_dec)
KQ_FORMAT(iq1_s, K_IQ1S, 50, 128, dec_iq1_s, 1.f, mm_span_iq)
KQ_FORMAT(iq1_m, K_IQ1M, 56, 128, dec_iq1_m, 1.f, mm_span_iq)
