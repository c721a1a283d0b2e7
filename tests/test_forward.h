/* test_forward.h — forward passes in tests: the backend of the test run (DELTALLM_BACKEND and DELTALLM_ISA,
 * read here, once: `DELTALLM_ISA=avx2 build/tests parity` runs the parity group on the AVX2 kernels), a
 * Forward over it and a state. */
#ifndef DL_TESTS_TEST_FORWARD_H
#define DL_TESTS_TEST_FORWARD_H

#include "model/model.h"

BackendOptions tf_backend(MatMode mode, int threads, bool pack);
/* The K and V cache types of the backends tf_backend makes from now on (backend.h's KV_*; KV_DEFAULT at start). */
void tf_set_kv(int kv_k, int kv_v);
/* The forward pass owns its backend (weights bound, not packed unless pack). */
Forward *tf_forward(const Model *m, int max_batch, int max_ctx, MatMode mode, DeltaNetAlgo algo, int threads, bool pack,
                    Err *err);
SeqState *tf_state(const Model *m, Forward *f, int n_ctx, Err *err);
/* Logits of all T tokens evaluated in steps of `step` (0: one batch); NULL on failure (recorded). */
float *tf_eval(const Model *m, const int32_t *ids, int T, int step, MatMode mode, DeltaNetAlgo algo, int threads,
               bool pack);

/* tests/data/models/NAME.gguf (NULL on failure, recorded), and tests/data/seqs/NAME/lenLEN.txt (*T tokens). */
Model *tf_model(const char *name);
int32_t *tf_seq(const char *name, int len, int *T);

#endif
