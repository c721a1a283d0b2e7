/* matmul_cpu.c — the fast matrix multiply: picks a format's kernel for the ISA level, prepares the
 * activations, and spreads (row chunk × token chunk) items over the pool (matmul_cpu.h).
 *
 * The result is bit-identical to matmul_ref for the same DotPath: the driver picks the path exactly as
 * matmul_ref does (per activation row: a batch may split into a head and a tail of different paths), and
 * every kernel reproduces that path's float operations (the integer parts of the
 * dot products are exact, so those are computed any way that is fast). A matrix whose format has no
 * kernel at this level, a path the kernel does not serve, exact mode (MATMUL_EXACT) or a scratch buffer
 * too small for the kernel all go to matmul_ref. Items write disjoint outputs, so the thread count never
 * changes a bit. A SwiGLU FFN's gate and up products also run as one pass (Ops.matmul_swiglu): the activations
 * prepared once, each item's gate block, up block and SwiGLU back to back, one wait instead of three. */
#include "kernels/cpu/matmul_cpu.h"

#include "kernels/cpu/kernels_cpu.h"

#include "base/err.h"
#include "gguf/quant.h"

/* ---- the kernel tables ------------------------------------------------------------------------------ */

static const MmFormat *const tab_avx2[FMT_COUNT] = {
    [FMT_Q8_0] = &mm_q8_0_avx2,
    [FMT_F32] = &mm_f32_avx2,
    [FMT_F16] = &mm_f16_avx2,
    [FMT_BF16] = &mm_bf16_avx2,
    [FMT_Q4_0] = &mm_q4_0_avx2,
    [FMT_Q5_0] = &mm_q5_0_avx2,
    [FMT_IQ4_NL] = &mm_iq4_nl_avx2,
    [FMT_MXFP4] = &mm_mxfp4_avx2,
    [FMT_Q4_1] = &mm_q4_1_avx2,
    [FMT_Q5_1] = &mm_q5_1_avx2,
    [FMT_Q2_K] = &mm_q2_K_avx2,
    [FMT_Q3_K] = &mm_q3_K_avx2,
    [FMT_Q4_K] = &mm_q4_K_avx2,
    [FMT_Q5_K] = &mm_q5_K_avx2,
    [FMT_Q6_K] = &mm_q6_K_avx2,
    [FMT_IQ2_XXS] = &mm_iq2_xxs_avx2,
    [FMT_IQ2_XS] = &mm_iq2_xs_avx2,
    [FMT_IQ2_S] = &mm_iq2_s_avx2,
    [FMT_IQ3_XXS] = &mm_iq3_xxs_avx2,
    [FMT_IQ3_S] = &mm_iq3_s_avx2,
    [FMT_IQ4_XS] = &mm_iq4_xs_avx2,
    [FMT_IQ1_S] = &mm_iq1_s_avx2,
    [FMT_IQ1_M] = &mm_iq1_m_avx2,
};

static const MmFormat *const tab_avx512[FMT_COUNT] = {
    [FMT_Q8_0] = &mm_q8_0_avx512,
    [FMT_F32] = &mm_f32_avx512,
    [FMT_F16] = &mm_f16_avx512,
    [FMT_BF16] = &mm_bf16_avx512,
    [FMT_Q4_0] = &mm_q4_0_avx512,
    [FMT_Q5_0] = &mm_q5_0_avx512,
    [FMT_IQ4_NL] = &mm_iq4_nl_avx512,
    [FMT_MXFP4] = &mm_mxfp4_avx512,
    [FMT_Q4_1] = &mm_q4_1_avx512,
    [FMT_Q5_1] = &mm_q5_1_avx512,
    [FMT_Q2_K] = &mm_q2_K_avx512,
    [FMT_Q3_K] = &mm_q3_K_avx512,
    [FMT_Q4_K] = &mm_q4_K_avx512,
    [FMT_Q5_K] = &mm_q5_K_avx512,
    [FMT_Q6_K] = &mm_q6_K_avx512,
    [FMT_IQ2_XXS] = &mm_iq2_xxs_avx512,
    [FMT_IQ2_XS] = &mm_iq2_xs_avx512,
    [FMT_IQ2_S] = &mm_iq2_s_avx512,
    [FMT_IQ3_XXS] = &mm_iq3_xxs_avx512,
    [FMT_IQ3_S] = &mm_iq3_s_avx512,
    [FMT_IQ4_XS] = &mm_iq4_xs_avx512,
    [FMT_IQ1_S] = &mm_iq1_s_avx512,
    [FMT_IQ1_M] = &mm_iq1_m_avx512,
};

