/* spec_mtp.c — the model's MTP block as the drafter (spec_internal.h), as llama.cpp v0.4.0's draft-mtp drives it
 * (common/speculative.cpp): the block's KV holds, for each trunk position p, the row (token p, the trunk's
 * final-normed hidden row of p − 1; zero for p = 0), filled from every batch the trunk evaluates; a draft is the
 * row (the next token, the last hidden row) at the next position, and each further draft the previous draft with
 * the block's own output row (h_nextn), at the positions after it, which later batches overwrite.
 *
 * The trunk's hidden rows of a batch are captured between its head and forward_end (spec_capture): for a plain
 * batch into the engine's MTP input rows, run right after it (the catch-up: no logits); for a verify batch into
 * the session's ring of rows by position, fed with the next draft once keep has decided how many count. */
#include "engine/spec_internal.h"

#include <stdlib.h>
#include <string.h>

static const Stage *last_stage(const DlEngine *en) { return &en->st[en->n_st - 1]; }
static int mtp_pos(const Spec *sp) { return sp->off + sp->kv->n_past; } /* M: positions the block has seen */
static int trunk_pos(const DlSession *s) { return s->state->n_past; }

int spec_mtp_init(DlSession *s, Spec *sp, Err *err) {
    DlEngine *en = s->engine;
    const Model *m = en->model;
    const Stage *st = last_stage(en);
    if (!en->mtp && !(en->mtp = mtp_pass_new(m, st->fw, en->n_batch, err))) return -1;
    if (!(sp->kv = seqstate_new(m, st->be, en->n_ctx, m->mtp[0].layer, m->mtp[0].layer + 1, err))) return -1;
    const size_t row = sizeof(float) * (size_t)m->cfg.n_embd;
    if (!(sp->hmem = st->be->vt->alloc(st->be, row * (size_t)(sp->rcap + 1), err))) return err_prefix(err, "MTP hidden rows"), -1;
    sp->hring = (BView){sp->hmem, 0};
    sp->hnext = (BView){sp->hmem, row * (size_t)sp->rcap};
    return 0;
}

void spec_mtp_free(Spec *sp) {
    if (sp->hmem) sp->kv->be->vt->free(sp->kv->be, sp->hmem);
    seqstate_free(sp->kv);
}

/* An empty block at the trunk's position (0, or where a restore left it): the hidden row before it unknown, zero
 * as draft-mtp's initial pending row. */
void spec_mtp_reset(DlSession *s, bool resync) {
    Spec *sp = s->spec;
    seqstate_reset(sp->kv);
    sp->off = resync ? trunk_pos(s) : 0;
    const int E = s->engine->model->cfg.n_embd;
    sp->kv->be->vt->fill(sp->kv->be, bv_f32(sp->hring, (int64_t)((sp->off) % sp->rcap) * E), 0, sizeof(float) * (size_t)E);
}

/* Rows of positions [p0, p0 + n) of the ring into dst (one or two copies around the end). */
static void ring_read(const Spec *sp, Backend *be, BView dst, int p0, int n, int E) {
    while (n > 0) {
        const int i = (p0 + 1) % sp->rcap, run = n < sp->rcap - i ? n : sp->rcap - i;
        be->vt->copy(be, dst, bv_f32(sp->hring, (int64_t)i * E), sizeof(float) * (size_t)run * (size_t)E);
        dst = bv_f32(dst, (int64_t)run * E);
        p0 += run, n -= run;
    }
}

/* The trunk rows [row0, row0 + n) of f's batch, final-normed, into the ring at positions p0… */
static void ring_capture(const Spec *sp, Forward *f, int row0, int p0, int n, int E) {
    while (n > 0) {
        const int i = (p0 + 1) % sp->rcap, run = n < sp->rcap - i ? n : sp->rcap - i;
        mtp_capture(f, row0, run, bv_f32(sp->hring, (int64_t)i * E));
        row0 += run, p0 += run, n -= run;
    }
}

