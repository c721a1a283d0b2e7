/* matmul_q8_0_avx512.c — Q8_0 weights × Q8_0 activations, AVX-512 VNNI (all paths: llama.cpp's vec_dot
 * and tinyBLAS sum Q8_0 in the same order).
 *
 * The order to reproduce (quant_legacy.c, vec_dot_q8_0): eight float lanes per dot product; per 32-block
 * lane l += (d_w·d_a)·(integer sum of products 4l..4l+3), one fused multiply-add; then the lanes folded
 * ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). The integer sums are exact however they are formed, so:
 *   - a ZMM register holds two weight rows' eight lanes (rows r, r+1 of one 32-block), and vpdpbusd
 *     forms the lane sums with the weights on its unsigned side as q+128 (xor 0x80); the accumulator
 *     starts at the activation's prepared correction -128·(sum of the lane's 4 quants);
 *   - the scale d_w·d_a is rounded to float first (one vmulps), then the fused multiply-add, per block.
 * A register tile is 8 weight rows × C tokens (C = 1..4): each weight block is loaded once per tile and
 * each activation block once per 4 row pairs. Rows and tokens past the end of a tile repeat the last
 * one (computed, not stored). */
#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <string.h>

#include "gguf/quant_blocks.h"

#define MM_INLINE static inline __attribute__((always_inline))
#define RP 4 /* row pairs per tile */

/* the two 8-lane halves of v folded as hsum_float_8, results in lanes 0 and 8 */
MM_INLINE void hsum8x2(__m512 v, float *a, float *b) {
    __m512 s = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, _MM_SHUFFLE(2, 3, 0, 1)));
    *a = _mm512_cvtss_f32(s);
    *b = _mm512_cvtss_f32(_mm512_shuffle_f32x4(s, s, _MM_SHUFFLE(0, 0, 0, 2)));
}

MM_INLINE uint16_t ld16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* [d(b0) × 8 | d(b1) × 8] as floats, from two fp16 values */
MM_INLINE __m512 scale_pair(const uint8_t *b0, const uint8_t *b1) {
    const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)ld16(b0))),
                                              _mm_set1_epi16((short)ld16(b1)), 1);
    return _mm512_cvtph_ps(h);
}

/* out[2p + h][c]: the dot products of rows w[2p+h] with tokens a[c]. pf: the next tile's bytes (rows are
 * contiguous), prefetched as this one runs: its 8 short rows would otherwise be 8 streams too short for
 * the hardware prefetcher to follow (a 248320×1024 GEMV ran at 9 GB/s without, from DRAM). */
MM_INLINE void tile(const MmJob *j, const uint8_t *const *w, const uint8_t *const *a, const int C, const uint8_t *pf,
                    float out[2 * RP][4]) {
    const int64_t nb = j->K / QK;
    __m512 acc[RP][4];
#pragma GCC unroll 4
    for (int p = 0; p < RP; p++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) acc[p][c] = _mm512_setzero_ps();
    const int8_t *qs[4];
    const float *da[4];
    const int32_t *corr[4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        qs[c] = (const int8_t *)(a[c] + j->al.qs);
        da[c] = (const float *)(a[c] + j->al.d);
        corr[c] = (const int32_t *)(a[c] + j->al.corr);
    }
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    const size_t bs = mm_w_bstride(j, 34);
    for (int64_t i = 0; i < nb; i++) {
        __m512i av[4], cv[4];
        if (C == 1) /* 8 rows × 34 bytes per block: 4.25 lines */
            for (int k = 0; k < 5; k++) _mm_prefetch((const char *)pf + 272 * i + 64 * k, _MM_HINT_T0);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            av[c] = _mm512_broadcast_i32x8(_mm256_load_si256((const __m256i *)(qs[c] + 32 * i)));
            cv[c] = _mm512_broadcast_i32x8(_mm256_load_si256((const __m256i *)(corr[c] + 8 * i)));
        }
#pragma GCC unroll 4
        for (int p = 0; p < RP; p++) {
            const uint8_t *b0 = w[2 * p] + bs * i, *b1 = w[2 * p + 1] + bs * i;
            __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
                                            _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
            wv = _mm512_xor_si512(wv, x80);
            const __m512 dw = scale_pair(b0, b1);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                const __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(cv[c], wv, av[c]));
                acc[p][c] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da[c][i])), f, acc[p][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < RP; p++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) hsum8x2(acc[p][c], &out[2 * p][c], &out[2 * p + 1][c]);
}

#define TILE_FN(C)                                                                                          \
    static void tile##C(const MmJob *j, const uint8_t *const *w, const uint8_t *const *a, const uint8_t *pf,      \
                        float out[2 * RP][4]) {                                                            \
        tile(j, w, a, C, pf, out);                                                                         \
    }
TILE_FN(1)
TILE_FN(2)
TILE_FN(3)
TILE_FN(4)

/* ---- GEMM: 4 rows × 8 tokens per tile (MM_ACT_Q8_0P) -------------------------------------------------
 * A ZMM holds one weight row against a token pair (lanes 0-7: token 2p, 8-15: token 2p+1). The row tile's
 * weights are first decoded into tmp (q+128 and the float scale per block), once per token chunk. The 16
 * scales d_w·d_a of a row and the octet's 8 tokens come from one vmulps (the DA vector × d_w), and
 * vpermilps spreads each pair of them over its 8 lanes: vpdpbusd, vmulps and vfmadd share two pipes on
 * Zen 5 (cvt and in-lane shuffles run on the others), so this leaves ~2.25 of those per unit instead of 3. */

