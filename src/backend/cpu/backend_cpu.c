/* backend_cpu.c — the host backends of backend.h: "cpu" (the kernels of src/kernels/cpu/ for one ISA level,
 * picked at run time) and "ref" (the scalar reference of every op, kernels/ref/). Memory is host memory,
 * weights stay where the model put them (the file mapping, or F32 copies) unless packing gives a matrix a
 * copy the kernels stream faster (pack.c), ops run on the calling thread and the backend's thread pool and
 * are complete when they return, so the command stream is empty. */
#include "backend/cpu/host_backend.h"

#include "base/bigalloc.h"
#include "base/pool.h"
#include "gguf/format.h"
#include "kernels/cpu/kernels_cpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- memory ----------------------------------------------------------------------------------------------- */

static BBuf *h_alloc(Backend *be, size_t bytes, Err *err) {
    (void)be;
    BBuf *b = calloc(1, sizeof *b);
    void *p = b ? big_alloc(bytes ? bytes : 1) : NULL;
    if (!p) {
        free(b);
        return err_set(err, "out of memory (%zu MiB)", bytes >> 20), NULL;
    }
    memset(p, 0, bytes);
    b->base = (uintptr_t)p;
    b->bytes = bytes;
    return b;
}

static void h_free(Backend *be, BBuf *b) {
    (void)be;
    if (!b) return;
    free((void *)b->base);
    free(b);
}

static void h_upload(Backend *be, BView dst, const void *src, size_t bytes) {
    (void)be;
    if (bytes) memmove(hv_n(dst, bytes), src, bytes);
}
static void h_download(Backend *be, void *dst, BView src, size_t bytes) {
    (void)be;
    if (bytes) memmove(dst, hv_n(src, bytes), bytes);
}
static void h_copy(Backend *be, BView dst, BView src, size_t bytes) {
    (void)be;
    if (bytes) memmove(hv_n(dst, bytes), hv_n(src, bytes), bytes);
}
static void h_fill(Backend *be, BView dst, uint8_t byte, size_t bytes) {
    (void)be;
    memset(hv_n(dst, bytes), byte, bytes);
}
static bool h_wrap_host(Backend *be, void *host, size_t bytes, BView *out) {
    (void)bytes;
    *out = (BView){&host_of(be)->wrap, (uintptr_t)host};
    return true;
}

static int h_reserve(Backend *be, const BackendSizes *s, Err *err) {
    HostBackend *hb = host_of(be);
    const int nt = pool_size(hb->pool);
    size_t need = ops_scratch_bytes(s->max_rows, s->max_cols, nt);
    const size_t more[] = {attention_scratch_bytes(s->max_ctx, nt), deltanet_scratch_bytes(s->d_k, s->d_v, nt),
                           attention_fast_scratch_bytes(s->max_ctx, s->head_dim, s->gqa_group, nt)};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        if (more[i] > need) need = more[i];
    if (need <= hb->oc.scratch_bytes) return 0;
    void *p = big_alloc(need);
    if (!p) return err_set(err, "out of memory for the kernels' scratch (%zu MiB)", need >> 20);
    free(hb->oc.scratch);
    hb->oc.scratch = p;
    hb->oc.scratch_bytes = need;
    return 0;
}

/* ---- weights -------------------------------------------------------------------------------------------------- */

typedef struct Range {
    uintptr_t b, e;
} Range;

static int by_start(const void *x, const void *y) {
    const Range *a = x, *b = y;
    return a->b < b->b ? -1 : a->b > b->b;
}

static bool is_packed(const HostBackend *hb, const Weight *w) { return hb->mats[w->id].pack != NULL; }

/* The page-aligned file ranges of the weights the kernels read from the mapping (not those an expert cache
 * streams; with skip_packed, not those read from a packed copy), merged in address order; NULL on no memory. */