static const MmFormat *lookup(Isa isa, uint32_t type, MatMode mode) {
    if (type >= FMT_COUNT) return NULL;
    if (mode == MATMUL_FAST && (type == FMT_Q8_0 || format_is_float(type))) {
        const bool z = isa == ISA_AVX512;
        if (isa != ISA_AVX512 && isa != ISA_AVX2) return NULL;
        switch (type) {
        case FMT_Q8_0: return z ? &mm_q8_0_fast_avx512 : &mm_q8_0_fast_avx2;
        case FMT_F32: return z ? &mm_f32_fast_avx512 : &mm_f32_fast_avx2;
        case FMT_F16: return z ? &mm_f16_fast_avx512 : &mm_f16_fast_avx2;
        default: return z ? &mm_bf16_fast_avx512 : &mm_bf16_fast_avx2;
        }
    }
    switch (isa) {
    case ISA_AVX2: return tab_avx2[type];
    case ISA_AVX512: return tab_avx512[type];
    default: return NULL;
    }
}

static MmActPrep act_prep_of(Isa isa) { return isa == ISA_AVX512 ? mm_act_prep_avx512 : mm_act_prep_avx2; }

/* ---- the driver ------------------------------------------------------------------------------------- */

typedef struct Run {
    MmJob j;
    const MmFormat *f;
    MmActPrep prep;
    /* tokens from t_tail on take path_tail (matmul_ref picks the path per activation row: the n % 4 last
     * rows of a repacked batch go through llama.cpp's gemv kernel) */
    int64_t t_tail;
    DotPath path_tail;
} Run;

static void prep_groups(void *ctx, int64_t b, int64_t e, int thread) {
    Run *r = ctx;
    const MmJob *j = &r->j;
    const int gs = j->al.group;
    for (int64_t g = b; g < e; g++) {
        const int64_t t = g * gs;
        const int n = j->T - t < gs ? (int)(j->T - t) : gs;
        r->prep(j->act_kind, j->act_off, j->x + t * j->K, n, j->K, (uint8_t *)j->act + (size_t)g * j->al.stride);
    }
}

/* item it's block: rows [*o0, *o1) × tokens [*t0, *t1) */
static void item_block(const MmJob *j, int64_t it, int64_t *o0, int64_t *o1, int64_t *t0, int64_t *t1) {
    *o0 = it / j->n_tc * j->rc, *t0 = it % j->n_tc * j->tc;
    *o1 = *o0 + j->rc < j->O ? *o0 + j->rc : j->O, *t1 = *t0 + j->tc < j->T ? *t0 + j->tc : j->T;
}

static void items(void *ctx, int64_t b, int64_t e, int thread) {
    Run *r = ctx;
    const MmJob *j = &r->j;
    for (int64_t it = b; it < e; it++) {
        int64_t o0, o1, t0, t1;
        item_block(j, it, &o0, &o1, &t0, &t1);
        uint8_t *tmp = j->tmp + (size_t)thread * j->tmp_stride;
        const int64_t tm = t1 < r->t_tail ? t1 : t0 > r->t_tail ? t0 : r->t_tail;
        if (tm > t0) r->f->compute(j, o0, o1, t0, tm, tmp);
        if (t1 > tm) {
            MmJob jt = *j;
            jt.path = r->path_tail;
            r->f->compute(&jt, o0, o1, tm, t1, tmp);
        }
    }
}

/* The DotPaths of this product, as matmul_ref's rows_ggml picks them per activation row: *path for tokens
 * below *t_tail, *path_tail from there on. False if the rows' paths do not split that way (never, with
 * today's rules; the reference then runs). */
