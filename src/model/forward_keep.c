/* forward_keep.c — rollback of a tentative batch to its first k tokens (model.h: forward_keep).
 *
 * The tentative batch left, per recurrent layer, the delta-net state from before the batch (the scan wrote
 * the new state beside it: Rollback.ssm_alt), the conv window from before it, and the scan's inputs per token
 * (conv input, q | k | v, g, β). Keeping k of its n tokens replays those k tokens from the old state: the conv
 * window through the conv op (its outputs are thrown away), the state through the delta rule in the form
 * the forward pass would use for a batch of k tokens. KV rows need nothing: the length goes back to pos0 + k
 * and later tokens overwrite the rest. Keeping all n costs nothing; docs/MODEL.md ("Rollback") has the
 * measurements against the other way, a checkpoint of the whole state after every token. */
#include "model/forward_internal.h"

int forward_keep(Forward *f, SeqState *s, int k, Err *err) {
    const ModelConfig *c = &f->m->cfg;
    Rollback *rb = &s->rb;
    if (rb->n < 0) return err_set(err, "no tentative batch to cut back");
    if (k < 0 || k > rb->n) return err_set(err, "keeping %d tokens of a tentative batch of %d", k, rb->n);
    if (s->be != f->be) return err_set(err, "a sequence state of another backend");
    if (k == rb->n) {
        rb->n = -1;
        return 0;
    }
    Backend *be = f->be;
    Bufs *b = &f->b;
    const int conv = c->ssm_conv_dim, key = c->ssm_key_dim, val = c->ssm_d_inner, Hv = c->ssm_n_v_head;
    const int64_t LW = 2 * (int64_t)conv + 2 * (int64_t)Hv;
    be->vt->begin(be);
    for (int il = s->l0; il < s->l1; il++) {
        if (!c->recurrent[il]) continue;
        const LayerW *l = &f->m->layers[il];
        StateSeg *cs = &s->segs[s->seg_conv[il]], *ss = &s->segs[s->seg_ssm[il]];
        const BView lg = rb->log[il];
        be->vt->copy(be, cs->view, rb->conv_prev[il], cs->bytes);
        if (k == 0) {
            be->vt->copy(be, ss->view, rb->ssm_alt[il], ss->bytes);
            continue;
        }
        be->vt->copy_rows(be, b->mixed, conv, lg, LW, k, conv);
        be->vt->conv_silu(be, b->mixed, k, conv, c->ssm_d_conv, l->conv1d, cs->view, b->conv_y);
        be->vt->copy_rows(be, b->q, key, bv_f32(lg, conv), LW, k, key);
        be->vt->copy_rows(be, b->k, key, bv_f32(lg, conv + key), LW, k, key);
        be->vt->copy_rows(be, b->v, val, bv_f32(lg, conv + 2 * key), LW, k, val);
        be->vt->copy_rows(be, b->g, Hv, bv_f32(lg, 2 * conv), LW, k, Hv);
        be->vt->copy_rows(be, b->beta, Hv, bv_f32(lg, 2 * conv + Hv), LW, k, Hv);
        const DeltaArgs a = {k, c->ssm_n_k_head, Hv, c->ssm_d_state, c->ssm_head_v_dim, c->arch == ARCH_QWEN3NEXT,
                             forward_deltanet_algo(f, k) == DELTANET_CHUNKED, b->q, b->k, b->v, b->g, b->beta,
                             rb->ssm_alt[il], ss->view, b->o, {0}, false};
        be->vt->deltanet(be, &a);
    }
    if (be->vt->submit(be, err) || be->vt->wait(be, err)) return -1;
    s->n_past = rb->pos0 + k;
    rb->n = -1;
    return 0;
}
