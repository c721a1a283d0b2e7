/* quant_order_legacy.c — the 32-element formats Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4: dot products in
 * the summation order of llama.cpp v0.4.0's x86 CPU kernels, and its kernel choice (docs/PARITY.md).
 * (Q8_0's vec_dot in quant_legacy.c already is ggml's order, and tinyBLAS's for it is the same.)
 *
 * vec_dot (ggml_vec_dot_*_q8_0 / _q8_1, AVX2 code): eight float lanes; per block, lane l adds
 * d_w·d_a·(the integer sum of products of elements 4l..4l+3) with one fused multiply-add; then
 * hsum_float_8. Q4_1 / Q5_1 add the Σ m·s terms in a separate float (fused steps) after the hsum;
 * IQ4_NL and MXFP4 keep two lane accumulators, for even and odd blocks, added lane-wise before the hsum
 * (an odd last block is added after it, fused).
 * tinyBLAS_Q0_AVX (llamafile_sgemm: ≥ 2 activation rows of Q4_0, Q5_0, IQ4_NL, Q8_0, any shape): the
 * same as vec_dot with a single lane accumulator — identical to vec_dot except for IQ4_NL.
 * Repacked (Q4_0, IQ4_NL, MXFP4 with rows % 8 == 0, on AVX2; mul_mat and mul_mat_id): one float
 * accumulator, per block acc = fma((float)Σ q·a, d_w·d_a, acc); gemv and gemm kernels alike.
 * DOT_FAST (deltallm's fast arithmetic, format.h) is that repacked order for every one of these formats and
 * Q8_0; Q4_1 / Q5_1 add their minimum terms m·s in a second accumulator, added at the end. */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/iq_tables.h"
#include "gguf/quant_blocks.h"

#include <math.h>

/* A block is decoded to q[32], the integers the activations multiply, in element order.
 * Element j < 16 is the low nibble of qs[j], element j + 16 the high one. */
static void nibbles(const uint8_t qs[QK / 2], int8_t out[QK]) {
    for (int j = 0; j < QK / 2; j++) {
        out[j] = (int8_t)(qs[j] & 15);
        out[j + QK / 2] = (int8_t)(qs[j] >> 4);
    }
}

static void lanes8(const int8_t *q, const int8_t *a, int32_t lane[8]) {
    for (int l = 0; l < 8; l++) lane[l] = q[4 * l] * a[4 * l] + q[4 * l + 1] * a[4 * l + 1] + q[4 * l + 2] * a[4 * l + 2] +
                                         q[4 * l + 3] * a[4 * l + 3];
}

static int32_t block_sum(const int8_t *q, const int8_t *a) {
    int32_t s = 0;
    for (int j = 0; j < QK; j++) s += q[j] * a[j];
    return s;
}

static void fma_lanes(float acc[8], float d, const int32_t lane[8]) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
}

/* Decoders: q for block i of a row, and its float scale d_w */
static float dec_q4_0(const void *w, int64_t i, int8_t q[QK]) {
    const BlockQ4_0 *x = (const BlockQ4_0 *)w + i;
    nibbles(x->qs, q);
    for (int j = 0; j < QK; j++) q[j] = (int8_t)(q[j] - 8);
    return fp16_to_fp32(x->d);
}
static float dec_q5_0(const void *w, int64_t i, int8_t q[QK]) {
    const BlockQ5_0 *x = (const BlockQ5_0 *)w + i;
    const uint32_t qh = quant_load_u32(x->qh);
    nibbles(x->qs, q);
    for (int j = 0; j < QK; j++) q[j] = (int8_t)((q[j] | ((qh >> j) & 1) << 4) - 16);
    return fp16_to_fp32(x->d);
}
static float dec_iq4_nl(const void *w, int64_t i, int8_t q[QK]) {
    const BlockIQ4_NL *x = (const BlockIQ4_NL *)w + i;
    nibbles(x->qs, q);
    for (int j = 0; j < QK; j++) q[j] = kvalues_iq4nl[q[j]];
    return fp16_to_fp32(x->d);
}
static float dec_mxfp4(const void *w, int64_t i, int8_t q[QK]) {
    const BlockMXFP4 *x = (const BlockMXFP4 *)w + i;
    nibbles(x->qs, q);
    for (int j = 0; j < QK; j++) q[j] = kvalues_mxfp4[q[j]];
    return quant_e8m0_half(x->e);
}
static float dec_q8_0(const void *w, int64_t i, int8_t q[QK]) {
    const BlockQ8_0 *x = (const BlockQ8_0 *)w + i;
    for (int j = 0; j < QK; j++) q[j] = x->qs[j];
    return fp16_to_fp32(x->d);
}
typedef float (*Dec32)(const void *w, int64_t i, int8_t q[QK]);

