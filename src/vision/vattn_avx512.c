/* vattn_avx512.c — vattn_simd.h for AVX-512. */
#define VATTN_FN(name) name##_avx512
#include "vision/vattn_simd.h"
