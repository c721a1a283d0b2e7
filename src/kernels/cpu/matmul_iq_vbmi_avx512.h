/* matmul_iq_vbmi_avx512.h — the i-quant decoders that use AVX512_VBMI (byte permutes over tables held in
 * registers), included by matmul_iq_avx512.c: 16 rows of IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and IQ4_XS decoded
 * at once, lane r = row r, straight into a GEMM tile (the bytes kq_tile_put would store) or into the decode GEMV's
 * vpdpbusd. The integers are the per-row kernel's and the float steps kq_p16_fast's, so the bits do not change:
 * tests/test_kernels_matmul.c runs every format with and without these (mm_set_vbmi). docs/KERNELS.md has the
 * measurements. */
#ifndef DL_KERNELS_CPU_MATMUL_IQ_VBMI_AVX512_H
#define DL_KERNELS_CPU_MATMUL_IQ_VBMI_AVX512_H

#include "kernels/cpu/matmul_kq_avx512.h"

#include "gguf/iq_tables.h"

#include <pthread.h>

/* With AVX512_VBMI: the grid and the sign table in registers instead of scalar loads and pdep, and 16 rows
 * decoded at once straight into the layout of a GEMM tile (lane r = row r, 4 elements per dword; kq_tile_put's
 * bytes without decoding rows and transposing them — that round trip was 3/4 of an expert product of ~10
 * tokens). Per super-block the 16 rows' quant words are transposed once as dwords (vector 2s: the 4 grid indices
 * of sub-block s of every row, 2s + 1: its sign / scale word), then per sub-block
 *   - each grid row (8 magnitudes from {8, 25, 43}) as a 16-bit code of 2-bit level numbers, looked up 64 at a
 *     time (vpermi2b over 128-byte halves of the code's low- and high-byte tables, bit 7 of the index choosing
 *     the half), each sign field's ksigns byte (vpmultishiftqb, vpermi2b) and the scales (the 4 top bits);
 *   - per group and half (4 elements of 16 rows: one tile vector) the row's code into its dword (vpermi2b over
 *     the low / high code bytes), the 4 levels into bytes (vpmultishiftqb), the sign bits into a mask (vpermb,
 *     vptestmb) and 128 ± magnitude (vpermb; vpdpbusd's operand).
 * The GEMM tiles take the vectors through the tile (iq2xxs_vbmi_tile), the decode GEMV straight into vpdpbusd
 * (iq2xxs_vbmi_gemv); the integers are those of the per-row kernel, the float steps the same. */
typedef struct Iq2xxsVbmiTabs {
    uint8_t lo[256], hi[256]; /* the 16-bit level code of each grid row, low and high byte */
    uint8_t ks[128];          /* ksigns_iq2xs */
    uint8_t pos[64], neg[64]; /* level number (low 2 bits of the byte) → 128 + magnitude, 128 − magnitude */
    bool ok;                  /* the grid holds only the three magnitudes */
} Iq2xxsVbmiTabs;
static Iq2xxsVbmiTabs vb_tabs __attribute__((aligned(64)));
static pthread_once_t vb_once = PTHREAD_ONCE_INIT;

/* The 16-bit level codes (2 bits per magnitude of {8, 25, 43}) of n grid rows of 8 bytes; false if a byte is none */
static bool vb2_codes(const uint64_t *grid, int n, uint8_t *lo, uint8_t *hi) {
    static const uint8_t mag[3] = {8, 25, 43};
    bool ok = true;
    for (int e = 0; e < n; e++) {
        unsigned code = 0;
        for (int i = 0; i < 8; i++) {
            const uint8_t v = (uint8_t)(grid[e] >> (8 * i));
            const unsigned lv = v == mag[0] ? 0u : v == mag[1] ? 1u : 2u;
            ok = ok && v == mag[lv];
            code |= lv << (2 * i);
        }
        lo[e] = (uint8_t)code, hi[e] = (uint8_t)(code >> 8);
    }
    return ok;
}

static void vb_init(void) {
    static const uint8_t mag[3] = {8, 25, 43};
    const bool ok = vb2_codes(iq2xxs_grid, 256, vb_tabs.lo, vb_tabs.hi);
    memcpy(vb_tabs.ks, ksigns_iq2xs, 128);
    for (int x = 0; x < 64; x++) {
        const int m = (x & 3) < 3 ? mag[x & 3] : 0;
        vb_tabs.pos[x] = (uint8_t)(128 + m), vb_tabs.neg[x] = (uint8_t)(128 - m);
    }
    vb_tabs.ok = ok;
}

/* The VBMI decoder's tables and constants in registers, loaded once per call. */
typedef struct VbConst {
    __m512i lo0, lo1, lo2, lo3, hi0, hi1, hi2, hi3, ks0, ks1, pos, neg; /* the tables */
    __m512i cbase, cstep, lsh0, lsh1, sb0, sb1, fctl, m63;
} VbConst;

#define VB_TARGET __attribute__((target("avx512vbmi")))
#define VB_INLINE VB_TARGET static inline __attribute__((always_inline))

