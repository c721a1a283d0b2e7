/* quant_ggml.c — ggml-identical weight quantizers for the K-quants and IQ4_NL / IQ4_XS (quant_ggml.h).
 *
 * Each super-block is fitted in two stages, as ggml does: a per-sub-block search for a scale (and, for
 * the "min" types, an offset) that minimises a weighted squared error, then the sub-block scales are
 * themselves quantized against one fp16 super-scale and every element is re-rounded with the scale the
 * decoder will actually see. The searches try a fixed fan of candidate inverse scales around the
 * range-based one and keep the best by the same comparison ggml makes, so ties resolve identically. */
#include "quantize/quant_ggml.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "base/fp16.h"
#include "gguf/iq_tables.h"
#include "gguf/quant.h"
#include "gguf/quant_blocks.h"

#define TINY 1e-15f /* below this amax a group is all zero */

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* round to nearest, ties to even, via the 1.5·2^23 bias (|v| ≤ 2^22) */
static inline int round_int(float v) {
    float biased = v + 12582912.f;
    int32_t bits;
    memcpy(&bits, &biased, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

/* The start both symmetric fits share: the value of largest magnitude (peak), levels round(−nmax·x/peak)
 * clamped to [−nmax, nmax−1] stored + offset in q, and their x²-weighted sums Σw·x·l, Σw·l². False (q
 * zeroed) for an all-zero group. */
static bool symmetric_start(int n, int nmax, const float *x, int8_t *q, int offset, float *peak, float *sxl, float *sll) {
    float amax = 0;
    *peak = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) amax = a, *peak = x[i];
    }
    if (amax < TINY) {
        memset(q, 0, (size_t)n);
        return false;
    }
    const float inv = -nmax / *peak;
    *sxl = *sll = 0;
    for (int i = 0; i < n; i++) {
        int l = imax(-nmax, imin(nmax - 1, round_int(inv * x[i])));
        q[i] = (int8_t)(l + offset);
        float w = x[i] * x[i];
        *sxl += w * x[i] * l;
        *sll += w * l * l;
    }
    return true;
}

/* Symmetric fit of n values to integer levels [−nmax, nmax−1], weights x² (ggml's make_qx_quants with
 * rmse_type 1, no importance): returns the scale, writes levels + nmax to q. */
static float fit_symmetric(int n, int nmax, const float *x, int8_t *q) {
    float peak, sxl, sll;
    if (!symmetric_start(n, nmax, x, q, nmax, &peak, &sxl, &sll)) return 0.f;
    float scale = sll ? sxl / sll : 0.0f;
    float best = scale * sxl;
    for (int k = -9; k <= 9; k++) {
        if (k == 0) continue;
        const float inv = -(nmax + 0.1f * k) / peak;
        sxl = sll = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, round_int(inv * x[i])));
            float w = x[i] * x[i];
            sxl += w * x[i] * l;
            sll += w * l * l;
        }
        if (sll > 0 && sxl * sxl > best * sll) {
            for (int i = 0; i < n; i++) q[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, round_int(inv * x[i]))));
            scale = sxl / sll;
            best = scale * sxl;
        }
    }
    return scale;
}

/* Fit of n values to levels [0, nmax] with an offset ≤ 0 (ggml's make_qkx2_quants): x ≈ scale·q + min.
 * Candidates: inverse scales (rmin + rdelta·k + nmax)/(max − min), k = 0..steps; absolute error when
 * mad. Returns the scale; *neg_min = −min. */
static float fit_with_min(int n, int nmax, const float *x, const float *w, uint8_t *q, float *neg_min, float rmin,
                          float rdelta, int steps, bool mad) {
    float lo = x[0], hi = x[0];
    float sw = w[0];
    float sx = sw * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sw += w[i];
        sx += w[i] * x[i];
    }
    if (lo > 0) lo = 0;
    if (hi == lo) {
        memset(q, 0, (size_t)n);
        *neg_min = -lo;
        return 0.f;
    }
    float inv = nmax / (hi - lo);
    float scale = 1 / inv;
    float best_err = 0;
    for (int i = 0; i < n; i++) {
        q[i] = (uint8_t)imax(0, imin(nmax, round_int(inv * (x[i] - lo))));
        float d = scale * q[i] + lo - x[i];
        d = mad ? fabsf(d) : d * d;
        best_err += w[i] * d;
    }
    uint8_t trial[32];
    for (int k = 0; k <= steps; k++) {
        inv = (rmin + rdelta * k + nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, round_int(inv * (x[i] - lo))));
            trial[i] = (uint8_t)l;
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sxl += w[i] * l * x[i];
        }
        float det = sw * sl2 - sl * sl;
        if (det <= 0) continue;
        float s = (sw * sxl - sx * sl) / det;
        float m = (sl2 * sx - sl * sxl) / det;
        if (m > 0) {
            m = 0;
            s = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float d = s * trial[i] + m - x[i];
            d = mad ? fabsf(d) : d * d;
            err += w[i] * d;
        }
        if (err < best_err) {
            memcpy(q, trial, (size_t)n);
            best_err = err;
            scale = s;
            lo = m;
        }
    }
    *neg_min = -lo;
    return scale;
}

