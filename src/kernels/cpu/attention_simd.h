/* attention_simd.h — causal GQA attention over the KV cache, written once against simd16.h and compiled by
 * attention_avx512.c and attention_avx2.c. The cache is F32, F16 (widened exactly as it is read) or Q8_0 /
 * Q4_0 (dequantized as it is read: kv_simd.h), K and V each in its own type; every type is read in the same
 * order, so a quantized cache gives the bits of the F32 path on its dequantized values. Two kernels:
 *
 * mirror — bit-identical to attention_ref (llama.cpp's non-flash path), for short contexts. Per query row:
 *   scores in fdot_vec_f32's order, 16 keys at a time (4 accumulators over 64-element steps, folded, and the
 *   16 keys' trees reduced together by v16_reduce16x16), ×scale; the softmax of op_softmax (SIMD polynomial
 *   exp, per-16 sums added in double in order); then out = V·p in the order llama.cpp uses for the padded
 *   context: tinyBLAS (16 lane streams, key τ in stream τ mod 16, then the 16→1 tree) for batches of ≥ 2
 *   queries, ggml_vec_dot_f32 (64 streams τ mod 64, folded (0+2)+(1+3), then the tree) for one. Each
 *   stream runs across the output dimensions as a vector, so no V column is ever gathered. The padding
 *   of the reference (keys up to a multiple of 256 with probability 0 and V 0) adds exact zeros to
 *   accumulators that are never −0, so it is skipped.
 *
 * tiled — online softmax (flash-attention style), for long contexts: items are (KV head, block of query
 *   tokens) with all the query heads of the group as rows (up to 256 rows; 64 in the llama arithmetic); for
 *   each tile of 64 keys (fixed blocks from position 0, whatever the batch) the scores, the running max / sum,
 *   and O = diag(α)·O + P·V_tile through gemm_nn; nothing of size T×n_kv exists. Not bit-identical to the
 *   reference (the exp of each score is taken against a running max): within ~1e-6 relative. Batch-invariant when
 *   the scores always go through the GEMM (gemm_always): every element of gemm_nn is one fma chain over k whatever
 *   the rows and columns, a row's tiles are the same fixed blocks, keys it does not see add exact zeros (P = 0, α =
 *   1), and its max, sum and output depend on its own scores only — so a query row gives the same bits alone, in a
 *   batch, in chunks or in a verify. F16 / Q8_0 / Q4_0 caches: each key / value tile is dequantized (tile_dequant,
 *   the bits of kv_v16) into the workspace first. An item of at most KT_MAXR rows (decode, short verifies) skips
 *   the workspace tiles: its products read the cache directly (kt_products), prefetching the next tile, with the
 *   same bits — at depth 32k decode is bound by the cache's latency, not its arithmetic.
 *
 * The op: the llama arithmetic mirrors below ATTN_TILED_MIN_CTX context positions (pos0 + T) and tiles from
 * there on (F32 caches); the fast arithmetic splits per query row — a row whose context is at most
 * ATTN_TILED_MIN_CTX mirrors, a later one runs the tiled kernel with gemm_always — so each row's kernel
 * depends on its position only, and short prompts keep their bits on every cache type. */
#include "base/fdot.h"
#include "base/fp16.h"
#include "kernels/cpu/gemm_simd.h"
#include "kernels/cpu/kv_simd.h"
#include "kernels/cpu/seq_kernels.h"
#include "kernels/cpu/simd16.h"

#include <math.h>
#include <string.h>

/* ---- shared: 16 scores (or fewer) of one query against consecutive keys, fdot_vec_f32's order -------- */

SIMD_INLINE void scores16(const float *q, KvPtr k0, int64_t kstride, int nk, int d, const int NF, float scale,
                          float *s, const uint32_t kt) {
    V16 part[16], qv[16] = {0};
    const bool qreg = NF <= 16; /* q in registers across the keys (AVX-512; constant in the copies) */
    if (qreg)
#pragma GCC unroll 16
        for (int c = 0; c < NF; c++) qv[c] = v16_load(q + 16 * c);
    for (int r = 0; r < nk; r++) {
        const KvPtr k = kv_at(k0, r * kstride);
        V16 acc[4] = {v16_zero(), v16_zero(), v16_zero(), v16_zero()};
#pragma GCC unroll 16
        for (int c = 0; c < NF; c++)
            acc[c & 3] = v16_fmadd(kv_v16(k, 16 * c, kt), qreg ? qv[c & 15] : v16_load(q + 16 * c), acc[c & 3]);
        part[r] = v16_add(v16_add(acc[0], acc[2]), v16_add(acc[1], acc[3]));
    }
    for (int r = nk; r < 16; r++) part[r] = v16_zero();
    V16 dots = v16_reduce16x16(part);
    if (NF * 16 < d) {
        float tmp[16];
        v16_store(tmp, dots);
        for (int r = 0; r < nk; r++) {
            const KvPtr k = kv_at(k0, r * kstride);
            float x = tmp[r];
            for (int i = NF * 16; i < d; i++) x += kv_one(k, i, kt) * q[i];
            tmp[r] = x;
        }
        dots = v16_load(tmp);
    }
    v16_store_n(s, v16_mul(dots, v16_set1(scale)), nk);
}

