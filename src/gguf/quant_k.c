/* quant_k.c — the K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K: dequantization (bit-identical to ggml's
 * to_float) and reference dot products with a Q8_K activation row.
 *
 * A super-block is 256 elements with an fp16 scale d (and dmin for the formats with minimums) and small
 * integer sub-block scales. Dequantization follows ggml's float order exactly: the sub-block factor
 * d·sc (and dmin·m) is formed first, then multiplied by the quant, then the min product subtracted.
 * The dot products sum integer products per sub-block, weight them by the integer sub-block scales, and
 * apply the float scales once per super-block; minimums go through the Q8_K bsums, as ggml does.
 * The weight quantizers are in quant_k_write.c. */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/quant_blocks.h"

/* ---- Q2_K ----------------------------------------------------------------------------------------
 * | scales[16] | qs[64] | d:f16 | dmin:f16 |                                                     84 B
 * scales[k]: low nibble sc, high nibble m, for elements 16k..16k+15.
 * Element e = 128h + 32s + l (half h, shift s ∈ [0,4), l ∈ [0,32)) is bits 2s..2s+1 of qs[32h + l];
 * its scale index is k = 8h + 2s + l/16:   y = (d·sc)·q - (dmin·m) */
void dequant_q2_K(const void *src, float *dst, int64_t n) {
    const BlockQ2_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        for (int e = 0; e < QK_K; e += 16) {
            const int h = e / 128, s = (e / 32) % 4, l0 = e % 32, k = e / 16;
            const float dl = d * (float)(x[i].scales[k] & 15), ml = dmin * (float)(x[i].scales[k] >> 4);
            for (int l = l0; l < l0 + 16; l++)
                *dst++ = dl * (float)((x[i].qs[32 * h + l] >> (2 * s)) & 3) - ml;
        }
    }
}

float vec_dot_q2_K(int64_t n, const void *w, const void *act) {
    const BlockQ2_K *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int mins = 0, isum = 0;
        for (int k = 0; k < QK_K / 16; k++) mins += y[i].bsums[k] * (x[i].scales[k] >> 4);
        for (int e = 0; e < QK_K; e += 16) {
            const int h = e / 128, s = (e / 32) % 4, l0 = e % 32, k = e / 16;
            int si = 0;
            for (int l = 0; l < 16; l++) si += y[i].qs[e + l] * ((x[i].qs[32 * h + l0 + l] >> (2 * s)) & 3);
            isum += (x[i].scales[k] & 15) * si;
        }
        const float dall = y[i].d * fp16_to_fp32(x[i].d), dmin = y[i].d * fp16_to_fp32(x[i].dmin);
        sum += dall * (float)isum - dmin * (float)mins;
    }
    return sum;
}

/* ---- Q3_K ----------------------------------------------------------------------------------------
 * | hmask[32] | qs[64] | scales[12] | d:f16 |                                                   110 B
 * Element e = 128h + 32s + l: low bits 2s..2s+1 of qs[32h + l], high bit (4h + s) of hmask[l] (hmask is
 * shared by both halves); q = low - (high ? 0 : 4) ∈ [-4, 3]. Sixteen 6-bit scales (quant_q3k_scale),
 * index k = 8h + 2s + l/16:   y = (d·(sc-32))·q */
static inline int q3k_value(const BlockQ3_K *b, int e) {
    const int h = e / 128, s = (e / 32) % 4, l = e % 32;
    const int low = (b->qs[32 * h + l] >> (2 * s)) & 3;
    return low - ((b->hmask[l] >> (4 * h + s)) & 1 ? 0 : 4);
}

void dequant_q3_K(const void *src, float *dst, int64_t n) {
    const BlockQ3_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int k = 0; k < QK_K / 16; k++) {
            const float dl = d * (float)quant_q3k_scale(k, x[i].scales);
            for (int e = 16 * k; e < 16 * k + 16; e++) *dst++ = dl * (float)q3k_value(&x[i], e);
        }
    }
}

float vec_dot_q3_K(int64_t n, const void *w, const void *act) {
    const BlockQ3_K *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int k = 0; k < QK_K / 16; k++) {
            int si = 0;
            for (int e = 16 * k; e < 16 * k + 16; e++) si += y[i].qs[e] * q3k_value(&x[i], e);
            isum += quant_q3k_scale(k, x[i].scales) * si;
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)isum;
    }
    return sum;
}

