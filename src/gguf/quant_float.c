/* quant_float.c — the float formats F32, F16 and BF16: conversion rows and reference dot products.
 *
 * Conversions are base/fp16.h's (bit-identical to ggml's, round to nearest even). The dot products
 * multiply in float, as ggml does after widening both sides, and accumulate in double (ggml's scalar
 * ggml_float): the reference is then at least as accurate as any SIMD order a fast kernel may pick.
 * llama.cpp's own orders are dot_path_f32 here and dot_path_f16 / _bf16 in quant_order_float.c. */
#include "gguf/quant.h"

#include "base/fdot.h"

#include "base/fp16.h"

#include <string.h>

void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
void quantize_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
}
void quantize_f16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
}

void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
}
void quantize_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = fp32_to_bf16(src[i]);
}

float vec_dot_f32(int64_t n, const void *w, const void *act) {
    const float *x = w, *y = act;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * y[i]);
    return (float)sum;
}

float dot_path_f32(DotPath path, int64_t n, const void *w, const void *act) {
    return path == DOT_GEMM ? fdot_gemm_f32(w, act, (int)n) : fdot_vec_f32(w, act, (int)n);
}

/* tinyBLAS takes a mul_mat of ≥ 2 rows when rows % 4 == 0 and cols % 16 == 0 (AVX-512); else ggml_vec_dot */
DotPath dot_path_f32_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    if (expert) return DOT_ID;
    return n_act >= 2 && rows % 4 == 0 && cols % 16 == 0 ? DOT_GEMM : DOT_GEMV;
}

float vec_dot_f16(int64_t n, const void *w, const void *act) {
    const uint16_t *x = w, *y = act;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    return (float)sum;
}

float vec_dot_bf16(int64_t n, const void *w, const void *act) {
    const uint16_t *x = w, *y = act;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return (float)sum;
}
