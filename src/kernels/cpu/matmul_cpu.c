/* matmul_cpu.c — the fast matrix multiply: picks a format's kernel for the ISA level, prepares the
 * activations, and spreads (row chunk × token chunk) items over the pool (matmul_cpu.h).
 *
 * The result is bit-identical to matmul_ref for the same DotPath: the driver picks the path exactly as
 * matmul_ref does (per activation row: a batch may split into a head and a tail of different paths), and
 * every kernel reproduces that path's float operations (the integer parts of the
 * dot products are exact, so those are computed any way that is fast). A matrix whose format has no
 * kernel at this level, a path the kernel does not serve, exact mode (MATMUL_EXACT) or a scratch buffer
 * too small for the kernel all go to matmul_ref. Items write disjoint outputs, so the thread count never
 * changes a bit. */
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

static void items(void *ctx, int64_t b, int64_t e, int thread) {
    Run *r = ctx;
    const MmJob *j = &r->j;
    for (int64_t it = b; it < e; it++) {
        const int64_t ri = it / j->n_tc, ti = it % j->n_tc;
        const int64_t o0 = ri * j->rc, t0 = ti * j->tc;
        const int64_t o1 = o0 + j->rc < j->O ? o0 + j->rc : j->O, t1 = t0 + j->tc < j->T ? t0 + j->tc : j->T;
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

static void matmul_fast(Isa isa, const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y) {
    DotPath path, path_tail;
    int64_t t_tail;
    const MmFormat *f = usable(isa, c, w, T, &path, &t_tail, &path_tail);
    if (!f) {
        matmul_ref(c, w, x, T, y);
        return;
    }
    const int n_threads = pool_size(c->pool);
    Run r = {.f = f, .prep = act_prep_of(isa), .t_tail = t_tail, .path_tail = path_tail};
    MmJob *j = &r.j;
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
    const int64_t n_groups = (T + j->al.group - 1) / j->al.group;
    /* scratch: prepared groups, then one tmp area per thread */
    uint8_t *base = (uint8_t *)(((uintptr_t)c->scratch + 63) & ~(uintptr_t)63);
    const size_t act_bytes = MM_ALIGN64(j->al.stride * (size_t)n_groups);
    j->tmp_stride = f->tmp_bytes ? MM_ALIGN64(f->tmp_bytes(w->cols)) : 0;
    const size_t need = (size_t)(base - (uint8_t *)c->scratch) + act_bytes + j->tmp_stride * (size_t)n_threads;
    if (!c->scratch || need > c->scratch_bytes) {
        matmul_ref(c, w, x, T, y);
        return;
    }
    j->act = j->al.stride ? base : NULL;
    j->tmp = base + act_bytes;

    if (j->al.stride) {
        if (n_groups == 1 || n_threads == 1)
            prep_groups(&r, 0, n_groups, 0);
        else
            pool_for(c->pool, n_groups, 1, prep_groups, &r);
    }

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
    const int64_t n_items = ((j->O + rc - 1) / rc) * j->n_tc;
    pool_for(c->pool, n_items, 1, items, &r);
}

static void matmul_avx2(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y) {
    matmul_fast(ISA_AVX2, c, w, x, T, y);
}
static void matmul_avx512(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y) {
    matmul_fast(ISA_AVX512, c, w, x, T, y);
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