VB_INLINE void vb_const(VbConst *k) {
    const Iq2xxsVbmiTabs *tb = &vb_tabs;
    k->lo0 = _mm512_load_si512(tb->lo), k->lo1 = _mm512_load_si512(tb->lo + 64);
    k->lo2 = _mm512_load_si512(tb->lo + 128), k->lo3 = _mm512_load_si512(tb->lo + 192);
    k->hi0 = _mm512_load_si512(tb->hi), k->hi1 = _mm512_load_si512(tb->hi + 64);
    k->hi2 = _mm512_load_si512(tb->hi + 128), k->hi3 = _mm512_load_si512(tb->hi + 192);
    k->ks0 = _mm512_load_si512(tb->ks), k->ks1 = _mm512_load_si512(tb->ks + 64);
    k->pos = _mm512_load_si512(tb->pos), k->neg = _mm512_load_si512(tb->neg);
    /* dword r of the code vector of group g4: bytes 4r + g4 of the low (byte 0) and the high code bytes (byte 1) */
    k->cbase = _mm512_add_epi8(_mm512_set1_epi32(0x00004000),
                               _mm512_set_epi32(60 * 0x01010101, 56 * 0x01010101, 52 * 0x01010101, 48 * 0x01010101,
                                                44 * 0x01010101, 40 * 0x01010101, 36 * 0x01010101, 32 * 0x01010101,
                                                28 * 0x01010101, 24 * 0x01010101, 20 * 0x01010101, 16 * 0x01010101,
                                                12 * 0x01010101, 8 * 0x01010101, 4 * 0x01010101, 0));
    k->cstep = _mm512_set1_epi32(0x01010101);
    /* byte j of a qword (dword j / 4, level j % 4): bits 32·(j / 4) + 8h + 2·(j % 4) of the code */
    k->lsh0 = _mm512_set1_epi64(0x2624222006040200), k->lsh1 = _mm512_set1_epi64(0x2e2c2a280e0c0a08);
    /* byte j of a dword: sign bit 4h + j of the group's ksigns byte */
    k->sb0 = _mm512_set1_epi32(0x08040201), k->sb1 = _mm512_set1_epi32((int)0x80402010u);
    k->fctl = _mm512_set1_epi64(0x352e2720150e0700); /* each dword's four 7-bit sign fields */
    k->m63 = _mm512_set1_epi8(63);
}

/* Super-block sb of 16 rows: the quant words transposed (v[2s]: sub-block s's grid indices of every row, v[2s+1]:
 * its sign / scale words) and the fp16 d of each row */
VB_INLINE void vbt_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512 *d) {
    uint16_t dh[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * 66;
        v[r] = _mm512_loadu_si512(b + 2);
        memcpy(&dh[r], b, 2);
    }
    kq_transpose16(v);
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
}

/* One sub-block of 16 rows: the lookups shared by its 8 tile vectors, and its scales (dword r: row r's) */
typedef struct VbtSub {
    __m512i lo, hi, sg, sc;
} VbtSub;

VB_INLINE VbtSub vbt_sub(const VbConst *k, __m512i ix, __m512i w) {
    VbtSub u;
    const __mmask64 top = _mm512_movepi8_mask(ix);
    u.lo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->lo0, ix, k->lo1), _mm512_permutex2var_epi8(k->lo2, ix, k->lo3));
    u.hi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(k->hi0, ix, k->hi1), _mm512_permutex2var_epi8(k->hi2, ix, k->hi3));
    u.sg = _mm512_permutex2var_epi8(k->ks0, _mm512_multishift_epi64_epi8(k->fctl, w), k->ks1);
    u.sc = _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(w, 28), 1), _mm512_set1_epi32(1));
    return u;
}

/* The two tile vectors (elements 4·(2·g4 + h) … +3 of the 16 rows, q + 128) of group g4; ci: its code index */
VB_INLINE void vbt_group(const VbConst *k, const VbtSub *u, __m512i ci, __m512i *q0, __m512i *q1) {
    const __m512i code = _mm512_permutex2var_epi8(u->lo, ci, u->hi);
    const __m512i sgn = _mm512_permutexvar_epi8(_mm512_and_si512(ci, k->m63), u->sg);
    const __m512i lv0 = _mm512_multishift_epi64_epi8(k->lsh0, code), lv1 = _mm512_multishift_epi64_epi8(k->lsh1, code);
    const __mmask64 n0 = _mm512_test_epi8_mask(sgn, k->sb0), n1 = _mm512_test_epi8_mask(sgn, k->sb1);
    *q0 = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(lv0, k->pos), n0, lv0, k->neg);
    *q1 = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(lv1, k->pos), n1, lv1, k->neg);
}

/* the VBMI decoder can run here: the CPU has VBMI and the grid holds only its three magnitudes */
static bool vbmi_ready(void) {
    if (!mm_vbmi()) return false;
    pthread_once(&vb_once, vb_init);
    return vb_tabs.ok;
}