/* vec_dot / tinyBLAS with one lane accumulator: acc[l] += d_w·d_a·lane[l] */
static float one_acc(int64_t n, const void *w, const BlockQ8_0 *y, Dec32 dec) {
    float acc[8] = {0};
    int8_t q[QK];
    int32_t lane[8];
    for (int64_t i = 0; i < n / QK; i++) {
        const float d = dec(w, i, q) * fp16_to_fp32(y[i].d);
        lanes8(q, y[i].qs, lane);
        fma_lanes(acc, d, lane);
    }
    return quant_hsum8(acc);
}

/* IQ4_NL / MXFP4 vec_dot: even and odd blocks in two lane accumulators, an odd last block after the hsum */
static float two_acc(int64_t n, const void *w, const BlockQ8_0 *y, Dec32 dec) {
    float acc[2][8] = {{0}};
    int8_t q[QK];
    int32_t lane[8];
    const int64_t nb = n / QK;
    int64_t i = 0;
    for (; i + 1 < nb; i += 2)
        for (int k = 0; k < 2; k++) {
            const float d = fp16_to_fp32(y[i + k].d) * dec(w, i + k, q);
            lanes8(q, y[i + k].qs, lane);
            fma_lanes(acc[k], d, lane);
        }
    float sum[8];
    for (int l = 0; l < 8; l++) sum[l] = acc[0][l] + acc[1][l];
    float s = quant_hsum8(sum);
    if (i < nb) {
        const float d = fp16_to_fp32(y[i].d) * dec(w, i, q);
        s = fmaf(d, (float)block_sum(q, y[i].qs), s);
    }
    return s;
}

/* The repacked kernels: acc = fma((float)Σ q·a, d_w·d_a, acc) per block */
static float repacked(int64_t n, const void *w, const BlockQ8_0 *y, Dec32 dec) {
    float acc = 0;
    int8_t q[QK];
    for (int64_t i = 0; i < n / QK; i++) {
        const float dw = dec(w, i, q);
        acc = fmaf((float)block_sum(q, y[i].qs), dw * fp16_to_fp32(y[i].d), acc);
    }
    return acc;
}

/* ---- Q8_0: vec_dot (= tinyBLAS) everywhere in llama.cpp; DOT_FAST repacked ------------------------ */
float dot_path_q8_0(DotPath path, int64_t n, const void *w, const void *act) {
    if (path == DOT_FAST) return repacked(n, w, act, dec_q8_0);
    return vec_dot_q8_0(n, w, act);
}

/* ggml_repack_get_optimal_repack_type on AVX2: Q4_0, IQ4_NL, MXFP4 with rows % 8 == 0. */
static bool repacks(int64_t rows) { return rows % 8 == 0; }

/* ---- Q4_0: vec_dot = tinyBLAS; repacked when rows % 8 == 0 ---------------------------------------- */
float dot_path_q4_0(DotPath path, int64_t n, const void *w, const void *act) {
    if (path == DOT_REPACK || path == DOT_REPACK_GEMM || path == DOT_FAST) return repacked(n, w, act, dec_q4_0);
    return one_acc(n, w, act, dec_q4_0);
}
DotPath dot_path_q4_0_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    if (repacks(rows)) return DOT_REPACK;
    return expert ? DOT_ID : n_act >= 2 ? DOT_GEMM : DOT_GEMV;
}

