/* quant_blocks.h — the memory layout of every quantized block, as C structs (internal to gguf/ and kernels/).
 *
 * Layouts are ggml's (llama.cpp v0.4.0, ggml-common.h): fields in memory order, little-endian, no padding
 * (each struct's size is checked below against the format table's byte count). fp16 fields are IEEE half
 * bit patterns (base/fp16.h converts them). A block pointer must be aligned as its widest field (2 bytes; 4
 * for Q8_K), which GGUF tensor data and our own row buffers always are.
 *
 * The byte diagrams with each format's dequantization formula live next to its to_float in quant_*.c. */
#ifndef DL_GGUF_QUANT_BLOCKS_H
#define DL_GGUF_QUANT_BLOCKS_H

#include <stdint.h>
#include <string.h>

/* Bit-identity with ggml needs every multiply and add rounded separately: no fused multiply-add even
 * when a file is built for an FMA-capable ISA. GCC in ISO C mode (-std=c11) already does not contract;
 * clang does within an expression unless told otherwise. (At file scope this holds for the rest of every
 * translation unit that includes this header.) */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK 32   /* elements per block of the 32-element formats */
#define QK_K 256 /* elements per super-block of the K and i-quant formats */

/* ---- 32-element formats ---------------------------------------------------------------------------- */
typedef struct BlockQ4_0 { uint16_t d; uint8_t qs[QK / 2]; } BlockQ4_0;                  /* 18 B */
typedef struct BlockQ4_1 { uint16_t d, m; uint8_t qs[QK / 2]; } BlockQ4_1;               /* 20 B */
typedef struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK / 2]; } BlockQ5_0;   /* 22 B */
typedef struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; } BlockQ5_1; /* 24 B */
typedef struct BlockQ8_0 { uint16_t d; int8_t qs[QK]; } BlockQ8_0;                       /* 34 B */
typedef struct BlockQ8_1 { uint16_t d, s; int8_t qs[QK]; } BlockQ8_1;                    /* 36 B, s = d·Σqs */
typedef struct BlockIQ4_NL { uint16_t d; uint8_t qs[QK / 2]; } BlockIQ4_NL;              /* 18 B */
typedef struct BlockMXFP4 { uint8_t e; uint8_t qs[QK / 2]; } BlockMXFP4;                 /* 17 B, e: E8M0 */

/* ---- 256-element K-quants -------------------------------------------------------------------------- */
typedef struct BlockQ2_K {
    uint8_t scales[QK_K / 16]; /* low nibble: scale, high nibble: min, per 16 elements */
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
} BlockQ2_K; /* 84 B */
typedef struct BlockQ3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12]; /* 16 six-bit scales */
    uint16_t d;
} BlockQ3_K; /* 110 B */
typedef struct BlockQ4_K {
    uint16_t d, dmin;
    uint8_t scales[12]; /* 8 six-bit (scale, min) pairs */
    uint8_t qs[QK_K / 2];
} BlockQ4_K; /* 144 B */
typedef struct BlockQ5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} BlockQ5_K; /* 176 B */
typedef struct BlockQ6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} BlockQ6_K; /* 210 B */
typedef struct BlockQ8_K {
    float d; /* 1/iscale: negative when the block's extreme value is positive */
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16]; /* sums of 16 consecutive qs */
} BlockQ8_K; /* 292 B */

/* ---- 256-element i-quants -------------------------------------------------------------------------- */
typedef struct BlockIQ2_XXS { uint16_t d; uint16_t qs[QK_K / 8]; } BlockIQ2_XXS; /* 66 B */
typedef struct BlockIQ2_XS {
    uint16_t d;
    uint16_t qs[QK_K / 8]; /* 9-bit grid index | 7-bit sign index << 9 */
    uint8_t scales[QK_K / 32];
} BlockIQ2_XS; /* 74 B */
typedef struct BlockIQ2_S {
    uint16_t d;
    uint8_t qs[QK_K / 4]; /* 32 grid index low bytes, then 32 sign bytes */
    uint8_t qh[QK_K / 32];
    uint8_t scales[QK_K / 32];
} BlockIQ2_S; /* 82 B */
typedef struct BlockIQ3_XXS { uint16_t d; uint8_t qs[3 * QK_K / 8]; } BlockIQ3_XXS; /* 98 B */
typedef struct BlockIQ3_S {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} BlockIQ3_S; /* 110 B */
typedef struct BlockIQ1_S {
    uint16_t d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
} BlockIQ1_S; /* 50 B */
typedef struct BlockIQ1_M {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32]; /* 3-bit sub-block scales; the fp16 super-block scale in the top nibbles */
} BlockIQ1_M; /* 56 B */
typedef struct BlockIQ4_XS {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} BlockIQ4_XS; /* 136 B */

_Static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
                   sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 &&
                   sizeof(BlockIQ4_NL) == 18 && sizeof(BlockMXFP4) == 17,
               "32-element block sizes");
_Static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
                   sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292,
               "K-quant block sizes");
_Static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82 &&
                   sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50 &&
                   sizeof(BlockIQ1_M) == 56 && sizeof(BlockIQ4_XS) == 136,
               "i-quant block sizes");

/* Round to nearest, ties to even, for |x| < 2^22 (ggml's nearest_int): adding 1.5·2^23 puts the integer
 * part in the low mantissa bits, and the float add rounds half to even. */
static inline int quant_nearest_int(float x) {
    float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The (6-bit scale, 6-bit min) pair j ∈ [0,8) of a Q4_K / Q5_K block's 12 scale bytes:
 *   j < 4: scale = s[j] & 63,                        min = s[j+4] & 63
 *   j ≥ 4: scale = (s[j+4] & 15) | (s[j-4] >> 6) << 4, min = (s[j+4] >> 4) | (s[j] >> 6) << 4 */
static inline void quant_k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Scale j ∈ [0,16) of a Q3_K block, 6 bits stored as value+32:
 *   low nibble from scales[j] (j<8) or scales[j-8] >> 4, bits 4-5 from scales[8 + j%4] >> 2(j/4). */
static inline int quant_q3k_scale(int j, const uint8_t *s) {
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

/* MXFP4's E8M0 scale halved: 2^(e-128), exact (kvalues_mxfp4 hold the E2M1 values doubled). */
static inline float quant_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Byte j of a grid entry (see iq_tables.h). */
static inline uint8_t quant_grid_u8(uint64_t entry, int j) { return (uint8_t)(entry >> (8 * j)); }

/* hsum_float_8 of ggml's x86 kernels: the 8 float lanes of a __m256 folded high half onto low half, then
 * pairwise: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
static inline float quant_hsum8(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

static inline uint32_t quant_load_u32(const void *p) {
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

#endif