/* IQ3_XXS and IQ3_S with AVX512_VBMI, the same scheme as IQ2_XXS's: each grid row (4 magnitudes of at most 8
 * values) as a 12-bit code of 3-bit level numbers (low and high byte tables, looked up 64 indices at a time by
 * vpermi2b over 128-entry quarters, the index's top bits choosing); per 4-element group of 16 rows (one tile vector)
 * the rows' codes into dwords (vpermi2b), the 4 levels into bytes (vpmultishiftqb: the level tables repeat every 8
 * entries, so the bits above a level do not matter), the group's half of its sign byte into a mask (vpermb,
 * vptestmb) and 128 ± magnitude (vpermb). Super-block sb of 16 rows: the 64 index bytes transposed as dwords
 * (v[2s + h]: the indices of groups 4h … 4h + 3 of sub-block s) and the rest of the block likewise (w). Same
 * integers and float steps as the per-row kernel. */
typedef struct Vb3Tabs {
    uint8_t lo[512], hi[512]; /* the 12-bit level code of each grid row, low and high byte */
    uint8_t pos[64], neg[64]; /* level (x mod 8) → 128 + magnitude, 128 − magnitude */
    bool ok;                  /* the grid holds at most 8 magnitudes, each < 128 */
} Vb3Tabs;
static Vb3Tabs vb3_xxs __attribute__((aligned(64))), vb3_s __attribute__((aligned(64))), vb4_xs __attribute__((aligned(64)));
static pthread_once_t vb3_once = PTHREAD_ONCE_INIT;

static void vb3_build(Vb3Tabs *t, const uint32_t *grid, int n) {
    uint8_t mag[8] = {0};
    int nm = 0;
    bool ok = true;
    for (int e = 0; e < n; e++) {
        unsigned code = 0;
        for (int i = 0; i < 4; i++) {
            const uint8_t v = (uint8_t)(grid[e] >> (8 * i));
            int l = 0;
            while (l < nm && mag[l] != v) l++;
            if (l == nm) {
                if (nm == 8 || v > 127) {
                    ok = false;
                    l = 0;
                } else
                    mag[nm++] = v;
            }
            code |= (unsigned)l << (3 * i);
        }
        t->lo[e] = (uint8_t)code, t->hi[e] = (uint8_t)(code >> 8);
    }
    for (int x = 0; x < 64; x++) t->pos[x] = (uint8_t)(128 + mag[x & 7]), t->neg[x] = (uint8_t)(128 - mag[x & 7]);
    t->ok = ok;
}
static void vb3_init(void) {
    vb3_build(&vb3_xxs, iq3xxs_grid, 256);
    vb3_build(&vb3_s, iq3s_grid, 512);
    for (int x = 0; x < 64; x++) vb4_xs.pos[x] = (uint8_t)(128 + kvalues_iq4nl[x & 15]); /* vpshufb's 16 per lane */
    vb4_xs.ok = true;
}

typedef struct Vb3Const {
    __m512i lo[8], hi[8], pos, neg, ks0, ks1; /* the tables (IQ3_XXS: lo[0..3], hi[0..3]) */
    __m512i cbase, sbase, step, lsh, sb0, sb1, fctl;
} Vb3Const;

VB_INLINE void vb3_const(Vb3Const *k, const Vb3Tabs *tb, int n) {
    for (int i = 0; i < n / 64; i++) k->lo[i] = _mm512_load_si512(tb->lo + 64 * i), k->hi[i] = _mm512_load_si512(tb->hi + 64 * i);
    k->pos = _mm512_load_si512(tb->pos), k->neg = _mm512_load_si512(tb->neg);
    k->ks0 = _mm512_loadu_si512(ksigns_iq2xs), k->ks1 = _mm512_loadu_si512(ksigns_iq2xs + 64);
    /* every byte of dword r: 4r (+ the group or the byte wanted); byte 1 of a code index: the high table (+ 64) */
    k->sbase = _mm512_set_epi32(60 * 0x01010101, 56 * 0x01010101, 52 * 0x01010101, 48 * 0x01010101, 44 * 0x01010101,
                                40 * 0x01010101, 36 * 0x01010101, 32 * 0x01010101, 28 * 0x01010101, 24 * 0x01010101,
                                20 * 0x01010101, 16 * 0x01010101, 12 * 0x01010101, 8 * 0x01010101, 4 * 0x01010101, 0);
    k->cbase = _mm512_add_epi8(_mm512_set1_epi32(0x00004000), k->sbase);
    k->step = _mm512_set1_epi32(0x01010101);
    k->lsh = _mm512_set1_epi64(0x2926232009060300); /* byte j of a qword: bit 32·(j / 4) + 3·(j % 4) */
    k->sb0 = _mm512_set1_epi32(0x08040201), k->sb1 = _mm512_set1_epi32((int)0x80402010u);
    k->fctl = _mm512_set1_epi64(0x352e2720150e0700);
}

/* dword r of x: byte b of dword r of x in all four bytes */
VB_INLINE __m512i vb3_byte(const Vb3Const *k, __m512i x, int b) {
    return _mm512_permutexvar_epi8(_mm512_add_epi8(k->sbase, _mm512_set1_epi8((char)b)), x);
}

/* The 8 tile vectors of a sub-block from its codes (lo[h], hi[h]: groups 4h … 4h + 3, byte 4r + i) and its sign
 * bytes (dword r: row r's four, byte l for elements 8l … 8l + 7) */
