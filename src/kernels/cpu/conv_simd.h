/* conv_simd.h — causal depthwise conv + SiLU, written once against simd16.h and compiled by conv_avx512.c and
 * conv_avx2.c; bit-identical to conv_silu_ref.
 *
 * Each output is a chain of fused multiply-adds over the K taps, oldest first, from 0 (as the reference and
 * ggml's SSM_CONV build compute it); inputs older than the batch come from the state. The SiLU is fused:
 * channels in the whole 16-element chunks of a token row go through the SIMD exp polynomial (v16_exp,
 * lane for lane op_expf_poly), the leftover channels (C % 16) through libm as op_silu_row does.
 * Work items are groups of 64 channels over all T tokens; each item writes its channels' new state. */
#include "kernels/cpu/seq_kernels.h"
#include "kernels/cpu/simd16.h"

#include <math.h>

#define CONV_MAX_TAPS 16
#define CONV_GROUP 64

typedef struct ConvJob {
    const float *x, *w;
    int T, C, K;
    float *state, *y;
} ConvJob;

SIMD_INLINE V16 silu16(V16 x) {
    return v16_div(x, v16_add(v16_set1(1.0f), v16_exp(v16_sub(v16_zero(), x))));
}

/* 16 channels from c0 (all within the row's whole 16-chunks), K taps (a constant in the copies below) */
SIMD_INLINE void conv_block16(const ConvJob *j, int c0, const int K) {
    V16 w[CONV_MAX_TAPS] = {0}, h[CONV_MAX_TAPS] = {0};
    float tmp[CONV_MAX_TAPS][16];
#pragma GCC unroll 16
    for (int i = 0; i < K; i++) w[i] = v16_gather(j->w + (int64_t)c0 * K + i, K);
#pragma GCC unroll 16
    for (int i = 0; i < K - 1; i++) h[i] = v16_gather(j->state + (int64_t)c0 * (K - 1) + i, K - 1);
    const int64_t C = j->C;
    for (int t = 0; t < j->T; t++) {
        h[K - 1] = v16_load(j->x + t * C + c0);
        V16 acc = v16_zero();
#pragma GCC unroll 16
        for (int i = 0; i < K; i++) acc = v16_fmadd(h[i], w[i], acc);
        v16_store(j->y + t * C + c0, silu16(acc));
#pragma GCC unroll 16
        for (int i = 0; i < K - 1; i++) h[i] = h[i + 1];
    }
    for (int i = 0; i < K - 1; i++) v16_store(tmp[i], h[i]);
    for (int i = 0; i < K - 1; i++)
        for (int l = 0; l < 16; l++) j->state[(int64_t)(c0 + l) * (K - 1) + i] = tmp[i][l];
}

#if defined(__AVX512F__)
/* K = 4 at AVX-512: the same arithmetic as conv_block16 (a 4-tap chain per output, oldest first), with the 16
 * channels' taps and state moved between their channel-major layout and one vector per tap by permutes instead
 * of gathers and scalar stores: a one-token call (decode) spent ~30 µs on 8192 channels in those. Weights: tap t
 * of channel c is element 4c + t of the 64 floats; state: element 3c + t of the 48. The index tables follow
 * those formulas: lanes 0-7 channels 0-7 (or 8-15, from the later vectors), lanes 8-15 the next tap. */
static const int32_t CV_W01[16] = {0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29};
static const int32_t CV_W23[16] = {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31};
static const int32_t CV_S01[16] = {0, 3, 6, 9, 12, 15, 18, 21, 1, 4, 7, 10, 13, 16, 19, 22};    /* from (S0, S1) */
static const int32_t CV_S01H[16] = {8, 11, 14, 17, 20, 23, 26, 29, 9, 12, 15, 18, 21, 24, 27, 30}; /* (S1, S2) */
static const int32_t CV_S2[16] = {2, 5, 8, 11, 14, 17, 20, 23, 2, 5, 8, 11, 14, 17, 20, 23};
static const int32_t CV_S2H[16] = {10, 13, 16, 19, 22, 25, 28, 31, 10, 13, 16, 19, 22, 25, 28, 31};
/* state out: vector o, element e = 3c + t (c = channel, t = tap): taps 0 and 1 from (n0, n1), tap 2 (lanes in
 * CV_OM) from n2 */
