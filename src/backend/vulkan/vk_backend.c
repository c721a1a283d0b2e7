/* vk_backend.c — the Vulkan backend's vtable (backend.h): create / destroy, memory, scratch, the weights
 * (bind uploads the whole registry once), statistics and timestamps. The ops are in vk_ops.c, vk_matmul.c
 * and vk_seq.c; the stream in vk_stream.c.
 *
 * Weights: tensors that share bytes (a fused gate_up stack is two registry entries) are uploaded once; the
 * rest are packed into arenas of up to 1 GiB in the file's layout (the kernels read GGUF blocks as they
 * are), so a model is a handful of allocations. A format without kernels is refused here, naming the tensor
 * and the format: nothing falls back to the CPU in the middle of a pass. */
#include "backend/vulkan/vk_backend.h"
#include "backend/vulkan/vk_internal.h"

#include "backend/vulkan/vk_tables.h"
#include "gguf/format.h"
#include "gguf/iq_tables.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ARENA_BYTES ((size_t)1 << 30)

/* ---- memory ------------------------------------------------------------------------------------------------------ */

static BBuf *v_alloc(Backend *be, size_t bytes, Err *err) {
    VkBackend *b = vkb(be);
    BBuf *buf = vk_buf_new(b->d, bytes ? bytes : 4, false, true, err);
    b->epoch++; /* recorded passes hold addresses: a new buffer may reuse a freed one's */
    if (buf && !buf->map) vks_fill(b, (BView){buf, 0}, 0, ((bytes + 255) & ~(size_t)255) + 256);
    return buf;
}

static void v_free(Backend *be, BBuf *buf) {
    if (!buf) return;
    VkBackend *b = vkb(be);
    Err e = {{0}};
    if (b->recording || b->in_flight) vks_flush(b, &e); /* commands may still use it */
    vk_buf_free(b->d, buf);
    b->epoch++;
}

static bool v_wrap_host(Backend *be, void *host, size_t bytes, BView *out) {
    (void)be, (void)host, (void)bytes, (void)out;
    return false;
}

BView vk_scratch(VkBackend *b, size_t bytes) {
    if (bytes > b->scratch_bytes) {
        Err e = {{0}};
        if (b->scratch) {
            if (b->recording || b->in_flight) vks_flush(b, &e);
            vk_buf_free(b->d, b->scratch);
        }
        const size_t want = bytes + bytes / 4;
        b->epoch++;
        b->scratch = vk_buf_new(b->d, want, false, false, &e);
        b->scratch_bytes = b->scratch ? want : 0;
        if (!b->scratch) {
            vks_fail(b, "Vulkan scratch of %zu MiB: %s", want >> 20, e.msg);
            b->scratch = vk_buf_new(b->d, 4096, false, false, &e); /* keep the ops' addresses valid */
            ASSERT(b->scratch);
        }
    }
    return (BView){b->scratch, 0};
}

static int v_reserve(Backend *be, const BackendSizes *s, Err *err) {
    VkBackend *b = vkb(be);
    /* the kernels' limits (a model outside them is refused here, not stopped inside an op): attention keeps a
     * head of q in shared memory (attention.comp MAX_D), the recurrent delta rule a state row in 32 registers
     * per lane (dn_recurrent.comp MAX_PER_LANE) */
    if (s->head_dim > 512)
        return err_set(err, "attention head dim %d: the Vulkan backend's attention kernel takes at most 512", s->head_dim);
    if (s->d_k != s->d_v || s->d_k > 32 * (int)b->d->subgroup_min)
        return err_set(err, "delta-net heads of %d x %d: the Vulkan backend takes square heads of at most %u on %s", s->d_k,
                       s->d_v, 32 * b->d->subgroup_min, b->d->name);
    /* the chunked delta rule keeps U and W of a chunk per head: 2 · 64 · (Hv·d) floats, Hv·d ≤ max_cols; the
     * attention split over the keys its partials, T·S ≤ VK_ATTN_SPLIT_ROWS rows of H·(d + 2) floats, H·d ≤ max_cols */
    size_t need = (size_t)2 * 64 * (size_t)s->max_cols * 4 + 4096;
    if (s->head_dim > 0 && b->attn_split_min > 0) {
        const size_t heads = (size_t)s->max_cols / (size_t)s->head_dim + 1;
        const size_t attn = (size_t)VK_ATTN_SPLIT_ROWS * heads * ((size_t)s->head_dim + 2) * 4;
        if (attn > need) need = attn;
    }
    vk_scratch(b, need);
    if (b->failed) {
        b->failed = false;
        return err_set(err, "%s", b->fail_msg);
    }
    return 0;
}

