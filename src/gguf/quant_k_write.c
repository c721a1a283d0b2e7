/* quant_k_write.c — weight quantizers for the K-quants Q2_K, Q3_K, Q4_K, Q5_K and Q6_K (for synthetic
 * models and tests).
 *
 * Deliberately simple, not ggml's iterative searches (make_qkx2_quants / make_qx_quants), so the output
 * is valid but not bit-identical to llama-quantize. The scheme is "cover, then round":
 *   - with minimums (Q2_K, Q4_K, Q5_K): each sub-block's offset m = -min(0, min x) and step
 *     s = (max x + m)/nmax; the super-block scales d, dmin are max(s)/smax, max(m)/smax rounded *up* to
 *     fp16, the integer sub-block scales are rounded up too, so the quantized range always contains the
 *     sub-block and only the final per-element rounding loses precision;
 *   - symmetric (Q3_K, Q6_K): the sub-block's extreme value maps to the most negative level (-4, -32),
 *     as ggml's legacy quantizers do, with the signed sub-block scale rounded away from zero.
 * Every rounding of a quant reads back the fp16 / integer scales exactly as dequantization will. */
#include "gguf/quant.h"

#include "base/fp16.h"
#include "gguf/quant_blocks.h"

#include <math.h>
#include <string.h>

/* fp16 bits of v ≥ 0 rounded up, so that fp16_to_fp32(result) ≥ v (v within fp16 range). */
static uint16_t fp16_up(float v) {
    uint16_t h = fp32_to_fp16(v);
    if (fp16_to_fp32(h) < v) h++;
    return h;
}

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ceil(v) clamped to [0, hi], without converting an out-of-range float. */
static inline int ceil_clamp(float v, int hi) { return !(v > 0) ? 0 : v >= (float)hi ? hi : (int)ceilf(v); }

/* Asymmetric fit of a 256-element super-block in nsub sub-blocks: quants q ∈ [0, nmax], sub-block
 * scale sc and min mq ∈ [0, smax], element ≈ (d·sc)·q - (dmin·mq). */
static void fit_asym(const float *x, int nsub, int nmax, int smax, uint16_t *hd, uint16_t *hdmin, uint8_t *sc,
                     uint8_t *mq, uint8_t q[QK_K]) {
    const int len = QK_K / nsub;
    float mx[16], m[16], s[16], ml[16];
    float max_m = 0, max_s = 0;
    for (int j = 0; j < nsub; j++) {
        float lo = 0, hi = x[j * len];
        for (int l = 0; l < len; l++) {
            lo = fminf(lo, x[j * len + l]);
            hi = fmaxf(hi, x[j * len + l]);
        }
        mx[j] = hi;
        m[j] = -lo;
        max_m = fmaxf(max_m, m[j]);
    }
    *hdmin = fp16_up(max_m / (float)smax);
    const float dmin = fp16_to_fp32(*hdmin);
    for (int j = 0; j < nsub; j++) {
        mq[j] = (uint8_t)(dmin > 0 ? ceil_clamp(m[j] / dmin, smax) : 0);
        ml[j] = dmin * (float)mq[j];
        s[j] = fmaxf(mx[j] + ml[j], 0.f) / (float)nmax;
        max_s = fmaxf(max_s, s[j]);
    }
    *hd = fp16_up(max_s / (float)smax);
    const float d = fp16_to_fp32(*hd);
    for (int j = 0; j < nsub; j++) {
        sc[j] = (uint8_t)(d > 0 ? ceil_clamp(s[j] / d, smax) : 0);
        const float dl = d * (float)sc[j];
        for (int l = 0; l < len; l++) {
            const int e = j * len + l;
            q[e] = (uint8_t)(dl > 0 ? clampi(quant_nearest_int((x[e] + ml[j]) / dl), 0, nmax) : 0);
        }
    }
}

/* Symmetric fit in 16 sub-blocks of 16: q ∈ [-nlo, nlo-1], signed sub-block scale sc ∈ [-smax, smax],
 * element ≈ (d·sc)·q. */
