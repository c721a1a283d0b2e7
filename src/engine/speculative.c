/* speculative.c — speculative decoding (include/deltallm.h): a session's drafter (spec_internal.h; the MTP
 * block in spec_mtp.c, a draft model in spec_model.c) and the step:
 *   draft    up to n_max tokens after the first one (stopping under p_min), for every session of the step;
 *   verify   [first, d1 … dk] of every session as tentative batches in one forward pass, every row's logits;
 *   accept   per session and position, the sampler draws the model's token from that row as plain decoding
 *            would; the step goes on while it equals the draft (and is not an end of generation);
 *   keep     the first token and the accepted drafts (forward_keep: exactly their state), the drafter too.
 * A session with an oracle (dl_session_set_draft_oracle) has its drafts replaced after the drafter's pass by the
 * known tokens, a chosen share of them wrong: the cost of the machinery at a known acceptance on any model.
 * The hooks engine_run calls keep each drafter fed with what the trunk evaluates. */
#include "engine/spec_internal.h"
#include "base/splitmix.h"
#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define fail engine_fail

void dl_draft_params_init(DlDraftParams *p) { *p = (DlDraftParams){.n_max = 3, .n_min = 0, .p_min = 0.5f, .n_vocab = 0}; }

int32_t spec_pick(const float *l, int n, float p_min, float *prob) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    *prob = 1.0f;
    if (p_min > 0) {
        double sum = 0;
        for (int32_t i = 0; i < n; i++) sum += expf(l[i] - l[best]);
        *prob = (float)(1.0 / sum);
    }
    return best;
}

int dl_engine_open_draft(DlEngine *e, const char *path, DlError *err) {
    Err er = {{0}};
    if (!e->runner->speculates) return err_set(&er, "speculative decoding does not run over --mpi (a draft model neither)"), fail(err, &er);
    if (e->draft) return err_set(&er, "the engine has a draft model already"), fail(err, &er);
    if (e->n_spec) return err_set(&er, "sessions are drafting: open the draft model first"), fail(err, &er);
    DlEngineParams p = e->params;
    p.model_path = path;
    DlError de = {{0}};
    DlEngine *d = dl_engine_open(&p, &de);
    if (!d) return err_set(&er, "draft model: %s", de.msg), fail(err, &er);
    /* the same token ids mean the same text: the vocabularies must agree (the draft's may be shorter) */
    const int nv = tokenizer_n_vocab(d->tok) < tokenizer_n_vocab(e->tok) ? tokenizer_n_vocab(d->tok) : tokenizer_n_vocab(e->tok);
    bool same = tokenizer_n_vocab(d->tok) == tokenizer_n_vocab(e->tok);
    for (int32_t i = 0; same && i < nv; i++) {
        size_t la, lb;
        const char *a = dl_token_piece(e, i, &la), *b = dl_token_piece(d, i, &lb);
        same = a && b && la == lb && memcmp(a, b, la) == 0;
    }
    if (!same) {
        dl_engine_close(d);
        return err_set(&er, "draft model '%s': its vocabulary differs from the model's", path), fail(err, &er);
    }
    e->draft = d;
    return 0;
}

void spec_free(DlSession *s) {
    Spec *sp = s->spec;
    if (!sp) return;
    if (sp->kv) spec_mtp_free(sp);
    dl_session_free(sp->ds);
    free(sp->hist);
    free(sp->tmp);
    free(sp->dlog);
    free(sp->oracle);
    free(sp);
    s->spec = NULL;
    s->engine->n_spec--;
}

void spec_engine_free(DlEngine *en) {
    mtp_pass_free(en->mtp);
    en->mtp = NULL;
    dl_engine_close(en->draft);
    en->draft = NULL;
}

void spec_reset(DlSession *s, bool resync) {
    if (!s->spec) return;
    if (s->spec->mtp) spec_mtp_reset(s, resync);
    else spec_model_reset(s, resync);
}

