/* matmul_iq_avx2.c — IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_XS, IQ1_S and IQ1_M × Q8_K at the AVX2 level:
 * decoders into the engine's K8Row (matmul_kq_avx2.h), signed values through the sign trick; the paths
 * and orders are those of matmul_iq_avx512.c. */
#include "kernels/cpu/matmul_kq_avx2.h"

#include "gguf/iq_tables.h"

K8_INLINE uint32_t ld32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ksigns_iq2xs of 4 packed 7-bit indices (bits 0, 7, 14, 21 of w): index | parity << 7, per byte */
K8_INLINE uint32_t ksigns4(uint32_t w) {
    const uint32_t x = _pdep_u32(w & 0x0fffffffu, 0x7f7f7f7fu);
    uint32_t t = x ^ (x >> 4);
    t ^= t >> 2;
    t ^= t >> 1;
    return x | (t & 0x01010101u) << 7;
}

/* 32 magnitudes g, negated where bit e of the 32 sign bits is set */
K8_INLINE void put_signed(int8_t *dst, __m256i g, uint32_t signs) {
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)signs),
                                              _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                                               3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
    _mm256_store_si256((__m256i *)dst, _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg));
}

K8_INLINE void sc_per32(K8Row *k, const uint8_t *sc8) { /* 8 scales per 32 → per 16 */
    for (int i = 0; i < 8; i++) k->sc[2 * i] = k->sc[2 * i + 1] = sc8[i];
}

