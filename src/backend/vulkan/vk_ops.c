/* vk_ops.c — the row ops of the Vulkan backend: norms, gates, RoPE, KV append, routing, gather / scatter,
 * the weighted sums and the activations (and the vision tower's bias + GELU), each one dispatch of a small
 * kernel (shaders/eltwise.comp, norm.comp, rope.comp, dn_gates.comp, moe_route.comp). The push-constant structs
 * mirror the shaders' blocks field for field. */
#include "backend/vulkan/vk_internal.h"

#include <math.h>

enum { OP_ADD, OP_COPY, OP_SIGMOID, OP_SILU, OP_SWIGLU, OP_ADD_SCALED, OP_MUL_SIGMOID, OP_GATHER, OP_SCATTER, OP_COMBINE, OP_BIAS_ACT };

typedef struct EltPush {
    uint64_t a, b, c;
    uint32_t n, rows, heads, op, k;
    uint32_t a_row, a_head, b_row, b_head;
} EltPush;

#define WHOLE ((uint64_t)1 << 62) /* a range through the end of the buffer (rows chosen by an index) */

static void elt(VkBackend *b, const EltPush *p, const VkAcc *acc, int n_acc) {
    vks_dispatch_acc(b, vk_pipe(b->d, VK_ELTWISE), p, sizeof *p, cap65535(((uint64_t)p->n + 255) / 256), cap65535(p->rows),
                     cap65535(p->heads), acc, n_acc);
}
/* the a and b operands' extents of a plain strided elt op */
static VkAcc elt_a(BView v, const EltPush *p) { return acc_w(v, span(p->rows, p->a_row, p->heads, p->a_head, p->n)); }
static VkAcc elt_b(BView v, const EltPush *p) { return acc_r(v, span(p->rows, p->b_row, p->heads, p->b_head, p->n)); }

static void v_add(Backend *be, BView y, BView x, int64_t n) {
    ASSERT(n >= 0 && n < ((int64_t)1 << 32));
    const EltPush p = {va(y), va(x), 0, (uint32_t)n, 1, 1, OP_ADD, 0, 0, 0, 0, 0};
    const VkAcc a[2] = {elt_a(y, &p), elt_b(x, &p)};
    elt(vkb(be), &p, a, 2);
}

static void v_copy_rows(Backend *be, BView dst, int64_t ld_dst, BView src, int64_t ld_src, int rows, int n) {
    const EltPush p = {va(dst), va(src), 0, (uint32_t)n, (uint32_t)rows, 1, OP_COPY, 0, (uint32_t)ld_dst, 0, (uint32_t)ld_src, 0};
    const VkAcc a[2] = {elt_a(dst, &p), elt_b(src, &p)};
    elt(vkb(be), &p, a, 2);
}

static void v_sigmoid(Backend *be, BView x, int64_t n) {
    const EltPush p = {va(x), va(x), 0, (uint32_t)n, 1, 1, OP_SIGMOID, 0, 0, 0, 0, 0};
    const VkAcc a = elt_a(x, &p);
    elt(vkb(be), &p, &a, 1);
}

static void v_silu(Backend *be, BView x, BView y, int rows, int n) {
    const EltPush p = {va(y), va(x), 0, (uint32_t)n, (uint32_t)rows, 1, OP_SILU, 0, (uint32_t)n, 0, (uint32_t)n, 0};
    const VkAcc a[2] = {elt_a(y, &p), elt_b(x, &p)};
    elt(vkb(be), &p, a, 2);
}

void vk_swiglu(VkBackend *b, BView y, BView g, BView u, int rows, int n) {
    const EltPush p = {va(y), va(g), va(u), (uint32_t)n, (uint32_t)rows, 1, OP_SWIGLU, 0, (uint32_t)n, 0, (uint32_t)n, 0};
    const VkAcc a[3] = {elt_a(y, &p), elt_b(g, &p), elt_b(u, &p)};
    elt(b, &p, a, 3);
}
static void v_swiglu(Backend *be, BView g, BView u, BView y, int rows, int n) { vk_swiglu(vkb(be), y, g, u, rows, n); }

static void v_add_scaled(Backend *be, BView y, BView x, BView s, int rows, int n) {
    const EltPush p = {va(y), va(x), va(s), (uint32_t)n, (uint32_t)rows, 1, OP_ADD_SCALED, 0, (uint32_t)n, 0, (uint32_t)n, 0};
    const VkAcc a[3] = {elt_a(y, &p), elt_b(x, &p), acc_r(s, 4 * (uint64_t)rows)};
    elt(vkb(be), &p, a, 3);
}

static void v_mul_sigmoid(Backend *be, BView y, BView gate, const VecSet *s) {
    const EltPush p = {va(y), va(gate), 0, (uint32_t)s->n, (uint32_t)s->rows, (uint32_t)s->heads, OP_MUL_SIGMOID, 0,
                       (uint32_t)s->y_row, (uint32_t)s->y_head, (uint32_t)s->x_row, (uint32_t)s->x_head};
    const VkAcc a[2] = {elt_a(y, &p), elt_b(gate, &p)};
    elt(vkb(be), &p, a, 2);
}