int dl_session_set_draft(DlSession *s, const DlDraftParams *p, DlError *err) {
    Err e = {{0}};
    DlEngine *en = s->engine;
    spec_free(s);
    if (!p) return 0;
    if (!en->runner->speculates) return err_set(&e, "speculative decoding does not run over --mpi"), fail(err, &e);
    const int V = en->info.n_vocab;
    if (p->n_max < 1 || p->n_max > DL_DRAFT_MAX)
        return err_set(&e, "draft-max %d out of range [1, %d]", p->n_max, DL_DRAFT_MAX), fail(err, &e);
    if (p->n_min < 0 || p->n_min > p->n_max)
        return err_set(&e, "draft-min %d out of range [0, draft-max %d]", p->n_min, p->n_max), fail(err, &e);
    if (!(p->p_min >= 0 && p->p_min <= 1)) return err_set(&e, "draft-p-min %g out of range [0, 1]", p->p_min), fail(err, &e);
    if (p->n_vocab < 0 || p->n_vocab > V || (p->n_vocab % 8 && p->n_vocab != V))
        return err_set(&e, "draft vocabulary %d: a multiple of 8 up to the model's %d tokens", p->n_vocab, V), fail(err, &e);
    if (!en->draft && en->model->n_mtp == 0)
        return err_set(&e, "no drafter: %s; give a draft model (--model-draft)",
                       en->model->mtp_missing[0] ? en->model->mtp_missing : "the model has no MTP block"),
               fail(err, &e);
    if (p->n_max + 1 > en->n_batch)
        return err_set(&e, "draft-max %d needs a batch of at least %d", p->n_max, p->n_max + 1), fail(err, &e);
    Spec *sp = calloc(1, sizeof *sp);
    if (!sp) return err_set(&e, "out of memory"), fail(err, &e);
    s->spec = sp;
    en->n_spec++;
    sp->p = *p;
    sp->mtp = en->draft == NULL;
    sp->vd = sp->mtp ? (p->n_vocab ? p->n_vocab : V) : en->draft->info.n_vocab;
    sp->rcap = 2 * (p->n_max + 2) + 2;
    sp->hist = calloc((size_t)sp->rcap, sizeof *sp->hist);
    sp->tmp = calloc((size_t)sp->rcap + 1, sizeof *sp->tmp);
    sp->dlog = malloc(sizeof(float) * (size_t)(sp->vd > V ? sp->vd : V));
    const int last = en->n_st - 1;
    int rc = sp->hist && sp->tmp && sp->dlog ? 0 : err_set(&e, "out of memory");
    if (!rc) rc = sp->mtp ? spec_mtp_init(s, sp, &e) : spec_model_init(s, sp, &e);
    /* the verify batch: n_max + 1 tokens of rollback room, and every row's logits of every session */
    if (!rc && s->tent_cap < p->n_max + 1 && dl_session_set_rollback(s, p->n_max + 1, err)) rc = -1, e = (Err){{0}};
    if (!rc && en->n_seq_max > 1) rc = forward_reserve_out(en->st[last].fw, en->n_seq_max * (p->n_max + 1), &e);
    if (rc) {
        if (e.msg[0]) fail(err, &e);
        spec_free(s);
        return -1;
    }
    spec_reset(s, true); /* from here on (turn drafting on before the prompt for the drafter to see it) */
    return 0;
}

int dl_session_set_draft_oracle(DlSession *s, const int32_t *tokens, int n, double accept, uint64_t seed, DlError *err) {
    Err e = {{0}};
    Spec *sp = s->spec;
    if (!sp) return err_set(&e, "drafting is off for this session (dl_session_set_draft)"), fail(err, &e);
    if (n < 0 || (n > 0 && !tokens)) return err_set(&e, "oracle: %d tokens", n), fail(err, &e);
    if (!(accept > 0 && accept <= 1)) return err_set(&e, "draft acceptance %g out of range (0, 1]", accept), fail(err, &e);
    const int V = s->engine->info.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return err_set(&e, "oracle token %d: id %d out of range [0, %d)", i, tokens[i], V), fail(err, &e);
    int32_t *o = NULL;
    if (n && !(o = malloc(sizeof(int32_t) * (size_t)n))) return err_set(&e, "out of memory"), fail(err, &e);
    if (n) memcpy(o, tokens, sizeof(int32_t) * (size_t)n);
    free(sp->oracle);
    sp->oracle = o, sp->n_oracle = n, sp->oracle_p = accept;
    sp->oracle_rng = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    return 0;
}

