/* quant_act.c — the activation formats: what a float activation row becomes before a dot product.
 *
 * These decide parity with llama.cpp, so each is bit-identical to what ggml's x86 CPU backend (AVX2 /
 * AVX-512 build) produces, which is not always ggml's portable reference:
 *   Q8_0, Q8_1  x86 SIMD: id = 127/amax (not 1/(amax/127)) and round half to even (not roundf);
 *   Q8_K        the reference (x86 calls it): scale from the *signed* extreme value, nearest_int.
 * The weight quantizer for Q8_0 (ggml's reference rounding) is quantize_q8_0 in quant_legacy.c. */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/quant_blocks.h"

#include <math.h>
#include <string.h>

/* Q8_0 / Q8_1 (32 elements): d:f16 [s:f16] qs:i8[32], x ≈ d·qs. */
static float q8_block(const float *x, int8_t *qs, int *sum) {
    float amax = 0;
    for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.f ? 127.f / amax : 0.f;
    int s = 0;
    for (int j = 0; j < QK; j++) {
        int q = quant_nearest_int(x[j] * id); /* |x·id| ≤ 127 (+1 ulp), so no clamp is needed */
        qs[j] = (int8_t)q;
        s += q;
    }
    *sum = s;
    return d;
}

void quantize_act_q8_0(const float *src, void *dst, int64_t n) {
    BlockQ8_0 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        int sum;
        y[i].d = fp32_to_fp16(q8_block(src + i * QK, y[i].qs, &sum));
    }
}

void quantize_act_q8_1(const float *src, void *dst, int64_t n) {
    BlockQ8_1 *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        int sum;
        const float d = q8_block(src + i * QK, y[i].qs, &sum);
        y[i].d = fp32_to_fp16(d);
        y[i].s = fp32_to_fp16(d * (float)sum); /* the float d, not its fp16 rounding */
    }
}

/* Q8_K (256 elements): d:f32 qs:i8[256] bsums:i16[16], x ≈ d·qs. */
void quantize_act_q8_K(const float *src, void *dst, int64_t n) {
    BlockQ8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + i * QK_K;
        float amax = 0, max = 0; /* max: the signed value of largest magnitude (first one wins) */
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        if (amax == 0.f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127 (not -128) keeps every q in [-127, 127]; the positive side still needs the clamp */
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int q = quant_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(q < 127 ? q : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[16 * j + l];
            y[i].bsums[j] = (int16_t)s;
        }
        y[i].d = 1 / iscale;
    }
}

void dequant_q8_1(const void *src, float *dst, int64_t n) {
    const BlockQ8_1 *x = src;
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK; j++) dst[i * QK + j] = x[i].qs[j] * d;
    }
}

void dequant_q8_K(const void *src, float *dst, int64_t n) {
    const BlockQ8_K *x = src;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++) dst[i * QK_K + j] = x[i].d * x[i].qs[j];
}
