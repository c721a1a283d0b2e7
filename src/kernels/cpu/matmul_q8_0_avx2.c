/* matmul_q8_0_avx2.c — Q8_0 weights × Q8_0 activations at the AVX2 level (all paths; the order is
 * matmul_q8_0_avx512.c's). One YMM holds a dot product's eight lanes; the lane sums come from
 * vpmaddubsw on |w| and sign(a, w), then vpmaddwd with ones (no saturation: |w| ≤ 128, |a| ≤ 127).
 * Tiles are 4 weight rows × C tokens (C = 1, 2). */
#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <string.h>

#include "gguf/quant_blocks.h"

#define MM_INLINE static inline __attribute__((always_inline))
#define R 4

MM_INLINE float hsum8(__m256 v) { /* ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

MM_INLINE float f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

MM_INLINE void tile(const MmJob *j, const uint8_t *const *w, const uint8_t *const *a, const int C, float out[R][2]) {
    const int64_t nb = j->K / QK;
    __m256 acc[R][2];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) acc[r][c] = _mm256_setzero_ps();
    const int8_t *qs[2];
    const float *da[2];
#pragma GCC unroll 2
    for (int c = 0; c < C; c++) {
        qs[c] = (const int8_t *)(a[c] + j->al.qs);
        da[c] = (const float *)(a[c] + j->al.d);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const size_t bs = mm_w_bstride(j, 34);
    for (int64_t i = 0; i < nb; i++) {
        __m256i av[2];
#pragma GCC unroll 2
        for (int c = 0; c < C; c++) av[c] = _mm256_load_si256((const __m256i *)(qs[c] + 32 * i));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint8_t *b = w[r] + bs * i;
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(b + 2));
            const __m256i wa = _mm256_abs_epi8(wv);
            const __m256 dw = _mm256_set1_ps(f16(b));
#pragma GCC unroll 2
            for (int c = 0; c < C; c++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa, _mm256_sign_epi8(av[c], wv)), ones);
                acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(da[c][i])), _mm256_cvtepi32_ps(p), acc[r][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 2
        for (int c = 0; c < C; c++) out[r][c] = hsum8(acc[r][c]);
}

static void tile1(const MmJob *j, const uint8_t *const *w, const uint8_t *const *a, float out[R][2]) { tile(j, w, a, 1, out); }
static void tile2(const MmJob *j, const uint8_t *const *w, const uint8_t *const *a, float out[R][2]) { tile(j, w, a, 2, out); }

static void compute(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    (void)tmp;
    for (int64_t o = o0; o < o1; o += R) {
        const uint8_t *w[R];
        const int nr = o1 - o < R ? (int)(o1 - o) : R;
        for (int r = 0; r < R; r++) w[r] = mm_w_row8(j, o + (r < nr ? r : nr - 1), 34);
        for (int64_t t = t0; t < t1; t += 2) {
            const int nc = t1 - t < 2 ? 1 : 2;
            const uint8_t *a[2] = {mm_act_row(j, t), mm_act_row(j, t + nc - 1)};
            float out[R][2];
            if (nc == 1)
                tile1(j, w, a, out);
            else
                tile2(j, w, a, out);
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[r][c];
        }
    }
}

const MmFormat mm_q8_0_avx2 = {.act_kind = MM_ACT_Q8_0, .act_off = 128, .compute = compute};
