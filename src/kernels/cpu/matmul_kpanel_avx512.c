/* matmul_kpanel_avx512.c — Q4_K, Q5_K and Q6_K in the fast arithmetic (DOT_FAST) at the AVX-512 VNNI level, on the
 * P16 panels the CPU backend packs at load (ops.h's PACK_P16: per super-block the file's quant bytes transposed
 * 4 at a time so that ZMM lane r is row r; Q4_K's 6-bit scales and minimums unpacked, Q6_K's int8 scales by
 * sub-block; d (and dmin) per row).
 *
 * The order (gguf/quant_order_k.c, DOT_FAST): per super-block the integer total S = Σ sc·q·a in one fma with
 * d·d8, the minimum total M = Σ m·(bsums) in one fma with dmin·d8 into a second accumulator; result acc − accm.
 * Q4_K: a 64-byte vector of the panel holds 4 quant bytes of each of the 16 rows: its low nibbles are 4 elements
 * of sub-block 2j, its high nibbles the 4 elements 32 further (sub-block 2j+1), so one load feeds two vpdpbusd
 * with the token's activations broadcast; one vpmulld per sub-block applies the 16 rows' scales.
 * Q6_K (S = Σ sc·q·a over the unsigned 6-bit codes, less 32·Σ sc·bsums, in one fma with d·d8): two ql vectors
 * and one qh vector give the codes of 4 groups of 4 elements (ql's nibbles, qh's 2-bit fields), 16 rows each. Decode (1-2
 * tokens) and prefill (tiles of 8) run the same steps per (row, token): a row's result does not depend on its
 * batch, and nothing is decoded or transposed per call (the per-row and tile kernels of matmul_kq_avx512.h
 * serve the matrices without panels, in the same order). */
#include "kernels/cpu/matmul_cpu.h"

#include <immintrin.h>
#include <string.h>

#include "gguf/quant_blocks.h"

#define Q_INLINE static inline __attribute__((always_inline))
#define TILE_T 8          /* tokens per tile */
/* decode's software prefetch distance: without it b2's tg64 fell from 58-66 to 35 t/s on one thread, 2-16 KiB
 * within the noise (2026-12-02; the Q8_0 GEMV is faster without one, matmul_q8_0p_avx512.c) */
#define PF_BYTES 8192
/* up to this many tokens a work item streams the 16-row panels once with the prefetching 16 × T tiles (T ≤ 8;
 * 16 tokens are two passes); more go to the 32 × 4 tiles, whose Q5_K / Q6_K codes are decoded into tmp first */
#define SMALL_T 8

typedef struct QTok {
    const int8_t *qs;
    const float *d;
    const int16_t *bs;
    const int32_t *tb; /* the small batches' per-token table (bs_table), else NULL */
} QTok;

Q_INLINE QTok q_tok(const MmJob *j, int64_t t) {
    const uint8_t *r = mm_act_row(j, t);
    QTok k = {(const int8_t *)(r + j->al.qs), (const float *)(r + j->al.d), (const int16_t *)(r + j->al.bsums), NULL};
    return k;
}

Q_INLINE __m512i bc32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* acc + vpdpbusd(w, the 4 bytes at p broadcast), the broadcast embedded in the instruction ({1to16}): one
 * instruction instead of a vpbroadcastd and the vpdpbusd (GCC does not fold the broadcast itself) */
Q_INLINE __m512i dpbusd_bc(__m512i acc, __m512i w, const void *p) {
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)p));
    return acc;
}

Q_INLINE __m512i u8x16(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }

/* Two sub-blocks' 16 byte-per-row fields (p: sub-block 2i's 16 rows, then 2i+1's) as int16 pairs: dword r = (row
 * r's first, its second) — vpdpwssd's operand; signed (Q6_K's scales) or not (Q4_K's minimums) */
Q_INLINE __m512i pairs16(const uint8_t *p, const bool sgn) {
    const __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 16));
    const __m256i ab = _mm256_set_m128i(_mm_unpackhi_epi8(a, b), _mm_unpacklo_epi8(a, b));
    return sgn ? _mm512_cvtepi8_epi16(ab) : _mm512_cvtepu8_epi16(ab);
}

/* (bsums of 32-element sub-block 2p, of 2p + 1) as two int16 (each ≤ 32·128 in magnitude), broadcast */
Q_INLINE int32_t bsum32_pair_i(const int16_t *bs, int p) {
    const int16_t lo = (int16_t)(bs[4 * p] + bs[4 * p + 1]), hi = (int16_t)(bs[4 * p + 2] + bs[4 * p + 3]);
    return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
}
Q_INLINE __m512i bsum32_pair(const int16_t *bs, int p) { return _mm512_set1_epi32(bsum32_pair_i(bs, p)); }

