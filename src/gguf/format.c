/* format.c — the rows of the weight-format table (see format.h). The per-type functions live in
 * gguf/quant_*.c (declared in gguf/quant.h); this file only wires them into rows.
 *
 * from_float is ggml's CPU from_float for the row's own type (what an activation row becomes); for the
 * weight formats that are not also activation formats it is NULL. quantize is deltallm's weight
 * quantizer (bit-identical to ggml only where quant_*.c says so). dot_path / pick_path are llama.cpp's
 * summation orders and kernel choices (quant_order_*.c, docs/PARITY.md); format_pick_path_row adds the per-row
 * split of the repacked gemm. */
#include "gguf/format.h"

#include "base/fdot.h"
#include "base/fp16.h"

#include <math.h>

#include "gguf/quant.h"

#include <stddef.h>

#define ROW(ID, NAME, BLOCK, BYTES, WEIGHT, VDT, TO, FROM, QUANT, DOT, PATH, PICK)                                 \
    [ID] = {.id = ID, .name = NAME, .block = BLOCK, .bytes = BYTES, .weight = WEIGHT, .vec_dot_type = VDT, \
            .to_float = TO, .from_float = FROM, .quantize = QUANT, .vec_dot = DOT, .dot_path = PATH, .pick_path = PICK}

static const Format formats[FMT_COUNT] = {
    /* float formats: from_float = quantize (plain rounding) */
    ROW(FMT_F32, "f32", 1, 4, true, FMT_F32, dequant_f32, quantize_f32, quantize_f32, vec_dot_f32, dot_path_f32, dot_path_f32_pick),
    ROW(FMT_F16, "f16", 1, 2, true, FMT_F16, dequant_f16, quantize_f16, quantize_f16, vec_dot_f16, dot_path_f16, dot_path_f16_pick),
    ROW(FMT_BF16, "bf16", 1, 2, true, FMT_BF16, dequant_bf16, quantize_bf16, quantize_bf16, vec_dot_bf16, dot_path_bf16, dot_path_bf16_pick),
    /* 32-element formats */
    ROW(FMT_Q4_0, "q4_0", 32, 18, true, FMT_Q8_0, dequant_q4_0, NULL, quantize_q4_0, vec_dot_q4_0, dot_path_q4_0, dot_path_q4_0_pick),
    ROW(FMT_Q4_1, "q4_1", 32, 20, true, FMT_Q8_1, dequant_q4_1, NULL, quantize_q4_1, vec_dot_q4_1, dot_path_q4_1, NULL),
    ROW(FMT_Q5_0, "q5_0", 32, 22, true, FMT_Q8_0, dequant_q5_0, NULL, quantize_q5_0, vec_dot_q5_0, dot_path_q5_0, NULL),
    ROW(FMT_Q5_1, "q5_1", 32, 24, true, FMT_Q8_1, dequant_q5_1, NULL, quantize_q5_1, vec_dot_q5_1, dot_path_q5_1, NULL),
    /* Q8_0 is both: x86 activation rounding for from_float, ggml's reference rounding for quantize */
    ROW(FMT_Q8_0, "q8_0", 32, 34, true, FMT_Q8_0, dequant_q8_0, quantize_act_q8_0, quantize_q8_0, vec_dot_q8_0, dot_path_q8_0, NULL),
    ROW(FMT_Q8_1, "q8_1", 32, 36, false, FMT_Q8_1, dequant_q8_1, quantize_act_q8_1, NULL, NULL, NULL, NULL),
    ROW(FMT_IQ4_NL, "iq4_nl", 32, 18, true, FMT_Q8_0, dequant_iq4_nl, NULL, quantize_iq4_nl, vec_dot_iq4_nl, dot_path_iq4_nl, dot_path_iq4_nl_pick),
    ROW(FMT_MXFP4, "mxfp4", 32, 17, true, FMT_Q8_0, dequant_mxfp4, NULL, NULL, vec_dot_mxfp4, dot_path_mxfp4, dot_path_mxfp4_pick),
    /* K-quants */
    ROW(FMT_Q2_K, "q2_K", 256, 84, true, FMT_Q8_K, dequant_q2_K, NULL, quantize_q2_K, vec_dot_q2_K, dot_path_q2_K, dot_path_q2_K_pick),
    ROW(FMT_Q3_K, "q3_K", 256, 110, true, FMT_Q8_K, dequant_q3_K, NULL, quantize_q3_K, vec_dot_q3_K, dot_path_q3_K, NULL),
    ROW(FMT_Q4_K, "q4_K", 256, 144, true, FMT_Q8_K, dequant_q4_K, NULL, quantize_q4_K, vec_dot_q4_K, dot_path_q4_K, dot_path_q4_K_pick),
    ROW(FMT_Q5_K, "q5_K", 256, 176, true, FMT_Q8_K, dequant_q5_K, NULL, quantize_q5_K, vec_dot_q5_K, dot_path_q5_K, NULL),
    ROW(FMT_Q6_K, "q6_K", 256, 210, true, FMT_Q8_K, dequant_q6_K, NULL, quantize_q6_K, vec_dot_q6_K, dot_path_q6_K, NULL),
    ROW(FMT_Q8_K, "q8_K", 256, 292, false, FMT_Q8_K, dequant_q8_K, quantize_act_q8_K, NULL, NULL, NULL, NULL),
    /* i-quants (read only, except IQ4_XS) */
    ROW(FMT_IQ2_XXS, "iq2_xxs", 256, 66, true, FMT_Q8_K, dequant_iq2_xxs, NULL, NULL, vec_dot_iq2_xxs, dot_path_iq2_xxs, dot_path_iq2_xxs_pick),
    ROW(FMT_IQ2_XS, "iq2_xs", 256, 74, true, FMT_Q8_K, dequant_iq2_xs, NULL, NULL, vec_dot_iq2_xs, dot_path_iq2_xs, dot_path_iq2_xs_pick),
    ROW(FMT_IQ2_S, "iq2_s", 256, 82, true, FMT_Q8_K, dequant_iq2_s, NULL, NULL, vec_dot_iq2_s, dot_path_iq2_s, dot_path_iq2_s_pick),
    ROW(FMT_IQ3_XXS, "iq3_xxs", 256, 98, true, FMT_Q8_K, dequant_iq3_xxs, NULL, NULL, vec_dot_iq3_xxs, dot_path_iq3_xxs, dot_path_iq3_xxs_pick),
    ROW(FMT_IQ3_S, "iq3_s", 256, 110, true, FMT_Q8_K, dequant_iq3_s, NULL, NULL, vec_dot_iq3_s, dot_path_iq3_s, dot_path_iq3_s_pick),
    ROW(FMT_IQ4_XS, "iq4_xs", 256, 136, true, FMT_Q8_K, dequant_iq4_xs, NULL, quantize_iq4_xs, vec_dot_iq4_xs, dot_path_iq4_xs, dot_path_iq4_xs_pick),
    ROW(FMT_IQ1_S, "iq1_s", 256, 50, true, FMT_Q8_K, dequant_iq1_s, NULL, NULL, vec_dot_iq1_s, dot_path_iq1_s, dot_path_iq1_s_pick),
    ROW(FMT_IQ1_M, "iq1_m", 256, 56, true, FMT_Q8_K, dequant_iq1_m, NULL, NULL, vec_dot_iq1_m, dot_path_iq1_m, dot_path_iq1_m_pick),
};

