/* test_expert_cache.c — the expert cache (model/expert_cache.h) and the memory budget (engine_cache.c): on the
 * MoE test models, with a budget so small that the cache holds only a few experts (every layer evicts, the
 * forward pass runs a prompt's experts in groups, predictions are made and often wrong), the logits are the
 * same bits as with the file mapped, prompt and token by token, for both eviction policies, through
 * O_DIRECT and buffered reads; the engine opens a cache only when the weights do not fit, refuses budgets
 * too small with one line, and a budget that holds everything changes nothing; the CLI's --mem-budget. */
#include "cli_proc.h"
#include "test.h"
#include "test_forward.h"

#include "cli/tokens_file.h"
#include "deltallm.h"
#include "model/expert_cache.h"

#include <stdlib.h>
#include <string.h>

static const char *const moe_models[] = {"m2-qwen3next-new-mixed", "m4-qwen35moe-q8_0", "m6-qwen35moe-iq2xxs",
                                         "m8-qwen3next-wide-mixed"};
#define N_MOE (int)(sizeof moe_models / sizeof moe_models[0])

/* Logits of ids with the experts from a cache of n_slots slots: a prompt of T tokens in one batch (step 0) or
 * one token at a time (step 1). */
static float *eval_cached(Model *m, const int32_t *ids, int T, int step, int n_slots, CachePolicy policy, bool buffered,
                          ExpertCacheStats *st) {
    Err err = {{0}};
    const ExpertCacheOptions o = {.slot_budget = expert_cache_slot_bytes(m) * (uint64_t)n_slots,
                                  .policy = policy,
                                  .predict = true,
                                  .io_threads = 3,
                                  .buffered = buffered};
    ExpertCache *c = expert_cache_new(m, &o, &err);
    CHECK_MSG(c, "%s", err.msg);
    if (!c) return NULL;
    Forward *f = tf_forward(m, T, T, MATMUL_GGML, DELTANET_AUTO, 1, true, &err);
    SeqState *s = f ? tf_state(m, f, T, &err) : NULL;
    const int V = m->cfg.n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)T * V);
    CHECK_MSG(s && lg, "%s", err.msg);
    const ExpertProvider p = expert_cache_provider(c);
    if (f) forward_set_expert_provider(f, &p);
    int rc = s && lg ? 0 : -1;
    if (rc == 0 && step == 0) rc = forward_run(f, s, ids, T, lg, T, &err);
    for (int t = 0; rc == 0 && step == 1 && t < T; t++) rc = forward_run(f, s, ids + t, 1, lg + (size_t)t * V, 1, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    expert_cache_stats(c, st);
    seqstate_free(s);
    forward_free(f);
    expert_cache_free(c);
    if (rc) free(lg);
    return rc ? NULL : lg;
}

TEST(expert_cache, logits_identical_with_a_tiny_cache) {
    for (int mi = 0; mi < N_MOE; mi++) {
        Model *m = tf_model(moe_models[mi]);
        if (!m) continue;
        int T;
        int32_t *ids = tf_seq(moe_models[mi], 65, &T);
        if (T > 17) T = 17;
        const int V = m->cfg.n_vocab, kE = m->cfg.n_expert_used;
        for (int step = 0; step < 2; step++) {
            float *plain = tf_eval(m, ids, T, step, MATMUL_GGML, DELTANET_AUTO, 1, true);
            for (int v = 0; v < 2 && plain; v++) { /* LRU through O_DIRECT, LFU through buffered reads */
                const CachePolicy pol = v == 1 ? CACHE_LFU : CACHE_LRU;
                const bool buffered = v == 1;
                ExpertCacheStats st;
                float *lg = eval_cached(m, ids, T, step, 2 * kE + 1, pol, buffered, &st);
                if (!lg) continue;
                CHECK_MSG(memcmp(lg, plain, sizeof(float) * (size_t)T * V) == 0, "%s %s (%s%s): logits differ",
                          moe_models[mi], step ? "token by token" : "prompt", pol == CACHE_LFU ? "lfu" : "lru",
                          buffered ? ", buffered" : "");
                /* the cache did the work: everything was read, evicted, predicted */
                /* (whether a lookup finds its expert ready, on its way or missing depends on the timing of the
                 * reads against the compute — a sanitizer build computes slower — but more distinct experts than
                 * slots must have been read, so slots were reused) */
                CHECK(st.lookups == st.hits + st.inflight + st.misses && st.lookups > 0);
                CHECK_MSG(st.reads > (uint64_t)(2 * kE + 1), "%llu reads into %d slots", (unsigned long long)st.reads, 2 * kE + 1);
                CHECK(st.reads > 0 && st.bytes_read >= st.reads * (uint64_t)m->layers[0].gate_exps->bytes * 3);
                CHECK_MSG(st.predicted > 0 && st.used_after_predict > 0 && st.predicted_used <= st.predicted,
                          "%s: %llu predicted", moe_models[mi], (unsigned long long)st.predicted);
                if (buffered) CHECK(!st.direct);
                if (mi == 0 && v == 0)
                    test_note("%s %s, %d slots: %llu lookups, %.0f%% hits, %llu reads (%.1f KiB), precision %.0f%%, "
                              "recall %.0f%%, %s",
                              moe_models[mi], step ? "decode" : "prompt", st.n_slots, (unsigned long long)st.lookups,
                              100.0 * (double)st.hits / (double)st.lookups, (unsigned long long)st.reads,
                              (double)st.bytes_read / 1024, 100.0 * (double)st.predicted_used / (double)st.predicted,
                              100.0 * (double)st.predicted_used / (double)st.used_after_predict,
                              st.direct ? "O_DIRECT" : "buffered");
                free(lg);
            }
            free(plain);
        }
        free(ids);
        model_free(m);
    }
}