SIMD_INLINE void scores_row_t(const float *q, KvPtr k0, int64_t kstride, int n, int d, float scale, float *s,
                              const uint32_t type) {
    const int NF = (d / 64) * 4;
    for (int t = 0; t < n; t += 16) {
        const int nk = n - t < 16 ? n - t : 16;
        const KvPtr kt = kv_at(k0, t * kstride);
        switch (d) {
        case 256: scores16(q, kt, kstride, nk, d, 16, scale, s + t, type); break;
        case 128: scores16(q, kt, kstride, nk, d, 8, scale, s + t, type); break;
        case 64: scores16(q, kt, kstride, nk, d, 4, scale, s + t, type); break;
        default: scores16(q, kt, kstride, nk, d, NF, scale, s + t, type); break;
        }
    }
}

/* n scores of q against the keys k0, k0 + kstride, …: one copy of the loop per cache type */
static void scores_row(const float *q, KvPtr k0, int64_t kstride, int n, int d, float scale, float *s) {
    switch (k0.type) {
    case FMT_F16: scores_row_t(q, k0, kstride, n, d, scale, s, FMT_F16); break;
    case FMT_Q8_0: scores_row_t(q, k0, kstride, n, d, scale, s, FMT_Q8_0); break;
    case FMT_Q4_0: scores_row_t(q, k0, kstride, n, d, scale, s, FMT_Q4_0); break;
    default: scores_row_t(q, k0, kstride, n, d, scale, s, FMT_F32); break;
    }
}

/* ---- mirror ----------------------------------------------------------------------------------------------- */

typedef struct MirrorJob {
    const AttnArgs *a;
    float *scratch;
    int64_t n_pad, per_thread; /* floats: n_pad per head of an item */
    int group, hs, n_hsub;
    bool rows; /* PV by whole rows (needs 64·d floats of the scratch) */
    bool batch_order; /* P·V in the batch (tinyBLAS) order: batches of ≥ 2, and any T in the fast arithmetic */
} MirrorJob;

/* the tree of fdot_reduce16 across 16 vectors (lane l of the reference = vector l here) */
SIMD_INLINE VN vn_tree16(VN *x) {
    for (int l = 0; l < 8; l++) x[l] = vn_add(x[l], x[l + 8]);
    for (int l = 0; l < 4; l++) x[l] = vn_add(x[l], x[l + 4]);
    for (int l = 0; l < 2; l++) x[l] = vn_add(x[l], x[l + 2]);
    return vn_add(x[0], x[1]);
}

/* dims [i, i + VN_W) of Σ_τ p[τ]·V[τ] in tinyBLAS order: stream l = τ mod 16 */
static VN pv_gemm_order(const float *p, int n, KvPtr v0, int64_t vs, int i) {
    const int nfull = n & ~15;
    VN acc[16];
    for (int l = 0; l < 16; l++) acc[l] = vn_zero();
    for (int t = 0; t < nfull; t += 16)
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) acc[l] = vn_fmadd(kv_vn(v0, (t + l) * vs + i, v0.type), vn_set1(p[t + l]), acc[l]);
    for (int t = nfull; t < n; t++)
        acc[t - nfull] = vn_fmadd(kv_vn(v0, t * vs + i, v0.type), vn_set1(p[t]), acc[t - nfull]);
    return vn_tree16(acc);
}

/* the same in ggml_vec_dot_f32 order: stream (j, l) for τ = 64m + 16j + l, folded (0+2)+(1+3) */
static VN pv_vec_order(const float *p, int n, KvPtr v0, int64_t vs, int i) {
    const int nfull = n & ~63;
    VN red[16];
    for (int lg = 0; lg < 16; lg += 4) {
        VN acc[4][4];
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 4; l++) acc[j][l] = vn_zero();
        for (int m = 0; m < nfull; m += 64)
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
#pragma GCC unroll 4
                for (int l = 0; l < 4; l++) {
                    const int t = m + 16 * j + lg + l;
                    acc[j][l] = vn_fmadd(kv_vn(v0, t * vs + i, v0.type), vn_set1(p[t]), acc[j][l]);
                }
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 4; l++) {
                const int t = nfull + 16 * j + lg + l;
                if (t < n) acc[j][l] = vn_fmadd(kv_vn(v0, t * vs + i, v0.type), vn_set1(p[t]), acc[j][l]);
            }
        for (int l = 0; l < 4; l++) red[lg + l] = vn_add(vn_add(acc[0][l], acc[2][l]), vn_add(acc[1][l], acc[3][l]));
    }
    return vn_tree16(red);
}