static const int32_t CV_O01[3][16] = {{0, 16, 0, 1, 17, 0, 2, 18, 0, 3, 19, 0, 4, 20, 0, 5},
                                      {21, 0, 6, 22, 0, 7, 23, 0, 8, 24, 0, 9, 25, 0, 10, 26},
                                      {0, 11, 27, 0, 12, 28, 0, 13, 29, 0, 14, 30, 0, 15, 31, 0}};
static const int32_t CV_O2[3][16] = {{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0},
                                     {0, 5, 0, 0, 6, 0, 0, 7, 0, 0, 8, 0, 0, 9, 0, 0},
                                     {10, 0, 0, 11, 0, 0, 12, 0, 0, 13, 0, 0, 14, 0, 0, 15}};
static const __mmask16 CV_OM[3] = {0x4924, 0x2492, 0x9249};

SIMD_INLINE __m512i cv_idx(const int32_t *t) { return _mm512_loadu_si512(t); }

/* lanes 0-7 of a and of b as one vector (lo) or lanes 8-15 of each (hi) */
SIMD_INLINE __m512 cv_lo(__m512 a, __m512 b) { return _mm512_shuffle_f32x4(a, b, 0x44); }
SIMD_INLINE __m512 cv_hi(__m512 a, __m512 b) { return _mm512_shuffle_f32x4(a, b, 0xEE); }

static void conv_block16_k4(const ConvJob *j, int c0) {
    const float *wp = j->w + (int64_t)c0 * 4;
    float *sp = j->state + (int64_t)c0 * 3;
    const __m512 w0 = _mm512_loadu_ps(wp), w1 = _mm512_loadu_ps(wp + 16), w2 = _mm512_loadu_ps(wp + 32),
                 w3 = _mm512_loadu_ps(wp + 48);
    const __m512 a01 = _mm512_permutex2var_ps(w0, cv_idx(CV_W01), w1), b01 = _mm512_permutex2var_ps(w2, cv_idx(CV_W01), w3);
    const __m512 a23 = _mm512_permutex2var_ps(w0, cv_idx(CV_W23), w1), b23 = _mm512_permutex2var_ps(w2, cv_idx(CV_W23), w3);
    const __m512 w[4] = {cv_lo(a01, b01), cv_hi(a01, b01), cv_lo(a23, b23), cv_hi(a23, b23)};
    const __m512 s0 = _mm512_loadu_ps(sp), s1 = _mm512_loadu_ps(sp + 16), s2 = _mm512_loadu_ps(sp + 32);
    const __m512 p01 = _mm512_permutex2var_ps(s0, cv_idx(CV_S01), s1), q01 = _mm512_permutex2var_ps(s1, cv_idx(CV_S01H), s2);
    const __m512 p2 = _mm512_permutex2var_ps(s0, cv_idx(CV_S2), s1), q2 = _mm512_permutex2var_ps(s1, cv_idx(CV_S2H), s2);
    __m512 h[4] = {cv_lo(p01, q01), cv_hi(p01, q01), cv_lo(p2, q2), _mm512_setzero_ps()};
    const int64_t C = j->C;
    for (int t = 0; t < j->T; t++) {
        h[3] = _mm512_loadu_ps(j->x + t * C + c0);
        __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) acc = _mm512_fmadd_ps(h[i], w[i], acc);
        _mm512_storeu_ps(j->y + t * C + c0, silu16(acc));
        h[0] = h[1], h[1] = h[2], h[2] = h[3];
    }
