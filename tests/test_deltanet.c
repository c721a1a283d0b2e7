/* test_deltanet.c — the two delta-net algorithms agree, and the forward pass does not depend on how a
 * prompt is split into batches.
 *   recurrent vs chunked (WY/UT, chunks of 64): T = 1, 5, 63, 64, 65, 200, 1000, zero and random starting
 *   state, grouped (qwen3next) and tiled (qwen35) head maps: max|Δ| / max|ref| ≤ 1e-5 on outputs and state.
 *   model: one batch vs chunks of 7 vs token by token vs the chunked algorithm: same logits within the F32
 *   parity budget (max|Δ|/std ≤ 1e-4, top-1 identical): 1e-6 differences in a layer grow to ~2e-5 over four
 *   layers, the same amount llama.cpp's own prefill and decode paths differ by on F32. */
#include "test.h"
#include "test_forward.h"

#include "cli/logit_compare.h"
#include "cli/tokens_file.h"
#include "kernels/ops.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void l2n(float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    float inv = 1.0f / (float)sqrt(s);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

static double rel_err(const float *ref, const float *x, size_t n) {
    double m = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        m = fmax(m, fabs(ref[i]));
        d = fmax(d, fabs((double)ref[i] - x[i]));
        if (!isfinite(x[i])) return INFINITY;
    }
    return m > 0 ? d / m : d;
}

static void agree_case(int T, int Hk, int Hv, int D, bool grouped, bool start_state) {
    const size_t nq = (size_t)T * Hk * D, nv = (size_t)T * Hv * D, ns = (size_t)Hv * D * D;
    float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nv * 4), *g = malloc((size_t)T * Hv * 4),
          *beta = malloc((size_t)T * Hv * 4), *s1 = malloc(ns * 4), *s2 = malloc(ns * 4), *o1 = malloc(nv * 4),
          *o2 = malloc(nv * 4);
    for (size_t i = 0; i < nq; i++) q[i] = frand(), k[i] = frand();
    for (int i = 0; i < T * Hk; i++) l2n(q + (size_t)i * D, D), l2n(k + (size_t)i * D, D);
    for (size_t i = 0; i < nv; i++) v[i] = frand();
    for (int i = 0; i < T * Hv; i++) {
        g[i] = -0.5f * (frand() + 1.0f) * (i % 7 == 0 ? 4.0f : 0.2f); /* mostly slow decay, some fast */
        beta[i] = 0.5f * (frand() + 1.0f);
    }
    for (size_t i = 0; i < ns; i++) s1[i] = start_state ? 0.3f * frand() : 0.0f;
    memcpy(s2, s1, ns * 4);
    /* poison the outputs: every element must be written */
    for (size_t i = 0; i < nv; i++) o1[i] = o2[i] = NAN;
    OpCtx oc = {MATMUL_EXACT, NULL, NULL, 0};
    DeltaNetArgs a = {T, Hk, Hv, D, D, grouped, q, k, v, g, beta, s1, o1, NULL, NULL};
    deltanet_recurrent_ref(&oc, &a);
    a.state = s2;
    a.out = o2;
    deltanet_chunked_ref(&oc, &a);
    double eo = rel_err(o1, o2, nv), es = rel_err(s1, s2, ns);
    CHECK_MSG(eo <= 1e-5 && es <= 1e-5, "T=%d Hk=%d Hv=%d D=%d %s %s: output %.3g state %.3g", T, Hk, Hv, D,
              grouped ? "grouped" : "tiled", start_state ? "with state" : "zero state", eo, es);
    if (T == 1000 || T == 65) test_note("T=%4d Hk=%d Hv=%d D=%3d %-7s %-10s: output %.2e, state %.2e", T, Hk, Hv, D,
                                        grouped ? "grouped" : "tiled", start_state ? "with state" : "zero state", eo, es);
    free(q), free(k), free(v), free(g), free(beta), free(s1), free(s2), free(o1), free(o2);
}

TEST(deltanet, recurrent_vs_chunked) {
    static const int Ts[] = {1, 5, 63, 64, 65, 200, 1000};
    for (size_t i = 0; i < sizeof Ts / sizeof Ts[0]; i++)
        for (int st = 0; st < 2; st++) {
            agree_case(Ts[i], 2, 4, 16, true, st);
            agree_case(Ts[i], 2, 6, 32, false, st);
        }
    agree_case(200, 2, 4, 128, false, true); /* the real head size */
}

/* logits of the whole sequence evaluated in steps of `step` tokens */
static float *eval_split(Model *m, const int32_t *ids, int T, int step, MatMode mode, DeltaNetAlgo algo) {
    return tf_eval(m, ids, T, step, mode, algo, 2, false);
}

static void split_invariance(const char *name, MatMode mode) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    Err err = {{0}};
    Model *m = model_load(test_data(rel), &err);
    REQUIRE_MSG(m, "%s", err.msg);
    snprintf(rel, sizeof rel, "seqs/%s/len200.txt", name);
    int32_t *ids;
    int T;
    REQUIRE_MSG(tokens_file_read(test_data(rel), &ids, &T, &err) == 0, "%s", err.msg);
    const int V = m->cfg.n_vocab;
    float *ref = eval_split(m, ids, T, T, mode, DELTANET_RECURRENT);
    struct {
        int step;
        DeltaNetAlgo algo;
        const char *what;
    } cases[] = {{7, DELTANET_RECURRENT, "chunks of 7"},
                 {1, DELTANET_RECURRENT, "token by token"},
                 {T, DELTANET_CHUNKED, "one batch, chunked algorithm"},
                 {50, DELTANET_CHUNKED, "chunks of 50, chunked algorithm"}};
    for (size_t i = 0; ref && i < sizeof cases / sizeof cases[0]; i++) {
        float *x = eval_split(m, ids, T, cases[i].step, mode, cases[i].algo);
        if (!x) continue;
        LogitMetrics r = logits_compare(ref, x, T, V, 1e-3);
        test_note("%s %s, %s: max_rel %.2e, top1 %.4f", name, mode == MATMUL_EXACT ? "exact" : "default", cases[i].what,
                  r.max_rel, r.top1);
        CHECK_MSG(r.max_rel <= 1e-4 && r.top1 == 1.0, "%s: %s: max_rel %.3g top1 %.4f", name, cases[i].what, r.max_rel,
                  r.top1);
        free(x);
    }
    free(ref);
    free(ids);
    model_free(m);
}

TEST(deltanet, split_invariance_exact) {
    split_invariance("m1-qwen3next-legacy-f32", MATMUL_EXACT);
    split_invariance("m5-qwen35-7layer-int3-f16", MATMUL_EXACT);
}

/* F32 weights in default mode: no activation rounding, so the split changes only summation order */
TEST(deltanet, split_invariance_default_f32) { split_invariance("m1-qwen3next-legacy-f32", MATMUL_GGML); }
