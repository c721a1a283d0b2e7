/* quant_iq.c — the i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M and the non-linear
 * IQ4_NL, IQ4_XS: dequantization (bit-identical to ggml's to_float), reference dot products with the
 * Q8_K (IQ4_NL: Q8_0) activation row, and weight quantizers for IQ4_NL / IQ4_XS only.
 *
 * The IQ2/IQ3/IQ1 formats store indices into lattice grids (iq_tables.c) plus sign patterns; grid bytes
 * are magnitudes. Their sub-block scales are odd integers (2s+1) times a power of two, so the dot products
 * sum q8·grid·sign per sub-block in integers, weight by 2s+1, and apply d·d8 and the power of two once per
 * super-block. Quantizers for these grid formats need ggml's lattice search and an importance matrix;
 * deltallm reads such files but does not write them. */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/iq_tables.h"
#include "gguf/quant_blocks.h"

#include <math.h>
#include <string.h>

static inline float sign_f(uint8_t signs, int j) { return signs >> j & 1 ? -1.f : 1.f; }
static inline int sign_i(uint8_t signs, int j) { return signs >> j & 1 ? -1 : 1; }

/* ---- IQ2_XXS ------------------------------------------------------------------------------------
 * | d:f16 | qs: 8 sub-blocks × (a0:u32, a1:u32) |                                                66 B
 * Sub-block b, group l ∈ [0,4) of 8: magnitudes iq2xxs_grid[byte l of a0], signs
 * ksigns_iq2xs[(a1 >> 7l) & 127]; scale s = a1 >> 28:   y = (d·(0.5 + s)·0.25)·grid·sign */
void dequant_iq2_xxs(const void *src, float *dst, int64_t n) {
    const BlockIQ2_XXS *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        const uint8_t *qs = (const uint8_t *)x[i].qs;
        for (int b = 0; b < QK_K / 32; b++) {
            const uint32_t a0 = quant_load_u32(qs + 8 * b), a1 = quant_load_u32(qs + 8 * b + 4);
            const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = iq2xxs_grid[(a0 >> (8 * l)) & 255];
                const uint8_t signs = ksigns_iq2xs[(a1 >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) *dst++ = db * (float)quant_grid_u8(g, j) * sign_f(signs, j);
            }
        }
    }
}

float vec_dot_iq2_xxs(int64_t n, const void *w, const void *act) {
    const BlockIQ2_XXS *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *qs = (const uint8_t *)x[i].qs;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            const uint32_t a0 = quant_load_u32(qs + 8 * b), a1 = quant_load_u32(qs + 8 * b + 4);
            int si = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint64_t g = iq2xxs_grid[(a0 >> (8 * l)) & 255];
                const uint8_t signs = ksigns_iq2xs[(a1 >> (7 * l)) & 127];
                for (int j = 0; j < 8; j++) si += q8[j] * quant_grid_u8(g, j) * sign_i(signs, j);
            }
            bsum += si * (int)(2 * (a1 >> 28) + 1);
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.125f * sum; /* (0.5 + s)·0.25 = (2s+1)/8 */
}

/* ---- IQ2_XS -------------------------------------------------------------------------------------
 * | d:f16 | qs:u16[32] | scales[8] |                                                             74 B
 * qs[4b + l] (sub-block b, group l): grid index = low 9 bits (iq2xs_grid), sign index = top 7 bits.
 * scales[b]: low nibble for groups 0-1, high nibble for groups 2-3:   y = (d·(0.5 + s)·0.25)·grid·sign */
void dequant_iq2_xs(const void *src, float *dst, int64_t n) {
    const BlockIQ2_XS *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int b = 0; b < QK_K / 32; b++) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[b] & 15)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[b] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const uint16_t v = x[i].qs[4 * b + l];
                const uint64_t g = iq2xs_grid[v & 511];
                const uint8_t signs = ksigns_iq2xs[v >> 9];
                for (int j = 0; j < 8; j++) *dst++ = db[l / 2] * (float)quant_grid_u8(g, j) * sign_f(signs, j);
            }
        }
    }
}

