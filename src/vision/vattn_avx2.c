/* vattn_avx2.c — vattn_simd.h for AVX2 (16 lanes as two YMM halves). */
#define VATTN_FN(name) name##_avx2
#include "vision/vattn_simd.h"