static Range *weight_ranges(const HostBackend *hb, const Weight *w, int n, bool skip_packed, int *count) {
    const uintptr_t page = sysconf(_SC_PAGESIZE) > 0 ? (uintptr_t)sysconf(_SC_PAGESIZE) : 4096;
    Range *r = malloc(sizeof *r * (size_t)(n + 1));
    if (!r) return NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (w[i].streamed || !w[i].host) continue; /* the expert cache reads these */
        if (skip_packed && is_packed(hb, &w[i])) continue;
        const uintptr_t b = (uintptr_t)w[i].host & ~(page - 1);
        const uintptr_t e = (uintptr_t)w[i].host + (w[i].n_expert ? (size_t)w[i].n_expert * w[i].expert_stride : w[i].bytes);
        r[k++] = (Range){b, (e + page - 1) & ~(page - 1)};
    }
    qsort(r, (size_t)k, sizeof *r, by_start);
    int m = 0; /* merge overlapping and adjacent ranges */
    for (int i = 0; i < k; i++) {
        if (m && r[i].b <= r[m - 1].e) {
            if (r[i].e > r[m - 1].e) r[m - 1].e = r[i].e;
        } else {
            r[m++] = r[i];
        }
    }
    *count = m;
    return r;
}

/* Asks for the weights' file pages in huge pages (MADV_HUGEPAGE on the mapping, before anything reads them):
 * where the file system keeps large folios (ext4, xfs; Linux 6.x) the page cache then reads the file in 2 MiB
 * folios that the mapping maps whole, and a decode that jumps between matrices or experts stops missing the
 * TLB on every 4 KiB page. Measured: the IQ2_XXS experts of b3 (Qwen3-Next width) decode 54 t/s on one thread
 * with the file's pages in 2 MiB folios, 34-44 in 4 KiB ones. A file already cached in small folios keeps them
 * until it is evicted. Not for streamed experts: an expert cache reads a few hundred KiB at a time. */
static void hint_huge_pages(const HostBackend *hb, const Weight *w, int n) {
#ifdef MADV_HUGEPAGE
    int m = 0;
    Range *r = weight_ranges(hb, w, n, false, &m);
    for (int i = 0; r && i < m; i++) madvise((void *)r[i].b, r[i].e - r[i].b, MADV_HUGEPAGE); /* a hint */
    free(r);
#else
    (void)hb, (void)w, (void)n;
#endif
}

/* w may be the whole registry or any part of it (a pipeline stage binds only its layers' tensors): entries in
 * ascending id order; kernels' views are kept per id, so an id never bound has none. */
static int h_bind(Backend *be, const Weight *w, int n, Err *err) {
    HostBackend *hb = host_of(be);
    if (hb->mats) return err_set(err, "this backend already holds a model's weights");
    const int n_ids = n > 0 ? w[n - 1].id + 1 : 1;
    hb->mats = calloc((size_t)n_ids, sizeof *hb->mats);
    if (!hb->mats) return err_set(err, "out of memory");
    for (int i = 0; i < n; i++) {
        ASSERT(w[i].id >= (i ? w[i - 1].id + 1 : 0));
        hb->mats[w[i].id] = (MatW){w[i].host, w[i].type, w[i].cols, w[i].rows, w[i].row_bytes, w[i].gemv, NULL, PACK_NONE};
    }
    hb->weights = w;
    hb->n_weights = n;
    hb->n_ids = n_ids;
    hint_huge_pages(hb, w, n);
    /* R8 for llama.cpp's orders; P16 panels for the fast arithmetic's AVX-512 kernels */
    if (!hb->pack || be->mode == MATMUL_EXACT || hb->isa == ISA_REF) return 0;
    const int kind = be->mode == MATMUL_FAST ? PACK_P16 : PACK_R8;
    if (kind == PACK_P16 && hb->isa != ISA_AVX512) return 0;
    /* matrices that are only looked up (an untied embedding table) keep the file's layout, and expert stacks in
     * llama.cpp's orders (multiplied row by row) or when an expert cache reads them (it hands out the file's
     * bytes); the fast arithmetic packs a stack whose experts follow each other as one matrix of all their rows,
     * so that expert e's panels start at e · rows / 16 panels (h_matmul) */
    MatW *cand = malloc(sizeof *cand * (size_t)(n > 0 ? n : 1));
    int *idx = malloc(sizeof *idx * (size_t)(n > 0 ? n : 1));
    bool *drop = malloc(sizeof *drop * (size_t)(n > 0 ? n : 1));
    if (!cand || !idx || !drop) return free(cand), free(idx), free(drop), err_set(err, "out of memory");
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (w[i].lookup_only) continue;
        MatW m = hb->mats[w[i].id];
        if (w[i].n_expert) {
            if (kind != PACK_P16 || w[i].streamed || w[i].expert_stride != (size_t)m.rows * m.row_bytes || m.rows % 16) continue;
            m.rows *= w[i].n_expert;
            m.gemv = false;
        }
        cand[k] = m, drop[k] = w[i].file_pages, idx[k++] = w[i].id;
    }
    int rc = host_pack(cand, drop, k, kind, &hb->progress, &hb->packs, err);
    for (int i = 0; rc == 0 && i < k; i++) hb->mats[idx[i]].pack = cand[i].pack, hb->mats[idx[i]].pack_kind = cand[i].pack_kind;
    free(cand), free(idx), free(drop);
    return rc;
}