/* ---- weights ------------------------------------------------------------------------------------------------------ */

static size_t weight_span(const Weight *w) { return w->n_expert ? (size_t)w->n_expert * w->expert_stride : w->bytes; }

typedef struct Piece {
    uintptr_t b, e; /* host range */
    int arena;
    size_t off;     /* in its arena */
} Piece;

static int by_host(const void *x, const void *y) {
    const Weight *const *a = x, *const *b = y;
    const uintptr_t p = (uintptr_t)(*a)->host, q = (uintptr_t)(*b)->host;
    return p < q ? -1 : p > q;
}

/* a matrix the kernels multiply or look up (vectors are F32 and read directly) */
static bool is_matrix(const Weight *w) { return w->rows > 1 || w->n_expert > 0 || w->type != FMT_F32; }

static int check_formats(VkBackend *b, const Weight *w, int n, Err *err) {
    for (int i = 0; i < n; i++) {
        if (!is_matrix(&w[i])) continue;
        const bool lookup = w[i].looked_up;
        const bool ok = vk_fmt_has(b->d, VKF_MM_VEC, w[i].type) && vk_fmt_has(b->d, VKF_MM_MAT, w[i].type) &&
                        (!lookup || vk_fmt_has(b->d, VKF_GET_ROWS, w[i].type));
        if (!ok)
            return err_set(err, "tensor '%s' is %s, a format the Vulkan backend has no kernel for", w[i].name,
                           format_name(w[i].type));
    }
    return 0;
}

static int upload_tables(VkBackend *b, Err *err) {
    VkDev *d = b->d;
    pthread_mutex_lock(&d->lock);
    BBuf *t = d->tables;
    pthread_mutex_unlock(&d->lock);
    if (t) return 0;
    uint32_t *h = calloc(VKT_WORDS, 4);
    if (!h) return err_set(err, "out of memory");
    for (int i = 0; i < 128; i++) h[VKT_KSIGNS + i / 4] |= (uint32_t)ksigns_iq2xs[i] << (8 * (i % 4));
#define U64(off, tab, n)                                                                                                   \
    for (int i = 0; i < (n); i++) h[(off) + 2 * i] = (uint32_t)tab[i], h[(off) + 2 * i + 1] = (uint32_t)(tab[i] >> 32);
    U64(VKT_IQ2XXS, iq2xxs_grid, 256)
    U64(VKT_IQ2XS, iq2xs_grid, 512)
    U64(VKT_IQ2S, iq2s_grid, 1024)
    U64(VKT_IQ1S, iq1s_grid, 2048)
#undef U64
    for (int i = 0; i < 256; i++) h[VKT_IQ3XXS + i] = iq3xxs_grid[i];
    for (int i = 0; i < 512; i++) h[VKT_IQ3S + i] = iq3s_grid[i];
    for (int i = 0; i < 16; i++) h[VKT_KV_IQ4NL + i] = (uint32_t)(int32_t)kvalues_iq4nl[i];
    for (int i = 0; i < 16; i++) h[VKT_KV_MXFP4 + i] = (uint32_t)(int32_t)kvalues_mxfp4[i];
    t = vk_buf_new(d, VKT_WORDS * 4, false, false, err);
    int rc = -1;
    if (t) {
        vks_upload(b, (BView){t, 0}, h, VKT_WORDS * 4);
        rc = vks_flush(b, err);
    }
    free(h);
    if (rc) {
        vk_buf_free(d, t);
        return -1;
    }
    pthread_mutex_lock(&d->lock);
    if (!d->tables) d->tables = t, t = NULL;
    pthread_mutex_unlock(&d->lock);
    vk_buf_free(d, t); /* another backend was first */
    return 0;
}

