/* quantize_act_avx2.c — the SIMD activation quantizers and prepared rows for the AVX2 level
 * (quantize_act_simd.h). */
#define QA_FN(name) name##_avx2
#include "kernels/cpu/quantize_act_simd.h"
