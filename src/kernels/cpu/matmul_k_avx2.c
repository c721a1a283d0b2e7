/* matmul_k_avx2.c — Q2_K … Q6_K × Q8_K at the AVX2 level: decoders into the engine's K8Row
 * (matmul_kq_avx2.h); the paths and orders are those of matmul_k_avx512.c. Q3_K goes through the sign
 * trick as signed values in [-4, 3]; the others as their unsigned codes. */
#include "kernels/cpu/matmul_kq_avx2.h"

/* 8 bytes of 8 scales (per 32) → 16 int16 per 16 (each repeated) */
K8_INLINE void k8_dup_scales(uint64_t s8, int16_t *dst) {
    const __m128i b = _mm_cvtsi64_si128((long long)s8);
    _mm256_store_si256((__m256i *)dst, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b)));
}

/* Q4_K / Q5_K scales and mins (see k4_scales in matmul_k_avx512.c) */
K8_INLINE void k8_k4_scales(const uint8_t *s, K8Row *k) {
    uint32_t u[3];
    memcpy(u, s, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    const uint64_t sc = (uint64_t)(u[0] & k1) | (uint64_t)((u[2] & k2) | (((u[0] >> 6) & k3) << 4)) << 32;
    const uint64_t mn = (uint64_t)(u[1] & k1) | (uint64_t)(((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4)) << 32;
    k8_dup_scales(sc, k->sc);
    k8_dup_scales(mn, k->m);
}

K8_INLINE void dec8_q4_K(const uint8_t *p, K8Row *k) {
    const BlockQ4_K *b = (const BlockQ4_K *)p;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int jj = 0; jj < 4; jj++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * jj));
        _mm256_store_si256((__m256i *)(k->q + 64 * jj), _mm256_and_si256(v, m4));
        _mm256_store_si256((__m256i *)(k->q + 64 * jj + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
    }
    k8_k4_scales(b->scales, k);
    k->d = k8_f16(&b->d);
    k->dmin = k8_f16(&b->dmin);
}

K8_INLINE void dec8_q5_K(const uint8_t *p, K8Row *k) {
    const BlockQ5_K *b = (const BlockQ5_K *)p;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    for (int jj = 0; jj < 4; jj++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * jj));
        const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * jj), one);
        const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * jj + 1), one);
        _mm256_store_si256((__m256i *)(k->q + 64 * jj), _mm256_or_si256(_mm256_and_si256(v, m4), _mm256_slli_epi16(h0, 4)));
        _mm256_store_si256((__m256i *)(k->q + 64 * jj + 32),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), _mm256_slli_epi16(h1, 4)));
    }
    k8_k4_scales(b->scales, k);
    k->d = k8_f16(&b->d);
    k->dmin = k8_f16(&b->dmin);
}

K8_INLINE void dec8_q6_K(const uint8_t *p, K8Row *k) {
    const BlockQ6_K *b = (const BlockQ6_K *)p;
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        int8_t *q = k->q + 128 * h;
        _mm256_store_si256((__m256i *)q, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)));
        _mm256_store_si256((__m256i *)(q + 32), _mm256_or_si256(_mm256_and_si256(l1, m4),
                                                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4)));
        _mm256_store_si256((__m256i *)(q + 64), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4)));
        _mm256_store_si256((__m256i *)(q + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4)));
    }
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    _mm256_store_si256((__m256i *)k->sc, sc);
    _mm256_store_si256((__m256i *)k->m, sc);
    k->d = k8_f16(&b->d);
    k->dmin = 0;
}

K8_INLINE void dec8_q3_K(const uint8_t *p, K8Row *k) {
    const BlockQ3_K *b = (const BlockQ3_K *)p;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), four = _mm256_set1_epi8(4);
    const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
    for (int h = 0; h < 2; h++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int s = 0; s < 4; s++) {
            const __m256i low = _mm256_and_si256(_mm256_srli_epi16(v, 2 * s), m3);
            const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + s), one);
            /* low - 4 unless the bit: low - 4 + 4·bit */
            _mm256_store_si256((__m256i *)(k->q + 128 * h + 32 * s), _mm256_sub_epi8(_mm256_add_epi8(low, _mm256_slli_epi16(bit, 2)), four));
        }
    }
    uint32_t u[3];
    memcpy(u, b->scales, 12);
    const uint32_t k2 = 0x0f0f0f0f, k3 = 0x03030303;
    const uint32_t s0 = (u[0] & k2) | ((u[2] & k3) << 4);
    const uint32_t s1 = (u[1] & k2) | (((u[2] >> 2) & k3) << 4);
    const uint32_t s2 = ((u[0] >> 4) & k2) | (((u[2] >> 4) & k3) << 4);
    const uint32_t s3 = ((u[1] >> 4) & k2) | (((u[2] >> 6) & k3) << 4);
    const __m128i sc8 = _mm_sub_epi8(_mm_setr_epi32((int)s0, (int)s1, (int)s2, (int)s3), _mm_set1_epi8(32));
    _mm256_store_si256((__m256i *)k->sc, _mm256_cvtepi8_epi16(sc8));
    _mm256_store_si256((__m256i *)k->m, _mm256_setzero_si256());
    k->d = k8_f16(&b->d);
    k->dmin = 0;
}

K8_INLINE void dec8_q2_K(const uint8_t *p, K8Row *k) {
    const BlockQ2_K *b = (const BlockQ2_K *)p;
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int s = 0; s < 4; s++)
            _mm256_store_si256((__m256i *)(k->q + 128 * h + 32 * s), _mm256_and_si256(_mm256_srli_epi16(v, 2 * s), m3));
    }
    const __m128i sc = _mm_loadu_si128((const __m128i *)b->scales);
    _mm256_store_si256((__m256i *)k->sc, _mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(15))));
    _mm256_store_si256((__m256i *)k->m, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15))));
    k->d = k8_f16(&b->d);
    k->dmin = k8_f16(&b->dmin);
}


K8_FORMAT(q2_K, K8_Q2, 84, false, dec8_q2_K, 1.f, mm_span_q2)
K8_FORMAT(q3_K, K8_Q3, 110, true, dec8_q3_K, 1.f, mm_span_none)
K8_FORMAT(q4_K, K8_Q4, 144, false, dec8_q4_K, 1.f, mm_span_q4)
K8_FORMAT(q5_K, K8_Q5, 176, false, dec8_q5_K, 1.f, mm_span_none)
K8_FORMAT(q6_K, K8_Q6, 210, false, dec8_q6_K, 1.f, mm_span_none)
