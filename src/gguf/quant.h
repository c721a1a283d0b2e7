/* quant.h — the per-type functions behind the format table (internal: format.c wires them into rows).
 *
 * Signatures are the table's (format.h): to_float(src, dst, n), from_float / quantize(src, dst, n) and
 * vec_dot(n, w, act), n a multiple of the block size. Quantizers expect finite input. None allocates
 * or prints. Grouped by the file that implements them:
 *   quant_float.c   F32, F16, BF16
 *   quant_act.c     the activation formats Q8_0 (x86 rounding), Q8_1, Q8_K
 *   quant_legacy.c  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4
 *   quant_k.c       Q2_K … Q6_K: dequantization and dot products
 *   quant_k_write.c Q2_K … Q6_K weight quantizers
 *   quant_iq.c      IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_NL, IQ4_XS
 *
 * The vec_dot functions are the plain references (integer sums per block, scales applied per block). The
 * dot_path_<type> functions reproduce, bit for bit, the summation order of the kernel llama.cpp v0.4.0's
 * x86 CPU backend (AVX2 / AVX-512 build) runs for a given path, and dot_path_<type>_pick its choice of
 * kernel (see docs/PARITY.md, "Matmul summation orders"):
 *   quant_order_float.c   F16, BF16
 *   quant_order_legacy.c  Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4
 *   quant_order_k.c       Q2_K … Q6_K
 *   quant_order_iq.c      IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_XS */
#ifndef DL_GGUF_QUANT_H
#define DL_GGUF_QUANT_H

#include <stdint.h>

#include "gguf/format.h"

/* DOT_REPACK, DOT_REPACK_GEMM and format_pick_path_row: see format.h. */

