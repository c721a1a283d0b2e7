/* vk_matmul.c — the matrix products of the Vulkan backend: get_rows (embedding lookup), matmul and the
 * fused MoE experts (moe_ffn), for every weight format with a kernel (shaders/dequant.glsl).
 *
 * Kernels (shaders/mm_*.comp), all F32 on dequantized weights in either arithmetic mode:
 *   mm_vec   the dequantizing GEMV: batches below tile_min_rows (decode), ≤ 8 tokens per work item
 *   mm_mat   the tiled GEMM: 64 rows × 32 tokens per workgroup, the weight tile dequantized once into shared
 *            memory per tile of tokens
 *   mm_coop  the same tile on tensor cores (VK_NV_cooperative_matrix, f16 inputs, f32 accumulation), where
 *            the device has them (64 × 64 tiles)
 * A product runs over work items (mm_common.glsl); a plain product has one per tile of tokens, an MoE layer
 * one per tile of each expert's tokens, written on the device by moe_group.comp and dispatched indirectly.
 * A matrix handed in by an expert provider (host bytes) is uploaded for that product. In decode an MoE layer's
 * down product also sums each row's experts with the routing weights (moe_ffn_combine: one workgroup per row over
 * its k experts), and the shared expert's down adds itself σ-gated and the residual (matmul_add_sigmoid). */
#include "backend/vulkan/vk_internal.h"

#include "gguf/format.h"

#include <string.h>

#define VEC_ROWS 16 /* mm_vec.comp */
#define MAT_ROWS 64 /* mm_mat.comp, mm_coop.comp */
#define MAT_TOKENS 32
#define COOP_TOKENS 64

typedef struct MatPush {
    uint64_t w, x, y, items, xidx, yidx, tab, estride;
    uint32_t cols, rows, T, ldx, ldy, row_bytes;
    float eps;
    uint32_t flags;
    uint64_t w2, y2;
    uint32_t rows2, row_bytes2;
    uint32_t k, n_expert; /* MM_COMBINE */
} MatPush;
_Static_assert(sizeof(MatPush) <= VK_PUSH_BYTES, "push constants");
/* mm_common.glsl */
enum { MM_ACC = 1, MM_SWIGLU = 2, MM_PAIR = 4, MM_XV4 = 8, MM_NORM = 16, MM_GNORM = 32, MM_COMBINE = 64, MM_SIGADD = 128 };
#define GN_HEADS 64 /* mm_vec.comp: MM_GNORM's heads per row at most */

/* MM_GNORM's gated norm of x: rmsnorm(x)·w·silu(z) per n-float head (z: rows like x's) */
typedef struct GNorm {
    BView z;
    const Weight *w;
    int n;
    float eps;
} GNorm;

typedef enum Kind { K_VEC, K_MAT, K_COOP } Kind;

static const VkFmtKernel kind_kernel[] = {VKF_MM_VEC, VKF_MM_MAT, VKF_MM_COOP};
static const int kind_rows[] = {VEC_ROWS, MAT_ROWS, MAT_ROWS};
static const int kind_tokens[] = {VK_VEC_TOKENS, MAT_TOKENS, COOP_TOKENS};

static Kind pick(const VkBackend *b, const Weight *w, int64_t tokens_per_item) {
    if (tokens_per_item < b->tile_min_rows) return K_VEC;
    return b->coop && vk_fmt_has(b->d, VKF_MM_COOP, w->type) ? K_COOP : K_MAT;
}

static uint64_t tab_addr(const VkBackend *b) { return b->d->tables->addr; }

/* an expert provider's matrix in host memory, uploaded in stream order */
static BView provided(VkBackend *b, const void *data, size_t bytes) {
    if (bytes > b->pscratch_bytes) {
        Err e = {{0}};
        if (b->pscratch) {
            vks_flush(b, &e);
            vk_buf_free(b->d, b->pscratch);
        }
        b->epoch++;
        b->pscratch = vk_buf_new(b->d, bytes, false, false, &e);
        b->pscratch_bytes = b->pscratch ? bytes : 0;
        if (!b->pscratch) {
            vks_fail(b, "expert upload of %zu MiB: %s", bytes >> 20, e.msg);
            b->pscratch = vk_buf_new(b->d, 4096, false, false, &e);
            ASSERT(b->pscratch);
            return (BView){b->pscratch, 0};
        }
    }
    const BView v = {b->pscratch, 0};
    vks_upload(b, v, data, bytes);
    return v;
}

