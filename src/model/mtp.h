/* mtp.h — a model's MTP (multi-token prediction) block run over a forward pass: the draft head of speculative
 * decoding (model.h MtpW has its weights).
 *
 * Row r of an MTP pass is a token and a hidden row h: the main model's hidden state after its final norm at the
 * position before the token's (the state that predicted the token), or, for a chained draft, the MTP block's own
 * output row (h_nextn). The block computes
 *     x = eh_proj(concat(enorm(embed(token)), hnorm(h)))
 *     x += Attention(attn_norm(x));  x += FFN(post_attention_norm(x))        (its own KV: a SeqState of [N, N+1))
 *     h_nextn = head_norm(x);  logits = head · h_nextn                       (the rows that want logits)
 * as llama.cpp v0.4.0's graph_mtp (src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp) and the Hugging Face
 * checkpoints' mtp.* modules (tools/train/model.py) do. */
#ifndef DL_MODEL_MTP_H
#define DL_MODEL_MTP_H

#include "model/model.h"

/* Buffers of MTP passes of up to max_rows rows on a forward pass's backend (allocated once). */
typedef struct MtpPass MtpPass;

MtpPass *mtp_pass_new(const Model *m, Forward *f, int max_rows, Err *err);
void mtp_pass_free(MtpPass *p);
int mtp_pass_rows(const MtpPass *p);
/* [max_rows][n_embd]: the h of each row of the next pass, in batch order (the caller fills it). */
BView mtp_hidden_in(const MtpPass *p);
/* [max_rows][n_embd]: after a pass, h_nextn of the rows that wanted logits, in batch order. */
BView mtp_hidden_out(const MtpPass *p);

/* Runs MTP block `which` (0 ≤ which < m->n_mtp) over a batch: seqs[i].state is the block's KV state (layers
 * [N, N+1)), tokens its tokens (at that state's positions n_past…), n_out / logits the rows that want logits
 * (the head over vocabulary columns [v0, v1); 0, 0: all). The h rows come from mtp_hidden_in. */
int mtp_run(Forward *f, MtpPass *p, int which, const BatchSeq *seqs, int n_seqs, int v0, int v1, Err *err);

/* The main model's final-normed hidden state of rows [row0, row0 + n) of the forward pass's current batch, into
 * dst ([n][n_embd]): call between forward_layers (of the last layers) and forward_end. */
void mtp_capture(Forward *f, int row0, int n, BView dst);

#endif