/* Q6_K's 6-bit codes of group r: the nibble lo (bits 0-3 of each byte; above them anything) with bits 2r, 2r+1 of
 * qh moved to bits 4, 5 (a 16-bit shift: what it carries across bytes is masked off); m4 = 15s, m30 = 0x30s */
Q_INLINE __m512i q6k_codes(__m512i lo, __m512i qh, int r, __m512i m4, __m512i m30) {
    const __m512i hi = _mm512_and_si512(r < 2 ? _mm512_slli_epi16(qh, 4 - 2 * r) : r == 2 ? qh : _mm512_srli_epi16(qh, 2), m30);
    return _mm512_ternarylogic_epi32(lo, hi, m4, 0xE4); /* m4 ? lo : hi */
}

/* Q5_K's codes from the nibble vector v of sub-blocks 2j (low nibbles) and 2j+1 (high) and the qh vector h: bit 4
 * of each byte from h (bit 2j / 2j+1 moved there: a 16-bit shift, and the bits it carries across bytes land
 * outside bit 4), bits 0-3 from the nibble: vpternlogd. m4 = 15s, b4 = 16s */
Q_INLINE void q5k_codes(__m512i v, __m512i h, int j, __m512i m4, __m512i b4, __m512i *lo, __m512i *hi) {
    const __m512i hl = _mm512_and_si512(j <= 2 ? _mm512_slli_epi16(h, 4 - 2 * j) : _mm512_srli_epi16(h, 2 * j - 4), b4);
    const __m512i hh = _mm512_and_si512(j <= 1 ? _mm512_slli_epi16(h, 3 - 2 * j) : _mm512_srli_epi16(h, 2 * j - 3), b4);
    *lo = _mm512_ternarylogic_epi32(v, hl, m4, 0xE4); /* m4 ? v : hl */
    *hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), hh, m4, 0xE4);
}

/* Q4_K (q5 false) or Q5_K: one panel's nsb super-blocks with C tokens: out[c][r]. Q5_K's fifth bits come from its
 * qh vector m: bit 2j for the low nibbles' elements, 2j+1 for the high ones'. */
Q_INLINE void q45k_tile(const bool q5, const uint8_t *panel, int64_t nsb, const QTok *tk, const int C, const bool pf,
                        const bool tb, float out[][16]) {
    const size_t SB = q5 ? Q5K_P16_SB : Q4K_P16_SB, at = q5 ? 2560 : 2048; /* scales; mins +128, d +256, dmin +288 */
    __m512 acc[TILE_T], accm[TILE_T];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = accm[c] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b = panel + (size_t)sb * SB;
        if (pf)
            for (size_t k = 0; k < SB; k += 64) _mm_prefetch((const char *)b + PF_BYTES + k, _MM_HINT_T0);
        __m512i S[TILE_T];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) S[c] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
            __m512i IA[TILE_T], IB[TILE_T];
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) IA[c] = IB[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                const __m512i v = _mm512_loadu_si512(b + 512 * j + 64 * m);
                __m512i lo, hi;
                if (q5)
                    q5k_codes(v, _mm512_loadu_si512(b + 2048 + 64 * m), j, m4, b4, &lo, &hi);
                else {
                    lo = _mm512_and_si512(v, m4);
                    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                }
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) {
                    const int8_t *a = tk[c].qs + sb * QK_K + 64 * j + 4 * m;
                    IA[c] = dpbusd_bc(IA[c], lo, a);
                    IB[c] = dpbusd_bc(IB[c], hi, a + 32);
                }
            }
            const __m512i sa = u8x16(b + at + 16 * (2 * j)), sbv = u8x16(b + at + 16 * (2 * j + 1));
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                S[c] = _mm512_add_epi32(S[c], _mm512_add_epi32(_mm512_mullo_epi32(IA[c], sa), _mm512_mullo_epi32(IB[c], sbv)));
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + at + 256)));
        const __m512 dm16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + at + 288)));
        __m512i M[TILE_T]; /* Σ m·(bsums of the sub-block): the minimums' integer total, by vpdpwssd over pairs */
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) M[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            const __m512i mp = pairs16(b + at + 128 + 32 * p, false);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                M[c] = _mm512_dpwssd_epi32(M[c], mp, tb ? _mm512_set1_epi32(tk[c].tb[4 * sb + p]) : bsum32_pair(tk[c].bs + sb * 16, p));
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const __m512 d8 = _mm512_set1_ps(tk[c].d[sb]);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[c]), _mm512_mul_ps(d16, d8), acc[c]);
            accm[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M[c]), _mm512_mul_ps(dm16, d8), accm[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out[c], _mm512_sub_ps(acc[c], accm[c]));
}

