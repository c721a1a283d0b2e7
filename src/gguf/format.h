/* format.h — the weight-format table: one row per GGUF tensor type.
 *
 * A row says how a type is stored (block size, bytes per block), how to turn it into floats (scalar
 * dequantization, bit-identical to ggml's to_float), and which activation format its dot product pairs
 * with (ggml's vec_dot_type: Q8_0, Q8_1, Q8_K, F16, BF16 or F32). Activation formats have a from_float
 * quantizer, bit-identical to what ggml's x86 CPU backend produces, since that rounding decides parity
 * with llama.cpp.
 *
 * Adding a type is one row here plus its functions (gguf/quant_*.c) and kernels (kernels/). Ids are
 * ggml's, because GGUF stores them. */
#ifndef DL_GGUF_FORMAT_H
#define DL_GGUF_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum FormatId {
    FMT_F32 = 0,
    FMT_F16 = 1,
    FMT_Q4_0 = 2,
    FMT_Q4_1 = 3,
    FMT_Q5_0 = 6,
    FMT_Q5_1 = 7,
    FMT_Q8_0 = 8,
    FMT_Q8_1 = 9,
    FMT_Q2_K = 10,
    FMT_Q3_K = 11,
    FMT_Q4_K = 12,
    FMT_Q5_K = 13,
    FMT_Q6_K = 14,
    FMT_Q8_K = 15,
    FMT_IQ2_XXS = 16,
    FMT_IQ2_XS = 17,
    FMT_IQ3_XXS = 18,
    FMT_IQ1_S = 19,
    FMT_IQ4_NL = 20,
    FMT_IQ3_S = 21,
    FMT_IQ2_S = 22,
    FMT_IQ4_XS = 23,
    FMT_I8 = 24,
    FMT_I16 = 25,
    FMT_I32 = 26,
    FMT_I64 = 27,
    FMT_F64 = 28,
    FMT_IQ1_M = 29,
    FMT_BF16 = 30,
    FMT_TQ1_0 = 34,
    FMT_TQ2_0 = 35,
    FMT_MXFP4 = 39,
    FMT_COUNT = 40
} FormatId;

/* Dequantizes n values (n a multiple of the block size) from src into dst. */
typedef void (*FormatToFloat)(const void *src, float *dst, int64_t n);
/* Quantizes n floats (n a multiple of the block size) into dst. */
typedef void (*FormatFromFloat)(const float *src, void *dst, int64_t n);
/* Scalar reference dot product of n elements: a weight row in this format with an activation row already
 * quantized to this format's vec_dot_type. Integer formats sum integer products per block and apply the
 * scales per block, as ggml's generic kernels do; it is the spec the fast kernels are tested against. */
typedef float (*FormatVecDot)(int64_t n, const void *w, const void *act);

/* llama.cpp's CPU backend multiplies through different kernels that sum in different orders: vec_dot for
 * one activation row, tinyBLAS or repacked GEMM kernels for batches, vec_dot again inside mul_mat_id
 * (experts). A DotPath names the kernel whose order a dot product reproduces. */
