/* test_server.c — the OpenAI-compatible server (group `server`).
 *   units: stop strings, request validation, error objects, the prefix cache (lookup, LRU, disk: reuse
 *          after a restart, corrupt / stale / truncated files ignored), constraints (forced tool calls,
 *          JSON), SSE chunks;
 *   scheduler: a warm run (prefix restored from a checkpoint) produces exactly the tokens of a cold run,
 *          cancellation frees the slot, a full queue refuses, drafting slots return plain decoding's tokens;
 *   HTTP in-process: routes, auth, limits, streaming, malformed requests, a client that disconnects;
 *   the Node suite (tests/server/run.sh: the official openai client, load, malformed, disconnect,
 *          prefix reuse), skipped with a note when node or tests/server/node_modules is missing. */
#include "test.h"
#include "test_http.h"
#include "test_mtp.h"

#include "chat/chat.h"
#include "deltallm.h"
#include "server/constrain.h"
#include "server/openai.h"
#include "server/prefix_cache.h"
#include "server/respond.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "server/stop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define MODEL "models/m1-qwen3next-legacy-f32.gguf"

/* ------------------------------------------------------------------------------------------ stop */

static void feed_all(StopFilter *f, const char *const *pieces, SBuf *out, bool *stopped, int *chunks_with_partial) {
    *stopped = false;
    for (int i = 0; pieces[i] && !*stopped; i++) {
        size_t before = out->n;
        *stopped = stop_feed(f, pieces[i], strlen(pieces[i]), out);
        /* a released chunk never ends with a proper prefix of a stop string that later completes */
        if (out->n > before && chunks_with_partial) {
            const char *c = out->p + before;
            size_t n = out->n - before;
            if (n >= 3 && !memcmp(c + n - 3, "STO", 3)) (*chunks_with_partial)++;
        }
    }
    if (!*stopped) stop_flush(f, out);
}

TEST(server, stop_strings) {
    StopFilter f;
    SBuf out = {0};
    bool stopped;
    int partial = 0;
    const char *stops[] = {"STOP", "\n\n"};
    REQUIRE(stop_init(&f, stops, 2) == 0);
    const char *p1[] = {"hello ", "wor", "ld ST", "O", "P and more", NULL};
    feed_all(&f, p1, &out, &stopped, &partial);
    CHECK(stopped);
    CHECK_MSG(out.p && !strcmp(out.p, "hello world "), "got '%s'", out.p ? out.p : "");
    CHECK(partial == 0);
    stop_free(&f);
    /* a false start is released once decided */
    out.n = 0;
    REQUIRE(stop_init(&f, stops, 2) == 0);
    const char *p2[] = {"ab ST", "OX cd\n", "x", NULL};
    feed_all(&f, p2, &out, &stopped, NULL);
    CHECK(!stopped);
    CHECK_MSG(!strcmp(out.p, "ab STOX cd\nx"), "got '%s'", out.p);
    stop_free(&f);
    /* the earliest of several stop strings wins, also inside one piece */
    out.n = 0;
    REQUIRE(stop_init(&f, stops, 2) == 0);
    const char *p3[] = {"one\n\ntwo STOP", NULL};
    feed_all(&f, p3, &out, &stopped, NULL);
    CHECK(stopped && !strcmp(out.p, "one"));
    stop_free(&f);
    /* held text at the end of the stream is released by flush; no stop strings: pass-through */
    out.n = 0;
    REQUIRE(stop_init(&f, stops, 2) == 0);
    const char *p4[] = {"end S", "T", NULL};
    feed_all(&f, p4, &out, &stopped, NULL);
    CHECK(!stopped && !strcmp(out.p, "end ST"));
    stop_free(&f);
    out.n = 0;
    REQUIRE(stop_init(&f, NULL, 0) == 0);
    CHECK(!stop_feed(&f, "abc", 3, &out) && out.n == 3);
    stop_free(&f);
    sbuf_free(&out);
}

/* ------------------------------------------------------------------------------------------ validation */

typedef struct BadCase {
    bool chat;
    const char *body;
    const char *param; /* expected param ("" = none expected / not checked) */
} BadCase;