float vec_dot_iq2_xs(int64_t n, const void *w, const void *act) {
    const BlockIQ2_XS *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            for (int half = 0; half < 2; half++) {
                int si = 0;
                for (int l = 2 * half; l < 2 * half + 2; l++, q8 += 8) {
                    const uint16_t v = x[i].qs[4 * b + l];
                    const uint64_t g = iq2xs_grid[v & 511];
                    const uint8_t signs = ksigns_iq2xs[v >> 9];
                    for (int j = 0; j < 8; j++) si += q8[j] * quant_grid_u8(g, j) * sign_i(signs, j);
                }
                bsum += si * (2 * ((x[i].scales[b] >> (4 * half)) & 15) + 1);
            }
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.125f * sum;
}

/* ---- IQ2_S --------------------------------------------------------------------------------------
 * | d:f16 | qs[32] grid index low bytes | signs[32] | qh[8] | scales[8] |                         82 B
 * Sub-block b, group l: index = qs[4b + l] | ((qh[b] >> 2l) & 3) << 8 into iq2s_grid, signs byte
 * signs[4b + l] (explicit bits, no parity); scales as IQ2_XS:   y = (d·(0.5 + s)·0.25)·grid·sign */
static inline uint64_t iq2s_entry(const BlockIQ2_S *x, int b, int l) {
    return iq2s_grid[x->qs[4 * b + l] | ((x->qh[b] << (8 - 2 * l)) & 0x300)];
}

void dequant_iq2_s(const void *src, float *dst, int64_t n) {
    const BlockIQ2_S *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        const uint8_t *signs = x[i].qs + QK_K / 8;
        for (int b = 0; b < QK_K / 32; b++) {
            const float db[2] = {d * (0.5f + (float)(x[i].scales[b] & 15)) * 0.25f,
                                 d * (0.5f + (float)(x[i].scales[b] >> 4)) * 0.25f};
            for (int l = 0; l < 4; l++) {
                const uint64_t g = iq2s_entry(&x[i], b, l);
                for (int j = 0; j < 8; j++)
                    *dst++ = db[l / 2] * (float)quant_grid_u8(g, j) * sign_f(signs[4 * b + l], j);
            }
        }
    }
}

float vec_dot_iq2_s(int64_t n, const void *w, const void *act) {
    const BlockIQ2_S *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *signs = x[i].qs + QK_K / 8;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            for (int half = 0; half < 2; half++) {
                int si = 0;
                for (int l = 2 * half; l < 2 * half + 2; l++, q8 += 8) {
                    const uint64_t g = iq2s_entry(&x[i], b, l);
                    for (int j = 0; j < 8; j++) si += q8[j] * quant_grid_u8(g, j) * sign_i(signs[4 * b + l], j);
                }
                bsum += si * (2 * ((x[i].scales[b] >> (4 * half)) & 15) + 1);
            }
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.125f * sum;
}

/* ---- IQ3_XXS ------------------------------------------------------------------------------------
 * | d:f16 | qs[64] grid indices | 8 × w:u32 scale+signs |                                       98 B
 * Sub-block b, group l: magnitudes iq3xxs_grid[qs[8b + 2l]] (4) and iq3xxs_grid[qs[8b + 2l + 1]] (4),
 * signs ksigns_iq2xs[(w >> 7l) & 127], scale s = w >> 28:   y = (d·(0.5 + s)·0.5)·grid·sign */
void dequant_iq3_xxs(const void *src, float *dst, int64_t n) {
    const BlockIQ3_XXS *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        const uint8_t *qs = x[i].qs;
        for (int b = 0; b < QK_K / 32; b++) {
            const uint32_t w = quant_load_u32(qs + QK_K / 4 + 4 * b);
            const float db = d * (0.5f + (float)(w >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t signs = ksigns_iq2xs[(w >> (7 * l)) & 127];
                const uint32_t g1 = iq3xxs_grid[qs[8 * b + 2 * l]], g2 = iq3xxs_grid[qs[8 * b + 2 * l + 1]];
                for (int j = 0; j < 4; j++) dst[j] = db * (float)quant_grid_u8(g1, j) * sign_f(signs, j);
                for (int j = 0; j < 4; j++) dst[j + 4] = db * (float)quant_grid_u8(g2, j) * sign_f(signs, j + 4);
                dst += 8;
            }
        }
    }
}