/* y = W·x (flags 0), y += W·x (MM_ACC: every kernel), y = silu(W·x)·(W2·x) (MM_SWIGLU, w2: mm_vec only),
 * y = W·x and a2->y = W2·x (MM_PAIR: mm_vec only; W2 of the same width, any rows). W2 in another format than
 * W takes mm_vec's two-format variant (fusable() says where one exists). */
static void matmul(VkBackend *b, const MatArgs *a, uint32_t flags, const MatArgs *a2, const GNorm *gn) {
    const Weight *w = a->w;
    BView wv = a->data ? provided(b, a->data, w->bytes) : vk_weight(b, w, a->expert);
    BView wv2 = a2 ? vk_weight(b, a2->w, a2->expert) : (BView){0};
    int64_t rows = w->rows, rows2 = a2 ? a2->w->rows : 0;
    if (a->o1 > 0) {
        ASSERT(a->o0 >= 0 && a->o0 < a->o1 && a->o1 <= w->rows && !(flags & MM_PAIR));
        wv.off += (size_t)a->o0 * w->row_bytes;
        wv2.off += a2 ? (size_t)a->o0 * a2->w->row_bytes : 0;
        rows = rows2 = a->o1 - a->o0;
    }
    if (a->T <= 0) return;
    const Kind k = pick(b, w, a->T);
    ASSERT(!a2 || k == K_VEC);
    ASSERT(!a->x_norm || (k == K_VEC && !a->data));
    ASSERT(!gn || (k == K_VEC && !a->data && !a2 && !a->x_norm && w->cols % gn->n == 0 && w->cols / gn->n <= GN_HEADS));
    const uint64_t x = va(a->x);
    if (x % 16 == 0 && w->cols % 4 == 0) flags |= MM_XV4;
    if (a->x_norm) flags |= MM_NORM;
    if (gn) flags |= MM_GNORM;
    const Weight *nw = gn ? gn->w : a->x_norm;
    const MatPush p = {va(wv), x, va(a->y), 0, 0, 0, tab_addr(b), nw ? va(vk_weight(b, nw, -1)) : 0,
                       (uint32_t)w->cols, (uint32_t)rows, (uint32_t)a->T, (uint32_t)w->cols, (uint32_t)rows,
                       (uint32_t)w->row_bytes, gn ? gn->eps : a->x_eps, flags, a2 ? va(wv2) : gn ? va(gn->z) : 0,
                       (flags & MM_PAIR) ? va(a2->y) : 0, (uint32_t)(gn ? gn->n : rows2),
                       (uint32_t)(a2 ? a2->w->row_bytes : w->row_bytes), 0, 0};
    const int64_t span_rows = (flags & MM_PAIR) && rows2 > rows ? rows2 : rows;
    const uint32_t gx = (uint32_t)((span_rows + kind_rows[k] - 1) / kind_rows[k]);
    const uint32_t gy = (uint32_t)((a->T + kind_tokens[k] - 1) / kind_tokens[k]);
    VkAcc acc[4] = {acc_r(a->x, 4 * (uint64_t)a->T * (uint64_t)w->cols), acc_w(a->y, 4 * (uint64_t)a->T * (uint64_t)rows)};
    int n = 2;
    if (a->data) acc[n++] = acc_r(wv, (uint64_t)rows * w->row_bytes); /* uploaded in the stream */
    if (flags & MM_PAIR) acc[n++] = acc_w(a2->y, 4 * (uint64_t)a->T * (uint64_t)rows2);
    if (gn) acc[n++] = acc_r(gn->z, 4 * (uint64_t)a->T * (uint64_t)w->cols);
    const VkPipeline pipe = a2 && a2->w->type != w->type ? vk_pair_pipe(b->d, w->type, a2->w->type)
                                                         : vk_fmt_pipe(b->d, kind_kernel[k], w->type);
    vks_dispatch_acc(b, pipe, &p, sizeof p, gx, gy, 1, acc, n);
}

/* two products of one width that one mm_vec dispatch can take: the vector kernel, no provided bytes, one format or
 * a two-format variant for theirs */
static bool fusable(const VkBackend *b, const MatArgs *a, const MatArgs *c) {
    if (pick(b, a->w, a->T) != K_VEC || a->data || c->data || a->w->cols != c->w->cols) return false;
    if (a->w->type == c->w->type) return a->w->row_bytes == c->w->row_bytes;
    return vk_pair_has(b->d, a->w->type, c->w->type);
}

static void v_matmul(Backend *be, const MatArgs *a) { matmul(vkb(be), a, 0, NULL, NULL); }
static void v_matmul_add(Backend *be, const MatArgs *a) { matmul(vkb(be), a, MM_ACC, NULL, NULL); }

