/* bench_pipe.h — `deltallm bench` with several sessions (--slots) and over MPI (--mpi): decode of N sessions
 * at once — one dl_decode_batch per step in one process; over MPI the sessions in
 * dl_engine_pipeline_depth groups, each group started again as soon as its step is finished, as the server
 * does — and the per-stage table of an engine over MPI. */
#ifndef DL_CLI_BENCH_PIPE_H
#define DL_CLI_BENCH_PIPE_H

#include <stdio.h>

#include "deltallm.h"

/* steps decode steps of each of n sessions on the tokens toks[0..steps), each session first reset (at NULL)
 * or restored from the snapshot at (a context of -d tokens, not timed); returns the seconds taken, or -1 with
 * err. */
double bench_decode_sessions(DlEngine *e, DlSession **s, int n, const void *at, size_t at_size, const int32_t *toks,
                             int steps, DlError *err);
/* Markdown: the header, then one row per stage of a test (compute, bubble = wall − compute, share of the
 * wall time computing, bytes sent per token passing through); JSON: a "stages" member. */
void bench_stage_header(FILE *out);
void bench_stage_rows(const char *test, const DlStageStats *st, int n, FILE *out);
void bench_stage_json(const DlStageStats *st, int n, FILE *out);

#endif