static int v_bind(Backend *be, const Weight *w, int n, Err *err) {
    VkBackend *b = vkb(be);
    if (b->wv) return err_set(err, "this backend already holds a model's weights");
    if (check_formats(b, w, n, err)) return -1;
    const Weight **order = malloc(sizeof *order * (size_t)(n > 0 ? n : 1));
    Piece *pc = malloc(sizeof *pc * (size_t)(n > 0 ? n : 1));
    int *piece_of = malloc(sizeof *piece_of * (size_t)(n > 0 ? n : 1));
    b->wv = calloc((size_t)(n > 0 ? n : 1), sizeof *b->wv);
    if (!order || !pc || !piece_of || !b->wv) {
        free(order), free(pc), free(piece_of);
        return err_set(err, "out of memory");
    }
    for (int i = 0; i < n; i++) order[i] = &w[i], ASSERT(w[i].id == i);
    qsort(order, (size_t)n, sizeof *order, by_host);
    /* pieces: overlapping host ranges merged (tensors sharing bytes), in address order */
    int np = 0;
    for (int i = 0; i < n; i++) {
        const uintptr_t lo = (uintptr_t)order[i]->host, hi = lo + weight_span(order[i]);
        if (np && lo < pc[np - 1].e) {
            if (hi > pc[np - 1].e) pc[np - 1].e = hi;
        } else {
            pc[np++] = (Piece){lo, hi, 0, 0};
        }
        piece_of[order[i]->id] = np - 1;
    }
    /* arenas */
    const size_t cap = ARENA_BYTES < b->d->max_alloc / 2 ? ARENA_BYTES : (size_t)(b->d->max_alloc / 2);
    size_t at = 0, total = 0;
    int na = 0;
    size_t arena_bytes[4096];
    for (int p = 0; p < np; p++) {
        const size_t sz = pc[p].e - pc[p].b;
        if (na == 0 || at + sz > cap) {
            if (na == (int)(sizeof arena_bytes / sizeof arena_bytes[0])) {
                free(order), free(pc), free(piece_of);
                return err_set(err, "too many weight arenas");
            }
            arena_bytes[na++] = 0;
            at = 0;
        }
        pc[p].arena = na - 1;
        pc[p].off = at;
        at = (at + sz + 255) & ~(size_t)255;
        arena_bytes[na - 1] = at;
        total += sz;
    }
    b->wbufs = calloc((size_t)(na > 0 ? na : 1), sizeof *b->wbufs);
    int rc = b->wbufs ? 0 : err_set(err, "out of memory");
    for (int a = 0; rc == 0 && a < na; a++) {
        if (!(b->wbufs[a] = vk_buf_new(b->d, arena_bytes[a], false, false, err))) {
            err_prefix(err, "the weights (%zu MiB) on %s", total >> 20, b->d->name);
            rc = -1;
        }
        b->n_wbufs = a + 1;
    }
    /* upload, piece by piece, with progress */
    size_t done = 0, last = 0;
    if (rc == 0 && b->progress) b->progress(b->progress_user, "upload", 0, total);
    for (int p = 0; rc == 0 && p < np; p++) {
        const size_t sz = pc[p].e - pc[p].b;
        for (size_t o = 0; o < sz; o += (size_t)8 << 20) {
            const size_t m = sz - o < ((size_t)8 << 20) ? sz - o : (size_t)8 << 20;
            vks_upload(b, (BView){b->wbufs[pc[p].arena], pc[p].off + o}, (const uint8_t *)pc[p].b + o, m);
            done += m;
            if (b->progress && done - last >= ((size_t)64 << 20)) b->progress(b->progress_user, "upload", done, total), last = done;
        }
    }
    if (rc == 0) rc = vks_flush(b, err);
    if (rc == 0 && b->progress) b->progress(b->progress_user, "upload", total, total);
    for (int i = 0; rc == 0 && i < n; i++) {
        const Piece *q = &pc[piece_of[i]];
        b->wv[i] = (BView){b->wbufs[q->arena], q->off + ((uintptr_t)w[i].host - q->b)};
    }
    b->h2d -= total; /* a load, not traffic of the passes */
    b->weight_bytes = total;
    free(order), free(pc), free(piece_of);
    if (rc == 0) rc = upload_tables(b, err);
    if (rc) return -1;
    b->weights = w;
    b->n_weights = n;
    return 0;
}

