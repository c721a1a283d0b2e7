/* test_device.c — the device conformance suite (group `device`): every registered device backend (the registry's
 * non-host rows, backend/registry.c: today lavapipe or a GPU through Vulkan; a CUDA or Metal row later, with no new
 * test code) on whole models; the per-op checks on odd shapes against `ref` are test_backend_ops.c's, which takes
 * the same list. Per device: on every test model (test_models.h), the prefill path (65 tokens in one batch, with
 * the delta rule recurrent and chunked) and the decode path (16 tokens, one per pass) against the CPU's exact
 * mode: max|Δ|/std ≤ 1e-3, top-1 ≥ 0.99; 16 greedy tokens identical on the F32 model; -ngl splits (the first
 * layers on the device, the rest on the CPU) agree with the all-device and all-CPU runs; the traffic of a decoded
 * token; a format without kernels, a bad index, a bad tuning key and a model outside the kernels' limits refused
 * by name; the CLI (`devices`, `--device`, `-ngl`, bad values); the Node server suite against `serve --device`
 * (server_node_suite, test_server.c). Where a device backend has no device here every test says SKIP with the
 * backend's reason (the CLI test first checks that the binary refuses `--device NAME` in one line); CI's clean
 * machine has lavapipe (Debian's mesa-vulkan-drivers), so it skips nothing. */
#include "test.h"
#include "test_devices.h"
#include "test_models.h"

#include "cli/logit_compare.h"
#include "cli_proc.h"
#include "cli/tokens_file.h"
#include "deltallm.h"
#include "gguf/format.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int test_devices(const char **names, const char **missing) {
    int nr, n = 0;
    const BackendReg *reg = backend_registry(&nr);
    if (missing) *missing = NULL;
    for (int r = 0; r < nr && n < TEST_MAX_DEVICES; r++) {
        if (reg[r].host) continue;
        Err err = {{0}};
        if (backend_available(&reg[r], &err)) {
            names[n++] = reg[r].name;
        } else {
            test_skip("%s: %s", reg[r].name, err.msg);
            if (missing && !*missing) *missing = reg[r].name;
        }
    }
    return n;
}

/* the registry row of a device backend */
static const BackendReg *row_of(const char *name) {
    int nr;
    const BackendReg *reg = backend_registry(&nr);
    for (int r = 0; r < nr; r++)
        if (!strcmp(reg[r].name, name)) return &reg[r];
    return NULL;
}

#define N_MODELS N_TEST_MODELS

/* logits of all T tokens in steps of step tokens (0: one batch) on a backend */
static float *eval(const Model *m, const char *backend, const char *tune, MatMode mode, const int32_t *ids, int T, int step) {
    Err err = {{0}};
    if (step <= 0) step = T;
    const ForwardOptions fo = {.max_batch = step, .max_ctx = T + 8,
                               .backend = {.name = backend, .cpu.isa = -1, .n_threads = 2, .mode = mode, .tune = tune}};
    Forward *f = forward_new(m, &fo, &err);
    SeqState *s = f ? seqstate_new(m, forward_backend(f), T + 8, 0, 0, &err) : NULL;
    const int V = m->cfg.n_vocab;
    float *out = malloc(sizeof(float) * (size_t)T * V);
    bool ok = s && out;
    for (int p = 0; ok && p < T; p += step) {
        const int n = T - p < step ? T - p : step;
        ok = forward_run(f, s, ids + p, n, out + (size_t)p * V, n, &err) == 0;
    }
    if (!ok) {
        test_check(false, __FILE__, __LINE__, "eval", "%s on %s: %s", m->cfg.name, backend, err.msg);
        free(out);
        out = NULL;
    }
    seqstate_free(s);
    forward_free(f);
    return out;
}

static int32_t *read_seq(const char *model, int len, int *T) {
    char rel[256];
    snprintf(rel, sizeof rel, "seqs/%s/len%d.txt", model, len);
    Err err = {{0}};
    int32_t *ids = NULL;
    if (tokens_file_read(test_data(rel), &ids, T, &err)) {
        test_check(false, __FILE__, __LINE__, "tokens", "%s: %s", rel, err.msg);
        return NULL;
    }
    return ids;
}

