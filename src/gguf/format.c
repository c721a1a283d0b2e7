/* format.c — the rows of the weight-format table (see format.h). The per-type functions live in
 * gguf/quant_*.c; this file only wires them into rows. */
#include "gguf/format.h"

#include "base/fp16.h"

#include <string.h>

static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_fp32(s[i]);
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = fp32_to_fp16(src[i]);
}
static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_fp32(s[i]);
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = fp32_to_bf16(src[i]);
}

static const Format formats[FMT_COUNT] = {
    [FMT_F32] = {FMT_F32, "f32", 1, 4, true, FMT_F32, f32_to_float, f32_from_float},
    [FMT_F16] = {FMT_F16, "f16", 1, 2, true, FMT_F16, f16_to_float, f16_from_float},
    [FMT_BF16] = {FMT_BF16, "bf16", 1, 2, true, FMT_BF16, bf16_to_float, bf16_from_float},
    [FMT_Q4_0] = {FMT_Q4_0, "q4_0", 32, 18, true, FMT_Q8_0, NULL, NULL},
    [FMT_Q4_1] = {FMT_Q4_1, "q4_1", 32, 20, true, FMT_Q8_1, NULL, NULL},
    [FMT_Q5_0] = {FMT_Q5_0, "q5_0", 32, 22, true, FMT_Q8_0, NULL, NULL},
    [FMT_Q5_1] = {FMT_Q5_1, "q5_1", 32, 24, true, FMT_Q8_1, NULL, NULL},
    [FMT_Q8_0] = {FMT_Q8_0, "q8_0", 32, 34, true, FMT_Q8_0, NULL, NULL},
    [FMT_Q8_1] = {FMT_Q8_1, "q8_1", 32, 36, false, FMT_Q8_1, NULL, NULL},
    [FMT_Q2_K] = {FMT_Q2_K, "q2_K", 256, 84, true, FMT_Q8_K, NULL, NULL},
    [FMT_Q3_K] = {FMT_Q3_K, "q3_K", 256, 110, true, FMT_Q8_K, NULL, NULL},
    [FMT_Q4_K] = {FMT_Q4_K, "q4_K", 256, 144, true, FMT_Q8_K, NULL, NULL},
    [FMT_Q5_K] = {FMT_Q5_K, "q5_K", 256, 176, true, FMT_Q8_K, NULL, NULL},
    [FMT_Q6_K] = {FMT_Q6_K, "q6_K", 256, 210, true, FMT_Q8_K, NULL, NULL},
    [FMT_Q8_K] = {FMT_Q8_K, "q8_K", 256, 292, false, FMT_Q8_K, NULL, NULL},
    [FMT_IQ2_XXS] = {FMT_IQ2_XXS, "iq2_xxs", 256, 66, true, FMT_Q8_K, NULL, NULL},
    [FMT_IQ2_XS] = {FMT_IQ2_XS, "iq2_xs", 256, 74, true, FMT_Q8_K, NULL, NULL},
    [FMT_IQ2_S] = {FMT_IQ2_S, "iq2_s", 256, 82, true, FMT_Q8_K, NULL, NULL},
    [FMT_IQ3_XXS] = {FMT_IQ3_XXS, "iq3_xxs", 256, 98, true, FMT_Q8_K, NULL, NULL},
    [FMT_IQ3_S] = {FMT_IQ3_S, "iq3_s", 256, 110, true, FMT_Q8_K, NULL, NULL},
    [FMT_IQ4_NL] = {FMT_IQ4_NL, "iq4_nl", 32, 18, true, FMT_Q8_0, NULL, NULL},
    [FMT_IQ4_XS] = {FMT_IQ4_XS, "iq4_xs", 256, 136, true, FMT_Q8_K, NULL, NULL},
    [FMT_IQ1_S] = {FMT_IQ1_S, "iq1_s", 256, 50, true, FMT_Q8_K, NULL, NULL},
    [FMT_IQ1_M] = {FMT_IQ1_M, "iq1_m", 256, 56, true, FMT_Q8_K, NULL, NULL},
    [FMT_MXFP4] = {FMT_MXFP4, "mxfp4", 32, 17, true, FMT_Q8_0, NULL, NULL},
};

const Format *format_get(uint32_t id) {
    if (id >= FMT_COUNT || formats[id].name == NULL) return NULL;
    return &formats[id];
}

const char *format_name(uint32_t id) {
    static const char *const others[FMT_COUNT] = {
        [4] = "q4_2 (removed)", [5] = "q4_3 (removed)", [FMT_I8] = "i8", [FMT_I16] = "i16",
        [FMT_I32] = "i32", [FMT_I64] = "i64", [FMT_F64] = "f64", [31] = "q4_0_4_4 (removed)",
        [32] = "q4_0_4_8 (removed)", [33] = "q4_0_8_8 (removed)", [FMT_TQ1_0] = "tq1_0", [FMT_TQ2_0] = "tq2_0",
        [36] = "iq4_nl_4_4 (removed)", [37] = "iq4_nl_4_8 (removed)", [38] = "iq4_nl_8_8 (removed)",
    };
    const Format *f = format_get(id);
    if (f) return f->name;
    if (id < FMT_COUNT && others[id]) return others[id];
    return "?";
}
