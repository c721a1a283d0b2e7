/* layer_deltanet.c — one Gated DeltaNet mixer over the batch (SPEC §2.4), from the normed input b->h to
 * the projected output b->tmp:
 *   projections (qkv, z, β/α) → causal conv + SiLU with the conv state → split Q/K/V, L2-norm Q and K →
 *   β = sigmoid(b), g = softplus(a + dt_bias)·ssm_a → the delta rule (recurrent or chunked) on the state →
 *   gated RMSNorm with z → ssm_out.
 * Stage dumps use llama.cpp's names. */
#include "model/forward_internal.h"

#include <string.h>

/* qwen3next legacy: ssm_in rows are grouped per key head as [q | k | v (r·Dv) | z (r·Dv)]; regroup into
 * mixed = [q all | k all | v all] and z. */
static void split_legacy(const ModelConfig *c, const float *proj, float *mixed, float *z) {
    const int Hk = c->ssm_n_k_head, Dk = c->ssm_d_state, rDv = c->ssm_d_inner / Hk;
    const int group = 2 * Dk + 2 * rDv, key = c->ssm_key_dim;
    for (int g = 0; g < Hk; g++) {
        const float *p = proj + (int64_t)g * group;
        memcpy(mixed + g * Dk, p, sizeof(float) * (size_t)Dk);
        memcpy(mixed + key + g * Dk, p + Dk, sizeof(float) * (size_t)Dk);
        memcpy(mixed + 2 * key + g * rDv, p + 2 * Dk, sizeof(float) * (size_t)rDv);
        memcpy(z + g * rDv, p + 2 * Dk + rDv, sizeof(float) * (size_t)rDv);
    }
}