/* Q3_K's sub-block fit (ggml's make_q3_quants with its greedy refinement): levels [−nmax, nmax−1]. */
static float fit_q3(int n, int nmax, const float *x, int8_t *q) {
    float peak, sxl, sll;
    if (!symmetric_start(n, nmax, x, q, 0, &peak, &sxl, &sll)) return 0.f;
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sxl - w * x[i] * q[i];
            if (slx <= 0) continue;
            float sl2 = sll - w * q[i] * q[i];
            int nl = imax(-nmax, imin(nmax - 1, round_int(x[i] * sl2 / slx)));
            if (nl == q[i]) continue;
            slx += w * x[i] * nl;
            sl2 += w * nl * nl;
            if (sl2 > 0 && slx * slx * sll > sxl * sxl * sl2) {
                q[i] = (int8_t)nl;
                sxl = slx;
                sll = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) q[i] = (int8_t)(q[i] + nmax);
    return sll > 0.0f ? sxl / sll : 0.0f;
}

/* Packs the 8 six-bit (scale, min) pairs of Q4_K / Q5_K and reads them back. */
static void pack_scale_min(uint8_t *s, int j, uint8_t ls, uint8_t lm) {
    if (j < 4) {
        s[j] = ls;
        s[j + 4] = lm;
    } else {
        s[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
        s[j - 4] |= (uint8_t)((ls >> 4) << 6);
        s[j] |= (uint8_t)((lm >> 4) << 6);
    }
}
static void unpack_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Q4_K and Q5_K share everything but the level count and the search fan. Fills L[256] (levels) and the
 * block header (d, dmin, scales). */
static void fit_k_min_superblock(const float *x, int nmax, float rmin, int steps, uint16_t *d, uint16_t *dmin,
                                 uint8_t scales_packed[12], uint8_t L[QK_K]) {
    float sub_scale[8], sub_min[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float ss = 0;
        for (int l = 0; l < 32; l++) ss += xs[l] * xs[l];
        float av = sqrtf(ss / 32);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(xs[l]);
        sub_scale[j] = fit_with_min(32, nmax, xs, w, L + 32 * j, &sub_min[j], rmin, 0.1f, steps, false);
        if (sub_scale[j] > max_scale) max_scale = sub_scale[j];
        if (sub_min[j] > max_min) max_min = sub_min[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales_packed, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)round_int(inv_scale * sub_scale[j]);
        uint8_t lm = (uint8_t)round_int(inv_min * sub_min[j]);
        pack_scale_min(scales_packed, j, ls < 63 ? ls : 63, lm < 63 ? lm : 63);
    }
    *d = fp32_to_fp16(max_scale / 63.f);
    *dmin = fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        unpack_scale_min(scales_packed, j, &sc, &m);
        const float dd = fp16_to_fp32(*d) * sc;
        if (!dd) continue;
        const float dm = fp16_to_fp32(*dmin) * m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)imax(0, imin(nmax, round_int((x[32 * j + i] + dm) / dd)));
    }
}

void qg_quantize_q4_K(const float *x, void *dst, int64_t n) {
    BlockQ4_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        fit_k_min_superblock(x, 15, -1.f, 20, &y[b].d, &y[b].dmin, y[b].scales, L);
        uint8_t *q = y[b].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}

