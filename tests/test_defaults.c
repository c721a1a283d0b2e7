/* test_defaults.c — the defaults a new user gets without a flag (group `defaults`, issue 29): the compute
 * threads chosen from the model's size (dl_default_threads; the crossover is measured in
 * docs/ARCHITECTURE.md), and one set of sampling defaults for the library, the CLI, the server (its config
 * and every request that does not set them) and the page (which reads them from /props). */
#include "test.h"
#include "test_http.h"

#include "deltallm.h"
#include "chat/chat.h"
#include "cli_proc.h"
#include "server/server.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
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
    CHECK(dl_default_threads(772 * MiB, 16) == 6);
    CHECK(dl_default_threads(190 * MiB, 2) == 1);     /* measured: 1 thread 2.2x faster here (docs/ARCHITECTURE.md) */
    CHECK(dl_default_threads(432 * MiB, 2) == 2);     /* measured: 2 threads 1.4x faster */
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

/* The embedded model's template (tools/train/tinychat.jinja: Qwen3.5's, thinking only on request): no flag
 * needed for a plain answer; enable_thinking true still opens the block. Qwen's own template is unchanged. */
TEST(defaults, thinking_off_unless_asked_for_the_embedded_template) {
    size_t n;
    char *text = test_read_file("tools/train/tinychat.jinja", &n);
    REQUIRE(text);
    ChatTemplate t = {0};
    Err err = {{0}};
    REQUIRE(chat_template_init(&t, text, &err) == 0);
    CHECK(t.format == CHAT_FORMAT_QWEN35 && t.thinking_opt_in);
    cJSON *msgs = cJSON_Parse("[{\"role\": \"user\", \"content\": \"Hi\"}]");
    char *out = NULL;
    size_t len = 0;
    const char *off = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
    const char *on = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n";
    const int modes[3] = {CHAT_THINKING_DEFAULT, 0, 1};
    const char *want[3] = {off, off, on};
    for (int i = 0; i < 3; i++) {
        ChatRenderOptions o = {.add_generation_prompt = true, .enable_thinking = modes[i]};
        REQUIRE(chat_render(&t, msgs, NULL, &o, &out, &len, &err) == 0);
        CHECK_MSG(!strcmp(out, want[i]), "enable_thinking %d: %s", modes[i], out);
        free(out);
    }
    free(text);
    text = test_read_file(test_data("chat/Qwen3.5-4B.jinja"), &n);
    REQUIRE(text);
    REQUIRE(chat_template_init(&t, text, &err) == 0);
    ChatRenderOptions o = {.add_generation_prompt = true, .enable_thinking = CHAT_THINKING_DEFAULT};
    REQUIRE(chat_render(&t, msgs, NULL, &o, &out, &len, &err) == 0);
    CHECK(!t.thinking_opt_in && !strcmp(out, on));
    free(out);
    free(text);
    cJSON_Delete(msgs);
}

/* The CLI's rough edges (issue 29): serve binds before it loads (a port in use fails at once, naming errno's
 * cause, even with a model that would not load), chat-format takes the other commands' option names, -c
 * beyond the trained context warns, and a refused --chat names the flags that fix it. */
TEST(defaults, cli_rough_edges) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 1) == 0 &&
            getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    ServerConfig c;
    test_server_config(&c);
    c.port = ntohs(a.sin_port);
    c.model_path = "/nonexistent/model.gguf";
    Err err = {{0}};
    Server *s = server_start(&c, &err);
    CHECK_MSG(!s && strstr(err.msg, "Address already in use") && !strstr(err.msg, "nonexistent"), "%s", err.msg);
    server_stop(s);
    close(fd);
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: the CLI checks");
    char *out = NULL, *errs = NULL;
    const char *conv = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_generation_prompt\": true}";
    char args[1024];
    snprintf(args, sizeof args, "chat-format --chat-format chatml");
    CHECK(cli_run(args, conv, &out, &errs) == 0 && out && strstr(out, "<|im_start|>assistant\n"));
    free(out), free(errs);
    snprintf(args, sizeof args, "chat-format --chat-template-file '%s'", test_data("chat/Qwen3.5-4B.jinja"));
    CHECK(cli_run(args, conv, &out, &errs) == 0 && out && strstr(out, "<think>\n"));
    free(out), free(errs);
    CHECK(cli_run("run -m assets/tinybible-f16.gguf -p hi -n 1 -c 8192", NULL, &out, &errs) == 0 && errs &&
          strstr(errs, "larger than the model was trained for (4096 tokens)"));
    free(out), free(errs);
    CHECK(cli_run("run -m assets/tinybible-f16.gguf -p hi -n 1 --chat", NULL, &out, &errs) != 0 && errs &&
          strstr(errs, "--chat-template-file") && strstr(errs, "--chat-format"));
    free(out), free(errs);
}