/* The same two orders with whole V rows as the unit (each row 1 KiB contiguous at d = 256): stream s of
 * NS (16: tinyBLAS, 64: ggml_vec_dot_f32) accumulates rows s, s + NS, … across NVN vectors of dims at
 * once, into R[s][·]; then the streams are combined across dims as vectors. Reading whole rows matters at
 * long contexts: column blocks of V touch a new page every other row, and the TLB misses dominate. */
SIMD_INLINE void pv_stream_cols(const float *p, int n, KvPtr v0, int64_t vs, int s, int NS, int i0,
                                const int NVN, float *R, const uint32_t type) {
    VN acc[16];
    const int64_t span = kv_bytes(NVN * VN_W, type); /* bytes of the NVN vectors in one row */
#pragma GCC unroll 16
    for (int u = 0; u < NVN; u++) acc[u] = vn_zero();
    for (int t = s; t < n; t += NS) {
        const VN pt = vn_set1(p[t]);
        const KvPtr row = kv_at(v0, t * vs + i0);
        if (t + 2 * NS < n) { /* rows of a stream are NS·stride apart: beyond the hardware prefetchers */
            const char *ahead = kv_addr(row, 2 * NS * vs, type);
#pragma GCC unroll 16
            for (int64_t u = 0; u < span; u += 64) __builtin_prefetch(ahead + u);
        }
#pragma GCC unroll 16
        for (int u = 0; u < NVN; u++) acc[u] = vn_fmadd(kv_vn(row, u * VN_W, type), pt, acc[u]);
    }
#pragma GCC unroll 16
    for (int u = 0; u < NVN; u++) vn_store(R + i0 + u * VN_W, acc[u]);
}

/* the streams of pv_rows for one cache type */
SIMD_INLINE void pv_streams_t(const float *p, int n, KvPtr v0, int64_t vs, int d, int NS, float *R, const uint32_t type) {
    for (int s = 0; s < NS; s++) {
        float *Rs = R + (int64_t)s * d;
        int i0 = 0;
        for (; i0 + 16 * VN_W <= d; i0 += 16 * VN_W) pv_stream_cols(p, n, v0, vs, s, NS, i0, 16, Rs, type);
        if (d - i0 >= 8 * VN_W) pv_stream_cols(p, n, v0, vs, s, NS, i0, 8, Rs, type), i0 += 8 * VN_W;
        if (d - i0 >= 4 * VN_W) pv_stream_cols(p, n, v0, vs, s, NS, i0, 4, Rs, type), i0 += 4 * VN_W;
        if (d - i0 >= 2 * VN_W) pv_stream_cols(p, n, v0, vs, s, NS, i0, 2, Rs, type), i0 += 2 * VN_W;
        if (d - i0 >= VN_W) pv_stream_cols(p, n, v0, vs, s, NS, i0, 1, Rs, type);
    }
}

/* out[0, d) = Σ_τ p[τ]·V[τ], NS = 16 (tinyBLAS) or 64 (ggml_vec_dot_f32); R holds NS × d floats */
static void pv_rows(const float *p, int n, KvPtr v0, int64_t vs, int d, int NS, float *R, float *out) {
    switch (v0.type) {
    case FMT_F16: pv_streams_t(p, n, v0, vs, d, NS, R, FMT_F16); break;
    case FMT_Q8_0: pv_streams_t(p, n, v0, vs, d, NS, R, FMT_Q8_0); break;
    case FMT_Q4_0: pv_streams_t(p, n, v0, vs, d, NS, R, FMT_Q4_0); break;
    default: pv_streams_t(p, n, v0, vs, d, NS, R, FMT_F32); break;
    }
    for (int i = 0; i < d; i += VN_W) {
        VN red[16];
        if (NS == 16)
            for (int l = 0; l < 16; l++) red[l] = vn_load(R + (int64_t)l * d + i);
        else /* stream (j, l) is s = 16j + l: folded (0+2)+(1+3) */
            for (int l = 0; l < 16; l++)
                red[l] = vn_add(vn_add(vn_load(R + (int64_t)l * d + i), vn_load(R + (int64_t)(32 + l) * d + i)),
                                vn_add(vn_load(R + (int64_t)(16 + l) * d + i), vn_load(R + (int64_t)(48 + l) * d + i)));
        vn_store(out + i, vn_tree16(red));
    }
}

