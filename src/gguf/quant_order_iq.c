/* quant_order_iq.c — the 256-element i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M,
 * IQ4_XS) dot products in the summation order of llama.cpp v0.4.0's x86 CPU kernels, and its kernel
 * choice (docs/PARITY.md).
 *
 * vec_dot (ggml_vec_dot_*_q8_K, AVX2 code): eight int32 lanes, lane l collecting the products of the
 * elements e with (e mod 32) div 4 = l weighted by their integer sub-block scales; per super-block
 * acc[l] = fma(d·d8, (float)lane[l], acc[l]); then hsum_float_8 times the format's power of two
 * (IQ2: 1/8, IQ3_XXS: 1/4). IQ1_S and IQ1_M carry their ±1/8 offsets in extra accumulators.
 *
 * IQ panel gemm (iqp.cpp, ggml_cpu_iqp_supports_mul_mat[_id]): a mul_mat with ≥ 8 activation rows, or a
 * mul_mat_id expert with ≥ 8 rows routed to it, of a matrix with rows % 8 == 0 decodes the weights to
 * int8 values v and integer scales s per 16 (dfac·s·v is the dequantized weight) and sums a whole
 * super-block in integers S = Σ s·v·a; then one acc = fma((float)S, dfac·d8, acc) per super-block. Its
 * gemv and gemm kernels do the same arithmetic. DOT_FAST (deltallm's fast arithmetic) is that order. */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/iq_tables.h"
#include "gguf/quant_blocks.h"

#include <math.h>

/* A super-block as integers: q[e] the signed grid value (IQ1: the grid value in {-1,0,1}), delta[e]
 * IQ1's offset sign (±1; only the IQ1 decoders set it), sc[k] the integer scale of elements 16k..16k+15;
 * d the fp16 super-block scale, dfac the float scale of the panel kernel (dfac·sc·v, v = q, or 8q + delta
 * for IQ1, is the dequantized weight). */
typedef struct IqInt {
    int8_t q[QK_K];
    int8_t delta[QK_K];
    int16_t sc[QK_K / 16];
    float d, dfac;
} IqInt;

static inline int sgn(uint8_t signs, int j) { return signs >> j & 1 ? -1 : 1; }

/* ---- decoders (the layouts are described in quant_iq.c) ------------------------------------------ */

static void decode_iq2_xxs(const BlockIQ2_XXS *b, IqInt *k) {
    const uint8_t *qs = (const uint8_t *)b->qs;
    for (int sb = 0; sb < 8; sb++) {
        const uint32_t a0 = quant_load_u32(qs + 8 * sb), a1 = quant_load_u32(qs + 8 * sb + 4);
        k->sc[2 * sb] = k->sc[2 * sb + 1] = (int16_t)(2 * (a1 >> 28) + 1);
        for (int l = 0; l < 4; l++) {
            const uint64_t g = iq2xxs_grid[(a0 >> (8 * l)) & 255];
            const uint8_t signs = ksigns_iq2xs[(a1 >> (7 * l)) & 127];
            for (int j = 0; j < 8; j++) k->q[32 * sb + 8 * l + j] = (int8_t)(quant_grid_u8(g, j) * sgn(signs, j));
        }
    }
    k->d = fp16_to_fp32(b->d);
    k->dfac = k->d * 0.125f;
}

static void decode_iq2_xs(const BlockIQ2_XS *b, IqInt *k) {
    for (int sb = 0; sb < 8; sb++) {
        k->sc[2 * sb] = (int16_t)(2 * (b->scales[sb] & 15) + 1);
        k->sc[2 * sb + 1] = (int16_t)(2 * (b->scales[sb] >> 4) + 1);
        for (int l = 0; l < 4; l++) {
            const uint16_t v = b->qs[4 * sb + l];
            const uint64_t g = iq2xs_grid[v & 511];
            const uint8_t signs = ksigns_iq2xs[v >> 9];
            for (int j = 0; j < 8; j++) k->q[32 * sb + 8 * l + j] = (int8_t)(quant_grid_u8(g, j) * sgn(signs, j));
        }
    }
    k->d = fp16_to_fp32(b->d);
    k->dfac = k->d * 0.125f;
}