/* the accuracy table: one line per model and path */
TEST(device, logits_every_model_prefill_and_decode) {
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    for (int di = 0; di < nd; di++)
        for (size_t mi = 0; mi < N_MODELS; mi++) {
            char rel[256];
            snprintf(rel, sizeof rel, "models/%s.gguf", test_model(mi));
            Err err = {{0}};
            Model *m = model_load(test_data(rel), &err);
            if (!m) {
                CHECK_MSG(false, "%s", err.msg);
                continue;
            }
            int T = 0;
            int32_t *ids = read_seq(test_model(mi), 65, &T);
            const int V = m->cfg.n_vocab;
            float *exact = ids ? eval(m, "cpu", NULL, MATMUL_EXACT, ids, T, 0) : NULL;
            static const char *const paths[] = {"prefill", "decode", "prefill (chunked)"};
            for (int path = 0; exact && path < 3; path++) {
                /* prefill: all 65 tokens in one batch, with the delta rule recurrent and (chunk=32, a tuning key every
                 * device backend takes: BackendOptions.tune) chunked across a chunk boundary at 64; decode: the first
                 * 16, one per pass (lavapipe spends ~0.1 ms per dispatch: this keeps CI short) */
                const int n = path == 1 ? 16 : T;
                float *dev = eval(m, dv[di], path == 2 ? "chunk=32" : NULL, MATMUL_GGML, ids, n, path == 1 ? 1 : 0);
                if (!dev) continue;
                const LogitMetrics r = logits_compare(exact, dev, n, V, 1e-3);
                test_note("%s %-26s %-17s max|d|/std %.2e  top-1 %.4f (%d near-ties)  KL %.1e", dv[di], test_model(mi), paths[path], r.max_rel,
                          r.top1_decisive, r.near_ties, r.kl_mean);
                CHECK_MSG(r.nonfinite == 0 && r.max_rel <= 1e-3 && r.top1_decisive >= 0.99, "%s %s %s: max|d|/std %.3g, top-1 %.4f",
                          dv[di], test_model(mi), paths[path], r.max_rel, r.top1_decisive);
                free(dev);
            }
            free(exact);
            free(ids);
            model_free(m);
        }
}

/* ---- through the engine: greedy decoding and -ngl splits ------------------------------------------------------ */

static int greedy(const float *lg, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (lg[i] > lg[best]) best = i;
    return best;
}

/* n greedy tokens after the prompt (and the logits of each step into all, [n][V], when not NULL) */
static bool generate(const char *model, const char *backend, bool exact, const DlStage *stages, int n_stages, const int32_t *prompt,
                     int n_prompt, int n, int32_t *out, float *all) {
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = test_data(model);
    p.backend = backend;
    p.exact = exact;
    p.n_ctx = 256;
    p.n_threads = 2;
    p.stages = stages;
    p.n_stages = n_stages;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    if (!e) return test_check(false, __FILE__, __LINE__, "engine", "%s: %s", backend, err.msg);
    DlSession *s = dl_session_new(e, &err);
    const int V = dl_engine_info(e)->n_vocab;
    bool ok = s && dl_session_eval(s, prompt, (size_t)n_prompt, &err) == 0;
    for (int i = 0; ok && i < n; i++) {
        const float *lg = dl_session_logits(s);
        if (all) memcpy(all + (size_t)i * V, lg, sizeof(float) * (size_t)V);
        out[i] = greedy(lg, V);
        ok = dl_session_eval(s, &out[i], 1, &err) == 0;
    }
    if (!ok) test_check(false, __FILE__, __LINE__, "generate", "%s: %s", backend, err.msg);
    dl_session_free(s);
    dl_engine_close(e);
    return ok;
}

