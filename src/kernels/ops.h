/* ops.h — the op catalog: every computation the forward pass performs, with shapes and dtypes.
 *
 * The forward pass (src/model/) is written once against this catalog. Each op has a scalar reference
 * implementation in kernels/ref/ — that is the spec — and may have fast implementations (kernels/cpu/)
 * that are tested against it. The heavy ops (matmul, delta-net scan, attention, conv) go through the Ops
 * table so that a faster implementation plugs in without touching the model; small elementwise ops are
 * plain functions.
 *
 * Conventions: row-major C arrays; "[T][n]" means T rows of n floats, row t at t*n. Weights are ggml
 * matrices: W{in, out} is out rows of `in` elements, y[o] = Σ_i W[o][i]·x[i]. Nothing here allocates;
 * scratch memory comes in through OpCtx. */
#ifndef DL_KERNELS_OPS_H
#define DL_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/pool.h"

/* One weight matrix: `rows` rows of `cols` elements in GGUF format `type` (a FormatId). For 3-D expert
 * tensors the model makes one MatW per expert. */
typedef struct MatW {
    const void *data;
    uint32_t type;
    int64_t cols, rows; /* ggml ne[0] (input width), ne[1] (outputs) */
    size_t row_bytes;
    bool gemv; /* multiplied row by row even in a batch, as llama.cpp's mul_mat_id does (experts) */
    /* NULL, or the same weights in a layout a fast kernel reads instead of data (backend/cpu/pack.c); the
     * reference reads data. pack_kind says which: */
    const void *pack;
    uint8_t pack_kind;
} MatW;

enum {
    PACK_NONE = 0,
    /* Q8_0, llama.cpp's orders: rows interleaved by 8 per block */
    PACK_R8 = 1,
    /* the fast arithmetic (AVX-512): panels of 16 rows (rows a multiple of 16), pack_p16_bytes() apart.
     * Q8_0: per block its quants as 8 vectors of 64 bytes (vector g: element 4g..4g+3 of rows 0..15, 4 bytes per
     * row, q XOR 0x80) and its 16 fp16 scales, blocks in pairs (q8p16_q / q8p16_d below; the panel is 16·row_bytes).
     * Q4_K: per super-block sb (at +Q4K_P16_SB·sb): [0, 2048) the quant bytes as they are in the file, 4 at a
     * time per row: vector 8j + m (64 bytes) holds bytes qs[32j+4m … +3] of rows 0..15 (low nibbles: elements
     * 64j+4m…, sub-block 2j; high: elements 64j+32+4m…, sub-block 2j+1); [2048, 2176) the 6-bit scales,
     * sub-block-major (16·s + row); [2176, 2304) the minimums likewise; [2304, 2336) d and [2336, 2368) dmin,
     * fp16 per row (2368 bytes for 16 rows' 2304: the scales unpacked).
     * Q5_K: Q4_K's layout with the qh bytes after the quants: [0, 2048) qs as Q4_K, [2048, 2560) qh 4 bytes at a
     * time per row, vector m = qh[4m … +3] (bit 2j: element 64j+4m+i's fifth bit, bit 2j+1: element 64j+32+4m+i's),
     * [2560, 2688) scales, [2688, 2816) minimums, [2816, 2848) d, [2848, 2880) dmin (Q5K_P16_SB for 2,816).
     * Q6_K: per super-block (at +Q6K_P16_SB·sb, the 16 rows' own size): [0, 2048) ql 4 bytes at a time per row,
     * vector 16h + 8p + m = bytes ql[64h + 32p + 4m … +3] of rows 0..15; [2048, 3072) qh likewise, vector 8h + m =
     * qh[32h + 4m … +3]; [3072, 3328) the int8 scales sub-block-major (16·g + row); [3328, 3360) d fp16 per row */
    PACK_P16 = 2,
};
/* Q8_0 P16 panel (16 rows × nb blocks, 544·nb bytes): blocks in pairs, [quants of 2i][quants of 2i+1][scales of 2i]
 * [scales of 2i+1] (1,088 bytes: one stream, the quant vectors 64-aligned when the panel is), an odd last block
 * [quants][scales]; a block's quants are 8 vectors of 64 bytes (elements 4g…4g+3 of the 16 rows, q XOR 0x80), its
 * scales the 16 rows' fp16 d. */
