/* layer_ffn.c — the feed-forward half of a block, from b->h (post-attention-normed) to b->tmp:
 *   dense SwiGLU (qwen35):  down(silu(gate·y) ⊙ up·y)
 *   MoE (qwen3next, qwen35moe): softmax over all experts → top-k → renormalise (floor 6.1035e-5) → each
 *   selected expert's SwiGLU, summed in selection order with its weight → + the shared expert ⊙
 *   sigmoid(ffn_gate_inp_shexp·y)  (SPEC §2.5).
 * Experts run grouped: the rows routed to an expert are gathered and multiplied together, so each selected
 * expert's weights are read once per batch. */
#include "model/forward_internal.h"

#include <string.h>

static void ffn_dense(Forward *f, Bufs *b, const LayerW *l) {
    const int R = f->rows, F = f->m->cfg.n_ff;
    fwd_matmul(f, "ffn_gate", &l->ffn_gate, b->h, R, b->fg);
    fwd_matmul(f, "ffn_up", &l->ffn_up, b->h, R, b->fu);
    fwd_swiglu_rows(f, b->fg, b->fu, R, F);
    fwd_matmul(f, "ffn_down", &l->ffn_down, b->fg, R, b->tmp);
}

/* top-k of p[0..n) by descending value, ties to the lower index */
static void top_k(const float *p, int n, int k, int32_t *sel) {
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int q = 0; q < s; q++) taken |= sel[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[s] = best;
    }
}

static void ffn_moe(Forward *f, Bufs *b, const LayerW *l, int il) {
    const ModelConfig *c = &f->m->cfg;
    const int R = f->rows, E = c->n_embd, nE = c->n_expert, kE = c->n_expert_used;
    const int Fe = c->n_ff_exp, Fs = c->n_ff_shexp;

    /* routing (the router is F32: exact logits) */
    fwd_matmul(f, "moe_router", &l->router, b->h, R, b->rl);
    fwd_dump(f, "ffn_moe_logits", il, b->rl, nE, R, 1, 1);
    for (int t = 0; t < R; t++) op_softmax(b->rl + (int64_t)t * nE, nE);
    fwd_dump(f, "ffn_moe_probs", il, b->rl, nE, R, 1, 1);
    for (int t = 0; t < R; t++) {
        const float *p = b->rl + (int64_t)t * nE;
        int32_t *sel = b->es + (int64_t)t * kE;
        float *w = b->ew + (int64_t)t * kE;
        top_k(p, nE, kE, sel);
        double sum = 0.0;
        for (int s = 0; s < kE; s++) sum += (double)p[sel[s]];
        float fs = (float)sum;
        if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
        for (int s = 0; s < kE; s++) w[s] = p[sel[s]] / fs;
    }
    if (f->dump && f->n_seqs == 1) {
        for (int i = 0; i < R * kE; i++) b->gx[i] = (float)b->es[i]; /* gx is free until the experts run */
        fwd_dump(f, "ffn_moe_topk", il, b->gx, kE, R, 1, 1);
        fwd_dump(f, "ffn_moe_weights_norm", il, b->ew, kE, R, 1, 1);
    }

    /* experts, grouped: gather the rows routed to e, run its SwiGLU on all of them, scatter */
    for (int e = 0; e < nE; e++) {
        int n = 0;
        for (int i = 0; i < R * kE; i++)
            if (b->es[i] == e) b->erows[n++] = i;
        if (!n) continue;
        for (int i = 0; i < n; i++)
            memcpy(b->gx + (int64_t)i * E, b->h + (int64_t)(b->erows[i] / kE) * E, sizeof(float) * (size_t)E);
        const MatW gate = expert_mat(&l->gate_exps, e), up = expert_mat(&l->up_exps, e), down = expert_mat(&l->down_exps, e);
        fwd_matmul(f, "moe_gate_exps", &gate, b->gx, n, b->fg);
        fwd_matmul(f, "moe_up_exps", &up, b->gx, n, b->fu);
        fwd_swiglu_rows(f, b->fg, b->fu, n, Fe);
        fwd_matmul(f, "moe_down_exps", &down, b->fg, n, b->gx); /* gx is consumed: reuse it for the outputs */
        for (int i = 0; i < n; i++)
            memcpy(b->eo + (int64_t)b->erows[i] * E, b->gx + (int64_t)i * E, sizeof(float) * (size_t)E);
    }
    /* weighted sum in selection order */
    for (int t = 0; t < R; t++) {
        float *out = b->tmp + (int64_t)t * E;
        const float *w = b->ew + (int64_t)t * kE;
        const float *eo = b->eo + (int64_t)t * kE * E;
        for (int x = 0; x < E; x++) out[x] = eo[x] * w[0];
        for (int s = 1; s < kE; s++)
            for (int x = 0; x < E; x++) out[x] += eo[(int64_t)s * E + x] * w[s];
    }
    fwd_dump(f, "ffn_moe_out", il, b->tmp, E, R, 1, 1);

    /* shared expert */
    fwd_matmul(f, "shexp_gate", &l->gate_shexp, b->h, R, b->fg);
    fwd_matmul(f, "shexp_up", &l->up_shexp, b->h, R, b->fu);
    fwd_swiglu_rows(f, b->fg, b->fu, R, Fs);
    fwd_matmul(f, "shexp_down", &l->down_shexp, b->fg, R, b->tmp2);
    fwd_dump(f, "ffn_shexp", il, b->tmp2, E, R, 1, 1);
    fwd_matmul(f, "shexp_gate_inp", &l->shexp_gate, b->h, R, b->sgate);
    for (int t = 0; t < R; t++) b->sgate[t] = op_sigmoid(b->sgate[t]);
    fwd_dump(f, "shared_expert_gate_sigmoid", il, b->sgate, 1, R, 1, 1);
    for (int t = 0; t < R; t++)
        for (int x = 0; x < E; x++) b->tmp[(int64_t)t * E + x] += b->tmp2[(int64_t)t * E + x] * b->sgate[t];
}

void layer_ffn(Forward *f, Bufs *b, int il) {
    const LayerW *l = &f->m->layers[il];
    double t0 = fwd_now();
    if (f->m->cfg.moe) ffn_moe(f, b, l, il);
    else ffn_dense(f, b, l);
    fwd_phase(f, PH_FFN, &t0);
}