/* y += W·gated_norm(x, z) in one mm_vec dispatch (decode: the vector kernel; at most GN_HEADS heads a row) */
static bool v_matmul_add_gated(Backend *be, const MatArgs *a, BView z, const Weight *w, int n, float eps) {
    VkBackend *b = vkb(be);
    if (pick(b, a->w, a->T) != K_VEC || a->data || a->o1 > 0 || a->x_norm || n <= 0 || a->w->cols % n ||
        a->w->cols / n > GN_HEADS)
        return false;
    const GNorm gn = {z, w, n, eps};
    matmul(b, a, MM_ACC, NULL, &gn);
    return true;
}

/* y += (W·x)·σ(g[t]) per row t, then res += y where res is given, in one mm_vec dispatch (MM_SIGADD: the shared
 * expert's down, its gate and the residual; the epilogue has add_scaled's and add's expressions): decode, the vector
 * kernel, no provided bytes, no folded norm */
static bool v_matmul_add_sigmoid(Backend *be, const MatArgs *a, BView g, BView res) {
    VkBackend *b = vkb(be);
    const Weight *w = a->w;
    if (b->moe_fuse_off || a->T <= 0 || pick(b, w, a->T) != K_VEC || a->data || a->o1 > 0 || a->x_norm) return false;
    const uint64_t x = va(a->x), T = (uint64_t)a->T;
    const uint32_t flags = MM_SIGADD | (x % 16 == 0 && w->cols % 4 == 0 ? MM_XV4 : 0);
    const MatPush p = {va(vk_weight(b, w, a->expert)), x, va(a->y), 0, 0, 0, tab_addr(b), 0, (uint32_t)w->cols,
                       (uint32_t)w->rows, (uint32_t)a->T, (uint32_t)w->cols, (uint32_t)w->rows, (uint32_t)w->row_bytes,
                       0.0f, flags, va(g), res.buf ? va(res) : 0, 0, (uint32_t)w->row_bytes, 0, 0};
    const uint64_t ybytes = 4 * T * (uint64_t)w->rows;
    VkAcc acc[4] = {acc_r(a->x, 4 * T * (uint64_t)w->cols), acc_w(a->y, ybytes), acc_r(g, 4 * T)};
    int n = 3;
    if (res.buf) acc[n++] = acc_w(res, ybytes);
    vks_dispatch_acc(b, vk_fmt_pipe(b->d, VKF_MM_VEC, w->type), &p, sizeof p, (uint32_t)((w->rows + VEC_ROWS - 1) / VEC_ROWS),
                     (uint32_t)((T + VK_VEC_TOKENS - 1) / VK_VEC_TOKENS), 1, acc, n);
    return true;
}

/* two products of one input in one pass where both take the vector kernel (one width; one format, or two with a
 * two-format variant) */
static void v_matmul_pair(Backend *be, const MatArgs *a, const MatArgs *c) {
    VkBackend *b = vkb(be);
    if (fusable(b, a, c) && a->o1 == 0 && c->o1 == 0 && a->T == c->T && a->x.buf == c->x.buf && a->x.off == c->x.off &&
        a->x_norm == c->x_norm && a->x_eps == c->x_eps) {
        matmul(b, a, MM_PAIR, c, NULL);
        return;
    }
    matmul(b, a, 0, NULL, NULL);
    matmul(b, c, 0, NULL, NULL);
}

/* gate and up in one pass where both take the vector kernel (decode; one format, or two with a two-format
 * variant); else the three ops */
static void v_matmul_swiglu(Backend *be, const MatArgs *g, const MatArgs *u) {
    VkBackend *b = vkb(be);
    const bool one = fusable(b, g, u) && g->w->rows == u->w->rows && g->o0 == u->o0 && g->o1 == u->o1 && g->T == u->T &&
                     g->x.buf == u->x.buf && g->x.off == u->x.off && g->x_norm == u->x_norm && g->x_eps == u->x_eps;
    if (one) {
        matmul(b, g, MM_SWIGLU, u, NULL);
        return;
    }
    matmul(b, g, 0, NULL, NULL);
    matmul(b, u, 0, NULL, NULL);
    const int n = (int)(g->o1 > 0 ? g->o1 - g->o0 : g->w->rows);
    vk_swiglu(b, g->y, g->y, u->y, (int)g->T, n);
}

typedef struct GetRowsPush {
    uint64_t w, ids, out, tab;
    uint32_t row_bytes, cols, n;
} GetRowsPush;