BView vk_weight(VkBackend *b, const Weight *w, int expert) {
    ASSERT(b->wv && w->id >= 0 && w->id < b->n_weights);
    BView v = b->wv[w->id];
    if (expert > 0) v.off += (size_t)expert * w->expert_stride;
    return v;
}

static int v_make_resident(Backend *be, bool lock, Err *err) {
    (void)be, (void)lock, (void)err; /* the weights live in device memory since bind */
    return 0;
}

/* ---- statistics and timestamps ------------------------------------------------------------------------------------ */

static void v_stats(const Backend *be, BackendStats *out) {
    const VkBackend *b = (const VkBackend *)be;
    out->h2d_bytes = b->h2d;
    out->d2h_bytes = b->d2h;
    out->submits = b->n_submits;
    out->device_weight_bytes = b->weight_bytes;
    out->f16_products = b->coop;
    out->dispatches = b->n_dispatch;
    out->barriers = b->n_barrier;
    out->host_ns = b->host_ns;
    out->recorded = b->n_recorded;
    out->replays = b->n_replays;
}

static void v_mark(Backend *be, int tag) { vks_mark(vkb(be), tag); }

static int v_marks(Backend *be, int *tags, double *seconds, int cap) {
    VkBackend *b = vkb(be);
    const int n = b->n_marks < cap ? b->n_marks : cap;
    for (int i = 0; i < n; i++) tags[i] = b->marks[i].tag, seconds[i] = (double)b->marks[i].ticks * b->d->ns_per_tick * 1e-9;
    b->n_marks = 0;
    return n;
}

/* ---- the copy probe (shaders/probe_copy.comp) -------------------------------------------------------------------- */

typedef struct ProbePush {
    uint64_t src, dst;
    uint32_t n4;
} ProbePush;

/* seconds of n_disp copies of bytes each (the device's clock where it has timestamps), or < 0 */
static double probe_pass(VkBackend *b, BBuf *src, BBuf *dst, size_t bytes, int n_disp, Err *err) {
    const ProbePush p = {src->addr, dst->addr, (uint32_t)(bytes / 16)};
    const uint32_t groups = 65535; /* the kernel strides over the rest */
    const int n_marks = b->n_marks;
    vks_mark(b, 0);
    const double t0 = now_s();
    for (int k = 0; k < n_disp; k++) vks_dispatch(b, vk_pipe(b->d, VK_PROBE_COPY), &p, sizeof p, groups, 1, 1);
    vks_mark(b, 1);
    if (vks_flush(b, err)) return -1;
    double t = now_s() - t0;
    if (b->n_marks == n_marks + 2) /* the device's own clock */
        t = (double)(b->marks[n_marks + 1].ticks - b->marks[n_marks].ticks) * b->d->ns_per_tick * 1e-9;
    b->n_marks = n_marks;
    return t;
}