/* op_softmax over p[0, n) padded with zeros to a multiple of 256 (the padding changes nothing: see above) */
static void softmax_row(float *p, int n) {
    V16 mx = v16_set1(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) mx = v16_max(mx, v16_load(p + i));
    float m = v16_hmax(mx);
    for (; i < n; i++) m = fmaxf(m, p[i]);
    const int n16 = (n + 15) & ~15;
    for (i = n; i < n16; i++) p[i] = -INFINITY;
    const V16 vm = v16_set1(m);
    double sum = 0.0;
    V16 part[16];
    for (i = 0; i < n16; i += 256) {
        const int nc = (n16 - i) / 16 < 16 ? (n16 - i) / 16 : 16;
        for (int c = 0; c < nc; c++) {
            const V16 e = v16_exp(v16_sub(v16_load(p + i + 16 * c), vm));
            v16_store(p + i + 16 * c, e);
            part[c] = e;
        }
        for (int c = nc; c < 16; c++) part[c] = v16_zero();
        float s[16];
        v16_store(s, v16_reduce16x16(part));
        for (int c = 0; c < nc; c++) sum += (double)s[c];
    }
    const V16 inv = v16_set1((float)(1.0 / sum));
    for (i = 0; i < n16; i += 16) v16_store(p + i, v16_mul(v16_load(p + i), inv));
}

/* Item (t, KV head, group of its query heads): every K block and every V column block is read from memory
 * once for all the heads (and then from L1/L2), which is what bounds decode at long contexts. */
static void mirror_items(void *ctx, int64_t b, int64_t e, int thread) {
    const MirrorJob *j = ctx;
    const AttnArgs *a = j->a;
    const int d = a->d;
    const int64_t kv_stride = (int64_t)a->n_head_kv * d;
    float *P = j->scratch + (int64_t)thread * j->per_thread;
    for (int64_t it = b; it < e; it++) {
        const int hsub = (int)(it % j->n_hsub), hk = (int)(it / j->n_hsub % a->n_head_kv),
                  t = (int)(it / j->n_hsub / a->n_head_kv);
        const int h0 = hk * j->group + hsub * j->hs;
        const int nh = j->group - hsub * j->hs < j->hs ? j->group - hsub * j->hs : j->hs;
        const int n_keys = a->pos0 + t + 1;
        const KvPtr k0 = kv_at(kv_ptr(a->k, a->k_type), (int64_t)hk * d), v0 = kv_at(kv_ptr(a->v, a->v_type), (int64_t)hk * d);
        const float *q0 = a->q + ((int64_t)t * a->n_head + h0) * d;
        float *o0 = a->out + ((int64_t)t * a->n_head + h0) * d;
        for (int kb = 0; kb < n_keys; kb += 16) {
            const int nk = n_keys - kb < 16 ? n_keys - kb : 16;
            for (int hh = 0; hh < nh; hh++)
                scores_row(q0 + hh * d, kv_at(k0, kb * kv_stride), kv_stride, nk, d, a->scale, P + hh * j->n_pad + kb);
        }
        for (int hh = 0; hh < nh; hh++) softmax_row(P + hh * j->n_pad, n_keys);
        if (j->rows) /* whole V rows (the scratch holds the 64 stream partials) */
            for (int hh = 0; hh < nh; hh++)
                pv_rows(P + hh * j->n_pad, n_keys, v0, kv_stride, d, j->batch_order ? 16 : 64, P + nh * j->n_pad,
                        o0 + hh * d);
        else /* column blocks, shared by the heads while in L1/L2 */
            for (int i = 0; i < d; i += VN_W)
                for (int hh = 0; hh < nh; hh++)
                    vn_store(o0 + hh * d + i, j->batch_order ? pv_gemm_order(P + hh * j->n_pad, n_keys, v0, kv_stride, i)
                                                        : pv_vec_order(P + hh * j->n_pad, n_keys, v0, kv_stride, i));
    }
}

void SEQ_FN(attention_mirror)(const OpCtx *c, const AttnArgs *a) {
    const int64_t n_pad = (a->pos0 + a->T + 255) / 256 * 256;
    const int nth = pool_size(c->pool);
    if (a->d % 16 || !c->scratch || attention_scratch_bytes(a->pos0 + a->T, nth) > c->scratch_bytes) {
        attention_ref(c, a);
        return;
    }
    /* as many heads of a group per item as the scratch holds probability rows (at least the 2 that
     * attention_scratch_bytes guarantees) */
    const int64_t per = (int64_t)(c->scratch_bytes / sizeof(float) / (size_t)nth) & ~(int64_t)15;
    MirrorJob j = {a, c->scratch, n_pad, per, a->n_head / a->n_head_kv, 0, 0, false, a->T >= 2 || c->mode == MATMUL_FAST};
    const int64_t rows_need = 64 * (int64_t)a->d;
    j.rows = per >= rows_need + n_pad;
    const int64_t fit = (j.rows ? per - rows_need : per) / n_pad;
    j.hs = (int)(fit < j.group ? fit : j.group);
    j.n_hsub = (j.group + j.hs - 1) / j.hs;
    pool_for(c->pool, (int64_t)a->T * a->n_head_kv * j.n_hsub, 1, mirror_items, &j);
}

/* ---- tiled ------------------------------------------------------------------------------------------------ */