static int h_make_resident(Backend *be, bool lock, Err *err) {
    HostBackend *hb = host_of(be);
    const uintptr_t page = sysconf(_SC_PAGESIZE) > 0 ? (uintptr_t)sysconf(_SC_PAGESIZE) : 4096;
    for (int i = 0; i < hb->n_weights; i++) {
        const Weight *w = &hb->weights[i];
        if (w->streamed || !is_packed(hb, w)) continue;
        /* packed: the copy is read instead; the file's pages only into the page cache (an embedding lookup of a
         * tied head still reads some) */
        const uintptr_t b = (uintptr_t)w->host & ~(page - 1);
        const uintptr_t e = (uintptr_t)w->host + (w->n_expert ? (size_t)w->n_expert * w->expert_stride : w->bytes);
        madvise((void *)b, e - b, MADV_WILLNEED);
    }
    int m = 0;
    Range *r = weight_ranges(hb, hb->weights, hb->n_weights, true, &m);
    if (!r) return err_set(err, "out of memory");
    volatile uint8_t sink = 0;
    size_t total = 0, all = 0;
    for (int i = 0; i < m; i++) all += r[i].e - r[i].b;
    for (int i = 0; i < m; i++) {
        madvise((void *)r[i].b, r[i].e - r[i].b, MADV_WILLNEED);
        for (uintptr_t p = r[i].b; p < r[i].e; p += page) {
            sink ^= *(const volatile uint8_t *)p;
            if (hb->progress.fn && ((total + (p - r[i].b)) & ((64u << 20) - 1)) == 0)
                hb->progress.fn(hb->progress.user, "prefetch", total + (p - r[i].b), all);
        }
        total += r[i].e - r[i].b;
    }
    if (hb->progress.fn) hb->progress.fn(hb->progress.user, "prefetch", all, all);
    (void)sink;
    int rc = 0;
    for (int i = 0; lock && rc == 0 && i < m; i++)
        if (mlock((void *)r[i].b, r[i].e - r[i].b) != 0)
            rc = err_set(err, "cannot lock %zu MiB of weights in memory: %s (raise `ulimit -l`)", total >> 20,
                         strerror(errno));
    free(r);
    if (rc == 0 && lock && hb->packs.arena && mlock(hb->packs.arena, hb->packs.bytes) != 0)
        rc = err_set(err, "cannot lock %zu MiB of packed weights in memory: %s (raise `ulimit -l`)",
                     hb->packs.bytes >> 20, strerror(errno));
    return rc;
}

/* ---- the command stream: host ops are done when they return ------------------------------------------------ */

