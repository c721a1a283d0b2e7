/* test_vk_stream.c — the Vulkan command stream built for speed (group `vk_stream`, docs/VULKAN.md "The
 * decode pass"): barriers only where data flows (a read after an unsynchronised write, a write after an
 * unsynchronised read or write get one; independent commands none), the fused ops (residual add in the
 * products' epilogue, gate + up + SwiGLU in one pass) giving the unfused ops' bits on whole models, and the
 * command counts per decoded token that --profile and `bench --json` report. Each test skips with one line
 * when no Vulkan device exists. */
#include "test.h"

#include "deltallm.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Backend *vk_new(const char *tune) {
    Err err = {{0}};
    Backend *be = backend_create(&(BackendOptions){.name = "vulkan", .tune = tune}, &err);
    if (!be) test_skip("no Vulkan device (%s)", err.msg);
    return be;
}

static uint64_t barriers(Backend *be) {
    BackendStats st;
    backend_stats(be, &st);
    return st.barriers;
}

/* add() on ranges of one buffer: independent ranges share a barrier interval, a dependency gets a barrier */
TEST(vk_stream, barriers_only_where_data_flows) {
    Backend *be = vk_new(NULL);
    if (!be) return;
    Err err = {{0}};
    enum { N = 1024 };
    BBuf *buf = be->vt->alloc(be, sizeof(float) * 8 * N, &err);
    REQUIRE_MSG(buf, "%s", err.msg);
    float h[8 * N];
    for (int i = 0; i < 8 * N; i++) h[i] = (float)(i % 97) * 0.25f;
    be->vt->upload(be, (BView){buf, 0}, h, sizeof h);
    const BView v[8] = {bv_f32((BView){buf, 0}, 0),     bv_f32((BView){buf, 0}, N),     bv_f32((BView){buf, 0}, 2 * N),
                        bv_f32((BView){buf, 0}, 3 * N), bv_f32((BView){buf, 0}, 4 * N), bv_f32((BView){buf, 0}, 5 * N),
                        bv_f32((BView){buf, 0}, 6 * N), bv_f32((BView){buf, 0}, 7 * N)};
    be->vt->begin(be);
    const uint64_t b0 = barriers(be);
    be->vt->add(be, v[0], v[1], N); /* v0 += v1 */
    be->vt->add(be, v[2], v[3], N); /* independent: no barrier */
    be->vt->add(be, v[4], v[5], N); /* independent */
    const uint64_t b1 = barriers(be);
    be->vt->add(be, v[6], v[0], N); /* reads v0, written above: a barrier (RAW) */
    const uint64_t b2 = barriers(be);
    be->vt->add(be, v[7], v[1], N); /* reads v1 (only read so far): none */
    const uint64_t b3 = barriers(be);
    be->vt->add(be, v[1], v[5], N); /* writes v1, read by the last one: a barrier (WAR) */
    const uint64_t b4 = barriers(be);
    be->vt->add(be, v[1], v[2], N); /* writes v1 again, written by the last one: a barrier (WAW) */
    const uint64_t b5 = barriers(be);
    CHECK(be->vt->submit(be, &err) == 0 && be->vt->wait(be, &err) == 0);
    test_note("barriers: independent %llu, RAW %llu, read-read %llu, WAR %llu, WAW %llu", (unsigned long long)(b1 - b0),
              (unsigned long long)(b2 - b1), (unsigned long long)(b3 - b2), (unsigned long long)(b4 - b3),
              (unsigned long long)(b5 - b4));
    CHECK(b1 - b0 == 0);
    CHECK(b2 - b1 == 1);
    CHECK(b3 - b2 == 0);
    CHECK(b4 - b3 == 1);
    CHECK(b5 - b4 == 1);
    float out[8 * N];
    be->vt->download(be, out, (BView){buf, 0}, sizeof out);
    bool ok = true;
    for (int i = 0; i < N; i++) {
        float e[8];
        for (int k = 0; k < 8; k++) e[k] = h[k * N + i];
        e[0] += e[1], e[2] += e[3], e[4] += e[5], e[6] += e[0], e[7] += e[1], e[1] += e[5], e[1] += e[2];
        for (int k = 0; k < 8; k++) ok = ok && out[k * N + i] == e[k];
    }
    CHECK_MSG(ok, "results of the reordered stream differ from the sequential ones");
    be->vt->free(be, buf);
    backend_destroy(be);
}