TEST(device, greedy_16_tokens_f32_model) {
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    for (int di = 0; di < nd; di++) {
        int T = 0;
        int32_t *ids = read_seq(test_model(0), 5, &T);
        REQUIRE(ids);
        int32_t a[16], b[16];
        const bool ok = generate("models/m1-qwen3next-legacy-f32.gguf", "cpu", true, NULL, 0, ids, T, 16, a, NULL) &&
                        generate("models/m1-qwen3next-legacy-f32.gguf", dv[di], false, NULL, 0, ids, T, 16, b, NULL);
        if (ok) {
            int same = 0;
            while (same < 16 && a[same] == b[same]) same++;
            test_note("%s, m1 (F32): %d of 16 greedy tokens identical to the CPU's exact mode", dv[di], same);
            CHECK_MSG(same == 16, "%s: greedy tokens differ from token %d", dv[di], same);
        }
        free(ids);
    }
}

TEST(device, ngl_splits_agree) {
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    static const char *const split_models[] = {"models/m4-qwen35moe-q8_0.gguf", "models/m5-qwen35-7layer-int3-f16.gguf"};
    const int32_t prompt[] = {11, 257, 33, 470, 9, 101, 64, 300};
    for (int di = 0; di < nd; di++)
        for (size_t mi = 0; mi < 2; mi++) {
            const int V = 1003, n = 6; /* both models have the 1003-token test vocabulary */
            float *cpu = malloc(sizeof(float) * (size_t)n * V), *gpu = malloc(sizeof(float) * (size_t)n * V);
            float *split = malloc(sizeof(float) * (size_t)n * V);
            int32_t tc[8], tg[8], ts[8];
            const DlStage ngl2[2] = {{dv[di], 2}, {"cpu", 0}};
            bool ok = generate(split_models[mi], "cpu", true, NULL, 0, prompt, 8, n, tc, cpu) &&
                      generate(split_models[mi], dv[di], false, NULL, 0, prompt, 8, n, tg, gpu) &&
                      generate(split_models[mi], NULL, true, ngl2, 2, prompt, 8, n, ts, split);
            if (ok) {
                const LogitMetrics a = logits_compare(cpu, split, n, V, 1e-3), b = logits_compare(gpu, split, n, V, 1e-3);
                test_note("%s %s -ngl 2: vs all-CPU max|d|/std %.2e, vs all-device %.2e; tokens %s", dv[di], split_models[mi] + 7, a.max_rel,
                          b.max_rel, memcmp(tc, ts, sizeof tc[0] * n) == 0 && memcmp(tg, ts, sizeof tg[0] * n) == 0 ? "identical" : "differ");
                CHECK(a.max_rel <= 1e-3 && b.max_rel <= 1e-3);
                CHECK(memcmp(tc, ts, sizeof tc[0] * n) == 0 && memcmp(tg, ts, sizeof tg[0] * n) == 0);
            }
            free(cpu), free(gpu), free(split);
        }
}

/* ---- what a decoded token costs in traffic, and refusals ---------------------------------------------------------- */

TEST(device, decode_traffic_is_ids_and_logits) {
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    for (int di = 0; di < nd; di++) {
        Err err = {{0}};
        Model *m = model_load(test_data("models/m3-qwen35-dense-bf16.gguf"), &err);
        REQUIRE_MSG(m, "%s", err.msg);
        const ForwardOptions fo = {.max_batch = 8, .max_ctx = 64, .backend = {.name = dv[di]}};
        Forward *f = forward_new(m, &fo, &err);
        SeqState *s = f ? seqstate_new(m, forward_backend(f), 64, 0, 0, &err) : NULL;
        REQUIRE_MSG(s, "%s", err.msg);
        const int V = m->cfg.n_vocab;
        float *lg = malloc(sizeof(float) * V);
        int32_t tok = 7;
        CHECK(forward_run(f, s, &tok, 1, lg, 1, &err) == 0);
        BackendStats a, b;
        backend_stats(forward_backend(f), &a);
        for (int i = 0; i < 4; i++) CHECK(forward_run(f, s, &tok, 1, lg, 1, &err) == 0);
        backend_stats(forward_backend(f), &b);
        const double up = (double)(b.h2d_bytes - a.h2d_bytes) / 4, down = (double)(b.d2h_bytes - a.d2h_bytes) / 4;
        test_note("%s, dense decode: %.0f bytes up, %.0f bytes down per token (logits: %zu), %.1f submissions", dv[di], up, down,
                  sizeof(float) * (size_t)V, (double)(b.submits - a.submits) / 4);
        CHECK(down == (double)(sizeof(float) * (size_t)V));
        CHECK(up <= 16); /* the token id and its position */
        free(lg);
        seqstate_free(s);
        forward_free(f);
        model_free(m);
    }
}