static const BadCase bad_cases[] = {
    {true, "", ""},
    {true, "{", ""},
    {true, "[1,2]", ""},
    {true, "{\"messages\": []}", "messages"},
    {true, "{}", "messages"},
    {true, "{\"messages\": \"hi\"}", "messages"},
    {true, "{\"messages\": [1]}", "messages[0]"},
    {true, "{\"messages\": [{\"content\": \"x\"}]}", "messages[0]"},
    {true, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", "messages[0]"},
    {true, "{\"messages\": [{\"role\": \"user\"}]}", "messages[0].content"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", "messages[0].content"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]}",
     "messages[0].content[0]"},
    {true, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", "messages[0]"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"frobnicate\": true}", "frobnicate"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": \"hot\"}", "temperature"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": 3}", "temperature"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 0}", "max_tokens"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_tokens\": 1.5}", "max_tokens"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"n\": 17}", "n"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stop\": 7}", "stop"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": \"yes\"}", "stream"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream_options\": {\"x\": 1}}",
     "stream_options.x"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": {}}", "tools"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\"}]}",
     "tools[0]"},
    {true,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\", \"function\": "
     "{\"name\": \"a b\"}}]}",
     "tools[0]"},
    {true,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [{\"type\": \"function\", \"function\": "
     "{\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}",
     "tool_choice"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tool_choice\": \"required\"}", "tool_choice"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logit_bias\": {\"99999\": 1}}", "logit_bias"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"xml\"}}",
     "response_format"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": {\"enable_thinking\": 1}}",
     "chat_template_kwargs.enable_thinking"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"functions\": []}", "functions"},
    {true, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]} trailing", ""},
    {false, "{\"prompt\": \"\"}", "prompt"},
    {false, "{\"max_tokens\": 5}", "prompt"},
    {false, "{\"prompt\": [1, 2, 100000]}", "prompt"},
    {false, "{\"prompt\": \"x\", \"echo\": true}", "echo"},
    {false, "{\"prompt\": \"x\", \"messages\": []}", "messages"},
    {false, "{\"prompt\": \"x\", \"best_of\": 3}", "best_of"},
    {false, "{\"prompt\": \"x\", \"suffix\": \"y\"}", "suffix"},
};

TEST(server, request_validation) {
    ApiDefaults d = test_api_defaults();
    for (size_t i = 0; i < sizeof bad_cases / sizeof *bad_cases; i++) {
        const BadCase *c = &bad_cases[i];
        ApiRequest r;
        ApiError e;
        memset(&e, 0, sizeof e);
        int rc = api_parse(c->chat, c->body, strlen(c->body), &d, &r, &e);
        CHECK_MSG(rc == -1 && e.status == 400, "case %zu (%s): rc %d status %d", i, c->body, rc, e.status);
        if (c->param[0]) CHECK_MSG(!strcmp(e.param, c->param), "case %zu: param '%s', expected '%s' (%s)", i, e.param,
                                   c->param, e.message);
        CHECK_MSG(e.message[0], "case %zu: no message", i);
        char *json = api_error_json(&e);
        cJSON *j = json ? cJSON_Parse(json) : NULL;
        const cJSON *err = cJSON_GetObjectItem(j, "error");
        CHECK_MSG(cJSON_IsString(cJSON_GetObjectItem(err, "message")) && cJSON_IsString(cJSON_GetObjectItem(err, "type")),
                  "case %zu: error object %s", i, json ? json : "(null)");
        cJSON_Delete(j);
        free(json);
    }
    /* good requests: values land where they belong */
    const char *good = "{\"model\": \"m\", \"messages\": [{\"role\": \"developer\", \"content\": \"be brief\"}, "
                       "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}], "
                       "\"max_completion_tokens\": 7, \"temperature\": 0, \"top_k\": 5, \"seed\": 42, \"stop\": [\"a\", "
                       "\"b\"], \"stream\": true, \"stream_options\": {\"include_usage\": true}, \"user\": \"u\", "
                       "\"logit_bias\": {\"5\": -100}, \"chat_template_kwargs\": {\"enable_thinking\": false}, "
                       "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                       "{\"type\": \"object\"}}}], \"tool_choice\": \"required\"}";
    ApiRequest r;
    ApiError e;
    REQUIRE_MSG(api_parse(true, good, strlen(good), &d, &r, &e) == 0, "%s", e.message);
    CHECK(r.max_tokens == 7 && r.max_tokens_given && r.sp.temperature == 0 && r.sp.top_k == 5 && r.sp.seed == 42);
    CHECK(r.n_stop == 2 && r.stream && r.include_usage && r.n_bias == 1 && r.bias[0].id == 5);
    CHECK(r.enable_thinking == 0 && r.tools && r.tool_choice == TOOL_CHOICE_REQUIRED);
    CHECK(!strcmp(cJSON_GetObjectItem(r.messages->child, "role")->valuestring, "system")); /* developer -> system */
    api_request_free(&r);
    const char *comp = "{\"prompt\": [[1, 2, 3]], \"max_tokens\": null}";
    REQUIRE_MSG(api_parse(false, comp, strlen(comp), &d, &r, &e) == 0, "%s", e.message);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == 3 && r.max_tokens == 16 && !r.max_tokens_given);
    api_request_free(&r);
}

/* ------------------------------------------------------------------------------------------ cache */

static void *blob_of(size_t size, int v) {
    unsigned char *p = malloc(size);
    for (size_t i = 0; i < size; i++) p[i] = (unsigned char)(v + i);
    return p;
}

TEST(server, prefix_cache_ram) {
    enum { K = 4 };
    int32_t a[16], b[16];
    for (int i = 0; i < 16; i++) a[i] = i, b[i] = i < 8 ? i : 100 + i; /* b shares 8 tokens with a */
    uint64_t ka[4], kb[4];
    pcache_prefix_keys(a, 16, K, ka);
    pcache_prefix_keys(b, 16, K, kb);
    CHECK(ka[0] == kb[0] && ka[1] == kb[1] && ka[2] != kb[2]);
    Err err = {{0}};
    PrefixCacheConfig cfg = {.ram_bytes = 10000, .fingerprint = {1, 2}};
    PrefixCache *pc = pcache_new(&cfg, &err);
    REQUIRE(pc);
    PcacheHit hit;
    CHECK(!pcache_lookup(pc, a, K, ka, 16, &hit));
    pcache_store(pc, a, 4, ka[0], blob_of(1000, 4), 1000);
    pcache_store(pc, a, 12, ka[2], blob_of(1000, 12), 1000);
    /* b: the longest checkpoint that is a prefix of b is at 4 (12 belongs to a) */
    REQUIRE(pcache_lookup(pc, b, K, kb, 16, &hit));
    CHECK(hit.pos == 4 && hit.size == 1000 && ((const unsigned char *)hit.data)[0] == 4);
    pcache_release(pc, &hit);
    REQUIRE(pcache_lookup(pc, a, K, ka, 16, &hit));
    CHECK(hit.pos == 12 && ((const unsigned char *)hit.data)[0] == 12);
    pcache_release(pc, &hit);
    /* max_pos limits the choice */
    REQUIRE(pcache_lookup(pc, a, K, ka, 11, &hit));
    CHECK(hit.pos == 4);
    pcache_release(pc, &hit);
    /* a key collision cannot return another prefix: same key, other tokens */
    int32_t c[16];
    memcpy(c, a, sizeof c);
    c[1] = 999;
    CHECK(!pcache_lookup(pc, c, K, ka, 16, &hit));
    /* LRU: the budget holds ~9 entries of 1000 bytes; the least recently used go first, a hit refreshes */
    for (int i = 0; i < 12; i++) {
        int32_t t[4] = {1000 + i, 1, 2, 3};
        uint64_t k;
        pcache_prefix_keys(t, 4, K, &k);
        pcache_store(pc, t, 4, k, blob_of(1000, i), 1000);
        if (i == 3) { /* refresh a's entries */
            CHECK(pcache_lookup(pc, a, K, ka, 16, &hit));
            pcache_release(pc, &hit);
        }
    }
    PcacheStats st;
    pcache_stats(pc, &st);
    CHECK_MSG(st.ram_bytes <= 10000 && st.evictions > 0, "ram %zu evictions %llu", st.ram_bytes,
              (unsigned long long)st.evictions);
    int32_t t0[4] = {1000, 1, 2, 3};
    uint64_t k0;
    pcache_prefix_keys(t0, 4, K, &k0);
    CHECK(!pcache_contains(pc, k0, 4));      /* the oldest went */
    CHECK(pcache_lookup(pc, a, K, ka, 16, &hit)); /* refreshed at i == 3: still there */
    pcache_release(pc, &hit);
    /* a snapshot larger than the budget is not kept */
    int32_t big[4] = {7, 7, 7, 7};
    uint64_t kbig;
    pcache_prefix_keys(big, 4, K, &kbig);
    pcache_store(pc, big, 4, kbig, blob_of(20000, 0), 20000);
    CHECK(!pcache_contains(pc, kbig, 4));
    pcache_free(pc);
}

static int count_files(const char *dir, const char *suffix) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '%s$'", dir, suffix);
    FILE *p = popen(cmd, "r");
    int n = 0;
    if (p) {
        if (fscanf(p, "%d", &n) != 1) n = 0;
        pclose(p);
    }
    return n;
}

