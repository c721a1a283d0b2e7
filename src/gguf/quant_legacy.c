/* quant_legacy.c — the 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and MXFP4: dequantization,
 * reference dot products with their Q8_0 / Q8_1 activation partner, and weight quantizers.
 *
 * Dequantization is bit-identical to ggml's to_float. The quantizers are the simple per-block min/max
 * schemes; Q8_0's is ggml's reference (roundf), the one llama-quantize uses, and differs from the x86
 * activation rounding in quant_act.c. IQ4_NL (also 32 elements) lives with the other IQ4 in quant_iq.c. */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/iq_tables.h"
#include "gguf/quant_blocks.h"

#include <float.h>
#include <math.h>

/* ---- dequantization ------------------------------------------------------------------------------ */

/* Q4_0 (18 B):  | d:f16 | qs[16] |
 * element j < 16 is the low nibble of qs[j], element j+16 the high one:  y = (q - 8)·d */
void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const BlockQ4_0 *x = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)((x[i].qs[j] & 15) - 8) * d;
            dst[j + QK / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

/* Q4_1 (20 B):  | d:f16 | m:f16 | qs[16] |   nibbles as Q4_0:  y = q·d + m */
void dequant_q4_1(const void *src, float *dst, int64_t n) {
    const BlockQ4_1 *x = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)(x[i].qs[j] & 15) * d + m;
            dst[j + QK / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The fifth bit of element j of a Q5 block: bit j of the little-endian u32 qh, as value 16. */
static inline int q5_high(uint32_t qh, int j) { return (int)((qh >> j) & 1) << 4; }

/* Q5_0 (22 B):  | d:f16 | qh[4] | qs[16] |
 * element j < 16: low nibble of qs[j] | bit j of qh << 4; element j+16: high nibble | bit j+16 << 4;
 * y = (q - 16)·d */
void dequant_q5_0(const void *src, float *dst, int64_t n) {
    const BlockQ5_0 *x = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = fp16_to_fp32(x[i].d);
        const uint32_t qh = quant_load_u32(x[i].qh);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)(((x[i].qs[j] & 15) | q5_high(qh, j)) - 16) * d;
            dst[j + QK / 2] = (float)(((x[i].qs[j] >> 4) | q5_high(qh, j + 16)) - 16) * d;
        }
    }
}

/* Q5_1 (24 B):  | d:f16 | m:f16 | qh[4] | qs[16] |   bits as Q5_0:  y = q·d + m */
void dequant_q5_1(const void *src, float *dst, int64_t n) {
    const BlockQ5_1 *x = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        const uint32_t qh = quant_load_u32(x[i].qh);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)((x[i].qs[j] & 15) | q5_high(qh, j)) * d + m;
            dst[j + QK / 2] = (float)((x[i].qs[j] >> 4) | q5_high(qh, j + 16)) * d + m;
        }
    }
}

/* Q8_0 (34 B):  | d:f16 | qs:i8[32] |   y = qs·d */
void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const BlockQ8_0 *x = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK; j++) dst[j] = (float)x[i].qs[j] * d;
    }
}

/* MXFP4 (17 B):  | e:E8M0 | qs[16] |
 * nibbles as Q4_0, each an E2M1 code; kvalues_mxfp4 holds 2·value, so the scale is 2^(e-127)/2:
 * y = kvalues_mxfp4[code]·2^(e-128) */
void dequant_mxfp4(const void *src, float *dst, int64_t n) {
    const BlockMXFP4 *x = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = quant_e8m0_half(x[i].e);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = (float)kvalues_mxfp4[x[i].qs[j] & 15] * d;
            dst[j + QK / 2] = (float)kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

/* ---- dot products: integer sum per block, then one float scaling per block ----------------------- */

float vec_dot_q4_0(int64_t n, const void *w, const void *act) {
    const BlockQ4_0 *x = w;
    const BlockQ8_0 *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int si = 0;
        for (int j = 0; j < QK / 2; j++)
            si += ((x[i].qs[j] & 15) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK / 2];
        sum += (float)si * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    }
    return sum;
}

/* Σ(q·d + m)·a·da = d·da·Σq·a + m·(da·Σa), and Q8_1's s holds da·Σa */
float vec_dot_q4_1(int64_t n, const void *w, const void *act) {
    const BlockQ4_1 *x = w;
    const BlockQ8_1 *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int si = 0;
        for (int j = 0; j < QK / 2; j++)
            si += (x[i].qs[j] & 15) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + QK / 2];
        sum += fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d) * (float)si + fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    return sum;
}

