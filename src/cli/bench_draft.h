/* bench_draft.h — `deltallm bench --draft N` (cmd_bench.c parses the options): speculative decoding against
 * plain decoding in the same run, with the drafter's drafts or at controlled acceptances (--draft-accept). */
#ifndef DL_CLI_BENCH_DRAFT_H
#define DL_CLI_BENCH_DRAFT_H

#include <stdbool.h>

#include "cli/cli_engine.h"
#include "cli/draft_options.h"

typedef struct BenchDraft {
    const char *const *models;
    int n_models;
    const long long *threads;
    int n_threads;
    int n_gen, reps, n_batch;
    bool exact, json, prefetch, mlock, profile; /* profile: the forward passes of the drafting runs, on stderr */
    const char *prompt; /* NULL: 32 random tokens (acceptance is then what random weights give) */
    const double *accept; /* n_accept controlled acceptances (--draft-accept; dl_session_set_draft_oracle), a row */
    int n_accept;         /* each; 0: the drafter's own drafts */
    DraftOptions draft;
    CliEngine engine;
} BenchDraft;

/* Prints the table (or JSON); returns the exit status. */
int bench_draft(const BenchDraft *b);

#endif