void layer_deltanet(Forward *f, Bufs *b, int il) {
    const Model *m = f->m;
    const ModelConfig *c = &m->cfg;
    const LayerW *l = &m->layers[il];
    double t0 = fwd_now();
    const int R = f->rows;
    const int conv = c->ssm_conv_dim, val = c->ssm_d_inner, key = c->ssm_key_dim;
    const int Hv = c->ssm_n_v_head, Hk = c->ssm_n_k_head, Dk = c->ssm_d_state, Dv = c->ssm_head_v_dim;
    const int r = Hv / Hk;

    /* 1. projections */
    if (l->legacy) {
        fwd_matmul(f, "ssm_in", &l->ssm_in, b->h, R, b->proj);
        fwd_dump(f, "linear_attn_mixed_qkvz", il, b->proj, conv + val, R, 1, 1);
        for (int t = 0; t < R; t++)
            split_legacy(c, b->proj + (int64_t)t * (conv + val), b->mixed + (int64_t)t * conv, b->z + (int64_t)t * val);
    } else {
        fwd_matmul(f, "attn_qkv", &l->qkv, b->h, R, b->mixed);
        fwd_matmul(f, "attn_gate", &l->z, b->h, R, b->z);
    }
    fwd_dump(f, l->legacy ? "qkv_mixed" : "linear_attn_qkv_mixed", il, b->mixed, conv, R, 1, 1);

    /* 2. β and g; b->beta holds b then β, b->g holds a then g */
    if (c->arch == ARCH_QWEN3NEXT) {
        fwd_matmul(f, "ssm_ba", &l->ba, b->h, R, b->ba);
        for (int t = 0; t < R; t++) /* per key group [b (r) | a (r)] */
            for (int j = 0; j < Hv; j++) {
                const int g = j / r, jj = j % r;
                b->beta[(int64_t)t * Hv + j] = b->ba[(int64_t)t * 2 * Hv + g * 2 * r + jj];
                b->g[(int64_t)t * Hv + j] = b->ba[(int64_t)t * 2 * Hv + g * 2 * r + r + jj];
            }
        fwd_dump(f, "b", il, b->beta, Hv, R, 1, 1);
    } else {
        fwd_matmul(f, "ssm_beta", &l->beta, b->h, R, b->beta);
        fwd_matmul(f, "ssm_alpha", &l->alpha, b->h, R, b->g);
        fwd_dump(f, "beta", il, b->beta, 1, Hv, R, 1);
        fwd_dump(f, "alpha", il, b->g, Hv, R, 1, 1);
    }
    for (int t = 0; t < R; t++)
        for (int j = 0; j < Hv; j++) {
            float *bj = &b->beta[(int64_t)t * Hv + j], *gj = &b->g[(int64_t)t * Hv + j];
            *bj = op_sigmoid(*bj);
            *gj = op_softplus(*gj + l->dt_bias[j]) * l->ssm_a[j];
        }
    fwd_dump(f, "gate", il, b->g, Hv, R, 1, 1);
    if (c->arch != ARCH_QWEN3NEXT) fwd_dump(f, "beta_sigmoid", il, b->beta, 1, Hv, R, 1);

    /* 3. causal conv + SiLU, per sequence with its conv state */
    for (int s = 0; s < f->n_seqs; s++) {
        const int64_t r0 = f->row0[s];
        fwd_conv_silu(f, b->mixed + r0 * conv, f->seqs[s].n_tokens, conv, c->ssm_d_conv, l->conv1d,
                       f->seqs[s].state->conv[il], b->conv_y + r0 * conv);
    }
    fwd_dump(f, "conv_output_silu", il, b->conv_y, conv, R, 1, 1);
    /* the new conv state: each channel's last Kc-1 inputs (llama.cpp's conv_state_last view, [conv][Kc-1]) */
    if (f->n_seqs == 1) fwd_dump(f, "conv_state_last", il, f->seqs[0].state->conv[il], c->ssm_d_conv - 1, conv, 1, 1);

    /* 4. split and L2-normalise */
    for (int t = 0; t < R; t++) {
        const float *y = b->conv_y + (int64_t)t * conv;
        for (int h = 0; h < Hk; h++) {
            op_l2norm(y + h * Dk, Dk, c->rms_eps, b->q + (int64_t)t * key + h * Dk);
            op_l2norm(y + key + h * Dk, Dk, c->rms_eps, b->k + (int64_t)t * key + h * Dk);
        }
        memcpy(b->v + (int64_t)t * val, y + 2 * key, sizeof(float) * (size_t)val);
    }
    if (f->dump && f->n_seqs == 1) {
        if (c->arch == ARCH_QWEN3NEXT && r > 1) {
            /* llama.cpp repeats q and k to the value heads before the op: dump them that way */
            for (int which = 0; which < 2; which++) {
                float *rep = b->on; /* free until step 6 */
                const float *src = which ? b->k : b->q;
                for (int t = 0; t < R; t++)
                    for (int j = 0; j < Hv; j++)
                        memcpy(rep + ((int64_t)t * Hv + j) * Dk, src + (int64_t)t * key + (j / r) * Dk, sizeof(float) * (size_t)Dk);
                fwd_dump(f, which ? "k_conv_predelta" : "q_conv_predelta", il, rep, Dk, Hv, R, 1);
            }
        } else {
            fwd_dump(f, "q_conv_predelta", il, b->q, Dk, Hk, R, 1);
            fwd_dump(f, "k_conv_predelta", il, b->k, Dk, Hk, R, 1);
        }
        fwd_dump(f, "v_conv_predelta", il, b->v, Dv, Hv, R, 1);
        fwd_dump(f, "state_predelta", il, f->seqs[0].state->ssm[il], Dk, Dv, Hv, 1);
    }

    fwd_phase(f, PH_DN_PRE, &t0);

    /* 5. the delta rule, per sequence */
    for (int s = 0; s < f->n_seqs; s++) {
        const int64_t r0 = f->row0[s];
        const int T = f->seqs[s].n_tokens;
        DeltaNetArgs a = {T, Hk, Hv, Dk, Dv, c->arch == ARCH_QWEN3NEXT,
                          b->q + r0 * key, b->k + r0 * key, b->v + r0 * val, b->g + r0 * Hv, b->beta + r0 * Hv,
                          f->seqs[s].state->ssm[il], b->o + r0 * val};
        fwd_deltanet(f, &a, forward_deltanet_algo(f, T) == DELTANET_CHUNKED);
    }
    fwd_phase(f, PH_DN_SCAN, &t0);
    if (f->dump && f->n_seqs == 1) {
        fwd_dump(f, "new_state", il, f->seqs[0].state->ssm[il], Dk, Dv, Hv, 1);
        fwd_dump(f, "attn_output", il, b->o, Dv, Hv, R, 1);
        fwd_dump(f, "z", il, b->z, val, R, 1, 1);
    }

    /* 6. gated RMSNorm: rmsnorm(o_j)·ssm_norm·silu(z_j) per value head (z is consumed) */
    fwd_silu_rows(f, b->z, R * Hv, Dv);
    for (int64_t i = 0; i < (int64_t)R * Hv; i++) {
        float *on = b->on + i * Dv;
        const float *z = b->z + i * Dv;
        op_rmsnorm(b->o + i * Dv, l->ssm_norm, Dv, c->rms_eps, on);
        for (int x = 0; x < Dv; x++) on[x] *= z[x];
    }
    fwd_dump(f, "final_output", il, b->on, val, R, 1, 1);

    /* 7. output projection */
    fwd_matmul(f, "ssm_out", &l->ssm_out, b->on, R, b->tmp);
    fwd_dump(f, "linear_attn_out", il, b->tmp, c->n_embd, R, 1, 1);
    fwd_phase(f, PH_DN_POST, &t0);
}