TEST(expert_cache, a_cache_of_every_expert_reads_each_once) {
    Model *m = tf_model("m6-qwen35moe-iq2xxs");
    REQUIRE(m);
    int T;
    int32_t *ids = tf_seq("m6-qwen35moe-iq2xxs", 65, &T);
    const int keys = m->cfg.n_layer * m->cfg.n_expert;
    ExpertCacheStats st;
    T = 17;
    float *plain = tf_eval(m, ids, T, 1, MATMUL_GGML, DELTANET_AUTO, 1, true);
    float *lg = eval_cached(m, ids, T, 1, keys + 5, CACHE_LRU, true, &st);
    REQUIRE(plain && lg);
    CHECK(memcmp(lg, plain, sizeof(float) * (size_t)T * m->cfg.n_vocab) == 0);
    CHECK_MSG(st.n_slots == keys && st.evictions == 0 && st.reads <= (uint64_t)keys,
              "%d slots, %llu evictions, %llu reads", st.n_slots, (unsigned long long)st.evictions,
              (unsigned long long)st.reads);
    free(plain), free(lg), free(ids);
    model_free(m);
}

TEST(expert_cache, refusals) {
    Model *m = tf_model("m6-qwen35moe-iq2xxs");
    REQUIRE(m);
    Err err = {{0}};
    const ExpertCacheOptions o = {.slot_budget = expert_cache_slot_bytes(m) * 3};
    CHECK(!expert_cache_new(m, &o, &err) && strstr(err.msg, "needs at least") && !strchr(err.msg, '\n'));
    for (int i = 0; i < m->n_weights; i++) CHECK(!m->weights[i].streamed);
    model_free(m);
    Model *d = tf_model("m3-qwen35-dense-bf16");
    REQUIRE(d);
    err_clear(&err);
    CHECK(!expert_cache_new(d, &o, &err) && strstr(err.msg, "needs an MoE model"));
    model_free(d);
    CachePolicy p;
    CHECK(cache_policy_parse("lfu", &p, &err) == 0 && p == CACHE_LFU);
    CHECK(cache_policy_parse(NULL, &p, &err) == 0 && p == CACHE_LFU);
    CHECK(cache_policy_parse("lru", &p, &err) == 0 && p == CACHE_LRU);
    CHECK(cache_policy_parse("mru", &p, &err) == -1);
}

/* ---- the engine's memory budget ---------------------------------------------------------------------------- */

static DlEngine *open_budget(const char *name, uint64_t budget, const char *policy, DlError *err) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = test_data(rel);
    p.n_ctx = 64;
    p.n_threads = 1;
    p.mem_budget = budget;
    p.cache_policy = policy;
    p.isa = getenv("DELTALLM_ISA");
    return dl_engine_open(&p, err);
}

static float *engine_logits(DlEngine *e, const int32_t *ids, int T) {
    DlError err = {{0}};
    DlSession *s = dl_session_new(e, &err);
    const int V = dl_engine_info(e)->n_vocab;
    float *out = malloc(sizeof(float) * (size_t)T * V);
    int rc = s && out ? 0 : -1;
    rc = rc ? rc : dl_session_eval(s, ids, (size_t)T / 2, &err);
    if (rc == 0) memcpy(out, dl_session_logits(s), sizeof(float) * V);
    for (int t = T / 2; rc == 0 && t < T; t++) {
        rc = dl_session_eval(s, ids + t, 1, &err);
        if (rc == 0) memcpy(out + (size_t)(t - T / 2 + 1) * V, dl_session_logits(s), sizeof(float) * V);
    }
    CHECK_MSG(rc == 0, "%s", err.msg);
    dl_session_free(s);
    if (rc) free(out);
    return rc ? NULL : out;
}