/* ---- prefill on two panels × 4 tokens ----------------------------------------------------------------------
 * Each activation broadcast feeds both panels' vpdpbusd (the 16 × 8 tiles load one per vpdpbusd). Q4_K reads its
 * nibbles from the panels; Q5_K and Q6_K first decode the two panels' codes once per work item into tmp
 * (dec_q5k / dec_q6k: one byte per element, vector e of a super-block = elements 4e … 4e+3 of the 16 rows) and
 * then only load them: decoding their high bits inside a tile that serves 4 tokens cost as much as the
 * products (Q5_K on the fly in this tile: ~370-400 GOP/s, below its 16 × 8 tile). The integers and the float
 * steps per (row, token) are those of the 16 × 8 tiles, so the results are bitwise theirs. */

#define DEC_SB 4096 /* decoded bytes per panel and super-block */

/* Q5_K: one panel's super-blocks as codes (q5k_codes, stored) */
static void dec_q5k(const uint8_t *panel, int64_t nsb, uint8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b = panel + (size_t)sb * Q5K_P16_SB;
        uint8_t *d = dst + (size_t)sb * DEC_SB;
        for (int j = 0; j < 4; j++)
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                __m512i lo, hi;
                q5k_codes(_mm512_loadu_si512(b + 512 * j + 64 * m), _mm512_loadu_si512(b + 2048 + 64 * m), j, m4, b4, &lo, &hi);
                _mm512_storeu_si512(d + 64 * (16 * j + m), lo);
                _mm512_storeu_si512(d + 64 * (16 * j + 8 + m), hi);
            }
    }
}

/* Q6_K: one panel's super-blocks as unsigned 6-bit codes (element 128h + 32r + 4m + i: q6k_codes of group r) */
static void dec_q6k(const uint8_t *panel, int64_t nsb, uint8_t *dst) {
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b = panel + (size_t)sb * Q6K_P16_SB;
        uint8_t *d = dst + (size_t)sb * DEC_SB;
        for (int h = 0; h < 2; h++)
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                const __m512i l0 = _mm512_loadu_si512(b + 64 * (16 * h + m)), l1 = _mm512_loadu_si512(b + 64 * (16 * h + 8 + m));
                const __m512i qh = _mm512_loadu_si512(b + 2048 + 64 * (8 * h + m));
                _mm512_storeu_si512(d + 64 * (32 * h + m), q6k_codes(l0, qh, 0, m4, m30));
                _mm512_storeu_si512(d + 64 * (32 * h + 8 + m), q6k_codes(l1, qh, 1, m4, m30));
                _mm512_storeu_si512(d + 64 * (32 * h + 16 + m), q6k_codes(_mm512_srli_epi16(l0, 4), qh, 2, m4, m30));
                _mm512_storeu_si512(d + 64 * (32 * h + 24 + m), q6k_codes(_mm512_srli_epi16(l1, 4), qh, 3, m4, m30));
            }
    }
}

/* One token's step of a 32 × 4 tile: two sub-blocks' weight vectors of both panels (x: the first sub-block's,
 * y: the second's; [panel]) times the token's 4 activations of each (ax, ay) */
Q_INLINE void dp2x2(__m512i X[2], __m512i Y[2], const __m512i x[2], const __m512i y[2], __m512i ax, __m512i ay) {
    X[0] = _mm512_dpbusd_epi32(X[0], x[0], ax);
    X[1] = _mm512_dpbusd_epi32(X[1], x[1], ax);
    Y[0] = _mm512_dpbusd_epi32(Y[0], y[0], ay);
    Y[1] = _mm512_dpbusd_epi32(Y[1], y[1], ay);
}

/* S + X·sx + Y·sy: two sub-blocks' totals by the 16 rows' scales */
Q_INLINE __m512i add_scaled2(__m512i S, __m512i X, __m512i sx, __m512i Y, __m512i sy) {
    return _mm512_add_epi32(S, _mm512_add_epi32(_mm512_mullo_epi32(X, sx), _mm512_mullo_epi32(Y, sy)));
}

/* Q4_K (dec NULL: nibbles from the panels) or Q5_K (dec: the two panels' decoded codes, DEC_SB·nsb apart).
 * out[c][r], r < 32. */