float vec_dot_iq3_xxs(int64_t n, const void *w, const void *act) {
    const BlockIQ3_XXS *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const uint8_t *qs = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            const uint32_t sw = quant_load_u32(qs + QK_K / 4 + 4 * b);
            int si = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint8_t signs = ksigns_iq2xs[(sw >> (7 * l)) & 127];
                const uint32_t g1 = iq3xxs_grid[qs[8 * b + 2 * l]], g2 = iq3xxs_grid[qs[8 * b + 2 * l + 1]];
                for (int j = 0; j < 4; j++) {
                    si += q8[j] * quant_grid_u8(g1, j) * sign_i(signs, j);
                    si += q8[j + 4] * quant_grid_u8(g2, j) * sign_i(signs, j + 4);
                }
            }
            bsum += si * (int)(2 * (sw >> 28) + 1);
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return 0.25f * sum; /* (0.5 + s)·0.5 = (2s+1)/4 */
}

/* ---- IQ3_S --------------------------------------------------------------------------------------
 * | d:f16 | qs[64] | qh[8] | signs[32] | scales[4] |                                             110 B
 * Sub-block b, group l: indices qs[8b + 2l] | bit 2l of qh[b] << 8 and qs[8b + 2l + 1] | bit 2l+1 << 8
 * into iq3s_grid (4 magnitudes each), explicit sign bits signs[4b + l]; scale s = nibble b%2 of
 * scales[b/2]:   y = (d·(1 + 2s))·grid·sign */
static inline void iq3s_entries(const BlockIQ3_S *x, int b, int l, uint32_t *g1, uint32_t *g2) {
    const uint8_t *qs = x->qs + 8 * b;
    *g1 = iq3s_grid[qs[2 * l] | ((x->qh[b] << (8 - 2 * l)) & 256)];
    *g2 = iq3s_grid[qs[2 * l + 1] | ((x->qh[b] << (7 - 2 * l)) & 256)];
}

void dequant_iq3_s(const void *src, float *dst, int64_t n) {
    const BlockIQ3_S *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int b = 0; b < QK_K / 32; b++) {
            const float db = d * (float)(1 + 2 * ((x[i].scales[b / 2] >> (4 * (b % 2))) & 15));
            for (int l = 0; l < 4; l++) {
                uint32_t g1, g2;
                iq3s_entries(&x[i], b, l, &g1, &g2);
                const uint8_t signs = x[i].signs[4 * b + l];
                for (int j = 0; j < 4; j++) dst[j] = db * (float)quant_grid_u8(g1, j) * sign_f(signs, j);
                for (int j = 0; j < 4; j++) dst[j + 4] = db * (float)quant_grid_u8(g2, j) * sign_f(signs, j + 4);
                dst += 8;
            }
        }
    }
}

float vec_dot_iq3_s(int64_t n, const void *w, const void *act) {
    const BlockIQ3_S *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = y[i].qs;
        int bsum = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            int si = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                uint32_t g1, g2;
                iq3s_entries(&x[i], b, l, &g1, &g2);
                const uint8_t signs = x[i].signs[4 * b + l];
                for (int j = 0; j < 4; j++) {
                    si += q8[j] * quant_grid_u8(g1, j) * sign_i(signs, j);
                    si += q8[j + 4] * quant_grid_u8(g2, j) * sign_i(signs, j + 4);
                }
            }
            bsum += si * (1 + 2 * ((x[i].scales[b / 2] >> (4 * (b % 2))) & 15));
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)bsum;
    }
    return sum;
}

/* ---- IQ1_S --------------------------------------------------------------------------------------
 * | d:f16 | qs[32] | qh:u16[8] |                                                                 50 B
 * Sub-block b, group l: index qs[4b + l] | ((qh[b] >> 3l) & 7) << 8 into iq1s_grid (values -1, 0, 1);
 * scale s = (qh[b] >> 12) & 7, delta = ±IQ1S_DELTA (minus if qh[b] bit 15):
 * y = (d·(2s + 1))·(grid + delta) */
