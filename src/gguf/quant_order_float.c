/* quant_order_float.c — F16 and BF16 dot products in the summation order of llama.cpp v0.4.0's x86 CPU
 * kernels (AVX-512 + AVX512_BF16 build, the "zen4" variant that runs on this project's machines), and
 * its kernel choice (docs/PARITY.md). Both sides are already in the weight's format (ggml's vec_dot_type
 * of F16 is F16, of BF16 is BF16), and widening to float is exact.
 *
 * F16, one activation row (ggml_vec_dot_f16): four 16-lane accumulators over 64-element steps (fused
 * multiply-adds), folded 4 → 2 → 1 and reduced (_mm512_reduce_add_ps) into a double; the n % 64 last
 * products (float) are added in double; the double is rounded to float.
 * F16, batch (llamafile tinyBLAS, rows % 4 == 0 and cols % 16 == 0): one 16-lane accumulator over
 * 16-element steps, fused; reduced.
 * BF16 uses VDPBF16PS: per 32-bit lane, acc = (acc + a[2l+1]·b[2l+1]) + a[2l]·b[2l] with each add
 * rounded (the products are exact in float), denormal inputs read as zero and denormal results flushed
 * (measured on the hardware). One row (ggml_vec_dot_bf16): two 16-lane accumulators, elements
 * [64k, 64k+32) and [64k+32, 64k+64), each reduced, summed in double with the n % 64 last products.
 * Batch (tinyBLAS, rows % 4 == 0 and cols % 32 == 0): one accumulator over 32-element steps, reduced. */
#include "gguf/quant.h"

#include "base/fdot.h"
#include "base/fp16.h"

#include <float.h>
#include <math.h>

/* every multiply and add rounded separately unless fmaf says otherwise (clang contracts by default) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ---- F16 ----------------------------------------------------------------------------------------- */

float dot_path_f16(DotPath path, int64_t n, const void *w, const void *act) {
    const uint16_t *x = w, *y = act;
    if (path == DOT_GEMM && n % 16 == 0) {
        float acc[16] = {0};
        for (int64_t i = 0; i < n; i += 16)
            for (int l = 0; l < 16; l++) acc[l] = fmaf(fp16_to_fp32(x[i + l]), fp16_to_fp32(y[i + l]), acc[l]);
        return fdot_reduce16(acc);
    }
    const int64_t np = n & ~(int64_t)63;
    float acc[4][16] = {{0}};
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) {
                const int64_t e = i + 16 * j + l;
                acc[j][l] = fmaf(fp16_to_fp32(x[e]), fp16_to_fp32(y[e]), acc[j][l]);
            }
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; l++) acc[0][l] += acc[1][l];
    double sum = fdot_reduce16(acc[0]);
    for (int64_t i = np; i < n; i++) sum += (double)(fp16_to_fp32(x[i]) * fp16_to_fp32(y[i]));
    return (float)sum;
}

/* tinyBLAS (llamafile_sgemm) takes a mul_mat of ≥ 2 rows when rows % 4 == 0 and the row length is a
 * multiple of its vector width (16 floats; 32 bf16 pairs for BF16); mul_mat_id never uses it. */
DotPath dot_path_f16_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    if (expert) return DOT_ID;
    return n_act >= 2 && rows % 4 == 0 && cols % 16 == 0 ? DOT_GEMM : DOT_GEMV;
}

/* ---- BF16 ---------------------------------------------------------------------------------------- */

/* VDPBF16PS flushes denormal inputs and results to zero (sign kept). */
static inline float ftz(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.f, v) : v; }
static inline float bf16_daz(uint16_t h) { return ftz(bf16_to_fp32(h)); }

/* One VDPBF16PS lane: acc + x[1]·y[1] first, then + x[0]·y[0]; each product exact, each sum rounded. */
static inline float dpbf16(float acc, const uint16_t *x, const uint16_t *y) {
    acc = ftz(ftz(acc) + bf16_daz(x[1]) * bf16_daz(y[1]));
    return ftz(acc + bf16_daz(x[0]) * bf16_daz(y[0]));
}

float dot_path_bf16(DotPath path, int64_t n, const void *w, const void *act) {
    const uint16_t *x = w, *y = act;
    if (path == DOT_GEMM && n % 32 == 0) {
        float acc[16] = {0};
        for (int64_t i = 0; i < n; i += 32)
            for (int l = 0; l < 16; l++) acc[l] = dpbf16(acc[l], x + i + 2 * l, y + i + 2 * l);
        return fdot_reduce16(acc);
    }
    float c1[16] = {0}, c2[16] = {0};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int l = 0; l < 16; l++) {
            c1[l] = dpbf16(c1[l], x + i + 2 * l, y + i + 2 * l);
            c2[l] = dpbf16(c2[l], x + i + 32 + 2 * l, y + i + 32 + 2 * l);
        }
    double sum = 0;
    sum += (double)fdot_reduce16(c1);
    sum += (double)fdot_reduce16(c2);
    for (; i < n; i++) sum += (double)(bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]));
    return (float)sum;
}

DotPath dot_path_bf16_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    if (expert) return DOT_ID;
    return n_act >= 2 && rows % 4 == 0 && cols % 32 == 0 ? DOT_GEMM : DOT_GEMV;
}
