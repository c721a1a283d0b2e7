/* attention_avx512.c — the attention kernels for AVX512 (attention_simd.h). */
#define SEQ_FN(name) name##_avx512
#include "kernels/cpu/attention_simd.h"