static inline uint64_t iq1s_entry(const uint8_t *qs, uint16_t qh, int l) {
    return iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
}
static inline int8_t grid_i8(uint64_t entry, int j) { return (int8_t)quant_grid_u8(entry, j); }

void dequant_iq1_s(const void *src, float *dst, int64_t n) {
    const BlockIQ1_S *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int b = 0; b < QK_K / 32; b++) {
            const uint16_t qh = x[i].qh[b];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -IQ1S_DELTA : IQ1S_DELTA;
            for (int l = 0; l < 4; l++) {
                const uint64_t g = iq1s_entry(x[i].qs + 4 * b, qh, l);
                for (int j = 0; j < 8; j++) *dst++ = dl * ((float)grid_i8(g, j) + delta);
            }
        }
    }
}

/* Σ (grid + δ)·q8 = Σ grid·q8 + δ·Σ q8, and Σ q8 over a sub-block of 32 is two Q8_K bsums. */
float vec_dot_iq1_s(int64_t n, const void *w, const void *act) {
    const BlockIQ1_S *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *q8 = y[i].qs;
        int sumi = 0, sumd = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            const uint16_t qh = x[i].qh[b];
            const int ls = 2 * ((qh >> 12) & 7) + 1, sign = qh & 0x8000 ? -1 : 1;
            int si = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint64_t g = iq1s_entry(x[i].qs + 4 * b, qh, l);
                for (int j = 0; j < 8; j++) si += q8[j] * grid_i8(g, j);
            }
            sumi += ls * si;
            sumd += ls * sign * (y[i].bsums[2 * b] + y[i].bsums[2 * b + 1]);
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * ((float)sumi + IQ1S_DELTA * (float)sumd);
    }
    return sum;
}

/* ---- IQ1_M --------------------------------------------------------------------------------------
 * | qs[32] | qh[16] | scales[8] = sc:u16[4] |                                                    56 B
 * The fp16 super-block scale d is the top nibbles of sc[0..3] (sc[0] bits 12-15 → bits 0-3, sc[1] → 4-7,
 * sc[2] → 8-11, sc[3] → 12-15). Sub-block b has two 3-bit scales in sc[b/2] at bits 6(b%2) (groups 0-1)
 * and 6(b%2)+3 (groups 2-3). Group l: index qs[4b + l] | (qh[2b + l/2] >> 4(l%2) & 7) << 8, delta sign
 * bit 3 of that nibble:   y = (d·(2s + 1))·(grid + delta) */
static inline void iq1m_scales(const BlockIQ1_M *x, uint16_t sc[4]) {
    for (int k = 0; k < 4; k++) sc[k] = (uint16_t)(x->scales[2 * k] | x->scales[2 * k + 1] << 8);
}
static inline float iq1m_d(const uint16_t sc[4]) {
    const int bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000);
    return fp16_to_fp32((uint16_t)bits);
}
static inline uint64_t iq1m_entry(const BlockIQ1_M *x, int b, int l, int *sign) {
    const int nib = (x->qh[2 * b + l / 2] >> (4 * (l % 2))) & 15;
    *sign = nib & 8 ? -1 : 1;
    return iq1s_grid[x->qs[4 * b + l] | (nib & 7) << 8];
}

void dequant_iq1_m(const void *src, float *dst, int64_t n) {
    const BlockIQ1_M *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        iq1m_scales(&x[i], sc);
        const float d = iq1m_d(sc);
        for (int b = 0; b < QK_K / 32; b++) {
            const float dl[2] = {d * (float)(2 * ((sc[b / 2] >> (6 * (b % 2))) & 7) + 1),
                                 d * (float)(2 * ((sc[b / 2] >> (6 * (b % 2) + 3)) & 7) + 1)};
            for (int l = 0; l < 4; l++) {
                int sign;
                const uint64_t g = iq1m_entry(&x[i], b, l, &sign);
                const float delta = sign < 0 ? -IQ1M_DELTA : IQ1M_DELTA;
                for (int j = 0; j < 8; j++) *dst++ = dl[l / 2] * ((float)grid_i8(g, j) + delta);
            }
        }
    }
}

