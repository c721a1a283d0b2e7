/* conv_avx512.c — the conv kernels for AVX512 (conv_simd.h). */
#define SEQ_FN(name) name##_avx512
#include "kernels/cpu/conv_simd.h"
