/* matmul_cpu.h — the contract between the matrix-multiply driver (matmul_cpu.c, portable C) and the
 * per-ISA kernels (matmul_*_avx2.c, matmul_*_avx512.c). Internal to kernels/cpu/.
 *
 * The driver does what every format shares: it decides the DotPath exactly as matmul_ref does, turns
 * the F32 activation rows into the kernel's activation layout (one "prepared row" per token, in the
 * OpCtx scratch), cuts the output into (row chunk × token chunk) items and hands them to the pool. A
 * format's kernel then computes y[t][o] for a block of rows and tokens, bit for bit what the format's
 * dot_path (or vec_dot) gives for the same path.
 *
 * Prepared activations (one "group" of tokens after another, 64-aligned):
 *   MM_ACT_Q8_0   per token, the Q8_0 partner, per 32-block i: qs[K] int8 | d[nb] float (the fp16
 *                 value, widened) | s[nb] float (MM_ACT_Q8_1 only: its fp16 s, widened) | corr[nb][8]
 *                 int32 = -off·(sum of the 4 quants of each lane), off = MmFormat.act_off (weights fed to
 *                 the unsigned side of vpdpbusd as q + off) | corr32[nb] int32 = -off·(sum of the block)
 *   MM_ACT_Q8_0P  per octet of tokens (8m … 8m+7; tokens past T are zeros), the same values for the
 *                 GEMM kernels, per block i 576 bytes: qs of the 4 token pairs (pair p: tokens 2p | 2p+1,
 *                 32 bytes each) | corr of the 4 pairs (8 int32 per token) | DA: 16 floats
 *                 [d0 d2 d4 d6 | d0 d2 d4 d6 | d1 d3 d5 d7 | d1 d3 d5 d7] (d_k of token 8m+k)
 *   MM_ACT_Q8_K   per token, per 256-block:  qs[K] int8 | d[nb] float | bsums[nb][16] int16 | and when
 *                 act_off ≠ 0: corr[nb][64] int32 = -off·(sum of each 4 quants) | corr16[nb][16] int32 =
 *                 -off·bsums
 *   MM_ACT_F16, MM_ACT_BF16   per token, the row converted, K uint16
 *   MM_ACT_F32    none: kernels read x itself
 * Prepared values are bit-identical to the format table's from_float (only the layout differs). */
#ifndef DL_KERNELS_CPU_MATMUL_CPU_H
#define DL_KERNELS_CPU_MATMUL_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/format.h"
#include "kernels/ops.h"

#define MM_ALIGN64(x) (((size_t)(x) + 63) & ~(size_t)63)

typedef enum MmActKind { MM_ACT_F32 = 0, MM_ACT_Q8_0, MM_ACT_Q8_1, MM_ACT_Q8_0P, MM_ACT_Q8_K, MM_ACT_F16, MM_ACT_BF16 } MmActKind;

/* Section offsets of a prepared group (a token, or an octet of tokens) of K elements (bytes from its
 * start); stride is the group's size, group the number of tokens in it. */
typedef struct MmActLayout {
    size_t qs, d, s, corr, corr16, corr32, bsums, stride;
    int group;
} MmActLayout;

#define MM_Q8P_BLOCK 576 /* bytes per 32-block of a MM_ACT_Q8_0P octet */

static inline MmActLayout mm_act_layout(MmActKind kind, int64_t K) {
    MmActLayout l = {0, 0, 0, 0, 0, 0, 0, 0, 1};
    size_t p = 0;
    switch (kind) {
    case MM_ACT_Q8_0P:
        l.group = 8;
        p = (size_t)K / 32 * MM_Q8P_BLOCK;
        break;
    case MM_ACT_Q8_0:
    case MM_ACT_Q8_1: {
        const size_t nb = (size_t)K / 32;
        l.qs = 0;
        p = MM_ALIGN64(K);
        l.d = p;
        p = MM_ALIGN64(p + nb * 4);
        if (kind == MM_ACT_Q8_1) {
            l.s = p;
            p = MM_ALIGN64(p + nb * 4);
        }
        l.corr = p;
        p = MM_ALIGN64(p + nb * 32);
        l.corr32 = p;
        p = MM_ALIGN64(p + nb * 4);
        break;
    }
    case MM_ACT_Q8_K: {
        const size_t nb = (size_t)K / 256;
        l.qs = 0;
        p = MM_ALIGN64(K);
        l.d = p;
        p = MM_ALIGN64(p + nb * 4);
        l.bsums = p;
        p = MM_ALIGN64(p + nb * 32);
        l.corr = p;
        p = MM_ALIGN64(p + nb * 256);
        l.corr16 = p;
        p = MM_ALIGN64(p + nb * 64);
        break;
    }
    case MM_ACT_F16:
    case MM_ACT_BF16: p = MM_ALIGN64((size_t)K * 2); break;
    case MM_ACT_F32: p = 0; break;
    }
    l.stride = p;
    return l;
}