/* ---- Q4_K ----------------------------------------------------------------------------------------
 * | d:f16 | dmin:f16 | scales[12] | qs[128] |                                                   144 B
 * Eight sub-blocks of 32 with 6-bit (sc, m) pairs (quant_k4_scale_min). Chunk c ∈ [0,4) holds sub-blocks
 * 2c (low nibbles of qs[32c..32c+31]) and 2c+1 (high nibbles):   y = (d·sc)·q - (dmin·m) */
void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const BlockQ4_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            quant_k4_scale_min(sb, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = x[i].qs + 32 * (sb / 2);
            const int shift = 4 * (sb % 2);
            for (int l = 0; l < 32; l++) *dst++ = d1 * (float)((q[l] >> shift) & 15) - m1;
        }
    }
}

float vec_dot_q4_K(int64_t n, const void *w, const void *act) {
    const BlockQ4_K *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, mins = 0;
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            quant_k4_scale_min(sb, x[i].scales, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (sb / 2);
            const int8_t *a = y[i].qs + 32 * sb;
            const int shift = 4 * (sb % 2);
            int si = 0;
            for (int l = 0; l < 32; l++) si += a[l] * ((q[l] >> shift) & 15);
            isum += sc * si;
            mins += m * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)isum - fp16_to_fp32(x[i].dmin) * y[i].d * (float)mins;
    }
    return sum;
}

/* ---- Q5_K ----------------------------------------------------------------------------------------
 * | d:f16 | dmin:f16 | scales[12] | qh[32] | qs[128] |                                          176 B
 * As Q4_K, plus a fifth bit: sub-block sb's element l has bit sb of qh[l] as value 16.
 * y = (d·sc)·q - (dmin·m) */
void dequant_q5_K(const void *src, float *dst, int64_t n) {
    const BlockQ5_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            quant_k4_scale_min(sb, x[i].scales, &sc, &m);
            const float d1 = d * (float)sc, m1 = dmin * (float)m;
            const uint8_t *q = x[i].qs + 32 * (sb / 2);
            const int shift = 4 * (sb % 2);
            for (int l = 0; l < 32; l++) {
                const int v = ((q[l] >> shift) & 15) | ((x[i].qh[l] >> sb) & 1) << 4;
                *dst++ = d1 * (float)v - m1;
            }
        }
    }
}

float vec_dot_q5_K(int64_t n, const void *w, const void *act) {
    const BlockQ5_K *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, mins = 0;
        for (int sb = 0; sb < 8; sb++) {
            uint8_t sc, m;
            quant_k4_scale_min(sb, x[i].scales, &sc, &m);
            const uint8_t *q = x[i].qs + 32 * (sb / 2);
            const int8_t *a = y[i].qs + 32 * sb;
            const int shift = 4 * (sb % 2);
            int si = 0;
            for (int l = 0; l < 32; l++) si += a[l] * (((q[l] >> shift) & 15) | ((x[i].qh[l] >> sb) & 1) << 4);
            isum += sc * si;
            mins += m * (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]);
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)isum - fp16_to_fp32(x[i].dmin) * y[i].d * (float)mins;
    }
    return sum;
}

/* ---- Q6_K ----------------------------------------------------------------------------------------
 * | ql[128] | qh[64] | scales:i8[16] | d:f16 |                                                 210 B
 * Element e = 128h + 32r + l (row r ∈ [0,4), l ∈ [0,32)): low nibble of ql[64h + l + 32(r&1)] (r < 2) or
 * its high nibble (r ≥ 2), bits 2r..2r+1 of qh[32h + l] as bits 4-5; q = that - 32 ∈ [-32, 31].
 * Scale index k = 8h + 2r + l/16:   y = (d·sc)·q */
static inline int q6k_value(const BlockQ6_K *b, int e) {
    const int h = e / 128, r = (e / 32) % 4, l = e % 32;
    const int low = (b->ql[64 * h + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 15;
    const int high = (b->qh[32 * h + l] >> (2 * r)) & 3;
    return (low | high << 4) - 32;
}

void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const BlockQ6_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int e = 0; e < QK_K; e++) {
            const int k = e / 16; /* = 8h + 2r + l/16 */
            *dst++ = d * (float)x[i].scales[k] * (float)q6k_value(&x[i], e);
        }
    }
}

float vec_dot_q6_K(int64_t n, const void *w, const void *act) {
    const BlockQ6_K *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int k = 0; k < QK_K / 16; k++) {
            int si = 0;
            for (int e = 16 * k; e < 16 * k + 16; e++) si += y[i].qs[e] * q6k_value(&x[i], e);
            isum += x[i].scales[k] * si;
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)isum;
    }
    return sum;
}