float vec_dot_iq1_m(int64_t n, const void *w, const void *act) {
    const BlockIQ1_M *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        iq1m_scales(&x[i], sc);
        const int8_t *q8 = y[i].qs;
        int sumi = 0, sumd = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            for (int half = 0; half < 2; half++) {
                const int ls = 2 * ((sc[b / 2] >> (6 * (b % 2) + 3 * half)) & 7) + 1;
                int si = 0, sd = 0;
                for (int l = 2 * half; l < 2 * half + 2; l++, q8 += 8) {
                    int sign, s8 = 0;
                    const uint64_t g = iq1m_entry(&x[i], b, l, &sign);
                    for (int j = 0; j < 8; j++) {
                        si += q8[j] * grid_i8(g, j);
                        s8 += q8[j];
                    }
                    sd += sign * s8;
                }
                sumi += ls * si;
                sumd += ls * sd;
            }
        }
        sum += iq1m_d(sc) * y[i].d * ((float)sumi + IQ1M_DELTA * (float)sumd);
    }
    return sum;
}

/* ---- IQ4_NL -------------------------------------------------------------------------------------
 * | d:f16 | qs[16] |                                                                             18 B
 * Nibbles as Q4_0 (element j: low nibble of qs[j], j+16: high nibble), each an index into the 16
 * non-linear levels kvalues_iq4nl:   y = d·kvalues[idx] */
void dequant_iq4_nl(const void *src, float *dst, int64_t n) {
    const BlockIQ4_NL *x = src;
    for (int64_t i = 0; i < n / QK; i++, dst += QK) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK / 2; j++) {
            dst[j] = d * (float)kvalues_iq4nl[x[i].qs[j] & 15];
            dst[j + QK / 2] = d * (float)kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

float vec_dot_iq4_nl(int64_t n, const void *w, const void *act) {
    const BlockIQ4_NL *x = w;
    const BlockQ8_0 *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK; i++) {
        int si = 0;
        for (int j = 0; j < QK / 2; j++)
            si += y[i].qs[j] * kvalues_iq4nl[x[i].qs[j] & 15] + y[i].qs[j + QK / 2] * kvalues_iq4nl[x[i].qs[j] >> 4];
        sum += fp16_to_fp32(y[i].d) * fp16_to_fp32(x[i].d) * (float)si;
    }
    return sum;
}

/* ---- IQ4_XS -------------------------------------------------------------------------------------
 * | d:f16 | scales_h:u16 | scales_l[4] | qs[128] |                                              136 B
 * Sub-block b of 32: 6-bit scale ls = nibble b%2 of scales_l[b/2] | ((scales_h >> 2b) & 3) << 4; its
 * 16 bytes qs[16b..] hold the indices as IQ4_NL does:   y = (d·(ls - 32))·kvalues[idx] */
static inline int iq4xs_scale(const BlockIQ4_XS *x, int b) {
    return (((x->scales_l[b / 2] >> (4 * (b % 2))) & 15) | ((x->scales_h >> (2 * b)) & 3) << 4) - 32;
}

void dequant_iq4_xs(const void *src, float *dst, int64_t n) {
    const BlockIQ4_XS *x = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = fp16_to_fp32(x[i].d);
        for (int b = 0; b < QK_K / 32; b++, dst += 32) {
            const float dl = d * (float)iq4xs_scale(&x[i], b);
            const uint8_t *qs = x[i].qs + 16 * b;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)kvalues_iq4nl[qs[j] & 15];
                dst[j + 16] = dl * (float)kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

float vec_dot_iq4_xs(int64_t n, const void *w, const void *act) {
    const BlockIQ4_XS *x = w;
    const BlockQ8_K *y = act;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int b = 0; b < QK_K / 32; b++) {
            const uint8_t *qs = x[i].qs + 16 * b;
            const int8_t *q8 = y[i].qs + 32 * b;
            int si = 0;
            for (int j = 0; j < 16; j++)
                si += q8[j] * kvalues_iq4nl[qs[j] & 15] + q8[j + 16] * kvalues_iq4nl[qs[j] >> 4];
            isum += iq4xs_scale(&x[i], b) * si;
        }
        sum += fp16_to_fp32(x[i].d) * y[i].d * (float)isum;
    }
    return sum;
}