K8_INLINE void dec8_iq2_xxs(const uint8_t *p, K8Row *k) {
    const BlockIQ2_XXS *b = (const BlockIQ2_XXS *)p;
    const uint8_t *qs = (const uint8_t *)b->qs;
    uint8_t sc[8];
    for (int sb = 0; sb < 8; sb++) {
        const uint8_t *q = qs + 8 * sb;
        const uint32_t w = ld32(q + 4);
        const __m256i g = _mm256_set_epi64x((long long)iq2xxs_grid[q[3]], (long long)iq2xxs_grid[q[2]],
                                            (long long)iq2xxs_grid[q[1]], (long long)iq2xxs_grid[q[0]]);
        put_signed(k->q + 32 * sb, g, ksigns4(w));
        sc[sb] = (uint8_t)(2 * (w >> 28) + 1);
    }
    sc_per32(k, sc);
    memset(k->m, 0, sizeof k->m);
    k->d = k8_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

K8_INLINE void dec8_iq2_xs(const uint8_t *p, K8Row *k) {
    const BlockIQ2_XS *b = (const BlockIQ2_XS *)p;
    for (int sb = 0; sb < 8; sb++) {
        const uint16_t *v = b->qs + 4 * sb;
        const __m256i g = _mm256_set_epi64x((long long)iq2xs_grid[v[3] & 511], (long long)iq2xs_grid[v[2] & 511],
                                            (long long)iq2xs_grid[v[1] & 511], (long long)iq2xs_grid[v[0] & 511]);
        const uint32_t si = (uint32_t)(v[0] >> 9) | (uint32_t)(v[1] >> 9) << 7 | (uint32_t)(v[2] >> 9) << 14 | (uint32_t)(v[3] >> 9) << 21;
        put_signed(k->q + 32 * sb, g, ksigns4(si));
        k->sc[2 * sb] = (int16_t)(2 * (b->scales[sb] & 15) + 1);
        k->sc[2 * sb + 1] = (int16_t)(2 * (b->scales[sb] >> 4) + 1);
    }
    memset(k->m, 0, sizeof k->m);
    k->d = k8_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

K8_INLINE void dec8_iq2_s(const uint8_t *p, K8Row *k) {
    const BlockIQ2_S *b = (const BlockIQ2_S *)p;
    const uint8_t *signs = b->qs + QK_K / 8;
    for (int sb = 0; sb < 8; sb++) {
        const unsigned qh = b->qh[sb];
        const uint8_t *q = b->qs + 4 * sb;
        const __m256i g = _mm256_set_epi64x((long long)iq2s_grid[q[3] | ((qh >> 6) & 3u) << 8], (long long)iq2s_grid[q[2] | ((qh >> 4) & 3u) << 8],
                                            (long long)iq2s_grid[q[1] | ((qh >> 2) & 3u) << 8], (long long)iq2s_grid[q[0] | (qh & 3u) << 8]);
        put_signed(k->q + 32 * sb, g, ld32(signs + 4 * sb));
        k->sc[2 * sb] = (int16_t)(2 * (b->scales[sb] & 15) + 1);
        k->sc[2 * sb + 1] = (int16_t)(2 * (b->scales[sb] >> 4) + 1);
    }
    memset(k->m, 0, sizeof k->m);
    k->d = k8_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

K8_INLINE void dec8_iq3_xxs(const uint8_t *p, K8Row *k) {
    const BlockIQ3_XXS *b = (const BlockIQ3_XXS *)p;
    uint8_t sc[8];
    for (int sb = 0; sb < 8; sb++) {
        const uint8_t *q = b->qs + 8 * sb;
        const uint32_t w = ld32(b->qs + QK_K / 4 + 4 * sb);
        const __m256i g = _mm256_setr_epi32((int)iq3xxs_grid[q[0]], (int)iq3xxs_grid[q[1]], (int)iq3xxs_grid[q[2]], (int)iq3xxs_grid[q[3]],
                                            (int)iq3xxs_grid[q[4]], (int)iq3xxs_grid[q[5]], (int)iq3xxs_grid[q[6]], (int)iq3xxs_grid[q[7]]);
        put_signed(k->q + 32 * sb, g, ksigns4(w));
        sc[sb] = (uint8_t)(2 * (w >> 28) + 1);
    }
    sc_per32(k, sc);
    memset(k->m, 0, sizeof k->m);
    k->d = k8_f16(&b->d);
    k->dmin = k->d * 0.25f;
}

K8_INLINE void dec8_iq3_s(const uint8_t *p, K8Row *k) {
    const BlockIQ3_S *b = (const BlockIQ3_S *)p;
    uint8_t sc[8];
    for (int sb = 0; sb < 8; sb++) {
        const uint8_t *q = b->qs + 8 * sb;
        const unsigned qh = b->qh[sb];
        int ix[8];
        for (int m = 0; m < 8; m++) ix[m] = (int)(q[m] | ((qh >> m) & 1u) << 8);
        const __m256i g = _mm256_setr_epi32((int)iq3s_grid[ix[0]], (int)iq3s_grid[ix[1]], (int)iq3s_grid[ix[2]], (int)iq3s_grid[ix[3]],
                                            (int)iq3s_grid[ix[4]], (int)iq3s_grid[ix[5]], (int)iq3s_grid[ix[6]], (int)iq3s_grid[ix[7]]);
        put_signed(k->q + 32 * sb, g, ld32(b->signs + 4 * sb));
        sc[sb] = (uint8_t)(1 + 2 * ((b->scales[sb / 2] >> (4 * (sb % 2))) & 15));
    }
    sc_per32(k, sc);
    memset(k->m, 0, sizeof k->m);
    k->d = k->dmin = k8_f16(&b->d);
}

K8_INLINE void dec8_iq4_xs(const uint8_t *p, K8Row *k) {
    const BlockIQ4_XS *b = (const BlockIQ4_XS *)p;
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kvalues_iq4nl));
    for (int sb = 0; sb < 8; sb++) {
        const __m128i v = _mm_loadu_si128((const __m128i *)(b->qs + 16 * sb));
        const __m256i n = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
        _mm256_store_si256((__m256i *)(k->q + 32 * sb), _mm256_shuffle_epi8(tab, n));
        const int ls = (((b->scales_l[sb / 2] >> (4 * (sb % 2))) & 15) | ((b->scales_h >> (2 * sb)) & 3) << 4) - 32;
        k->sc[2 * sb] = k->sc[2 * sb + 1] = (int16_t)ls;
    }
    memset(k->m, 0, sizeof k->m);
    k->d = k->dmin = k8_f16(&b->d);
}

/* IQ1_S / IQ1_M (layouts in matmul_iq_avx512.c): values in {-1, 0, 1} from iq1s_grid, offset signs in qd */
K8_INLINE void dec8_iq1_s(const uint8_t *p, K8Row *k) {
    const BlockIQ1_S *b = (const BlockIQ1_S *)p;
    for (int sb = 0; sb < 8; sb++) {
        const unsigned qh = b->qh[sb];
        const uint8_t *q = b->qs + 4 * sb;
        _mm256_store_si256((__m256i *)(k->q + 32 * sb),
                           _mm256_set_epi64x((long long)iq1s_grid[q[3] | ((qh >> 9) & 7u) << 8], (long long)iq1s_grid[q[2] | ((qh >> 6) & 7u) << 8],
                                             (long long)iq1s_grid[q[1] | ((qh >> 3) & 7u) << 8], (long long)iq1s_grid[q[0] | (qh & 7u) << 8]));
        _mm256_store_si256((__m256i *)(k->qd + 32 * sb), _mm256_set1_epi8((char)(1 - 2 * (int)(qh >> 15))));
        k->sc[2 * sb] = k->sc[2 * sb + 1] = (int16_t)(2 * ((qh >> 12) & 7) + 1);
    }
    memset(k->m, 0, sizeof k->m);
    k->d = k8_f16(&b->d);
    k->dmin = k->d * 0.125f;
}

K8_INLINE void dec8_iq1_m(const uint8_t *p, K8Row *k) {
    const BlockIQ1_M *b = (const BlockIQ1_M *)p;
    uint16_t scw[4];
    memcpy(scw, b->scales, 8);
    for (int sb = 0; sb < 8; sb++) {
        long long g[4];
        int8_t dl[4];
        for (int l = 0; l < 4; l++) {
            const unsigned nib = (b->qh[2 * sb + l / 2] >> (4 * (l % 2))) & 15u;
            g[l] = (long long)iq1s_grid[b->qs[4 * sb + l] | (nib & 7u) << 8];
            dl[l] = (int8_t)(1 - 2 * (int)(nib >> 3));
        }
        _mm256_store_si256((__m256i *)(k->q + 32 * sb), _mm256_set_epi64x(g[3], g[2], g[1], g[0]));
#define ONES8(v) ((long long)(0x0101010101010101ull * (uint8_t)(v))) /* eight bytes of v (±1): 0xff… or 0x01… */
        _mm256_store_si256((__m256i *)(k->qd + 32 * sb), _mm256_set_epi64x(ONES8(dl[3]), ONES8(dl[2]), ONES8(dl[1]), ONES8(dl[0])));
#undef ONES8
        for (int hh = 0; hh < 2; hh++) k->sc[2 * sb + hh] = (int16_t)(2 * ((scw[sb / 2] >> (6 * (sb % 2) + 3 * hh)) & 7) + 1);
    }
    memset(k->m, 0, sizeof k->m);
    const uint16_t dh = (uint16_t)((scw[0] >> 12) | ((scw[1] >> 8) & 0x00f0) | ((scw[2] >> 4) & 0x0f00) | (scw[3] & 0xf000));
    k->d = k8_f16(&dh);
    k->dmin = k->d * 0.125f;
}


K8_FORMAT(iq2_xxs, K8_IQ, 66, true, dec8_iq2_xxs, 0.125f, mm_span_iq)
K8_FORMAT(iq2_xs, K8_IQ, 74, true, dec8_iq2_xs, 0.125f, mm_span_iq)
K8_FORMAT(iq2_s, K8_IQ, 82, true, dec8_iq2_s, 0.125f, mm_span_iq)
K8_FORMAT(iq3_xxs, K8_IQ, 98, true, dec8_iq3_xxs, 0.25f, mm_span_iq)
K8_FORMAT(iq3_s, K8_IQ, 110, true, dec8_iq3_s, 1.f, mm_span_iq)
K8_FORMAT(iq4_xs, K8_IQ, 136, true, dec8_iq4_xs, 1.f, mm_span_iq)
K8_FORMAT(iq1_s, K8_IQ1S, 50, true, dec8_iq1_s, 1.f, mm_span_iq)
K8_FORMAT(iq1_m, K8_IQ1M, 56, true, dec8_iq1_m, 1.f, mm_span_iq)