static void first_file(const char *dir, char *out, size_t cap) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls '%s'/*.dlckpt | head -1", dir);
    FILE *p = popen(cmd, "r");
    out[0] = 0;
    if (p) {
        if (fgets(out, (int)cap, p)) out[strcspn(out, "\n")] = 0;
        pclose(p);
    }
}

TEST(server, prefix_cache_disk) {
    enum { K = 4 };
    char dir[512];
    snprintf(dir, sizeof dir, "%s/ckpt", test_tmpdir());
    int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t ka[2];
    pcache_prefix_keys(a, 8, K, ka);
    Err err = {{0}};
    PrefixCacheConfig cfg = {.ram_bytes = 1 << 20, .dir = dir, .disk_bytes = 1 << 20, .fingerprint = {11, 22}};
    PrefixCache *pc = pcache_new(&cfg, &err);
    REQUIRE_MSG(pc, "%s", err.msg);
    pcache_store(pc, a, 8, ka[1], blob_of(5000, 8), 5000);
    pcache_flush(pc);
    pcache_free(pc);
    CHECK(count_files(dir, ".dlckpt") == 1);
    /* a restart finds it on disk */
    pc = pcache_new(&cfg, &err);
    REQUIRE(pc);
    PcacheHit hit;
    REQUIRE(pcache_lookup(pc, a, K, ka, 8, &hit));
    CHECK(hit.from_disk && hit.pos == 8 && hit.size == 5000 && ((const unsigned char *)hit.data)[10] == 18);
    pcache_release(pc, &hit);
    pcache_free(pc);
    /* another model (fingerprint): stale, ignored */
    PrefixCacheConfig other = cfg;
    other.fingerprint[1] = 23;
    pc = pcache_new(&other, &err);
    REQUIRE(pc);
    CHECK(!pcache_lookup(pc, a, K, ka, 8, &hit));
    PcacheStats st;
    pcache_stats(pc, &st);
    CHECK(st.ignored_files == 1 && st.disk_entries == 0);
    pcache_free(pc);
    /* a flipped byte in the body: the checksum fails at load, the file is ignored with a warning */
    char path[1024];
    first_file(dir, path, sizeof path);
    REQUIRE(path[0]);
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    fseek(f, -100, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -100, SEEK_END);
    fputc(ch ^ 0x40, f);
    fclose(f);
    pc = pcache_new(&cfg, &err);
    REQUIRE(pc);
    CHECK(!pcache_lookup(pc, a, K, ka, 8, &hit));
    pcache_stats(pc, &st);
    CHECK(st.disk_errors == 1);
    pcache_free(pc);
    /* truncated / garbage files: corrupt headers, ignored at the scan */
    if (truncate(path, 50) != 0) test_note("truncate failed");
    char junk[1024];
    snprintf(junk, sizeof junk, "%s/garbage.dlckpt", dir);
    f = fopen(junk, "wb");
    REQUIRE(f);
    fputs("not a checkpoint at all", f);
    fclose(f);
    pc = pcache_new(&cfg, &err);
    REQUIRE(pc);
    pcache_stats(pc, &st);
    CHECK(st.ignored_files == 2 && st.disk_entries == 0);
    CHECK(!pcache_lookup(pc, a, K, ka, 8, &hit));
    /* the disk budget: old files are removed */
    pcache_free(pc);
    PrefixCacheConfig small = cfg;
    small.disk_bytes = 12000;
    pc = pcache_new(&small, &err);
    REQUIRE(pc);
    for (int i = 0; i < 5; i++) {
        int32_t t[4] = {50 + i, 1, 2, 3};
        uint64_t k;
        pcache_prefix_keys(t, 4, K, &k);
        pcache_store(pc, t, 4, k, blob_of(5000, i), 5000);
    }
    pcache_flush(pc);
    pcache_stats(pc, &st);
    CHECK_MSG(st.disk_bytes <= 12000 && st.disk_entries == 2, "disk %llu bytes, %zu files",
              (unsigned long long)st.disk_bytes, st.disk_entries);
    pcache_free(pc);
}