/* MTP passes over the pending positions [M, N) of the sessions sel[0..n) and, with first, the row of position
 * N with first[j] (a draft: logits into each spec's dlog, the block's output row into its hnext). The rows'
 * hidden inputs come from the ring. Advances each block to N (N + 1 with first). As many passes as the rows
 * need (usually one). */
static int pass_pending(DlEngine *en, DlSession *const *sel, const int32_t *first, int n, Err *err) {
    const Stage *st = last_stage(en);
    Backend *be = st->be;
    const int E = en->model->cfg.n_embd, cap = mtp_pass_rows(en->mtp);
    BatchSeq q[256];
    Spec *qs[256];
    int rows = 0, nq = 0, vmax = 0;
    for (int j = 0; j <= n; j++) {
        Spec *sp = j < n ? sel[j]->spec : NULL;
        const int M = sp ? mtp_pos(sp) : 0, N = sp ? trunk_pos(sel[j]) : 0, cnt = sp ? N - M + (first != NULL) : 0;
        if (sp && cnt <= 0) continue;
        if (nq && (!sp || rows + cnt > cap || nq == (int)(sizeof q / sizeof q[0]))) { /* run what is gathered */
            if (mtp_run(st->fw, en->mtp, 0, q, nq, 0, vmax, err)) return -1;
            for (int r = 0; first && r < nq; r++)
                be->vt->copy(be, qs[r]->hnext, bv_f32(mtp_hidden_out(en->mtp), (int64_t)r * E), sizeof(float) * (size_t)E);
            rows = nq = vmax = 0;
        }
        if (!sp) break;
        if (cnt > cap) return err_set(err, "%d MTP rows pending (room for %d)", cnt, cap);
        for (int p = M; p < N; p++) sp->tmp[p - M] = sp->hist[p % sp->rcap];
        if (first) sp->tmp[N - M] = first[j], sp->draft_tok = first[j];
        ring_read(sp, be, bv_f32(mtp_hidden_in(en->mtp), (int64_t)rows * E), M - 1, cnt, E);
        qs[nq] = sp;
        q[nq++] = (BatchSeq){sp->kv, sp->tmp, cnt, first ? 1 : 0, first ? sp->dlog : NULL, false};
        rows += cnt;
        if (first && sp->vd > vmax) vmax = sp->vd;
    }
    return 0;
}

int spec_mtp_before(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    DlSession *flush[256];
    int nf = 0;
    for (int i = 0; i < n; i++) {
        Spec *sp = sess[i]->spec;
        if (!sp || !sp->mtp) continue;
        const int N = trunk_pos(sess[i]), M = mtp_pos(sp);
        /* the row of position N the last draft made counts when the trunk takes that token there */
        if (M > N && !(M == N + 1 && seqs[i].tokens[0] == sp->draft_tok)) sp->kv->n_past = N - sp->off;
        /* a plain batch is fed right after it: nothing may be pending; a verify batch goes to the ring, which
         * must hold the pending rows too */
        const int pend = N - mtp_pos(sp);
        if (pend > 0 && (!seqs[i].tentative || pend + 1 + seqs[i].n_tokens > sp->rcap)) flush[nf++] = sess[i];
    }
    return pass_pending(en, flush, NULL, nf, err);
}

void spec_mtp_capture(DlEngine *en, Forward *f, DlSession *const *sess, const BatchSeq *seqs, int n) {
    const int E = en->model->cfg.n_embd;
    Backend *be = last_stage(en)->be;
    BView hin = mtp_hidden_in(en->mtp);
    int row0 = 0, base = 0;
    for (int i = 0; i < n; row0 += seqs[i].n_tokens, i++) {
        Spec *sp = sess[i]->spec;
        if (!sp || !sp->mtp) continue;
        const int N = sp->n0, T = seqs[i].n_tokens;
        if (seqs[i].tentative) { /* (its tokens are kept by spec_capture) */
            ring_capture(sp, f, row0, N, T, E);
            continue;
        }
        /* the rows of positions [a, N + T): hidden row of p − 1, the ring's for p = N */
        const int a = mtp_pos(sp) > N ? mtp_pos(sp) : N;
        if (a == N) ring_read(sp, be, bv_f32(hin, (int64_t)base * E), N - 1, 1, E);
        mtp_capture(f, row0, T - 1, bv_f32(hin, (int64_t)(base + (a == N)) * E));
        ring_capture(sp, f, row0 + T - 1, N + T - 1, 1, E);
        base += N + T - a;
    }
}

