/* matmul_q8_0p_avx512.c — Q8_0 in the fast arithmetic (DOT_FAST) at the AVX-512 VNNI level, on the P16 panels
 * the CPU backend packs at load (ops.h's PACK_P16: 16 rows' blocks already transposed, q XOR 0x80).
 *
 * The order (gguf/quant_order_legacy.c, `repacked`): per 32-element block one integer total Σ q·a, then
 * acc = fma((float)Σ, d_w·d_a, acc). ZMM lane r is row r of the panel: vector g of a block holds elements
 * 4g..4g+3 of the 16 rows, so vpdpbusd with the token's 4 activations broadcast adds them to the 16 rows' totals;
 * starting from the prepared correction -128·Σa makes the totals exact. The float steps then run 16 dot products
 * per instruction and nothing is reduced across lanes. Decode (a few tokens) and prefill (tiles of 8) run the
 * same steps per (row, token), so a row's result does not depend on the batch.
 *
 * Matrices without a P16 copy (rows not a multiple of 16, --no-pack, row ranges not on panel edges) take the
 * decoding kernel of matmul_b32_avx512.c (mm_q8_0_dec_avx512), in the same order. */
#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <string.h>

#include "gguf/quant_blocks.h"

#define P_INLINE static inline __attribute__((always_inline))
#define TILE_T 8 /* tokens per GEMM tile */
/* software prefetch distance of the tiles of 2-8 tokens (the GEMV of one token runs without: below) */
#define PF_BYTES 8192

typedef struct PTok {
    const int8_t *qs;
    const float *d;
    const int32_t *corr32;
} PTok;

P_INLINE PTok p_tok(const MmJob *j, int64_t t) {
    const uint8_t *r = mm_act_row(j, t);
    PTok k = {(const int8_t *)(r + j->al.qs), (const float *)(r + j->al.d), (const int32_t *)(r + j->al.corr32)};
    return k;
}

P_INLINE __m512i bc32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* One panel (ops.h's q8p16 layout) with C tokens: out[c][r]. */
P_INLINE void panel_tile(const uint8_t *q, int64_t nb, const PTok *tk, const int C, float out[][16]) {
    __m512 acc[TILE_T];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *qb = q + q8p16_q(i);
        /* decode (one token) streams the panels from memory with no software prefetch: the hardware's alone was
         * faster on this machine (b1 tg128 1 thread 28-33 -> 33-39 t/s, 2 threads 51-57 -> 58-70, alternating; a
         * 2 KiB distance in between; the K-quant GEMVs need theirs, matmul_kpanel_avx512.c). With 2-8 tokens the
         * tile computes 2-8x longer per byte and the hardware's prefetch no longer keeps the stream ahead: the
         * 248320 × 1024 head (270 MB, cold), T = 8, 1 thread, 34-38 -> 16-19 ms (2026-12-07, docs/KERNELS.md).
         * A block is 512 quant bytes; an odd one's pair also ends with the 64 bytes of both blocks' scales. */
        if (C >= 2) {
#pragma GCC unroll 9
            for (int g = 0; g < 8 + (int)(i & 1); g++) _mm_prefetch((const char *)qb + PF_BYTES + 64 * g, _MM_HINT_T0);
        }
        __m512i S[TILE_T];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) S[c] = _mm512_set1_epi32(tk[c].corr32[i]);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i w = _mm512_loadu_si512(qb + 64 * g); /* 544·nb-byte panels: 64-aligned when nb is even */
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) S[c] = _mm512_dpbusd_epi32(S[c], w, bc32(tk[c].qs + 32 * i + 4 * g));
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q + q8p16_d(i, nb))));
#pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[c]), _mm512_mul_ps(dw, _mm512_set1_ps(tk[c].d[i])), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out[c], acc[c]);
}

/* Two adjacent panels (32 rows) with 4 tokens: each activation broadcast feeds two vpdpbusd (the 16 × 8 tile
 * loads one broadcast per vpdpbusd), and each (panel, token) total is two chains of 4 vpdpbusd (even and odd
 * groups, added once: integers, so the same total) rather than one of 8, which the vpdpbusd latency held back
 * (matmul_bench 1024 -> 3584 T = 512: ~544 -> ~577 GOP/s). The same steps per (row, token). out[c][r], r < 32. */
