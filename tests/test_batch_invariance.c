/* test_batch_invariance.c — the fast arithmetic's promise (docs/KERNELS.md, "The fast arithmetic"): a
 * token's logits do not depend on the batch it is computed in. Every test model, 200 tokens evaluated in
 * one batch, token by token and in chunks of 7 (and 64, the chunked delta-net's size): bit for bit the same
 * logits, with the CPU kernels of the best ISA (packed as the engine packs) and 1 or 2 threads. llama.cpp's
 * own orders do not have this (its prefill and decode differ; m2, 200 tokens: max|Δ|/std 0.05). The same with
 * quantized KV caches (-ctk q8_0 -ctv q4_0, and the other way round): rows are quantized as they are appended,
 * whatever the batch, and read by the same kernel. */
#include "test.h"
#include "test_models.h"
#include "test_forward.h"

#include "base/fp16.h"

#include <stdlib.h>
#include <string.h>

#define N_MODELS N_TEST_MODELS

/* the first position and value where a and b differ (n floats), or -1 */
static long first_diff(const float *a, const float *b, long n) {
    for (long i = 0; i < n; i++)
        if (fp32_to_bits(a[i]) != fp32_to_bits(b[i])) return i;
    return -1;
}

static void one_model(const char *name, int threads, const char *cache) {
    Model *m = tf_model(name);
    int T = 0;
    int32_t *ids = tf_seq(name, 200, &T);
    if (!m || !ids) {
        free(ids);
        model_free(m);
        return;
    }
    const long V = m->cfg.n_vocab;
    float *whole = tf_eval(m, ids, T, 0, MATMUL_FAST, DELTANET_AUTO, threads, true);
    static const int steps[] = {1, 7, 64};
    int same = 0;
    for (size_t k = 0; whole && k < sizeof steps / sizeof steps[0]; k++) {
        float *split = tf_eval(m, ids, T, steps[k], MATMUL_FAST, DELTANET_AUTO, threads, true);
        if (!split) continue;
        const long d = first_diff(whole, split, (long)T * V);
        CHECK_MSG(d < 0, "%s, %d thread(s): steps of %d differ from one batch at token %ld, logit %ld (%.9g vs %.9g)", name,
                  threads, steps[k], d / V, d % V, d >= 0 ? split[d] : 0.f, d >= 0 ? whole[d] : 0.f);
        same += d < 0;
        free(split);
    }
    test_note("%-26s %d thread(s)%s: one batch = token by token = chunks of 7 = chunks of 64: %s", name, threads, cache,
              same == 3 ? "bit-identical" : "NO");
    free(whole);
    free(ids);
    model_free(m);
}

TEST(batch_invariance, every_model_every_split) {
    for (size_t i = 0; i < (size_t)N_TEST_MODELS; i++) one_model(test_model(i), i % 2 ? 2 : 1, "");
}

TEST(batch_invariance, quantized_kv_cache) {
    for (size_t i = 0; i < (size_t)N_TEST_MODELS; i++) {
        const bool k8 = i % 3 != 2; /* K q8_0 / V q4_0 on most, the other way round on some */
        tf_set_kv(k8 ? KV_Q8_0 : KV_Q4_0, k8 ? KV_Q4_0 : KV_Q8_0);
        one_model(test_model(i), i % 2 ? 1 : 2, k8 ? ", K q8_0 V q4_0" : ", K q4_0 V q8_0");
    }
    tf_set_kv(KV_DEFAULT, KV_DEFAULT);
}
