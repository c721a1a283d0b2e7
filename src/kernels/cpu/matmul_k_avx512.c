/* matmul_k_avx512.c — Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights × Q8_K activations, AVX-512 VNNI: the
 * decoders into the engine's KRow (matmul_kq_avx512.h) and the paths each format serves (the orders of
 * gguf/quant_order_k.c):
 *   Q2_K, Q4_K   LANES8 (vec_dot) when rows % 8 ≠ 0; the repacked SPAN orders otherwise (256-element
 *                spans for one activation row / mul_mat_id, 128 (Q2_K) or 64 (Q4_K) in the 4-row gemm)
 *   Q3_K, Q5_K, Q6_K   LANES8 on every path
 * Values fed to vpdpbusd: Q2/Q4/Q5/Q6 as their unsigned codes (Q6_K's -32 goes through the bsums in its
 * order), Q3_K as q + 4 ∈ [0, 7] with the activation correction -4·Σa. */
#include "kernels/cpu/matmul_kq_avx512.h"

/* ---- scale unpacking ---------------------------------------------------------------------------------- */

/* Q4_K / Q5_K: the 8 (6-bit scale, 6-bit min) pairs of 12 bytes (quant_k4_scale_min), as
 * sc[0..7] | m[0..7] bytes: j < 4 from the low 6 bits of bytes j, j+4; j ≥ 4 from the nibbles of bytes
 * 8-11 and the top 2 bits of bytes j-4 (scale) and j (min). */
KQ_INLINE __m128i k4_scales(const uint8_t *s) {
    /* in SIMD: lanes [u0, u0, u1, u1] and [u2, u2, u2, u2 >> 4] give, with per-lane masks,
     * [u0 & k1, (u2 & k2) | ((u0 >> 6) & k3) << 4, u1 & k1, ((u2 >> 4) & k2) | ((u1 >> 6) & k3) << 4].
     * Reads 16 bytes from s (the 12 scale bytes and 4 of the quants that follow). */
    const __m128i u = _mm_loadu_si128((const __m128i *)s);
    const __m128i b = _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0));
    const __m128i c = _mm_srlv_epi32(_mm_shuffle_epi32(u, _MM_SHUFFLE(2, 2, 2, 2)), _mm_setr_epi32(0, 0, 0, 4));
    const __m128i k1 = _mm_setr_epi32(0x3f3f3f3f, 0, 0x3f3f3f3f, 0), k2 = _mm_setr_epi32(0, 0x0f0f0f0f, 0, 0x0f0f0f0f);
    const __m128i k3 = _mm_setr_epi32(0, 0x03030303, 0, 0x03030303);
    return _mm_or_si128(_mm_or_si128(_mm_and_si128(b, k1), _mm_and_si128(c, k2)),
                        _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(b, 6), k3), 4));
}

/* sc (8 bytes, per 32) and m (8 bytes, per 32) → the KRow's per-16 arrays */
KQ_INLINE void k4_put_scales(__m128i scm, KRow *k) {
    const __m128i dup = _mm_unpacklo_epi8(scm, scm); /* sc[0] sc[0] sc[1] sc[1] … */
    _mm_store_si128((__m128i *)k->sc, dup);
    const __m128i mdup = _mm_unpackhi_epi8(scm, scm);
    _mm256_store_si256((__m256i *)k->m, _mm256_cvtepu8_epi16(mdup));
}

/* ---- decoders ----------------------------------------------------------------------------------------
 * Each writes whole 64-byte vectors (a 64-byte load of two 32-byte stores would miss store forwarding).
 * kq_halves(v32, lo_shift, hi_shift): the 32 bytes at v32 in both halves of a ZMM, the low half shifted
 * right by lo_shift bits and the high half by hi_shift (per 16-bit lane; callers mask per byte). */
KQ_INLINE __m512i kq_halves(const void *v32, int lo_shift, int hi_shift) {
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)v32));
    const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)lo_shift), _mm256_set1_epi16((short)hi_shift), 1);
    return _mm512_srlv_epi16(v, sh);
}

