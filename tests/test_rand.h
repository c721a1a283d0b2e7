/* test_rand.h — the tests' random data: a fixed xorshift stream, activations with outliers, and valid random
 * weight rows in any format (shared by the kernel and backend-ops tests). */
#ifndef DL_TESTS_TEST_RAND_H
#define DL_TESTS_TEST_RAND_H

#include <stdint.h>

#include "gguf/format.h"

uint32_t trand_u32(void);
float trand_f(void);   /* uniform in [-1, 1) */
float trand_act(void); /* roughly Gaussian, with the occasional outlier as real activations have */
/* A valid random row of `cols` elements in format f: quantized from random floats (float formats; half of
 * the rows of the others, where they have a quantizer), else random bits with sane fp16 scales (every code
 * and sub-scale occurs). */
void trand_row(const Format *f, uint8_t *dst, int64_t cols);

#endif