static void h_begin(Backend *be) { (void)be; }
static int h_submit(Backend *be, Err *err) {
    (void)be, (void)err;
    return 0;
}
static int h_wait(Backend *be, Err *err) {
    HostBackend *hb = host_of(be);
    if (hb->moe_oom) { /* an op that could not get its work area (host_moe.c) */
        hb->moe_oom = false;
        return err_set(err, "out of memory for the MoE experts' work areas");
    }
    return 0;
}

/* ---- the heavy ops, through the kernels' Ops table ----------------------------------------------------------------- */

MatW host_expert_mat(const HostBackend *hb, const Weight *w, int expert, const void *data) {
    ASSERT(w->id < hb->n_ids && hb->mats[w->id].data); /* bound on this backend */
    MatW m = hb->mats[w->id];
    if (expert >= 0) {
        ASSERT(w->n_expert && expert < w->n_expert);
        m.data = data ? data : (const uint8_t *)w->host + (size_t)expert * w->expert_stride;
        if (m.pack && m.pack_kind == PACK_P16 && !data) /* the stack's panels: expert e's after e · rows rows */
            m.pack = (const uint8_t *)m.pack + (size_t)expert * (size_t)(m.rows / 16) * pack_p16_bytes(&m);
        else
            m.pack = NULL;
    }
    return m;
}

/* the matrix of a product: an expert's, and rows [o0, o1) of it when o1 > 0 */
static MatW mat_of(HostBackend *hb, const MatArgs *a) {
    MatW m = host_expert_mat(hb, a->w, a->expert, a->data);
    if (a->o1 > 0) { /* rows [o0, o1): the packed layouts' whole groups (8 rows, 16 for P16) or the file's */
        ASSERT(a->o0 >= 0 && a->o0 < a->o1 && a->o1 <= m.rows && a->o0 % 8 == 0);
        const int g = m.pack_kind == PACK_P16 ? 16 : 8;
        if (m.pack) /* whole groups: 8 rows of R8 are 8 rows' bytes; a P16 panel is pack_p16_bytes */
            m.pack = (const uint8_t *)m.pack + (m.pack_kind == PACK_P16 ? (size_t)(a->o0 / 16) * pack_p16_bytes(&m)
                                                                         : (size_t)a->o0 * m.row_bytes);
        m.data = (const uint8_t *)m.data + (size_t)a->o0 * m.row_bytes;
        m.rows = a->o1 - a->o0;
        if (m.rows % g || a->o0 % g) m.pack = NULL;
    }
    if (!m.pack) m.pack_kind = PACK_NONE;
    return m;
}

static void h_matmul(Backend *be, const MatArgs *a) {
    HostBackend *hb = host_of(be);
    const MatW m = mat_of(hb, a);
    hb->ops->matmul(&hb->oc, &m, hf_n(a->x, a->T * m.cols), a->T, hf_n(a->y, a->T * m.rows));
}

static void h_matmul_swiglu(Backend *be, const MatArgs *g, const MatArgs *u) {
    HostBackend *hb = host_of(be);
    ASSERT(g->T == u->T && g->x.buf == u->x.buf && g->x.off == u->x.off);
    const MatW mg = mat_of(hb, g), mu = mat_of(hb, u);
    hb->ops->matmul_swiglu(&hb->oc, &mg, &mu, hf(g->x), g->T, hf(g->y), hf(u->y));
}

static void h_conv_silu(Backend *be, BView x, int T, int C, int K, const Weight *w, BView state, BView y) {
    HostBackend *hb = host_of(be);
    hb->ops->conv_silu(&hb->oc, hf(x), T, C, K, w->host, hf(state), hf(y));
}

static DeltaNetArgs dn_args(const DeltaArgs *a) {
    return (DeltaNetArgs){a->T, a->n_k_head, a->n_v_head, a->d_k, a->d_v, a->grouped,
                          hf(a->q), hf(a->k), hf(a->v), hf(a->g), hf(a->beta), hf(a->state), hf(a->out),
                          a->state_in.buf ? hf(a->state_in) : NULL, a->has_steps ? hf(a->steps) : NULL};
}