TEST(device, format_without_kernel_refused_by_name) {
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    for (int di = 0; di < nd; di++) {
        const char *name = dv[di];
        char bad[64];
        Err err = {{0}};
        Backend *be = backend_create(&(BackendOptions){.name = name}, &err);
        REQUIRE_MSG(be, "%s", err.msg);
        static uint8_t data[36 * 4];
        const Weight w = {.id = 0, .name = "blk.0.ffn_up.weight", .layer = 0, .role = W_FFN_UP, .type = FMT_Q8_1, .cols = 32,
                          .rows = 4, .row_bytes = 36, .bytes = sizeof data, .host = data};
        CHECK(be->vt->bind(be, &w, 1, &err) != 0);
        CHECK_MSG(strstr(err.msg, "blk.0.ffn_up.weight") && strstr(err.msg, "q8_1"), "got: %s", err.msg);
        backend_destroy(be);
        err_clear(&err);
        if (row_of(name) && row_of(name)->indexed) { /* a device index past the last, and one that is no number */
            snprintf(bad, sizeof bad, "%s:99", name);
            CHECK(!backend_create(&(BackendOptions){.name = bad}, &err));
            CHECK_MSG(strstr(err.msg, "device 99"), "got: %s", err.msg);
            err_clear(&err);
            snprintf(bad, sizeof bad, "%s:x", name);
            CHECK(!backend_create(&(BackendOptions){.name = bad}, &err));
            CHECK_MSG(strstr(err.msg, ":N"), "got: %s", err.msg);
            err_clear(&err);
        }
        CHECK(!backend_create(&(BackendOptions){.name = name, .tune = "chunk=3,speed=11"}, &err));
        CHECK_MSG(strstr(err.msg, "speed"), "got: %s", err.msg);
        /* a model outside the kernels' limits is refused when the forward pass sizes the backend */
        err_clear(&err);
        be = backend_create(&(BackendOptions){.name = name}, &err);
        REQUIRE_MSG(be, "%s", err.msg);
        const BackendSizes wide = {.max_rows = 8, .max_cols = 4096, .max_ctx = 64, .head_dim = 1024, .gqa_group = 1, .d_k = 128, .d_v = 128};
        CHECK(be->vt->reserve(be, &wide, &err) != 0);
        CHECK_MSG(strstr(err.msg, "head dim 1024"), "got: %s", err.msg);
        err_clear(&err);
        const BackendSizes big_state = {.max_rows = 8, .max_cols = 4096, .max_ctx = 64, .head_dim = 128, .gqa_group = 1, .d_k = 1024, .d_v = 1024};
        CHECK(be->vt->reserve(be, &big_state, &err) != 0);
        CHECK_MSG(strstr(err.msg, "delta-net heads of 1024"), "got: %s", err.msg);
        backend_destroy(be);
    }
}

/* ---- the CLI: devices, --device, -ngl ------------------------------------------------------------------------------ */

/* stdout of `deltallm ARGS` (NULL, with a failed check, when it does not exit 0) */
static char *cli_out(const char *args) {
    char *out = NULL, *err = NULL;
    const int rc = cli_run(args, NULL, &out, &err);
    if (rc != 0) {
        test_check(false, __FILE__, __LINE__, "cli", "deltallm %s: exit %d: %s", args, rc, err ? err : "");
        free(out);
        out = NULL;
    }
    free(err);
    return out;
}

/* the last line of stderr holds the error, stdout is empty, the exit status is rc */
static void cli_refuses(const char *args, int rc_want, const char *says) {
    char *out = NULL, *err = NULL;
    const int rc = cli_run(args, NULL, &out, &err);
    CHECK_MSG(rc == rc_want && (!out || !*out) && err && strstr(err, says), "deltallm %s: exit %d (want %d), stderr '%s' (want '%s')",
              args, rc, rc_want, err ? err : "", says);
    free(out), free(err);
}