Q_INLINE void q45k_tile2x4(const bool q5, const uint8_t *p0, const uint8_t *p1, const uint8_t *dec, int64_t nsb,
                           const QTok *tk, float out[][32]) {
    const size_t SB = q5 ? Q5K_P16_SB : Q4K_P16_SB, at = q5 ? 2560 : 2048; /* scales; mins +128, d +256, dmin +288 */
    __m512 acc[2][4], accm[2][4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) acc[0][c] = acc[1][c] = accm[0][c] = accm[1][c] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b[2] = {p0 + (size_t)sb * SB, p1 + (size_t)sb * SB};
        const uint8_t *dc[2] = {NULL, NULL};
        if (q5) dc[0] = dec + (size_t)sb * DEC_SB, dc[1] = dc[0] + (size_t)nsb * DEC_SB;
        __m512i S[2][4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) S[0][c] = S[1][c] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int j = 0; j < 4; j++) {
            __m512i IA[4][2], IB[4][2]; /* [token][panel]: sub-blocks 2j and 2j + 1 */
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) IA[c][0] = IA[c][1] = IB[c][0] = IB[c][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                __m512i lo[2], hi[2];
#pragma GCC unroll 2
                for (int p = 0; p < 2; p++) {
                    if (q5) {
                        lo[p] = _mm512_loadu_si512(dc[p] + 64 * (16 * j + m));
                        hi[p] = _mm512_loadu_si512(dc[p] + 64 * (16 * j + 8 + m));
                    } else {
                        const __m512i v = _mm512_loadu_si512(b[p] + 512 * j + 64 * m);
                        lo[p] = _mm512_and_si512(v, m4);
                        hi[p] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    }
                }
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    const int8_t *a = tk[c].qs + sb * QK_K + 64 * j + 4 * m;
                    dp2x2(IA[c], IB[c], lo, hi, bc32(a), bc32(a + 32));
                }
            }
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                const __m512i sa = u8x16(b[p] + at + 16 * (2 * j)), sbv = u8x16(b[p] + at + 16 * (2 * j + 1));
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    S[p][c] = add_scaled2(S[p][c], IA[c][p], sa, IB[c][p], sbv);
            }
        }
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b[p] + at + 256)));
            const __m512 dm16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b[p] + at + 288)));
            __m512i M[4];
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) M[c] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) {
                const __m512i mp = pairs16(b[p] + at + 128 + 32 * q, false);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) M[c] = _mm512_dpwssd_epi32(M[c], mp, bsum32_pair(tk[c].bs + sb * 16, q));
            }
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m512 d8 = _mm512_set1_ps(tk[c].d[sb]);
                acc[p][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[p][c]), _mm512_mul_ps(d16, d8), acc[p][c]);
                accm[p][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M[c]), _mm512_mul_ps(dm16, d8), accm[p][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
        _mm512_storeu_ps(out[c], _mm512_sub_ps(acc[0][c], accm[0][c])), _mm512_storeu_ps(out[c] + 16, _mm512_sub_ps(acc[1][c], accm[1][c]));
}

/* Q6_K from the two panels' decoded codes (dec, DEC_SB·nsb apart): sub-blocks of 16 taken in pairs (vectors
 * 8pr … 8pr+3 and 8pr+4 … 8pr+7), the −32 offset through the bsums as in q6k_tile. out[c][r], r < 32. */
static void q6k_tile2x4(const uint8_t *p0, const uint8_t *p1, const uint8_t *dec, int64_t nsb, const QTok *tk,
                        float out[][32]) {
    __m512 acc[2][4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) acc[0][c] = acc[1][c] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b[2] = {p0 + (size_t)sb * Q6K_P16_SB, p1 + (size_t)sb * Q6K_P16_SB};
        const uint8_t *dc[2] = {dec + (size_t)sb * DEC_SB, dec + (size_t)(nsb + sb) * DEC_SB};
        __m512i S[2][4];
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) S[0][c] = S[1][c] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int pr = 0; pr < 8; pr++) {
            __m512i I0[4][2], I1[4][2]; /* [token][panel]: sub-blocks 2pr and 2pr + 1 */
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) I0[c][0] = I0[c][1] = I1[c][0] = I1[c][1] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {
                const __m512i w0[2] = {_mm512_loadu_si512(dc[0] + 64 * (8 * pr + m)), _mm512_loadu_si512(dc[1] + 64 * (8 * pr + m))};
                const __m512i w1[2] = {_mm512_loadu_si512(dc[0] + 64 * (8 * pr + 4 + m)), _mm512_loadu_si512(dc[1] + 64 * (8 * pr + 4 + m))};
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    const int8_t *a = tk[c].qs + sb * QK_K + 32 * pr + 4 * m;
                    dp2x2(I0[c], I1[c], w0, w1, bc32(a), bc32(a + 16));
                }
            }
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                const __m512i s0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[p] + 3072 + 16 * (2 * pr))));
                const __m512i s1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[p] + 3072 + 16 * (2 * pr + 1))));
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++)
                    S[p][c] = add_scaled2(S[p][c], I0[c][p], s0, I1[c][p], s1);
            }
        }
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++) {
            const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b[p] + 3328)));
            __m512i M[4]; /* Σ sc·bsums, the -32 offset's share */
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) M[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int q = 0; q < 8; q++) {
                const __m512i sp = pairs16(b[p] + 3072 + 32 * q, true);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) M[c] = _mm512_dpwssd_epi32(M[c], sp, bc32(tk[c].bs + sb * 16 + 2 * q));
            }
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m512i tot = _mm512_sub_epi32(S[p][c], _mm512_slli_epi32(M[c], 5));
                acc[p][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d16, _mm512_set1_ps(tk[c].d[sb])), acc[p][c]);
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) _mm512_storeu_ps(out[c], acc[0][c]), _mm512_storeu_ps(out[c] + 16, acc[1][c]);
}
static void q4k_tile2x4(const uint8_t *p0, const uint8_t *p1, const uint8_t *dec, int64_t nsb, const QTok *tk, float out[][32]) {
    q45k_tile2x4(false, p0, p1, dec, nsb, tk, out);
}
static void q5k_tile2x4(const uint8_t *p0, const uint8_t *p1, const uint8_t *dec, int64_t nsb, const QTok *tk, float out[][32]) {
    q45k_tile2x4(true, p0, p1, dec, nsb, tk, out);
}

