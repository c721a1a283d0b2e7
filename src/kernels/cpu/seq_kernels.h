/* seq_kernels.h — the fast sequence kernels (delta-net scan, causal conv + SiLU, attention) of each ISA
 * level; the family selectors (deltanet_cpu.c, conv_cpu.c, attention_cpu.c) pick among them. Portable
 * declarations only: the bodies live in *_avx2.c / *_avx512.c, written once against simd16.h
 * (deltanet_simd.h, conv_simd.h, attention_simd.h are compiled twice, once per ISA). */
#ifndef DL_KERNELS_CPU_SEQ_KERNELS_H
#define DL_KERNELS_CPU_SEQ_KERNELS_H

#include "base/pool.h"
#include "kernels/ops.h"

#define SEQ_DECLARE(isa)                                                                                   \
    void deltanet_recurrent_##isa(const OpCtx *c, const DeltaNetArgs *a);                                   \
    void deltanet_chunked_##isa(const OpCtx *c, const DeltaNetArgs *a);                                     \
    void deltanet_fused_##isa(const OpCtx *c, const DeltaNetArgs *a);                                  \
    void conv_silu_##isa(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, \
                         float *y);                                                                         \
    void conv_silu_seqs_##isa(const OpCtx *c, const ConvSeqArgs *s, int n, int C, int K, const float *w);     \
    void deltanet_seqs_##isa(const OpCtx *c, const DeltaNetArgs *a, const DeltaNetForm *form, int n);        \
    void attention_mirror_##isa(const OpCtx *c, const AttnArgs *a);                                         \
    void attention_tiled_##isa(const OpCtx *c, const AttnArgs *a);                                          \
    void attention_##isa(const OpCtx *c, const AttnArgs *a);
SEQ_DECLARE(avx2)
SEQ_DECLARE(avx512)
#undef SEQ_DECLARE

/* Several sequences' pool jobs as one (conv_silu_seqs, deltanet_seqs): sequence s owns items [start[s],
 * start[s+1]) of the joint range, run by fn[s](ctx[s], ·) with its own item numbers, so an item computes what it
 * computes in that sequence's own pool_for (whatever thread takes it: the items write disjoint outputs). */
typedef struct SeqsJob {
    int n;
    int64_t start[OPS_SEQS_MAX + 1];
    PoolFn fn[OPS_SEQS_MAX];
    void *ctx[OPS_SEQS_MAX];
} SeqsJob;

/* appends a sequence's job of n_items items */
static inline void seqs_add(SeqsJob *j, PoolFn fn, void *ctx, int64_t n_items) {
    if (j->n == 0) j->start[0] = 0;
    j->fn[j->n] = fn, j->ctx[j->n] = ctx;
    j->start[j->n + 1] = j->start[j->n] + n_items;
    j->n++;
}

static inline void seqs_items(void *ctx, int64_t b, int64_t e, int thread) {
    const SeqsJob *j = ctx;
    int s = 0;
    while (s < j->n && j->start[s + 1] <= b) s++;
    for (; s < j->n && b < e; s++) {
        const int64_t end = j->start[s + 1] < e ? j->start[s + 1] : e;
        if (end > b) j->fn[s](j->ctx[s], b - j->start[s], end - j->start[s], thread);
        b = end;
    }
}

/* The chunked delta-net's per-thread workspace (floats; every part 64-byte aligned): with w NULL it only
 * counts. SV = [S (d_k rows) ; Vnew (CS rows)] × d_v, Kt d_k × CS, QP CS × (d_k + CS), X = [U | W] CS ×
 * (d_v + d_k), Tm and Am CS × CS, G, f CS, eG 2·CS. */
typedef struct ChunkWs {
    float *SV, *Kt, *QP, *X, *Tm, *Am, *G, *eG, *f;
} ChunkWs;

static inline size_t chunk_ws_floats(int dk, int dv, ChunkWs *w, float *base) {
    const size_t CS = DELTANET_CHUNK;
    size_t o = 0;
#define TAKE(field, n)                                                                                     \
    do {                                                                                                   \
        if (w) w->field = base + o;                                                                        \
        o += ((size_t)(n) + 15) & ~(size_t)15;                                                             \
    } while (0)
    TAKE(SV, (dk + CS) * dv);
    TAKE(Kt, dk * CS);
    TAKE(QP, CS * (dk + CS));
    TAKE(X, CS * (dv + dk));
    TAKE(Tm, CS * CS);
    TAKE(Am, CS * CS);
    TAKE(G, CS);
    TAKE(eG, 2 * CS);
    TAKE(f, CS);
#undef TAKE
    return o;
}

/* query rows (tokens × heads of a group) per work item, at most: each 64-key tile is widened (F16 / Q8_0 / Q4_0) and
 * transposed once per item, so more rows share it — 64 rows spent ~28 % of a prompt chunk's attention at depth on
 * that (docs/LONG_CONTEXT.md, issue 32); 256 rows keep O and Q (256 KiB each at d = 256) in L2 */
#define ATTN_TQ_ROWS 256
#define ATTN_TK 64      /* keys per tile */
/* The tiled attention's per-thread workspace (floats): scores [ATTN_TQ_ROWS][ATTN_TK], O [ATTN_TQ_ROWS][d],
 * running max, sum and rescale factor per row (+16), scaled Q [ATTN_TQ_ROWS][d], transposed keys [d][ATTN_TK],
 * a dequantized key or value tile [ATTN_TK][d] (F16 / Q8_0 / Q4_0 caches): 707 KiB at d = 256. */
static inline size_t attn_tiled_floats(int d) {
    return (size_t)ATTN_TQ_ROWS * ATTN_TK + 2 * (size_t)ATTN_TQ_ROWS * (size_t)d + 3 * ATTN_TQ_ROWS + 16 +
           2 * (size_t)d * ATTN_TK;
}

/* The tiled (online-softmax) attention is used past this many context positions (the llama arithmetic: by
 * pos0 + T; the fast arithmetic: per query row, a row of context ≤ this mirrors); below it the
 * llama.cpp-mirroring kernel, bit-identical to attention_ref, runs. See docs/KERNELS.md. */
#ifndef ATTN_TILED_MIN_CTX
#define ATTN_TILED_MIN_CTX 2048
#endif

#endif