static inline size_t q8p16_q(int64_t i) { return (size_t)1088 * (size_t)(i >> 1) + 512 * (size_t)(i & 1); }
static inline size_t q8p16_d(int64_t i, int64_t nb) {
    return (size_t)1088 * (size_t)(i >> 1) + ((i | 1) < nb ? 1024 + 32 * (size_t)(i & 1) : 512);
}
/* Nibble-format P16 panel (Q4_0 and IQ4_NL: 18-byte blocks, sb = 32 scale bytes; Q4_1: 20, sb = 64): 16 rows × nb
 * blocks, 16·row_bytes bytes. Blocks in pairs, [quant bytes of 2i][of 2i+1][scales of 2i][scales of 2i+1], an odd
 * last block [quant bytes][scales]; a block's quant bytes are 4 vectors of 64 (dword k of row r at 64k + 4r: the
 * file's qs bytes 4k…4k+3, whose low nibbles are elements 4k…4k+3 and high ones 16+4k…), its scales the 16 rows'
 * fp16 d (Q4_1: then their fp16 m). */
static inline size_t n4p16_q(int64_t i, size_t sb) { return (512 + 2 * sb) * (size_t)(i >> 1) + 256 * (size_t)(i & 1); }
static inline size_t n4p16_s(int64_t i, int64_t nb, size_t sb) {
    return (512 + 2 * sb) * (size_t)(i >> 1) + ((i | 1) < nb ? 512 + sb * (size_t)(i & 1) : 256);
}
#define Q4K_P16_SB 2368
#define Q6K_P16_SB 3360
#define Q5K_P16_SB 2880

typedef enum MatMode {
    /* activations rounded to the weight format's vec_dot partner (Q8_0 / Q8_1 / Q8_K / F16 / BF16) before
     * the dot product, as ggml does: the default, and the closest one can get to llama.cpp */
    MATMUL_GGML = 0,
    /* weights dequantized, activations and accumulation in F32: the reference the fast path is judged by */
    MATMUL_EXACT = 1,
    /* the default arithmetic: activations rounded as in MATMUL_GGML, then summed in one order whatever the
     * number of rows (format.h's DOT_FAST: whole blocks in integers, one fused multiply-add per block), so a
     * row's result does not depend on its batch; faster than llama.cpp's orders, as accurate */
    MATMUL_FAST = 2,
} MatMode;

/* What every op gets: the mode, the thread pool (NULL = run on the caller), and scratch memory. */
typedef struct OpCtx {
    MatMode mode;
    Pool *pool;
    void *scratch; /* at least ops_scratch_bytes(max rows, max cols, n_threads) bytes, 64-aligned */
    size_t scratch_bytes;
} OpCtx;

/* Scratch an OpCtx needs for matmuls of up to `rows` activation rows of up to `cols` elements. */
size_t ops_scratch_bytes(int64_t rows, int64_t cols, int n_threads);
/* Scratch the attention op needs for a context of n_ctx tokens (the OpCtx scratch must cover both). */
size_t attention_scratch_bytes(int n_ctx, int n_threads);
/* Scratch the fast chunked delta-net needs for heads of d_k × d_v (without it, it falls back to the
 * reference, which allocates). */
size_t deltanet_scratch_bytes(int d_k, int d_v, int n_threads);
/* Scratch the fast attention kernels want for contexts up to n_ctx, heads of head_dim and gqa_group query
 * heads per KV head (with only attention_scratch_bytes they still work: the short-context kernel on fewer
 * heads at a time, and no tiled kernel). */
size_t attention_fast_scratch_bytes(int n_ctx, int head_dim, int gqa_group, int n_threads);

/* ---- delta-net scan ---------------------------------------------------------------------------------- */

/* One sequence of T tokens through the gated delta rule, all value heads.
 *   q, k   [T][n_k_head][d_k]   L2-normalised (q not yet scaled by 1/sqrt(d_k))
 *   v      [T][n_v_head][d_v]
 *   g      [T][n_v_head]        log-decay (≤ 0); the state decays by exp(g)
 *   beta   [T][n_v_head]        sigmoid(b)
 *   state  [n_v_head][d_v][d_k] in/out, TRANSPOSED: state[h][j][i] = S_h[key i][value j] (the fused
 *          form: its own layout, DELTANET_FUSED_FLOATS below)
 *   out    [T][n_v_head][d_v]
 * Value head j reads key head j / (n_v_head/n_k_head) when grouped (qwen3next), j % n_k_head otherwise
 * (qwen35, qwen35moe). d_v == d_k. */