static void decode_iq2_s(const BlockIQ2_S *b, IqInt *k) {
    const uint8_t *signs = b->qs + QK_K / 8;
    for (int sb = 0; sb < 8; sb++) {
        k->sc[2 * sb] = (int16_t)(2 * (b->scales[sb] & 15) + 1);
        k->sc[2 * sb + 1] = (int16_t)(2 * (b->scales[sb] >> 4) + 1);
        for (int l = 0; l < 4; l++) {
            const uint64_t g = iq2s_grid[b->qs[4 * sb + l] | ((b->qh[sb] << (8 - 2 * l)) & 0x300)];
            for (int j = 0; j < 8; j++)
                k->q[32 * sb + 8 * l + j] = (int8_t)(quant_grid_u8(g, j) * sgn(signs[4 * sb + l], j));
        }
    }
    k->d = fp16_to_fp32(b->d);
    k->dfac = k->d * 0.125f;
}

static void decode_iq3_xxs(const BlockIQ3_XXS *b, IqInt *k) {
    const uint8_t *qs = b->qs;
    for (int sb = 0; sb < 8; sb++) {
        const uint32_t w = quant_load_u32(qs + QK_K / 4 + 4 * sb);
        k->sc[2 * sb] = k->sc[2 * sb + 1] = (int16_t)(2 * (w >> 28) + 1);
        for (int l = 0; l < 4; l++) {
            const uint8_t signs = ksigns_iq2xs[(w >> (7 * l)) & 127];
            const uint32_t g1 = iq3xxs_grid[qs[8 * sb + 2 * l]], g2 = iq3xxs_grid[qs[8 * sb + 2 * l + 1]];
            int8_t *q = k->q + 32 * sb + 8 * l;
            for (int j = 0; j < 4; j++) {
                q[j] = (int8_t)(quant_grid_u8(g1, j) * sgn(signs, j));
                q[j + 4] = (int8_t)(quant_grid_u8(g2, j) * sgn(signs, j + 4));
            }
        }
    }
    k->d = fp16_to_fp32(b->d);
    k->dfac = k->d * 0.25f;
}

static void decode_iq3_s(const BlockIQ3_S *b, IqInt *k) {
    for (int sb = 0; sb < 8; sb++) {
        k->sc[2 * sb] = k->sc[2 * sb + 1] = (int16_t)(1 + 2 * ((b->scales[sb / 2] >> (4 * (sb % 2))) & 15));
        const uint8_t *qs = b->qs + 8 * sb;
        for (int l = 0; l < 4; l++) {
            const uint32_t g1 = iq3s_grid[qs[2 * l] | ((b->qh[sb] << (8 - 2 * l)) & 256)];
            const uint32_t g2 = iq3s_grid[qs[2 * l + 1] | ((b->qh[sb] << (7 - 2 * l)) & 256)];
            const uint8_t signs = b->signs[4 * sb + l];
            int8_t *q = k->q + 32 * sb + 8 * l;
            for (int j = 0; j < 4; j++) {
                q[j] = (int8_t)(quant_grid_u8(g1, j) * sgn(signs, j));
                q[j + 4] = (int8_t)(quant_grid_u8(g2, j) * sgn(signs, j + 4));
            }
        }
    }
    k->d = k->dfac = fp16_to_fp32(b->d);
}

static void decode_iq1_s(const BlockIQ1_S *b, IqInt *k) {
    for (int sb = 0; sb < 8; sb++) {
        const uint16_t qh = b->qh[sb];
        k->sc[2 * sb] = k->sc[2 * sb + 1] = (int16_t)(2 * ((qh >> 12) & 7) + 1);
        const int8_t delta = qh & 0x8000 ? -1 : 1;
        for (int l = 0; l < 4; l++) {
            const uint64_t g = iq1s_grid[b->qs[4 * sb + l] | (((qh >> (3 * l)) & 7) << 8)];
            for (int j = 0; j < 8; j++) {
                k->q[32 * sb + 8 * l + j] = (int8_t)quant_grid_u8(g, j);
                k->delta[32 * sb + 8 * l + j] = delta;
            }
        }
    }
    k->d = fp16_to_fp32(b->d);
    k->dfac = k->d * 0.125f;
}

/* IQ1_M's fp16 super-block scale, spread over the top nibbles of its four scale words */
static float iq1m_d(const uint16_t sc[4]) {
    return fp16_to_fp32((uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000)));
}

