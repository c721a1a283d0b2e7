/* vk_vision.c — the vision tower's ops on the Vulkan backend (backend.h: layer_norm, rope_2d, attention_full;
 * bias_act is an eltwise op, vk_ops.c): one dispatch each of shaders/layer_norm.comp, rope_2d.comp and
 * attn_full.comp. The push-constant structs mirror the shaders' blocks field for field. */
#include "backend/vulkan/vk_internal.h"

#include <math.h>

typedef struct LnPush {
    uint64_t x, y, w, b;
    uint32_t n, rows, heads, pad;
    uint32_t x_row, x_head, y_row, y_head;
    float eps;
} LnPush;

static void v_layer_norm(Backend *be, BView x, BView y, const Weight *w, const Weight *bias, const VecSet *s, float eps) {
    VkBackend *b = vkb(be);
    const LnPush p = {va(x), va(y), w ? va(vk_weight(b, w, -1)) : 0, bias ? va(vk_weight(b, bias, -1)) : 0, (uint32_t)s->n,
                      (uint32_t)s->rows, (uint32_t)s->heads, 0, (uint32_t)s->x_row, (uint32_t)s->x_head, (uint32_t)s->y_row,
                      (uint32_t)s->y_head, eps};
    const VkAcc a[2] = {acc_r(x, span(p.rows, p.x_row, p.heads, p.x_head, p.n)), acc_w(y, span(p.rows, p.y_row, p.heads, p.y_head, p.n))};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_LAYER_NORM), &p, sizeof p, p.heads, cap65535(p.rows), 1, a, 2);
}

typedef struct Rope2dPush {
    uint64_t x, pos;
    uint32_t rows, heads, d, row_stride;
    float theta_scale;
} Rope2dPush;

static void v_rope_2d(Backend *be, BView x, BView pos, const Rope2dArgs *a) {
    VkBackend *b = vkb(be);
    ASSERT(a->d % 4 == 0);
    const Rope2dPush p = {va(x), va(pos), (uint32_t)a->rows, (uint32_t)a->heads, (uint32_t)a->d, (uint32_t)a->row_stride,
                          powf(a->base, -4.0f / (float)a->d)};
    const uint32_t pairs = (uint32_t)(a->d / 2) * (uint32_t)a->heads;
    const VkAcc acc[2] = {acc_w(x, span((uint64_t)a->rows, (uint64_t)a->row_stride, 1, 0, (uint64_t)a->heads * (uint64_t)a->d)),
                          acc_r(pos, 8 * (uint64_t)a->rows)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_ROPE_2D), &p, sizeof p, (pairs + 63) / 64, cap65535((uint64_t)a->rows), 1, acc, 2);
}

typedef struct FullAttnPush {
    uint64_t q, k, v, o;
    uint32_t T, heads, d, pad;
    uint32_t q_row, k_row, v_row, o_row;
    float scale;
} FullAttnPush;

static void v_attention_full(Backend *be, const FullAttnArgs *a) {
    VkBackend *b = vkb(be);
    if (a->d > 256) { /* attn_full.comp keeps a query row in 256 floats of shared memory */
        vks_fail(b, "full attention over heads of %d: the Vulkan backend takes at most 256", a->d);
        return;
    }
    if (b->d->loop_limited) {
        /* llvmpipe's loop steps per invocation (vk_internal.h), counted as it counts them: each loop's condition
         * checks, exit included. Per 64-key block: the score's d + 1, two reductions of 7, the output groups' loop
         * (one more than its groups of 64 dimensions) with 65 per group, the block loop's own: d + 23 + 66 per group,
         * plus 1 of margin. Measured on lavapipe at d = 256: 120 blocks right (3e-8), 123 and 124 blocks wrong
         * (1.1e-3, 1.6e-3); this refuses from 121. */
        const int64_t groups = ((int64_t)a->d + 63) / 64, per_block = (int64_t)a->d + 24 + 66 * groups;
        if (((int64_t)a->T + 63) / 64 * per_block + groups + 1 > VK_LOOP_ITERS_LLVMPIPE) {
            vks_fail(b, "full attention over %d patches (head dim %d) passes llvmpipe's limit of %d loop steps per "
                        "invocation, past which its results are wrong", a->T, a->d, VK_LOOP_ITERS_LLVMPIPE);
            return;
        }
    }
    const FullAttnPush p = {va(a->q), va(a->k), va(a->v), va(a->out), (uint32_t)a->T, (uint32_t)a->n_head, (uint32_t)a->d, 0,
                            (uint32_t)a->q_row, (uint32_t)a->k_row, (uint32_t)a->v_row, (uint32_t)a->o_row, a->scale};
    const uint64_t T = (uint64_t)a->T, H = (uint64_t)a->n_head, d = (uint64_t)a->d;
    const VkAcc acc[4] = {acc_r(a->q, span(T, (uint64_t)a->q_row, H, d, d)), acc_r(a->k, span(T, (uint64_t)a->k_row, H, d, d)),
                          acc_r(a->v, span(T, (uint64_t)a->v_row, H, d, d)), acc_w(a->out, span(T, (uint64_t)a->o_row, H, d, d))};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_ATTN_FULL), &p, sizeof p, (uint32_t)a->n_head, cap65535(T), 1, acc, 4);
}

void vk_vision_install(BackendVt *vt) {
    vt->layer_norm = v_layer_norm;
    vt->rope_2d = v_rope_2d;
    vt->attention_full = v_attention_full;
}