/* the fast arithmetic's form is the fused one at every length (chunks of DN_FUSED_C tokens, their dots with
 * the base state as one GEMM, three multiply-adds per element and token; its state has its own layout,
 * h_state_layout); the llama and exact arithmetics take llama.cpp's recurrent order or the chunked form */
static DeltaNetForm dn_form(const Backend *be, const DeltaArgs *a) {
    return be->mode == MATMUL_FAST ? DN_FORM_FUSED : a->chunked ? DN_FORM_CHUNKED : DN_FORM_RECURRENT;
}

static void h_deltanet(Backend *be, const DeltaArgs *a) {
    HostBackend *hb = host_of(be);
    const DeltaNetArgs d = dn_args(a);
    switch (dn_form(be, a)) {
    case DN_FORM_FUSED: hb->ops->deltanet_fused(&hb->oc, &d); break;
    case DN_FORM_CHUNKED: hb->ops->deltanet_chunked(&hb->oc, &d); break;
    default: hb->ops->deltanet_recurrent(&hb->oc, &d); break;
    }
}

/* the sequences' calls in one pool job (the kernels' conv_silu_seqs / deltanet_seqs), OPS_SEQS_MAX at a time;
 * on one thread there is no hand-off to save, and the single calls measured faster (b1, 8 sessions, 1 thread,
 * alternating: 117-126 t/s batched against 132-134 single), so they run one by one there (the same bits) */
static void h_conv_silu_seqs(Backend *be, const ConvSeq *s, int n, int C, int K, const Weight *w) {
    HostBackend *hb = host_of(be);
    if (pool_size(hb->oc.pool) <= 1) {
        for (int i = 0; i < n; i++) h_conv_silu(be, s[i].x, s[i].T, C, K, w, s[i].state, s[i].y);
        return;
    }
    for (int i0 = 0; i0 < n; i0 += OPS_SEQS_MAX) {
        const int m = n - i0 < OPS_SEQS_MAX ? n - i0 : OPS_SEQS_MAX;
        ConvSeqArgs cs[OPS_SEQS_MAX];
        for (int i = 0; i < m; i++) {
            const ConvSeq *si = &s[i0 + i];
            cs[i] = (ConvSeqArgs){hf(si->x), si->T, hf(si->state), hf(si->y)};
        }
        hb->ops->conv_silu_seqs(&hb->oc, cs, m, C, K, w->host);
    }
}

static void h_deltanet_seqs(Backend *be, const DeltaArgs *a, int n) {
    HostBackend *hb = host_of(be);
    if (pool_size(hb->oc.pool) <= 1) {
        for (int i = 0; i < n; i++) h_deltanet(be, &a[i]);
        return;
    }
    for (int i0 = 0; i0 < n; i0 += OPS_SEQS_MAX) {
        const int m = n - i0 < OPS_SEQS_MAX ? n - i0 : OPS_SEQS_MAX;
        DeltaNetArgs d[OPS_SEQS_MAX];
        DeltaNetForm form[OPS_SEQS_MAX];
        for (int i = 0; i < m; i++) d[i] = dn_args(&a[i0 + i]), form[i] = dn_form(be, &a[i0 + i]);
        hb->ops->deltanet_seqs(&hb->oc, d, form, m);
    }
}

static void h_attention(Backend *be, const AttentionArgs *a) {
    HostBackend *hb = host_of(be);
    const AttnArgs at = {a->T, a->pos0, a->n_head, a->n_head_kv, a->d, a->scale, hf(a->q), hv(a->k), hv(a->v), hf(a->out),
                         be->kv_k, be->kv_v};
    hb->ops->attention(&hb->oc, &at);
}

/* ---- create / destroy ------------------------------------------------------------------------------------- */

static void h_destroy(Backend *be) {
    HostBackend *hb = host_of(be);
    host_pack_free(&hb->packs);
    free(hb->mats);
    free(hb->oc.scratch);
    free(hb->moe_ws);
    pool_destroy(hb->pool);
    free(hb);
}