/* Q4_K: element 64j + l (l < 32) is the low nibble of qs[32j + l], 64j + 32 + l the high one */
KQ_INLINE void dec_q4_K(const uint8_t *p, KRow *k) {
    const BlockQ4_K *b = (const BlockQ4_K *)p;
    const __m512i m4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int jj = 0; jj < 4; jj++) _mm512_store_si512(k->q + 64 * jj, _mm512_and_si512(kq_halves(b->qs + 32 * jj, 0, 4), m4));
    k4_put_scales(k4_scales(b->scales), k);
    k->d = kq_f16(&b->d);
    k->dmin = kq_f16(&b->dmin);
}

/* Q5_K: as Q4_K, plus bit (2j) of qh[l] for element 64j + l and bit (2j+1) for 64j + 32 + l */
KQ_INLINE void dec_q5_K(const uint8_t *p, KRow *k) {
    const BlockQ5_K *b = (const BlockQ5_K *)p;
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
#pragma GCC unroll 4
    for (int jj = 0; jj < 4; jj++) {
        const __m512i lo = _mm512_and_si512(kq_halves(b->qs + 32 * jj, 0, 4), m4);
        /* the qh bit moved to bit 4: shift right by 2j - 4 (low half) / 2j + 1 - 4 (high half) */
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qh));
        const int s0 = 2 * jj - 4, s1 = 2 * jj + 1 - 4;
        const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(s0 < 0 ? -s0 : s0)), _mm256_set1_epi16((short)(s1 < 0 ? -s1 : s1)), 1);
        __m512i hb;
        if (s0 < 0 && s1 < 0)
            hb = _mm512_sllv_epi16(qh, sh);
        else if (s0 >= 0 && s1 >= 0)
            hb = _mm512_srlv_epi16(qh, sh);
        else /* jj = 2: s0 = 0, s1 = 1 */
            hb = _mm512_srlv_epi16(qh, sh);
        _mm512_store_si512(k->q + 64 * jj, _mm512_or_si512(lo, _mm512_and_si512(hb, b4)));
    }
    k4_put_scales(k4_scales(b->scales), k);
    k->d = kq_f16(&b->d);
    k->dmin = kq_f16(&b->dmin);
}

/* Q6_K: element 128h + 32r + l: low nibble (r>>1) of ql[64h + l + 32(r&1)], bits 2r of qh[32h + l] on
 * top: q ∈ [0, 63]; scales int8 per 16 (m = the same, for the -32 term) */
KQ_INLINE void dec_q6_K(const uint8_t *p, KRow *k) {
    const BlockQ6_K *b = (const BlockQ6_K *)p;
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i l01 = _mm512_loadu_si512(b->ql + 64 * h); /* r = 0 | r = 1 low nibbles; r = 2 | 3 high */
        /* bits 2r of qh to bits 4-5: r = 0: << 4, r = 1: << 2, r = 2: as is, r = 3: >> 2 */
        const __m512i hq = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
        const __m512i h01 = _mm512_sllv_epi16(hq, _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1));
        const __m512i h23 = _mm512_srlv_epi16(hq, _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1));
        _mm512_store_si512(k->q + 128 * h, _mm512_or_si512(_mm512_and_si512(l01, m4), _mm512_and_si512(h01, m30)));
        _mm512_store_si512(k->q + 128 * h + 64,
                           _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l01, 4), m4), _mm512_and_si512(h23, m30)));
    }
    const __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
    _mm_store_si128((__m128i *)k->sc, sc);
    _mm256_store_si256((__m256i *)k->m, _mm256_cvtepi8_epi16(sc));
    k->d = kq_f16(&b->d);
    k->dmin = 0;
}