static bool product_paths(const Format *wf, const MatW *w, int64_t T, MatMode mode, DotPath *path, int64_t *t_tail,
                          DotPath *path_tail) {
    if (mode == MATMUL_FAST) { /* one path for every row, whatever T */
        *path = *path_tail = format_fast_path(wf, w->cols);
        *t_tail = T;
        return true;
    }
    *path = format_pick_path_row(wf, w->rows, w->cols, T, w->gemv, 0);
    *path_tail = format_pick_path_row(wf, w->rows, w->cols, T, w->gemv, T - 1);
    *t_tail = T;
    if (*path_tail == *path) return true;
    int64_t t = T - 1;
    while (t > 0 && format_pick_path_row(wf, w->rows, w->cols, T, w->gemv, t - 1) == *path_tail) t--;
    *t_tail = t;
    for (int64_t u = 0; u < t; u++)
        if (format_pick_path_row(wf, w->rows, w->cols, T, w->gemv, u) != *path) return false;
    return true;
}

/* Whether the fast path takes this product (and with which kernel). */
static const MmFormat *usable(Isa isa, const OpCtx *c, const MatW *w, int64_t T, DotPath *path, int64_t *t_tail,
                              DotPath *path_tail) {
    if (c && c->mode == MATMUL_EXACT) return NULL;
    const Format *wf = format_get(w->type);
    if (!wf || !wf->vec_dot || T <= 0) return NULL;
    const MmFormat *f = lookup(isa, w->type, c ? c->mode : MATMUL_GGML);
    if (!f || !isa_supported(isa)) return NULL;
    if (!product_paths(wf, w, T, c ? c->mode : MATMUL_GGML, path, t_tail, path_tail)) return NULL;
    if (*path == DOT_FAST && !f->fast) return NULL;
    if (f->serves && (!f->serves(*path, w->rows, w->cols, T) || !f->serves(*path_tail, w->rows, w->cols, T))) return NULL;
    return f;
}

/* Plans the product into r (its kernel, activation layout and item grid); false when the reference must
 * run. The scratch is not placed yet (place). */
static bool plan(Isa isa, const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y, Run *r) {
    DotPath path, path_tail;
    int64_t t_tail;
    const MmFormat *f = usable(isa, c, w, T, &path, &t_tail, &path_tail);
    if (!f) return false;
    const int n_threads = pool_size(c->pool);
    *r = (Run){.f = f, .prep = act_prep_of(isa), .t_tail = t_tail, .path_tail = path_tail};
    MmJob *j = &r->j;
    j->w = w;
    j->x = x;
    j->y = y;
    j->K = w->cols;
    j->O = w->rows;
    j->T = T;
    j->path = path;
    j->act_kind = f->gemm_min_T && T >= f->gemm_min_T ? f->act_kind_gemm : f->act_kind;
    j->act_off = f->act_off;
    j->al = mm_act_layout(j->act_kind, w->cols);
    j->tmp_stride = f->tmp_bytes ? MM_ALIGN64(f->tmp_bytes(w->cols)) : 0;

    /* Work items: (row chunk × token chunk). Kernels that decode a row tile into tmp reuse it over the
     * whole token chunk, so their chunks are 256 tokens whatever the width (sizing them to keep the
     * chunk's activations in L2 left 8 tokens at K = 12288 and a Q6_K GEMM at 76 GFLOP/s instead of 190:
     * the activations stream from L3 well enough; 256 instead of 64 took the fast arithmetic's Q4_K GEMM
     * from 310 to 420 GOP/s on one thread, the tile decode being that much less); the others keep a chunk's
     * prepared rows in L2 (~384 KB). Chunks start at multiples of 8 tokens (octet boundaries); row chunks are small enough that
     * every thread gets several items. */
    int64_t tc = T;
    if (T > 8) {
        const size_t per_tok = j->al.stride ? j->al.stride / (size_t)j->al.group : (size_t)w->cols * 4;
        tc = j->tmp_stride ? 256 : (int64_t)((384u << 10) / per_tok);
        tc = tc < 8 ? 8 : tc > 256 ? 256 : tc & ~(int64_t)7;
        if (tc > T) tc = T;
    }
    j->tc = tc;
    j->n_tc = (T + tc - 1) / tc;
    int64_t rc;
    if (T <= 4) {
        /* GEMV (decode): a few long row ranges per thread. Items of 32 rows handed out one by one made
         * the two threads' weight streams jump every 35 KB, and a Qwen3.5-0.8B Q8_0 decode ran at ~32
         * tokens/s; 4 ranges per thread: ~50 (docs/KERNELS.md, "Decode GEMV") */
        const int64_t parts = 4 * (int64_t)n_threads;
        rc = ((j->O + parts - 1) / parts + 7) & ~(int64_t)7;
    } else {
        rc = 64;
        while (rc > 8 && ((j->O + rc - 1) / rc) * j->n_tc < 4 * (int64_t)n_threads) rc /= 2;
    }
    if (w->pack_kind == PACK_P16) rc = (rc + 15) & ~(int64_t)15; /* items on panel edges */
    j->rc = rc;
    return true;
}