int spec_mtp_after(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    BatchSeq q[256];
    int nq = 0;
    for (int i = 0; i < n; i++) {
        Spec *sp = sess[i]->spec;
        if (!sp || !sp->mtp || seqs[i].tentative) continue;
        const int N = sp->n0, T = seqs[i].n_tokens, a = mtp_pos(sp) > N ? mtp_pos(sp) : N;
        if (N + T - a > 0) q[nq++] = (BatchSeq){sp->kv, seqs[i].tokens + (a - N), N + T - a, 0, NULL, false};
    }
    return nq ? mtp_run(last_stage(en)->fw, en->mtp, 0, q, nq, 0, 0, err) : 0;
}

int spec_mtp_draft(DlEngine *en, DlSession **s, const int32_t *first, const int *kmax, int n, Err *err) {
    const Stage *st = last_stage(en);
    Backend *be = st->be;
    const int E = en->model->cfg.n_embd;
    DlSession *sel[256];
    int nsel = 0, ksel[256], saved[256];
    int32_t firsts[256];
    for (int i = 0; i < n; i++) {
        s[i]->spec->nd = 0;
        if (kmax[i] > 0) firsts[nsel] = first[i], ksel[nsel] = kmax[i], sel[nsel++] = s[i];
    }
    /* the first draft: the pending rows and the row of the token to draft after, in one pass */
    if (nsel == 0 || pass_pending(en, sel, firsts, nsel, err)) return nsel ? -1 : 0;
    bool live[256];
    for (int j = 0; j < nsel; j++) {
        Spec *sp = sel[j]->spec;
        float prob;
        const int32_t d = spec_pick(sp->dlog, sp->vd, sp->p.p_min, &prob);
        sp->st.draft_passes++;
        saved[j] = sp->kv->n_past;
        if ((live[j] = prob >= sp->p.p_min)) sp->drafts[sp->nd++] = d;
    }
    /* chained drafts: the last draft with the block's own output row, one row per session still drafting, at
     * the positions after; those KV rows are temporary (the next pass overwrites them) */
    BatchSeq q[256];
    int qsel[256];
    for (;;) {
        int nq = 0;
        for (int j = 0; j < nsel; j++) {
            Spec *sp = sel[j]->spec;
            if (!live[j] || sp->nd >= ksel[j]) continue;
            be->vt->copy(be, bv_f32(mtp_hidden_in(en->mtp), (int64_t)nq * E), sp->hnext, sizeof(float) * (size_t)E);
            q[nq] = (BatchSeq){sp->kv, &sp->drafts[sp->nd - 1], 1, 1, sp->dlog, false};
            qsel[nq++] = j;
        }
        if (nq == 0) break;
        int vmax = 0;
        for (int r = 0; r < nq; r++) vmax = sel[qsel[r]]->spec->vd > vmax ? sel[qsel[r]]->spec->vd : vmax;
        if (mtp_run(st->fw, en->mtp, 0, q, nq, 0, vmax, err)) return -1;
        for (int r = 0; r < nq; r++) {
            Spec *sp = sel[qsel[r]]->spec;
            be->vt->copy(be, sp->hnext, bv_f32(mtp_hidden_out(en->mtp), (int64_t)r * E), sizeof(float) * (size_t)E);
            float prob;
            const int32_t d = spec_pick(sp->dlog, sp->vd, sp->p.p_min, &prob);
            sp->st.draft_passes++;
            if ((live[qsel[r]] = prob >= sp->p.p_min)) sp->drafts[sp->nd++] = d;
        }
    }
    for (int j = 0; j < nsel; j++) sel[j]->spec->kv->n_past = saved[j];
    return 0;
}