VB_INLINE void vb3_groups(const Vb3Const *k, const __m512i lo[2], const __m512i hi[2], __m512i sg, __m512i q[8]) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i ci = k->cbase;
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const __m512i sgn = vb3_byte(k, sg, 2 * h + p);
#pragma GCC unroll 2
            for (int e = 0; e < 2; e++) {
                const __m512i lv = _mm512_multishift_epi64_epi8(k->lsh, _mm512_permutex2var_epi8(lo[h], ci, hi[h]));
                const __mmask64 n = _mm512_test_epi8_mask(sgn, e ? k->sb1 : k->sb0);
                q[4 * h + 2 * p + e] = _mm512_mask_permutexvar_epi8(_mm512_permutexvar_epi8(lv, k->pos), n, lv, k->neg);
                ci = _mm512_add_epi8(ci, k->step);
            }
        }
    }
}

/* entry ix (low 8 bits per byte; b8: bit 8) of a code table of n = 256 or 512 bytes held in t[0 … n / 64 − 1] */
VB_INLINE __m512i vb3_look(const __m512i *t, int n, __m512i ix, __mmask64 b8) {
    const __mmask64 top = _mm512_movepi8_mask(ix);
    const __m512i p0 = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t[0], ix, t[1]), _mm512_permutex2var_epi8(t[2], ix, t[3]));
    if (n == 256) return p0;
    const __m512i p1 = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t[4], ix, t[5]), _mm512_permutex2var_epi8(t[6], ix, t[7]));
    return _mm512_mask_blend_epi8(b8, p0, p1);
}

/* IQ3_XXS and IQ3_S blocks (bytes apart): d, 64 index bytes (transposed into v), the next nw bytes (into w) */
VB_INLINE void vb3_load(const uint8_t *const *row, int64_t sb, int bytes, int nw, __m512i v[16], __m512i w[16], __m512 *d) {
    uint16_t dh[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * bytes;
        v[r] = _mm512_loadu_si512(b + 2);
        w[r] = _mm512_maskz_loadu_epi8(((__mmask64)1 << nw) - 1, b + 66); /* no read past the block */
        memcpy(&dh[r], b, 2);
    }
    kq_transpose16(v);
    kq_transpose16(w);
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
}
/* IQ3_XXS (98-byte blocks: d, 64 index bytes, 8 sign / scale words) */
VB_INLINE void vb3x_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512i w[16], __m512i x[2], __m512 *d) {
    (void)x;
    vb3_load(row, sb, 98, 32, v, w, d);
}
/* sub-block s: its tile vectors and scales (dword r: row r's) */
VB_INLINE __m512i vb3x_sub(const Vb3Const *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8]) {
    (void)x;
    __m512i lo[2], hi[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        lo[h] = vb3_look(k->lo, 256, v[2 * s + h], 0);
        hi[h] = vb3_look(k->hi, 256, v[2 * s + h], 0);
    }
    vb3_groups(k, lo, hi, _mm512_permutex2var_epi8(k->ks0, _mm512_multishift_epi64_epi8(k->fctl, w[s]), k->ks1), q);
    return _mm512_or_si512(_mm512_slli_epi32(_mm512_srli_epi32(w[s], 28), 1), _mm512_set1_epi32(1));
}

/* IQ3_S (110-byte blocks: d, 64 index bytes, 8 bytes of their 9th bits, 32 sign bytes, 4 scale bytes): w[0..1] the
 * high bits, w[2 + s] sub-block s's signs, w[10] the scales */
VB_INLINE void vb3s_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512i w[16], __m512i x[2], __m512 *d) {
    (void)x;
    vb3_load(row, sb, 110, 44, v, w, d);
}
VB_INLINE __m512i vb3s_sub(const Vb3Const *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8]) {
    (void)x;
    __m512i lo[2], hi[2];
    const __m512i qh = vb3_byte(k, w[s / 4], s % 4); /* the 9th bits of the sub-block's 8 groups */
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i ix = v[2 * s + h];
        const __mmask64 b8 = _mm512_test_epi8_mask(qh, h ? k->sb1 : k->sb0);
        lo[h] = vb3_look(k->lo, 512, ix, b8);
        hi[h] = vb3_look(k->hi, 512, ix, b8);
    }
    vb3_groups(k, lo, hi, w[2 + s], q);
    const __m512i nib = _mm512_and_si512(_mm512_srli_epi32(w[10], 4 * s), _mm512_set1_epi32(15));
    return _mm512_or_si512(_mm512_slli_epi32(nib, 1), _mm512_set1_epi32(1));
}

/* IQ4_XS (136-byte blocks: d, scales_h, scales_l[4], 128 bytes of nibbles) the same way, without grids: the 16 rows'
 * nibble bytes transposed as dwords (v: bytes 0-63, w: 64-127; dword 4s + m of sub-block s: its elements 4m … 4m + 3
 * in the low nibbles, 16 + 4m … in the high ones), 128 + kvalues_iq4nl by vpshufb, and the first two dwords of each
 * block (x[0]: d | scales_h << 16, x[1]: scales_l) for the 6-bit scales. (Needs AVX512BW only; it rides with the
 * VBMI kernels, whose test passes check both ways.) */
