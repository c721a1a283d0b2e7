/* fdot.h — F32 dot products and multiply-adds in the exact operation order of llama.cpp's CPU backend on
 * x86 (AVX-512 builds), so that deltallm's default mode reproduces its bits where its inputs match:
 *   fdot_vec_f32   ggml_vec_dot_f32: one activation row (decode), mul_mat_id, attention scores
 *   fdot_gemm_f32  llamafile tinyBLAS: mul_mat of ≥ 2 activation rows
 *   fdot_mad_f32   ggml_vec_mad_f32 (the delta-net state update)
 * Each was checked bit for bit against llama.cpp v0.4.0's tensor dumps (docs/PARITY.md). */
#ifndef DL_BASE_FDOT_H
#define DL_BASE_FDOT_H

float fdot_vec_f32(const float *x, const float *y, int n);
float fdot_gemm_f32(const float *x, const float *y, int n);
void fdot_mad_f32(float *y, const float *x, float v, int n);
/* _mm512_reduce_add_ps of 16 floats */
float fdot_reduce16(const float *v);

#endif
