/* layer_ffn.c — the feed-forward half of a block, from b->h (post-attention-normed) to b->tmp:
 *   dense SwiGLU (qwen35):  down(silu(gate·y) ⊙ up·y)
 *   MoE (qwen3next, qwen35moe): softmax over all experts → top-k → renormalise (floor 6.1035e-5) → each
 *   selected expert's SwiGLU, summed in selection order with its weight → + the shared expert ⊙
 *   sigmoid(ffn_gate_inp_shexp·y)  (docs/MODEL.md, Feed-forward).
 * On a device in decode the weighted sum is the down product's epilogue (moe_ffn_combine) and the shared expert's
 * σ-gated add and the residual its down's (matmul_add_sigmoid): the same bits, fewer dispatches.
 * Experts run grouped: the selection comes back to the host once per layer, the rows routed to each expert
 * are listed (index work only), gathered and multiplied together, so each selected expert's weights are read
 * once per batch. The expert provider (model.h), when set, supplies the experts' bytes between routing and
 * the expert matmuls (in groups of its max_acquire), after a prefetch call with the layer's whole list.
 * fwd_predict_experts applies the next layer's router to the residual stream for a provider that asks.
 * A backend with the fused op moe_ffn groups the rows itself (a device, so nothing comes back to the host;
 * the CPU backend, to run whole experts per thread: backend/cpu/host_moe.c); it is used only when no
 * provider is set (a streamed model, whose experts come through the provider, never takes it). */
#include "model/forward_internal.h"

#include <string.h>

static void ffn_dense(Forward *f, Bufs *b, const LayerW *l, int il) {
    const int R = f->rows;
    static const char *const labels[3] = {"ffn_gate", "ffn_up", "ffn_gate+up+swiglu"};
    fwd_gate_up(f, labels, l->ffn_gate, l->ffn_up, b->h, R, b->fg, b->fu);
    fwd_out_matmul(f, "ffn_down", l->ffn_down, b->fg, R, il);
}

/* Lists the (row, slot) pairs of the selection by expert, ascending in both, into gidx (the row) and sidx
 * (row·kE + slot), and the used experts; returns how many experts are used. */
static int group_by_expert(HostIdx *h, int R, int kE, int nE) {
    const int n = R * kE;
    memset(h->count, 0, sizeof(int32_t) * (size_t)nE);
    for (int i = 0; i < n; i++) h->count[h->es[i]]++;
    int n_used = 0, at = 0;
    for (int e = 0; e < nE; e++) {
        h->start[e] = at;
        at += h->count[e];
        if (h->count[e]) h->used[n_used++] = e;
    }
    int32_t *gidx = h->gs, *sidx = h->gs + n;
    for (int e = 0; e < nE; e++) h->count[e] = 0; /* reused as the fill position */
    for (int i = 0; i < n; i++) {
        const int e = h->es[i], p = h->start[e] + h->count[e]++;
        gidx[p] = i / kE;
        sidx[p] = i;
    }
    return n_used;
}

/* the routed experts with the grouping on the host: the selection comes back once per layer */
static void experts_grouped_on_host(Forward *f, Bufs *b, const LayerW *l, int il) {
    const ModelConfig *c = &f->m->cfg;
    Backend *be = f->be;
    HostIdx *h = &f->hx;
    const int R = f->rows, E = c->n_embd, nE = c->n_expert, kE = c->n_expert_used, Fe = c->n_ff_exp;
    be->vt->download(be, h->es, b->es, sizeof(int32_t) * (size_t)R * kE);
    const int n_used = group_by_expert(h, R, kE, nE);
    be->vt->upload(be, b->gidx, h->gs, sizeof(int32_t) * (size_t)R * kE);
    be->vt->upload(be, b->sidx, h->gs + R * kE, sizeof(int32_t) * (size_t)R * kE);
    /* the provider (if any) hands out the experts' bytes in groups of at most max_acquire */
    const bool prov = f->has_provider && !f->failed;
    const int group = prov && f->provider.max_acquire > 0 ? f->provider.max_acquire : n_used;
    if (prov && f->provider.prefetch) f->provider.prefetch(f->provider.ctx, il, h->used, n_used, true);
    /* once a provider failed, the pass's results are not used: its experts are not computed from the mapping */
    for (int u0 = 0; u0 < n_used && !(f->has_provider && f->failed); u0 += group) {
        const int u1 = u0 + group < n_used ? u0 + group : n_used;
        bool provided = false;
        if (prov) {
            Err e = {{0}};
            if (f->provider.acquire(f->provider.ctx, il, h->used + u0, u1 - u0, h->data + u0, &e) == 0) {
                provided = true;
            } else {
                f->failed = true;
                err_set(&f->err, "layer %d experts: %s", il, e.msg);
                break;
            }
        }
        for (int u = u0; u < u1; u++) {
            const int e = h->used[u], n = h->count[e];
            const BView gi = bv_f32(b->gidx, h->start[e]), si = bv_f32(b->sidx, h->start[e]);
            const void *const *d = provided ? h->data[u] : NULL;
            be->vt->gather_rows(be, b->gx, b->h, gi, n, E);
            fwd_matmul_expert(f, "moe_gate_exps", l->gate_exps, e, d ? d[0] : NULL, b->gx, n, b->fg);
            fwd_matmul_expert(f, "moe_up_exps", l->up_exps, e, d ? d[1] : NULL, b->gx, n, b->fu);
            fwd_swiglu(f, b->fg, b->fu, n, Fe);
            /* gx is consumed: reuse it for the outputs */
            fwd_matmul_expert(f, "moe_down_exps", l->down_exps, e, d ? d[2] : NULL, b->fg, n, b->gx);
            be->vt->scatter_rows(be, b->eo, b->gx, si, n, E);
        }
        if (provided && f->provider.release) f->provider.release(f->provider.ctx, il);
    }
}