/* One matmul in flight. */
typedef struct MmJob {
    const MatW *w;
    const float *x; /* [T][K] */
    float *y;       /* [T][O] */
    int64_t K, O, T;
    DotPath path; /* llama.cpp's kernel for the tokens of this call (what matmul_ref computes for them) */
    MmActKind act_kind;
    MmActLayout al;
    int act_off;         /* MM_ACT_Q8_0: the weight offset corr is made for */
    const uint8_t *act;  /* the prepared groups, al.stride apart (NULL for F32) */
    uint8_t *tmp;        /* per-thread scratch: thread i at tmp + i·tmp_stride */
    size_t tmp_stride;
    int64_t rc, tc;      /* rows / tokens per work item */
    int64_t n_tc;        /* token chunks */
} MmJob;

/* token t's prepared row (one-token layouts), octet m's group (MM_ACT_Q8_0P) */
static inline const uint8_t *mm_act_row(const MmJob *j, int64_t t) { return j->act + (size_t)t * j->al.stride; }
static inline const uint8_t *mm_act_group(const MmJob *j, int64_t g) { return j->act + (size_t)g * j->al.stride; }
static inline const uint8_t *mm_w_row(const MmJob *j, int64_t o) {
    return (const uint8_t *)j->w->data + (size_t)o * j->w->row_bytes;
}
/* For kernels that read MatW.pack (rows interleaved by 8 per block of bb bytes; Q8_0 today): row o's
 * first block, whose block i lies mm_w_bstride() · i further; the natural layout when there is no pack. */
static inline const uint8_t *mm_w_row8(const MmJob *j, int64_t o, size_t bb) {
    if (!j->w->pack || j->w->pack_kind != PACK_R8) return mm_w_row(j, o);
    return (const uint8_t *)j->w->pack + (size_t)(o >> 3) * 8 * j->w->row_bytes + (size_t)(o & 7) * bb;
}
static inline size_t mm_w_bstride(const MmJob *j, size_t bb) { return j->w->pack && j->w->pack_kind == PACK_R8 ? 8 * bb : bb; }

/* The K-quant / i-quant kernels' SPAN per path (matmul_kq_avx512.h): how many elements llama.cpp's kernel
 * for that path sums exactly before one fused multiply-add per span; 0: the format's vec_dot order.
 * Shared by the AVX2 and AVX-512 kernels. */
static inline int mm_span_q2(DotPath p) { return p == DOT_REPACK || p == DOT_FAST ? 256 : p == DOT_REPACK_GEMM ? 128 : 0; }
static inline int mm_span_q4(DotPath p) { return p == DOT_REPACK || p == DOT_FAST ? 256 : p == DOT_REPACK_GEMM ? 64 : 0; }
static inline int mm_span_iq(DotPath p) { return p == DOT_GEMM || p == DOT_FAST ? 256 : 0; }
/* Q3_K, Q5_K, Q6_K: LANES8 on every llama.cpp path; a whole super-block in the fast arithmetic */
static inline int mm_span_none(DotPath p) { return p == DOT_FAST ? 256 : 0; }

/* A weight format's kernels for one ISA. */
typedef struct MmFormat {
    MmActKind act_kind;
    int act_off;
    /* from this many tokens on, the activations are prepared as act_kind_gemm instead (0: never) */
    int gemm_min_T;
    MmActKind act_kind_gemm;
    /* true if compute() serves this path (else the driver falls back to matmul_ref for the matrix); NULL: every
     * llama.cpp path (DOT_FAST only where `fast` says so) */
    bool (*serves)(DotPath path, int64_t rows, int64_t cols, int64_t T);
    /* compute() serves DOT_FAST (the fast arithmetic) for any T */
    bool fast;
    /* per-thread scratch the kernel needs for rows of K elements (0: none) */
    size_t (*tmp_bytes)(int64_t K);
    /* rows [o0, o1) × tokens [t0, t1) of y */
    void (*compute)(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp);
} MmFormat;

/* Prepares one group of kind: n (≤ group size) activation rows x (K floats each, K apart) into dst
 * (act_off for the Q8_0 kinds); rows n … group-1 are prepared as zeros. */
typedef void (*MmActPrep)(MmActKind kind, int act_off, const float *x, int n, int64_t K, uint8_t *dst);