/* logits of T tokens decoded one per pass (step 1) or in one batch (step 0) */
static float *run(const Model *m, const char *tune, const int32_t *ids, int T, int step, DevCounts *cnt) {
    Err err = {{0}};
    if (step <= 0) step = T;
    const ForwardOptions fo = {.max_batch = step, .max_ctx = T + 8, .backend = {.name = "vulkan", .tune = tune}};
    Forward *f = forward_new(m, &fo, &err);
    SeqState *s = f ? seqstate_new(m, forward_backend(f), T + 8, 0, 0, &err) : NULL;
    const int V = m->cfg.n_vocab;
    float *out = malloc(sizeof(float) * (size_t)T * V);
    bool ok = s && out;
    for (int p = 0; ok && p < T; p += step) {
        const int n = T - p < step ? T - p : step;
        if (p == step) forward_device_counts(f, cnt, true); /* from the second pass: steady state */
        ok = forward_run(f, s, ids + p, n, out + (size_t)p * V, n, &err) == 0;
    }
    if (ok) forward_device_counts(f, cnt, false);
    if (!ok) {
        test_check(false, __FILE__, __LINE__, "run", "%s (%s): %s", m->cfg.name, tune ? tune : "default", err.msg);
        free(out);
        out = NULL;
    }
    seqstate_free(s);
    forward_free(f);
    return out;
}

/* the fused ops and the dependency-tracked stream against the unfused ops with a barrier before every
 * command: the same bits, on a dense model (decode and prefill) and a wide quantized one */
TEST(vk_stream, fused_stream_bitwise_equal_to_unfused) {
    Backend *probe = vk_new(NULL);
    if (!probe) return;
    backend_destroy(probe);
    static const char *const names[] = {"m3-qwen35-dense-bf16", "m7-qwen35-wide-q8_0", "m4-qwen35moe-q8_0"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "models/%s.gguf", names[i]);
        Err err = {{0}};
        Model *m = model_load(test_data(path), &err);
        REQUIRE_MSG(m, "%s", err.msg);
        enum { T = 12 };
        int32_t ids[T];
        for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 37 + 11) % m->cfg.n_vocab);
        const size_t bytes = sizeof(float) * (size_t)T * (size_t)m->cfg.n_vocab;
        for (int step = 1; step >= 0; step--) {
            DevCounts a = {0}, b = {0};
            float *x = run(m, NULL, ids, T, step, &a), *y = run(m, "fuse=0,dep=0", ids, T, step, &b);
            if (x && y) {
                CHECK_MSG(memcmp(x, y, bytes) == 0, "%s, %s: fused logits differ from the unfused ones", names[i],
                          step ? "decode" : "prefill");
                if (step) {
                    const double ls = a.layer_steps ? (double)a.layer_steps : 1, lu = b.layer_steps ? (double)b.layer_steps : 1;
                    test_note("%s decode, per layer per token: %.2f dispatches / %.2f barriers (unfused, a barrier "
                              "each: %.2f / %.2f)",
                              names[i], (double)a.layer_dispatches / ls, (double)a.layer_barriers / ls,
                              (double)b.layer_dispatches / lu, (double)b.layer_barriers / lu);
                    CHECK(a.layer_dispatches < b.layer_dispatches);
                    CHECK(a.layer_barriers < b.layer_barriers);
                    CHECK(a.layer_barriers < a.layer_dispatches);
                    CHECK(b.passes == T - 1 && a.passes == T - 1);
                }
            }
            free(x);
            free(y);
        }
        model_free(m);
    }
}