#define TQ_ROWS ATTN_TQ_ROWS
#define TQ_ROWS_LLAMA 64 /* the llama arithmetic's rows per item (≤ TQ_ROWS) */
#define TK ATTN_TK

typedef struct TiledJob {
    const AttnArgs *a;
    float *scratch;
    size_t per_thread; /* floats */
    int group, hs, n_hsub, bt, n_tblk;
    bool gemm_always; /* the scores through the GEMM for any number of rows (batch-invariant; the fast arithmetic) */
} TiledJob;

/* rows [0, n) of a cache (row r at kv_at(p, r·stride)), d values each, as F32 into dst (row stride d) */
SIMD_INLINE void tile_dequant_t(KvPtr p, int64_t stride, int n, int d, float *dst, const uint32_t type) {
    for (int r = 0; r < n; r++) {
        const KvPtr row = kv_at(p, r * stride);
        for (int i = 0; i < d; i += 16) v16_store(dst + (int64_t)r * d + i, kv_v16(row, i, type));
    }
}
static void tile_dequant(KvPtr p, int64_t stride, int n, int d, float *dst) {
    switch (p.type) {
    case FMT_F16: tile_dequant_t(p, stride, n, d, dst, FMT_F16); break;
    case FMT_Q8_0: tile_dequant_t(p, stride, n, d, dst, FMT_Q8_0); break;
    case FMT_Q4_0: tile_dequant_t(p, stride, n, d, dst, FMT_Q4_0); break;
    default: tile_dequant_t(p, stride, n, d, dst, FMT_F32); break;
    }
}

/* ---- few rows (decode, short verifies): the two products read the cache directly -----------------------------
 * The same bits as the tile path (tile_dequant, transpose_pad, gemm_nn): a score is the fma chain over d, from
 * zero, of Qs[m][d]·K[j][d] in d order, and an output element gemm_tile's chain over the keys from AL[m]·O — only
 * the two 64-key tiles in the workspace go (decode's rows are few, so widening and transposing whole tiles
 * through L2 cost more than the products: seq_bench attnkv). Keys are widened 16 × 16 at a time and transposed in
 * L1; AVX-512 takes all rows at once (padded to 4, 8 or 16, the keys split to keep 16 accumulators), AVX2 6 at
 * a time. */
#if defined(__AVX512F__)
#define KT_MAXR 16 /* rows the direct path takes (more: the tile path, which transposes a tile once for all) */
#define KT_PAD(R) ((R) <= 4 ? 4 : (R) <= 8 ? 8 : 16) /* rows its register tiles compute */
#define KT_TYPE(t) true /* cache types it reads */
#else
#define KT_MAXR 12
#define KT_PAD(R) (((R) + 5) / 6 * 6)
/* AVX2 takes 6 rows at a time, so a group of 8 widens each tile twice: measured (seq_bench attnkv --isa avx2,
 * 32k keys, 1 thread) f16 17.9–19.3 → 12.5–12.7 ms, q8_0 15.4–17.8 → 13.9–14.6, but q4_0 12.7–14.3 →
 * 15.0–15.7 and f32 15.2–16.0 → 16.5–16.7: those two keep the tile path there */
#define KT_TYPE(t) ((t) == FMT_F16 || (t) == FMT_Q8_0)
#endif

