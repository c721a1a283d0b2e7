/* quant_order_k.c — Q2_K … Q6_K dot products in the summation order of llama.cpp v0.4.0's x86 CPU kernels
 * (AVX2 code, which its AVX-512 builds also run), and which kernel it picks (docs/PARITY.md).
 *
 * vec_dot (ggml_vec_dot_qX_K_q8_K; every path of Q3_K, Q5_K, Q6_K, and of Q2_K / Q4_K matrices whose row
 * count is not a multiple of 8 — there is no tinyBLAS for K-quants): eight int32 lanes, lane l collecting
 * the products of the elements e with (e mod 32) div 4 = l, weighted by their sub-block scales. Integer
 * sums are exact, so only the float steps have to be copied: per super-block one fused multiply-add
 * acc[l] = fma(d, (float)lane[l], acc[l]), the final hsum_float_8, and each format's minimum terms.
 *
 * Repacked (Q4_K on AVX2, Q2_K on AVX-512, rows % 8 == 0, in mul_mat and mul_mat_id alike): the gemv
 * kernel sums a whole super-block in integers and does one fma into a scale accumulator and one into a
 * minimum accumulator, subtracted at the end; the gemm kernel (groups of 4 activation rows) does the same
 * per 64 (Q4_K) or 128 (Q2_K) elements.
 *
 * DOT_FAST (deltallm's fast arithmetic, format.h): the repacked gemv order for all five — a super-block's
 * integer total Σ sc·q·a (Q6_K: less 32·Σ sc·bsums; Q3_K: the signed values) in one fma into acc, its
 * minimum total Σ m·bsums (Q2_K, Q4_K, Q5_K) in one into accm; result acc - accm.
 *
 * The int → float conversions round to nearest like cvtepi32_ps (|lane| can exceed 2^24 for Q6_K). */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/quant_blocks.h"

#include <math.h>

/* A super-block as integers: q[e] is the value the activation multiplies, sc[k] the integer scale of
 * elements 16k..16k+15. */
typedef struct KInt {
    int8_t q[QK_K];
    int16_t sc[QK_K / 16];
} KInt;

/* The x86 kernels' eight int32 lanes: Σ sc·q·a over the elements of each lane. */
static void lanes8(const KInt *k, const int8_t *a, int32_t lane[8]) {
    for (int l = 0; l < 8; l++) lane[l] = 0;
    for (int e = 0; e < QK_K; e++) lane[(e >> 2) & 7] += k->sc[e >> 4] * k->q[e] * a[e];
}

/* Σ sc·q·a over elements [e0, e1). */
static int32_t span(const KInt *k, const int8_t *a, int e0, int e1) {
    int32_t s = 0;
    for (int e = e0; e < e1; e++) s += k->sc[e >> 4] * k->q[e] * a[e];
    return s;
}

/* acc[l] += d·lane[l], fused, for the lanes of one super-block. */
static void fma_lanes(float acc[8], float d, const int32_t lane[8]) {
    for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
}

/* The repacked kernels: per group of `span_len` elements one fma of the integer sum into acc and one of
 * the minimum sum into accm (minimum sums from the Q8_K bsums, per 16 elements, m16[k] the integer
 * minimum of group k); result acc - accm. span_len = QK_K is the gemv kernel. */
static void repack_dot(const KInt *k, const uint8_t m16[16], const BlockQ8_K *y, float dw, float dminw, int span_len,
                       float *acc, float *accm) {
    for (int e0 = 0; e0 < QK_K; e0 += span_len) {
        int32_t m = 0;
        for (int g = e0 / 16; g < (e0 + span_len) / 16; g++) m += m16[g] * y->bsums[g];
        *acc = fmaf((float)span(k, y->qs, e0, e0 + span_len), dw * y->d, *acc);
        *accm = fmaf((float)m, dminw * y->d, *accm);
    }
}

/* ---- decoders ------------------------------------------------------------------------------------ */

/* Q2_K: q ∈ [0,3] (bits 2s of qs[32h + l] for e = 128h + 32s + l), sc = low nibble, m = high nibble */
static void decode_q2_K(const BlockQ2_K *b, KInt *k, uint8_t m16[16]) {
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32;
        k->q[e] = (int8_t)((b->qs[32 * h + l] >> (2 * s)) & 3);
    }
    for (int g = 0; g < 16; g++) {
        k->sc[g] = b->scales[g] & 15;
        m16[g] = b->scales[g] >> 4;
    }
}

/* Q3_K: q = low 2 bits - (high bit ? 0 : 4) ∈ [-4, 3], signed 6-bit scales */
static void decode_q3_K(const BlockQ3_K *b, KInt *k) {
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, s = (e / 32) % 4, l = e % 32;
        const int low = (b->qs[32 * h + l] >> (2 * s)) & 3;
        k->q[e] = (int8_t)(low - ((b->hmask[l] >> (4 * h + s)) & 1 ? 0 : 4));
    }
    for (int g = 0; g < 16; g++) k->sc[g] = (int16_t)quant_q3k_scale(g, b->scales);
}