static void v_get_rows(Backend *be, const Weight *w, BView ids, int n, BView out) {
    VkBackend *b = vkb(be);
    const GetRowsPush p = {va(vk_weight(b, w, -1)), va(ids), va(out), tab_addr(b), (uint32_t)w->row_bytes, (uint32_t)w->cols,
                           (uint32_t)n};
    const uint32_t items = (uint32_t)((w->cols + 31) / 32);
    const VkAcc acc[2] = {acc_r(ids, 4 * (uint64_t)n), acc_w(out, 4 * (uint64_t)n * (uint64_t)w->cols)};
    vks_dispatch_acc(b, vk_fmt_pipe(b->d, VKF_GET_ROWS, w->type), &p, sizeof p, (items + 63) / 64, (uint32_t)n, 1, acc, 2);
}

/* ---- the routed experts of an MoE layer, grouped on the device ---------------------------------------------------- */

typedef struct GroupPush {
    uint64_t sel, work;
    uint32_t n, k, nE, tile, groups_a, groups_b;
    uint32_t off_s, off_items, off_args;
} GroupPush;

static void expert_product(VkBackend *b, Kind k, const Weight *w, uint64_t x, uint64_t xidx, uint32_t ldx, uint64_t y,
                           uint64_t yidx, uint32_t ldy, uint64_t items, BView args, const VkAcc *acc, int n_acc) {
    const MatPush p = {va(vk_weight(b, w, 0)), x, y, items, xidx, yidx, tab_addr(b), w->expert_stride, (uint32_t)w->cols,
                       (uint32_t)w->rows, 0, ldx, ldy, (uint32_t)w->row_bytes, 0.0f, (x % 16 == 0 && ldx % 4 == 0) ? MM_XV4 : 0,
                       0, 0, 0, (uint32_t)w->row_bytes, 0, 0};
    vks_dispatch_indirect(b, vk_fmt_pipe(b->d, kind_kernel[k], w->type), &p, sizeof p, args, acc, n_acc);
}

/* The routed experts: moe_group lists the selection by expert, then gate + up + SwiGLU and down run over its work
 * items (indirect dispatches). With wt (moe_ffn_combine) the down product is instead one workgroup per row over
 * its k experts, writing Σ_s wt·down in slot order to out (MM_COMBINE): taken where the vector kernel is picked, at
 * most VK_VEC_TOKENS rows and k ≤ VK_VEC_TOKENS (decode; a larger batch would read an expert's rows once per row
 * routed to it instead of once per work item) and not tuned off (moefuse=0); else false, nothing recorded. */
