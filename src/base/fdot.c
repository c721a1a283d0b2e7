/* fdot.c — see fdot.h. Every step is one IEEE operation, written out lane by lane (fmaf where the SIMD
 * code fuses), so the bits equal those of the vector code on any machine. */
#include "base/fdot.h"

#include <math.h>

/* every multiply and add rounded separately unless fmaf says otherwise (clang contracts by default) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* _mm512_reduce_add_ps: halves added pairwise, 16 → 8 → 4 → 2 → 1 */
float fdot_reduce16(const float *v) {
    float a[8];
    for (int i = 0; i < 8; i++) a[i] = v[i] + v[i + 8];
    for (int i = 0; i < 4; i++) a[i] = a[i] + a[i + 4];
    for (int i = 0; i < 2; i++) a[i] = a[i] + a[i + 2];
    return a[0] + a[1];
}


/* ggml_vec_dot_f32 on AVX-512: 4 accumulators of 16 lanes over 64-element steps (fused multiply-add),
 * folded 4 → 2 → 1 and reduced, then the leftovers added one by one in float. */
float fdot_vec_f32(const float *x, const float *y, int n) {
    const int np = n & ~63;
    float acc[4][16] = {{0}};
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; l++) acc[0][l] += acc[1][l];
    float sum = fdot_reduce16(acc[0]);
    /* The leftovers as GCC compiled ggml's `sumf += x[i]*y[i]` (read from the disassembly of llama.cpp
     * v0.4.0's libggml-cpu, checked against its dumps): products rounded and added one by one in chunks of
     * 16, then of 8, and the last n % 8 fused. */
    int i = np;
    for (; n - i >= 16; i += 16)
        for (int l = 0; l < 16; l++) sum += x[i + l] * y[i + l];
    if (n - i >= 8)
        for (int l = 0; l < 8; l++, i++) sum += x[i] * y[i];
    for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
    return sum;
}

/* llamafile's tinyBLAS for F32 on AVX-512: 16 lanes, one fused multiply-add per lane per 16 elements,
 * then _mm512_reduce_add_ps; widths that are not a multiple of 16 take ggml_vec_dot_f32 (as llama.cpp
 * falls back). */
float fdot_gemm_f32(const float *x, const float *y, int n) {
    if (n % 16) return fdot_vec_f32(x, y, n);
    float acc[16] = {0};
    for (int i = 0; i < n; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(x[i + l], y[i + l], acc[l]);
    return fdot_reduce16(acc);
}

/* ggml_vec_mad_f32: y += x·v, fused (the SIMD steps and, in llama.cpp's build, the leftovers: checked
 * against its dumps) */
void fdot_mad_f32(float *y, const float *x, float v, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(x[i], v, y[i]);
}