typedef struct DeltaNetArgs {
    int T, n_k_head, n_v_head, d_k, d_v;
    bool grouped;
    const float *q, *k, *v, *g, *beta;
    float *state, *out;
    /* NULL (or state): in place; otherwise the state before the batch is read from here and the new one
     * written to state (the two do not overlap) */
    const float *state_in;
    /* NULL, or [T][n_v_head][d_v][d_k]: receives the state after every token (the recurrent and chunked
     * forms; not the fused one) */
    float *steps;
} DeltaNetArgs;

/* The fused form (the fast arithmetic's) keeps its state in its own layout, DELTANET_FUSED_FLOATS floats.
 * The physical state after a token is S = c·(S̃ + Σ_j K_j D_jᵀ): a base S̃ that changes only at absolute
 * chunk boundaries (every DN_FUSED_C tokens, or when the scale c has to be folded in), and the chunk's
 * pending keys K_j and scaled updates D_j = δ_j / c_j. Per head: S̃ in math layout (S̃[i][x] for key i,
 * value x; values in the lanes) in panels of DN_FUSED_PANEL values ([d_v / 64][d_k][64], the last panel
 * narrower when 64 does not divide d_v) so that a panel is contiguous, then K [DN_FUSED_C][d_k], then
 * D [DN_FUSED_C][d_v]; after all heads, per head the scale c and the pending count n. A zeroed state is
 * the zero state (c = 0 folds in at the first token). The dots with S̃ are four partial sums over the key
 * blocks [p·d_k/4, (p+1)·d_k/4), added (0+1)+(2+3). deltanet_ref.c has the math. */
#define DN_FUSED_C 10
#define DN_FUSED_PANEL 64
#define DN_FUSED_HEAD(d_k, d_v) ((size_t)(d_k) * (size_t)(d_v) + (size_t)DN_FUSED_C * ((size_t)(d_k) + (size_t)(d_v)))
#define DELTANET_FUSED_FLOATS(n_v_head, d_k, d_v) ((size_t)(n_v_head) * (DN_FUSED_HEAD(d_k, d_v) + 2))
/* where S̃[i][x] of a head lies in its block */
static inline size_t dn_fused_at(int d_k, int d_v, int i, int x) {
    const int c0 = x - x % DN_FUSED_PANEL, w = d_v - c0 < DN_FUSED_PANEL ? d_v - c0 : DN_FUSED_PANEL;
    return (size_t)c0 * (size_t)d_k + (size_t)i * (size_t)w + (size_t)(x - c0);
}
/* the scale range a token keeps c in: outside it (or NaN), the token folds the chunk and c into S̃ */
#define DN_FUSED_CMIN 0x1p-60f
#define DN_FUSED_CMAX 0x1p+60f
static inline bool dn_fused_rescales(float c) { return !(c >= DN_FUSED_CMIN && c <= DN_FUSED_CMAX); }
/* the pending count a state holds (a state from elsewhere, e.g. restored bytes, may hold anything: 0 then) */
static inline int dn_fused_count(float x) { return x >= 0.0f && x < (float)DN_FUSED_C ? (int)x : 0; }
/* The physical state ([n_v_head][d_v][d_k], as the other forms keep it) of a fused one, and back (c = 1, n = 0). */
void deltanet_fused_to_state(const float *fused, float *state, int n_v_head, int d_k, int d_v);
void deltanet_state_to_fused(const float *state, float *fused, int n_v_head, int d_k, int d_v);

/* ---- attention ---------------------------------------------------------------------------------------- */

/* Causal attention of T new queries over a sequence's cache.
 *   q      [T][n_head][d]        normed and roped
 *   k, v   [n_kv][n_head_kv][d]  the cache rows 0..pos0+T-1 (this batch's rows already written)
 *   out    [T][n_head][d]
 * Query t sits at position pos0 + t and sees keys 0..pos0+t. Scores are scaled by `scale`; GQA maps
 * query head h to kv head h / (n_head / n_head_kv). */
typedef struct AttnArgs {
    int T, pos0, n_head, n_head_kv, d;
    float scale;
    const float *q;
    const void *k, *v; /* the cache, in the formats k_type and v_type */
    float *out;
    /* the cache's element formats (FormatIds; 0 is FMT_F32): FMT_F32, FMT_F16 (widened exactly when read),
     * FMT_Q8_0 or FMT_Q4_0 (each token's row of n_head_kv·d values in blocks of 32, d a multiple of 32,
     * dequantized when read into the bits of ggml's to_float: q·d as one float product) */
    uint32_t k_type, v_type;
} AttnArgs;

/* ---- many sequences in one op (Ops.conv_silu_seqs, Ops.deltanet_seqs) ---------------------------------- */

