/* conv_simd.h — causal depthwise conv + SiLU, written once against simd16.h and compiled by conv_avx512.c and
 * conv_avx2.c; bit-identical to conv_silu_ref.
 *
 * Each output is a chain of fused multiply-adds over the K taps, oldest first, from 0 (as the reference and
 * ggml's SSM_CONV build compute it); inputs older than the batch come from the state. The SiLU is fused:
 * channels in the whole 16-element chunks of a token row go through the SIMD exp polynomial (v16_exp,
 * lane for lane op_expf_poly), the leftover channels (C % 16) through libm as op_silu_row does.
 * Work items are groups of 64 channels over all T tokens; each item writes its channels' new state. */
#include "kernels/cpu/seq_kernels.h"
#include "kernels/cpu/simd16.h"

#include <math.h>

#define CONV_MAX_TAPS 16
#define CONV_GROUP 64

typedef struct ConvJob {
    const float *x, *w;
    int T, C, K;
    float *state, *y;
} ConvJob;

SIMD_INLINE V16 silu16(V16 x) {
    return v16_div(x, v16_add(v16_set1(1.0f), v16_exp(v16_sub(v16_zero(), x))));
}

/* 16 channels from c0 (all within the row's whole 16-chunks), K taps (a constant in the copies below) */
SIMD_INLINE void conv_block16(const ConvJob *j, int c0, const int K) {
    V16 w[CONV_MAX_TAPS] = {0}, h[CONV_MAX_TAPS] = {0};
    float tmp[CONV_MAX_TAPS][16];
#pragma GCC unroll 16
    for (int i = 0; i < K; i++) w[i] = v16_gather(j->w + (int64_t)c0 * K + i, K);
#pragma GCC unroll 16
    for (int i = 0; i < K - 1; i++) h[i] = v16_gather(j->state + (int64_t)c0 * (K - 1) + i, K - 1);
    const int64_t C = j->C;
    for (int t = 0; t < j->T; t++) {
        h[K - 1] = v16_load(j->x + t * C + c0);
        V16 acc = v16_zero();
#pragma GCC unroll 16
        for (int i = 0; i < K; i++) acc = v16_fmadd(h[i], w[i], acc);
        v16_store(j->y + t * C + c0, silu16(acc));
#pragma GCC unroll 16
        for (int i = 0; i < K - 1; i++) h[i] = h[i + 1];
    }
    for (int i = 0; i < K - 1; i++) v16_store(tmp[i], h[i]);
    for (int i = 0; i < K - 1; i++)
        for (int l = 0; l < 16; l++) j->state[(int64_t)(c0 + l) * (K - 1) + i] = tmp[i][l];
}

/* one channel the scalar way (the row's leftover channels: libm SiLU) */
static void conv_channel(const ConvJob *j, int c) {
    const int K = j->K;
    const float *w = j->w + (int64_t)c * K;
    float *st = j->state + (int64_t)c * (K - 1);
    float win[CONV_MAX_TAPS];
    for (int i = 0; i < K - 1; i++) win[i] = st[i];
    for (int t = 0; t < j->T; t++) {
        win[K - 1] = j->x[(int64_t)t * j->C + c];
        float acc = 0.0f;
        for (int i = 0; i < K; i++) acc = fmaf(win[i], w[i], acc);
        j->y[(int64_t)t * j->C + c] = op_silu(acc);
        for (int i = 0; i < K - 1; i++) win[i] = win[i + 1];
    }
    for (int i = 0; i < K - 1; i++) st[i] = win[i];
}

static void conv_items(void *ctx, int64_t b, int64_t e, int thread) {
    (void)thread;
    const ConvJob *j = ctx;
    const int c16 = j->C & ~15;
    for (int64_t it = b; it < e; it++) {
        const int c_beg = (int)it * CONV_GROUP, c_end = c_beg + CONV_GROUP < j->C ? c_beg + CONV_GROUP : j->C;
        int c = c_beg;
        for (; c + 16 <= c_end && c + 16 <= c16; c += 16) {
            if (j->K == 4) conv_block16(j, c, 4);
            else conv_block16(j, c, j->K);
        }
        for (; c < c_end; c++) conv_channel(j, c);
    }
}

void SEQ_FN(conv_silu)(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, float *y) {
    if (K > CONV_MAX_TAPS || K < 2) {
        conv_silu_ref(c, x, T, C, K, w, state, y);
        return;
    }
    ConvJob j = {x, w, T, C, K, state, y};
    const int64_t n = (C + CONV_GROUP - 1) / CONV_GROUP;
    pool_for(c->pool, n, T >= 16 ? 1 : 8, conv_items, &j);
}
