/* layer_attention.c — one gated full-attention mixer over the batch (docs/MODEL.md, Gated attention), from the normed input b->h
 * to the projected output b->tmp:
 *   packed query|gate projection, K and V projections → per-head RMSNorm of q and k → partial NeoX RoPE
 *   (IMROPE sections for qwen35*) → append K, V to the cache → causal GQA attention → output ⊙ sigmoid(gate)
 *   → attn_output.
 * Stage dumps use llama.cpp's names. */
#include "model/forward_internal.h"

#include <math.h>

void layer_attention(Forward *f, Bufs *b, int il) {
    const Model *m = f->m;
    const ModelConfig *c = &m->cfg;
    const LayerW *l = &m->layers[il];
    Backend *be = f->be;
    double t0 = fwd_phase_start(f);
    const int R = f->rows, H = c->n_head, Hkv = c->n_head_kv, D = c->head_dim;
    const int HD = H * D, KVD = Hkv * D;

    fwd_matmul(f, "attn_q", l->wq, b->h, R, b->qg);
    static const char *const names[3] = {"attn_k", "attn_v", "attn_k+attn_v"};
    fwd_matmul_pair(f, names, l->wk, l->wv, b->h, R, b->ka, b->va);
    fwd_dump(f, "Qcur_full", il, b->qg, 2 * HD, R, 1, 1);
    fwd_dump(f, "Vcur", il, b->va, KVD, R, 1, 1);
    fwd_dump(f, "Kcur", il, b->ka, KVD, R, 1, 1);

    /* q: per head [q | gate], normed into qa; k normed in place (with a backend's attn_prep, one sequence and
     * nothing dumped: norms, RoPE and the cache stores in one op) */
    const VecSet qs = {R, H, D, 2 * HD, 2 * D, HD, D}, ks = {R, Hkv, D, KVD, D, KVD, D};
    const int *sections = c->rope_imrope ? c->rope_sections : NULL;
    /* a batch with images: every row's (time, height, width) from b.thw (text rows p, p, p: the same bits) */
    const RopeArgs rq = {R, H, D, c->n_rot, HD, c->rope_base, c->rope_freq_scale, sections, f->thw_on};
    const RopeArgs rk = {R, Hkv, D, c->n_rot, KVD, c->rope_base, c->rope_freq_scale, sections, f->thw_on};
    const BView rpos = f->thw_on ? b->thw : b->pos;
    const bool fused = !fwd_dumping(f, il);
    bool prepared = false;
    if (fused && !f->thw_on && be->vt->attn_prep && f->n_seqs == 1) { /* images: the rope unfused (rare batches) */
        /* the cache rows from b->kvrow on a device that reads them there (a recorded pass replays at later rows) */
        const SeqState *st = f->seqs[0].state;
        const int64_t row0 = f->rows_on ? 0 : (int64_t)st->n_past * KVD;
        const AttnPrepArgs pa = {R, H, Hkv, D, c->rms_eps, l->q_norm, l->k_norm, b->qg, b->qa, b->ka, b->va, b->pos,
                                 bv_f32(st->segs[st->seg_k[il]].view, row0), bv_f32(st->segs[st->seg_v[il]].view, row0), rq,
                                 f->rows_on ? b->kvrow : (BView){0}};
        prepared = be->vt->attn_prep(be, &pa);
    }
    if (!prepared) be->vt->rms_norm(be, b->qg, b->qa, l->q_norm, &qs, c->rms_eps);
    if (!prepared) be->vt->rms_norm(be, b->ka, b->ka, l->k_norm, &ks, c->rms_eps);
    fwd_dump(f, "Qcur_normed", il, b->qa, D, H, R, 1);
    fwd_dump(f, "Kcur_normed", il, b->ka, D, Hkv, R, 1);

    if (!prepared) {
        be->vt->rope(be, b->qa, rpos, &rq);
        be->vt->rope(be, b->ka, rpos, &rk);
    }
    for (int s = 0; s < f->n_seqs && !prepared; s++) {
        fwd_graph_spoil(f); /* the row from the host: this pass cannot be replayed at another */
        SeqState *st = f->seqs[s].state;
        const int64_t r0 = f->row0[s];
        be->vt->kv_append(be, st->segs[st->seg_k[il]].view, st->n_past, bv_f32(b->ka, r0 * KVD), f->seqs[s].n_tokens, KVD, false);
        be->vt->kv_append(be, st->segs[st->seg_v[il]].view, st->n_past, bv_f32(b->va, r0 * KVD), f->seqs[s].n_tokens, KVD, true);
    }
    fwd_dump(f, "Qcur", il, b->qa, D, H, R, 1);
    fwd_dump(f, "Kcur", il, b->ka, D, Hkv, R, 1);

    /* exact mode, batches shorter than the chunked scan's threshold: one query at a time, so that their rows are
     * the bits of single-token steps (the kernels sum P·V in another order for batches, as llama.cpp does, and
     * pick their form by the batch's end) — a speculative verify batch then leaves exactly the state of the
     * tokens it keeps. Longer batches (prompts) keep the batched kernels' speed. */
    for (int s = 0; s < f->n_seqs; s++) {
        const int64_t r0 = f->row0[s];
        SeqState *st = f->seqs[s].state;
        const int T = f->seqs[s].n_tokens;
        const bool by_row = be->mode == MATMUL_EXACT && forward_deltanet_algo(f, T) == DELTANET_RECURRENT;
        for (int t = 0; t < T; t += by_row ? 1 : T) {
            const AttentionArgs a = {by_row ? 1 : T, st->n_past + t, H, Hkv, D, 1.0f / sqrtf((float)D),
                                     bv_f32(b->qa, (r0 + t) * HD), st->segs[st->seg_k[il]].view,
                                     st->segs[st->seg_v[il]].view, bv_f32(b->ao, (r0 + t) * HD),
                                     f->rows_on ? bv_f32(b->kvrow, r0 + t) : (BView){0},
                                     f->rows_on ? fwd_bucket(st->n_past + T) : 0};
            if (fused && be->vt->attention_gated) { /* the output gate in the attention's epilogue */
                const BView gate = bv_f32(b->qg, (r0 + t) * 2 * HD + D);
                fwd_attention_gated(f, &a, gate, 2 * HD, 2 * D);
            } else {
                fwd_attention(f, &a);
            }
        }
    }
    fwd_dump(f, "attn_pregate", il, b->ao, HD, R, 1, 1);

    /* the output gate: the second half of each head's query projection */
    if (!(fused && be->vt->attention_gated)) be->vt->mul_sigmoid(be, b->ao, bv_f32(b->qg, D), &qs);
    fwd_dump(f, "attn_gated", il, b->ao, HD, R, 1, 1);
    fwd_out_matmul(f, "attn_output", l->wo, b->ao, R, il);
    fwd_dump(f, "attn_output", il, b->tmp, c->n_embd, R, 1, 1);
    fwd_phase(f, PH_ATTN, &t0);
}