/* one sequence's part of conv_silu_seqs: x [T][C], state [C][K-1], y [T][C] */
typedef struct ConvSeqArgs {
    const float *x;
    int T;
    float *state, *y;
} ConvSeqArgs;

/* the form of the delta rule a sequence of deltanet_seqs takes */
typedef enum DeltaNetForm { DN_FORM_RECURRENT = 0, DN_FORM_CHUNKED = 1, DN_FORM_FUSED = 2 } DeltaNetForm;

/* the most sequences one pool job of the fast kernels takes (more go in several) */
#define OPS_SEQS_MAX 32

/* ---- the table ---------------------------------------------------------------------------------------- */

/* RMS or L2 norms of m ≤ NORM_ROWS_MAX rows of n floats (ops_small.c's op_rmsnorm / op_l2norm, the same bits):
 * y[k] = norm(x[k]) (RMS: times w when w is not NULL), then times z[k] elementwise when z is not NULL. Each
 * y[k] is x[k] itself or overlaps no x row. */
#define NORM_ROWS_MAX 8
typedef struct NormRows {
    const float *x[NORM_ROWS_MAX];
    float *y[NORM_ROWS_MAX];
    const float *z[NORM_ROWS_MAX]; /* ignored when z_on is false */
    const float *w;                /* RMS weight, or NULL */
    int m, n;
    float eps;
    bool l2, z_on;
} NormRows;

typedef struct Ops {
    const char *name;
    /* y[t][o] = W[o]·x[t] for t < T, o < w->rows; x is [T][w->cols], y is [T][w->rows] */
    void (*matmul)(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y);
    /* causal depthwise conv + SiLU over T tokens of C channels with a (K-1)-sample state per channel.
     *   x [T][C] inputs, w [C][K] taps (w[c][K-1] multiplies the current token), state [C][K-1] oldest first
     *   (updated to the last K-1 inputs), y [T][C] = silu(conv) */
    void (*conv_silu)(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, float *y);
    void (*deltanet_recurrent)(const OpCtx *c, const DeltaNetArgs *a);
    void (*deltanet_chunked)(const OpCtx *c, const DeltaNetArgs *a);
    /* the fast arithmetic's recurrent form (deltanet_ref.c: fused; not llama.cpp's order) */
    void (*deltanet_fused)(const OpCtx *c, const DeltaNetArgs *a);
    /* conv_silu over n sequences of one layer (the same C, K and w; each its own x, T, state and y, none of
     * them overlapping another's) with the bits of the n conv_silu calls: the fast kernels take every
     * sequence's work items in one pool_for (the step of many sessions, docs/LONG_CONTEXT.md "Many streams") */
    void (*conv_silu_seqs)(const OpCtx *c, const ConvSeqArgs *s, int n, int C, int K, const float *w);
    /* the delta rule over n sequences, sequence i in form[i] (each its own state, none overlapping another's),
     * with the bits of the n calls of deltanet_recurrent / _chunked / _fused: one pool_for over all the
     * sequences' work items in the fast kernels */
    void (*deltanet_seqs)(const OpCtx *c, const DeltaNetArgs *a, const DeltaNetForm *form, int n);
    void (*attention)(const OpCtx *c, const AttnArgs *a);
    /* the elementwise row ops of ops_small (same bits as op_silu_row / op_swiglu_row, over `rows` rows of n) */
    void (*silu_rows)(const OpCtx *c, const float *x, float *y, int rows, int n);
    void (*swiglu_rows)(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n);
    /* a SwiGLU FFN's first half: y = silu(wg·x) ⊙ (wu·x), the bits of matmul(wg) into y, matmul(wu) into u and
     * swiglu_rows(y, u, y); u [T][wu->rows] is a work area (it holds the up product after) */
    void (*matmul_swiglu)(const OpCtx *c, const MatW *wg, const MatW *wu, const float *x, int64_t T, float *y, float *u);
    /* a few rows' norms on the calling thread (NormRows): the AVX-512 form sums 8 rows at once, a row per lane */
    void (*norm_rows)(const NormRows *a);
    /* o[i] *= op_sigmoid(g[i]) for i < n, the same bits (libm's expf; the AVX-512 form reproduces glibc's and
     * is only taken where it matches the running libm) */
    void (*mul_sigmoid)(float *o, const float *g, int n);
} Ops;

extern const Ops ops_ref; /* the scalar reference implementations */

