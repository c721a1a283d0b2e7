/* vk_seq.c — the sequence ops of the Vulkan backend: causal conv + SiLU (shaders/conv_silu.comp; fused with
 * the q/k L2 norms, the v split and the gates in dn_prep.comp), the delta
 * rule in its fused sequential form (dn_recurrent.comp: one subgroup per row of the transposed state) and
 * its chunked form (dn_chunked.comp: chunks of 64, the triangular solve in shared memory), dn_prep and the
 * recurrence in one dispatch for decode (dn_prep_scan.comp), and causal
 * attention with online softmax (attention.comp; the sigmoid output gate optionally in its epilogue), its q/k
 * norms, RoPE and cache stores in one dispatch (attn_prep.comp). */
#include "backend/vulkan/vk_internal.h"

#include <math.h>
#include <stdint.h>

typedef struct ConvPush {
    uint64_t x, w, state, y;
    uint32_t T, C, K;
} ConvPush;

static void v_conv_silu(Backend *be, BView x, int T, int C, int K, const Weight *w, BView state, BView y) {
    VkBackend *b = vkb(be);
    ASSERT(K >= 2 && K <= 16);
    const ConvPush p = {va(x), va(vk_weight(b, w, -1)), va(state), va(y), (uint32_t)T, (uint32_t)C, (uint32_t)K};
    const uint64_t tc = 4 * (uint64_t)T * (uint64_t)C;
    const VkAcc acc[3] = {acc_r(x, tc), acc_w(state, 4 * (uint64_t)C * (uint64_t)(K - 1)), acc_w(y, tc)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_CONV_SILU), &p, sizeof p, ((uint32_t)C + 63) / 64, 1, 1, acc, 3);
}

typedef struct DnPush {
    uint64_t q, k, v, g, beta, s_in, s_out, out, steps;
    uint32_t T, Hk, Hv, dk, dv, grouped, rows_per_wg, has_steps;
} DnPush;

typedef struct DnChunkPush {
    uint64_t q, k, v, g, beta, s_in, s_out, out, scratch;
    uint32_t T, Hk, Hv, dk, dv, grouped;
} DnChunkPush;

/* the delta rule's accesses (the state written in place or beside, the per-token states when asked) */
static int dn_acc(const DeltaArgs *a, BView s_in, VkAcc *acc) {
    const uint64_t T = (uint64_t)a->T, kb = 4 * T * (uint64_t)a->n_k_head * (uint64_t)a->d_k;
    const uint64_t vb = 4 * T * (uint64_t)a->n_v_head * (uint64_t)a->d_v, gb = 4 * T * (uint64_t)a->n_v_head;
    const uint64_t sb = 4 * (uint64_t)a->n_v_head * (uint64_t)a->d_v * (uint64_t)a->d_k;
    int n = 0;
    acc[n++] = acc_r(a->q, kb), acc[n++] = acc_r(a->k, kb), acc[n++] = acc_r(a->v, vb);
    acc[n++] = acc_r(a->g, gb), acc[n++] = acc_r(a->beta, gb);
    acc[n++] = acc_r(s_in, sb), acc[n++] = acc_w(a->state, sb), acc[n++] = acc_w(a->out, vb);
    if (a->has_steps) acc[n++] = acc_w(a->steps, sb * T);
    return n;
}

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
        VkAcc acc[10];
        const int n = dn_acc(a, s_in, acc);
        acc[n] = acc_w(sc, need);
        vks_dispatch_acc(b, vk_pipe(b->d, VK_DN_CHUNKED), &p, sizeof p, (uint32_t)a->n_v_head, 1, 1, acc, n + 1);
        return;
    }
    const uint32_t rpw = 64 / b->d->subgroup_min; /* the most subgroups a 64-lane workgroup can have */
    const uint32_t rows = (uint32_t)a->n_v_head * (uint32_t)a->d_v;
    const DnPush p = {va(a->q), va(a->k), va(a->v), va(a->g), va(a->beta), va(s_in), va(a->state), va(a->out),
                      a->has_steps ? va(a->steps) : 0, (uint32_t)a->T, (uint32_t)a->n_k_head, (uint32_t)a->n_v_head,
                      (uint32_t)a->d_k, (uint32_t)a->d_v, a->grouped, rpw, a->has_steps};
    VkAcc acc[10];
    const int n = dn_acc(a, s_in, acc);
    vks_dispatch_acc(b, vk_pipe(b->d, VK_DN_RECURRENT), &p, sizeof p, (rows + rpw - 1) / rpw, 1, 1, acc, n);
}