/* Q6_K: one panel's nsb super-blocks with C tokens. Element 128h + 32r + 4m + i: low 4 bits from ql vector
 * 16h + 8(r & 1) + m (nibble r >> 1), high 2 bits from qh vector 8h + m (bits 2r); sub-block of 16 = 8h + 2r + m/4. */
Q_INLINE void q6k_tile(const uint8_t *panel, int64_t nsb, const QTok *tk, const int C, const bool pf, const bool tb,
                       float out[][16]) {
    __m512 acc[TILE_T];
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b = panel + (size_t)sb * Q6K_P16_SB;
        if (pf)
            for (int k = 0; k < Q6K_P16_SB; k += 64) _mm_prefetch((const char *)b + PF_BYTES + k, _MM_HINT_T0);
        __m512i S[TILE_T];
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) S[c] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int hr = 0; hr < 8; hr++) { /* h = hr / 4, group r = hr % 4: sub-blocks 8h + 2r (m < 4) and +1 */
            const int h = hr >> 2, r = hr & 3;
            __m512i I0[TILE_T], I1[TILE_T];
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) {
                if (tb) { /* the -32 offset's share as the start (q6k_gemv's integers): no second total */
                    I0[c] = _mm512_set1_epi32(tk[c].tb[16 * sb + 8 * h + 2 * r]);
                    I1[c] = _mm512_set1_epi32(tk[c].tb[16 * sb + 8 * h + 2 * r + 1]);
                } else
                    I0[c] = I1[c] = _mm512_setzero_si512();
            }
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                const __m512i l = _mm512_loadu_si512(b + 64 * (16 * h + 8 * (r & 1) + m));
                const __m512i qh = _mm512_loadu_si512(b + 2048 + 64 * (8 * h + m));
                const __m512i q = q6k_codes((r >> 1) ? _mm512_srli_epi16(l, 4) : l, qh, r, m4, m30);
#pragma GCC unroll 8
                for (int c = 0; c < C; c++) {
                    const int8_t *a = tk[c].qs + sb * QK_K + 128 * h + 32 * r + 4 * m;
                    if (m < 4) I0[c] = dpbusd_bc(I0[c], q, a);
                    else I1[c] = dpbusd_bc(I1[c], q, a);
                }
            }
            const __m512i s0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 3072 + 16 * (8 * h + 2 * r))));
            const __m512i s1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 3072 + 16 * (8 * h + 2 * r + 1))));
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                S[c] = _mm512_add_epi32(S[c], _mm512_add_epi32(_mm512_mullo_epi32(I0[c], s0), _mm512_mullo_epi32(I1[c], s1)));
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + 3328)));
        if (tb) {
#pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[c]), _mm512_mul_ps(d16, _mm512_set1_ps(tk[c].d[sb])), acc[c]);
            continue;
        }
        __m512i M[TILE_T]; /* Σ sc·bsums, the -32 offset's share, by vpdpwssd over pairs of sub-blocks */
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) M[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int p = 0; p < 8; p++) {
            const __m512i sp = pairs16(b + 3072 + 32 * p, true);
#pragma GCC unroll 8
            for (int c = 0; c < C; c++) M[c] = _mm512_dpwssd_epi32(M[c], sp, bc32(tk[c].bs + sb * 16 + 2 * p));
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; c++) {
            const __m512i tot = _mm512_sub_epi32(S[c], _mm512_slli_epi32(M[c], 5));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot), _mm512_mul_ps(d16, _mm512_set1_ps(tk[c].d[sb])), acc[c]);
        }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out[c], acc[c]);
}

/* Q6_K decode (1-2 tokens): the same integers, in fewer instructions for a GEMV. Per h and m one qh vector and
 * the two ql vectors give all four groups r (the tile kernel reloads qh per r, which keeps its accumulators to
 * 2 per token), and the -32 offset starts each 16-element total at -32·bsum instead of being a second total:
 * Σ sc·(I − 32·bs) = S − 32·Σ sc·bs, the tile kernel's integer. */