static void h_stats(const Backend *be, BackendStats *out) {
    const HostBackend *hb = (const HostBackend *)be;
    out->packed_bytes = hb->packs.bytes;
    out->n_packed = hb->packs.n;
}

/* the fast arithmetic keeps the delta-net states in the fused form's layout (h_deltanet) */
static int h_state_layout(const Backend *be) { return be->mode == MATMUL_FAST ? STATE_FUSED : STATE_PLAIN; }

static BackendVt host_vt(void) {
    BackendVt vt = {
        .destroy = h_destroy,
        .reserve = h_reserve,
        .alloc = h_alloc,
        .free = h_free,
        .upload = h_upload,
        .download = h_download,
        .copy = h_copy,
        .fill = h_fill,
        .wrap_host = h_wrap_host,
        .bind = h_bind,
        .make_resident = h_make_resident,
        .begin = h_begin,
        .submit = h_submit,
        .wait = h_wait,
        .matmul = h_matmul,
        .matmul_swiglu = h_matmul_swiglu,
        .conv_silu = h_conv_silu,
        .deltanet = h_deltanet,
        .conv_silu_seqs = h_conv_silu_seqs,
        .deltanet_seqs = h_deltanet_seqs,
        .attention = h_attention,
        .moe_ffn = host_moe_ffn,
        .stats = h_stats,
        .state_layout = h_state_layout,
    };
    host_ops_install(&vt);
    return vt;
}

static BackendVt vt_host;
static pthread_once_t vt_built = PTHREAD_ONCE_INIT;
static void build_vt(void) { vt_host = host_vt(); }

Backend *host_backend_create(const BackendOptions *o, bool ref, Err *err) {
    Isa isa = ISA_REF;
    if (!ref) {
        if (o->cpu.isa < 0) isa = isa_best();
        else if (o->cpu.isa >= ISA_COUNT || !isa_supported((Isa)o->cpu.isa))
            return err_set(err, "ISA %s: this CPU does not support it", isa_name((Isa)o->cpu.isa)), NULL;
        else isa = (Isa)o->cpu.isa;
    }
    pthread_once(&vt_built, build_vt);
    uint32_t kv_k, kv_v;
    if (kv_type_format(o->kv_k, o->mode, &kv_k, err) || kv_type_format(o->kv_v, o->mode, &kv_v, err)) return NULL;
    HostBackend *hb = calloc(1, sizeof *hb);
    if (!hb) return err_set(err, "out of memory"), NULL;
    const int nt = o->n_threads > 0 ? o->n_threads : pool_default_threads();
    if (nt > 1 && !(hb->pool = pool_create(nt, err))) {
        free(hb);
        return NULL;
    }
    hb->be.vt = &vt_host;
    snprintf(hb->be.name, sizeof hb->be.name, "%s", ref ? "ref" : isa_name(isa));
    hb->be.mode = o->mode;
    hb->be.kv_k = kv_k;
    hb->be.kv_v = kv_v;
    hb->be.n_threads = pool_size(hb->pool);
    hb->isa = isa;
    hb->ops = ref ? &ops_ref : ops_cpu(isa);
    hb->oc = (OpCtx){o->mode, hb->pool, NULL, 0};
    hb->pack = o->cpu.pack && !ref;
    hb->progress = (HostProgress){o->progress, o->progress_user};
    return &hb->be;
}

/* ---- the device listing (deltallm devices) ------------------------------------------------------------------------ */

static void cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            c++;
            while (*c == ' ' || *c == '\t') c++;
            c[strcspn(c, "\n")] = 0;
            snprintf(buf, cap, "%s", c);
            break;
        }
    }
    fclose(f);
}

int host_devices(const BackendOptions *o, BackendDevice *out, int cap, Err *err) {
    if (cap > 0) {
        BackendDevice *d = &out[0];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "cpu");
        char model[160];
        cpu_name(model, sizeof model);
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(d->desc, sizeof d->desc, "%s (%ld threads, kernels: %s)", model, cpus, isa_name(isa_best()));
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        d->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    }
    return 1;
}