/* Reference implementations, callable directly (tests compare fast kernels against these). */
void matmul_ref(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y);
void conv_silu_ref(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, float *y);
void deltanet_recurrent_ref(const OpCtx *c, const DeltaNetArgs *a);
void deltanet_chunked_ref(const OpCtx *c, const DeltaNetArgs *a);
void deltanet_fused_ref(const OpCtx *c, const DeltaNetArgs *a);
/* the single calls in turn */
void conv_silu_seqs_ref(const OpCtx *c, const ConvSeqArgs *s, int n, int C, int K, const float *w);
void deltanet_seqs_ref(const OpCtx *c, const DeltaNetArgs *a, const DeltaNetForm *form, int n);
void attention_ref(const OpCtx *c, const AttnArgs *a);
void silu_rows_ref(const OpCtx *c, const float *x, float *y, int rows, int n);
void swiglu_rows_ref(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n);
void norm_rows_ref(const NormRows *a); /* op_rmsnorm / op_l2norm row by row */
void mul_sigmoid_ref(float *o, const float *g, int n);
void matmul_swiglu_ref(const OpCtx *c, const MatW *wg, const MatW *wu, const float *x, int64_t T, float *y, float *u);

/* Chunk length of the chunked delta-net form. */
#define DELTANET_CHUNK 64

/* ---- small ops (scalar; cheap next to the matmuls) ------------------------------------------------------ */

/* y = x / sqrt(mean(x²) + eps) · w  (w may be NULL); sums in double as ggml does. y may alias x. */
void op_rmsnorm(const float *x, const float *w, int n, float eps, float *y);
/* y = x / max(‖x‖₂, eps); y may alias x. */
void op_l2norm(const float *x, int n, float eps, float *y);
/* the factor both norms scale x by, from the double sum of x² (every norm kernel takes it from here) */
float op_norm_scale(double sumsq, int n, float eps, bool l2);
float op_silu(float x);    /* libm expf */
float op_sigmoid(float x); /* libm expf, as ggml */
float op_softplus(float x);
/* exp(x) as ggml-cpu's vector exp computes it on AVX-512 machines (a polynomial, ≤ 1.5 ulp from expf; the
 * same value on any machine deltallm runs on). */
float op_expf_poly(float x);
/* Row functions that reproduce ggml-cpu's SIMD arithmetic: 16-element chunks through op_expf_poly, the
 * tail through libm expf — which is what llama.cpp computes for SiLU, SwiGLU and softmax rows. */
void op_silu_row(const float *x, float *y, int n);
void op_swiglu_row(const float *g, const float *u, float *y, int n); /* y = silu(g) · u; y may alias g */
/* softmax in place over n: max-subtracted, per-chunk sums added in double, scaled by 1/sum. */
void op_softmax(float *x, int n);
/* NeoX rotation of the first n_rot dims of one head vector (pairs i, i + n_rot/2) at position pos, with
 * ggml's iterative angle computation; dims ≥ n_rot pass through. sections (4 ints) selects IMROPE's sector
 * rule (text positions: sections t, h, w see pos, e sees 0); NULL means plain NEOX. */
void op_rope(float *x, int n_rot, int pos, float base, float freq_scale, const int *sections);
/* op_rope with the three IMROPE axes at their own positions (an image token: time, height, width; the 4th
 * section sees 0); op_rope_thw(x, …, p, p, p, …) is op_rope(x, …, p, …) bit for bit. sections NULL: NEOX at t. */
void op_rope_thw(float *x, int n_rot, int pt, int ph, int pw, float base, float freq_scale, const int *sections);

/* ---- vision tower ops (scalar: ops_vision.c; the CPU encoder's exact arithmetic) ---------------------------- */

/* y = (x − mean) / sqrt(var + eps) · w + b (ggml_norm, sums in double); w and b may be NULL. y may alias x. */
void op_layernorm(const float *x, const float *w, const float *b, int n, float eps, float *y);
/* ggml_gelu's tanh form in float (libm tanhf) */
float op_gelu(float x);
/* The vision 2-D rotary of one head of d (ggml_rope_multi, vision mode, sections d/4): NeoX pairs (k, k + d/2);
 * pair k < d/4 turns by row·s^k, pair k ≥ d/4 by col·s^(k − d/4), s = theta_scale (10000^(−4/d)); the angle
 * built by repeated products (ggml's order). */
void op_rope_2d(float *x, int d, int row, int col, float theta_scale);
/* One query row of full attention over T keys: out = softmax(q·kᵀ·scale)·v, key u at k + u·k_row, value u at
 * v + u·v_row; the softmax max-subtracted, its sum in double; scores: T floats of scratch. */
void op_attn_full_row(const float *q, const float *k, int64_t k_row, const float *v, int64_t v_row, int T, int d,
                      float scale, float *scores, float *out);

#endif