static bool moe_ffn(VkBackend *b, const MoeArgs *a, const BView *wt, BView out) {
    const uint32_t n = (uint32_t)a->R * (uint32_t)a->k, nE = (uint32_t)a->n_expert;
    const uint32_t E = (uint32_t)a->gate->cols, F = (uint32_t)a->gate->rows;
    ASSERT(a->down->cols == F && a->down->rows == E);
    /* tokens per expert on average decide the kernel (every expert's items have the same tile) */
    const Kind k = pick(b, a->gate, (int64_t)n / (nE ? nE : 1) >= 16 ? a->R : 1);
    if (wt && (b->moe_fuse_off || k != K_VEC || a->R > VK_VEC_TOKENS || a->k > VK_VEC_TOKENS || a->k < 1 || nE > 1024))
        return false;
    if (nE > 1024) {
        vks_fail(b, "an MoE layer of %u experts: the Vulkan backend takes at most 1024", nE);
        return true;
    }
    const uint32_t tile = (uint32_t)kind_tokens[k], rows = (uint32_t)kind_rows[k];
    const uint32_t off_s = n, off_items = 2 * n, off_args = (2 * n + 3 * (n + nE) + 3) & ~3u;
    ASSERT(off_args + 8 <= MOE_WORK_INTS(a->R, a->k, a->n_expert));
    const GroupPush g = {va(a->sel), va(a->work), n, (uint32_t)a->k, nE, tile, (F + rows - 1) / rows, (E + rows - 1) / rows,
                         off_s, off_items, off_args};
    const uint64_t wbytes = 4 * (uint64_t)MOE_WORK_INTS(a->R, a->k, a->n_expert);
    const VkAcc ga[2] = {acc_r(a->sel, 4 * (uint64_t)n), acc_w(a->work, wbytes)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_MOE_GROUP), &g, sizeof g, 1, 1, 1, ga, 2);
    const uint64_t work = va(a->work), items = work + 4ull * off_items, sidx = work + 4ull * off_s;
    const BView args_a = bv_f32(a->work, off_args), args_b = bv_f32(a->work, off_args + 4);
    const uint64_t nf = 4 * (uint64_t)n * F;
    const VkAcc wr = acc_r(a->work, wbytes), xr = acc_r(a->x, 4 * (uint64_t)a->R * E);
    const VkAcc gacc[3] = {wr, xr, acc_w(a->gate_out, nf)}, uacc[3] = {wr, xr, acc_w(a->up_out, nf)};
    const VkAcc dacc[3] = {wr, acc_r(a->gate_out, nf), acc_w(a->eo, 4 * (uint64_t)n * E)};
    /* the activations at their grouped places, or with wt at their (row, slot) places, which the combined down reads */
    const uint64_t act_at = wt ? sidx : 0;
    /* decode (the vector kernel): gate and up rows of each selected expert dotted by the same subgroup and
     * silu(g)·u written, one dispatch over all of them (MM_SWIGLU, the unfused ops' dot products and swiglu: the
     * same bits); else the two products and the swiglu */
    if (k == K_VEC && !b->fuse_off && a->gate->type == a->up->type && a->gate->row_bytes == a->up->row_bytes &&
        a->gate->expert_stride == a->up->expert_stride && a->up->rows == F && a->up->cols == E) {
        const VkAcc facc[3] = {wr, xr, acc_w(a->gate_out, nf)};
        const MatPush p = {va(vk_weight(b, a->gate, 0)), va(a->x), va(a->gate_out), items, work, act_at, tab_addr(b),
                           a->gate->expert_stride, E, F, 0, E, F, (uint32_t)a->gate->row_bytes, 0.0f,
                           MM_SWIGLU | ((va(a->x) % 16 == 0 && E % 4 == 0) ? MM_XV4 : 0), va(vk_weight(b, a->up, 0)), 0, 0,
                           (uint32_t)a->up->row_bytes, 0, 0};
        vks_dispatch_indirect(b, vk_fmt_pipe(b->d, kind_kernel[k], a->gate->type), &p, sizeof p, args_a, facc, 3);
    } else {
        expert_product(b, k, a->gate, va(a->x), work, E, va(a->gate_out), act_at, F, items, args_a, gacc, 3);
        expert_product(b, k, a->up, va(a->x), work, E, va(a->up_out), act_at, F, items, args_a, uacc, 3);
        vk_swiglu(b, a->gate_out, a->gate_out, a->up_out, (int)n, (int)F);
    }
    if (!wt) {
        expert_product(b, k, a->down, va(a->gate_out), 0, F, va(a->eo), sidx, E, items, args_b, dacc, 3);
        return true;
    }
    /* row t's k slots dotted with their experts' down rows as the down dispatch dots them (x at the same alignment,
     * so the same MM_XV4 form), summed as moe_combine sums them */
    const uint64_t x = va(a->gate_out);
    const MatPush p = {va(vk_weight(b, a->down, 0)), x, va(out), 0, va(a->sel), 0, tab_addr(b), a->down->expert_stride, F,
                       E, (uint32_t)a->R, F, E, (uint32_t)a->down->row_bytes, 0.0f,
                       MM_COMBINE | ((x % 16 == 0 && F % 4 == 0) ? MM_XV4 : 0), va(*wt), 0, 0,
                       (uint32_t)a->down->row_bytes, (uint32_t)a->k, nE};
    const VkAcc cacc[4] = {acc_r(a->gate_out, nf), acc_r(a->sel, 4 * (uint64_t)n), acc_r(*wt, 4 * (uint64_t)n),
                           acc_w(out, 4 * (uint64_t)a->R * E)};
    vks_dispatch_acc(b, vk_fmt_pipe(b->d, VKF_MM_VEC, a->down->type), &p, sizeof p, (E + VEC_ROWS - 1) / VEC_ROWS,
                     (uint32_t)a->R, 1, cacc, 4);
    return true;
}

static void v_moe_ffn(Backend *be, const MoeArgs *a) { moe_ffn(vkb(be), a, NULL, (BView){0}); }
static bool v_moe_ffn_combine(Backend *be, const MoeArgs *a, BView w, BView out) { return moe_ffn(vkb(be), a, &w, out); }

void vk_matmul_install(BackendVt *vt) {
    vt->matmul = v_matmul;
    vt->matmul_add = v_matmul_add;
    vt->matmul_add_gated = v_matmul_add_gated;
    vt->matmul_swiglu = v_matmul_swiglu;
    vt->matmul_pair = v_matmul_pair;
    vt->get_rows = v_get_rows;
    vt->moe_ffn = v_moe_ffn;
    vt->moe_ffn_combine = v_moe_ffn_combine;
    vt->matmul_add_sigmoid = v_matmul_add_sigmoid;
}
