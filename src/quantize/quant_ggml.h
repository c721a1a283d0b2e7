/* quant_ggml.h — weight quantizers whose blocks are bit-identical to what llama.cpp v0.4.0's
 * llama_model_quantize() writes without an importance matrix (ggml's quantize_row_*_ref searches for the
 * K-quants, quantize_iq4_nl / quantize_iq4_xs for the non-linear 4-bit types).
 *
 * Only the types whose format-table quantizer (gguf/format.h, `quantize`) is not already identical are
 * here: Q2_K … Q6_K, IQ4_NL, IQ4_XS. qg_quantizer() picks, for a ggml type id, this file's function or
 * the table's (F32, F16, BF16, Q4_0 … Q8_0 are identical there), or NULL when deltallm cannot write it.
 *
 * The float arithmetic follows ggml's expression by expression (same operand order, float throughout,
 * no contraction: the file is compiled as ISO C, so GCC does not fuse multiply-adds), which is what
 * makes the search take the same branches. tests/test_quantize.c checks ggml's own vectors. */
#ifndef DL_QUANTIZE_QUANT_GGML_H
#define DL_QUANTIZE_QUANT_GGML_H

#include <stdint.h>

#include "gguf/format.h"

void qg_quantize_q2_K(const float *src, void *dst, int64_t n);
void qg_quantize_q3_K(const float *src, void *dst, int64_t n);
void qg_quantize_q4_K(const float *src, void *dst, int64_t n);
void qg_quantize_q5_K(const float *src, void *dst, int64_t n);
void qg_quantize_q6_K(const float *src, void *dst, int64_t n);
void qg_quantize_iq4_nl(const float *src, void *dst, int64_t n);
void qg_quantize_iq4_xs(const float *src, void *dst, int64_t n);

/* The ggml-identical quantizer for type id, or NULL. */
FormatFromFloat qg_quantizer(uint32_t type);

#endif