TEST(device, cli_devices_device_and_ngl) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set");
    char args[1024];
    const char *model = test_data("models/m4-qwen35moe-q8_0.gguf");
    const char *dv[TEST_MAX_DEVICES], *missing;
    const int nd = test_devices(dv, &missing);
    if (missing) { /* the binary says so in one line */
        snprintf(args, sizeof args, "run -m '%s' -p hello -n 2 --device %s", model, missing);
        cli_refuses(args, 1, missing);
    }
    for (int di = 0; di < nd; di++) {
        const char *name = dv[di];
        const bool indexed = row_of(name) && row_of(name)->indexed;
        char *dev = cli_out("devices"), want[64];
        snprintf(want, sizeof want, indexed ? "%s:0 " : "%s ", name);
        CHECK_MSG(dev && strstr(dev, "cpu ") && strstr(dev, want) && strstr(dev, "GiB"), "devices: %s", dev ? dev : "");
        free(dev);
        /* the same greedy text on the CPU (exact), on the device, and split by -ngl (2, and 99: all of them; the first
         * device without --device) */
        char where[4][96] = {""};
        snprintf(where[1], sizeof where[1], indexed ? "--device %s:0" : "--device %s", name);
        snprintf(where[2], sizeof where[2], di == 0 ? "-ngl 2" : "--device %s -ngl 2", name);
        snprintf(where[3], sizeof where[3], "--device %s -ngl 99", name);
        char *text[4] = {0};
        for (int i = 0; i < 4; i++) {
            snprintf(args, sizeof args, "run -m '%s' -p 'hello world' -n 12 -t 1 --temp 0 --exact %s", model, where[i]);
            text[i] = cli_out(args);
            CHECK_MSG(text[i] && text[0] && !strcmp(text[i], text[0]), "'%s' wrote '%s', the CPU '%s'", where[i], text[i] ? text[i] : "",
                      text[0] ? text[0] : "");
        }
        for (int i = 0; i < 4; i++) free(text[i]);
        snprintf(args, sizeof args, "bench -m '%s' -p 8 -n 4 -r 1 --no-prefetch --device %s", model, name);
        char *bench = cli_out(args);
        CHECK_MSG(bench && strstr(bench, name) && strstr(bench, "tg4"), "bench: %s", bench ? bench : "");
        free(bench);
        if (indexed) {
            snprintf(args, sizeof args, "run -m '%s' -p hello --device %s:99", model, name);
            cli_refuses(args, 1, "device 99");
        }
        }
        /* bad values: one line each */
        snprintf(args, sizeof args, "run -m '%s' -p hello --device tpu", model);
        cli_refuses(args, 1, "unknown backend 'tpu'");
        snprintf(args, sizeof args, "run -m '%s' -p hello -ngl -1", model);
        cli_refuses(args, 2, "-ngl expects an integer");
        cli_refuses("devices --bogus", 2, "unknown option");
    }

    /* ---- the server suite with `serve --device NAME` ---------------------------------------------------------------- */

    /* test_server.c (weak: a test build without the server, bench/vulkan_h200.sh's, skips this one) */
    void server_node_suite(const char *env) __attribute__((weak));

    #if defined(__has_feature)
    #if __has_feature(address_sanitizer)
    #define UNDER_ASAN 1
    #endif
    #endif
    #if defined(__SANITIZE_ADDRESS__)
    #define UNDER_ASAN 1
    #endif

    /* Not in the sanitizer build: an instrumented server on lavapipe answers slower than the client's timeouts
     * (make test runs the server suite on the device). */
    #ifndef UNDER_ASAN
    TEST(device, server_suite_on_the_device) {
        const char *dv[TEST_MAX_DEVICES];
        const int nd = test_devices(dv, NULL);
        if (nd && !server_node_suite) return test_skip("this test build has no server");
        /* the load script with 40 requests at concurrency 8, not 200: on lavapipe the 200 took 1002 s on the shared
         * machine; what the device adds (batched decode of 4 slots, state checkpoints) 40 exercise as well */
        for (int di = 0; di < nd; di++) {
            char env[160];
            snprintf(env, sizeof env, "DELTALLM_DEVICE=%s DELTALLM_LOAD_ARGS='40 8'", dv[di]);
            server_node_suite(env);
    }
}
#endif
