/* layer_deltanet.c — one Gated DeltaNet mixer over the batch (docs/MODEL.md, Gated DeltaNet), from the normed input b->h to
 * the projected output b->tmp:
 *   projections (qkv, z, β/α) → causal conv + SiLU with the conv state → split Q/K/V, L2-norm Q and K →
 *   β = sigmoid(b), g = softplus(a + dt_bias)·ssm_a → the delta rule (recurrent or chunked) on the state →
 *   gated RMSNorm with z → ssm_out.
 * A tentative sequence (BatchSeq.tentative) keeps its conv window and delta-net state from before the batch
 * and logs the scan's inputs per token, so forward_keep (forward_keep.c) can return to any of its tokens; a
 * tentative batch on a state that still holds one extends it (its tokens logged after the earlier ones).
 * Stage dumps use llama.cpp's names. */
#include "model/forward_internal.h"

/* floats per token of a rollback log (state.c): conv input, q | k | v, g and β */
static int64_t log_width(const ModelConfig *c) { return 2 * (int64_t)c->ssm_conv_dim + 2 * (int64_t)c->ssm_n_v_head; }

/* qwen3next legacy: ssm_in rows are grouped per key head as [q | k | v (r·Dv) | z (r·Dv)]; regroup into
 * mixed = [q all | k all | v all] and z. */
static void split_legacy(Forward *f, Bufs *b) {
    const ModelConfig *c = &f->m->cfg;
    Backend *be = f->be;
    const int Hk = c->ssm_n_k_head, Dk = c->ssm_d_state, rDv = c->ssm_d_inner / Hk, R = f->rows;
    const int group = 2 * Dk + 2 * rDv, key = c->ssm_key_dim, conv = c->ssm_conv_dim, val = c->ssm_d_inner;
    const int64_t ld = conv + val;
    for (int g = 0; g < Hk; g++) {
        const BView p = bv_f32(b->proj, (int64_t)g * group);
        be->vt->copy_rows(be, bv_f32(b->mixed, g * Dk), conv, p, ld, R, Dk);
        be->vt->copy_rows(be, bv_f32(b->mixed, key + g * Dk), conv, bv_f32(p, Dk), ld, R, Dk);
        be->vt->copy_rows(be, bv_f32(b->mixed, 2 * key + g * rDv), conv, bv_f32(p, 2 * Dk), ld, R, rDv);
        be->vt->copy_rows(be, bv_f32(b->z, g * rDv), val, bv_f32(p, 2 * Dk + rDv), ld, R, rDv);
    }
}

/* dumps of the qwen3next path, which llama.cpp takes after repeating q and k to the value heads */
static void dump_qk_repeated(Forward *f, Bufs *b, int il) {
    const ModelConfig *c = &f->m->cfg;
    const int Hv = c->ssm_n_v_head, Hk = c->ssm_n_k_head, Dk = c->ssm_d_state, r = Hv / Hk, R = f->rows;
    for (int which = 0; which < 2; which++) {
        const BView src = which ? b->k : b->q;
        for (int j = 0; j < Hv; j++) /* b->on is free until the gated norm */
            f->be->vt->copy_rows(f->be, bv_f32(b->on, (int64_t)j * Dk), (int64_t)Hv * Dk, bv_f32(src, (int64_t)(j / r) * Dk),
                                 c->ssm_key_dim, R, Dk);
        fwd_dump(f, which ? "k_conv_predelta" : "q_conv_predelta", il, b->on, Dk, Hv, R, 1);
    }
}

/* sequences per conv_silu_seqs / deltanet_seqs call */
#define SEQ_GROUP 32

/* after a first tentative batch: the state before it stays in the rollback's slot, the new one (written there)
 * becomes the layer's */
static void swap_tentative(SeqState *st, int il, BView written) {
    StateSeg *sg = &st->segs[st->seg_ssm[il]];
    st->rb.ssm_alt[il] = sg->view;
    sg->view = written;
}