/* Places the prepared activations and one tmp area of tmp_stride per thread in the scratch; false when it is
 * too small (the reference runs). */
static bool place(const OpCtx *c, MmJob *j, size_t tmp_stride) {
    const int64_t n_groups = (j->T + j->al.group - 1) / j->al.group;
    uint8_t *base = (uint8_t *)(((uintptr_t)c->scratch + 63) & ~(uintptr_t)63);
    const size_t act_bytes = MM_ALIGN64(j->al.stride * (size_t)n_groups);
    const size_t need = (size_t)(base - (uint8_t *)c->scratch) + act_bytes + tmp_stride * (size_t)pool_size(c->pool);
    if (!c->scratch || need > c->scratch_bytes) return false;
    j->act = j->al.stride ? base : NULL;
    j->tmp = base + act_bytes;
    j->tmp_stride = tmp_stride;
    return true;
}

/* The activation rows into the kernel's layout (on all threads when there are several groups) */
static void prepare(const OpCtx *c, Run *r) {
    if (!r->j.al.stride) return;
    const int64_t n_groups = (r->j.T + r->j.al.group - 1) / r->j.al.group;
    if (n_groups == 1 || pool_size(c->pool) == 1)
        prep_groups(r, 0, n_groups, 0);
    else
        pool_for(c->pool, n_groups, 1, prep_groups, r);
}

static int64_t n_items(const MmJob *j) { return ((j->O + j->rc - 1) / j->rc) * j->n_tc; }

static void matmul_fast(Isa isa, const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y) {
    Run r;
    if (!plan(isa, c, w, x, T, y, &r) || !place(c, &r.j, r.j.tmp_stride)) {
        matmul_ref(c, w, x, T, y);
        return;
    }
    prepare(c, &r);
    pool_for(c->pool, n_items(&r.j), 1, items, &r);
}

/* ---- gate, up and SwiGLU in one pass ---------------------------------------------------------------------- */

/* The two products share the prepared activations, the item grid and the per-thread tmp areas; an item
 * computes its block of gate rows, the same block of up rows, and SwiGLU over the block while both are in
 * cache. Row chunks are multiples of 16 so that each block's elements take the branch of the row op they take
 * in a whole row (16-element chunks from the row's start through the exp polynomial, the row's tail through
 * libm): the bits are those of matmul, matmul, swiglu_rows. */
typedef struct SwigluRun {
    Run g, u;
    SwigluRowsFn swiglu;
} SwigluRun;

static void swiglu_items(void *ctx, int64_t b, int64_t e, int thread) {
    const SwigluRun *s = ctx;
    const MmJob *j = &s->g.j;
    const OpCtx alone = {MATMUL_GGML, NULL, NULL, 0}; /* the row op on this thread */
    for (int64_t it = b; it < e; it++) {
        items((void *)&s->g, it, it + 1, thread);
        items((void *)&s->u, it, it + 1, thread);
        int64_t o0, o1, t0, t1;
        item_block(j, it, &o0, &o1, &t0, &t1);
        for (int64_t t = t0; t < t1; t++) {
            float *y = j->y + t * j->O + o0;
            s->swiglu(&alone, y, s->u.j.y + t * j->O + o0, y, 1, (int)(o1 - o0));
        }
    }
}