/* S[m][j] (row stride TK) for m < MR, j < 16·NV: keys j ≥ nk read as zero */
SIMD_INLINE void kt_scores(const int MR, const int NV, int nk, int d, const float *Qs, KvPtr k0, int64_t kstride,
                           float *S, const uint32_t type) {
    V16 acc[16][4];
    float tmp[16 * 16] __attribute__((aligned(64))), bt[16 * 64] __attribute__((aligned(64)));
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[m][v] = v16_zero();
    for (int c = 0; c < d; c += 16) {
        for (int v = 0; v < NV; v++) { /* bt[dd][16v + r] = K[16v + r][c + dd] */
            for (int r = 0; r < 16; r++) {
                const KvPtr row = kv_at(k0, (16 * v + r) * kstride);
                __builtin_prefetch(kv_addr(row, TK * kstride + c, type)); /* the next tile's key, one line ahead of use */
                v16_store(tmp + 16 * r, 16 * v + r < nk ? kv_v16(row, c, type) : v16_zero());
            }
            v16_transpose16(tmp, 16, bt + 16 * v, 16 * NV);
        }
#pragma GCC unroll 16
        for (int dd = 0; dd < 16; dd++) {
            V16 b[4];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) b[v] = v16_load(bt + dd * 16 * NV + 16 * v);
#pragma GCC unroll 16
            for (int m = 0; m < MR; m++) {
                const V16 x = v16_set1(Qs[m * d + c + dd]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) acc[m][v] = v16_fmadd(x, b[v], acc[m][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) v16_store(S + m * TK + 16 * v, acc[m][v]);
}

/* the scores of rows [0, R) (R ≤ KT_MAXR) against keys [0, nk) of a tile (64 columns written) */
SIMD_INLINE void kt_scores_rows(int R, int nk, int d, const float *Qs, KvPtr k0, int64_t kstride, float *S,
                                const uint32_t type) {
#if defined(__AVX512F__)
    if (R <= 4)
        kt_scores(4, 4, nk, d, Qs, k0, kstride, S, type);
    else if (R <= 8)
        for (int j = 0; j < TK; j += 32) kt_scores(8, 2, nk - j, d, Qs, kv_at(k0, j * kstride), kstride, S + j, type);
    else
        for (int j = 0; j < TK; j += 16) kt_scores(16, 1, nk - j, d, Qs, kv_at(k0, j * kstride), kstride, S + j, type);
#else
    for (int m = 0; m < R; m += 6)
        for (int j = 0; j < TK; j += 16)
            kt_scores(6, 1, nk - j, d, Qs + m * d, kv_at(k0, j * kstride), kstride, S + m * TK + j, type);
#endif
}

/* O[m][:] = AL[m]·O[m][:] + Σ_{k < nk} P[m][k]·V[k][:] for m < R, gemm_nn's register tiles with B read from the
 * cache (V[k] at kv_at(v0, k·vstride)) */
SIMD_INLINE void kt_pv_tile(const int MR, const int NV, int nk, const float *P, KvPtr v0, int64_t vstride, float *O,
                            int d, const float *AL, const uint32_t type) {
    V16 acc[16][4];
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[m][v] = v16_mul(v16_set1(AL[m]), v16_load(O + m * d + 16 * v));
    for (int k = 0; k < nk; k++) {
        V16 b[4];
        const KvPtr row = kv_at(v0, k * vstride);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) b[v] = kv_v16(row, 16 * v, type);
        __builtin_prefetch(kv_addr(row, TK * vstride, type)); /* the next tile's value row */
#pragma GCC unroll 16
        for (int m = 0; m < MR; m++) {
            const V16 x = v16_set1(P[m * TK + k]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[m][v] = v16_fmadd(x, b[v], acc[m][v]);
        }
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; m++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) v16_store(O + m * d + 16 * v, acc[m][v]);
}

/* all rows in one pass over the value rows on AVX-512 (rows padded to 4, 8 or 16: the caller zeroes the padding's
 * P, O and AL), so a quantized tile is widened once; AVX2 takes 6 rows at a time */
SIMD_INLINE void kt_pv_rows(int R, int nk, const float *P, KvPtr v0, int64_t vstride, float *O, int d,
                            const float *AL, const uint32_t type) {
#if defined(__AVX512F__)
    const int MR = R <= 4 ? 4 : R <= 8 ? 8 : 16, NV = 16 / MR;
    for (int n = 0; n < d; n += 16 * NV)
        if (MR == 4) kt_pv_tile(4, 4, nk, P, kv_at(v0, n), vstride, O + n, d, AL, type);
        else if (MR == 8) kt_pv_tile(8, 2, nk, P, kv_at(v0, n), vstride, O + n, d, AL, type);
        else kt_pv_tile(16, 1, nk, P, kv_at(v0, n), vstride, O + n, d, AL, type);
#else
    for (int m = 0; m < R; m += 6)
        for (int n = 0; n < d; n += 16) kt_pv_tile(6, 1, nk, P + m * TK, kv_at(v0, n), vstride, O + m * d + n, d, AL + m, type);
#endif
}

/* the direct path per cache type (a constant in each copy) */
static void kt_products(bool scores, int R, int nk, int d, const float *A, KvPtr p, int64_t stride, float *out,
                        const float *AL) {
#define KT_CALL(T)                                                                                                   \
    do {                                                                                                             \
        if (scores) kt_scores_rows(R, nk, d, A, p, stride, out, T);                                                   \
        else kt_pv_rows(R, nk, A, p, stride, out, d, AL, T);                                                         \
    } while (0)
    switch (p.type) {
    case FMT_F16: KT_CALL(FMT_F16); break;
    case FMT_Q8_0: KT_CALL(FMT_Q8_0); break;
    case FMT_Q4_0: KT_CALL(FMT_Q4_0); break;
    default: KT_CALL(FMT_F32); break;
    }
#undef KT_CALL
}

static void tiled_items(void *ctx, int64_t b, int64_t e, int thread) {
    const TiledJob *job = ctx;
    const AttnArgs *a = job->a;
    const int d = a->d;
    const int64_t kv_stride = (int64_t)a->n_head_kv * d;
    float *S = job->scratch + (size_t)thread * job->per_thread, *O = S + TQ_ROWS * TK, *M = O + (size_t)TQ_ROWS * d,
          *L = M + TQ_ROWS, *AL = L + TQ_ROWS, *Qs = AL + TQ_ROWS + 16, *Kt = Qs + (size_t)TQ_ROWS * d,
          *W = Kt + (size_t)d * TK; /* a dequantized key or value tile [TK][d] */
    const bool kf32 = a->k_type == FMT_F32, vf32 = a->v_type == FMT_F32;
    const int64_t n_items = (int64_t)a->n_head_kv * job->n_hsub * job->n_tblk;
    for (int64_t it0 = b; it0 < e; it0++) {
        const int64_t it = n_items - 1 - it0; /* the longest (last) query blocks first */
        const int tb = (int)(it % job->n_tblk), hsub = (int)(it / job->n_tblk % job->n_hsub),
                  hk = (int)(it / job->n_tblk / job->n_hsub);
        const int t0 = tb * job->bt, nt = a->T - t0 < job->bt ? a->T - t0 : job->bt;
        const int h0 = hk * job->group + hsub * job->hs;
        const int nh = job->group - hsub * job->hs < job->hs ? job->group - hsub * job->hs : job->hs;
        const int R = nt * nh; /* row r: token t0 + r / nh, head h0 + r % nh */
        const KvPtr k0 = kv_at(kv_ptr(a->k, a->k_type), (int64_t)hk * d), v0 = kv_at(kv_ptr(a->v, a->v_type), (int64_t)hk * d);
        for (int r = 0; r < R; r++) M[r] = -INFINITY, L[r] = 0.0f;
        memset(O, 0, sizeof(float) * (size_t)R * d);
        const int n_end = a->pos0 + t0 + nt; /* keys the last row sees */
        /* many rows: the scores as a GEMM against the transposed key tile (scale folded into Q); few rows
         * (decode, unless gemm_always): dot products, which need no transpose */
        const bool gemm = job->gemm_always || R >= 16 || !kf32;
        if (gemm)
            for (int r = 0; r < R; r++) {
                const float *q = a->q + ((int64_t)(t0 + r / nh) * a->n_head + h0 + r % nh) * d;
                const V16 sc = v16_set1(a->scale);
                for (int i = 0; i < d; i += 16) v16_store(Qs + r * d + i, v16_mul(v16_load(q + i), sc));
            }
        /* few rows: the products read the cache (the same bits as the tiles) */
        const bool few = gemm && R <= KT_MAXR && d % 64 == 0;
        const bool direct_k = few && KT_TYPE(a->k_type), direct_v = few && !vf32 && KT_TYPE(a->v_type);
        if (direct_k || direct_v) /* the rows a register tile pads: zero Q, scores, O and rescale */
            for (int r = R; r < KT_PAD(R); r++) {
                memset(Qs + r * d, 0, sizeof(float) * (size_t)d);
                memset(S + r * TK, 0, sizeof(float) * TK);
                memset(O + r * d, 0, sizeof(float) * (size_t)d);
                AL[r] = 0.0f;
            }
        for (int k0t = 0; k0t < n_end; k0t += TK) {
            const int bk = n_end - k0t < TK ? n_end - k0t : TK;
            if (direct_k)
                kt_products(true, R, bk, d, Qs, kv_at(k0, k0t * kv_stride), kv_stride, S, NULL);
            else if (gemm && kf32) {
                transpose_pad((const float *)k0.base + k0.i + k0t * kv_stride, kv_stride, bk, d, Kt, TK);
                gemm_nn(R, (bk + 15) & ~15, d, Qs, d, Kt, TK, S, TK, INIT_ZERO, NULL, 0, 0.0f, -1, -1);
            } else if (gemm) {
                tile_dequant(kv_at(k0, k0t * kv_stride), kv_stride, bk, d, W);
                transpose_pad(W, d, bk, d, Kt, TK);
                gemm_nn(R, (bk + 15) & ~15, d, Qs, d, Kt, TK, S, TK, INIT_ZERO, NULL, 0, 0.0f, -1, -1);
            }
            for (int r = 0; r < R; r++) {
                const int t = t0 + r / nh, h = h0 + r % nh;
                const int vis = a->pos0 + t + 1 - k0t; /* keys of this tile the row sees */
                float *s = S + r * TK;
                const int nv = vis < bk ? (vis > 0 ? vis : 0) : bk;
                if (!gemm)
                    scores_row(a->q + ((int64_t)t * a->n_head + h) * d, kv_at(k0, k0t * kv_stride), kv_stride, nv, d,
                               a->scale, s);
                for (int c = nv; c < TK; c++) s[c] = -INFINITY;
                V16 mx = v16_set1(-INFINITY);
                for (int c = 0; c < TK; c += 16) mx = v16_max(mx, v16_load(s + c));
                const float m_new = fmaxf(M[r], v16_hmax(mx));
                if (m_new == -INFINITY) { /* sees nothing yet: P = 0, O unchanged */
                    AL[r] = 1.0f;
                    for (int c = 0; c < TK; c++) s[c] = 0.0f;
                    continue;
                }
                const V16 vm = v16_set1(m_new);
                V16 sum = v16_zero();
                for (int c = 0; c < TK; c += 16) {
                    const V16 p = v16_exp(v16_sub(v16_load(s + c), vm));
                    v16_store(s + c, p);
                    sum = v16_add(sum, p);
                }
                AL[r] = expf(M[r] - m_new);
                L[r] = L[r] * AL[r] + v16_hsum(sum);
                M[r] = m_new;
            }
            if (direct_v)
                kt_products(false, R, bk, d, S, kv_at(v0, k0t * kv_stride), kv_stride, O, AL);
            else if (vf32)
                gemm_nn(R, d, bk, S, TK, (const float *)v0.base + v0.i + k0t * kv_stride, kv_stride, O, d, INIT_ROWSCALE, AL,
                        0, 0.0f, -1, -1);
            else {
                tile_dequant(kv_at(v0, k0t * kv_stride), kv_stride, bk, d, W);
                gemm_nn(R, d, bk, S, TK, W, d, O, d, INIT_ROWSCALE, AL, 0, 0.0f, -1, -1);
            }
        }
        for (int r = 0; r < R; r++) {
            const int t = t0 + r / nh, h = h0 + r % nh;
            float *out = a->out + ((int64_t)t * a->n_head + h) * d;
            const V16 inv = v16_set1(1.0f / L[r]);
            for (int i = 0; i < d; i += 16) v16_store(out + i, v16_mul(v16_load(O + r * d + i), inv));
        }
    }
}

static void tiled_run(const OpCtx *c, const AttnArgs *a, bool gemm_always) {
    const int nth = pool_size(c->pool);
    const size_t per = attn_tiled_floats(a->d);
    if (a->d % 16 || !c->scratch || ((uintptr_t)c->scratch & 63) || per * sizeof(float) * (size_t)nth > c->scratch_bytes) {
        SEQ_FN(attention_mirror)(c, a);
        return;
    }
    TiledJob job = {a, c->scratch, per, a->n_head / a->n_head_kv, 0, 0, 0, 0, gemm_always};
    /* the llama arithmetic picks dot products or the GEMM by an item's rows, so its split stays the fixed one of
     * TQ_ROWS_LLAMA rows; in the fast arithmetic a row's bits do not depend on the split, and up to TQ_ROWS rows
     * share each tile's widening and transpose (done once per item) — fewer while there would be under 4 items
     * per thread */
    const int rows = gemm_always ? TQ_ROWS : TQ_ROWS_LLAMA;
    job.hs = job.group < rows ? job.group : rows;
    job.n_hsub = (job.group + job.hs - 1) / job.hs;
    job.bt = rows / job.hs;
    while (gemm_always && job.bt > 1 &&
           (int64_t)a->n_head_kv * job.n_hsub * ((a->T + job.bt - 1) / job.bt) < 4 * (int64_t)nth)
        job.bt = (job.bt + 1) / 2;
    job.n_tblk = (a->T + job.bt - 1) / job.bt;
    pool_for(c->pool, (int64_t)a->n_head_kv * job.n_hsub * job.n_tblk, 1, tiled_items, &job);
}

/* the tiled kernel alone (any cache type; the scores through the GEMM in the fast arithmetic) */
void SEQ_FN(attention_tiled)(const OpCtx *c, const AttnArgs *a) { tiled_run(c, a, c->mode == MATMUL_FAST); }

/* the op (see the top): the llama arithmetic by context length (F32 caches tiled from ATTN_TILED_MIN_CTX on);
 * the fast arithmetic per query row: rows of context ≤ ATTN_TILED_MIN_CTX mirror, the rows after run tiled */
void SEQ_FN(attention)(const OpCtx *c, const AttnArgs *a) {
    if (c->mode != MATMUL_FAST) {
        if (a->pos0 + a->T >= ATTN_TILED_MIN_CTX && a->k_type == FMT_F32 && a->v_type == FMT_F32) tiled_run(c, a, false);
        else SEQ_FN(attention_mirror)(c, a);
        return;
    }
    int nm = ATTN_TILED_MIN_CTX - a->pos0; /* rows t < nm have context pos0 + t + 1 ≤ ATTN_TILED_MIN_CTX */
    nm = nm < 0 ? 0 : nm > a->T ? a->T : nm;
    if (nm > 0) {
        AttnArgs m = *a;
        m.T = nm;
        SEQ_FN(attention_mirror)(c, &m);
    }
    if (nm < a->T) {
        AttnArgs t = *a;
        const int64_t off = (int64_t)nm * a->n_head * a->d;
        t.T = a->T - nm, t.pos0 = a->pos0 + nm, t.q = a->q + off, t.out = a->out + off;
        tiled_run(c, &t, true);
    }
}

#undef TQ_ROWS
#undef TQ_ROWS_LLAMA
#undef TK
