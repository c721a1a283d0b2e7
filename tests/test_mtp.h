/* test_mtp.h — MTP logits of a teacher-forced sequence, for the tests that compare them (test_mtp.c). */
#ifndef DL_TESTS_TEST_MTP_H
#define DL_TESTS_TEST_MTP_H

#include "model/model.h"

/* The trunk over ids[0..T), then the model's first MTP block over the rows its KV would hold: llama_rows (as
 * llama.cpp's draft-mtp fills it) row p is token p with the trunk's final-normed hidden row p − 1 (zero for
 * p = 0), *n_rows = T; otherwise (as tools/train trains it) row t is token t + 1 with hidden row t, *n_rows =
 * T − 1. Returns [*n_rows][n_vocab] logits (malloc'ed), or NULL (recorded as a failure). */
float *mtp_teacher_forced(const Model *m, const int32_t *ids, int T, MatMode mode, bool llama_rows, int *n_rows);
/* The path of a model for the llama.cpp comparisons (tests/data/mtp/NAME.*): "tinybible" (the trained model), or
 * a test model NAME with an MTP block added (synth_add_mtp, seed 1) in the scratch directory; NULL on failure. */
const char *mtp_test_model(const char *name);

#endif