void qg_quantize_q5_K(const float *x, void *dst, int64_t n) {
    BlockQ5_K *y = dst;
    uint8_t L[QK_K];
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        fit_k_min_superblock(x, 31, -0.5f, 15, &y[b].d, &y[b].dmin, y[b].scales, L);
        uint8_t *qh = y[b].qh, *ql = y[b].qs;
        memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int c = 0; c < QK_K; c += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int j = 0; j < 32; j++) {
                int l1 = L[c + j], l2 = L[c + j + 32];
                if (l1 > 15) l1 -= 16, qh[j] |= m1;
                if (l2 > 15) l2 -= 16, qh[j] |= m2;
                ql[j] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

void qg_quantize_q6_K(const float *x, void *dst, int64_t n) {
    BlockQ6_K *y = dst;
    int8_t L[QK_K];
    float sub[16];
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        float max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            sub[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(sub[j]) > max_abs) max_abs = fabsf(sub[j]), max_scale = sub[j];
        }
        if (max_abs < TINY) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float inv = -128.f / max_scale;
        y[b].d = fp32_to_fp16(1 / inv);
        for (int j = 0; j < 16; j++) y[b].scales[j] = (int8_t)imin(127, round_int(inv * sub[j]));
        for (int j = 0; j < 16; j++) {
            float dd = fp16_to_fp32(y[b].d) * y[b].scales[j];
            if (!dd) continue;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(imax(-32, imin(31, round_int(x[16 * j + i] / dd))) + 32);
        }
        uint8_t *ql = y[b].ql, *qh = y[b].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((L[j + l] & 0xF) | ((L[j + l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((L[j + l + 32] & 0xF) | ((L[j + l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

/* 2-bit levels of 4 groups of 32, the layout Q2_K and Q3_K share */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

void qg_quantize_q2_K(const float *x, void *dst, int64_t n) {
    BlockQ2_K *y = dst;
    uint8_t L[QK_K];
    float w[16], sub_scale[16], sub_min[16];
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            sub_scale[j] = fit_with_min(16, 3, x + 16 * j, w, L + 16 * j, &sub_min[j], -0.5f, 0.1f, 15, true);
            if (sub_scale[j] > max_scale) max_scale = sub_scale[j];
            if (sub_min[j] > max_min) max_min = sub_min[j];
        }
        if (max_scale > 0) {
            float inv = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[b].scales[j] = (uint8_t)round_int(inv * sub_scale[j]);
            y[b].d = fp32_to_fp16(max_scale / 15.f);
        } else {
            memset(y[b].scales, 0, 16);
            y[b].d = fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float inv = 15.f / max_min;
            for (int j = 0; j < 16; j++) y[b].scales[j] |= (uint8_t)(round_int(inv * sub_min[j]) << 4);
            y[b].dmin = fp32_to_fp16(max_min / 15.f);
        } else {
            y[b].dmin = fp32_to_fp16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            const float dd = fp16_to_fp32(y[b].d) * (y[b].scales[j] & 0xF);
            if (!dd) continue;
            const float dm = fp16_to_fp32(y[b].dmin) * (y[b].scales[j] >> 4);
            for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)imax(0, imin(3, round_int((x[16 * j + i] + dm) / dd)));
        }
        pack_2bit(L, y[b].qs);
    }
}

void qg_quantize_q3_K(const float *x, void *dst, int64_t n) {
    BlockQ3_K *y = dst;
    int8_t L[QK_K];
    float sub[16];
    for (int64_t b = 0; b < n / QK_K; b++, x += QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            sub[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(sub[j]) > amax) amax = fabsf(sub[j]), max_scale = sub[j];
        }
        memset(y[b].scales, 0, 12);
        if (max_scale) {
            float inv = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int8_t l = (int8_t)round_int(inv * sub[j]);
                l = (int8_t)(imax(-32, imin(31, l)) + 32);
                if (j < 8) y[b].scales[j] = l & 0xF;
                else y[b].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                l >>= 4;
                y[b].scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
            }
            y[b].d = fp32_to_fp16(1 / inv);
        } else {
            y[b].d = fp32_to_fp16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            int8_t sc = (int8_t)(j < 8 ? y[b].scales[j] & 0xF : y[b].scales[j - 8] >> 4);
            sc = (int8_t)((sc | (((y[b].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
            float dd = fp16_to_fp32(y[b].d) * sc;
            if (!dd) continue;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(imax(-4, imin(3, round_int(x[16 * j + i] / dd))) + 4);
        }
        memset(y[b].hmask, 0, QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; j++) {
            if (L[j] > 3) y[b].hmask[m] |= hm, L[j] -= 4;
            if (++m == QK_K / 8) m = 0, hm <<= 1;
        }
        pack_2bit((const uint8_t *)L, y[b].qs);
    }
}

/* index of the IQ4 level nearest to v (ties to the lower level, as ggml's bisection) */
static int nearest_level(float v) {
    const int8_t *val = kvalues_iq4nl;
    if (v <= val[0]) return 0;
    if (v >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < val[mid]) hi = mid;
        else lo = mid;
    }
    return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

/* One IQ4 super-block of `len` values in sub-blocks of 32 (len 32: IQ4_NL, one scale; len 256: IQ4_XS,
 * 6-bit sub-scales under an fp16 super-scale); 7 candidate inverse scales each side. */
static void fit_iq4(const float *x, int len, uint16_t *dh, uint8_t *q4, uint16_t *scales_h, uint8_t *scales_l) {
    const int8_t *val = kvalues_iq4nl;
    const int ntry = 7, nsub = len / 32;
    uint8_t L[QK_K];
    float sub[QK_K / 32], w[32];
    memset(q4, 0, (size_t)len / 2);
    *dh = fp32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < nsub; ib++) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; j++) w[j] = xb[j] * xb[j];
        float amax = 0, peak = 0;
        for (int j = 0; j < 32; j++)
            if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), peak = xb[j];
        if (amax < TINY) {
            sub[ib] = 0;
            continue;
        }
        float d = -peak / val[0];
        float id = 1 / d;
        float sqx = 0, sq2 = 0;
        for (int j = 0; j < 32; j++) {
            int l = nearest_level(id * xb[j]);
            Lb[j] = (uint8_t)l;
            float qv = val[l];
            sqx += w[j] * qv * xb[j];
            sq2 += w[j] * qv * qv;
        }
        d = sq2 > 0 ? sqx / sq2 : 0.f;
        float best = d * sqx;
        for (int t = -ntry; t <= ntry; t++) {
            id = (t + val[0]) / peak;
            sqx = sq2 = 0;
            for (int j = 0; j < 32; j++) {
                float qv = val[nearest_level(id * xb[j])];
                sqx += w[j] * qv * xb[j];
                sq2 += w[j] * qv * qv;
            }
            if (sq2 > 0 && sqx * sqx > best * sq2) d = sqx / sq2, best = d * sqx;
        }
        sub[ib] = d;
        if (fabsf(d) > amax_scale) amax_scale = fabsf(d), max_scale = d;
    }
    if (nsub > 1) {
        memset(scales_h, 0, sizeof *scales_h * (size_t)((nsub + 7) / 8));
        float d = -max_scale / 32;
        *dh = fp32_to_fp16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < nsub; ib++) {
            int l = imax(-32, imin(31, round_int(id * sub[ib])));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)nearest_level(idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0) scales_l[ib / 2] = (uint8_t)(l & 0xF);
            else scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
            scales_h[ib / 8] |= (uint16_t)((l >> 4) << 2 * (ib % 8));
        }
    } else {
        *dh = fp32_to_fp16(sub[0]);
        float id = sub[0] ? 1 / sub[0] : 0;
        for (int j = 0; j < len; j++) L[j] = (uint8_t)nearest_level(id * x[j]);
    }
    for (int i = 0; i < len / 32; i++)
        for (int j = 0; j < 16; j++) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void qg_quantize_iq4_nl(const float *x, void *dst, int64_t n) {
    BlockIQ4_NL *y = dst;
    for (int64_t b = 0; b < n / 32; b++) fit_iq4(x + 32 * b, 32, &y[b].d, y[b].qs, NULL, NULL);
}

void qg_quantize_iq4_xs(const float *x, void *dst, int64_t n) {
    BlockIQ4_XS *y = dst;
    for (int64_t b = 0; b < n / QK_K; b++) fit_iq4(x + QK_K * b, QK_K, &y[b].d, y[b].qs, &y[b].scales_h, y[b].scales_l);
}

FormatFromFloat qg_quantizer(uint32_t type) {
    switch (type) {
    case FMT_Q2_K: return qg_quantize_q2_K;
    case FMT_Q3_K: return qg_quantize_q3_K;
    case FMT_Q4_K: return qg_quantize_q4_K;
    case FMT_Q5_K: return qg_quantize_q5_K;
    case FMT_Q6_K: return qg_quantize_q6_K;
    case FMT_IQ4_NL: return qg_quantize_iq4_nl;
    case FMT_IQ4_XS: return qg_quantize_iq4_xs;
    case FMT_F32: case FMT_F16: case FMT_BF16: case FMT_Q4_0: case FMT_Q4_1: case FMT_Q5_0: case FMT_Q5_1: case FMT_Q8_0: {
        const Format *f = format_get(type);
        return f ? f->quantize : NULL;
    }
    default: return NULL;
    }
}