/* The kernels, per format and ISA (matmul_cpu.c lists them in its tables). */
extern const MmFormat mm_q8_0_avx2, mm_q8_0_avx512;
/* Q4_K, Q5_K and Q6_K on P16 panels, the fast arithmetic (matmul_kpanel_avx512.c; their mm_*_avx512 hand these
 * matrices to it) */
void mm_k_p16_compute(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp);
/* the tmp it needs for rows of K elements (two panels' decoded codes) */
size_t mm_k_p16_tmp_bytes(int64_t K);
/* DOT_FAST only: AVX2 from the file's layout; AVX-512 on P16 panels (mm_q8_0_dec_avx512 without them) */
extern const MmFormat mm_q8_0_fast_avx2, mm_q8_0_fast_avx512, mm_q8_0_dec_avx512;
extern const MmFormat mm_f32_avx2, mm_f32_avx512, mm_f16_avx2, mm_f16_avx512, mm_bf16_avx2, mm_bf16_avx512;
extern const MmFormat mm_f32_fast_avx2, mm_f32_fast_avx512, mm_f16_fast_avx2, mm_f16_fast_avx512, mm_bf16_fast_avx2,
    mm_bf16_fast_avx512; /* DOT_FAST: F32 activations */
extern const MmFormat mm_q2_K_avx512, mm_q3_K_avx512, mm_q4_K_avx512, mm_q5_K_avx512, mm_q6_K_avx512;
extern const MmFormat mm_q4_0_avx512, mm_q5_0_avx512, mm_iq4_nl_avx512, mm_mxfp4_avx512, mm_q4_1_avx512, mm_q5_1_avx512;
extern const MmFormat mm_q4_0_avx2, mm_q5_0_avx2, mm_iq4_nl_avx2, mm_mxfp4_avx2, mm_q4_1_avx2, mm_q5_1_avx2;
extern const MmFormat mm_q2_K_avx2, mm_q3_K_avx2, mm_q4_K_avx2, mm_q5_K_avx2, mm_q6_K_avx2;
extern const MmFormat mm_iq2_xxs_avx2, mm_iq2_xs_avx2, mm_iq2_s_avx2, mm_iq3_xxs_avx2, mm_iq3_s_avx2, mm_iq4_xs_avx2,
    mm_iq1_s_avx2, mm_iq1_m_avx2;
extern const MmFormat mm_iq2_xxs_avx512, mm_iq2_xs_avx512, mm_iq2_s_avx512, mm_iq3_xxs_avx512, mm_iq3_s_avx512,
    mm_iq4_xs_avx512, mm_iq1_s_avx512, mm_iq1_m_avx512;

void mm_act_prep_avx2(MmActKind kind, int act_off, const float *x, int n, int64_t K, uint8_t *dst);
void mm_act_prep_avx512(MmActKind kind, int act_off, const float *x, int n, int64_t K, uint8_t *dst);

/* SIMD activation quantizers in the format table's block layout, bit-identical to its from_float
 * (tests compare them; the kernels use the prepared layouts above). */
void quantize_act_q8_0_avx2(const float *x, void *dst, int64_t n);
void quantize_act_q8_1_avx2(const float *x, void *dst, int64_t n);
void quantize_act_q8_K_avx2(const float *x, void *dst, int64_t n);
void quantize_act_f16_avx2(const float *x, void *dst, int64_t n);
void quantize_act_bf16_avx2(const float *x, void *dst, int64_t n);
void quantize_act_q8_0_avx512(const float *x, void *dst, int64_t n);
void quantize_act_q8_1_avx512(const float *x, void *dst, int64_t n);
void quantize_act_q8_K_avx512(const float *x, void *dst, int64_t n);
void quantize_act_f16_avx512(const float *x, void *dst, int64_t n);
void quantize_act_bf16_avx512(const float *x, void *dst, int64_t n);

/* For tests and the benchmark: the fast from_float of an activation format (FMT_Q8_0, FMT_Q8_1,
 * FMT_Q8_K, FMT_F16, FMT_BF16) at an ISA level (isa.h's Isa), or NULL. */
FormatFromFloat mm_quantize_act(int isa, uint32_t act_type);
/* For tests: whether an ISA level has a fast kernel for this matrix and product shape in this arithmetic. */
bool mm_has_kernel(int isa, MatMode mode, const MatW *w, int64_t T);
/* Whether the AVX-512 kernels may use their AVX512_VBMI variants (IQ2_XXS decode): the CPU's answer unless a test
 * turned them off to check the plain variants too (mm_set_vbmi(false); true restores the CPU's answer). */
bool mm_vbmi(void);
void mm_set_vbmi(bool allow);

#endif