static void decode_iq1_m(const BlockIQ1_M *b, IqInt *k) {
    uint16_t sc[4];
    for (int i = 0; i < 4; i++) sc[i] = (uint16_t)(b->scales[2 * i] | b->scales[2 * i + 1] << 8);
    for (int sb = 0; sb < 8; sb++) {
        for (int half = 0; half < 2; half++)
            k->sc[2 * sb + half] = (int16_t)(2 * ((sc[sb / 2] >> (6 * (sb % 2) + 3 * half)) & 7) + 1);
        for (int l = 0; l < 4; l++) {
            const int nib = (b->qh[2 * sb + l / 2] >> (4 * (l % 2))) & 15;
            const uint64_t g = iq1s_grid[b->qs[4 * sb + l] | (nib & 7) << 8];
            for (int j = 0; j < 8; j++) {
                k->q[32 * sb + 8 * l + j] = (int8_t)quant_grid_u8(g, j);
                k->delta[32 * sb + 8 * l + j] = nib & 8 ? -1 : 1;
            }
        }
    }
    k->d = iq1m_d(sc);
    k->dfac = k->d * 0.125f;
}

static void decode_iq4_xs(const BlockIQ4_XS *b, IqInt *k) {
    for (int sb = 0; sb < 8; sb++) {
        const int ls = (((b->scales_l[sb / 2] >> (4 * (sb % 2))) & 15) | ((b->scales_h >> (2 * sb)) & 3) << 4) - 32;
        k->sc[2 * sb] = k->sc[2 * sb + 1] = (int16_t)ls;
        const uint8_t *qs = b->qs + 16 * sb;
        for (int j = 0; j < 16; j++) {
            k->q[32 * sb + j] = kvalues_iq4nl[qs[j] & 15];
            k->q[32 * sb + j + 16] = kvalues_iq4nl[qs[j] >> 4];
        }
    }
    k->d = k->dfac = fp16_to_fp32(b->d);
}

/* ---- the two orders ------------------------------------------------------------------------------ */

/* lane[l] = Σ sc·q·a over the elements of lane l; with iq1 also dlane[l] = Σ sc·delta·a */
static void lanes8(const IqInt *k, const int8_t *a, bool iq1, int32_t lane[8], int32_t dlane[8]) {
    for (int l = 0; l < 8; l++) lane[l] = dlane[l] = 0;
    for (int e = 0; e < QK_K; e++) lane[(e >> 2) & 7] += k->sc[e >> 4] * k->q[e] * a[e];
    if (iq1)
        for (int e = 0; e < QK_K; e++) dlane[(e >> 2) & 7] += k->sc[e >> 4] * k->delta[e] * a[e];
}

/* The panel kernel's integer sum of a super-block: Σ sc·v·a with v = q (IQ1: 8q + delta). */
static int32_t panel_sum(const IqInt *k, const int8_t *a, bool iq1) {
    int32_t s = 0;
    for (int e = 0; e < QK_K; e++) s += k->sc[e >> 4] * (iq1 ? 8 * k->q[e] + k->delta[e] : k->q[e]) * a[e];
    return s;
}

/* IQ1_S and IQ1_M keep their ±1/8 offsets apart in the vec_dot, each in its own way */
typedef enum IqKind { IQ_PLAIN, IQ_IQ1S, IQ_IQ1M } IqKind;
typedef void (*IqDecode)(const void *block, IqInt *k);

/* One dot product over n / 256 super-blocks of `bytes` bytes each, decoded by dec, in the order of the
 * panel gemm (DOT_GEMM) or of the vec_dot (every other path). `post` is the vec_dot's final factor (1/8,
 * 1/4 or 1). */