typedef struct PrepPush {
    uint64_t x, w, state, q, dt, sa, gb;
    int32_t k_off, v_off, beta_off, g_off, ga_off;
    uint32_t T, C, K, key, Dk, Hv, group, ld_in;
    float eps;
} PrepPush;

/* float offset of v from base in the same buffer, when it fits an int32 */
static bool rel(BView base, BView v, int32_t *out) {
    if (v.buf != base.buf || (v.off & 3) != (base.off & 3)) return false;
    const int64_t d = ((int64_t)v.off - (int64_t)base.off) / 4;
    if (d < INT32_MIN || d > INT32_MAX) return false;
    *out = (int32_t)d;
    return true;
}

static bool v_dn_prep(Backend *be, const DnPrepArgs *a) {
    VkBackend *b = vkb(be);
    const GateArgs *g = &a->gates;
    const int val = a->C - 2 * a->key;
    PrepPush p = {va(a->x), va(vk_weight(b, a->conv_w, -1)), va(a->state), va(a->q), va(vk_weight(b, g->dt_bias, -1)),
                  va(vk_weight(b, g->ssm_a, -1)), va(g->b), 0, 0, 0, 0, 0, (uint32_t)a->T, (uint32_t)a->C, (uint32_t)a->K,
                  (uint32_t)a->key, (uint32_t)a->d_k, (uint32_t)g->Hv, (uint32_t)g->group, (uint32_t)g->ld_in, a->eps};
    if (a->K < 2 || a->K > 16 || a->d_k > 512 || a->key % a->d_k || val < 0 || g->R != a->T || !rel(a->q, a->k, &p.k_off) ||
        !rel(a->q, a->v, &p.v_off) || !rel(a->q, g->beta, &p.beta_off) || !rel(a->q, g->g, &p.g_off) ||
        !rel(g->b, g->a, &p.ga_off))
        return false;
    const uint64_t T = (uint64_t)a->T, Hv = (uint64_t)g->Hv;
    const uint64_t in = 4 * ((T - 1) * (uint64_t)g->ld_in + Hv * (g->group ? 2 : 1));
    const VkAcc acc[9] = {acc_r(a->x, 4 * T * (uint64_t)a->C), acc_w(a->state, 4 * (uint64_t)a->C * (uint64_t)(a->K - 1)),
                          acc_w(a->q, 4 * T * (uint64_t)a->key), acc_w(a->k, 4 * T * (uint64_t)a->key),
                          acc_w(a->v, 4 * T * (uint64_t)val), acc_r(g->b, in), acc_r(g->a, in),
                          acc_w(g->beta, 4 * T * Hv), acc_w(g->g, 4 * T * Hv)};
    const uint32_t groups = 2 * (uint32_t)(a->key / a->d_k) + ((uint32_t)val + 127) / 128 + ((uint32_t)(T * Hv) + 127) / 128;
    vks_dispatch_acc(b, vk_pipe(b->d, VK_DN_PREP), &p, sizeof p, groups, 1, 1, acc, 9);
    return true;
}

typedef struct PrepScanPush {
    uint64_t x, w, state, gb, dt, sa, s, out;
    int32_t ga_off;
    uint32_t T, C, K, key, Dk, Hk, Hv, group, ld_in, grouped, mode;
    float eps;
} PrepScanPush;
#define PS_ROWS 16    /* dn_prep_scan.comp: state rows per workgroup */
#define PS_QK_MAX 1024 /* T·Dk */
#define PS_MAX_T 8

/* dn_prep's outputs for the recurrence computed where the recurrence reads them (dn_prep_scan.comp): one dispatch
 * over (value head, 16 state rows), then the conv state's new windows (a second one, in the next barrier interval
 * with ssm_out: it only has to follow the first one's reads) */