Q_INLINE void q6k_gemv(const uint8_t *panel, int64_t nsb, const QTok *tk, const int C, float out[][16]) {
    __m512 acc[2];
#pragma GCC unroll 2
    for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const uint8_t *b = panel + (size_t)sb * Q6K_P16_SB;
        for (int k = 0; k < Q6K_P16_SB; k += 64) _mm_prefetch((const char *)b + PF_BYTES + k, _MM_HINT_T0);
        __m512i S[2];
#pragma GCC unroll 2
        for (int c = 0; c < C; c++) S[c] = _mm512_setzero_si512();
#pragma GCC unroll 1
        for (int h = 0; h < 2; h++) {
            __m512i I[2][8]; /* [token][2r + (m >= 4)]: sub-block 8h + 2r + (m >= 4) */
#pragma GCC unroll 2
            for (int c = 0; c < C; c++)
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) I[c][g] = _mm512_set1_epi32(-32 * tk[c].bs[sb * 16 + 8 * h + g]);
#pragma GCC unroll 8
            for (int m = 0; m < 8; m++) {
                const __m512i l0 = _mm512_loadu_si512(b + 64 * (16 * h + m)), l1 = _mm512_loadu_si512(b + 64 * (16 * h + 8 + m));
                const __m512i qh = _mm512_loadu_si512(b + 2048 + 64 * (8 * h + m));
                const __m512i q[4] = {q6k_codes(l0, qh, 0, m4, m30), q6k_codes(l1, qh, 1, m4, m30),
                                      q6k_codes(_mm512_srli_epi16(l0, 4), qh, 2, m4, m30),
                                      q6k_codes(_mm512_srli_epi16(l1, 4), qh, 3, m4, m30)};
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
#pragma GCC unroll 2
                    for (int c = 0; c < C; c++)
                        I[c][2 * r + (m >> 2)] = _mm512_dpbusd_epi32(I[c][2 * r + (m >> 2)], q[r],
                                                                    bc32(tk[c].qs + sb * QK_K + 128 * h + 32 * r + 4 * m));
            }
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 3072 + 16 * (8 * h + g))));
#pragma GCC unroll 2
                for (int c = 0; c < C; c++) S[c] = _mm512_add_epi32(S[c], _mm512_mullo_epi32(I[c][g], sc));
            }
        }
        const __m512 d16 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(b + 3328)));
#pragma GCC unroll 2
        for (int c = 0; c < C; c++) acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[c]), _mm512_mul_ps(d16, _mm512_set1_ps(tk[c].d[sb])), acc[c]);
    }
#pragma GCC unroll 2
    for (int c = 0; c < C; c++) _mm512_storeu_ps(out[c], acc[c]);
}

Q_INLINE void q4k_tile(const uint8_t *panel, int64_t nsb, const QTok *tk, const int C, const bool pf, const bool tb,
                       float out[][16]) {
    q45k_tile(false, panel, nsb, tk, C, pf, tb, out);
}
Q_INLINE void q5k_tile(const uint8_t *panel, int64_t nsb, const QTok *tk, const int C, const bool pf, const bool tb,
                       float out[][16]) {
    q45k_tile(true, panel, nsb, tk, C, pf, tb, out);
}

/* F##C##_##PF: C tokens, PF the prefetch; the small batches' (_2) prefetch and read the per-token table */
#define TILE_FN(F, C, PF)                                                                                          \
    static void F##C##_##PF(const uint8_t *panel, int64_t nsb, const QTok *tk, float out[][16]) {                  \
        F##_tile(panel, nsb, tk, C, (PF) != 0, (PF) == 2, out);                                                    \
    }
TILE_FN(q4k, 1, 1)
TILE_FN(q4k, 2, 1)
TILE_FN(q4k, 1, 2)
TILE_FN(q4k, 2, 2)
TILE_FN(q4k, 3, 0)
TILE_FN(q4k, 4, 0)
TILE_FN(q4k, 5, 0)
TILE_FN(q4k, 6, 0)
TILE_FN(q4k, 7, 0)
TILE_FN(q4k, 8, 0)
TILE_FN(q4k, 3, 2)
TILE_FN(q4k, 4, 2)
TILE_FN(q4k, 5, 2)
TILE_FN(q4k, 6, 2)
TILE_FN(q4k, 7, 2)
TILE_FN(q4k, 8, 2)
TILE_FN(q5k, 1, 1)
TILE_FN(q5k, 2, 1)
TILE_FN(q5k, 1, 2)
TILE_FN(q5k, 2, 2)
TILE_FN(q5k, 3, 0)
TILE_FN(q5k, 4, 0)
TILE_FN(q5k, 5, 0)
TILE_FN(q5k, 6, 0)
TILE_FN(q5k, 7, 0)
TILE_FN(q5k, 8, 0)
TILE_FN(q5k, 3, 2)
TILE_FN(q5k, 4, 2)
TILE_FN(q5k, 5, 2)
TILE_FN(q5k, 6, 2)
TILE_FN(q5k, 7, 2)
TILE_FN(q5k, 8, 2)
static void q6k1_1(const uint8_t *panel, int64_t nsb, const QTok *tk, float out[][16]) { q6k_gemv(panel, nsb, tk, 1, out); }
static void q6k2_1(const uint8_t *panel, int64_t nsb, const QTok *tk, float out[][16]) { q6k_gemv(panel, nsb, tk, 2, out); }
TILE_FN(q6k, 3, 0)
TILE_FN(q6k, 4, 0)
TILE_FN(q6k, 5, 0)
TILE_FN(q6k, 6, 0)
TILE_FN(q6k, 7, 0)
TILE_FN(q6k, 8, 0)
TILE_FN(q6k, 3, 2)
TILE_FN(q6k, 4, 2)
TILE_FN(q6k, 5, 2)
TILE_FN(q6k, 6, 2)
TILE_FN(q6k, 7, 2)
TILE_FN(q6k, 8, 2)
typedef void (*TileFn)(const uint8_t *, int64_t, const QTok *, float (*)[16]);
/* [0]: inside a prefill item (the panel is reused by the item's later tiles: no prefetch); [1]: a small batch
 * (≤ SMALL_T tokens: a speculative verify, a few streams' decode), one pass over the matrix like the decode GEMV,
 * so it streams the panels with the GEMV's prefetch (the same integers and fma: the same bits) */