VB_INLINE void vb4_load(const uint8_t *const *row, int64_t sb, __m512i v[16], __m512i w[16], __m512i x[2], __m512 *d) {
    uint64_t hd[16] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * 136;
        v[r] = _mm512_loadu_si512(b + 8);
        w[r] = _mm512_loadu_si512(b + 72);
        memcpy(&hd[r], b, 8);
    }
    kq_transpose16(v);
    kq_transpose16(w);
    const __m512i h0 = _mm512_load_si512(hd), h1 = _mm512_load_si512(hd + 8);
    x[0] = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), h1);
    x[1] = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), h1);
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x[0]));
}
VB_INLINE __m512i vb4_sub(const Vb3Const *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8]) {
    const __m512i *src = s < 4 ? v + 4 * s : w + 4 * (s - 4), m4 = _mm512_set1_epi8(15);
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        q[m] = _mm512_shuffle_epi8(k->pos, _mm512_and_si512(src[m], m4));
        q[4 + m] = _mm512_shuffle_epi8(k->pos, _mm512_and_si512(_mm512_srli_epi16(src[m], 4), m4));
    }
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(x[1], 4 * s), _mm512_set1_epi32(15));
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(x[0], 16 + 2 * s), _mm512_set1_epi32(3));
    return _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
}

/* the 16 row pointers of rows o … o + nr − 1, the last repeated */
KQ_INLINE void vb_rows(const MmJob *j, int64_t o, int nr, const uint8_t *row[16]) {
    for (int r = 0; r < 16; r++) row[r] = mm_w_row(j, o + (r < nr ? r : nr - 1));
}

/* IQ2_XS and IQ2_S with AVX512_VBMI: IQ2_XXS's groups (vbt_group: the same three magnitudes, 2-bit level codes) on
 * grids of 512 and 1024 rows, looked up by vpermi2b over 128-entry quarters with index bits 7, 8 (and 9) choosing;
 * their scales are per 16 elements. A sub-block (32 elements, 4 grid rows of each of the 16 rows) gives a VbtSub
 * (codes, sign bytes) and two scale vectors. */
typedef struct Vb2Tabs {
    uint8_t lo[1024], hi[1024]; /* the 16-bit level code of each grid row, low and high byte */
    bool ok;
} Vb2Tabs;
static Vb2Tabs vb2_xs __attribute__((aligned(64))), vb2_s __attribute__((aligned(64)));
static pthread_once_t vb2_once = PTHREAD_ONCE_INIT;

static void vb2_init(void) {
    vb2_xs.ok = vb2_codes(iq2xs_grid, 512, vb2_xs.lo, vb2_xs.hi);
    vb2_s.ok = vb2_codes(iq2s_grid, 1024, vb2_s.lo, vb2_s.hi);
}

/* entry ix (low 8 bits per byte; b8, b9: bits 8 and 9) of a table of n = 512 or 1024 bytes, 64 at a time */
VB_INLINE __m512i vb2_look(const uint8_t *tab, int n, __m512i ix, __mmask64 b8, __mmask64 b9) {
    const __mmask64 top = _mm512_movepi8_mask(ix);
    __m512i p[4];
#pragma GCC unroll 4
    for (int i = 0; i < n / 256; i++)
        p[i] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(_mm512_load_si512(tab + 256 * i), ix, _mm512_load_si512(tab + 256 * i + 64)),
                                      _mm512_permutex2var_epi8(_mm512_load_si512(tab + 256 * i + 128), ix, _mm512_load_si512(tab + 256 * i + 192)));
    p[0] = _mm512_mask_blend_epi8(b8, p[0], p[1]);
    if (n == 1024) p[0] = _mm512_mask_blend_epi8(b9, p[0], _mm512_mask_blend_epi8(b8, p[2], p[3]));
    return p[0];
}

/* the scales of sub-block s from the scale bytes (x0: bytes 0-3 of each row, x1: 4-7): 2·nibble + 1 */
VB_INLINE void vb2_scales(__m512i x0, __m512i x1, int s, __m512i *sc0, __m512i *sc1) {
    const __m512i b = _mm512_srli_epi32(s < 4 ? x0 : x1, 8 * (s % 4)), m = _mm512_set1_epi32(15), one = _mm512_set1_epi32(1);
    *sc0 = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(b, m), 1), one);
    *sc1 = _mm512_or_si512(_mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 4), m), 1), one);
}

/* dword lanes r of nq (2 or 4) vectors from 8 · nq bytes at p[r]: x[k] lane r = dword k */
VB_INLINE void vb_headers(const uint8_t *const *p, int nq, __m512i *x) {
    uint64_t hd[32] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) memcpy(hd + (nq / 2) * r, p[r], 4 * (size_t)nq);
    if (nq == 2) {
        const __m512i h0 = _mm512_load_si512(hd), h1 = _mm512_load_si512(hd + 8);
        x[0] = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), h1);
        x[1] = _mm512_permutex2var_epi32(h0, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), h1);
        return;
    }
    const __m512i h0 = _mm512_load_si512(hd), h1 = _mm512_load_si512(hd + 8), h2 = _mm512_load_si512(hd + 16),
                  h3 = _mm512_load_si512(hd + 24);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28), _mm512_set1_epi32(k));
        x[k] = _mm512_shuffle_i64x2(_mm512_permutex2var_epi32(h0, idx, h1), _mm512_permutex2var_epi32(h2, idx, h3), 0x44);
    }
}