/* ------------------------------------------------------------------------------------------ constraints */

static bool accepts(Constraint *c, const char *text, bool *done) {
    bool ok = constraint_allows(c, text, strlen(text));
    if (ok) constraint_advance(c, text, strlen(text));
    *done = ok && constraint_done(c);
    return ok;
}

static cJSON *weather_tools(void) {
    return cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": "
                       "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": "
                       "\"integer\"}, \"unit\": {\"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}, "
                       "{\"type\": \"function\", \"function\": {\"name\": \"ping\"}}]");
}

TEST(server, constraint_tool_calls) {
    cJSON *tools = weather_tools();
    Err err = {{0}};
    bool done;
    /* XML: required city, optional days/unit in order */
    Constraint *c = constraint_tool_call(true, tools, NULL, &err);
    REQUIRE_MSG(c, "%s", err.msg);
    CHECK(accepts(c, "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York", &done) && !done);
    CHECK(!constraint_allows(c, "</tool_call>", 12)); /* cannot close the call inside a value */
    CHECK(accepts(c, "\n</parameter>\n<parameter=unit>\n", &done));
    CHECK(!constraint_allows(c, "x", 1)); /* enum */
    CHECK(accepts(c, "f\n</parameter>\n</function>\n</tool_call>", &done) && done);
    constraint_free(c);
    /* XML: days out of order after unit is refused; integer values */
    c = constraint_tool_call(true, tools, "get_weather", &err);
    REQUIRE(c);
    CHECK(accepts(c, "<tool_call>\n<function=get_weather>\n<parameter=city>\nX\n</parameter>\n<parameter=days>\n-12", &done));
    CHECK(!constraint_allows(c, ".5", 2));
    constraint_free(c);
    /* a named function: the other one is refused */
    c = constraint_tool_call(true, tools, "get_weather", &err);
    CHECK(!constraint_allows(c, "<tool_call>\n<function=ping", 27));
    constraint_free(c);
    /* JSON format, with completion at a budget cut and the chat parser reading the result */
    c = constraint_tool_call(false, tools, NULL, &err);
    REQUIRE(c);
    const char *part = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par";
    CHECK(accepts(c, part, &done) && !done);
    CHECK(!constraint_allows(c, "\n", 1)); /* control characters are not JSON string content */
    SBuf text = {0};
    sbuf_puts(&text, part);
    constraint_completion(c, &text);
    CHECK_MSG(!strcmp(text.p, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\"}}\n</tool_call>"),
              "completion: %s", text.p);
    ChatParser *p = chat_parser_new(CHAT_FORMAT_QWEN3, false, tools, &err);
    REQUIRE(p);
    ChatDelta d;
    CHECK(chat_parser_feed(p, text.p, text.n, &d, &err) == 0);
    CHECK(chat_parser_finish(p, &d, &err) == 0);
    const ChatToolCall *calls;
    REQUIRE(chat_parser_tool_calls(p, &calls) == 1);
    CHECK(!strcmp(calls[0].name, "get_weather") && !strcmp(calls[0].arguments, "{\"city\": \"Par\"}"));
    chat_parser_free(p);
    constraint_free(c);
    sbuf_free(&text);
    /* the fixed text is offered as a literal */
    c = constraint_tool_call(false, tools, "ping", &err);
    REQUIRE(c);
    const char *lit;
    size_t n;
    CHECK(constraint_literal(c, &lit, &n) && n > 10 && !strncmp(lit, "<tool_call>", 11));
    CHECK(accepts(c, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>", &done) && done);
    constraint_free(c);
    cJSON_Delete(tools);
}

TEST(server, constraint_json) {
    Err err = {{0}};
    bool done;
    Constraint *c = constraint_json(NULL, &err);
    REQUIRE(c);
    CHECK(!constraint_allows(c, "[", 1)); /* an object is required */
    CHECK(accepts(c, "{\"a\": [1, -2.5e3, true, null, {\"b\": \"\\u00e9\\n\"}], \"c\"", &done) && !done);
    SBuf out = {0};
    constraint_completion(c, &out);
    CHECK_MSG(out.p && !strcmp(out.p, ":null}"), "completion '%s'", out.p ? out.p : "");
    CHECK(accepts(c, ": {}}", &done) && done);
    CHECK(!constraint_allows(c, " ", 1));
    constraint_free(c);
    sbuf_free(&out);
    cJSON *schema = cJSON_Parse("{\"type\": \"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, \"ok\": "
                                "{\"type\": \"boolean\"}}, \"required\": [\"n\", \"ok\"]}");
    c = constraint_json(schema, &err);
    REQUIRE(c);
    CHECK(!constraint_allows(c, "{\"x\"", 4));
    CHECK(accepts(c, "{\"n\": 42, \"ok\": false}", &done) && done);
    constraint_free(c);
    cJSON_Delete(schema);
}

/* ------------------------------------------------------------------------------------------ SSE pieces */

TEST(server, sse_chunks) {
    ApiDefaults d = test_api_defaults();
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"stream\": true, "
                       "\"stream_options\": {\"include_usage\": true}}";
    ApiRequest req;
    ApiError e;
    REQUIRE(api_parse(true, body, strlen(body), &d, &req, &e) == 0);
    Responder r;
    Err err = {{0}};
    REQUIRE(resp_init(&r, &req, RESP_CHAT, 0, CHAT_FORMAT_QWEN3, true, "model-x", NULL, NULL, &err) == 0);
    SBuf out = {0};
    const char *pieces[] = {"plan", "ning\n</th", "ink>\n\nHello",
                            (" <tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>")};
    for (int i = 0; i < 4; i++) CHECK(resp_stream_text(&r, pieces[i], strlen(pieces[i]), NULL, 0, &out, &err) == 0);
    JobResult res = {FINISH_STOP, 10, 4, 7, 0, 1, 1, 0, false, NULL};
    CHECK(resp_stream_finish(&r, &res, &res, &out, &err) == 0);
    CHECK(resp_stream_done(&r, &res, &out, &err) == 0);
    CHECK(strstr(out.p, "\"role\":\"assistant\"") != NULL);
    CHECK(strstr(out.p, "\"reasoning_content\":\"plan\"") != NULL);
    CHECK(strstr(out.p, "\"content\":\"Hello\"") != NULL);
    CHECK(strstr(out.p, "\"tool_calls\":[{\"index\":0,\"id\":\"call_") != NULL);
    CHECK(strstr(out.p, "\"finish_reason\":\"tool_calls\"") != NULL);
    CHECK(strstr(out.p, "\"cached_tokens\":4") != NULL);
    size_t n = strlen(out.p);
    CHECK(n > 14 && !strcmp(out.p + n - 14, "data: [DONE]\n\n"));
    /* every event is one JSON object */
    for (char *ev = strstr(out.p, "data: "); ev; ev = strstr(ev + 1, "data: ")) {
        char *end = strstr(ev, "\n\n");
        REQUIRE(end);
        if (!strncmp(ev + 6, "[DONE]", 6)) continue;
        cJSON *j = cJSON_ParseWithLength(ev + 6, (size_t)(end - ev - 6));
        CHECK_MSG(cJSON_IsObject(j), "bad event %.80s", ev);
        cJSON_Delete(j);
    }
    sbuf_free(&out);
    resp_free(&r);
    api_request_free(&req);
}

/* ------------------------------------------------------------------------------------------ scheduler */

static DlEngine *open_engine_at(const char *path, int n_ctx, int n_seq, int n_batch) {
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = path;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.n_seq_max = n_seq;
    p.n_threads = 1;
    DlError e = {{0}};
    DlEngine *en = dl_engine_open(&p, &e);
    CHECK_MSG(en, "%s", e.msg);
    return en;
}

static DlEngine *open_engine(int n_seq, int n_batch) { return open_engine_at(test_data(MODEL), 2048, n_seq, n_batch); }

static Job *make_job(const int32_t *prompt, size_t n, int max_tokens, bool cache) {
    Job *j = job_new();
    j->prompt = malloc(n * sizeof *prompt);
    memcpy(j->prompt, prompt, n * sizeof *prompt);
    j->n_prompt = n;
    dl_sampling_params_init(&j->sp);
    j->sp.temperature = 0.7f; /* sampled, seeded: the same seed must give the same tokens */
    j->sp.seed = 1234;
    j->max_tokens = max_tokens;
    j->use_cache = cache;
    stop_init(&j->stop, NULL, 0);
    return j;
}

/* Waits for the job; returns its text (malloc'd). */
static char *wait_job(Job *j, double timeout_s) {
    SBuf all = {0};
    struct timeval t0, t;
    gettimeofday(&t0, NULL);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        if (j->text.n) sbuf_put(&all, j->text.p, j->text.n), j->text.n = 0;
        bool done = j->done;
        pthread_mutex_unlock(&j->mu);
        if (done) break;
        gettimeofday(&t, NULL);
        if ((double)(t.tv_sec - t0.tv_sec) + (t.tv_usec - t0.tv_usec) * 1e-6 > timeout_s) break;
        usleep(2000);
    }
    if (!all.p) sbuf_put(&all, "", 0);
    return all.p;
}

TEST(server, scheduler_prefix_reuse_is_exact) {
    enum { K = 64 };
    DlEngine *en = open_engine(2, K);
    REQUIRE(en);
    Err err = {{0}};
    PrefixCacheConfig pcfg = {.ram_bytes = 64 << 20, .fingerprint = {5, 6}};
    PrefixCache *pc = pcache_new(&pcfg, &err);
    SchedConfig sc = {.engine = en, .n_slots = 2, .queue_max = 8, .chunk = K, .segment = K, .cache = pc};
    Scheduler *s = sched_new(&sc, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    int32_t prompt[300];
    for (int i = 0; i < 300; i++) prompt[i] = (i * 7919 + 13) % 1000;
    /* turn 1 (250 tokens) stores checkpoints; turn 2 (300 tokens, same start) resumes from 192 */
    Job *t1 = make_job(prompt, 250, 8, true);
    REQUIRE(sched_submit(s, t1) == SUBMIT_OK);
    free(wait_job(t1, 120));
    Job *warm = make_job(prompt, 300, 24, true), *cold = make_job(prompt, 300, 24, false);
    REQUIRE(sched_submit(s, warm) == SUBMIT_OK);
    char *wt = wait_job(warm, 120);
    REQUIRE(sched_submit(s, cold) == SUBMIT_OK);
    char *ct = wait_job(cold, 120);
    CHECK_MSG(warm->n_cached == 192, "warm run resumed from %d tokens", warm->n_cached);
    CHECK(cold->n_cached == 0);
    CHECK(warm->finish == FINISH_LENGTH && cold->finish == FINISH_LENGTH && warm->n_gen == 24);
    CHECK_MSG(!strcmp(wt, ct), "warm '%s' vs cold '%s'", wt, ct);
    test_note("prefix reuse: resumed from %d of 300 tokens, %d generated tokens identical to the cold run",
              warm->n_cached, warm->n_gen);
    /* the whole prompt cached (a multiple of K): resumes at the end, still identical */
    Job *w2 = make_job(prompt, 256, 24, true);
    REQUIRE(sched_submit(s, w2) == SUBMIT_OK);
    char *w2t = wait_job(w2, 120);
    Job *w3 = make_job(prompt, 256, 24, true), *c3 = make_job(prompt, 256, 24, false);
    sched_submit(s, w3);
    char *w3t = wait_job(w3, 120);
    sched_submit(s, c3);
    char *c3t = wait_job(c3, 120);
    CHECK(w3->n_cached == 256 && !strcmp(w3t, c3t) && !strcmp(w2t, c3t));
    free(wt), free(ct), free(w2t), free(w3t), free(c3t);
    job_unref(t1), job_unref(warm), job_unref(cold), job_unref(w2), job_unref(w3), job_unref(c3);
    sched_free(s);
    pcache_free(pc);
    dl_engine_close(en);
}

static int job_generated(Job *j) {
    pthread_mutex_lock(&j->mu);
    int n = j->n_gen;
    pthread_mutex_unlock(&j->mu);
    return n;
}

TEST(server, scheduler_cancel_and_queue) {
    DlEngine *en = open_engine(1, 64);
    REQUIRE(en);
    Err err = {{0}};
    SchedConfig sc = {.engine = en, .n_slots = 1, .queue_max = 1, .chunk = 64, .segment = 64};
    Scheduler *s = sched_new(&sc, &err);
    REQUIRE(s);
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    Job *a = make_job(prompt, 8, 100000, false), *b = make_job(prompt, 8, 4, false), *c = make_job(prompt, 8, 4, false);
    a->max_tokens = 2000;
    static LogitBias no_eog[3] = {{1000, -100}, {1001, -100}, {1002, -100}}; /* m1's control tokens */
    a->bias = malloc(sizeof no_eog);
    memcpy(a->bias, no_eog, sizeof no_eog);
    a->n_bias = 3;
    REQUIRE(sched_submit(s, a) == SUBMIT_OK);
    for (int i = 0; i < 5000 && !job_generated(a); i++) usleep(1000); /* a is generating */
    CHECK(sched_submit(s, b) == SUBMIT_OK);         /* waits */
    CHECK(sched_submit(s, c) == SUBMIT_QUEUE_FULL); /* queue of 1 is full */
    SchedStats st;
    sched_stats(s, &st);
    CHECK(st.busy == 1 && st.queued == 1);
    sched_cancel(s, a);
    free(wait_job(a, 10));
    free(wait_job(b, 60));
    CHECK(a->finish == FINISH_CANCELLED && a->n_gen < 2000);
    CHECK(b->finish == FINISH_LENGTH && b->n_gen == 4);
    sched_stats(s, &st);
    CHECK(st.busy == 0 && st.queued == 0);
    job_unref(a), job_unref(b), job_unref(c);
    sched_free(s);
    dl_engine_close(en);
}

/* Speculative decoding in the slots: the same jobs through a plain scheduler and through one whose slots
 * draft (forced drafts: draft-p-min 0, so that rejections happen), two slots busy at once (one batched
 * speculative step for both). Greedy jobs give the same text; so does a job with a logit bias (it decodes
 * plainly in a drafting slot), a sampled job (same seed: the step samples each position as plain decoding does),
 * and jobs cut by max_tokens and by the context in the middle of a step. */
static void drafting_case(const char *name, const char *path) {
    DlEngine *en = open_engine_at(path, 160, 2, 64);
    REQUIRE(en);
    DlDraftParams dp;
    dl_draft_params_init(&dp);
    dp.n_max = 3, dp.p_min = 0;
    Err err = {{0}};
    SchedConfig plain_cfg = {.engine = en, .n_slots = 2, .queue_max = 8, .chunk = 64, .segment = 64};
    SchedConfig draft_cfg = plain_cfg;
    draft_cfg.draft = &dp;
    Scheduler *plain = sched_new(&plain_cfg, &err), *spec = plain ? sched_new(&draft_cfg, &err) : NULL;
    REQUIRE_MSG(plain && spec, "%s", err.msg);
    const int V = dl_engine_info(en)->n_vocab;
    int32_t prompt[2][40];
    for (int i = 0; i < 40; i++) prompt[0][i] = (i * 7919 + 13) % (V - 16), prompt[1][i] = (i * 104729 + 5) % (V - 16);
    enum { NJ = 6 };
    /* greedy ×2, greedy cut by max_tokens at 7, logit bias, sampled, greedy that runs into the context (40 + 130 > 160) */
    const int max_tok[NJ] = {48, 48, 7, 32, 40, 130};
    int same = 0, n_tok = 0;
    for (int k = 0; k < NJ; k += 2) {
        Job *jp[2], *js[2];
        for (int r = 0; r < 2; r++) {
            for (int w = 0; w < 2; w++) {
                Job *j = make_job(prompt[r], 40, max_tok[k + r], false);
                j->sp.temperature = k + r == 4 ? 0.8f : 0;
                if (k + r == 3) {
                    j->bias = malloc(sizeof(LogitBias));
                    j->bias[0] = (LogitBias){5, 2.0f};
                    j->n_bias = 1;
                }
                (w ? js : jp)[r] = j;
            }
        }
        /* one scheduler at a time: they share the engine, which computes one batch at a time */
        char *a_[2], *b_[2];
        for (int r = 0; r < 2; r++) REQUIRE(sched_submit(plain, jp[r]) == SUBMIT_OK);
        for (int r = 0; r < 2; r++) a_[r] = wait_job(jp[r], 120);
        for (int r = 0; r < 2; r++) REQUIRE(sched_submit(spec, js[r]) == SUBMIT_OK);
        for (int r = 0; r < 2; r++) b_[r] = wait_job(js[r], 120);
        for (int r = 0; r < 2; r++) {
            char *a = a_[r], *b = b_[r];
            const bool ok = CHECK_MSG(!strcmp(a, b) && jp[r]->n_gen == js[r]->n_gen && jp[r]->finish == js[r]->finish,
                                      "%s job %d: plain %d tokens '%s' (finish %d), drafting %d tokens '%s' (finish %d)",
                                      name, k + r, jp[r]->n_gen, a, jp[r]->finish, js[r]->n_gen, b, js[r]->finish);
            same += ok, n_tok += js[r]->n_gen;
            free(a), free(b);
            job_unref(jp[r]), job_unref(js[r]);
        }
    }
    SchedStats st;
    sched_stats(spec, &st);
    CHECK_MSG(st.drafted > st.accepted, "%s: %llu drafts, %llu accepted: no rejection", name, (unsigned long long)st.drafted,
              (unsigned long long)st.accepted);
    test_note("%s: %d of %d jobs (%d tokens) the same with drafting slots; %llu of %llu drafts accepted", name, same, NJ,
              n_tok, (unsigned long long)st.accepted, (unsigned long long)st.drafted);
    sched_free(plain), sched_free(spec);
    dl_engine_close(en);
}

TEST(server, scheduler_drafting_slots_match_plain) {
    drafting_case("tinybible", mtp_test_model("tinybible"));
    drafting_case("m1-qwen3next-legacy-f32", mtp_test_model("m1-qwen3next-legacy-f32"));
}

/* ------------------------------------------------------------------------------------------ HTTP */

static int health_busy(int port) {
    HttpResp r = http(port, "GET", "/health", NULL, NULL);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *b = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "slots"), "busy");
    int busy = cJSON_IsNumber(b) ? b->valueint : -1;
    cJSON_Delete(j);
    http_free(&r);
    return busy;
}

