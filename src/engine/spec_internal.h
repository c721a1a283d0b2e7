/* spec_internal.h — a session's drafter (speculative decoding, include/deltallm.h), shared by speculative.c (the
 * public calls and the step: draft, verify, accept, keep), spec_mtp.c (the MTP block as drafter) and
 * spec_model.c (a draft model as drafter).
 *
 * Positions. The trunk has evaluated positions [0, N). A drafter has seen [0, M) of them (M ≤ N between steps);
 * the tokens of [M, N) are "pending": known (in the token ring) but not yet fed to it. Non-tentative batches are
 * fed at once (after the batch: the MTP block's KV, the draft model's state); tentative ones (verify batches)
 * only after keep, by the next draft, whose first pass takes the pending tokens with the token to draft after.
 * After a restore or copy the drafter starts over at the trunk's position (offset), without the context before
 * it: drafts are proposals, so only their quality depends on the drafter's state, never the output. */
#ifndef DL_ENGINE_SPEC_INTERNAL_H
#define DL_ENGINE_SPEC_INTERNAL_H

#include "engine/engine_internal.h"
#include "model/mtp.h"

struct Spec {
    DlDraftParams p;
    bool mtp;          /* the MTP block drafts; else the engine's draft model */
    int vd;            /* columns of the draft logits (the MTP head's range, or the draft model's vocabulary) */
    int rcap;          /* positions the rings hold (≥ what can be pending plus a verify batch) */
    int32_t *hist;     /* [rcap] the trunk's tokens of tentative batches, by position (pos % rcap) */
    int32_t *tmp;      /* [rcap + 1] tokens gathered for a drafter pass */
    float *dlog;       /* [vd] logits of the session's row of the last draft pass */
    int32_t drafts[DL_DRAFT_MAX];
    int nd;            /* drafts of the current step */
    int n0;            /* the trunk's position when the current engine_run began */
    /* MTP */
    SeqState *kv;      /* the MTP block's KV, on the last stage's backend: positions [off, off + kv->n_past) */
    int off;
    BBuf *hmem;
    BView hring;       /* [rcap][E] the trunk's final-normed hidden rows, row of position p at (p + 1) % rcap */
    BView hnext;       /* [E] the block's output row (h_nextn) of the last draft, the next draft's input */
    int32_t draft_tok; /* the token of the row of position N the last draft made */
    /* draft model */
    DlSession *ds;     /* on the engine's draft engine: positions [doff, doff + n_past) */
    int doff;
    int nchain;        /* tentative one-token steps of the current draft, to cut back after the verify */
    /* controlled acceptance (dl_session_set_draft_oracle): after the drafter's pass, the drafts become the known
     * tokens of their positions, each replaced by a wrong one with probability 1 - oracle_p */
    int32_t *oracle;   /* [n_oracle] the token of each position (NULL: the drafter's drafts stand) */
    int n_oracle;
    double oracle_p;
    uint64_t oracle_rng;
    DlDraftStats st;
};

int spec_mtp_init(DlSession *s, Spec *sp, Err *err);
void spec_mtp_free(Spec *sp);
void spec_mtp_reset(DlSession *s, bool resync);
int spec_mtp_before(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err);
void spec_mtp_capture(DlEngine *en, Forward *f, DlSession *const *sess, const BatchSeq *seqs, int n);
int spec_mtp_after(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err);
/* Drafts up to kmax[i] tokens after first[i] for each session (sp->drafts, sp->nd). */
int spec_mtp_draft(DlEngine *en, DlSession **s, const int32_t *first, const int *kmax, int n, Err *err);

int spec_model_init(DlSession *s, Spec *sp, Err *err);
void spec_model_reset(DlSession *s, bool resync);
int spec_model_after(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err);
int spec_model_draft(DlEngine *en, DlSession **s, const int32_t *first, const int *kmax, int n, Err *err);
/* After the verify kept `kept` tokens of [first, drafts…]: cuts the draft model's tentative steps back. */
int spec_model_keep(DlSession *s, int kept, Err *err);

/* The draft pass's pick from a row of logits: the argmax (lowest id on ties) and, when p_min > 0, its
 * probability under the row's softmax (1 otherwise). */
int32_t spec_pick(const float *logits, int n, float p_min, float *prob);

#endif
