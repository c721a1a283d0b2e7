/* quantize_act_avx512.c — the SIMD activation quantizers and prepared rows for the AVX-512 level
 * (quantize_act_simd.h; the same AVX2 code, compiled with the AVX-512 flags). */
#define QA_FN(name) name##_avx512
#include "kernels/cpu/quantize_act_simd.h"