/* ---- Q5_0: vec_dot = tinyBLAS, never repacked ----------------------------------------------------- */
float dot_path_q5_0(DotPath path, int64_t n, const void *w, const void *act) {
    return path == DOT_FAST ? repacked(n, w, act, dec_q5_0) : one_acc(n, w, act, dec_q5_0);
}

/* ---- Q4_1 / Q5_1 (vec_dot only): lanes of the unsigned quants, acc[l] += d_w·d_a·lane[l]; the minimum
 * terms summs += m·s (fused) per block; result hsum_float_8(acc) + summs ---------------------------- */
static float q41_q51(int64_t n, const void *w, const BlockQ8_1 *y, bool five, bool fast) {
    float acc[8] = {0}, summs = 0, accf = 0;
    int8_t q[QK];
    int32_t lane[8];
    for (int64_t i = 0; i < n / QK; i++) {
        uint16_t d16, m16;
        if (five) {
            const BlockQ5_1 *x = (const BlockQ5_1 *)w + i;
            const uint32_t qh = quant_load_u32(x->qh);
            nibbles(x->qs, q);
            for (int j = 0; j < QK; j++) q[j] = (int8_t)(q[j] | ((qh >> j) & 1) << 4);
            d16 = x->d, m16 = x->m;
        } else {
            const BlockQ4_1 *x = (const BlockQ4_1 *)w + i;
            nibbles(x->qs, q);
            d16 = x->d, m16 = x->m;
        }
        summs = fmaf(fp16_to_fp32(m16), fp16_to_fp32(y[i].s), summs);
        if (fast) {
            accf = fmaf((float)block_sum(q, y[i].qs), fp16_to_fp32(d16) * fp16_to_fp32(y[i].d), accf);
            continue;
        }
        lanes8(q, y[i].qs, lane);
        fma_lanes(acc, fp16_to_fp32(d16) * fp16_to_fp32(y[i].d), lane);
    }
    return fast ? accf + summs : quant_hsum8(acc) + summs;
}
float dot_path_q4_1(DotPath path, int64_t n, const void *w, const void *act) { return q41_q51(n, w, act, false, path == DOT_FAST); }
float dot_path_q5_1(DotPath path, int64_t n, const void *w, const void *act) { return q41_q51(n, w, act, true, path == DOT_FAST); }

/* ---- IQ4_NL: vec_dot (two accumulators), tinyBLAS (one), repacked when rows % 8 == 0 -------------- */
float dot_path_iq4_nl(DotPath path, int64_t n, const void *w, const void *act) {
    if (path == DOT_REPACK || path == DOT_REPACK_GEMM || path == DOT_FAST) return repacked(n, w, act, dec_iq4_nl);
    if (path == DOT_GEMM) return one_acc(n, w, act, dec_iq4_nl);
    return two_acc(n, w, act, dec_iq4_nl);
}
DotPath dot_path_iq4_nl_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    if (repacks(rows)) return DOT_REPACK;
    return expert ? DOT_ID : n_act >= 2 ? DOT_GEMM : DOT_GEMV;
}

/* ---- MXFP4: vec_dot (two accumulators; no tinyBLAS), repacked when rows % 8 == 0 ------------------ */
float dot_path_mxfp4(DotPath path, int64_t n, const void *w, const void *act) {
    if (path == DOT_REPACK || path == DOT_REPACK_GEMM || path == DOT_FAST) return repacked(n, w, act, dec_mxfp4);
    return two_acc(n, w, act, dec_mxfp4);
}
DotPath dot_path_mxfp4_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    if (repacks(rows)) return DOT_REPACK;
    return expert ? DOT_ID : n_act >= 2 ? DOT_GEMM : DOT_GEMV;
}