typedef enum DotPath {
    DOT_GEMV = 0,        /* mul_mat with one activation row */
    DOT_GEMM = 1,        /* mul_mat with ≥ 2 activation rows */
    DOT_ID = 2,          /* mul_mat_id (expert matrices), any number of rows */
    /* llama.cpp's x86 build repacks Q4_0, Q4_K, IQ4_NL, MXFP4 (and Q2_K on AVX-512) matrices whose row count
     * is a multiple of 8 into interleaved 8-row blocks and multiplies them with kernels of their own: */
    DOT_REPACK = 3,      /* the repacked single-row kernel (ggml_gemv_*): one row, mul_mat_id, and the n % 4
                            last rows of a batch */
    DOT_REPACK_GEMM = 4, /* the repacked 4-row kernel (ggml_gemm_*): rows 0 .. n − n % 4 of a batch of n ≥ 4 */
    /* deltallm's fast arithmetic (MATMUL_FAST), not a llama.cpp path: one order for any number of activation
     * rows, so a row's result never depends on the batch it is computed in. Integer formats: a whole block
     * (32 elements) or super-block (256) summed exactly in integers, then one fused multiply-add per block into
     * one float accumulator, acc = fma((float)Σ, d_w·d_a, acc), and the minimum terms into a second one
     * (Q2_K / Q4_K / Q5_K: Σ m·bsums, subtracted at the end; Q4_1 / Q5_1: m·s, added) — llama.cpp's repacked
     * and IQ-panel order, for every format. Float formats (F32, F16, BF16) keep their activations in F32 (no
     * rounding to F16 / BF16: more accurate than llama.cpp) and sum with one 16-lane accumulator, one fused
     * step per 16 elements (weights widened exactly), reduced as fdot_reduce16, the n % 16 last products fused
     * one by one after that (format_fast_float_dot). */
    DOT_FAST = 5,
} DotPath;
typedef float (*FormatDotPath)(DotPath path, int64_t n, const void *w, const void *act);
/* Which path llama.cpp takes for a matrix of `rows` × `cols` in this format multiplied with `n_act`
 * activation rows (expert = through mul_mat_id): each format's kernels have their own conditions (tinyBLAS
 * wants rows % 4 == 0, repacking wants rows % 8 == 0, ...). */
typedef DotPath (*FormatPickPath)(int64_t rows, int64_t cols, int64_t n_act, bool expert);

typedef struct Format {
    FormatId id;
    const char *name;      /* ggml's name: "q4_K", "iq2_xxs", ... */
    int block;             /* elements per block */
    int bytes;             /* bytes per block */
    bool weight;           /* a weight format deltallm loads and computes with */
    FormatId vec_dot_type; /* activation partner of the dot product (weights only) */
    FormatToFloat to_float;
    FormatFromFloat from_float; /* activation formats (and the float formats): ggml's CPU from_float */
    FormatFromFloat quantize;   /* weight quantizer for writing files (synth, tests); NULL if none */
    FormatVecDot vec_dot;       /* weights only: reference dot with a vec_dot_type activation row */
    FormatDotPath dot_path;     /* the dot in the summation order of a given llama.cpp path; NULL = vec_dot */
    FormatPickPath pick_path;   /* NULL: GEMM for ≥ 2 rows of a non-expert matrix, else GEMV / ID */
} Format;

/* The DotPath llama.cpp would take (the format's pick_path, or the default rule). */
DotPath format_pick_path(const Format *f, int64_t rows, int64_t cols, int64_t n_act, bool expert);
/* The DotPath of activation row t of a product with n_act rows: format_pick_path(), except that the
 * n_act % 4 last rows of a DOT_REPACK_GEMM batch take DOT_REPACK (llama.cpp's repacked mul_mat runs its gemm
 * on whole groups of 4 rows and its gemv on the rest). */
DotPath format_pick_path_row(const Format *f, int64_t rows, int64_t cols, int64_t n_act, bool expert, int64_t t);

/* The path of every product in the fast arithmetic: DOT_FAST. */
DotPath format_fast_path(const Format *f, int64_t cols);
/* The float formats' DOT_FAST dot product: weight row w (F32, F16 or BF16 as `type`) with F32 activations x. */
float format_fast_float_dot(uint32_t type, const void *w, const float *x, int64_t n);
static inline bool format_is_float(uint32_t type) { return type == FMT_F32 || type == FMT_F16 || type == FMT_BF16; }

/* NULL for ids that are out of range or not in the table (removed or never-existing ggml types). */
const Format *format_get(uint32_t id);
/* Known ggml names, including types deltallm refuses (for error messages); "?" when unknown. */
const char *format_name(uint32_t id);
/* Bytes for a row of n elements; n must be a multiple of the block size. */
static inline size_t format_row_bytes(const Format *f, int64_t n) { return (size_t)(n / f->block) * (size_t)f->bytes; }

#endif