TEST(expert_cache, engine_budget) {
    const char *name = "m4-qwen35moe-q8_0";
    int T;
    int32_t *ids = tf_seq(name, 65, &T);
    T = 16;
    DlError err = {{0}};
    DlEngine *plain = open_budget(name, 0, NULL, &err);
    REQUIRE_MSG(plain, "%s", err.msg);
    DlCacheStats cs;
    CHECK_MSG(dl_engine_cache_stats(plain, &cs, false) == -1, "a model that fits got an expert cache");
    const uint64_t file = dl_engine_info(plain)->weight_bytes;
    float *want = engine_logits(plain, ids, T);
    const int V = dl_engine_info(plain)->n_vocab;
    /* a budget that holds the whole model: no cache, same bits */
    DlEngine *whole = open_budget(name, file, NULL, &err);
    REQUIRE_MSG(whole, "%s", err.msg);
    CHECK(dl_engine_cache_stats(whole, &cs, false) == -1);
    dl_engine_close(whole);
    /* one that does not: the other weights plus a few experts */
    Model *m = tf_model(name);
    REQUIRE(m);
    const uint64_t resident = file - model_expert_bytes(m), slot = expert_cache_slot_bytes(m);
    const int kE = m->cfg.n_expert_used;
    model_free(m);
    for (int pi = 0; pi < 2; pi++) {
        DlEngine *e = open_budget(name, resident + slot * (uint64_t)(3 * kE), pi ? "lfu" : "lru", &err);
        REQUIRE_MSG(e, "%s", err.msg);
        REQUIRE(dl_engine_cache_stats(e, &cs, true) == 0);
        CHECK(cs.n_slots == 3 * kE && cs.resident_bytes == resident && cs.expert_bytes == file - resident);
        float *got = engine_logits(e, ids, T);
        CHECK_MSG(got && want && memcmp(got, want, sizeof(float) * (size_t)(T - T / 2 + 1) * V) == 0,
                  "logits differ with the expert cache (%s)", pi ? "lfu" : "lru");
        CHECK(dl_engine_cache_stats(e, &cs, false) == 0 && cs.tokens == (uint64_t)T && cs.bytes_read > 0 &&
              cs.misses > 0);
        char report[4096];
        dl_engine_profile(e, true);
        free(engine_logits(e, ids, 4));
        CHECK(dl_engine_profile_report(e, report, sizeof report) > 0 && strstr(report, "read from disk per token") &&
              strstr(report, "hit rate") && strstr(report, "stalled on reads"));
        free(got);
        dl_engine_close(e);
    }
    /* too small: one line with the sizes */
    CHECK(!open_budget(name, resident + slot, NULL, &err) && strstr(err.msg, "too small") &&
          strstr(err.msg, "other than the experts") && !strchr(err.msg, '\n'));
    CHECK(!open_budget(name, resident + slot * (uint64_t)(3 * kE), "fifo", &err) && strstr(err.msg, "lru or lfu"));
    CHECK(!open_budget("m3-qwen35-dense-bf16", 4096, NULL, &err) && strstr(err.msg, "no experts to stream"));
    { /* on a device the experts are not streamed: a budget it would need is refused in one line, before the
       * device is opened (so this runs without one) */
        DlEngineParams p;
        dl_engine_params_init(&p);
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s.gguf", name);
        p.model_path = test_data(rel);
        p.n_ctx = 64;
        p.n_threads = 1;
        p.mem_budget = resident + slot * (uint64_t)(3 * kE);
        p.backend = "vulkan";
        CHECK(!dl_engine_open(&p, &err) && strstr(err.msg, "on the CPU only, not on vulkan") && !strchr(err.msg, '\n'));
        const DlStage st[2] = {{"vulkan", 1}, {"cpu", 0}};
        p.backend = NULL, p.stages = st, p.n_stages = 2;
        CHECK(!dl_engine_open(&p, &err) && strstr(err.msg, "not on vulkan"));
    }
    free(want), free(ids);
    dl_engine_close(plain);
}

TEST(expert_cache, cli_mem_budget) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    char args[1024], *out = NULL, *err = NULL;
    const char *model = test_data("models/m6-qwen35moe-iq2xxs.gguf");
    snprintf(args, sizeof args, "run -m '%s' -p hello -n 2 -t 1 --mem-budget 12K", model);
    CHECK_MSG(cli_run(args, NULL, &out, &err) == 1 && err && strstr(err, "too small"), "stderr: %s", err ? err : "");
    free(out), free(err);
    out = err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p hello -n 2 --mem-budget 12Q", model);
    CHECK_MSG(cli_run(args, NULL, &out, &err) == 2 && err && strstr(err, "--mem-budget expects a size"), "stderr: %s",
              err ? err : "");
    free(out), free(err);
    out = err = NULL;
    /* the default budget on a model this small: no cache, and a profile without cache lines */
    snprintf(args, sizeof args, "bench -m '%s' -p 8 -n 4 -r 1 -t 1 --profile --mem-budget 1G", model);
    CHECK(cli_run(args, NULL, &out, &err) == 0 && err && !strstr(err, "expert cache"));
    free(out), free(err);
    out = err = NULL;
    snprintf(args, sizeof args, "bench -m '%s' -p 8 -n 4 -r 1 -t 1 --profile --mem-budget 900K --json", model);
    CHECK_MSG(cli_run(args, NULL, &out, &err) == 0 && err && strstr(err, "expert cache:") && out &&
                  strstr(out, "\"disk_bytes_per_token\""),
              "stdout %s stderr %s", out ? out : "", err ? err : "");
    free(out), free(err);
    out = err = NULL;
}