static void fit_sym(const float *x, int nlo, int smax, uint16_t *hd, int8_t sc[16], int8_t q[QK_K]) {
    float s[16], max_s = 0;
    for (int j = 0; j < 16; j++) {
        float amax = 0, ext = 0;
        for (int l = 0; l < 16; l++)
            if (fabsf(x[16 * j + l]) > amax) {
                amax = fabsf(x[16 * j + l]);
                ext = x[16 * j + l];
            }
        s[j] = ext / (float)-nlo;
        max_s = fmaxf(max_s, fabsf(s[j]));
    }
    *hd = fp16_up(max_s / (float)smax);
    const float d = fp16_to_fp32(*hd);
    for (int j = 0; j < 16; j++) {
        int v = d > 0 ? ceil_clamp(fabsf(s[j]) / d, smax) : 0;
        sc[j] = (int8_t)(s[j] < 0 ? -v : v);
        const float dl = d * (float)sc[j];
        for (int l = 0; l < 16; l++) {
            const int e = 16 * j + l;
            q[e] = (int8_t)(dl != 0 ? clampi(quant_nearest_int(x[e] / dl), -nlo, nlo - 1) : 0);
        }
    }
}

/* Q2_K: 16 sub-blocks of 16, 4-bit scale and min, 2-bit quants (layout in quant_k.c). */
void quantize_q2_K(const float *src, void *dst, int64_t n) {
    BlockQ2_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[16], mq[16], q[QK_K];
        fit_asym(src + i * QK_K, 16, 3, 15, &y[i].d, &y[i].dmin, sc, mq, q);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int k = 0; k < 16; k++) y[i].scales[k] = (uint8_t)(sc[k] | mq[k] << 4);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, s = (e / 32) % 4, l = e % 32;
            y[i].qs[32 * h + l] |= (uint8_t)(q[e] << (2 * s));
        }
    }
}

/* Q3_K: 16 sub-blocks of 16, signed 6-bit scales, 3-bit quants in [-4, 3]. */
void quantize_q3_K(const float *src, void *dst, int64_t n) {
    BlockQ3_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16], q[QK_K];
        fit_sym(src + i * QK_K, 4, 31, &y[i].d, sc, q);
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        memset(y[i].qs, 0, sizeof y[i].qs);
        memset(y[i].scales, 0, sizeof y[i].scales);
        for (int k = 0; k < 16; k++) {
            const int v = sc[k] + 32; /* 6 bits */
            if (k < 8) y[i].scales[k] |= (uint8_t)(v & 15);
            else y[i].scales[k - 8] |= (uint8_t)((v & 15) << 4);
            y[i].scales[8 + k % 4] |= (uint8_t)((v >> 4) << (2 * (k / 4)));
        }
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, s = (e / 32) % 4, l = e % 32, u = q[e] + 4;
            y[i].qs[32 * h + l] |= (uint8_t)((u & 3) << (2 * s));
            y[i].hmask[l] |= (uint8_t)((u >> 2) << (4 * h + s));
        }
    }
}

/* The 12 scale bytes of Q4_K / Q5_K from eight 6-bit (scale, min) pairs (inverse of quant_k4_scale_min). */
static void pack_k4_scales(uint8_t s[12], const uint8_t sc[8], const uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

/* Q4_K: 8 sub-blocks of 32, 6-bit scale and min, 4-bit quants. */
void quantize_q4_K(const float *src, void *dst, int64_t n) {
    BlockQ4_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mq[8], q[QK_K];
        fit_asym(src + i * QK_K, 8, 15, 63, &y[i].d, &y[i].dmin, sc, mq, q);
        pack_k4_scales(y[i].scales, sc, mq);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) y[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
    }
}

/* Q5_K: as Q4_K with 5-bit quants, the fifth bits in qh. */
void quantize_q5_K(const float *src, void *dst, int64_t n) {
    BlockQ5_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], mq[8], q[QK_K];
        fit_asym(src + i * QK_K, 8, 31, 63, &y[i].d, &y[i].dmin, sc, mq, q);
        pack_k4_scales(y[i].scales, sc, mq);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                y[i].qh[l] |= (uint8_t)((lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
            }
    }
}

/* Q6_K: 16 sub-blocks of 16, signed 8-bit scales, 6-bit quants in [-32, 31]. */
void quantize_q6_K(const float *src, void *dst, int64_t n) {
    BlockQ6_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t q[QK_K];
        fit_sym(src + i * QK_K, 32, 127, &y[i].d, y[i].scales, q);
        memset(y[i].ql, 0, sizeof y[i].ql);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, r = (e / 32) % 4, l = e % 32, u = q[e] + 32;
            y[i].ql[64 * h + l + 32 * (r & 1)] |= (uint8_t)((u & 15) << (4 * (r >> 1)));
            y[i].qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * r));
        }
    }
}