/* Q4_K's small batches took the prefill item's tiles (no prefetch) until 2026-12-07: on 4096² (17.8 MB, warm in
 * the L3 between matmul_bench's repetitions) the prefetching ones looked no faster (T = 4 0.284 -> 0.314 ms), but
 * decode streams its weights from memory: 65536 × 4096 (151 MB), 1 thread, T = 3 15.9-16.0 -> 5.7-9.9 ms, T = 4
 * 17.9-18.3 -> 9.1-11.3, T = 8 30.1-34.9 -> 16.1-16.7 (docs/KERNELS.md). Q5_K / Q6_K gain 2.7-3x at T = 3-4 and
 * 1.4x at T = 8 */
static const TileFn q4k_tiles[2][TILE_T + 1] = {{NULL, q4k1_1, q4k2_1, q4k3_0, q4k4_0, q4k5_0, q4k6_0, q4k7_0, q4k8_0},
                                                {NULL, q4k1_2, q4k2_2, q4k3_2, q4k4_2, q4k5_2, q4k6_2, q4k7_2, q4k8_2}};
static const TileFn q5k_tiles[2][TILE_T + 1] = {{NULL, q5k1_1, q5k2_1, q5k3_0, q5k4_0, q5k5_0, q5k6_0, q5k7_0, q5k8_0},
                                                {NULL, q5k1_2, q5k2_2, q5k3_2, q5k4_2, q5k5_2, q5k6_2, q5k7_2, q5k8_2}};
static const TileFn q6k_tiles[2][TILE_T + 1] = {{NULL, q6k1_1, q6k2_1, q6k3_0, q6k4_0, q6k5_0, q6k6_0, q6k7_0, q6k8_0},
                                                {NULL, q6k1_1, q6k2_1, q6k3_2, q6k4_2, q6k5_2, q6k6_2, q6k7_2, q6k8_2}};

size_t mm_k_p16_tmp_bytes(int64_t K) { return 2 * (size_t)(K / QK_K) * DEC_SB; }

/* The small batches' per-token table (TB_INTS int32 per super-block, in tmp: ≤ SMALL_T·64·nsb bytes), what the
 * tiles otherwise rebuild for every panel from the activations' bsums: Q6_K the -32 offset's share of each
 * 16-element sub-block, -32·bsum (the start of its integer total, as in q6k_gemv: Σ sc·(I − 32·bs) = S − 32·Σ
 * sc·bs, the same integer); Q4_K / Q5_K the pairs of 32-element bsums (bsum32_pair) the minimums' vpdpwssd takes.
 * Built once per work item and token, read as one broadcast per use. */
#define TB_INTS 16
static void bs_table(const bool q6, const QTok *tk, int64_t nsb, int32_t *tb) {
    /* a few vector steps per super-block (items of 5-8 tokens are 64 rows: a scalar loop cost ~1/4 of them) */
    const __m128i lo16 = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1);
    for (int64_t sb = 0; sb < nsb; sb++) {
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(tk->bs + sb * 16));
        if (q6) /* -32·bs[g] */
            _mm512_storeu_si512(tb + 16 * sb, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_cvtepi16_epi32(bs), 5)));
        else { /* bsum32_pair_i(p): the int16 sums bs[2k] + bs[2k+1] (their low 16 bits), two to an int32 */
            const __m256i s = _mm256_madd_epi16(bs, _mm256_set1_epi16(1)); /* 8 int32 */
            const __m128i l = _mm_shuffle_epi8(_mm256_castsi256_si128(s), lo16), h = _mm_shuffle_epi8(_mm256_extracti128_si256(s, 1), lo16);
            _mm_storeu_si128((__m128i *)(tb + 4 * sb), _mm_unpacklo_epi64(l, h));
        }
    }
}

