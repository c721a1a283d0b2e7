/* bwprobe_avx2.c — the AVX2 streaming read of the bandwidth probe (four independent 256-bit adds per
 * 128 bytes, enough to keep two cores' load ports busy). */
#include "cli/bwprobe.h"

#include <immintrin.h>

unsigned long long bwprobe_sum_avx2(const void *p, size_t bytes) {
    const __m256i *v = p;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (size_t i = 0; i < bytes / 32; i += 4) {
        a = _mm256_add_epi64(a, _mm256_load_si256(v + i));
        b = _mm256_add_epi64(b, _mm256_load_si256(v + i + 1));
        c = _mm256_add_epi64(c, _mm256_load_si256(v + i + 2));
        d = _mm256_add_epi64(d, _mm256_load_si256(v + i + 3));
    }
    a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    unsigned long long out[4];
    _mm256_storeu_si256((__m256i *)out, a);
    return out[0] + out[1] + out[2] + out[3];
}