TEST(server, http_in_process) {
    ServerConfig c;
    server_config_init(&c);
    c.model_path = test_data(MODEL);
    c.port = 0;
    c.parallel = 2;
    c.ctx_size = 512;
    c.threads = 1;
    c.api_key = "sekret-key";
    c.max_body_bytes = 64 * 1024;
    c.queue_max = 4;
    Err err = {{0}};
    Server *s = server_start(&c, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    int port = server_port(s);
    const char *auth = "Authorization: Bearer sekret-key\r\n";
    HttpResp r = http(port, "GET", "/health", NULL, NULL);
    CHECK(r.status == 200 && r.body && strstr(r.body, "\"status\":\"ok\""));
    http_free(&r);
    r = http(port, "GET", "/v1/models", NULL, NULL); /* no key */
    CHECK(r.status == 401 && is_error_object(r.body));
    http_free(&r);
    r = http(port, "GET", "/v1/models", "Authorization: Bearer sekret-kez\r\n", NULL);
    CHECK(r.status == 401);
    http_free(&r);
    r = http(port, "GET", "/v1/models", auth, NULL);
    CHECK(r.status == 200 && strstr(r.body, server_model_id(s)));
    http_free(&r);
    r = http(port, "GET", "/v1/nothing", auth, NULL);
    CHECK(r.status == 404 && is_error_object(r.body));
    http_free(&r);
    r = http(port, "GET", "/v1/chat/completions", auth, NULL);
    CHECK(r.status == 405 && strstr(r.head, "Allow: POST"));
    http_free(&r);
    /* a non-streamed chat completion */
    r = http(port, "POST", "/v1/chat/completions", auth,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 5, \"temperature\": 0}");
    CHECK_MSG(r.status == 200, "status %d: %s", r.status, r.body ? r.body : "");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *u = cJSON_GetObjectItem(j, "usage");
    CHECK(cJSON_GetObjectItem(u, "completion_tokens") && cJSON_GetObjectItem(u, "prompt_tokens_details"));
    CHECK(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0),
                                                                 "message"),
                                             "content")));
    cJSON_Delete(j);
    http_free(&r);
    /* streamed completion with usage */
    r = http(port, "POST", "/v1/completions", auth,
             "{\"prompt\": \"Once upon\", \"max_tokens\": 4, \"temperature\": 0, \"stream\": true, \"stream_options\": "
             "{\"include_usage\": true}}"); /* greedy: a sampled end-of-text token would end it before the length */
    CHECK(r.status == 200 && strstr(r.head, "text/event-stream"));
    CHECK(r.body && strstr(r.body, "\"finish_reason\":\"length\"") && strstr(r.body, "\"usage\"") &&
          strstr(r.body, "data: [DONE]"));
    http_free(&r);
    /* bad input: 4xx with an error object, and the server keeps serving */
    r = http(port, "POST", "/v1/chat/completions", auth, "{not json");
    CHECK(r.status == 400 && is_error_object(r.body));
    http_free(&r);
    char *big = malloc(70 * 1024);
    memset(big, 'a', 70 * 1024 - 1);
    big[70 * 1024 - 1] = 0;
    r = http(port, "POST", "/v1/completions", auth, big);
    CHECK(r.status == 413 && is_error_object(r.body));
    http_free(&r);
    free(big);
    SBuf longp = {0};
    sbuf_puts(&longp, "{\"prompt\": \"");
    for (int i = 0; i < 600; i++) sbuf_puts(&longp, " word");
    sbuf_puts(&longp, "\"}");
    r = http(port, "POST", "/v1/completions", auth, longp.p);
    CHECK(r.status == 400 && strstr(r.body, "context_length_exceeded"));
    http_free(&r);
    sbuf_free(&longp);
    /* a client that disconnects mid-stream frees its slot at once */
    int busy;
    int fd = http_connect(port);
    REQUIRE(fd >= 0);
    http_send_request(fd, "POST", "/v1/completions", auth,
                 "{\"prompt\": \"Tell me a very long story\", \"max_tokens\": 400, \"stream\": true, "
                 "\"logit_bias\": {\"1000\": -100, \"1001\": -100, \"1002\": -100}}");
    char buf[4096];
    ssize_t got = read(fd, buf, sizeof buf); /* the headers, maybe the first chunk */
    CHECK(got > 0);
    busy = -1;
    for (int i = 0; i < 200 && busy != 1; i++) {
        busy = health_busy(port);
        if (busy != 1) usleep(5000);
    }
    CHECK_MSG(busy == 1, "the stream's slot is not busy (%d)", busy);
    close(fd);
    busy = -1;
    for (int i = 0; i < 100 && busy != 0; i++) {
        usleep(20000);
        busy = health_busy(port);
    }
    CHECK_MSG(busy == 0, "slot still busy after the client left");
    /* the same for a non-streamed request */
    fd = http_connect(port);
    REQUIRE(fd >= 0);
    http_send_request(fd, "POST", "/v1/completions", auth, "{\"prompt\": \"Another story\", \"max_tokens\": 400, \"logit_bias\": {\"1000\": -100, "
                 "\"1001\": -100, \"1002\": -100}}");
    for (int i = 0; i < 200 && health_busy(port) != 1; i++) usleep(5000);
    close(fd);
    busy = -1;
    for (int i = 0; i < 100 && busy != 0; i++) {
        usleep(20000);
        busy = health_busy(port);
    }
    CHECK_MSG(busy == 0, "slot still busy after the client left (non-streamed)");
    r = http(port, "GET", "/health", NULL, NULL);
    CHECK(r.status == 200);
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ Node suite */

