/* gemm_simd.h — the small row-major GEMM of the sequence kernels (chunked delta-net, tiled attention),
 * written against simd16.h; included by the *_avx2.c / *_avx512.c kernel files only.
 *
 * C[m][n] = init + Σ_k A[m][k]·B[k][n]: register tiles of GEMM_MR rows × GEMM_NV·16 columns; A is
 * broadcast element by element, B read as rows of 16 lanes (no reductions, no transposes). */
#ifndef DL_KERNELS_CPU_GEMM_SIMD_H
#define DL_KERNELS_CPU_GEMM_SIMD_H

#include "kernels/cpu/simd16.h"

/* register tiles: 4 rows × 64 columns on AVX-512 (16 accumulators of 32), 6 rows × 16 columns on AVX2 (12 of
 * 16 YMM registers) */
#if defined(__AVX512F__)
#define GEMM_MR 4
#define GEMM_NV 4
#else
#define GEMM_MR 6
#define GEMM_NV 1
#endif

enum { INIT_ZERO, INIT_MAT, INIT_SCALE, INIT_ROWSCALE };

/* One register tile: C[m][16v..] for m < MR, v < NV over k < K. */
SIMD_INLINE void gemm_tile(const int MR, const int NV, int K, const float *A, int64_t lda, const float *B, int64_t ldb,
                           float *C, int64_t ldc, int init, const float *I, int64_t ldi, float alpha) {
    V16 acc[GEMM_MR][GEMM_NV];
    const float *Ip = I ? I : C; /* I is given with INIT_MAT and INIT_ROWSCALE (this keeps -O3's -Warray-bounds quiet) */
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++)
            acc[m][v] = init == INIT_ZERO    ? v16_zero()
                        : init == INIT_MAT   ? v16_load(Ip + m * ldi + 16 * v)
                        : init == INIT_SCALE ? v16_mul(v16_set1(alpha), v16_load(C + m * ldc + 16 * v))
                                             : v16_mul(v16_set1(Ip[m]), v16_load(C + m * ldc + 16 * v));
    for (int k = 0; k < K; k++) {
        V16 b[GEMM_NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) b[v] = v16_load(B + k * ldb + 16 * v);
#pragma GCC unroll 8
        for (int m = 0; m < MR; m++) {
            const V16 x = v16_set1(A[m * lda + k]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; v++) acc[m][v] = v16_fmadd(x, b[v], acc[m][v]);
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) v16_store(C + m * ldc + 16 * v, acc[m][v]);
}

/* C = init + A·B for M rows, N columns (a multiple of 16), K terms; init: zero, the matrix I, alpha·C, or
 * I[m]·C row by row. Triangular shapes: with ktri ≥ 0 the rows [r0, r0+mr) of a tile use only the first
 * min(K, ktri + r0 + mr) terms (A is zero beyond its diagonal there); with ntri ≥ 0 they compute only the
 * columns below ntri + r0 + mr, rounded up to 16 (the others are left alone). */
static inline void gemm_nn(int M, int N, int K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                           int64_t ldc, int init, const float *I, int64_t ldi, float alpha, int ktri, int ntri) {
    for (int r0 = 0; r0 < M; r0 += GEMM_MR) {
        const int mr = M - r0 < GEMM_MR ? M - r0 : GEMM_MR;
        int kk = K;
        if (ktri >= 0 && ktri + r0 + mr < kk) kk = ktri + r0 + mr;
        int nn = N;
        if (ntri >= 0 && ((ntri + r0 + mr + 15) & ~15) < nn) nn = (ntri + r0 + mr + 15) & ~15;
        const float *Ar = A + r0 * lda;
        float *Cr = C + r0 * ldc;
        const float *Ir = !I ? NULL : init == INIT_ROWSCALE ? I + r0 : I + r0 * ldi;
        for (int n0 = 0; n0 < nn; n0 += 16 * GEMM_NV) {
            const int nv = (nn - n0) / 16 < GEMM_NV ? (nn - n0) / 16 : GEMM_NV;
            const float *Bn = B + n0;
            float *Cn = Cr + n0;
            const float *In = !Ir ? NULL : init == INIT_ROWSCALE ? Ir : Ir + n0;
#define TILE(MR, NV) gemm_tile(MR, NV, kk, Ar, lda, Bn, ldb, Cn, ldc, init, In, ldi, alpha)
            if (mr == GEMM_MR && nv == GEMM_NV) TILE(GEMM_MR, GEMM_NV);
            else {
#if GEMM_NV == 4
#define ROW(MR) nv == 4 ? TILE(MR, 4) : nv == 3 ? TILE(MR, 3) : nv == 2 ? TILE(MR, 2) : TILE(MR, 1)
#else
#define ROW(MR) TILE(MR, 1)
#endif
                switch (mr) {
                case 1: ROW(1); break;
                case 2: ROW(2); break;
                case 3: ROW(3); break;
#if GEMM_MR > 4
                case 4: ROW(4); break;
                case 5: ROW(5); break;
                default: ROW(6); break;
#else
                default: ROW(4); break;
#endif
                }
#undef ROW
            }
#undef TILE
        }
    }
}

/* dst[c][r] = src[r][c] for r < rows (≤ 16·k), c < cols (multiple of 16); rows up to the next multiple of
 * 16 are written as zero columns of dst */
static inline void transpose_pad(const float *src, int64_t lds, int rows, int cols, float *dst, int64_t ldd) {
    float tmp[16 * 16];
    for (int r0 = 0; r0 < rows; r0 += 16) {
        const int nr = rows - r0 < 16 ? rows - r0 : 16;
        for (int c0 = 0; c0 < cols; c0 += 16) {
            if (nr == 16) {
                v16_transpose16(src + r0 * lds + c0, lds, dst + c0 * ldd + r0, ldd);
            } else {
                for (int r = 0; r < 16; r++) v16_store(tmp + r * 16, r < nr ? v16_load(src + (r0 + r) * lds + c0) : v16_zero());
                v16_transpose16(tmp, 16, dst + c0 * ldd + r0, ldd);
            }
        }
    }
}

#endif
