/* vk_seq.c — the sequence ops of the Vulkan backend: causal conv + SiLU (shaders/conv_silu.comp), the delta
 * rule in its fused sequential form (dn_recurrent.comp: one subgroup per row of the transposed state) and
 * its chunked form (dn_chunked.comp: chunks of 64, the triangular solve in shared memory), and causal
 * attention with online softmax (attention.comp). */
#include "backend/vulkan/vk_internal.h"

typedef struct ConvPush {
    uint64_t x, w, state, y;
    uint32_t T, C, K;
} ConvPush;

static void v_conv_silu(Backend *be, BView x, int T, int C, int K, const Weight *w, BView state, BView y) {
    VkBackend *b = vkb(be);
    ASSERT(K >= 2 && K <= 16);
    const ConvPush p = {va(x), va(vk_weight(b, w, -1)), va(state), va(y), (uint32_t)T, (uint32_t)C, (uint32_t)K};
    vks_dispatch(b, vk_pipe(b->d, VK_CONV_SILU), &p, sizeof p, ((uint32_t)C + 63) / 64, 1, 1);
}

typedef struct DnPush {
    uint64_t q, k, v, g, beta, s_in, s_out, out, steps;
    uint32_t T, Hk, Hv, dk, dv, grouped, rows_per_wg, has_steps;
} DnPush;

typedef struct DnChunkPush {
    uint64_t q, k, v, g, beta, s_in, s_out, out, scratch;
    uint32_t T, Hk, Hv, dk, dv, grouped;
} DnChunkPush;

static void v_deltanet(Backend *be, const DeltaArgs *a) {
    VkBackend *b = vkb(be);
    const BView s_in = a->state_in.buf ? a->state_in : a->state;
    if (a->d_k != a->d_v || a->d_k > 32 * (int)b->d->subgroup_min) { /* v_reserve refuses such models first */
        vks_fail(b, "delta-net heads of %d x %d: the Vulkan backend takes square heads of at most %u", a->d_k, a->d_v,
                 32 * b->d->subgroup_min);
        return;
    }
    if (a->chunked && !a->has_steps && a->d_k <= 128) {
        const size_t need = (size_t)a->n_v_head * 64 * (size_t)(a->d_k + a->d_v) * 4;
        const BView sc = vk_scratch(b, need);
        const DnChunkPush p = {va(a->q), va(a->k), va(a->v), va(a->g), va(a->beta), va(s_in), va(a->state), va(a->out), va(sc),
                               (uint32_t)a->T, (uint32_t)a->n_k_head, (uint32_t)a->n_v_head, (uint32_t)a->d_k, (uint32_t)a->d_v,
                               a->grouped};
        vks_dispatch(b, vk_pipe(b->d, VK_DN_CHUNKED), &p, sizeof p, (uint32_t)a->n_v_head, 1, 1);
        return;
    }
    const uint32_t rpw = 64 / b->d->subgroup_min; /* the most subgroups a 64-lane workgroup can have */
    const uint32_t rows = (uint32_t)a->n_v_head * (uint32_t)a->d_v;
    const DnPush p = {va(a->q), va(a->k), va(a->v), va(a->g), va(a->beta), va(s_in), va(a->state), va(a->out),
                      a->has_steps ? va(a->steps) : 0, (uint32_t)a->T, (uint32_t)a->n_k_head, (uint32_t)a->n_v_head,
                      (uint32_t)a->d_k, (uint32_t)a->d_v, a->grouped, rpw, a->has_steps};
    vks_dispatch(b, vk_pipe(b->d, VK_DN_RECURRENT), &p, sizeof p, (rows + rpw - 1) / rpw, 1, 1);
}

typedef struct AttnPush {
    uint64_t q, k, v, out;
    uint32_t T, pos0, H, Hkv, D;
    float scale;
} AttnPush;

static void v_attention(Backend *be, const AttentionArgs *a) {
    VkBackend *b = vkb(be);
    ASSERT(a->n_head % a->n_head_kv == 0);
    if (a->d > 512) {
        vks_fail(b, "attention head dim %d: the Vulkan backend takes at most 512", a->d);
        return;
    }
    const AttnPush p = {va(a->q), va(a->k), va(a->v), va(a->out), (uint32_t)a->T, (uint32_t)a->pos0, (uint32_t)a->n_head,
                        (uint32_t)a->n_head_kv, (uint32_t)a->d, a->scale};
    vks_dispatch(b, vk_pipe(b->d, VK_ATTENTION), &p, sizeof p, (uint32_t)a->n_head, (uint32_t)a->T, 1);
}

void vk_seq_install(BackendVt *vt) {
    vt->conv_silu = v_conv_silu;
    vt->deltanet = v_deltanet;
    vt->attention = v_attention;
}
