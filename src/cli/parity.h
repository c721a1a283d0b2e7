/* parity.h — stage-by-stage comparison of deltallm's intermediate tensors with llama.cpp's (a dump folder
 * written by llref): the model runs on the dump's own tokens in its own mode (prefill: one call; decode:
 * one token per call), and every stage of SPEC §2 is compared by its llama.cpp name. */
#ifndef DL_CLI_PARITY_H
#define DL_CLI_PARITY_H

#include <stdbool.h>

#include "base/err.h"

typedef struct ParityRow {
    char stage[40];   /* "β = sigmoid(b)", "recurrence output", ... */
    char tensors[80]; /* the llama.cpp names compared, e.g. "beta_sigmoid-2" */
    int n_tensors;    /* tensors compared (layers × ubatches) */
    double max_abs, max_rel; /* max |Δ| and max |Δ|/std(ref) over them */
    int mismatches;   /* routing: rows whose selected experts differ */
    bool ok;
} ParityRow;

#define PARITY_MAX_ROWS 40

/* Runs model_path on the tokens of ref_dir and fills rows (≤ PARITY_MAX_ROWS); a stage passes when max_rel ≤
 * tol (routing: identical expert sets). Returns the number of rows, or -1. */
typedef struct ForwardOptions ForwardOptions;
/* opts: the backend and delta-net form (max_batch and max_ctx are set here). */
int parity_run(const char *model_path, const char *ref_dir, const ForwardOptions *opts, double tol, ParityRow *rows,
               Err *err);

#endif
