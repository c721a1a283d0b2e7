/* test_defaults.c — the defaults a new user gets without a flag (group `defaults`, issue 29): the compute
 * threads chosen from the model's size (dl_default_threads; the crossover is measured in
 * docs/ARCHITECTURE.md), and one set of sampling defaults for the library, the CLI, the server (its config
 * and every request that does not set them) and the page (which reads them from /props). */
#include "test.h"
#include "test_http.h"

#include "deltallm.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

TEST(defaults, threads_follow_the_model_size) {
    const uint64_t MiB = 1 << 20, T = DL_THREAD_DECODE_BYTES;
    CHECK(dl_default_threads(12 * MiB, 2) == 1);      /* the embedded model */
    CHECK(dl_default_threads(12 * MiB, 64) == 1);
    CHECK(dl_default_threads(T - 1, 8) == 1);
    CHECK(dl_default_threads(T, 8) == 1);
    CHECK(dl_default_threads(2 * T, 8) == 2);
    CHECK(dl_default_threads(772 * MiB, 2) == 2);     /* the b1 shape (Qwen3.5-0.8B, Q8_0) */
    CHECK(dl_default_threads(772 * MiB, 16) == 12);
    CHECK(dl_default_threads(9000 * MiB, 16) == 16);
    CHECK(dl_default_threads(9000 * MiB, 0) == 1);   /* no CPU count: one thread */
    CHECK(dl_default_threads(0, 4) == 1);
    CHECK(dl_cpu_count() >= 1);
}

TEST(defaults, engine_takes_the_default_threads) {
    const char *paths[] = {"assets/tinybible-f16.gguf", test_data("models/m1-qwen3next-legacy-f32.gguf")};
    for (int i = 0; i < 2; i++) {
        DlEngineParams p;
        dl_engine_params_init(&p);
        p.model_path = paths[i];
        p.n_ctx = 64;
        DlError e = {{0}};
        DlEngine *en = dl_engine_open(&p, &e);
        REQUIRE_MSG(en, "%s: %s", paths[i], e.msg);
        const DlModelInfo *in = dl_engine_info(en);
        const int want = dl_default_threads(in->decode_bytes, dl_cpu_count());
        CHECK_MSG(in->n_threads == want && want == 1, "%s: %d threads, the default for %llu bytes per token is %d",
                  paths[i], in->n_threads, (unsigned long long)in->decode_bytes, want);
        dl_engine_close(en);
        /* an explicit count still wins */
        p.n_threads = 2;
        en = dl_engine_open(&p, &e);
        REQUIRE(en);
        CHECK(dl_engine_info(en)->n_threads == 2);
        dl_engine_close(en);
    }
}

static double num(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(o, a), b);
    return cJSON_IsNumber(v) ? v->valuedouble : -1e9;
}

TEST(defaults, server_sampling_is_the_cli_s_and_props_shows_it) {
    DlSamplingParams lib;
    dl_sampling_params_init(&lib);
    CHECK(lib.temperature == 0.8f && lib.top_k == 40 && lib.top_p == 0.95f && lib.min_p == 0.05f);
    ServerConfig c;
    server_config_init(&c);
    CHECK(c.temperature == lib.temperature && c.top_k == lib.top_k && c.top_p == lib.top_p && c.min_p == lib.min_p);
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    HttpResp r = http(server_port(s), "GET", "/props", NULL, NULL);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *dg = cJSON_GetObjectItem(j, "default_generation_settings");
    CHECK_MSG(r.status == 200 && (float)num(dg, "params", "temperature") == lib.temperature &&
                  (int)num(dg, "params", "top_k") == lib.top_k && (float)num(dg, "params", "top_p") == lib.top_p &&
                  (float)num(dg, "params", "min_p") == lib.min_p,
              "/props: %.400s", r.body ? r.body : "");
    cJSON_Delete(j);
    http_free(&r);
    server_stop(s);
    /* a request that sets nothing gets them */
    ApiDefaults d = test_api_defaults();
    ApiRequest req;
    ApiError e;
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}";
    REQUIRE(api_parse(true, body, strlen(body), &d, &req, &e) == 0);
    CHECK(req.sp.temperature == lib.temperature && req.sp.top_k == lib.top_k && req.sp.top_p == lib.top_p &&
          req.sp.min_p == lib.min_p);
    api_request_free(&req);
}