static bool v_dn_prep_scan(Backend *be, const DnPrepArgs *a, const DeltaArgs *d) {
    VkBackend *b = vkb(be);
    const GateArgs *g = &a->gates;
    const int val = a->C - 2 * a->key, Dk = a->d_k;
    PrepScanPush p = {va(a->x), va(vk_weight(b, a->conv_w, -1)), va(a->state), va(g->b), va(vk_weight(b, g->dt_bias, -1)),
                      va(vk_weight(b, g->ssm_a, -1)), va(d->state), va(d->out), 0, (uint32_t)a->T, (uint32_t)a->C,
                      (uint32_t)a->K, (uint32_t)a->key, (uint32_t)Dk, (uint32_t)d->n_k_head, (uint32_t)d->n_v_head,
                      (uint32_t)g->group, (uint32_t)g->ld_in, d->grouped, 0, a->eps};
    const bool in_place = !d->state_in.buf || (d->state_in.buf == d->state.buf && d->state_in.off == d->state.off);
    if (d->chunked || d->has_steps || !in_place || d->T != a->T || d->d_k != Dk || d->d_v != Dk ||
        Dk > 32 * (int)b->d->subgroup_min || Dk > 512 || a->T > PS_MAX_T || a->T * Dk > PS_QK_MAX || a->K < 2 ||
        a->K > 16 || a->key % Dk || a->key / Dk != d->n_k_head || val != d->n_v_head * Dk || g->Hv != d->n_v_head ||
        g->R != a->T || d->n_v_head % d->n_k_head || !rel(g->b, g->a, &p.ga_off))
        return false;
    const uint64_t T = (uint64_t)a->T, Hv = (uint64_t)g->Hv;
    const uint64_t in = 4 * ((T - 1) * (uint64_t)g->ld_in + Hv * (g->group ? 2 : 1));
    const uint64_t cs = 4 * (uint64_t)a->C * (uint64_t)(a->K - 1), sb = 4 * Hv * (uint64_t)Dk * (uint64_t)Dk;
    const VkAcc acc[6] = {acc_r(a->x, 4 * T * (uint64_t)a->C), acc_r(a->state, cs), acc_r(g->b, in), acc_r(g->a, in),
                          acc_w(d->state, sb), acc_w(d->out, 4 * T * (uint64_t)val)};
    const uint32_t wph = (uint32_t)(Dk + PS_ROWS - 1) / PS_ROWS;
    vks_dispatch_acc(b, vk_pipe(b->d, VK_DN_PREP_SCAN), &p, sizeof p, (uint32_t)Hv * wph, 1, 1, acc, 6);
    p.mode = 1;
    const VkAcc sacc[2] = {acc_r(a->x, 4 * T * (uint64_t)a->C), acc_w(a->state, cs)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_DN_PREP_SCAN), &p, sizeof p, ((uint32_t)a->C + 127) / 128, 1, 1, sacc, 2);
    return true;
}

typedef struct AttnPush {
    uint64_t q, k, v, out;
    uint32_t T, pos0, H, Hkv, D;
    float scale;
    uint64_t gate;
    uint32_t g_row, g_head;
    uint64_t rows_at;
    uint64_t part;
    uint32_t S;
} AttnPush;

typedef struct AttnCombinePush {
    uint64_t part, out, gate;
    uint32_t T, H, D, S, g_row, g_head;
} AttnCombinePush;

/* The splits over the keys of attention for T queries over n_keys keys (1: one workgroup per query and head walks
 * them all). One workgroup walking 128-key blocks one after another leaves a GPU idle in decode (T·H workgroups:
 * 16 for a 9B model); split, each (query, head) gets S workgroups of VK_ATTN_SPLIT_KEYS keys at least, and a
 * combine dispatch merges their partials: from VK_ATTN_SPLIT_MIN keys (4 blocks) on, where the saved walk is worth
 * more than the second dispatch, its barrier and the partials' round trip. Chosen from the keys when the pass is
 * recorded: the kernel takes its key range from each query's own count, so a later one is covered all the same. */