static int v_copy_probe(Backend *be, size_t bytes, double *gbs, Err *err) {
    VkBackend *b = vkb(be);
    bytes &= ~(size_t)15;
    if (bytes > b->d->max_alloc / 2) bytes = (size_t)(b->d->max_alloc / 2) & ~(size_t)15;
    if (bytes / 16 > 0xffffffffu) bytes = (size_t)0xffffffffu * 16;
    BBuf *src = vk_buf_new(b->d, bytes, false, false, err), *dst = src ? vk_buf_new(b->d, bytes, false, false, err) : NULL;
    if (!dst) {
        vk_buf_free(b->d, src);
        return -1;
    }
    /* A first copy of 16 MiB sizes the timed ones: on a GPU each timed pass copies all the bytes (far more than
     * its caches); on a slow device (lavapipe copies at 0.2-0.4 GB/s) a pass is cut to about 0.25 s, not less
     * than 16 MiB, so the probe takes seconds there, not minutes. */
    size_t n = bytes < ((size_t)16 << 20) ? bytes : (size_t)16 << 20;
    const double tw = probe_pass(b, src, dst, n, 1, err);
    if (tw > 0) {
        const double per_byte = tw / (2.0 * (double)n), want = 0.25 / (8.0 * per_byte); /* 4 copies, read + write */
        n = want >= (double)bytes ? bytes : want > (double)n ? ((size_t)want & ~(size_t)15) : n;
    }
    double best = 0;
    int rc = tw < 0 ? -1 : 0;
    for (int rep = 0; rc == 0 && rep < 6; rep++) { /* the first pass warms up; the best of the others counts */
        const double t = probe_pass(b, src, dst, n, 4, err);
        if (t < 0) rc = -1;
        else if (rep > 0 && t > 0 && 8.0 * (double)n / t / 1e9 > best) best = 8.0 * (double)n / t / 1e9;
    }
    vk_buf_free(b->d, src);
    vk_buf_free(b->d, dst);
    *gbs = best;
    return rc;
}

/* ---- create / destroy -------------------------------------------------------------------------------------------- */

static void v_destroy(Backend *be) {
    VkBackend *b = vkb(be);
    vks_destroy(b);
    for (int i = 0; i < b->n_wbufs; i++) vk_buf_free(b->d, b->wbufs[i]);
    vk_buf_free(b->d, b->scratch);
    vk_buf_free(b->d, b->pscratch);
    free(b->wbufs);
    free(b->wv);
    vk_dev_put(b->d);
    free(b);
}

/* the second without the optional fused ops (tune fuse=0); the third without dn_prep_scan only (tune prepscan=0:
 * dn_prep and the recurrence as two dispatches, whose GPU cost against the merged one is not measured yet) */
static BackendVt vt_vulkan, vt_unfused, vt_no_prep_scan;
static pthread_once_t vt_once = PTHREAD_ONCE_INIT;

static void build_vt(void) {
    BackendVt *vt = &vt_vulkan;
    vt->destroy = v_destroy;
    vt->reserve = v_reserve;
    vt->alloc = v_alloc;
    vt->free = v_free;
    vt->wrap_host = v_wrap_host;
    vt->bind = v_bind;
    vt->make_resident = v_make_resident;
    vt->mark = v_mark;
    vt->marks = v_marks;
    vt->stats = v_stats;
    vt->copy_probe = v_copy_probe;
    vks_install(vt);
    vk_ops_install(vt);
    vk_vision_install(vt);
    vk_matmul_install(vt);
    vk_seq_install(vt);
    vt_no_prep_scan = *vt;
    vt_no_prep_scan.dn_prep_scan = NULL;
    vt_unfused = *vt;
    vt_unfused.matmul_add = NULL;
    vt_unfused.matmul_add_gated = NULL;
    vt_unfused.matmul_add_sigmoid = NULL;
    vt_unfused.moe_ffn_combine = NULL;
    vt_unfused.matmul_swiglu = NULL;
    vt_unfused.dn_prep = NULL;
    vt_unfused.dn_prep_scan = NULL;
    vt_unfused.matmul_pair = NULL;
    vt_unfused.attention_gated = NULL;
    vt_unfused.attn_prep = NULL;
}

/* BackendOptions.tune: "key=value,..." with coop, tile, chunk, dep (0: a barrier before every command), fuse
 * (0: the unfused ops), prepscan (0: dn_prep and the recurrence not merged), moefuse (0: MoE decode's down + combine
 * and the shared expert's down + gate + residual not merged), graph (0: no recorded passes kept, every pass
 * recorded) — the last five for comparisons —,
 * map (0: uploads and downloads through the staging ring even on host-visible memory: a discrete GPU's path) and
 * split (the keys above which decode's attention is split over the keys; 0: never) */
