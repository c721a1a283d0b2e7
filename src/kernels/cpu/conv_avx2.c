/* conv_avx2.c — the conv kernels for AVX2 (conv_simd.h). */
#define SEQ_FN(name) name##_avx2
#include "kernels/cpu/conv_simd.h"
