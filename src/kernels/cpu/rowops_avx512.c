/* rowops_avx512.c — rowops_simd.h for AVX-512. */
#define ROWOPS_FN(name) name##_avx512
#include "kernels/cpu/rowops_simd.h"
