/* layer_attention.c — one gated full-attention mixer over the batch (SPEC §2.3), from b->h to b->tmp:
 *   packed query|gate projection, K and V projections → per-head RMSNorm of q and k → partial NeoX RoPE
 *   (IMROPE sections for qwen35*) → K and V into the sequence's F32 cache → causal GQA attention →
 *   ⊙ sigmoid(gate) → attn_output. */
#include "model/forward_internal.h"

#include <math.h>
#include <string.h>

void layer_attention(Forward *f, Bufs *b, int il) {
    const Model *m = f->m;
    const ModelConfig *c = &m->cfg;
    const LayerW *l = &m->layers[il];
    double t0 = fwd_now();
    const int R = f->rows, H = c->n_head, Hkv = c->n_head_kv, D = c->head_dim;
    const int HD = H * D, KVD = Hkv * D;
    const int *sections = c->rope_imrope ? c->rope_sections : NULL;

    fwd_matmul(f, "attn_q", &l->wq, b->h, R, b->qg);
    fwd_matmul(f, "attn_k", &l->wk, b->h, R, b->ka);
    fwd_matmul(f, "attn_v", &l->wv, b->h, R, b->va);
    fwd_dump(f, "Qcur_full", il, b->qg, 2 * HD, R, 1, 1);
    fwd_dump(f, "Vcur", il, b->va, KVD, R, 1, 1);
    fwd_dump(f, "Kcur", il, b->ka, KVD, R, 1, 1);

    for (int64_t row = 0; row < R; row++) {
        for (int h = 0; h < H; h++)
            op_rmsnorm(b->qg + row * 2 * HD + (int64_t)h * 2 * D, l->q_norm, D, c->rms_eps, b->qa + row * HD + h * D);
        for (int h = 0; h < Hkv; h++)
            op_rmsnorm(b->ka + row * KVD + h * D, l->k_norm, D, c->rms_eps, b->ka + row * KVD + h * D);
    }
    fwd_dump(f, "Qcur_normed", il, b->qa, D, H, R, 1);
    fwd_dump(f, "Kcur_normed", il, b->ka, D, Hkv, R, 1);

    for (int s = 0; s < f->n_seqs; s++) {
        SeqState *st = f->seqs[s].state;
        const int pos0 = st->n_past, T = f->seqs[s].n_tokens;
        for (int t = 0; t < T; t++) {
            const int64_t row = f->row0[s] + t;
            for (int h = 0; h < H; h++) op_rope(b->qa + row * HD + h * D, c->n_rot, pos0 + t, c->rope_base, c->rope_freq_scale, sections);
            for (int h = 0; h < Hkv; h++) op_rope(b->ka + row * KVD + h * D, c->n_rot, pos0 + t, c->rope_base, c->rope_freq_scale, sections);
        }
        memcpy(st->k[il] + (int64_t)pos0 * KVD, b->ka + (int64_t)f->row0[s] * KVD, sizeof(float) * (size_t)T * KVD);
        memcpy(st->v[il] + (int64_t)pos0 * KVD, b->va + (int64_t)f->row0[s] * KVD, sizeof(float) * (size_t)T * KVD);
    }
    fwd_dump(f, "Qcur", il, b->qa, D, H, R, 1);
    fwd_dump(f, "Kcur", il, b->ka, D, Hkv, R, 1);

    for (int s = 0; s < f->n_seqs; s++) {
        const int64_t r0 = f->row0[s];
        SeqState *st = f->seqs[s].state;
        AttnArgs a = {f->seqs[s].n_tokens, st->n_past, H, Hkv, D, 1.0f / sqrtf((float)D),
                      b->qa + r0 * HD, st->k[il], st->v[il], b->ao + r0 * HD};
        fwd_attention(f, &a);
    }
    fwd_dump(f, "attn_pregate", il, b->ao, HD, R, 1, 1);

    for (int64_t row = 0; row < R; row++)
        for (int h = 0; h < H; h++) {
            const float *gate = b->qg + row * 2 * HD + (int64_t)h * 2 * D + D;
            float *o = b->ao + row * HD + h * D;
            for (int i = 0; i < D; i++) o[i] *= op_sigmoid(gate[i]);
        }
    fwd_dump(f, "attn_gated", il, b->ao, HD, R, 1, 1);
    fwd_matmul(f, "attn_output", &l->wo, b->ao, R, b->tmp);
    fwd_dump(f, "attn_output", il, b->tmp, c->n_embd, R, 1, 1);
    fwd_phase(f, PH_ATTN, &t0);
}
