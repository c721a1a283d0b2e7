/* attention_avx2.c — the attention kernels for AVX2 (attention_simd.h). */
#define SEQ_FN(name) name##_avx2
#include "kernels/cpu/attention_simd.h"