static void ffn_moe(Forward *f, Bufs *b, const LayerW *l, int il) {
    const ModelConfig *c = &f->m->cfg;
    Backend *be = f->be;
    const int R = f->rows, E = c->n_embd, nE = c->n_expert, kE = c->n_expert_used;

    /* routing (the router is F32: exact logits) */
    fwd_matmul(f, "moe_router", l->router, b->h, R, b->rl);
    fwd_dump(f, "ffn_moe_logits", il, b->rl, nE, R, 1, 1);
    be->vt->moe_route(be, b->rl, b->es, b->ew, R, nE, kE);
    fwd_dump(f, "ffn_moe_probs", il, b->rl, nE, R, 1, 1);
    if (fwd_dumping(f, il)) {
        fwd_dump_view(f, "ffn_moe_topk", il, b->es, kE, R, 1, 1, true);
        fwd_dump(f, "ffn_moe_weights_norm", il, b->ew, kE, R, 1, 1);
    }
    /* the experts and their weighted sum in selection order (one op where the backend sums them in the down
     * product: decode on a device) */
    if (be->vt->moe_ffn && !f->has_provider) {
        const MoeArgs ma = {l->gate_exps, l->up_exps, l->down_exps, b->h, b->es, b->eo, b->mg, b->mu, b->mwork, R, kE, nE};
        if (!fwd_moe_ffn_combine(f, &ma, b->ew, b->tmp)) {
            fwd_moe_ffn(f, &ma);
            be->vt->moe_combine(be, b->tmp, b->eo, b->ew, R, kE, E);
        }
    } else {
        experts_grouped_on_host(f, b, l, il);
        be->vt->moe_combine(be, b->tmp, b->eo, b->ew, R, kE, E);
    }
    fwd_dump(f, "ffn_moe_out", il, b->tmp, E, R, 1, 1);

    /* shared expert; where the backend adds it σ-gated and the residual in its down's epilogue, the gate's logits
     * first (the epilogue reads them) */
    static const char *const labels[3] = {"shexp_gate", "shexp_up", "shexp_gate+up+swiglu"};
    const bool early = be->vt->matmul_add_sigmoid && R <= be->fold_norm_rows && !fwd_dumping(f, il);
    if (early) fwd_matmul(f, "shexp_gate_inp", l->shexp_gate, b->h, R, b->sgate);
    fwd_gate_up(f, labels, l->gate_shexp, l->up_shexp, b->h, R, b->fg, b->fu);
    if (early && fwd_out_matmul_sigmoid(f, "shexp_down+gate+residual", l->down_shexp, b->fg, b->sgate, R, il)) return;
    fwd_matmul(f, "shexp_down", l->down_shexp, b->fg, R, b->tmp2);
    fwd_dump(f, "ffn_shexp", il, b->tmp2, E, R, 1, 1);
    if (!early) fwd_matmul(f, "shexp_gate_inp", l->shexp_gate, b->h, R, b->sgate);
    be->vt->sigmoid(be, b->sgate, R);
    fwd_dump(f, "shared_expert_gate_sigmoid", il, b->sgate, 1, R, 1, 1);
    be->vt->add_scaled(be, b->tmp, b->tmp2, b->sgate, R, E);
}

/* The provider's prediction for layer il: il's post-attention norm and router applied to the residual stream
 * x as it is now (after layer il − 1, or as the layer range starts), top-k per row, the union handed to
 * prefetch. Uses tmp2, rl and
 * the prediction buffers only; x and h are untouched. */
void fwd_predict_experts(Forward *f, Bufs *b, int il) {
    const ModelConfig *c = &f->m->cfg;
    const LayerW *l = &f->m->layers[il];
    Backend *be = f->be;
    HostIdx *h = &f->hx;
    const int R = f->rows, nE = c->n_expert, kE = c->n_expert_used;
    const VecSet rs = vs_rows(R, c->n_embd);
    double t0 = fwd_phase_start(f);
    be->vt->rms_norm(be, b->x, b->tmp2, l->post_norm, &rs, c->rms_eps);
    fwd_matmul(f, "moe_predict", l->router, b->tmp2, R, b->rl);
    be->vt->moe_route(be, b->rl, b->pes, b->pew, R, nE, kE);
    be->vt->download(be, h->pes, b->pes, sizeof(int32_t) * (size_t)R * kE);
    memset(h->count, 0, sizeof(int32_t) * (size_t)nE);
    for (int i = 0; i < R * kE; i++) h->count[h->pes[i]] = 1;
    int n = 0;
    for (int e = 0; e < nE; e++)
        if (h->count[e]) h->used[n++] = e;
    f->provider.prefetch(f->provider.ctx, il, h->used, n, false);
    fwd_phase(f, PH_FFN, &t0);
}

void layer_ffn(Forward *f, Bufs *b, int il) {
    const LayerW *l = &f->m->layers[il];
    double t0 = fwd_phase_start(f);
    if (f->m->cfg.moe) ffn_moe(f, b, l, il);
    else ffn_dense(f, b, l, il);
    fwd_phase(f, PH_FFN, &t0);
}
