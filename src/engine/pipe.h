/* pipe.h — the engine's pipeline over the ranks of an MPI job (DlEngineParams.mpi): shared by rank 0's side
 * (pipe.c: the stage of layers [0, c1), embeddings, head, sampling's logits, and the protocol's driver),
 * the other ranks' side (pipe_worker.c: one layer range each) and the split of the layers (pipe_split.c).
 *
 * The route: every message from rank 0 — batches and control alike — goes to rank 1, which applies it and
 * passes it on to rank 2, and so on ("the chain"); the last rank sends a batch's hidden rows back to rank 0
 * (TAG_RESULT), and every rank answers the control messages that need an answer straight to rank 0
 * (TAG_REPLY). One route for everything keeps the order per session without any waiting: a reset, a restore
 * or a keep reaches each rank after the batches sent before it and before the ones sent after it.
 *
 * A batch is (PipeHdr, PipeSeq[n], hidden rows [rows][n_embd] F32). Its rows cross each link once; every
 * other rank computes them exactly as one process would (same ops, same rows, same order), so the logits are
 * the same bits as a single process with the same batch boundaries. */
#ifndef DL_ENGINE_PIPE_H
#define DL_ENGINE_PIPE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "model/model.h"

#define PIPE_MAX_RANKS 64

enum { PIPE_TAG_CHAIN = 1, PIPE_TAG_RESULT = 2, PIPE_TAG_REPLY = 3 };

typedef enum PipeOp {
    PIPE_OPEN = 1, /* PipeOpen: load the model, bind the range; reply PipeOpenReply or an error line */
    PIPE_CLOSE,    /* drop the model (back to waiting for OPEN or EXIT) */
    PIPE_EXIT,     /* leave: a = 1 when the job failed (no MPI_Finalize then) */
    PIPE_BATCH,    /* n sequences + hidden rows */
    PIPE_NEW,      /* a: session id; reply (allocation may fail) */
    PIPE_FREE,     /* a: session id */
    PIPE_RESET,    /* a: session id */
    PIPE_COPY,     /* a: destination id, b: source id */
    PIPE_SNAPSHOT, /* a: session id; reply: the state bytes of the rank's layers */
    PIPE_RESTORE,  /* a: session id, b: n_past; payload: the parts of this rank and the ranks after it; reply */
    PIPE_ROLLBACK, /* a: session id, b: room in tokens; reply */
    PIPE_KEEP,     /* a: session id, b: tokens kept; reply */
    PIPE_PREFETCH, /* a: lock; reply */
    PIPE_STATS,    /* a: reset the counters after reading them; reply PipeStats */
} PipeOp;

typedef struct PipeHdr {
    uint32_t op;
    int32_t n;      /* BATCH: sequences */
    int32_t a, b;   /* the op's arguments */
    int32_t status; /* replies and batches: 0, or -1 with an error line as the payload */
    int32_t rows;   /* BATCH */
    uint64_t item;  /* BATCH: its number, checked by every rank (the order is the protocol) */
} PipeHdr;

typedef struct PipeSeq {
    int32_t id, n_tokens, n_past; /* n_past: where rank 0's state was before the batch (checked) */
    int32_t tentative;
} PipeSeq;

/* What a rank needs to open its part of the engine. */
typedef struct PipeOpen {
    char path[1024];
    char backend[32], isa[16], deltanet[16];
    int32_t n_ctx, n_batch, n_seq_max, n_threads;
    int32_t mode, no_pack, kv_k, kv_v; /* mode: a MatMode; kv_k, kv_v: backend.h's KV_* */
    int32_t n_ranks;
    int32_t l0[PIPE_MAX_RANKS], l1[PIPE_MAX_RANKS];
    uint64_t fingerprint; /* of the model's tensor directory (pipe_fingerprint) */
} PipeOpen;

typedef struct PipeOpenReply {
    uint64_t saved_fixed, saved_per_token; /* a session's saved state bytes: fixed + per_token · n_past */
    uint64_t bound_bytes;                  /* weight bytes bound on the rank */
} PipeOpenReply;

typedef struct PipeStats {
    double compute_s, wall_s; /* wall: since the counters were reset */
    uint64_t bytes_sent, batches, tokens;
    uint64_t rss_bytes, rss_peak_bytes;
    uint64_t bound_bytes;
} PipeStats;

/* ---- pipe_split.c --------------------------------------------------------------------------------------- */

/* Weight bytes of layer il (every tensor bound for it; expert stacks whole). */
uint64_t pipe_layer_bytes(const Model *m, int il);
/* Cuts the layers into n contiguous ranges, one per rank, each at least one layer. fractions (n values, any
 * positive scale; NULL: balanced) give each rank's share of the layers' weight bytes. Balanced means the
 * bytes each rank reads per token: its layers, and on rank 0 the output matrix too (the head runs there).
 * Fails with one line for more ranks than layers or a bad list. */
int pipe_split(const Model *m, int n, const double *fractions, int *l0, int *l1, Err *err);
/* "0.3,0.3,0.4" → n values; fails unless there are exactly n positive numbers. */
int pipe_parse_split(const char *s, int n, double *out, Err *err);
/* The registry entries a rank binds: layers [l0, l1), and the global tensors (embeddings, output norm and
 * matrix) when globals. A copy (ids kept, ascending), freed by the caller; *bytes: their weight bytes. */
Weight *pipe_weights(const Model *m, int l0, int l1, bool globals, int *n, uint64_t *bytes, Err *err);
/* A hash of the tensor directory (names, types, shapes) and the layer count: ranks check they read the same
 * model. */
uint64_t pipe_fingerprint(const Model *m);
/* This process's resident and peak resident memory (bytes). */
void pipe_rss(uint64_t *rss, uint64_t *peak);

#endif