/* IQ2_XS and IQ2_S blocks (BYTES apart): d, 64 quant bytes (transposed into v), then 4 · nq bytes from +66 (into
 * the lanes of x[0 … nq − 1]) */
VB_INLINE void vb2_load(const uint8_t *const *row, int64_t sb, int bytes, int nq, __m512i v[16], __m512i x[4], __m512 *d) {
    uint16_t dh[16];
    const uint8_t *hp[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; r++) {
        const uint8_t *b = row[r] + sb * bytes;
        v[r] = _mm512_loadu_si512(b + 2);
        memcpy(&dh[r], b, 2);
        hp[r] = b + 66;
    }
    kq_transpose16(v);
    vb_headers(hp, nq, x);
    *d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)dh));
}

/* IQ2_XS (74-byte blocks: d, 32 u16 of 9-bit index | 7-bit sign index, 8 scale bytes): v the 64 quant bytes
 * transposed (v[2s], v[2s + 1]: sub-block s's grid rows 0-1 and 2-3), x the scale bytes */
VB_INLINE VbtSub vb2x_sub(const VbConst *k, const __m512i *v, const __m512i *x, int s, __m512i *sc1) {
    /* byte 4r + i: grid row i's low (high) byte; rows 0-1 from v[2s], 2-3 from v[2s + 1] */
    const __m512i il = _mm512_add_epi8(_mm512_set1_epi32(0x42400200), _mm512_and_si512(k->cbase, _mm512_set1_epi32(0x3f3f3f3f)));
    const __m512i a = v[2 * s], b = v[2 * s + 1];
    const __m512i lo8 = _mm512_permutex2var_epi8(a, il, b), hi8 = _mm512_permutex2var_epi8(a, _mm512_add_epi8(il, k->cstep), b);
    const __mmask64 b8 = _mm512_test_epi8_mask(hi8, _mm512_set1_epi8(1));
    VbtSub u;
    u.lo = vb2_look(vb2_xs.lo, 512, lo8, b8, 0);
    u.hi = vb2_look(vb2_xs.hi, 512, lo8, b8, 0);
    u.sg = _mm512_permutex2var_epi8(k->ks0, _mm512_srli_epi16(hi8, 1), k->ks1);
    vb2_scales(x[0], x[1], s, &u.sc, sc1);
    return u;
}

/* IQ2_S (82-byte blocks: d, 32 index low bytes, 32 sign bytes, 8 bytes of the indices' 2 high bits, 8 scale
 * bytes): v[s] sub-block s's 4 index bytes, v[8 + s] its 4 sign bytes; x[0..1] the high bits, x[2..3] the scales */
VB_INLINE VbtSub vb2s_sub(const VbConst *k, const __m512i *v, const __m512i *x, int s, __m512i *sc1) {
    /* qh byte s of each row in its 4 bytes; grid row i's bits 8, 9: bits 2i, 2i + 1 */
    const __m512i qh = _mm512_permutexvar_epi8(_mm512_add_epi8(_mm512_and_si512(k->cbase, _mm512_set1_epi32(0x3c3c3c3c)),
                                                               _mm512_set1_epi8((char)(s % 4))), x[s / 4]);
    const __mmask64 b8 = _mm512_test_epi8_mask(qh, _mm512_set1_epi32(0x40100401)), b9 = _mm512_test_epi8_mask(qh, _mm512_set1_epi32((int)0x80200802u));
    VbtSub u;
    u.lo = vb2_look(vb2_s.lo, 1024, v[s], b8, b9);
    u.hi = vb2_look(vb2_s.hi, 1024, v[s], b8, b9);
    u.sg = v[8 + s];
    vb2_scales(x[2], x[3], s, &u.sc, sc1);
    return u;
}

/* ---- the kernels of every format, from its LOAD and SUB ------------------------------------------------------
 * LOAD(row, sb, v, w, x, &d): super-block sb of the 16 rows into registers (and the rows' fp16 d); SUB(&k, v, w, x,
 * s, q, &sc0, &sc1): sub-block s's 8 tile vectors (elements 4g … 4g + 3 of the rows, q + 128) and the scales of its
 * two 16-element halves (the same vector twice where the format's scales are per 32). The tile decoder stores
 * them (kq_tile_put's bytes); the decode GEMV takes them straight into vpdpbusd: each half's chain starts at its
 * correction, one vpmulld by its scales, one fma per super-block with (d · DFAC) · d8 — kq_p16_fast's integers and
 * float steps with one token, so the bits of the per-row kernel and of the tiles. The rows of a group are
 * contiguous (row_bytes apart): the next group is prefetched 16 · BYTES per super-block. */
