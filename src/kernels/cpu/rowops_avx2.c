/* rowops_avx2.c — rowops_simd.h for AVX2 (16 lanes as two YMM halves: the same bits as AVX-512). */
#define ROWOPS_FN(name) name##_avx2
#include "kernels/cpu/rowops_simd.h"