static void panel_tile2x4(const uint8_t *q0, const uint8_t *q1, int64_t nb, const PTok *tk, float out[][32]) {
    __m512 acc[2][4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) acc[0][c] = acc[1][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m512i S[2][4], U[2][4]; /* even groups from the correction, odd ones from 0 */
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++)
            S[0][c] = S[1][c] = _mm512_set1_epi32(tk[c].corr32[i]), U[0][c] = U[1][c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i w0 = _mm512_loadu_si512(q0 + q8p16_q(i) + 64 * g), w1 = _mm512_loadu_si512(q1 + q8p16_q(i) + 64 * g);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m512i a = bc32(tk[c].qs + 32 * i + 4 * g);
                if (g & 1) {
                    U[0][c] = _mm512_dpbusd_epi32(U[0][c], w0, a);
                    U[1][c] = _mm512_dpbusd_epi32(U[1][c], w1, a);
                } else {
                    S[0][c] = _mm512_dpbusd_epi32(S[0][c], w0, a);
                    S[1][c] = _mm512_dpbusd_epi32(S[1][c], w1, a);
                }
            }
        }
        const __m512 dw0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q0 + q8p16_d(i, nb))));
        const __m512 dw1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q1 + q8p16_d(i, nb))));
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512 da = _mm512_set1_ps(tk[c].d[i]);
            acc[0][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(S[0][c], U[0][c])), _mm512_mul_ps(dw0, da), acc[0][c]);
            acc[1][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(S[1][c], U[1][c])), _mm512_mul_ps(dw1, da), acc[1][c]);
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) _mm512_storeu_ps(out[c], acc[0][c]), _mm512_storeu_ps(out[c] + 16, acc[1][c]);
}

/* Two adjacent panels (32 rows) with 2-8 tokens in one pass over the weights, for the small batches (a decode of
 * a few streams, a speculative verify): each activation broadcast feeds two vpdpbusd as in panel_tile2x4, the
 * tokens in groups of up to 4 (the 16 float accumulators stay in registers; a group's 8 integer chains beside
 * them), the second group reading the block's weights again from L1. The 16 × T tiles load one broadcast per
 * vpdpbusd and ran ~175 GMAC/s on a warm matrix, about the memory time of the 248320 × 1024 head at T = 8.
 * The software prefetch walks the next pair linearly (8 KiB ahead of each panel left the start of every second
 * panel cold: the head at T = 8, 1 thread, 12.5-13.7 -> 21.6-22.4 ms CPU; the linear walk 12.4-12.5; b1, 8
 * streams, 1 thread, alternating with the 16 × T tiles: 81-86 -> 92 t/s, loaded; docs/KERNELS.md). The same
 * integers and one fma per (row, token, block): the same bits. */
P_INLINE void panel_pair_small(const uint8_t *q0, const uint8_t *q1, int64_t nb, const PTok *tk, const int C, float out[][32]) {
    __m512 acc[2][TILE_T];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[0][c] = acc[1][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b0 = q0 + q8p16_q(i), *b1 = q1 + q8p16_q(i);
        /* the next pair (the matrix's next 32 rows, contiguous), 17 lines per block: by the pair's end all of it */
#pragma GCC unroll 17
        for (int k = 0; k < 17; k++) _mm_prefetch((const char *)q1 + (q1 - q0) + 1088 * i + 64 * k, _MM_HINT_T0);
        const __m512 dw0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q0 + q8p16_d(i, nb))));
        const __m512 dw1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(q1 + q8p16_d(i, nb))));
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const int c0 = 4 * h, nc = C - c0 < 4 ? C - c0 : 4;
            if (nc <= 0) break;
            __m512i S[2][4];
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) S[0][c] = S[1][c] = _mm512_set1_epi32(tk[c0 + c].corr32[i]);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m512i w0 = _mm512_loadu_si512(b0 + 64 * g), w1 = _mm512_loadu_si512(b1 + 64 * g);
#pragma GCC unroll 4
                for (int c = 0; c < nc; c++) {
                    const __m512i a = bc32(tk[c0 + c].qs + 32 * i + 4 * g);
                    S[0][c] = _mm512_dpbusd_epi32(S[0][c], w0, a);
                    S[1][c] = _mm512_dpbusd_epi32(S[1][c], w1, a);
                }
            }
#pragma GCC unroll 4
            for (int c = 0; c < nc; c++) {
                const __m512 da = _mm512_set1_ps(tk[c0 + c].d[i]);
                acc[0][c0 + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[0][c]), _mm512_mul_ps(dw0, da), acc[0][c0 + c]);
                acc[1][c0 + c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[1][c]), _mm512_mul_ps(dw1, da), acc[1][c0 + c]);
            }
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out[c], acc[0][c]), _mm512_storeu_ps(out[c] + 16, acc[1][c]);
}

#define PAIR_FN(C)                                                                                                  \
    static void pair##C(const uint8_t *q0, const uint8_t *q1, int64_t nb, const PTok *tk, float out[][32]) {        \
        panel_pair_small(q0, q1, nb, tk, C, out);                                                                   \
    }