/* splitmix64: the oracle's draws (its own stream, so the sampler's draws are untouched) */
static uint64_t oracle_next(Spec *sp) {
    return splitmix_next(&sp->oracle_rng);
}

/* The drafts of session s after `first` (at the trunk's position n_past): the oracle's tokens of the kmax
 * positions after it (as many as it knows), each wrong with probability 1 - oracle_p (a wrong one ≠ the true). */
static void oracle_drafts(DlSession *s, int kmax) {
    Spec *sp = s->spec;
    const int V = s->engine->info.n_vocab, p0 = s->state->n_past + 1;
    sp->nd = 0;
    for (int j = 0; j < kmax && p0 + j < sp->n_oracle; j++) {
        int32_t t = sp->oracle[p0 + j];
        const double u = (double)(oracle_next(sp) >> 11) * 0x1.0p-53;
        if (u >= sp->oracle_p && V > 1) t = (int32_t)((t + 1 + (int64_t)(oracle_next(sp) % (uint64_t)(V - 1))) % V);
        sp->drafts[sp->nd++] = t;
    }
}

void dl_session_draft_stats(const DlSession *s, DlDraftStats *st) {
    if (s->spec) *st = s->spec->st;
    else memset(st, 0, sizeof *st);
}

/* ---- the hooks -------------------------------------------------------------------------------------------- */

int spec_before_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    for (int i = 0; i < n; i++)
        if (sess[i]->spec) sess[i]->spec->n0 = sess[i]->state->n_past;
    return en->mtp ? spec_mtp_before(en, sess, seqs, n, err) : 0;
}

void spec_capture(DlEngine *en, Forward *f, DlSession *const *sess, const BatchSeq *seqs, int n) {
    for (int i = 0; i < n; i++) { /* the tokens of verify batches, for the drafters' catch-up */
        Spec *sp = sess[i]->spec;
        if (sp && seqs[i].tentative)
            for (int t = 0; t < seqs[i].n_tokens; t++) sp->hist[(sp->n0 + t) % sp->rcap] = seqs[i].tokens[t];
    }
    if (en->mtp) spec_mtp_capture(en, f, sess, seqs, n);
}

int spec_after_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    if (en->mtp && spec_mtp_after(en, sess, seqs, n, err)) return -1;
    return en->draft ? spec_model_after(en, sess, seqs, n, err) : 0;
}

/* ---- the step -------------------------------------------------------------------------------------------- */