/* Q3_K: element 128h + 32s + l: (qs[32h + l] >> 2s) & 3, minus 4 unless bit (4h + s) of hmask[l]; as
 * q + 4 = low | bit << 2. Scales: 16 six-bit values (low nibbles in bytes 0-7, high bit pairs in 8-11)
 * minus 32 (quant_q3k_scale). */
KQ_INLINE void dec_q3_K(const uint8_t *p, KRow *k) {
    const BlockQ3_K *b = (const BlockQ3_K *)p;
    const __m512i m3 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
        for (int s2 = 0; s2 < 2; s2++) { /* s = 2·s2, 2·s2 + 1 */
            const int s = 2 * s2;
            const __m512i low = _mm512_and_si512(kq_halves(b->qs + 32 * h, 2 * s, 2 * s + 2), m3);
            /* bit (4h + s) of hmask to bit 2 */
            const int e0 = 4 * h + s - 2, e1 = 4 * h + s + 1 - 2;
            __m512i hb;
            const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->hmask));
            if (e0 < 0) /* h = 0, s = 0: << 2 and << 1 */
                hb = _mm512_sllv_epi16(hm, _mm512_inserti64x4(_mm512_set1_epi16((short)-e0), _mm256_set1_epi16((short)-e1), 1));
            else
                hb = _mm512_srlv_epi16(hm, _mm512_inserti64x4(_mm512_set1_epi16((short)e0), _mm256_set1_epi16((short)e1), 1));
            _mm512_store_si512(k->q + 128 * h + 64 * s2, _mm512_or_si512(low, _mm512_and_si512(hb, b2)));
        }
    uint32_t u[3];
    memcpy(u, b->scales, 12);
    const uint32_t k2 = 0x0f0f0f0f, k3 = 0x03030303;
    const uint32_t s0 = (u[0] & k2) | ((u[2] & k3) << 4);
    const uint32_t s1 = (u[1] & k2) | (((u[2] >> 2) & k3) << 4);
    const uint32_t s2 = ((u[0] >> 4) & k2) | (((u[2] >> 4) & k3) << 4);
    const uint32_t s3 = ((u[1] >> 4) & k2) | (((u[2] >> 6) & k3) << 4);
    _mm_store_si128((__m128i *)k->sc, _mm_sub_epi8(_mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3), _mm_set1_epi8(32)));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = kq_f16(&b->d);
    k->dmin = 0;
}

/* Q2_K: element 128h + 32s + l: (qs[32h + l] >> 2s) & 3; per 16: scale = low nibble, min = high nibble */
KQ_INLINE void dec_q2_K(const uint8_t *p, KRow *k) {
    const BlockQ2_K *b = (const BlockQ2_K *)p;
    const __m512i m3 = _mm512_set1_epi8(3);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
        for (int s2 = 0; s2 < 2; s2++)
            _mm512_store_si512(k->q + 128 * h + 64 * s2, _mm512_and_si512(kq_halves(b->qs + 32 * h, 4 * s2, 4 * s2 + 2), m3));
    const __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
    _mm_store_si128((__m128i *)k->sc, _mm_and_si128(sc, _mm_set1_epi8(15)));
    _mm256_store_si256((__m256i *)k->m, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15))));
    k->d = kq_f16(&b->d);
    k->dmin = kq_f16(&b->dmin);
}

/* ---- paths -------------------------------------------------------------------------------------------- */


KQ_FORMAT(q2_K, K_Q2, 84, 0, dec_q2_K, 1.f, mm_span_q2)
KQ_FORMAT(q3_K, K_Q3, 110, 4, dec_q3_K, 1.f, mm_span_none)
KQ_FORMAT_GS(q4_K, K_Q4, 144, 0, dec_q4_K, 1.f, mm_span_q4, 32)
KQ_FORMAT_GS(q5_K, K_Q5, 176, 0, dec_q5_K, 1.f, mm_span_none, 32)
KQ_FORMAT(q6_K, K_Q6, 210, 0, dec_q6_K, 1.f, mm_span_none)