static int vk_attn_splits(const VkBackend *b, int T, int n_keys) {
    if (b->attn_split_min <= 0 || T > VK_ATTN_SPLIT_T || n_keys <= b->attn_split_min) return 1;
    const int s = (n_keys + VK_ATTN_SPLIT_KEYS - 1) / VK_ATTN_SPLIT_KEYS, smax = VK_ATTN_SPLIT_ROWS / T;
    return s < 2 ? 2 : s > smax ? smax : s;
}

/* attention, with the sigmoid output gate in its epilogue when gate.buf is set */
static void attention(VkBackend *b, const AttentionArgs *a, BView gate, int64_t g_row, int64_t g_head) {
    ASSERT(a->n_head % a->n_head_kv == 0);
    if (a->d > 512) {
        vks_fail(b, "attention head dim %d: the Vulkan backend takes at most 512", a->d);
        return;
    }
    const int S = vk_attn_splits(b, a->T, a->rows_at.buf && a->keys_max > 0 ? a->keys_max : a->pos0 + a->T);
    if (b->d->loop_limited) { /* the loop steps of one invocation (attention.comp, 128-key blocks), bounded above */
        const int64_t n = a->rows_at.buf && a->keys_max > 0 ? a->keys_max : (int64_t)a->pos0 + a->T;
        const int64_t chunk = S == 1 ? n : ((n + S - 1) / S + 127) / 128 * 128, D = a->d;
        const int64_t per_block = D / 8 + D % 8 + 1 + (D + 127) / 128 * 17 + 24;
        if ((chunk + 127) / 128 * per_block > VK_LOOP_ITERS_LLVMPIPE) {
            vks_fail(b, "attention over %lld keys in one workgroup (head dim %d) passes llvmpipe's limit of %d loop "
                        "steps per invocation, past which its results are wrong",
                     (long long)chunk, a->d, VK_LOOP_ITERS_LLVMPIPE);
            return;
        }
    }
    const uint64_t qb = 4 * (uint64_t)a->T * (uint64_t)a->n_head * (uint64_t)a->d;
    /* the keys read: rows [0, pos0 + T), or with rows_at (rows read on the device, replayed at later ones) the
     * caches to their buffers' ends */
    const uint64_t kvb = 4 * (uint64_t)(a->pos0 + a->T) * (uint64_t)a->n_head_kv * (uint64_t)a->d;
    const uint64_t kb = a->rows_at.buf ? a->k.buf->bytes - a->k.off : kvb, vb = a->rows_at.buf ? a->v.buf->bytes - a->v.off : kvb;
    const VkAcc gacc = gate.buf ? acc_r(gate, 4 * ((uint64_t)(a->T - 1) * (uint64_t)g_row + (uint64_t)a->n_head * (uint64_t)g_head))
                                : (VkAcc){0};
    BView part = {0};
    uint64_t pb = 0;
    if (S > 1) {
        pb = 4 * (uint64_t)a->T * (uint64_t)a->n_head * (uint64_t)S * ((uint64_t)a->d + 2);
        part = vk_scratch(b, pb);
    }
    const AttnPush p = {va(a->q), va(a->k), va(a->v), va(a->out), (uint32_t)a->T, (uint32_t)a->pos0, (uint32_t)a->n_head,
                        (uint32_t)a->n_head_kv, (uint32_t)a->d, a->scale, gate.buf && S == 1 ? va(gate) : 0, (uint32_t)g_row,
                        (uint32_t)g_head, a->rows_at.buf ? va(a->rows_at) : 0, S > 1 ? va(part) : 0, (uint32_t)S};
    VkAcc acc[6] = {acc_r(a->q, qb), acc_r(a->k, kb), acc_r(a->v, vb), S > 1 ? acc_w(part, pb) : acc_w(a->out, qb)};
    int n = 4;
    if (gate.buf && S == 1) acc[n++] = gacc;
    if (a->rows_at.buf) acc[n++] = acc_r(a->rows_at, 4 * (uint64_t)a->T);
    vks_dispatch_acc(b, vk_pipe(b->d, VK_ATTENTION), &p, sizeof p, (uint32_t)a->n_head, (uint32_t)a->T, (uint32_t)S, acc, n);
    if (S == 1) return;
    const AttnCombinePush c = {va(part), va(a->out), gate.buf ? va(gate) : 0, (uint32_t)a->T, (uint32_t)a->n_head,
                               (uint32_t)a->d, (uint32_t)S, (uint32_t)g_row, (uint32_t)g_head};
    const VkAcc cacc[3] = {acc_r(part, pb), acc_w(a->out, qb), gacc};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_ATTN_COMBINE), &c, sizeof c, (uint32_t)a->n_head, (uint32_t)a->T, 1, cacc,
                     gate.buf ? 3 : 2);
}