void mm_k_p16_compute(const MmJob *j, int64_t o0, int64_t o1, int64_t t0, int64_t t1, uint8_t *tmp) {
    const int64_t nsb = j->K / QK_K;
    const uint32_t ty = j->w->type;
    const bool small = t1 - t0 <= SMALL_T;
    const TileFn *tiles = (ty == FMT_Q6_K ? q6k_tiles : ty == FMT_Q5_K ? q5k_tiles : q4k_tiles)[small];
    const size_t panel_bytes = (size_t)nsb * (ty == FMT_Q6_K ? Q6K_P16_SB : ty == FMT_Q5_K ? Q5K_P16_SB : Q4K_P16_SB);
    int64_t o = o0;
    if (!small) /* prefill: 32 rows × 4 tokens where two panels are left */
        for (; o + 32 <= o1; o += 32) {
            const uint8_t *p0 = (const uint8_t *)j->w->pack + (size_t)(o / 16) * panel_bytes, *p1 = p0 + panel_bytes;
            if (ty == FMT_Q5_K) dec_q5k(p0, nsb, tmp), dec_q5k(p1, nsb, tmp + (size_t)nsb * DEC_SB);
            if (ty == FMT_Q6_K) dec_q6k(p0, nsb, tmp), dec_q6k(p1, nsb, tmp + (size_t)nsb * DEC_SB);
            void (*const tile2x4)(const uint8_t *, const uint8_t *, const uint8_t *, int64_t, const QTok *, float (*)[32]) =
                ty == FMT_Q6_K ? q6k_tile2x4 : ty == FMT_Q5_K ? q5k_tile2x4 : q4k_tile2x4;
            /* the next two panels (up to the matrix's end: the next item is usually this thread's too) are
             * prefetched a slice per token quad, so that a product of few tokens (an expert's) does not stream
             * each pair from memory at the start (b4 pp512 alternating: 1 thread 581-634 -> 619-656 t/s, 2 threads
             * 995-1033 -> 1083-1151) */
            const size_t pf_total = o + 64 <= j->O ? 2 * panel_bytes : 0;
            const size_t pf_step = pf_total ? ((pf_total / (size_t)((t1 - t0) / 4) + 63) & ~(size_t)63) : 0;
            size_t pf_at = 0;
            int64_t t = t0;
            for (; t + 4 <= t1; t += 4) {
                for (size_t e = pf_at + pf_step; pf_at < pf_total && pf_at < e; pf_at += 64)
                    _mm_prefetch((const char *)p0 + 2 * panel_bytes + pf_at, _MM_HINT_T0);
                QTok tk[4];
                for (int c = 0; c < 4; c++) tk[c] = q_tok(j, t + c);
                float out[4][32];
                tile2x4(p0, p1, tmp, nsb, tk, out);
                for (int c = 0; c < 4; c++) memcpy(j->y + (t + c) * j->O + o, out[c], sizeof out[c]);
            }
            for (int h = 0; h < 2 && t < t1; h++) { /* the last 1-3 tokens: the 16-row tiles */
                const int nc = (int)(t1 - t);
                QTok tk[TILE_T];
                for (int c = 0; c < nc; c++) tk[c] = q_tok(j, t + c);
                float out[TILE_T][16];
                tiles[nc](h ? p1 : p0, nsb, tk, out);
                for (int c = 0; c < nc; c++) memcpy(j->y + (t + c) * j->O + o + 16 * h, out[c], sizeof out[c]);
            }
        }
    QTok stk[SMALL_T]; /* a small batch's tokens, with their tables */
    if (small && o < o1)
        for (int c = 0; c < t1 - t0; c++) {
            stk[c] = q_tok(j, t0 + c);
            int32_t *tb = (int32_t *)tmp + (size_t)c * TB_INTS * (size_t)nsb;
            bs_table(ty == FMT_Q6_K, &stk[c], nsb, tb);
            stk[c].tb = tb;
        }
    for (; o < o1; o += 16) { /* o0, o1: multiples of 16 (the driver aligns P16 items) */
        const uint8_t *panel = (const uint8_t *)j->w->pack + (size_t)(o / 16) * panel_bytes;
        const int nr = o1 - o < 16 ? (int)(o1 - o) : 16;
        for (int64_t t = t0; t < t1; t += TILE_T) {
            const int nc = t1 - t < TILE_T ? (int)(t1 - t) : TILE_T;
            QTok tk[TILE_T];
            for (int c = 0; c < nc; c++) tk[c] = small ? stk[c] : q_tok(j, t + c);
            float out[TILE_T][16];
            tiles[nc](panel, nsb, tk, out);
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) j->y[(t + c) * j->O + o + r] = out[c][r];
        }
    }
}