PAIR_FN(2)
PAIR_FN(3)
PAIR_FN(4)
PAIR_FN(5)
PAIR_FN(6)
PAIR_FN(7)
PAIR_FN(8)
typedef void (*PairFn)(const uint8_t *, const uint8_t *, int64_t, const PTok *, float (*)[32]);
static const PairFn pairs[TILE_T + 1] = {NULL, NULL, pair2, pair3, pair4, pair5, pair6, pair7, pair8};

#define TILE_FN(C)                                                                                                  \
    static void tile##C(const uint8_t *q, int64_t nb, const PTok *tk, float out[][16]) {                            \
        panel_tile(q, nb, tk, C, out);                                                                              \
    }
TILE_FN(1)
TILE_FN(2)
TILE_FN(3)
TILE_FN(4)
TILE_FN(5)
TILE_FN(6)
TILE_FN(7)
TILE_FN(8)
typedef void (*TileFn)(const uint8_t *, int64_t, const PTok *, float (*)[16]);
static const TileFn tiles[TILE_T + 1] = {NULL, tile1, tile2, tile3, tile4, tile5, tile6, tile7, tile8};

static void compute(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    if (j->w->pack_kind != PACK_P16) {
        mm_q8_0_dec_avx512.compute(j, o0, o1, t0, t1, tmp);
        return;
    }
    const int64_t nb = j->K / QK;
    const size_t panel_bytes = 16 * j->w->row_bytes;
    int64_t o = o0;
    /* up to 8 tokens (a decode of a few streams, a verify) the one-pass 16-row tiles below: each weight read once
     * from memory. The 32 × 4 tiles from 4 tokens were faster on matrices that stay in the cache (4096², T = 8:
     * 1.18-1.25 -> 0.68-0.96 ms) but slower on the streamed ones decode reads (the 248320 × 1024 head, T = 8:
     * 12.9-13.7 -> 18.3-22.5 ms CPU; 2026-12-06, docs/KERNELS.md) */
    if (t1 - t0 >= 2 && t1 - t0 <= 8) /* a small batch: two panels at a time in one pass */
        for (; o + 32 <= o1; o += 32) {
            const uint8_t *q0 = (const uint8_t *)j->w->pack + (size_t)(o / 16) * panel_bytes;
            const int nc = (int)(t1 - t0);
            PTok tk[TILE_T];
            for (int c = 0; c < nc; c++) tk[c] = p_tok(j, t0 + c);
            float out[TILE_T][32];
            pairs[nc](q0, q0 + panel_bytes, nb, tk, out);
            for (int c = 0; c < nc; c++) memcpy(j->y + (t0 + c) * j->O + o, out[c], sizeof out[c]);
        }
    if (t1 - t0 > 8) /* prefill: 32 rows × 4 tokens where two panels are left, one token tile at a time */
        for (; o + 32 <= o1; o += 32) {
            const uint8_t *q0 = (const uint8_t *)j->w->pack + (size_t)(o / 16) * panel_bytes, *q1 = q0 + panel_bytes;
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4) {
                PTok tk[4];
                for (int c = 0; c < 4; c++) tk[c] = p_tok(j, t + c);
                float out[4][32];
                panel_tile2x4(q0, q1, nb, tk, out);
                for (int c = 0; c < 4; c++) memcpy(j->y + (t + c) * j->O + o, out[c], sizeof out[c]);
            }
            for (int h = 0; h < 2 && t < t1; h++) { /* the last tokens: the 16-row tiles */
                const uint8_t *q = h ? q1 : q0;
                const int nc = (int)(t1 - t);
                PTok tk[TILE_T];
                for (int c = 0; c < nc; c++) tk[c] = p_tok(j, t + c);
                float out[TILE_T][16];
                tiles[nc](q, nb, tk, out);
                for (int c = 0; c < nc; c++)
                    for (int r = 0; r < 16; r++) j->y[(t + c) * j->O + o + 16 * h + r] = out[c][r];
            }
        }
    for (; o < o1; o += 16) { /* o0, o1: multiples of 16 (the driver aligns P16 items) */
        const uint8_t *q = (const uint8_t *)j->w->pack + (size_t)(o / 16) * panel_bytes;
        for (int64_t t = t0; t < t1; t += TILE_T) {
            const int nc = t1 - t < TILE_T ? (int)(t1 - t) : TILE_T;
            PTok tk[TILE_T];
            for (int c = 0; c < nc; c++) tk[c] = p_tok(j, t + c);
            float out[TILE_T][16];
            tiles[nc](q, nb, tk, out);
            const int nr = o1 - o < 16 ? (int)(o1 - o) : 16;
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[c][r];
        }
    }
}

static size_t tmp_bytes(int64_t K) { return mm_q8_0_dec_avx512.tmp_bytes(K); }

const MmFormat mm_q8_0_fast_avx512 = {.act_kind = MM_ACT_Q8_0, .act_off = 128, .tmp_bytes = tmp_bytes, .compute = compute, .fast = true};
