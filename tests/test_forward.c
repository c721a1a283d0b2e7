/* test_forward.c — see test_forward.h. */
#include "test_forward.h"

#include "kernels/cpu/isa.h"
#include "test.h"

#include "cli/tokens_file.h"

#include <stdio.h>
#include <stdlib.h>

static int tf_kv_k = KV_DEFAULT, tf_kv_v = KV_DEFAULT;
void tf_set_kv(int kv_k, int kv_v) { tf_kv_k = kv_k, tf_kv_v = kv_v; }

BackendOptions tf_backend(MatMode mode, int threads, bool pack) {
    Err err = {{0}};
    Isa isa = ISA_REF;
    if (isa_parse(getenv("DELTALLM_ISA"), &isa, &err)) { /* a bad value fails the test that asked */
        test_check(false, __FILE__, __LINE__, "DELTALLM_ISA", "%s", err.msg);
        isa = ISA_REF;
    }
    return (BackendOptions){.name = getenv("DELTALLM_BACKEND"), .cpu.isa = (int)isa, .n_threads = threads, .mode = mode, .cpu.pack = pack,
                            .kv_k = tf_kv_k, .kv_v = tf_kv_v};
}

Forward *tf_forward(const Model *m, int max_batch, int max_ctx, MatMode mode, DeltaNetAlgo algo, int threads, bool pack,
                    Err *err) {
    ForwardOptions fo = {.max_batch = max_batch, .max_ctx = max_ctx, .algo = algo, .backend = tf_backend(mode, threads, pack)};
    return forward_new(m, &fo, err);
}

SeqState *tf_state(const Model *m, Forward *f, int n_ctx, Err *err) {
    return f ? seqstate_new(m, forward_backend(f), n_ctx, 0, 0, err) : NULL;
}

float *tf_eval(const Model *m, const int32_t *ids, int T, int step, MatMode mode, DeltaNetAlgo algo, int threads,
               bool pack) {
    Err err = {{0}};
    const int V = m->cfg.n_vocab;
    if (step <= 0) step = T;
    Forward *fw = tf_forward(m, step, T + 16, mode, algo, threads, pack, &err);
    SeqState *st = tf_state(m, fw, T + 16, &err);
    float *out = malloc(sizeof(float) * (size_t)T * V);
    bool ok = st && out;
    for (int p = 0; ok && p < T; p += step) {
        int n = T - p < step ? T - p : step;
        ok = forward_run(fw, st, ids + p, n, out + (size_t)p * V, n, &err) == 0;
    }
    if (!ok) {
        test_check(false, __FILE__, __LINE__, "tf_eval", "%s", err.msg);
        free(out);
        out = NULL;
    }
    seqstate_free(st);
    forward_free(fw);
    return out;
}

/* ---- the test models and their token sequences -------------------------------------------------------- */

Model *tf_model(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    Err err = {{0}};
    Model *m = model_load(test_data(rel), &err);
    CHECK_MSG(m, "%s: %s", name, err.msg);
    return m;
}

int32_t *tf_seq(const char *name, int len, int *T) {
    char rel[256];
    snprintf(rel, sizeof rel, "seqs/%s/len%d.txt", name, len);
    Err err = {{0}};
    int32_t *ids = NULL;
    if (tokens_file_read(test_data(rel), &ids, T, &err)) CHECK_MSG(false, "%s: %s", rel, err.msg);
    return ids;
}