static void v_gather_rows(Backend *be, BView dst, BView src, BView idx, int n, int width) {
    const EltPush p = {va(dst), va(src), va(idx), (uint32_t)width, (uint32_t)n, 1, OP_GATHER, 0, (uint32_t)width, 0,
                       (uint32_t)width, 0};
    const VkAcc a[3] = {elt_a(dst, &p), acc_r(src, WHOLE), acc_r(idx, 4 * (uint64_t)n)};
    elt(vkb(be), &p, a, 3);
}

static void v_scatter_rows(Backend *be, BView dst, BView src, BView idx, int n, int width) {
    const EltPush p = {va(dst), va(src), va(idx), (uint32_t)width, (uint32_t)n, 1, OP_SCATTER, 0, (uint32_t)width, 0,
                       (uint32_t)width, 0};
    const VkAcc a[3] = {acc_w(dst, WHOLE), elt_b(src, &p), acc_r(idx, 4 * (uint64_t)n)};
    elt(vkb(be), &p, a, 3);
}

static void v_moe_combine(Backend *be, BView out, BView eo, BView w, int R, int k, int width) {
    const EltPush p = {va(out), va(eo), va(w), (uint32_t)width, (uint32_t)R, 1, OP_COMBINE, (uint32_t)k, (uint32_t)width, 0,
                       (uint32_t)width, 0};
    const uint64_t rk = (uint64_t)R * (uint64_t)k;
    const VkAcc a[3] = {elt_a(out, &p), acc_r(eo, 4 * rk * (uint64_t)width), acc_r(w, 4 * rk)};
    elt(vkb(be), &p, a, 3);
}

/* the vision tower's bias (a bound vector) and activation over rows of n */
static void v_bias_act(Backend *be, BView y, const Weight *bias, int rows, int n, int act) {
    VkBackend *b = vkb(be);
    const EltPush p = {va(y), bias ? va(vk_weight(b, bias, -1)) : 0, 0, (uint32_t)n, (uint32_t)rows, 1, OP_BIAS_ACT, (uint32_t)act,
                       (uint32_t)n, 0, 0, 0};
    const VkAcc a = elt_a(y, &p);
    elt(b, &p, &a, 1);
}

static void v_kv_append(Backend *be, BView cache, int row0, BView src, int T, int width, bool v) {
    vks_copy(vkb(be), bv_f32(cache, (int64_t)row0 * width), src, sizeof(float) * (size_t)T * (size_t)width);
}

/* ---- norms --------------------------------------------------------------------------------------------------- */

enum { MODE_RMS, MODE_L2, MODE_GATED };

typedef struct NormPush {
    uint64_t x, y, w, z;
    uint32_t n, rows, heads, mode;
    uint32_t x_row, x_head, y_row, y_head;
    float eps;
} NormPush;

static void norm(VkBackend *b, const NormPush *p, BView x, BView y, BView z) {
    VkAcc a[4] = {acc_r(x, span(p->rows, p->x_row, p->heads, p->x_head, p->n)),
                  acc_w(y, span(p->rows, p->y_row, p->heads, p->y_head, p->n))};
    int n = 2;
    if (p->z) a[n++] = acc_w(z, span(p->rows, p->x_row, p->heads, p->x_head, p->n)); /* z ← silu(z) in place */
    vks_dispatch_acc(b, vk_pipe(b->d, VK_NORM), p, sizeof *p, p->heads, cap65535(p->rows), 1, a, n);
}

static void v_rms_norm(Backend *be, BView x, BView y, const Weight *w, const VecSet *s, float eps) {
    VkBackend *b = vkb(be);
    const NormPush p = {va(x), va(y), w ? va(vk_weight(b, w, -1)) : 0, 0, (uint32_t)s->n, (uint32_t)s->rows,
                        (uint32_t)s->heads, MODE_RMS, (uint32_t)s->x_row, (uint32_t)s->x_head, (uint32_t)s->y_row,
                        (uint32_t)s->y_head, eps};
    norm(b, &p, x, y, x);
}

static void v_l2_norm(Backend *be, BView x, BView y, const VecSet *s, float eps) {
    const NormPush p = {va(x), va(y), 0, 0, (uint32_t)s->n, (uint32_t)s->rows, (uint32_t)s->heads, MODE_L2,
                        (uint32_t)s->x_row, (uint32_t)s->x_head, (uint32_t)s->y_row, (uint32_t)s->y_head, eps};
    norm(vkb(be), &p, x, y, x);
}