int dl_speculate_batch(DlSession **s, DlSampler **smp, const int32_t *first, int n, int32_t *out, size_t cap, int *n_out,
                       DlError *err) {
    Err e = {{0}};
    if (n < 1 || n > 256) return err_set(&e, "%d sessions in one step", n), fail(err, &e);
    DlEngine *en = s[0]->engine;
    if (n > en->n_seq_max) return err_set(&e, "%d sessions in one step (at most %d)", n, en->n_seq_max), fail(err, &e);
    if (cap < 1) return err_set(&e, "no room for the tokens of a step"), fail(err, &e);
    int kmax[256];
    for (int i = 0; i < n; i++) {
        DlSession *si = s[i];
        if (si->engine != en) return err_set(&e, "sessions of different engines in one step"), fail(err, &e);
        if (!si->spec) return err_set(&e, "drafting is off for this session (dl_session_set_draft)"), fail(err, &e);
        if (first[i] < 0 || first[i] >= en->info.n_vocab)
            return err_set(&e, "token id %d out of range [0, %d)", first[i], en->info.n_vocab), fail(err, &e);
        for (int j = 0; j < i; j++)
            if (s[j] == si) return err_set(&e, "the same session twice in one step"), fail(err, &e);
        const int room = si->state->n_ctx - si->state->n_past;
        if (room < 1)
            return err_set(&e, "context full: %d tokens + 1 new exceed the context size %d", si->state->n_past, si->state->n_ctx),
                   fail(err, &e);
        int k = si->spec->p.n_max;
        k = k < (int)cap - 1 ? k : (int)cap - 1;
        k = k < room - 1 ? k : room - 1;
        k = k < si->tent_cap - 1 ? k : si->tent_cap - 1;
        kmax[i] = k;
        si->n_tent = -1; /* a tentative batch left open is kept whole */
        for (int st = 0; st < en->n_st; st++) si->states[st]->rb.n = -1;
    }
    double t0 = now_s();
    if ((s[0]->spec->mtp ? spec_mtp_draft : spec_model_draft)(en, s, first, kmax, n, &e)) return fail(err, &e);
    for (int i = 0; i < n; i++) /* controlled acceptance: the oracle's drafts (their cost is the verify's) */
        if (s[i]->spec->oracle) oracle_drafts(s[i], kmax[i]);
    double t1 = now_s();
    /* verify: every session's first token and drafts, tentatively, every row's logits */
    BatchSeq q[256];
    int32_t vt[256][DL_DRAFT_MAX + 1];
    for (int i = 0; i < n; i++) {
        Spec *sp = s[i]->spec;
        if (sp->nd < sp->p.n_min) sp->nd = 0;
        vt[i][0] = first[i];
        memcpy(&vt[i][1], sp->drafts, sizeof(int32_t) * (size_t)sp->nd);
        q[i] = (BatchSeq){NULL, vt[i], 1 + sp->nd, 1 + sp->nd, s[i]->tent_logits, true};
        sp->st.draft_s += (t1 - t0) / n;
    }
    if (engine_run(en, s, q, n, &e)) return fail(err, &e);
    double t2 = now_s();
    const size_t V = (size_t)en->info.n_vocab;
    for (int i = 0; i < n; i++) {
        Spec *sp = s[i]->spec;
        int32_t *o = out + (size_t)i * cap;
        int kept = 0, no = 0;
        for (int j = 0; j <= sp->nd; j++) {
            const int32_t tok = dl_sampler_sample(smp[i], s[i]->tent_logits + (size_t)j * V);
            dl_sampler_accept(smp[i], tok);
            o[no++] = tok;
            kept = j + 1;
            if (j < DL_DRAFT_MAX && j < sp->nd) sp->st.drafted_at[j]++;
            if (j == sp->nd || tok != sp->drafts[j] || dl_token_is_eog(en, tok)) break;
            sp->st.accepted_at[j]++;
            sp->st.accepted++;
        }
        sp->st.drafted += (uint64_t)sp->nd;
        sp->st.steps++;
        n_out[i] = no;
        /* the session: the first token and the accepted drafts; its logits are those of the last kept one */
        const double k0 = now_s();
        if (engine_keep(en, s[i], kept, &e) || (!sp->mtp && spec_model_keep(s[i], kept, &e))) return fail(err, &e);
        sp->st.keep_s += now_s() - k0;
        memcpy(s[i]->logits, s[i]->tent_logits + (size_t)(kept - 1) * V, sizeof(float) * V);
        s[i]->has_logits = true;
    }
    for (int i = 0; i < n; i++) s[i]->spec->st.verify_s += (t2 - t1) / n;
    return 0;
}

int dl_session_speculate(DlSession *s, DlSampler *smp, int32_t first, int32_t *out, size_t cap, DlError *err) {
    int n = 0;
    return dl_speculate_batch(&s, &smp, &first, 1, out, cap, &n, err) ? -1 : n;
}
