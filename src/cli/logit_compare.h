/* logit_compare.h — the agreement metrics of shared/tools/compare.py, in C, for the parity tests and the
 * parity command: max|Δ|/std(ref), mean KL per position, top-1 agreement excluding near-ties. */
#ifndef DL_CLI_LOGIT_COMPARE_H
#define DL_CLI_LOGIT_COMPARE_H

#include <stdint.h>

typedef struct LogitMetrics {
    int rows, cols;
    double ref_std;
    double max_abs, max_rel, mean_abs;
    double top1;          /* fraction of rows whose argmax agrees */
    double top1_decisive; /* among rows that are not near-ties */
    int near_ties;        /* rows where the two argmaxes differ by < tie_eps·std in the reference */
    double kl_mean, kl_max;
    int nonfinite;
} LogitMetrics;

/* ref and test are [rows][cols]. */
LogitMetrics logits_compare(const float *ref, const float *test, int rows, int cols, double tie_eps);
/* max|Δ|/std(ref) and max|Δ| for any two tensors of n floats. */
void tensor_compare(const float *ref, const float *test, int64_t n, double *max_abs, double *max_rel);
/* Reads a raw float32 file; returns floats read (0 on error), *data malloc'ed. */
int64_t read_f32_file(const char *path, float **data);

#endif
