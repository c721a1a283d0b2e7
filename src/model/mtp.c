/* mtp.c — an MTP block over the forward pass (mtp.h): its own input (embedding and hidden row through enorm,
 * hnorm and eh_proj), its block through forward_layers on layer N, its head through fwd_head. The activation
 * buffers are the forward pass's; the pass adds its hidden rows in and out and the [embedding | hidden] rows. */
#include "model/mtp.h"

#include "model/forward_internal.h"

#include <stdlib.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

struct MtpPass {
    Backend *be;
    int max_rows, E;
    BBuf *mem;
    BView hin, hout, cat; /* [R][E], [R][E], [R][2E] */
};

MtpPass *mtp_pass_new(const Model *m, Forward *f, int max_rows, Err *err) {
    if (m->n_mtp == 0) return err_set(err, "%s", m->mtp_missing[0] ? m->mtp_missing : "the model has no MTP block"), NULL;
    if (max_rows < 1 || max_rows > f->max_batch)
        return err_set(err, "an MTP pass of %d rows (the forward pass takes %d)", max_rows, f->max_batch), NULL;
    MtpPass *p = calloc(1, sizeof *p);
    if (!p) return err_set(err, "out of memory"), NULL;
    p->be = f->be;
    p->max_rows = max_rows;
    p->E = m->cfg.n_embd;
    const size_t row = ALIGN64((size_t)max_rows * (size_t)p->E * sizeof(float));
    if (!(p->mem = p->be->vt->alloc(p->be, 4 * row, err))) {
        free(p);
        return err_prefix(err, "MTP buffers"), NULL;
    }
    p->hin = (BView){p->mem, 0};
    p->hout = (BView){p->mem, row};
    p->cat = (BView){p->mem, 2 * row};
    return p;
}

void mtp_pass_free(MtpPass *p) {
    if (!p) return;
    p->be->vt->free(p->be, p->mem);
    free(p);
}

int mtp_pass_rows(const MtpPass *p) { return p->max_rows; }
BView mtp_hidden_in(const MtpPass *p) { return p->hin; }
BView mtp_hidden_out(const MtpPass *p) { return p->hout; }

int mtp_run(Forward *f, MtpPass *p, int which, const BatchSeq *seqs, int n_seqs, int v0, int v1, Err *err) {
    const Model *m = f->m;
    ASSERT(which >= 0 && which < m->n_mtp && p->be == f->be);
    const MtpW *t = &m->mtp[which];
    for (int s = 0; s < n_seqs; s++) {
        if (!seqs[s].tokens) return err_set(err, "no tokens for sequence %d of the MTP batch", s);
        if (seqs[s].state->l0 > t->layer || seqs[s].state->l1 <= t->layer)
            return err_set(err, "an MTP pass on a state of layers [%d, %d)", seqs[s].state->l0, seqs[s].state->l1);
    }
    int rows = 0;
    for (int s = 0; s < n_seqs; s++) rows += seqs[s].n_tokens > 0 ? seqs[s].n_tokens : 0;
    if (rows > p->max_rows) return err_set(err, "an MTP batch of %d rows (room for %d)", rows, p->max_rows);
    if (forward_begin(f, seqs, n_seqs, err)) return -1;
    Backend *be = f->be;
    Bufs *b = &f->b;
    const int R = f->rows, E = p->E;
    double t0 = now_s();
    be->vt->get_rows(be, t->embd, b->ids, R, b->tmp);
    const VecSet in = {R, 1, E, E, E, 2 * (int64_t)E, E};
    be->vt->rms_norm(be, b->tmp, p->cat, t->enorm, &in, m->cfg.rms_eps);
    be->vt->rms_norm(be, p->hin, bv_f32(p->cat, E), t->hnorm, &in, m->cfg.rms_eps);
    fwd_matmul(f, "eh_proj", t->eh_proj, p->cat, R, b->x);
    fwd_phase(f, PH_EMBED, &t0);
    forward_layers(f, t->layer, t->layer + 1);
    fwd_head(f, t->head_norm, t->head, v0, v1);
    int n_out = 0;
    for (int s = 0; s < n_seqs; s++) n_out += seqs[s].n_out;
    if (n_out) be->vt->copy(be, p->hout, b->h, sizeof(float) * (size_t)n_out * (size_t)E);
    return forward_end(f, err);
}

void mtp_capture(Forward *f, int row0, int n, BView dst) {
    const Model *m = f->m;
    ASSERT(row0 >= 0 && n >= 0 && row0 + n <= f->rows);
    if (n == 0) return;
    const VecSet rs = vs_rows(n, m->cfg.n_embd);
    f->be->vt->rms_norm(f->be, bv_f32(f->b.x, (int64_t)row0 * m->cfg.n_embd), dst, m->output_norm, &rs, m->cfg.rms_eps);
}
