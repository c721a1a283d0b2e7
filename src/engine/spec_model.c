/* spec_model.c — a smaller model of the same vocabulary as the drafter (--model-draft; spec_internal.h): a
 * session on the engine's draft engine that follows the trunk's tokens. A draft evaluates the pending tokens
 * and the token to draft after (certain: they are the trunk's), then each further draft as a one-token
 * tentative batch that extends the one before (model.h forward_keep), so that after the verify one keep cuts
 * the draft model back to the tokens the trunk kept. */
#include "engine/spec_internal.h"

#include <stdlib.h>

static int draft_pos(const Spec *sp) { return sp->doff + sp->ds->state->n_past; }

int spec_model_init(DlSession *s, Spec *sp, Err *err) {
    DlEngine *en = s->engine;
    DlError e = {{0}};
    if (!(sp->ds = dl_session_new(en->draft, &e)) || dl_session_set_rollback(sp->ds, sp->p.n_max, &e))
        return err_set(err, "the draft model's session: %s", e.msg);
    return 0;
}

void spec_model_reset(DlSession *s, bool resync) {
    Spec *sp = s->spec;
    dl_session_reset(sp->ds);
    sp->doff = resync ? s->state->n_past : 0;
    sp->nchain = 0;
}

/* engine_run on the draft engine in as many batches as its batch size needs (no two of one session). */
static int run_chunked(DlEngine *de, DlSession **ds, BatchSeq *q, int n, Err *err) {
    for (int i = 0; i < n;) {
        int j = i, rows = 0;
        while (j < n && j - i < de->n_seq_max && rows + q[j].n_tokens <= de->n_batch) rows += q[j++].n_tokens;
        if (j == i) return err_set(err, "a draft batch of %d tokens (the draft model's batch is %d)", q[i].n_tokens, de->n_batch);
        if (engine_run(de, ds + i, q + i, j - i, err)) return -1;
        i = j;
    }
    return 0;
}

/* The trunk's plain batches, fed to the draft model after them (with what was pending before). */
int spec_model_after(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    DlSession *ds[256];
    BatchSeq q[256];
    int nq = 0;
    for (int i = 0; i < n; i++) {
        Spec *sp = sess[i]->spec;
        if (!sp || sp->mtp || seqs[i].tentative) continue;
        const int D = draft_pos(sp), N = sp->n0, T = seqs[i].n_tokens;
        if (D > N || N - D + T > en->draft->n_ctx - sp->ds->state->n_past) { /* out of step or out of room: start over here */
            spec_model_reset(sess[i], true);
            continue;
        }
        if (N - D + T <= sp->rcap + 1) { /* pending and the batch together, batched with the other sessions */
            for (int p = D; p < N; p++) sp->tmp[p - D] = sp->hist[p % sp->rcap];
            for (int t = 0; t < T; t++) sp->tmp[N - D + t] = seqs[i].tokens[t];
            ds[nq] = sp->ds;
            q[nq++] = (BatchSeq){NULL, sp->tmp, N - D + T, 0, NULL, false};
            continue;
        }
        DlError e = {{0}};
        for (int p = D; p < N; p++) sp->tmp[p - D] = sp->hist[p % sp->rcap];
        if ((N > D && dl_session_eval(sp->ds, sp->tmp, (size_t)(N - D), &e)) || dl_session_eval(sp->ds, seqs[i].tokens, (size_t)T, &e))
            return err_set(err, "the draft model: %s", e.msg);
    }
    return nq ? run_chunked(en->draft, ds, q, nq, err) : 0;
}

int spec_model_draft(DlEngine *en, DlSession **s, const int32_t *first, const int *kmax, int n, Err *err) {
    DlSession *ds[256];
    BatchSeq q[256];
    int idx[256], nq = 0;
    for (int i = 0; i < n; i++) {
        Spec *sp = s[i]->spec;
        sp->nd = sp->nchain = 0;
        const int D = draft_pos(sp), N = s[i]->state->n_past;
        if (D > N || N - D + 1 > sp->rcap + 1 || N - D + 1 + kmax[i] > en->draft->n_ctx - sp->ds->state->n_past) {
            spec_model_reset(s[i], true); /* lost step (or room): draft from here on */
            if (kmax[i] > 0) s[i]->spec->tmp[0] = first[i];
            if (kmax[i] > 0) ds[nq] = sp->ds, idx[nq] = i, q[nq++] = (BatchSeq){NULL, sp->tmp, 1, 1, sp->dlog, false};
            continue;
        }
        if (kmax[i] <= 0) continue;
        for (int p = D; p < N; p++) sp->tmp[p - D] = sp->hist[p % sp->rcap];
        sp->tmp[N - D] = first[i];
        ds[nq] = sp->ds, idx[nq] = i;
        q[nq++] = (BatchSeq){NULL, sp->tmp, N - D + 1, 1, sp->dlog, false};
    }
    /* the first draft after the certain tokens, then one tentative token at a time */
    for (bool tentative = false; nq > 0; tentative = true) {
        if (run_chunked(en->draft, ds, q, nq, err)) return -1;
        int live = 0;
        for (int r = 0; r < nq; r++) {
            Spec *sp = s[idx[r]]->spec;
            sp->st.draft_passes++;
            sp->nchain += tentative;
            float prob;
            const int32_t d = spec_pick(sp->dlog, sp->vd, sp->p.p_min, &prob);
            if (prob < sp->p.p_min) continue;
            sp->drafts[sp->nd++] = d;
            if (sp->nd >= kmax[idx[r]]) continue;
            ds[live] = sp->ds, idx[live] = idx[r];
            q[live++] = (BatchSeq){NULL, &sp->drafts[sp->nd - 1], 1, 1, sp->dlog, true};
        }
        nq = live;
    }
    return 0;
}

int spec_model_keep(DlSession *s, int kept, Err *err) {
    Spec *sp = s->spec;
    if (sp->nchain == 0) return 0;
    const int k = kept - 1 < sp->nchain ? kept - 1 : sp->nchain; /* the chain holds drafts 1 … nchain */
    sp->nchain = 0;
    return engine_keep(s->engine->draft, sp->ds, k, err);
}
