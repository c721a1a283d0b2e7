/* deltanet_avx512.c — the delta-net scan kernels for AVX-512 (deltanet_simd.h). */
#define SEQ_FN(name) name##_avx512
#include "kernels/cpu/deltanet_simd.h"
