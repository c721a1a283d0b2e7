/* deltanet_avx2.c — the delta-net scan kernels for AVX2 (deltanet_simd.h; V16 is a pair of YMM registers,
 * same bits as AVX-512). */
#define SEQ_FN(name) name##_avx2
#include "kernels/cpu/deltanet_simd.h"