float vec_dot_q5_0(int64_t n, const void *w, const void *act) {
    const BlockQ5_0 *x = w;
    const BlockQ8_0 *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        const uint32_t qh = quant_load_u32(x[i].qh);
        int si = 0;
        for (int j = 0; j < QK / 2; j++) {
            si += (((x[i].qs[j] & 15) | q5_high(qh, j)) - 16) * y[i].qs[j];
            si += (((x[i].qs[j] >> 4) | q5_high(qh, j + 16)) - 16) * y[i].qs[j + QK / 2];
        }
        sum += (float)si * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    }
    return sum;
}

float vec_dot_q5_1(int64_t n, const void *w, const void *act) {
    const BlockQ5_1 *x = w;
    const BlockQ8_1 *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        const uint32_t qh = quant_load_u32(x[i].qh);
        int si = 0;
        for (int j = 0; j < QK / 2; j++) {
            si += ((x[i].qs[j] & 15) | q5_high(qh, j)) * y[i].qs[j];
            si += ((x[i].qs[j] >> 4) | q5_high(qh, j + 16)) * y[i].qs[j + QK / 2];
        }
        sum += fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d) * (float)si + fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    return sum;
}

/* ggml's x86 order (AVX2 kernel, also what its AVX-512 builds run): eight float lanes; per block, lane l
 * adds d_w·d_a · (the integer sum of products 4l..4l+3) with one fused multiply-add; the lanes are then
 * folded ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). Matching this order keeps default-mode results bitwise
 * with llama.cpp's wherever the inputs are. */
float vec_dot_q8_0(int64_t n, const void *w, const void *act) {
    const BlockQ8_0 *x = w;
    const BlockQ8_0 *y = act;
    float acc[8] = {0};
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
        for (int l = 0; l < 8; l++) {
            int si = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) si += x[i].qs[j] * y[i].qs[j];
            acc[l] = fmaf(d, (float)si, acc[l]);
        }
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

float vec_dot_mxfp4(int64_t n, const void *w, const void *act) {
    const BlockMXFP4 *x = w;
    const BlockQ8_0 *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int si = 0;
        for (int j = 0; j < QK / 2; j++)
            si += kvalues_mxfp4[x[i].qs[j] & 15] * y[i].qs[j] + kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + QK / 2];
        sum += fp16_to_fp32(y[i].d) * quant_e8m0_half(x[i].e) * (float)si;
    }
    return sum;
}

/* ---- weight quantizers ------------------------------------------------------------------------- */

/* The value of largest magnitude, with its sign (the first one on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    *mn = lo;
    *mx = hi;
}

/* Truncation after adding the offset + 0.5 rounds half up for the non-negative argument; clamp the top
 * (the extreme value lands exactly on the range end plus rounding noise). */
static inline int q_trunc(float v, int top) { return !(v > 0) ? 0 : v >= (float)top ? top : (int)v; }

/* Symmetric 4/5-bit: the extreme value maps to -8 (-16), the most negative level, so the scale's sign
 * follows it and the positive side reaches 7 (15). */
void quantize_q4_0(const float *src, void *dst, int64_t n) {
    BlockQ4_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        const float d = signed_absmax(x, QK) / -8;
        const float id = d != 0.f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = q_trunc(x[j] * id + 8.5f, 15), q1 = q_trunc(x[j + QK / 2] * id + 8.5f, 15);
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

void quantize_q4_1(const float *src, void *dst, int64_t n) {
    BlockQ4_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        float mn, mx;
        min_max(x, QK, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d != 0.f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(mn);
        for (int j = 0; j < QK / 2; j++) {
            int q0 = q_trunc((x[j] - mn) * id + 0.5f, 15), q1 = q_trunc((x[j + QK / 2] - mn) * id + 0.5f, 15);
            y[i].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void store_q5(uint8_t *qs, uint8_t qh_bytes[4], const int q[QK]) {
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 15) | (q[j + QK / 2] & 15) << 4);
        qh |= (uint32_t)(q[j] >> 4) << j | (uint32_t)(q[j + QK / 2] >> 4) << (j + QK / 2);
    }
    for (int k = 0; k < 4; k++) qh_bytes[k] = (uint8_t)(qh >> (8 * k));
}

void quantize_q5_0(const float *src, void *dst, int64_t n) {
    BlockQ5_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        const float d = signed_absmax(x, QK) / -16;
        const float id = d != 0.f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        int q[QK];
        for (int j = 0; j < QK; j++) q[j] = q_trunc(x[j] * id + 16.5f, 31);
        store_q5(y[i].qs, y[i].qh, q);
    }
}

void quantize_q5_1(const float *src, void *dst, int64_t n) {
    BlockQ5_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        float mn, mx;
        min_max(x, QK, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d != 0.f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(mn);
        int q[QK];
        for (int j = 0; j < QK; j++) q[j] = q_trunc((x[j] - mn) * id + 0.5f, 31);
        store_q5(y[i].qs, y[i].qh, q);
    }
}

void quantize_q8_0(const float *src, void *dst, int64_t n) {
    BlockQ8_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        float amax = 0;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d != 0.f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}