static int parse_tune(VkBackend *b, const char *s, Err *err) {
    while (s && *s) {
        char key[16];
        long v;
        int used = 0;
        if (sscanf(s, "%15[a-z]=%ld%n", key, &v, &used) != 2 || v < 0 || v > (1 << 20))
            return err_set(err, "Vulkan tuning '%s': expected key=value pairs (coop=0|1, tile=N, chunk=N, dep=0|1, fuse=0|1, "
                                "prepscan=0|1, moefuse=0|1, graph=0|1, map=0|1, split=N)", s);
        if (!strcmp(key, "coop")) b->coop = b->coop && v != 0;
        else if (!strcmp(key, "tile") && v >= 2) b->tile_min_rows = (int)v;
        else if (!strcmp(key, "chunk") && v >= 1) b->be.dn_chunk_min = (int)v;
        else if (!strcmp(key, "dep") && v <= 1) b->dep_off = v == 0;
        else if (!strcmp(key, "fuse") && v <= 1) b->fuse_off = v == 0;
        else if (!strcmp(key, "prepscan") && v <= 1) b->prep_scan_off = v == 0;
        else if (!strcmp(key, "moefuse") && v <= 1) b->moe_fuse_off = v == 0;
        else if (!strcmp(key, "graph") && v <= 1) b->graph_off = v == 0;
        else if (!strcmp(key, "map") && v <= 1) b->map_off = v == 0;
        else if (!strcmp(key, "split")) b->attn_split_min = (int)v;
        else return err_set(err, "Vulkan tuning: unknown or out-of-range '%s=%ld' (coop=0|1, tile>=2, chunk>=1, dep=0|1, fuse=0|1, "
                            "prepscan=0|1, moefuse=0|1, graph=0|1, map=0|1, split>=0)", key, v);
        s += used;
        if (*s == ',') s++;
        else if (*s) return err_set(err, "Vulkan tuning: unexpected '%s'", s);
    }
    return 0;
}

Backend *vk_backend_create(const BackendOptions *o, int index, Err *err) {
    if ((o->kv_k != KV_DEFAULT && o->kv_k != KV_F32) || (o->kv_v != KV_DEFAULT && o->kv_v != KV_F32)) /* the device's kernels read F32 */
        return err_set(err, "the Vulkan backend keeps the KV cache in F32 (-ctk f32 -ctv f32, or neither)"), NULL;
    pthread_once(&vt_once, build_vt);
    if (!vk_backend_load(o->device_lib, err)) return NULL;
    VkDev *d = vk_dev_get(index, err);
    if (!d) return NULL;
    VkBackend *b = calloc(1, sizeof *b);
    if (!b) {
        vk_dev_put(d);
        return err_set(err, "out of memory"), NULL;
    }
    b->d = d;
    b->be.vt = &vt_vulkan;
    snprintf(b->be.name, sizeof b->be.name, "vulkan:%d", index);
    b->be.mode = o->mode;
    b->be.n_threads = 1;
    b->progress = o->progress;
    b->progress_user = o->progress_user;
    /* the defaults (docs/VULKAN.md), then the caller's tuning */
    b->coop = d->coopmat;
    b->tile_min_rows = VK_VEC_TOKENS + 1;
    b->be.dn_chunk_min = VK_DN_CHUNK_MIN;
    b->attn_split_min = VK_ATTN_SPLIT_MIN;
    if (parse_tune(b, o->tune, err) || vks_init(b, err) || upload_tables(b, err)) {
        v_destroy(&b->be);
        return NULL;
    }
    if (b->fuse_off) b->be.vt = &vt_unfused;
    else {
        if (b->prep_scan_off) b->be.vt = &vt_no_prep_scan;
        /* the products fold the RMSNorm where they take the vector kernel (mm_vec's MM_NORM) */
        b->be.fold_norm_rows = b->tile_min_rows - 1 < VK_VEC_TOKENS ? b->tile_min_rows - 1 : VK_VEC_TOKENS;
    }
    return &b->be;
}
