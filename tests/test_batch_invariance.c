/* test_batch_invariance.c — the fast arithmetic's promise (docs/KERNELS.md, "The fast arithmetic"): a
 * token's logits do not depend on the batch it is computed in. Every test model, 200 tokens evaluated in
 * one batch, token by token and in chunks of 7 (and 64, the chunked delta-net's size): bit for bit the same
 * logits, with the CPU kernels of the best ISA (packed as the engine packs) and 1 or 2 threads. llama.cpp's
 * own orders do not have this (its prefill and decode differ; m2, 200 tokens: max|Δ|/std 0.05). The same with
 * quantized KV caches (-ctk q8_0 -ctv q4_0, and the other way round): rows are quantized as they are appended,
 * whatever the batch, and read by the same kernel. And past ATTN_TILED_MIN_CTX, where the attention's later
 * rows run the tiled kernel (fixed key blocks, scores always through the GEMM): a prompt crossing it gives
 * the same bits in one batch, token by token and in chunks that straddle it, on F32 and quantized caches. */
#include "test.h"
#include "test_models.h"
#include "test_forward.h"

#include "base/fp16.h"
#include "kernels/cpu/seq_kernels.h"

#include <stdlib.h>
#include <string.h>

#define N_MODELS N_TEST_MODELS

/* the first position and value where a and b differ (n floats), or -1 */
static long first_diff(const float *a, const float *b, long n) {
    for (long i = 0; i < n; i++)
        if (fp32_to_bits(a[i]) != fp32_to_bits(b[i])) return i;
    return -1;
}

/* T tokens of model m: one batch against each of the n_steps splits; returns how many agree bit for bit */
static int splits_agree(const char *name, Model *m, const int32_t *ids, int T, const int *steps, int n_steps, int threads) {
    const long V = m->cfg.n_vocab;
    float *whole = tf_eval(m, ids, T, 0, MATMUL_FAST, DELTANET_AUTO, threads, true);
    int same = 0;
    for (int k = 0; whole && k < n_steps; k++) {
        float *split = tf_eval(m, ids, T, steps[k], MATMUL_FAST, DELTANET_AUTO, threads, true);
        if (!split) continue;
        const long d = first_diff(whole, split, (long)T * V);
        CHECK_MSG(d < 0, "%s, %d thread(s), %d tokens: steps of %d differ from one batch at token %ld, logit %ld (%.9g vs %.9g)",
                  name, threads, T, steps[k], d / V, d % V, d >= 0 ? split[d] : 0.f, d >= 0 ? whole[d] : 0.f);
        same += d < 0;
        free(split);
    }
    free(whole);
    return same;
}

static void one_model(const char *name, int threads, const char *cache) {
    Model *m = tf_model(name);
    int T = 0;
    int32_t *ids = tf_seq(name, 200, &T);
    if (m && ids) {
        static const int steps[] = {1, 7, 64};
        const int same = splits_agree(name, m, ids, T, steps, 3, threads);
        test_note("%-26s %d thread(s)%s: one batch = token by token = chunks of 7 = chunks of 64: %s", name, threads, cache,
                  same == 3 ? "bit-identical" : "NO");
    }
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

/* Logits of tokens [L, T) of ids: the first P tokens in one batch, then batches of `step` (n_out = the batch:
 * logits of its last n_out tokens come first in the buffer). NULL on failure (recorded). */
static float *eval_tail(const Model *m, const int32_t *ids, int T, int P, int step, int L, int threads) {
    Err err = {{0}};
    const long V = m->cfg.n_vocab;
    const int mb = P > step ? P : step;
    Forward *fw = tf_forward(m, mb, T + 16, MATMUL_FAST, DELTANET_AUTO, threads, true, &err);
    SeqState *st = tf_state(m, fw, T + 16, &err);
    float *out = malloc(sizeof(float) * (size_t)(T - L) * V), *tmp = malloc(sizeof(float) * (size_t)mb * V);
    bool ok = st && out && tmp;
    for (int p = 0; ok && p < T;) {
        const int n = p == 0 ? P : T - p < step ? T - p : step, no = p + n > L ? (p + n - L < n ? p + n - L : n) : 0;
        ok = forward_run(fw, st, ids + p, n, tmp, no ? no : 1, &err) == 0;
        if (ok && no) memcpy(out + (size_t)(p + n - no - L) * V, tmp, sizeof(float) * (size_t)no * V);
        p += n;
    }
    CHECK_MSG(ok, "eval_tail: %s", err.msg);
    if (!ok) free(out), out = NULL;
    free(tmp);
    seqstate_free(st);
    forward_free(fw);
    return out;
}

/* A prompt past ATTN_TILED_MIN_CTX (rows up to it mirror, later rows run the tiled kernel over many key
 * blocks): the logits of the tokens around the switch the same bits from one batch of the whole prompt,
 * token by token, in chunks of 7 and in a chunk of 300 that straddles the switch; on the default, F32 and
 * quantized caches (each tile dequantized), 1 and 2 threads. */
TEST(batch_invariance, long_prompt_tiled_attention) {
    static const char *const names[] = {"m3-qwen35-dense-bf16", "m2-qwen3next-new-mixed", "m3-qwen35-dense-bf16"};
    static const int kk[] = {KV_DEFAULT, KV_Q8_0, KV_F32}, kv[] = {KV_DEFAULT, KV_Q4_0, KV_F32};
    static const char *const kname[] = {"", ", K q8_0 V q4_0", ", K f32 V f32"};
    const int T = ATTN_TILED_MIN_CTX + 96, L = ATTN_TILED_MIN_CTX - 64;
    static const int split[][2] = {{ATTN_TILED_MIN_CTX - 64, 1}, {ATTN_TILED_MIN_CTX - 61, 7}, {ATTN_TILED_MIN_CTX - 200, 300}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        Model *m = tf_model(names[i]);
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
        const long V = m ? m->cfg.n_vocab : 0;
        tf_set_kv(kk[i], kv[i]);
        float *whole = NULL;
        if (m && ids) {
            uint64_t r = 0x9E3779B97F4A7C15ull + i;
            for (int t = 0; t < T; t++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                ids[t] = (int32_t)((r >> 33) % (uint64_t)V);
            }
            whole = eval_tail(m, ids, T, T, 1, L, (int)(i % 2) + 1);
        }
        int same = 0;
        for (size_t k = 0; whole && k < sizeof split / sizeof split[0]; k++) {
            float *o = eval_tail(m, ids, T, split[k][0], split[k][1], L, (int)(i % 2) + 1);
            if (!o) continue;
            const long d = first_diff(whole, o, (long)(T - L) * V);
            CHECK_MSG(d < 0, "%s%s, %d tokens, the first %d in one batch then steps of %d: token %ld differs from one batch, "
                      "logit %ld (%.9g vs %.9g)", names[i], kname[i], T, split[k][0], split[k][1],
                      d < 0 ? 0 : L + d / V, d % V, d >= 0 ? o[d] : 0.f, d >= 0 ? whole[d] : 0.f);
            same += d < 0;
            free(o);
        }
        tf_set_kv(KV_DEFAULT, KV_DEFAULT);
        test_note("%-22s %zu thread(s)%s, %d tokens (tiled past %d): tokens %d.. one batch = token by token = chunks of 7 = a "
                  "chunk of 300 across the switch: %s", names[i], i % 2 + 1, kname[i], T, ATTN_TILED_MIN_CTX, L,
                  same == 3 ? "bit-identical" : "NO");
        free(whole);
        free(ids);
        model_free(m);
    }
}
