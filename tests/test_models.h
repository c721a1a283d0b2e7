/* test_models.h — the random-weight test models under tests/data/models/ (tests/data/README), with the properties
 * tests choose by: the one list every suite loops over (parity, batch invariance, forward parts, KV cache, MPI,
 * the device suite), so a new model is one row here. */
#ifndef DL_TESTS_TEST_MODELS_H
#define DL_TESTS_TEST_MODELS_H

#include <stdbool.h>

typedef struct TestModel {
    const char *name; /* models/<name>.gguf, seqs/<name>/, ref/<name>/ */
    const char *arch; /* qwen3next, qwen35, qwen35moe */
    bool moe;         /* routed experts */
    bool mtp;         /* one of the models the MTP tests add a synthetic MTP block to (test_mtp.c's mtp_test_model) */
    bool wide;        /* n_embd 256 (the others 64): the kernels' wider paths */
} TestModel;

static const TestModel test_models[] = {
    {"m1-qwen3next-legacy-f32", "qwen3next", true, true, false},
    {"m2-qwen3next-new-mixed", "qwen3next", true, false, true},
    {"m3-qwen35-dense-bf16", "qwen35", false, false, false},
    {"m4-qwen35moe-q8_0", "qwen35moe", true, true, false},
    {"m5-qwen35-7layer-int3-f16", "qwen35", false, false, false},
    {"m6-qwen35moe-iq2xxs", "qwen35moe", true, false, true},
    {"m7-qwen35-wide-q8_0", "qwen35", false, true, true},
    {"m8-qwen3next-wide-mixed", "qwen3next", true, true, true},
};
#define N_TEST_MODELS (int)(sizeof test_models / sizeof test_models[0])

/* the name of test model i (< N_TEST_MODELS) */
static inline const char *test_model(int i) { return test_models[i].name; }

#endif