/* ---- IQ4 quantizers -----------------------------------------------------------------------------
 * Not ggml's search (quantize_row_iq4_nl_impl); per 32 values: start from the scale that puts the
 * extreme value on the outermost level (-127), pick the nearest level for each value, then refit the
 * least-squares scale Σx·k/Σk² for those levels and keep whichever scale gives the smaller error. */

/* Nearest level index to v (in units of the scale). kvalues_iq4nl is sorted ascending. */
static int iq4_nearest(float v) {
    int best = 0;
    float err = fabsf(v - (float)kvalues_iq4nl[0]);
    for (int k = 1; k < 16; k++) {
        const float e = fabsf(v - (float)kvalues_iq4nl[k]);
        if (e < err) {
            err = e;
            best = k;
        }
    }
    return best;
}

/* Picks levels for x[0..31] at scale d; returns the squared error. */
static float iq4_assign(const float *x, float d, uint8_t idx[32]) {
    const float id = d != 0.f ? 1.f / d : 0.f;
    float err = 0;
    for (int j = 0; j < 32; j++) {
        idx[j] = (uint8_t)iq4_nearest(x[j] * id);
        const float e = x[j] - d * (float)kvalues_iq4nl[idx[j]];
        err += e * e;
    }
    return err;
}

/* The best float scale for one block of 32 (before the caller rounds it to its stored precision). */
static float iq4_block_scale(const float *x) {
    float amax = 0, ext = 0;
    for (int j = 0; j < 32; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            ext = x[j];
        }
    if (amax == 0.f) return 0.f;
    uint8_t idx[32];
    const float d0 = ext / (float)kvalues_iq4nl[0];
    const float e0 = iq4_assign(x, d0, idx);
    float sxk = 0, skk = 0;
    for (int j = 0; j < 32; j++) {
        sxk += x[j] * (float)kvalues_iq4nl[idx[j]];
        skk += (float)(kvalues_iq4nl[idx[j]] * kvalues_iq4nl[idx[j]]);
    }
    const float d1 = skk > 0 ? sxk / skk : d0;
    return iq4_assign(x, d1, idx) < e0 ? d1 : d0;
}

static void pack_iq4(uint8_t qs[16], const uint8_t idx[32]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(idx[j] | idx[j + 16] << 4);
}

void quantize_iq4_nl(const float *src, void *dst, int64_t n) {
    BlockIQ4_NL *y = dst;
    for (int64_t i = 0; i < n / QK; i++) {
        const float *x = src + i * QK;
        y[i].d = fp32_to_fp16(iq4_block_scale(x));
        uint8_t idx[32];
        iq4_assign(x, fp16_to_fp32(y[i].d), idx);
        pack_iq4(y[i].qs, idx);
    }
}

/* Super-block scale d = max|s_b|/31 (rounded to fp16), sub-block scales round(s_b/d) ∈ [-32, 31]. */
void quantize_iq4_xs(const float *src, void *dst, int64_t n) {
    BlockIQ4_XS *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float *x = src + i * QK_K;
        float s[8], max_s = 0;
        for (int b = 0; b < 8; b++) {
            s[b] = iq4_block_scale(x + 32 * b);
            max_s = fmaxf(max_s, fabsf(s[b]));
        }
        y[i].d = fp32_to_fp16(max_s / 31);
        const float d = fp16_to_fp32(y[i].d);
        y[i].scales_h = 0;
        memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int b = 0; b < 8; b++) {
            int ls = d > 0 ? quant_nearest_int(s[b] / d) : 0;
            ls = (ls < -32 ? -32 : ls > 31 ? 31 : ls) + 32;
            y[i].scales_l[b / 2] |= (uint8_t)((ls & 15) << (4 * (b % 2)));
            y[i].scales_h |= (uint16_t)((ls >> 4) << (2 * b));
            uint8_t idx[32];
            iq4_assign(x + 32 * b, d * (float)(ls - 32), idx);
            pack_iq4(y[i].qs + 16 * b, idx);
        }
    }
}