static float iq_dot(DotPath path, int64_t n, const uint8_t *w, int bytes, const BlockQ8_K *y, IqDecode dec, float post,
                    IqKind kind) {
    IqInt k;
    const int64_t nb = n / QK_K;
    if (path == DOT_GEMM || path == DOT_FAST) { /* IQ panel gemm */
        float acc = 0;
        for (int64_t i = 0; i < nb; i++) {
            dec(w + i * bytes, &k);
            acc = fmaf((float)panel_sum(&k, y[i].qs, kind != IQ_PLAIN), k.dfac * y[i].d, acc);
        }
        return acc;
    }
    float acc[8] = {0}, acc2[8] = {0}, acc1 = 0;
    int32_t lane[8], dlane[8];
    for (int64_t i = 0; i < nb; i++) {
        dec(w + i * bytes, &k);
        lanes8(&k, y[i].qs, kind != IQ_PLAIN, lane, dlane);
        const float d = k.d * y[i].d;
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)lane[l], acc[l]);
        if (kind == IQ_IQ1S) { /* Σ over sub-blocks of (bs[2b] + bs[2b+1])·delta·sc, one fused step per block */
            int32_t s1 = 0;
            for (int sb = 0; sb < 8; sb++)
                s1 += (y[i].bsums[2 * sb] + y[i].bsums[2 * sb + 1]) * k.delta[32 * sb] * k.sc[2 * sb];
            acc1 = fmaf(d, (float)s1, acc1);
        } else if (kind == IQ_IQ1M) {
            for (int l = 0; l < 8; l++) acc2[l] = fmaf(d, (float)dlane[l], acc2[l]);
        }
    }
    switch (kind) {
    case IQ_IQ1S: return quant_hsum8(acc) + IQ1S_DELTA * acc1;
    case IQ_IQ1M: return fmaf(IQ1M_DELTA, quant_hsum8(acc2), quant_hsum8(acc));
    default: return post * quant_hsum8(acc);
    }
}

/* ggml_cpu_iqp_supports_mul_mat / _id: rows % 8 == 0 (row length a multiple of 256 by construction), and
 * ≥ 8 activation rows (per expert for mul_mat_id). */
static DotPath iq_pick(int64_t rows, int64_t n_act, bool expert) {
    if (rows % 8 == 0 && n_act >= 8) return DOT_GEMM;
    return expert ? DOT_ID : DOT_GEMV;
}

/* ---- the table's entry points -------------------------------------------------------------------- */

static void dec_iq2_xxs(const void *b, IqInt *k) { decode_iq2_xxs((const BlockIQ2_XXS *)b, k); }
float dot_path_iq2_xxs(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ2_XXS), act, dec_iq2_xxs, 0.125f, IQ_PLAIN);
}
DotPath dot_path_iq2_xxs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }

static void dec_iq2_xs(const void *b, IqInt *k) { decode_iq2_xs((const BlockIQ2_XS *)b, k); }
float dot_path_iq2_xs(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ2_XS), act, dec_iq2_xs, 0.125f, IQ_PLAIN);
}
DotPath dot_path_iq2_xs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }

static void dec_iq2_s(const void *b, IqInt *k) { decode_iq2_s((const BlockIQ2_S *)b, k); }
float dot_path_iq2_s(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ2_S), act, dec_iq2_s, 0.125f, IQ_PLAIN);
}
DotPath dot_path_iq2_s_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }

static void dec_iq3_xxs(const void *b, IqInt *k) { decode_iq3_xxs((const BlockIQ3_XXS *)b, k); }
float dot_path_iq3_xxs(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ3_XXS), act, dec_iq3_xxs, 0.25f, IQ_PLAIN);
}
DotPath dot_path_iq3_xxs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }

static void dec_iq3_s(const void *b, IqInt *k) { decode_iq3_s((const BlockIQ3_S *)b, k); }
float dot_path_iq3_s(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ3_S), act, dec_iq3_s, 1.f, IQ_PLAIN);
}
DotPath dot_path_iq3_s_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }

static void dec_iq1_s(const void *b, IqInt *k) { decode_iq1_s((const BlockIQ1_S *)b, k); }
float dot_path_iq1_s(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ1_S), act, dec_iq1_s, 1.f, IQ_IQ1S);
}
DotPath dot_path_iq1_s_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }

static void dec_iq1_m(const void *b, IqInt *k) { decode_iq1_m((const BlockIQ1_M *)b, k); }
float dot_path_iq1_m(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ1_M), act, dec_iq1_m, 1.f, IQ_IQ1M);
}
DotPath dot_path_iq1_m_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }

static void dec_iq4_xs(const void *b, IqInt *k) { decode_iq4_xs((const BlockIQ4_XS *)b, k); }
float dot_path_iq4_xs(DotPath path, int64_t n, const void *w, const void *act) {
    return iq_dot(path, n, w, (int)sizeof(BlockIQ4_XS), act, dec_iq4_xs, 1.f, IQ_PLAIN);
}
DotPath dot_path_iq4_xs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert) { return iq_pick(rows, n_act, expert); }