DotPath format_pick_path(const Format *f, int64_t rows, int64_t cols, int64_t n_act, bool expert) {
    if (f->pick_path) return f->pick_path(rows, cols, n_act, expert);
    return expert ? DOT_ID : n_act >= 2 ? DOT_GEMM : DOT_GEMV;
}

DotPath format_pick_path_row(const Format *f, int64_t rows, int64_t cols, int64_t n_act, bool expert, int64_t t) {
    const DotPath p = format_pick_path(f, rows, cols, n_act, expert);
    return p == DOT_REPACK_GEMM && t >= n_act - n_act % 4 ? DOT_REPACK : p;
}

DotPath format_fast_path(const Format *f, int64_t cols) {
    (void)f, (void)cols;
    return DOT_FAST;
}

static inline float widen(uint32_t type, const void *w, int64_t i) {
    switch (type) {
    case FMT_F16: return fp16_to_fp32(((const uint16_t *)w)[i]);
    case FMT_BF16: return bf16_to_fp32(((const uint16_t *)w)[i]);
    default: return ((const float *)w)[i];
    }
}

float format_fast_float_dot(uint32_t type, const void *w, const float *x, int64_t n) {
    float acc[16] = {0};
    const int64_t n16 = n & ~(int64_t)15;
    for (int64_t i = 0; i < n16; i += 16)
        for (int l = 0; l < 16; l++) acc[l] = fmaf(widen(type, w, i + l), x[i + l], acc[l]);
    float s = fdot_reduce16(acc);
    for (int64_t i = n16; i < n; i++) s = fmaf(widen(type, w, i), x[i], s);
    return s;
}

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
