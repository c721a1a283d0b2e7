/* kv_simd.h — the KV cache as the attention kernels read it: a position in a cache of one element format
 * (F32; F16 widened exactly; Q8_0 and Q4_0 dequantized on read) and loads of 16 (V16), VN_W (VN) or one
 * element(s) from it as F32. Included only by attention_simd.h (so compiled once per ISA file).
 *
 * A dequantized element is the bits of ggml's to_float (gguf/quant_legacy.c): the integer level converted
 * exactly and multiplied once by the block's F16 scale widened exactly, so a kernel that reads a quantized
 * cache computes what it computes on an F32 cache holding the dequantized values. The blocks, 32 elements of
 * a token's row (every head's row of d values starts a block: d is a multiple of 32):
 *
 *   Q8_0 (34 B):  | d:f16 | q:i8[32] |          element j = q[j]·d
 *   Q4_0 (18 B):  | d:f16 | qs:u8[16] |         element j < 16 = ((qs[j] & 15) − 8)·d, j ≥ 16 = ((qs[j−16] >> 4) − 8)·d
 *
 * A 16-element load starts at a multiple of 16, so it lies in one block (Q4_0: all low or all high nibbles of
 * the 16 bytes); an 8-element one (VN under AVX2) at a multiple of 8. The type is a FormatId; the kernels pass
 * it as a constant into these always-inline loads, which then compile to one path per type. */
#ifndef DL_KERNELS_CPU_KV_SIMD_H
#define DL_KERNELS_CPU_KV_SIMD_H

#include "gguf/format.h"
#include "kernels/cpu/simd16.h"

#include <string.h>

/* element `i` of the cache at `base` (whose element 0 starts a block) */
typedef struct KvPtr {
    const uint8_t *base;
    int64_t i;
    uint32_t type;
} KvPtr;

SIMD_INLINE KvPtr kv_ptr(const void *base, uint32_t type) {
    KvPtr p = {(const uint8_t *)base, 0, type};
    return p;
}
SIMD_INLINE KvPtr kv_at(KvPtr p, int64_t n) {
    p.i += n;
    return p;
}

/* the block holding element e of a Q8_0 / Q4_0 cache, and its scale */
SIMD_INLINE const uint8_t *kvq_block(const uint8_t *base, int64_t e, int bytes) { return base + (e >> 5) * bytes; }
SIMD_INLINE float kvq_scale(const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return _cvtsh_ss(h);
}

/* the address of element e (for prefetches) */
SIMD_INLINE const void *kv_addr(KvPtr p, int64_t j, const uint32_t type) {
    const int64_t e = p.i + j;
    switch (type) {
    case FMT_F16: return p.base + 2 * e;
    case FMT_Q8_0: return kvq_block(p.base, e, 34) + 2 + (e & 31);
    case FMT_Q4_0: return kvq_block(p.base, e, 18) + 2 + (e & 15);
    default: return p.base + 4 * e;
    }
}

/* 8 levels as floats: Q8_0's int8 at q; Q4_0's low (hi = 0) or high nibbles of the 8 bytes at qs, less 8 */
SIMD_INLINE __m256 v8_q8(const uint8_t *q, float d) {
    const __m256i x = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)q));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(x), _mm256_set1_ps(d));
}
SIMD_INLINE __m256 v8_q4(const uint8_t *qs, int hi, float d) {
    __m128i b = _mm_loadl_epi64((const __m128i *)qs);
    if (hi) b = _mm_srli_epi16(b, 4);
    const __m256i x = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(15))), _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(x), _mm256_set1_ps(d));
}

#if defined(__AVX512F__)
SIMD_INLINE V16 v16_q8(const uint8_t *q, float d) {
    const __m512i x = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)q));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_set1_ps(d));
}
SIMD_INLINE V16 v16_q4(const uint8_t *qs, int hi, float d) {
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    if (hi) b = _mm_srli_epi16(b, 4);
    const __m512i x = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(b, _mm_set1_epi8(15))), _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(x), _mm512_set1_ps(d));
}
#else
SIMD_INLINE V16 v16_q8(const uint8_t *q, float d) { return v16_mk(v8_q8(q, d), v8_q8(q + 8, d)); }
SIMD_INLINE V16 v16_q4(const uint8_t *qs, int hi, float d) { return v16_mk(v8_q4(qs, hi, d), v8_q4(qs + 8, hi, d)); }
#endif

/* elements e … e + 15 (e = p.i + j, a multiple of 16) */
SIMD_INLINE V16 kv_v16(KvPtr p, int64_t j, const uint32_t type) {
    const int64_t e = p.i + j;
    switch (type) {
    case FMT_F16: return v16_load_h((const uint16_t *)p.base + e);
    case FMT_Q8_0: {
        const uint8_t *b = kvq_block(p.base, e, 34);
        return v16_q8(b + 2 + (e & 16), kvq_scale(b));
    }
    case FMT_Q4_0: {
        const uint8_t *b = kvq_block(p.base, e, 18);
        return v16_q4(b + 2, (int)(e & 16), kvq_scale(b));
    }
    default: return v16_load((const float *)p.base + e);
    }
}

/* elements e … e + VN_W − 1 (e = p.i + j, a multiple of VN_W) */
SIMD_INLINE VN kv_vn(KvPtr p, int64_t j, const uint32_t type) {
#if VN_W == 16
    return kv_v16(p, j, type);
#else
    const int64_t e = p.i + j;
    switch (type) {
    case FMT_F16: return vn_load_h((const uint16_t *)p.base + e);
    case FMT_Q8_0: {
        const uint8_t *b = kvq_block(p.base, e, 34);
        return v8_q8(b + 2 + (e & 31), kvq_scale(b));
    }
    case FMT_Q4_0: {
        const uint8_t *b = kvq_block(p.base, e, 18);
        return v8_q4(b + 2 + (e & 8), (int)(e & 16), kvq_scale(b));
    }
    default: return vn_load((const float *)p.base + e);
    }
#endif
}

/* element e = p.i + j */
SIMD_INLINE float kv_one(KvPtr p, int64_t j, const uint32_t type) {
    const int64_t e = p.i + j;
    switch (type) {
    case FMT_F16: return _cvtsh_ss(((const uint16_t *)p.base)[e]);
    case FMT_Q8_0: {
        const uint8_t *b = kvq_block(p.base, e, 34);
        return (float)(int8_t)b[2 + (e & 31)] * kvq_scale(b);
    }
    case FMT_Q4_0: {
        const uint8_t *b = kvq_block(p.base, e, 18);
        const int q = e & 16 ? b[2 + (e & 15)] >> 4 : b[2 + (e & 15)] & 15;
        return (float)(q - 8) * kvq_scale(b);
    }
    default: return ((const float *)p.base)[e];
    }
}

/* bytes of n elements (n a multiple of 32 for the block types) */
SIMD_INLINE int64_t kv_bytes(int64_t n, const uint32_t type) {
    switch (type) {
    case FMT_F16: return 2 * n;
    case FMT_Q8_0: return n / 32 * 34;
    case FMT_Q4_0: return n / 32 * 18;
    default: return 4 * n;
    }
}

#endif