static void v_attention(Backend *be, const AttentionArgs *a) { attention(vkb(be), a, (BView){0}, 0, 0); }

static void v_attention_gated(Backend *be, const AttentionArgs *a, BView gate, int64_t g_row, int64_t g_head) {
    attention(vkb(be), a, gate, g_row, g_head);
}

typedef struct AttnPrepPush {
    uint64_t qg, qa, ka, va, kc, vc, qn, kn, pos;
    uint32_t rows, H, Hkv, D, n_rot, flags; /* flags: 1 IMROPE, 2 cache rows at pos + rows_rel */
    int32_t s[4];
    float theta_scale, freq_scale, eps;
    int32_t rows_rel;
} AttnPrepPush;
_Static_assert(sizeof(AttnPrepPush) <= VK_PUSH_BYTES && sizeof(AttnPush) <= VK_PUSH_BYTES, "push constants");

static bool v_attn_prep(Backend *be, const AttnPrepArgs *a) {
    VkBackend *b = vkb(be);
    const RopeArgs *r = &a->rope;
    if (a->d > 512 || r->n_rot > a->d || r->n_rot % 2 || r->thw) return false; /* images: the unfused rope */
    AttnPrepPush p = {va(a->qg), va(a->qa), va(a->ka), va(a->va), va(a->k_cache), va(a->v_cache),
                      va(vk_weight(b, a->q_norm, -1)), va(vk_weight(b, a->k_norm, -1)), va(a->pos), (uint32_t)a->rows,
                      (uint32_t)a->n_head, (uint32_t)a->n_head_kv, (uint32_t)a->d, (uint32_t)r->n_rot, r->sections != NULL,
                      {0, 0, 0, 0}, powf(r->base, -2.0f / (float)r->n_rot), r->freq_scale, a->eps, 0};
    for (int i = 0; r->sections && i < 4; i++) p.s[i] = r->sections[i];
    if (a->rows_at.buf) {
        if (!rel(a->pos, a->rows_at, &p.rows_rel)) return false;
        p.flags |= 2;
    }
    const uint64_t R = (uint64_t)a->rows, HD = 4 * (uint64_t)a->n_head * (uint64_t)a->d, KVD = 4 * (uint64_t)a->n_head_kv * (uint64_t)a->d;
    /* the cache rows written: R from the views, or with rows_at (read on the device) anywhere after row 0 */
    const uint64_t kb = a->rows_at.buf ? a->k_cache.buf->bytes - a->k_cache.off : R * KVD;
    const uint64_t vb = a->rows_at.buf ? a->v_cache.buf->bytes - a->v_cache.off : R * KVD;
    const VkAcc acc[8] = {acc_r(a->qg, 2 * R * HD), acc_w(a->qa, R * HD),    acc_r(a->ka, R * KVD), acc_r(a->va, R * KVD),
                          acc_w(a->k_cache, kb),     acc_w(a->v_cache, vb), acc_r(a->pos, 4 * R),  acc_r(a->rows_at, 4 * R)};
    vks_dispatch_acc(b, vk_pipe(b->d, VK_ATTN_PREP), &p, sizeof p, (uint32_t)(a->n_head + a->n_head_kv),
                     cap65535(R), 1, acc, a->rows_at.buf ? 8 : 7);
    return true;
}

void vk_seq_install(BackendVt *vt) {
    vt->conv_silu = v_conv_silu;
    vt->deltanet = v_deltanet;
    vt->dn_prep = v_dn_prep;
    vt->dn_prep_scan = v_dn_prep_scan;
    vt->attention_gated = v_attention_gated;
    vt->attn_prep = v_attn_prep;
    vt->attention = v_attention;
}