/* Q4_K / Q5_K: q = nibble (| fifth bit), scale and minimum per 32 (stored per 16 here) */
static void decode_q45_K(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, KInt *k, uint8_t m16[16]) {
    for (int sb = 0; sb < 8; sb++) {
        uint8_t sc, m;
        quant_k4_scale_min(sb, scales, &sc, &m);
        k->sc[2 * sb] = k->sc[2 * sb + 1] = sc;
        m16[2 * sb] = m16[2 * sb + 1] = m; /* each of the two bsums of the sub-block gets the minimum */
        const uint8_t *q = qs + 32 * (sb / 2);
        for (int l = 0; l < 32; l++) {
            int v = (q[l] >> (4 * (sb % 2))) & 15;
            if (qh) v |= ((qh[l] >> sb) & 1) << 4;
            k->q[32 * sb + l] = (int8_t)v;
        }
    }
}

/* Q6_K: q = the unsigned 6-bit value ∈ [0, 63] (the -32 goes through the bsums), int8 scales per 16 */
static void decode_q6_K(const BlockQ6_K *b, KInt *k) {
    for (int e = 0; e < QK_K; e++) {
        const int h = e / 128, r = (e / 32) % 4, l = e % 32;
        const int low = (b->ql[64 * h + l + 32 * (r & 1)] >> (4 * (r >> 1))) & 15;
        const int high = (b->qh[32 * h + l] >> (2 * r)) & 3;
        k->q[e] = (int8_t)(low | high << 4);
    }
    for (int g = 0; g < 16; g++) k->sc[g] = b->scales[g];
}

/* The rule of ggml_repack_get_optimal_repack_type on x86 (Q4_K: AVX2, Q2_K: AVX-512): rows % 8 == 0.
 * The repacked mul_mat runs gemm on groups of 4 activation rows once there are ≥ 4; mul_mat_id always
 * runs gemv. */
static DotPath repack_pick(int64_t rows, int64_t n_act, bool expert) {
    if (rows % 8 != 0) return expert ? DOT_ID : n_act >= 2 ? DOT_GEMM : DOT_GEMV; /* all vec_dot */
    if (expert) return DOT_REPACK;
    return n_act >= 4 ? DOT_REPACK_GEMM : DOT_REPACK;
}

/* ---- Q2_K ----------------------------------------------------------------------------------------
 * vec_dot: per super-block, first acc[l] += dmin'·(m[2l]·bsums[2l] + m[2l+1]·bsums[2l+1]) with
 * dmin' = -d8·dmin, then acc[l] += d8·d·lane[l] (both fused); hsum_float_8.
 * Repacked: 128-element spans in gemm. */
float dot_path_q2_K(DotPath path, int64_t n, const void *w, const void *act) {
    const BlockQ2_K *x = w;
    const BlockQ8_K *y = act;
    KInt k;
    uint8_t m16[16];
    if (path == DOT_REPACK || path == DOT_REPACK_GEMM || path == DOT_FAST) {
        float acc = 0, accm = 0;
        for (int64_t i = 0; i < n / QK_K; i++) {
            decode_q2_K(&x[i], &k, m16);
            repack_dot(&k, m16, &y[i], fp16_to_fp32(x[i].d), fp16_to_fp32(x[i].dmin),
                       path == DOT_REPACK_GEMM ? 128 : QK_K, &acc, &accm);
        }
        return acc - accm;
    }
    float acc[8] = {0};
    int32_t lane[8];
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
        decode_q2_K(&x[i], &k, m16);
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf(dmin, (float)(m16[2 * l] * y[i].bsums[2 * l] + m16[2 * l + 1] * y[i].bsums[2 * l + 1]), acc[l]);
        lanes8(&k, y[i].qs, lane);
        fma_lanes(acc, d, lane);
    }
    return quant_hsum8(acc);
}

DotPath dot_path_q2_K_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    return repack_pick(rows, n_act, expert);
}

/* ---- Q3_K: vec_dot only: acc[l] += d8·d·lane[l]; hsum_float_8 ------------------------------------- */
float dot_path_q3_K(DotPath path, int64_t n, const void *w, const void *act) {
    const BlockQ3_K *x = w;
    const BlockQ8_K *y = act;
    KInt k;
    if (path == DOT_FAST) {
        float acc = 0;
        for (int64_t i = 0; i < n / QK_K; i++) {
            decode_q3_K(&x[i], &k);
            acc = fmaf((float)span(&k, y[i].qs, 0, QK_K), fp16_to_fp32(x[i].d) * y[i].d, acc);
        }
        return acc;
    }
    float acc[8] = {0};
    int32_t lane[8];
    for (int64_t i = 0; i < n / QK_K; i++) {
        decode_q3_K(&x[i], &k);
        lanes8(&k, y[i].qs, lane);
        fma_lanes(acc, y[i].d * fp16_to_fp32(x[i].d), lane);
    }
    return quant_hsum8(acc);
}