static void v_gated_norm(Backend *be, BView o, BView z, const Weight *w, int rows, int n, float eps, BView out) {
    VkBackend *b = vkb(be);
    const NormPush p = {va(o), va(out), va(vk_weight(b, w, -1)), va(z), (uint32_t)n, (uint32_t)rows, 1, MODE_GATED,
                        (uint32_t)n, 0, (uint32_t)n, 0, eps};
    norm(b, &p, o, out, z);
}

/* ---- RoPE, gates, routing ----------------------------------------------------------------------------------------- */

typedef struct RopePush {
    uint64_t x, pos;
    uint32_t rows, heads, d, n_rot, row_stride, flags; /* 1 IMROPE, 2 (t, h, w) positions */
    float theta_scale, freq_scale;
    int32_t s[4];
} RopePush;

static void v_rope(Backend *be, BView x, BView pos, const RopeArgs *a) {
    VkBackend *b = vkb(be);
    RopePush p = {va(x), va(pos), (uint32_t)a->rows, (uint32_t)a->heads, (uint32_t)a->d, (uint32_t)a->n_rot,
                  (uint32_t)a->row_stride, (a->sections != NULL) | (a->thw ? 2u : 0u), powf(a->base, -2.0f / (float)a->n_rot),
                  a->freq_scale, {0, 0, 0, 0}};
    for (int i = 0; a->sections && i < 4; i++) p.s[i] = a->sections[i];
    const uint32_t pairs = (uint32_t)(a->n_rot / 2) * (uint32_t)a->heads;
    const VkAcc acc[2] = {acc_w(x, span((uint64_t)a->rows, (uint64_t)a->row_stride, 1, 0, (uint64_t)a->heads * (uint64_t)a->d)),
                          acc_r(pos, (a->thw ? 12 : 4) * (uint64_t)a->rows)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_ROPE), &p, sizeof p, (pairs + 63) / 64, cap65535((uint64_t)a->rows), 1, acc, 2);
}

typedef struct GatePush {
    uint64_t b, a, beta, g, dt, sa;
    uint32_t R, Hv, group, ld_in;
} GatePush;

static void v_dn_gates(Backend *be, const GateArgs *a) {
    VkBackend *b = vkb(be);
    const GatePush p = {va(a->b), va(a->a), va(a->beta), va(a->g), va(vk_weight(b, a->dt_bias, -1)), va(vk_weight(b, a->ssm_a, -1)),
                        (uint32_t)a->R, (uint32_t)a->Hv, (uint32_t)a->group, (uint32_t)a->ld_in};
    const uint64_t in = span((uint64_t)a->R, (uint64_t)a->ld_in, 1, 0, (uint64_t)a->Hv * (a->group ? 2 : 1)), out = 4 * (uint64_t)a->R * (uint64_t)a->Hv;
    const VkAcc acc[4] = {acc_r(a->b, in), acc_r(a->a, in), acc_w(a->beta, out), acc_w(a->g, out)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_DN_GATES), &p, sizeof p, ((uint32_t)a->R * (uint32_t)a->Hv + 63) / 64, 1, 1, acc, 4);
}

typedef struct RoutePush {
    uint64_t logits, sel, w;
    uint32_t R, nE, k;
} RoutePush;

static void v_moe_route(Backend *be, BView logits, BView sel, BView w, int R, int n_expert, int k) {
    VkBackend *b = vkb(be);
    if (n_expert > 1024 || k > 64 || k > n_expert) { /* moe_route.comp's limits: a clear error, not a stop */
        vks_fail(b, "MoE routing of %d experts, %d used: the Vulkan backend takes at most 1024 experts, 64 used", n_expert, k);
        return;
    }
    const RoutePush p = {va(logits), va(sel), va(w), (uint32_t)R, (uint32_t)n_expert, (uint32_t)k};
    const uint64_t rk = 4 * (uint64_t)R * (uint64_t)k;
    const VkAcc acc[3] = {acc_r(logits, 4 * (uint64_t)R * (uint64_t)n_expert), acc_w(sel, rk), acc_w(w, rk)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_MOE_ROUTE), &p, sizeof p, 1, cap65535((uint64_t)R), 1, acc, 3);
}

void vk_ops_install(BackendVt *vt) {
    vt->rms_norm = v_rms_norm;
    vt->l2_norm = v_l2_norm;
    vt->add = v_add;
    vt->copy_rows = v_copy_rows;
    vt->dn_gates = v_dn_gates;
    vt->gated_norm = v_gated_norm;
    vt->rope = v_rope;
    vt->kv_append = v_kv_append;
    vt->mul_sigmoid = v_mul_sigmoid;
    vt->silu = v_silu;
    vt->swiglu = v_swiglu;
    vt->moe_route = v_moe_route;
    vt->gather_rows = v_gather_rows;
    vt->scatter_rows = v_scatter_rows;
    vt->moe_combine = v_moe_combine;
    vt->sigmoid = v_sigmoid;
    vt->add_scaled = v_add_scaled;
    vt->bias_act = v_bias_act;
}