/* quant_float.c */
void dequant_f32(const void *src, float *dst, int64_t n);
float vec_dot_f32(int64_t n, const void *w, const void *act);
/* F32 in llama.cpp's orders: ggml_vec_dot_f32 (GEMV, ID) and tinyBLAS (GEMM) — see base/fdot.h */
float dot_path_f32(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_f32_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
void dequant_f16(const void *src, float *dst, int64_t n);
float vec_dot_f16(int64_t n, const void *w, const void *act);
void dequant_bf16(const void *src, float *dst, int64_t n);
float vec_dot_bf16(int64_t n, const void *w, const void *act);
void quantize_f32(const float *src, void *dst, int64_t n);
void quantize_f16(const float *src, void *dst, int64_t n);
void quantize_bf16(const float *src, void *dst, int64_t n);

/* quant_act.c: activation quantizers, bit-identical to ggml's x86 CPU from_float */
void quantize_act_q8_0(const float *src, void *dst, int64_t n);
void quantize_act_q8_1(const float *src, void *dst, int64_t n);
void quantize_act_q8_K(const float *src, void *dst, int64_t n);
void dequant_q8_1(const void *src, float *dst, int64_t n);
void dequant_q8_K(const void *src, float *dst, int64_t n);

/* quant_legacy.c */
void dequant_q4_0(const void *src, float *dst, int64_t n);
float vec_dot_q4_0(int64_t n, const void *w, const void *act);
void dequant_q4_1(const void *src, float *dst, int64_t n);
float vec_dot_q4_1(int64_t n, const void *w, const void *act);
void dequant_q5_0(const void *src, float *dst, int64_t n);
float vec_dot_q5_0(int64_t n, const void *w, const void *act);
void dequant_q5_1(const void *src, float *dst, int64_t n);
float vec_dot_q5_1(int64_t n, const void *w, const void *act);
void dequant_q8_0(const void *src, float *dst, int64_t n);
float vec_dot_q8_0(int64_t n, const void *w, const void *act);
void dequant_mxfp4(const void *src, float *dst, int64_t n);
float vec_dot_mxfp4(int64_t n, const void *w, const void *act);
void quantize_q4_0(const float *src, void *dst, int64_t n);
void quantize_q4_1(const float *src, void *dst, int64_t n);
void quantize_q5_0(const float *src, void *dst, int64_t n);
void quantize_q5_1(const float *src, void *dst, int64_t n);
void quantize_q8_0(const float *src, void *dst, int64_t n); /* ggml's reference (roundf), not the x86 one */

/* quant_k.c, quant_k_write.c */
void dequant_q2_K(const void *src, float *dst, int64_t n);
float vec_dot_q2_K(int64_t n, const void *w, const void *act);
void dequant_q3_K(const void *src, float *dst, int64_t n);
float vec_dot_q3_K(int64_t n, const void *w, const void *act);
void dequant_q4_K(const void *src, float *dst, int64_t n);
float vec_dot_q4_K(int64_t n, const void *w, const void *act);
void dequant_q5_K(const void *src, float *dst, int64_t n);
float vec_dot_q5_K(int64_t n, const void *w, const void *act);
void dequant_q6_K(const void *src, float *dst, int64_t n);
float vec_dot_q6_K(int64_t n, const void *w, const void *act);
void quantize_q2_K(const float *src, void *dst, int64_t n);
void quantize_q3_K(const float *src, void *dst, int64_t n);
void quantize_q4_K(const float *src, void *dst, int64_t n);
void quantize_q5_K(const float *src, void *dst, int64_t n);
void quantize_q6_K(const float *src, void *dst, int64_t n);

/* quant_iq.c */
void dequant_iq2_xxs(const void *src, float *dst, int64_t n);
float vec_dot_iq2_xxs(int64_t n, const void *w, const void *act);
void dequant_iq2_xs(const void *src, float *dst, int64_t n);
float vec_dot_iq2_xs(int64_t n, const void *w, const void *act);
void dequant_iq2_s(const void *src, float *dst, int64_t n);
float vec_dot_iq2_s(int64_t n, const void *w, const void *act);
void dequant_iq3_xxs(const void *src, float *dst, int64_t n);
float vec_dot_iq3_xxs(int64_t n, const void *w, const void *act);
void dequant_iq3_s(const void *src, float *dst, int64_t n);
float vec_dot_iq3_s(int64_t n, const void *w, const void *act);
void dequant_iq1_s(const void *src, float *dst, int64_t n);
float vec_dot_iq1_s(int64_t n, const void *w, const void *act);
void dequant_iq1_m(const void *src, float *dst, int64_t n);
float vec_dot_iq1_m(int64_t n, const void *w, const void *act);
void dequant_iq4_nl(const void *src, float *dst, int64_t n);
float vec_dot_iq4_nl(int64_t n, const void *w, const void *act);
void dequant_iq4_xs(const void *src, float *dst, int64_t n);
float vec_dot_iq4_xs(int64_t n, const void *w, const void *act);
void quantize_iq4_nl(const float *src, void *dst, int64_t n);
void quantize_iq4_xs(const float *src, void *dst, int64_t n);

/* quant_order_*.c: llama.cpp's summation orders (dot_path) and kernel choices (pick_path; none where every
 * path has the same order) */
float dot_path_f16(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_f16_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_bf16(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_bf16_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_q8_0(DotPath path, int64_t n, const void *w, const void *act);
float dot_path_q4_0(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_q4_0_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_q4_1(DotPath path, int64_t n, const void *w, const void *act);
float dot_path_q5_0(DotPath path, int64_t n, const void *w, const void *act);
float dot_path_q5_1(DotPath path, int64_t n, const void *w, const void *act);
float dot_path_iq4_nl(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq4_nl_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_mxfp4(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_mxfp4_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_q2_K(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_q2_K_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_q3_K(DotPath path, int64_t n, const void *w, const void *act);
float dot_path_q4_K(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_q4_K_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_q5_K(DotPath path, int64_t n, const void *w, const void *act);
float dot_path_q6_K(DotPath path, int64_t n, const void *w, const void *act);
float dot_path_iq2_xxs(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq2_xxs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_iq2_xs(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq2_xs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_iq2_s(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq2_s_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_iq3_xxs(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq3_xxs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_iq3_s(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq3_s_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_iq1_s(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq1_s_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_iq1_m(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq1_m_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);
float dot_path_iq4_xs(DotPath path, int64_t n, const void *w, const void *act);
DotPath dot_path_iq4_xs_pick(int64_t rows, int64_t cols, int64_t n_act, bool expert);

#endif