static void matmul_swiglu_fast(Isa isa, const OpCtx *c, const MatW *wg, const MatW *wu, const float *x, int64_t T,
                               float *y, float *u) {
    SwigluRun s;
    SiluRowsFn silu;
    rowops_cpu_select(isa, &silu, &s.swiglu);
    const bool paired = wg->rows == wu->rows && wg->cols == wu->cols && plan(isa, c, wg, x, T, y, &s.g) &&
                        plan(isa, c, wu, x, T, u, &s.u) && s.g.j.act_kind == s.u.j.act_kind &&
                        s.g.j.act_off == s.u.j.act_off;
    size_t tmp = 0;
    if (paired) { /* one grid: the smaller token chunk, the larger row chunk, rounded to 16 */
        MmJob *g = &s.g.j, *uj = &s.u.j;
        g->tc = uj->tc < g->tc ? uj->tc : g->tc;
        g->n_tc = (T + g->tc - 1) / g->tc;
        g->rc = ((uj->rc > g->rc ? uj->rc : g->rc) + 15) & ~(int64_t)15;
        uj->tc = g->tc, uj->n_tc = g->n_tc, uj->rc = g->rc;
        tmp = g->tmp_stride > uj->tmp_stride ? g->tmp_stride : uj->tmp_stride;
    }
    if (!paired || !place(c, &s.g.j, tmp)) { /* each product on its own, then the row op */
        matmul_fast(isa, c, wg, x, T, y);
        matmul_fast(isa, c, wu, x, T, u);
        s.swiglu(c, y, u, y, (int)T, (int)wg->rows);
        return;
    }
    s.u.j.act = s.g.j.act, s.u.j.tmp = s.g.j.tmp, s.u.j.tmp_stride = tmp;
    prepare(c, &s.g);
    pool_for(c->pool, n_items(&s.g.j), 1, swiglu_items, &s);
}

static void matmul_avx2(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y) {
    matmul_fast(ISA_AVX2, c, w, x, T, y);
}
static void matmul_avx512(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y) {
    matmul_fast(ISA_AVX512, c, w, x, T, y);
}
static void matmul_swiglu_avx2(const OpCtx *c, const MatW *wg, const MatW *wu, const float *x, int64_t T, float *y,
                               float *u) {
    matmul_swiglu_fast(ISA_AVX2, c, wg, wu, x, T, y, u);
}
static void matmul_swiglu_avx512(const OpCtx *c, const MatW *wg, const MatW *wu, const float *x, int64_t T, float *y,
                                 float *u) {
    matmul_swiglu_fast(ISA_AVX512, c, wg, wu, x, T, y, u);
}

MatmulSwigluFn matmul_swiglu_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX2: return isa_supported(ISA_AVX2) ? matmul_swiglu_avx2 : matmul_swiglu_ref;
    case ISA_AVX512: return isa_supported(ISA_AVX512) ? matmul_swiglu_avx512 : matmul_swiglu_ref;
    default: return matmul_swiglu_ref;
    }
}

MatmulFn matmul_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX2: return isa_supported(ISA_AVX2) ? matmul_avx2 : matmul_ref;
    case ISA_AVX512: return isa_supported(ISA_AVX512) ? matmul_avx512 : matmul_ref;
    default: return matmul_ref;
    }
}

static bool vbmi_off; /* set by tests only, between products */
bool mm_vbmi(void) { return !vbmi_off && isa_has_avx512_vbmi(); }
void mm_set_vbmi(bool allow) { vbmi_off = !allow; }

bool mm_has_kernel(int isa, MatMode mode, const MatW *w, int64_t T) {
    DotPath path, path_tail;
    int64_t t_tail;
    const OpCtx c = {mode, NULL, NULL, 0};
    return usable((Isa)isa, &c, w, T, &path, &t_tail, &path_tail) != NULL;
}

FormatFromFloat mm_quantize_act(int isa, uint32_t act_type) {
    if (!isa_supported((Isa)isa)) return NULL;
    if (isa == ISA_AVX512) switch (act_type) {
        case FMT_Q8_0: return quantize_act_q8_0_avx512;
        case FMT_Q8_1: return quantize_act_q8_1_avx512;
        case FMT_Q8_K: return quantize_act_q8_K_avx512;
        case FMT_F16: return quantize_act_f16_avx512;
        case FMT_BF16: return quantize_act_bf16_avx512;
        default: return NULL;
        }
    if (isa == ISA_AVX2) switch (act_type) {
        case FMT_Q8_0: return quantize_act_q8_0_avx2;
        case FMT_Q8_1: return quantize_act_q8_1_avx2;
        case FMT_Q8_K: return quantize_act_q8_K_avx2;
        case FMT_F16: return quantize_act_f16_avx2;
        case FMT_BF16: return quantize_act_bf16_avx2;
        default: return NULL;
        }
    return NULL;
}