/* The Node suite (tests/server/run.sh) against `$DELTALLM_BIN serve`, with env (shell assignments, "" for
 * none) in front: test_vulkan.c runs it with DELTALLM_DEVICE=vulkan. */
void server_node_suite(const char *env) {
    const char *bin = getenv("DELTALLM_BIN");
    if (!bin || !*bin) {
        test_skip("DELTALLM_BIN not set: the Node suite is skipped");
        return;
    }
    if (system("node --version > /dev/null 2>&1") != 0) {
        test_skip("node is not installed: the Node suite (tests/server) is skipped");
        return;
    }
    struct stat sb;
    if (stat("tests/server/node_modules/openai", &sb) != 0) {
        test_skip("tests/server/node_modules is missing (run: cd tests/server && npm ci): the Node suite is skipped");
        return;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s DELTALLM_BIN='%s' DELTALLM_TEST_TMP='%s' sh tests/server/run.sh > '%s/node.log' 2>&1", env, bin,
             test_tmpdir(), test_tmpdir());
    int rc = system(cmd);
    char log[600];
    snprintf(log, sizeof log, "%s/node.log", test_tmpdir());
    size_t n = 0;
    char *text = test_read_file(log, &n);
    if (text && rc != 0) fprintf(stdout, "%.*s\n", (int)n, text);
    if (text) {
        /* the summary lines of the scripts */
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
            if (!strncmp(line, "ok ", 3) || !strncmp(line, "not ok", 6) || !strncmp(line, "load:", 5) ||
                !strncmp(line, "disconnect:", 11) || !strncmp(line, "prefix:", 7))
                test_note("%s", line);
    }
    CHECK_MSG(rc == 0, "tests/server/run.sh failed (exit %d); log: %s", rc, log);
    free(text);
}

TEST(server, node_suite) { server_node_suite(""); }