#define VB_KERNELS(NAME, CONST_T, CONST_INIT, BYTES, LOAD, SUB, DFAC)                                               \
    VB_TARGET static void NAME##_vbmi_tile(const MmJob *j, int64_t o, int nr, int64_t nsb, const KTile *tl) {       \
        CONST_T k;                                                                                                  \
        CONST_INIT(&k);                                                                                             \
        const uint8_t *row[16];                                                                                     \
        vb_rows(j, o, nr, row);                                                                                     \
        for (int64_t sb = 0; sb < nsb; sb++) {                                                                      \
            __m512i v[16], w[16], x[4];                                                                             \
            __m512 d;                                                                                               \
            LOAD(row, sb, v, w, x, &d);                                                                             \
            uint8_t *q = kt_q(tl, sb);                                                                              \
            int32_t *sc = kt_sc(tl, sb);                                                                            \
            for (int s = 0; s < 8; s++) {                                                                           \
                __m512i qv[8], sc0, sc1;                                                                            \
                SUB(&k, v, w, x, s, qv, &sc0, &sc1);                                                                \
                _mm512_store_si512(sc + 16 * (2 * s), sc0);                                                         \
                _mm512_store_si512(sc + 16 * (2 * s + 1), sc1);                                                     \
                _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++) _mm512_store_si512(q + 64 * (8 * s + g), qv[g]); \
            }                                                                                                       \
            int32_t *mp = kt_mp(tl, sb);                                                                            \
            for (int i = 0; i < 8; i++) _mm512_store_si512(mp + 16 * i, _mm512_setzero_si512());                   \
            _mm512_store_ps(kt_d(tl, sb), d);                                                                       \
            _mm512_store_ps(kt_dmin(tl, sb), _mm512_mul_ps(d, _mm512_set1_ps(DFAC)));                               \
        }                                                                                                           \
    }                                                                                                               \
    VB_TARGET static void NAME##_vbmi_gemv(const MmJob *j, int64_t o0, int64_t o1, int64_t t) {                     \
        CONST_T k;                                                                                                  \
        CONST_INIT(&k);                                                                                             \
        const int64_t nsb = j->K / QK_K;                                                                            \
        const KTok tk = kq_tok(j, t);                                                                               \
        for (int64_t o = o0; o < o1; o += 16) {                                                                     \
            const int nr = o1 - o < 16 ? (int)(o1 - o) : 16;                                                        \
            const uint8_t *row[16];                                                                                 \
            vb_rows(j, o, nr, row);                                                                                 \
            const uint8_t *next = mm_w_row(j, o) + 16 * j->w->row_bytes;                                            \
            __m512 acc = _mm512_setzero_ps();                                                                       \
            for (int64_t sb = 0; sb < nsb; sb++) {                                                                  \
                for (int l = 0; l < 16 * (BYTES); l += 64) _mm_prefetch((const char *)next + sb * 16 * (BYTES) + l, _MM_HINT_T0); \
                __m512i v[16], w[16], x[4];                                                                         \
                __m512 d;                                                                                           \
                LOAD(row, sb, v, w, x, &d);                                                                         \
                const int8_t *a = tk.qs + sb * QK_K;                                                                \
                const int32_t *cr = tk.corr16 + sb * 16;                                                            \
                __m512i S = _mm512_setzero_si512();                                                                 \
                for (int s = 0; s < 8; s++) {                                                                       \
                    __m512i qv[8], sc0, sc1;                                                                        \
                    SUB(&k, v, w, x, s, qv, &sc0, &sc1);                                                            \
                    __m512i I0 = _mm512_set1_epi32(cr[2 * s]), I1 = _mm512_set1_epi32(cr[2 * s + 1]);               \
                    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) {                                           \
                        I0 = _mm512_dpbusd_epi32(I0, qv[g], kq_bcast32(a + 32 * s + 4 * g));                        \
                        I1 = _mm512_dpbusd_epi32(I1, qv[4 + g], kq_bcast32(a + 32 * s + 16 + 4 * g));               \
                    }                                                                                               \
                    S = _mm512_add_epi32(S, _mm512_add_epi32(_mm512_mullo_epi32(I0, sc0), _mm512_mullo_epi32(I1, sc1))); \
                }                                                                                                   \
                const __m512 dw = _mm512_mul_ps(d, _mm512_set1_ps(DFAC));                                           \
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(dw, _mm512_set1_ps(tk.d[sb])), acc);     \
            }                                                                                                       \
            float out[16];                                                                                          \
            _mm512_storeu_ps(out, acc);                                                                             \
            for (int r = 0; r < nr; r++) j->y[t * j->O + o + r] = out[r];                                           \
        }                                                                                                           \
    }

/* The KQ_FORMAT_GSR hooks of a format whose decoders run when READY() says so: the GEMV for one token, the tiles
 * (decoded here) from two; without VBMI the plain kernels (fast_rows_t 0). IQ2_XXS has its own hooks
 * (matmul_iq_avx512.c: a plain two-token row kernel where VBMI is missing). */