void layer_deltanet(Forward *f, Bufs *b, int il) {
    const Model *m = f->m;
    const ModelConfig *c = &m->cfg;
    const LayerW *l = &m->layers[il];
    Backend *be = f->be;
    double t0 = fwd_phase_start(f);
    const int R = f->rows;
    const int conv = c->ssm_conv_dim, val = c->ssm_d_inner, key = c->ssm_key_dim;
    const int Hv = c->ssm_n_v_head, Hk = c->ssm_n_k_head, Dk = c->ssm_d_state, Dv = c->ssm_head_v_dim;
    const int r = Hv / Hk;
    const int64_t LW = log_width(c);

    /* 1. projections */
    if (l->legacy) {
        fwd_matmul(f, "ssm_in", l->ssm_in, b->h, R, b->proj);
        fwd_dump(f, "linear_attn_mixed_qkvz", il, b->proj, conv + val, R, 1, 1);
        split_legacy(f, b);
    } else {
        static const char *const names[3] = {"attn_qkv", "attn_gate", "attn_qkv+attn_gate"};
        fwd_matmul_pair(f, names, l->qkv, l->z, b->h, R, b->mixed, b->z);
    }
    fwd_dump(f, l->legacy ? "qkv_mixed" : "linear_attn_qkv_mixed", il, b->mixed, conv, R, 1, 1);

    /* 2. β and g (with a backend's dn_prep, one sequence and nothing dumped: after the conv, in its dispatch) */
    const bool tent = f->seqs[0].tentative;
    /* several sequences through the backend's ops for many (one CPU pool job per layer for each, not one per
     * sequence) */
    const bool many = f->n_seqs > 1 && be->vt->conv_silu_seqs && be->vt->deltanet_seqs;
    const bool prep = be->vt->dn_prep && f->n_seqs == 1 && !tent && !fwd_dumping(f, il);
    GateArgs ga;
    if (c->arch == ARCH_QWEN3NEXT) {
        fwd_matmul(f, "ssm_ba", l->ba, b->h, R, b->ba);
        if (fwd_dumping(f, il)) { /* per key group [b (r) | a (r)]: b by value head, as llama.cpp has it */
            for (int g = 0; g < Hk; g++)
                be->vt->copy_rows(be, bv_f32(b->beta, g * r), Hv, bv_f32(b->ba, g * 2 * r), 2 * Hv, R, r);
            fwd_dump(f, "b", il, b->beta, Hv, R, 1, 1);
        }
        ga = (GateArgs){R, Hv, r, 2 * Hv, b->ba, bv_f32(b->ba, r), b->beta, b->g, l->dt_bias, l->ssm_a};
    } else {
        static const char *const names[3] = {"ssm_beta", "ssm_alpha", "ssm_beta+ssm_alpha"};
        fwd_matmul_pair(f, names, l->beta, l->alpha, b->h, R, b->beta, b->g);
        fwd_dump(f, "beta", il, b->beta, 1, Hv, R, 1);
        fwd_dump(f, "alpha", il, b->g, Hv, R, 1, 1);
        ga = (GateArgs){R, Hv, 0, Hv, b->beta, b->g, b->beta, b->g, l->dt_bias, l->ssm_a};
    }
    const VecSet qk = {R, Hk, Dk, conv, Dk, key, Dk};
    bool scanned = false; /* the backend's dn_prep_scan did steps 2–5 */
    if (prep) {
        const SeqState *st = f->seqs[0].state;
        const DnPrepArgs pa = {R, conv, c->ssm_d_conv, key, Dk, c->rms_eps, l->conv1d, b->mixed,
                               st->segs[st->seg_conv[il]].view, b->q, b->k, b->v, ga};
        if (be->vt->dn_prep_scan && forward_deltanet_algo(f, R) != DELTANET_CHUNKED) {
            const BView sv = st->segs[st->seg_ssm[il]].view;
            const DeltaArgs a = {R, Hk, Hv, Dk, Dv, c->arch == ARCH_QWEN3NEXT, false, b->q, b->k, b->v, b->g, b->beta, sv,
                                 sv, b->o, {0}, false};
            fwd_phase(f, PH_DN_PRE, &t0); /* the projections; the op counts as the scan */
            if (be->vt->dn_prep_scan(be, &pa, &a)) {
                scanned = true;
                goto prepared;
            }
        }
        if (be->vt->dn_prep(be, &pa)) goto prepared;
    }
    be->vt->dn_gates(be, &ga);
    fwd_dump(f, "gate", il, b->g, Hv, R, 1, 1);
    if (c->arch != ARCH_QWEN3NEXT) fwd_dump(f, "beta_sigmoid", il, b->beta, 1, Hv, R, 1);

    /* 3. causal conv + SiLU, per sequence with its conv state (a tentative one keeps the window and its
     * inputs first); with a backend's conv_silu_seqs, SEQ_GROUP sequences in one op (each group's copies first) */
    ConvSeq cv[SEQ_GROUP];
    int n_cv = 0;
    for (int s = 0; s < f->n_seqs; s++) {
        SeqState *st = f->seqs[s].state;
        const int64_t r0 = f->row0[s];
        const BView cs = st->segs[st->seg_conv[il]].view;
        if (f->seqs[s].tentative) { /* a batch after an unresolved tentative one extends it (rb.n tokens logged) */
            const int at = st->rb.n > 0 ? st->rb.n : 0;
            if (at == 0) be->vt->copy(be, st->rb.conv_prev[il], cs, st->segs[st->seg_conv[il]].bytes);
            be->vt->copy_rows(be, bv_f32(st->rb.log[il], at * LW), LW, bv_f32(b->mixed, r0 * conv), conv,
                              f->seqs[s].n_tokens, conv);
        }
        if (!many) {
            fwd_conv_silu(f, bv_f32(b->mixed, r0 * conv), f->seqs[s].n_tokens, conv, c->ssm_d_conv, l->conv1d, cs,
                          bv_f32(b->conv_y, r0 * conv));
            continue;
        }
        cv[n_cv++] = (ConvSeq){bv_f32(b->mixed, r0 * conv), cs, bv_f32(b->conv_y, r0 * conv), f->seqs[s].n_tokens};
        if (n_cv == SEQ_GROUP || s == f->n_seqs - 1) {
            fwd_conv_silu_seqs(f, cv, n_cv, conv, c->ssm_d_conv, l->conv1d);
            n_cv = 0;
        }
    }
    fwd_dump(f, "conv_output_silu", il, b->conv_y, conv, R, 1, 1);
    /* the new conv state: each channel's last Kc-1 inputs (llama.cpp's conv_state_last view, [conv][Kc-1]) */
    if (fwd_dumping(f, il)) {
        const SeqState *st = f->seqs[0].state;
        fwd_dump(f, "conv_state_last", il, st->segs[st->seg_conv[il]].view, c->ssm_d_conv - 1, conv, 1, 1);
    }

    /* 4. split and L2-normalise */
    be->vt->l2_norm(be, b->conv_y, b->q, &qk, c->rms_eps);
    be->vt->l2_norm(be, bv_f32(b->conv_y, key), b->k, &qk, c->rms_eps);
    be->vt->copy_rows(be, b->v, val, bv_f32(b->conv_y, 2 * key), conv, R, val);
    if (fwd_dumping(f, il)) {
        if (c->arch == ARCH_QWEN3NEXT && r > 1) {
            dump_qk_repeated(f, b, il);
        } else {
            fwd_dump(f, "q_conv_predelta", il, b->q, Dk, Hk, R, 1);
            fwd_dump(f, "k_conv_predelta", il, b->k, Dk, Hk, R, 1);
        }
        fwd_dump(f, "v_conv_predelta", il, b->v, Dv, Hv, R, 1);
        const SeqState *st = f->seqs[0].state;
        fwd_dump_dn_state(f, "state_predelta", il, st->segs[st->seg_ssm[il]].view, Dk, Dv, Hv);
    }
prepared:
    fwd_phase(f, scanned ? PH_DN_SCAN : PH_DN_PRE, &t0);

    /* 5. the delta rule, per sequence; a tentative one writes the new state beside the old and logs its
     * inputs (q | k | v, g, β after the conv input); with a backend's deltanet_seqs, SEQ_GROUP sequences in one
     * op (each group's logs first, its state swaps after) */
    DeltaArgs da[SEQ_GROUP];
    bool ft[SEQ_GROUP];
    int n_da = 0, s_da = 0; /* the group's sequences: s_da … s_da + n_da − 1 */
    for (int s = 0; s < f->n_seqs && !scanned; s++) {
        SeqState *st = f->seqs[s].state;
        const int64_t r0 = f->row0[s];
        const int T = f->seqs[s].n_tokens;
        StateSeg *sg = &st->segs[st->seg_ssm[il]];
        DeltaArgs a = {T, Hk, Hv, Dk, Dv, c->arch == ARCH_QWEN3NEXT, forward_deltanet_algo(f, T) == DELTANET_CHUNKED,
                       bv_f32(b->q, r0 * key), bv_f32(b->k, r0 * key), bv_f32(b->v, r0 * val), bv_f32(b->g, r0 * Hv),
                       bv_f32(b->beta, r0 * Hv), sg->view, sg->view, bv_f32(b->o, r0 * val), {0}, false};
        const bool first_tent = f->seqs[s].tentative && st->rb.n <= 0;
        if (f->seqs[s].tentative) {
            const BView lg = bv_f32(st->rb.log[il], (first_tent ? 0 : st->rb.n) * LW);
            be->vt->copy_rows(be, bv_f32(lg, conv), LW, a.q, key, T, key);
            be->vt->copy_rows(be, bv_f32(lg, conv + key), LW, a.k, key, T, key);
            be->vt->copy_rows(be, bv_f32(lg, conv + 2 * key), LW, a.v, val, T, val);
            be->vt->copy_rows(be, bv_f32(lg, 2 * conv), LW, a.g, Hv, T, Hv);
            be->vt->copy_rows(be, bv_f32(lg, 2 * conv + Hv), LW, a.beta, Hv, T, Hv);
            /* the state before the first tentative batch stays where it is (swap the two afterwards); an
             * extending batch updates the current one in place */
            if (first_tent) a.state = st->rb.ssm_alt[il];
        }
        if (!many) {
            fwd_deltanet(f, &a);
            if (first_tent) swap_tentative(st, il, a.state);
            continue;
        }
        if (n_da == 0) s_da = s;
        ft[n_da] = first_tent;
        da[n_da++] = a;
        if (n_da == SEQ_GROUP || s == f->n_seqs - 1) {
            fwd_deltanet_seqs(f, da, n_da);
            for (int i = 0; i < n_da; i++)
                if (ft[i]) swap_tentative(f->seqs[s_da + i].state, il, da[i].state);
            n_da = 0;
        }
    }
    fwd_phase(f, PH_DN_SCAN, &t0);
    if (fwd_dumping(f, il)) {
        const SeqState *st = f->seqs[0].state;
        fwd_dump_dn_state(f, "new_state", il, st->segs[st->seg_ssm[il]].view, Dk, Dv, Hv);
        fwd_dump(f, "attn_output", il, b->o, Dv, Hv, R, 1);
        fwd_dump(f, "z", il, b->z, val, R, 1, 1);
    }

    /* 6. gated RMSNorm: rmsnorm(o_j)·ssm_norm·silu(z_j) per value head, and 7. the output projection (with a
     * backend's matmul_add_gated, nothing dumped: the norm in the product's activation load, one op) */
    if (!fwd_out_matmul_gated(f, "ssm_norm+ssm_out", l->ssm_out, b->o, b->z, l->ssm_norm, Dv, c->rms_eps, R, il)) {
        be->vt->gated_norm(be, b->o, b->z, l->ssm_norm, R * Hv, Dv, c->rms_eps, b->on);
        fwd_dump(f, "final_output", il, b->on, val, R, 1, 1);
        fwd_out_matmul(f, "ssm_out", l->ssm_out, b->on, R, il);
    }
    fwd_dump(f, "linear_attn_out", il, b->tmp, c->n_embd, R, 1, 1);
    fwd_phase(f, PH_DN_POST, &t0);
}