/* ---- Q4_K ----------------------------------------------------------------------------------------
 * vec_dot: acc[l] += d8·d·lane[l]; a second, 4-lane accumulator takes the minimums, lane j getting
 * dmin'·(m[2j]·(bs[4j]+bs[4j+1]) + m[2j+1]·(bs[4j+2]+bs[4j+3])), dmin' = -d8·dmin; the result is
 * hsum_float_8(acc) + ((am0 + am2) + (am1 + am3)).
 * Repacked: 64-element spans in gemm. */
float dot_path_q4_K(DotPath path, int64_t n, const void *w, const void *act) {
    const BlockQ4_K *x = w;
    const BlockQ8_K *y = act;
    KInt k;
    uint8_t m16[16];
    if (path == DOT_REPACK || path == DOT_REPACK_GEMM || path == DOT_FAST) {
        float acc = 0, accm = 0;
        for (int64_t i = 0; i < n / QK_K; i++) {
            decode_q45_K(x[i].scales, x[i].qs, NULL, &k, m16);
            repack_dot(&k, m16, &y[i], fp16_to_fp32(x[i].d), fp16_to_fp32(x[i].dmin),
                       path == DOT_REPACK_GEMM ? 64 : QK_K, &acc, &accm);
        }
        return acc - accm;
    }
    float acc[8] = {0}, accm[4] = {0};
    int32_t lane[8];
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
        decode_q45_K(x[i].scales, x[i].qs, NULL, &k, m16);
        const int16_t *bs = y[i].bsums;
        for (int j = 0; j < 4; j++) {
            const int32_t prod = m16[4 * j] * (bs[4 * j] + bs[4 * j + 1]) + m16[4 * j + 2] * (bs[4 * j + 2] + bs[4 * j + 3]);
            accm[j] = fmaf(dmin, (float)prod, accm[j]);
        }
        lanes8(&k, y[i].qs, lane);
        fma_lanes(acc, d, lane);
    }
    return quant_hsum8(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

DotPath dot_path_q4_K_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    return repack_pick(rows, n_act, expert);
}

/* ---- Q5_K: vec_dot only: acc[l] += d8·d·lane[l]; the minimums go to one float, summs += dmin'·Σm·bs
 * (fused); result hsum_float_8(acc) + summs ----------------------------------------------------------- */
float dot_path_q5_K(DotPath path, int64_t n, const void *w, const void *act) {
    const BlockQ5_K *x = w;
    const BlockQ8_K *y = act;
    KInt k;
    uint8_t m16[16];
    if (path == DOT_FAST) {
        float acc = 0, accm = 0;
        for (int64_t i = 0; i < n / QK_K; i++) {
            decode_q45_K(x[i].scales, x[i].qs, x[i].qh, &k, m16);
            repack_dot(&k, m16, &y[i], fp16_to_fp32(x[i].d), fp16_to_fp32(x[i].dmin), QK_K, &acc, &accm);
        }
        return acc - accm;
    }
    float acc[8] = {0}, summs = 0;
    int32_t lane[8];
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = y[i].d * fp16_to_fp32(x[i].d);
        const float dmin = -y[i].d * fp16_to_fp32(x[i].dmin);
        decode_q45_K(x[i].scales, x[i].qs, x[i].qh, &k, m16);
        int32_t mins = 0;
        for (int g = 0; g < 16; g++) mins += m16[g] * y[i].bsums[g];
        summs = fmaf(dmin, (float)mins, summs);
        lanes8(&k, y[i].qs, lane);
        fma_lanes(acc, d, lane);
    }
    return quant_hsum8(acc) + summs;
}

/* ---- Q6_K: vec_dot only. The lanes multiply the unsigned 6-bit values; lane l then subtracts
 * 32·(bs[2l]·sc[2l] + bs[2l+1]·sc[2l+1]) (a different set of elements than its own); acc[l] += d8·d·lane[l];
 * hsum_float_8 ------------------------------------------------------------------------------------- */
float dot_path_q6_K(DotPath path, int64_t n, const void *w, const void *act) {
    const BlockQ6_K *x = w;
    const BlockQ8_K *y = act;
    KInt k;
    if (path == DOT_FAST) {
        float acc = 0;
        for (int64_t i = 0; i < n / QK_K; i++) {
            decode_q6_K(&x[i], &k);
            int32_t s = span(&k, y[i].qs, 0, QK_K);
            for (int g = 0; g < 16; g++) s -= 32 * k.sc[g] * y[i].bsums[g];
            acc = fmaf((float)s, fp16_to_fp32(x[i].d) * y[i].d, acc);
        }
        return acc;
    }
    float acc[8] = {0};
    int32_t lane[8];
    for (int64_t i = 0; i < n / QK_K; i++) {
        decode_q6_K(&x[i], &k);
        lanes8(&k, y[i].qs, lane);
        for (int l = 0; l < 8; l++)
            lane[l] -= 32 * (y[i].bsums[2 * l] * k.sc[2 * l] + y[i].bsums[2 * l + 1] * k.sc[2 * l + 1]);
        fma_lanes(acc, y[i].d * fp16_to_fp32(x[i].d), lane);
    }
    return quant_hsum8(acc);
}