#define VB_HOOKS(NAME, READY)                                                                                       \
    static bool NAME##_tile_dec(const MmJob *j, int64_t o, int nr, int64_t nsb, const KTile *tl) {                  \
        if (!READY()) return false;                                                                                 \
        NAME##_vbmi_tile(j, o, nr, nsb, tl);                                                                        \
        return true;                                                                                                \
    }                                                                                                               \
    static void NAME##_fast_rows(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, int span) {        \
        (void)span;                                                                                                 \
        for (int64_t t = t0; t < t1; t++) NAME##_vbmi_gemv(j, o0, o1, t);                                           \
    }                                                                                                               \
    static int NAME##_fast_rows_t(void) { return READY() ? 2 : 0; }

/* each format's LOAD and SUB in the macro's shape */
VB_INLINE void iq2xxs_ld(const uint8_t *const *row, int64_t sb, __m512i *v, __m512i *w, __m512i *x, __m512 *d) {
    (void)w, (void)x;
    vbt_load(row, sb, v, d);
}
VB_INLINE void vb2_groups(const VbConst *k, const VbtSub *u, __m512i q[8]) {
    __m512i ci = k->cbase;
#pragma GCC unroll 4
    for (int g4 = 0; g4 < 4; g4++) {
        vbt_group(k, u, ci, &q[2 * g4], &q[2 * g4 + 1]);
        ci = _mm512_add_epi8(ci, k->cstep);
    }
}
VB_INLINE void iq2xxs_sb(const VbConst *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8],
                         __m512i *sc0, __m512i *sc1) {
    (void)w, (void)x;
    const VbtSub u = vbt_sub(k, v[2 * s], v[2 * s + 1]);
    vb2_groups(k, &u, q);
    *sc0 = *sc1 = u.sc;
}
/* IQ2_XS, IQ2_S: vb2_load with the block's size and header length, SUB's VbtSub through the groups */
#define VB2_ADAPT(NAME, BYTES, NQ, SUB)                                                                             \
    VB_INLINE void NAME##_ld(const uint8_t *const *row, int64_t sb, __m512i *v, __m512i *w, __m512i *x, __m512 *d) { \
        (void)w;                                                                                                    \
        vb2_load(row, sb, BYTES, NQ, v, x, d);                                                                      \
    }                                                                                                               \
    VB_INLINE void NAME##_sb(const VbConst *k, const __m512i *v, const __m512i *w, const __m512i *x, int s,         \
                             __m512i q[8], __m512i *sc0, __m512i *sc1) {                                            \
        (void)w;                                                                                                    \
        const VbtSub u = SUB(k, v, x, s, sc1);                                                                      \
        vb2_groups(k, &u, q);                                                                                       \
        *sc0 = u.sc;                                                                                                \
    }
VB2_ADAPT(iq2xs, 74, 2, vb2x_sub)
VB2_ADAPT(iq2s, 82, 4, vb2s_sub)
#define VB3_SUB(NAME, SUB)                                                                                          \
    VB_INLINE void NAME(const Vb3Const *k, const __m512i *v, const __m512i *w, const __m512i *x, int s, __m512i q[8], \
                        __m512i *sc0, __m512i *sc1) {                                                               \
        *sc0 = *sc1 = SUB(k, v, w, x, s, q);                                                                        \
    }
VB3_SUB(iq3xxs_sb, vb3x_sub)
VB3_SUB(iq3s_sb, vb3s_sub)
VB3_SUB(iq4xs_sb, vb4_sub)
#define VB_CONST_IQ2(k) vb_const(k)
#define VB_CONST_IQ3XXS(k) vb3_const((k), &vb3_xxs, 256)
#define VB_CONST_IQ3S(k) vb3_const((k), &vb3_s, 512)
#define VB_CONST_IQ4XS(k) vb3_const((k), &vb4_xs, 0)

static bool vb2_ready(void) {
    if (!vbmi_ready()) return false; /* vbt_group's level tables */
    pthread_once(&vb2_once, vb2_init);
    return vb2_xs.ok && vb2_s.ok;
}
static bool vb3_ready(void) {
    if (!mm_vbmi()) return false;
    pthread_once(&vb3_once, vb3_init);
    return vb3_xxs.ok && vb3_s.ok;
}

VB_KERNELS(iq2xxs, VbConst, VB_CONST_IQ2, 66, iq2xxs_ld, iq2xxs_sb, 0.125f)
VB_KERNELS(iq2xs, VbConst, VB_CONST_IQ2, 74, iq2xs_ld, iq2xs_sb, 0.125f)
VB_KERNELS(iq2s, VbConst, VB_CONST_IQ2, 82, iq2s_ld, iq2s_sb, 0.125f)
VB_KERNELS(iq3xxs, Vb3Const, VB_CONST_IQ3XXS, 98, vb3x_load, iq3xxs_sb, 0.25f)
VB_KERNELS(iq3s, Vb3Const, VB_CONST_IQ3S, 110, vb3s_load, iq3s_sb, 1.f)
VB_KERNELS(iq4xs, Vb3Const, VB_CONST_IQ4XS, 136, vb4_load, iq4xs_sb, 1.f)
VB_HOOKS(iq2xs, vb2_ready)
VB_HOOKS(iq2s, vb2_ready)
VB_HOOKS(iq3xxs, vb3_ready)
VB_HOOKS(iq3s, vb3_ready)
VB_HOOKS(iq4xs, vb3_ready)

#endif