#pragma GCC unroll 3
    for (int o = 0; o < 3; o++) {
        const __m512 u = _mm512_permutex2var_ps(h[0], cv_idx(CV_O01[o]), h[1]);
        _mm512_storeu_ps(sp + 16 * o, _mm512_mask_permutexvar_ps(u, CV_OM[o], cv_idx(CV_O2[o]), h[2]));
    }
}
#endif

/* one channel the scalar way (the row's leftover channels: libm SiLU) */
static void conv_channel(const ConvJob *j, int c) {
    const int K = j->K;
    const float *w = j->w + (int64_t)c * K;
    float *st = j->state + (int64_t)c * (K - 1);
    float win[CONV_MAX_TAPS];
    for (int i = 0; i < K - 1; i++) win[i] = st[i];
    for (int t = 0; t < j->T; t++) {
        win[K - 1] = j->x[(int64_t)t * j->C + c];
        float acc = 0.0f;
        for (int i = 0; i < K; i++) acc = fmaf(win[i], w[i], acc);
        j->y[(int64_t)t * j->C + c] = op_silu(acc);
        for (int i = 0; i < K - 1; i++) win[i] = win[i + 1];
    }
    for (int i = 0; i < K - 1; i++) st[i] = win[i];
}

static void conv_items(void *ctx, int64_t b, int64_t e, int thread) {
    (void)thread;
    const ConvJob *j = ctx;
    const int c16 = j->C & ~15;
    for (int64_t it = b; it < e; it++) {
        const int c_beg = (int)it * CONV_GROUP, c_end = c_beg + CONV_GROUP < j->C ? c_beg + CONV_GROUP : j->C;
        int c = c_beg;
        for (; c + 16 <= c_end && c + 16 <= c16; c += 16) {
#if defined(__AVX512F__)
            if (j->K == 4) conv_block16_k4(j, c);
#else
            if (j->K == 4) conv_block16(j, c, 4);
#endif
            else conv_block16(j, c, j->K);
        }
        for (; c < c_end; c++) conv_channel(j, c);
    }
}

void SEQ_FN(conv_silu)(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, float *y) {
    if (K > CONV_MAX_TAPS || K < 2) {
        conv_silu_ref(c, x, T, C, K, w, state, y);
        return;
    }
    ConvJob j = {x, w, T, C, K, state, y};
    const int64_t n = (C + CONV_GROUP - 1) / CONV_GROUP;
    pool_for(c->pool, n, T >= 16 ? 1 : 8, conv_items, &j);
}

/* conv_silu over n sequences: each sequence's items (its own ConvJob) in one pool_for (SeqsJob), so each
 * computes what it computes in that sequence's own call */
void SEQ_FN(conv_silu_seqs)(const OpCtx *c, const ConvSeqArgs *s, int n, int C, int K, const float *w) {
    if (K > CONV_MAX_TAPS || K < 2) {
        conv_silu_seqs_ref(c, s, n, C, K, w);
        return;
    }
    const int64_t items = (C + CONV_GROUP - 1) / CONV_GROUP;
    for (int i0 = 0; i0 < n; i0 += OPS_SEQS_MAX) {
        const int m = n - i0 < OPS_SEQS_MAX ? n - i0 : OPS_SEQS_MAX;
        ConvJob jobs[OPS_SEQS_MAX];
        SeqsJob sj = {0};
        bool small = true; /* the single call's grain: 8 items for short sequences */
        for (int i = 0; i < m; i++) {
            const ConvSeqArgs *si = &s[i0 + i];
            jobs[i] = (ConvJob){si->x, w, si->T, C, K, si->state, si->y};
            seqs_add(&sj, conv_items, &jobs[i], items);
            if (si->T >= 16) small = false;
        }
        pool_for(c->pool, sj.start[sj.n], small ? 8 : 1, seqs_items, &sj);
    }
}
