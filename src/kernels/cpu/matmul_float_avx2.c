/* matmul_float_avx2.c — F32, F16 and BF16 weights at the AVX2 level (matmul_float_simd.h). */
#define MF_FN(name) name##_avx2
#include "kernels/cpu/matmul_float_simd.h"
