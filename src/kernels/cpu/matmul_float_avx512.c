/* matmul_float_avx512.c — F32, F16 and BF16 weights at the AVX-512 level (matmul_float_simd.h); BF16
 * uses VDPBF16PS where the CPU has AVX512_BF16. */
#define MF_FN(name) name##_avx512
#include "kernels/cpu/matmul_float_simd.h"