#define GR 4 /* rows per GEMM tile */

typedef struct Dec {
    uint8_t *q; /* [GR][nb][32] q ^ 0x80 */
    float *d;   /* [GR][nb] */
} Dec;

static size_t tmp_bytes(int64_t K) { return (size_t)GR * ((size_t)K + (size_t)K / 32 * 4) + 128; }

static Dec dec_view(const MmJob *j, uint8_t *tmp) {
    const int64_t nb = j->K / QK;
    Dec d = {tmp, (float *)(tmp + (size_t)GR * (size_t)nb * 32)};
    return d;
}

static void decode_rows(const MmJob *j, const uint8_t *const *w, const Dec *dc) {
    const int64_t nb = j->K / QK;
    const __m256i x80 = _mm256_set1_epi8((char)0x80);
    const size_t bs = mm_w_bstride(j, 34);
    for (int r = 0; r < GR; r++)
        for (int64_t i = 0; i < nb; i++) {
            const uint8_t *b = w[r] + bs * i;
            _mm256_store_si256((__m256i *)(dc->q + ((size_t)r * (size_t)nb + (size_t)i) * 32),
                               _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + 2)), x80));
            dc->d[r * nb + i] = _cvtsh_ss(ld16(b));
        }
}

static void gemm_tile(const MmJob *j, const Dec *dc, const uint8_t *ab, float out[GR][8]) {
    const int64_t nb = j->K / QK;
    __m512 acc[GR][4];
#pragma GCC unroll 4
    for (int r = 0; r < GR; r++)
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) acc[r][p] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = ab + (size_t)i * MM_Q8P_BLOCK;
        __m512i av[4], cv[4];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            av[p] = _mm512_load_si512(b + 64 * p);
            cv[p] = _mm512_load_si512(b + 256 + 64 * p);
        }
        const __m512 da = _mm512_load_ps((const float *)(b + 512));
#pragma GCC unroll 4
        for (int r = 0; r < GR; r++) {
            const __m512i wv = _mm512_broadcast_i32x8(_mm256_load_si256((const __m256i *)(dc->q + ((size_t)r * (size_t)nb + (size_t)i) * 32)));
            const __m512 sc = _mm512_mul_ps(da, _mm512_set1_ps(dc->d[r * nb + i]));
#define UNIT(p)                                                                                             \
    acc[r][p] = _mm512_fmadd_ps(_mm512_permute_ps(sc, (p) * 0x55), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(cv[p], wv, av[p])), \
                                acc[r][p]);
            UNIT(0) UNIT(1) UNIT(2) UNIT(3)
#undef UNIT
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < GR; r++)
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) hsum8x2(acc[r][p], &out[r][2 * p], &out[r][2 * p + 1]);
}

static void compute_gemm(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    const Dec dc = dec_view(j, tmp);
    for (int64_t o = o0; o < o1; o += GR) {
        const uint8_t *w[GR];
        const int nr = o1 - o < GR ? (int)(o1 - o) : GR;
        for (int r = 0; r < GR; r++) w[r] = mm_w_row8(j, o + (r < nr ? r : nr - 1), 34);
        decode_rows(j, w, &dc);
        for (int64_t t = t0; t < t1; t += 8) {
            float out[GR][8];
            gemm_tile(j, &dc, mm_act_group(j, t / 8), out);
            const int nc = t1 - t < 8 ? (int)(t1 - t) : 8;
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[r][c];
        }
    }
}

static void compute(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    if (j->act_kind == MM_ACT_Q8_0P) {
        compute_gemm(j, o0, o1, t0, t1, tmp);
        return;
    }
    for (int64_t o = o0; o < o1; o += 2 * RP) {
        const uint8_t *w[2 * RP];
        const int nr = o1 - o < 2 * RP ? (int)(o1 - o) : 2 * RP;
        for (int r = 0; r < 2 * RP; r++) w[r] = mm_w_row8(j, o + (r < nr ? r : nr - 1), 34);
        for (int64_t t = t0; t < t1; t += 4) {
            const int nc = t1 - t < 4 ? (int)(t1 - t) : 4;
            const uint8_t *a[4];
            for (int c = 0; c < 4; c++) a[c] = mm_act_row(j, t + (c < nc ? c : nc - 1));
            float out[2 * RP][4];
            /* the next tile's bytes: o is a multiple of 8, so in either layout they follow this tile's */
            const uint8_t *pf = mm_w_row8(j, o, 34) + 2 * RP * j->w->row_bytes;
            switch (nc) {
            case 1: tile1(j, w, a, pf, out); break;
            case 2: tile2(j, w, a, pf, out); break;
            case 3: tile3(j, w, a, pf, out); break;
            default: tile4(j, w, a, pf, out); break;
            }
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[r][c];
        }
    }
}

const MmFormat mm_q8_0_avx512 = {.act_kind = MM_ACT_Q8_0,
                                 .act_off = 128,
                                 .gemm_min_T = 6,
                                 .act_kind_gemm = MM_ACT_Q8_0P,
                                 .tmp_bytes = tmp_bytes,
                                 .compute = compute};
