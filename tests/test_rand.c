/* test_rand.c — see test_rand.h. */
#include "test_rand.h"

#include "base/fp16.h"

#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
uint32_t trand_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
float trand_f(void) { return ((float)(trand_u32() & 0xffffff) / 16777216.f) * 2.f - 1.f; }
float trand_act(void) {
    float s = trand_f() + trand_f() + trand_f();
    if ((trand_u32() & 63) == 0) s *= 8;
    return s;
}

static void put_f16(uint8_t *p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* A valid random row of `cols` elements in format f: quantized from random floats (float formats; half of
 * the rows of the others, where they have a quantizer), else random bits with sane fp16 scales (every code
 * and sub-scale occurs). */
void trand_row(const Format *f, uint8_t *dst, int64_t cols) {
    static float buf[1 << 16];
    const bool is_float = f->id == FMT_F32 || f->id == FMT_F16 || f->id == FMT_BF16;
    if (f->quantize && cols <= (int64_t)(sizeof buf / sizeof buf[0]) && (is_float || (trand_u32() & 1))) {
        for (int64_t i = 0; i < cols; i++) buf[i] = trand_f() * 0.5f;
        f->quantize(buf, dst, cols);
        return;
    }
    const size_t nbytes = format_row_bytes(f, cols);
    for (size_t i = 0; i < nbytes; i++) dst[i] = (uint8_t)trand_u32();
    const int64_t nb = cols / f->block;
    /* a quarter of MXFP4's random rows take only the smallest exponents (E8M0 0-3: subnormal scales) */
    const bool tiny = f->id == FMT_MXFP4 && (trand_u32() & 3) == 0;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = dst + b * f->bytes;
        const float d = (0.002f + 0.01f * (trand_f() + 1)) * (trand_u32() & 1 ? -1 : 1);
        switch (f->id) {
        case FMT_MXFP4: blk[0] = (uint8_t)(tiny ? trand_u32() % 4 : 118 + trand_u32() % 12); break;
        case FMT_IQ1_M: {
            const uint16_t h = fp32_to_fp16(fabsf(d));
            for (int i = 0; i < 4; i++) {
                uint16_t s;
                memcpy(&s, blk + 48 + 2 * i, 2);
                s = (uint16_t)((s & 0x0fff) | (((h >> (4 * i)) & 15) << 12));
                memcpy(blk + 48 + 2 * i, &s, 2);
            }
            break;
        }
        case FMT_Q2_K: put_f16(blk + 80, d), put_f16(blk + 82, fabsf(d) * 0.5f); break;
        case FMT_Q3_K: put_f16(blk + 108, d); break;
        case FMT_Q6_K: put_f16(blk + 208, d); break;
        case FMT_Q4_K:
        case FMT_Q5_K:
        case FMT_Q4_1:
        case FMT_Q5_1: put_f16(blk, d), put_f16(blk + 2, d * 0.5f); break;
        default: put_f16(blk, d); break; /* every other format starts with its fp16 d */
        }
    }
}

