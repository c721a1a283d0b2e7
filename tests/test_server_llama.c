/* test_server_llama.c — what llama-server's users send (group `server_llama`), in-process on m1: llama.cpp's
 * sampling fields on the OpenAI endpoints (accepted, checked, and changing what is drawn), n > 1 (several
 * choices of one prompt from one prompt evaluation), GBNF grammars, and the Anthropic Messages API. The
 * samplers' definitions are tested in test_sampling_llama.c; the Node suite drives the same endpoints with
 * the official openai and @anthropic-ai/sdk clients. */
#include "test.h"
#include "test_http.h"

#include "deltallm.h"
#include "server/constrain.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static cJSON *post(int port, const char *path, const char *body, int *status) {
    HttpResp r = http(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_ParseWithLength(r.body, r.body_len) : NULL;
    http_free(&r);
    return j;
}

/* One sample of /metrics (-1: none). */
static double metric_value(int port, const char *name) {
    HttpResp r = http(port, "GET", "/metrics", NULL, NULL);
    double v = -1;
    const size_t n = strlen(name);
    for (const char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ' ') v = strtod(p + n + 1, NULL);
    http_free(&r);
    return v;
}

static const char *text_of(const cJSON *j, int i) {
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), i);
    const cJSON *t = cJSON_GetObjectItem(c, "text");
    if (!t) t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "message"), "content");
    return cJSON_GetStringValue(t);
}

static const char *error_param(const cJSON *j) {
    return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param"));
}

TEST(server_llama, sampling_fields) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    int st;
    char body[1024];
    /* greedy, then greedy with XTC at threshold 0 (all but the least likely removed): another text */
    const char *base = "{\"prompt\": \"The quick brown\", \"max_tokens\": 8, \"temperature\": 0%s}";
    snprintf(body, sizeof body, base, "");
    cJSON *a = post(port, "/v1/completions", body, &st);
    CHECK(st == 200 && text_of(a, 0));
    snprintf(body, sizeof body, base, ", \"xtc_probability\": 1, \"xtc_threshold\": 0");
    cJSON *b = post(port, "/v1/completions", body, &st);
    CHECK(st == 200 && text_of(b, 0));
    CHECK_MSG(text_of(a, 0) && text_of(b, 0) && strcmp(text_of(a, 0), text_of(b, 0)) != 0, "XTC changed nothing: '%s'",
              text_of(a, 0));
    snprintf(body, sizeof body, base, ", \"samplers\": [\"xtc\", \"top_k\"], \"top_k\": 1, \"xtc_probability\": 1");
    cJSON_Delete(b);
    b = post(port, "/v1/completions", body, &st);
    CHECK_MSG(st == 200, "samplers: %d", st);
    cJSON_Delete(a), cJSON_Delete(b);
    /* every field at once, on chat */
    a = post(port, "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 6, \"seed\": 3, "
             "\"typical_p\": 0.9, \"mirostat\": 2, \"mirostat_tau\": 4, \"mirostat_eta\": 0.2, \"dry_multiplier\": 0.8, "
             "\"dry_base\": 1.75, \"dry_allowed_length\": 2, \"dry_penalty_last_n\": -1, \"dry_sequence_breakers\": "
             "[\"\\n\", \":\"], \"xtc_probability\": 0.5, \"xtc_threshold\": 0.1, \"top_n_sigma\": 2, "
             "\"repetition_penalty\": 1.1, \"repeat_last_n\": 32, \"min_tokens\": 2, \"samplers\": \"kpt\", "
             "\"n_probs\": 2}",
             &st);
    CHECK_MSG(st == 200, "chat with llama.cpp's fields: %d", st);
    const cJSON *lp = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(a, "choices"), 0), "logprobs");
    CHECK_MSG(cJSON_IsObject(lp), "n_probs asks for logprobs");
    cJSON_Delete(a);
    static const struct {
        const char *field, *param;
    } bad[] = {
        {"\"mirostat\": 3", "mirostat"},
        {"\"typical_p\": 1.5", "typical_p"},
        {"\"dry_base\": 0.5", "dry_base"},
        {"\"dry_sequence_breakers\": [5]", "dry_sequence_breakers"},
        {"\"samplers\": [\"top_k\", \"nope\"]", "samplers"},
        {"\"samplers\": \"kq\"", "samplers"},
        {"\"min_tokens\": -1", "min_tokens"},
        {"\"n_probs\": 50", "n_probs"},
        {"\"xtc_probability\": \"high\"", "xtc_probability"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(body, sizeof body, "{\"prompt\": \"x\", \"max_tokens\": 1, %s}", bad[i].field);
        a = post(port, "/v1/completions", body, &st);
        CHECK_MSG(st == 400 && error_param(a) && !strcmp(error_param(a), bad[i].param), "%s: %d %s", bad[i].field, st,
                  error_param(a) ? error_param(a) : "-");
        cJSON_Delete(a);
    }
    server_stop(s);
}

/* n > 1: greedy choices are copies of one state, so each equals the n = 1 answer; with a seed they differ from
 * one another and repeat; the prompt is evaluated once (the other choices' prompt tokens are all "cached"). */
TEST(server_llama, n_choices_share_the_prompt) {
    ServerConfig c;
    test_server_config(&c);
    c.parallel = 3;
    c.metrics = true;
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    int st;
    cJSON *one = post(port, "/v1/completions",
                      "{\"prompt\": \"In the beginning\", \"max_tokens\": 10, \"temperature\": 0, \"cache_prompt\": false}",
                      &st);
    REQUIRE(st == 200 && text_of(one, 0));
    const double restored0 = metric_value(port, "deltallm_prompt_tokens_cached_total");
    cJSON *three = post(port, "/v1/completions",
                        "{\"prompt\": \"In the beginning\", \"max_tokens\": 10, \"temperature\": 0, \"n\": 3, "
                        "\"cache_prompt\": false}",
                        &st);
    REQUIRE_MSG(st == 200 && cJSON_GetArraySize(cJSON_GetObjectItem(three, "choices")) == 3, "n 3: %d", st);
    for (int i = 0; i < 3; i++) {
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(three, "choices"), i);
        CHECK(cJSON_GetObjectItem(ch, "index")->valueint == i);
        CHECK_MSG(text_of(three, i) && !strcmp(text_of(three, i), text_of(one, 0)), "choice %d '%s' vs n=1 '%s'", i,
                  text_of(three, i), text_of(one, 0));
    }
    const cJSON *u1 = cJSON_GetObjectItem(one, "usage"), *u3 = cJSON_GetObjectItem(three, "usage");
    const int P = cJSON_GetObjectItem(u1, "prompt_tokens")->valueint;
    /* usage counts the prompt once (as OpenAI does); the server restored it for the two other choices */
    CHECK_MSG(cJSON_GetObjectItem(u3, "prompt_tokens")->valueint == P, "prompt_tokens %d with n 3, want %d",
              cJSON_GetObjectItem(u3, "prompt_tokens")->valueint, P);
    const double restored = metric_value(port, "deltallm_prompt_tokens_cached_total") - restored0;
    CHECK_MSG(restored == 2 * P, "restored %g tokens, want 2 × %d: the prompt evaluated once", restored, P);
    cJSON_Delete(one), cJSON_Delete(three);
    /* sampled: the choices differ, and the same seed repeats them */
    const char *sampled = "{\"prompt\": \"Tell a story\", \"max_tokens\": 12, \"temperature\": 1.5, \"top_k\": 0, "
                          "\"seed\": 11, \"n\": 2}";
    cJSON *a = post(port, "/v1/completions", sampled, &st);
    REQUIRE(st == 200);
    cJSON *b = post(port, "/v1/completions", sampled, &st);
    REQUIRE(st == 200);
    CHECK(text_of(a, 0) && text_of(a, 1) && strcmp(text_of(a, 0), text_of(a, 1)) != 0);
    CHECK(text_of(b, 0) && text_of(a, 0) && !strcmp(text_of(a, 0), text_of(b, 0)));
    CHECK(text_of(b, 1) && text_of(a, 1) && !strcmp(text_of(a, 1), text_of(b, 1)));
    cJSON_Delete(a), cJSON_Delete(b);
    /* streamed: chunks of both choices, each with its index, each ending with a finish_reason */
    HttpResp r = http(port, "POST", "/v1/chat/completions", NULL,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 5, \"n\": 2, "
                      "\"stream\": true, \"seed\": 1}");
    int chunks[2] = {0}, finished[2] = {0};
    for (char *line = r.body ? strstr(r.body, "data: {") : NULL; line; line = strstr(line + 1, "data: {")) {
        char *end = strchr(line, '\n');
        cJSON *j = cJSON_ParseWithLength(line + 6, end ? (size_t)(end - line - 6) : strlen(line + 6));
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const cJSON *idx = cJSON_GetObjectItem(ch, "index");
        if (cJSON_IsNumber(idx) && idx->valueint >= 0 && idx->valueint < 2) {
            chunks[idx->valueint]++;
            finished[idx->valueint] += cJSON_IsString(cJSON_GetObjectItem(ch, "finish_reason"));
        }
        cJSON_Delete(j);
    }
    CHECK_MSG(r.status == 200 && chunks[0] > 1 && chunks[1] > 1 && finished[0] == 1 && finished[1] == 1,
              "stream: %d, chunks %d %d, finished %d %d", r.status, chunks[0], chunks[1], finished[0], finished[1]);
    http_free(&r);
    cJSON *bad = post(port, "/v1/completions", "{\"prompt\": \"x\", \"n\": 17}", &st);
    CHECK(st == 400 && error_param(bad) && !strcmp(error_param(bad), "n"));
    cJSON_Delete(bad);
    server_stop(s);
}

/* GBNF grammars on completions and chat: every answer is in the grammar's language, whole (a budget that runs
 * out closes it with the shortest completion); llama.cpp's top-level json_schema; a bad grammar is a 400 that
 * says where. */
TEST(server_llama, grammar_constrains_every_endpoint) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    int st;
    char body[2048];
    cJSON *a = post(port, "/v1/completions",
                    "{\"prompt\": \"Answer:\", \"max_tokens\": 10, \"seed\": 4, \"grammar\": \"root ::= (\\\"yes\\\" | "
                    "\\\"no\\\") \\\"!\\\"\"}",
                    &st);
    const char *t = text_of(a, 0);
    CHECK_MSG(st == 200 && t && (!strcmp(t, "yes!") || !strcmp(t, "no!")), "%d '%s'", st, t ? t : "-");
    cJSON_Delete(a);
    /* arithmetic (llama.cpp's grammars/arithmetic.gbnf), sampled hot, several seeds: each answer is accepted whole */
    size_t n = 0;
    char *gbnf = test_read_file(test_data("gbnf/arithmetic.gbnf"), &n);
    REQUIRE(gbnf);
    cJSON *gs = cJSON_CreateString(gbnf);
    char *gq = cJSON_PrintUnformatted(gs);
    cJSON_Delete(gs);
    for (int seed = 1; seed <= 3; seed++) {
        snprintf(body, sizeof body, "{\"%s\": %s, \"max_tokens\": 24, \"temperature\": 1.2, \"seed\": %d, \"grammar\": %s}",
                 seed == 2 ? "messages" : "prompt",
                 seed == 2 ? "[{\"role\": \"user\", \"content\": \"Sum\"}]" : "\"Math:\"", seed, gq);
        a = post(port, seed == 2 ? "/v1/chat/completions" : "/v1/completions", body, &st);
        t = text_of(a, 0);
        Err err = {{0}};
        Constraint *g = constraint_grammar(gbnf, n, &err);
        SBuf rest = {0};
        const bool whole = t && g && constraint_allows(g, t, strlen(t)) &&
                           constraint_completion_after(g, t, strlen(t), &rest) && rest.n == 0;
        CHECK_MSG(st == 200 && whole, "seed %d: %d '%s' (still needs '%.*s')", seed, st, t ? t : "-", (int)rest.n,
                  rest.p ? rest.p : "");
        sbuf_free(&rest);
        constraint_free(g);
        cJSON_Delete(a);
    }
    free(gq);
    free(gbnf);
    /* llama.cpp's top-level json_schema, on completions */
    a = post(port, "/v1/completions",
             "{\"prompt\": \"JSON:\", \"max_tokens\": 40, \"seed\": 2, \"json_schema\": {\"type\": \"object\", "
             "\"properties\": {\"ok\": {\"type\": \"boolean\"}}, \"required\": [\"ok\"]}}",
             &st);
    t = text_of(a, 0);
    cJSON *parsed = t ? cJSON_Parse(t) : NULL;
    CHECK_MSG(st == 200 && cJSON_IsBool(cJSON_GetObjectItem(parsed, "ok")), "%d '%s'", st, t ? t : "-");
    cJSON_Delete(parsed);
    cJSON_Delete(a);
    a = post(port, "/v1/completions", "{\"prompt\": \"x\", \"grammar\": \"root ::= \\\"a\\\" undefined-rule\"}", &st);
    const char *msg = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "error"), "message"));
    CHECK_MSG(st == 400 && error_param(a) && !strcmp(error_param(a), "grammar") && msg && strstr(msg, "line 1, column 14"),
              "%d %s", st, msg ? msg : "-");
    cJSON_Delete(a);
    a = post(port, "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"grammar\": \"root ::= \\\"a\\\"\", "
             "\"response_format\": {\"type\": \"json_object\"}}",
             &st);
    CHECK(st == 400);
    cJSON_Delete(a);
    server_stop(s);
}

/* The Anthropic Messages API: a message with its content blocks and usage; the stream's events in order; a
 * forced tool call (tool_choice any) as a tool_use block with its input; a tool_result turn; bad requests. The
 * first two requests are greedy: the API's default temperature is 1 with a random seed, and an end token drawn
 * early failed the length check in 6 of 150 runs. */
TEST(server_llama, anthropic_messages) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    int st;
    cJSON *a = post(port, "/v1/messages",
                    "{\"model\": \"m\", \"max_tokens\": 6, \"temperature\": 0, \"system\": \"Be brief.\", \"thinking\": {\"type\": "
                    "\"disabled\"}, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}",
                    &st);
    const cJSON *blk = cJSON_GetArrayItem(cJSON_GetObjectItem(a, "content"), 0);
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(blk, "type"));
    const cJSON *u = cJSON_GetObjectItem(a, "usage");
    CHECK_MSG(st == 200 && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "type")), "message") && type &&
                  !strcmp(type, "text") && cJSON_GetObjectItem(u, "output_tokens")->valueint == 6 &&
                  cJSON_GetObjectItem(u, "input_tokens")->valueint > 3 &&
                  !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "stop_reason")), "max_tokens") &&
                  !strncmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "id")), "msg_", 4),
              "message: %d", st);
    cJSON_Delete(a);
    /* streamed: message_start, block start/delta/stop, message_delta, message_stop, in that order */
    HttpResp r = http(port, "POST", "/v1/messages", NULL,
                      "{\"model\": \"m\", \"max_tokens\": 5, \"temperature\": 0, \"stream\": true, \"thinking\": {\"type\": \"disabled\"}, "
                      "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Hi\"}]}]}");
    const char *order[] = {"event: message_start", "event: content_block_start", "event: content_block_delta",
                           "event: content_block_stop", "event: message_delta", "event: message_stop"};
    const char *at = r.body;
    for (int i = 0; i < 6 && at; i++) at = strstr(at, order[i]);
    CHECK_MSG(r.status == 200 && at && !strstr(r.body, "[DONE]"), "stream: %d %s", r.status, r.body ? r.body : "-");
    http_free(&r);
    /* a forced tool call */
    const char *tools = "\"tools\": [{\"name\": \"get_weather\", \"description\": \"Weather\", \"input_schema\": "
                        "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"enum\": [\"Paris\", "
                        "\"Lima\"]}}, \"required\": [\"city\"]}}]";
    char body[2048];
    snprintf(body, sizeof body,
             "{\"model\": \"m\", \"max_tokens\": 60, %s, \"tool_choice\": {\"type\": \"any\"}, \"messages\": "
             "[{\"role\": \"user\", \"content\": \"Weather?\"}]}",
             tools);
    a = post(port, "/v1/messages", body, &st);
    const cJSON *call = NULL;
    for (const cJSON *b = cJSON_GetObjectItem(a, "content") ? cJSON_GetObjectItem(a, "content")->child : NULL; b; b = b->next)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(b, "type")), "tool_use")) call = b;
    const char *city = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(call, "input"), "city"));
    CHECK_MSG(st == 200 && call && city && (!strcmp(city, "Paris") || !strcmp(city, "Lima")) &&
                  !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(a, "stop_reason")), "tool_use") &&
                  !strncmp(cJSON_GetStringValue(cJSON_GetObjectItem(call, "id")), "toolu_", 6),
              "tool_use: %d", st);
    cJSON_Delete(a);
    /* the result goes back */
    snprintf(body, sizeof body,
             "{\"model\": \"m\", \"max_tokens\": 4, %s, \"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}, "
             "{\"role\": \"assistant\", \"content\": [{\"type\": \"thinking\", \"thinking\": \"hm\", \"signature\": \"\"}, "
             "{\"type\": \"tool_use\", \"id\": \"toolu_1\", \"name\": \"get_weather\", \"input\": {\"city\": \"Lima\"}}]}, "
             "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"toolu_1\", \"content\": "
             "\"18 C\"}]}]}",
             tools);
    a = post(port, "/v1/messages", body, &st);
    CHECK_MSG(st == 200, "tool_result turn: %d", st);
    cJSON_Delete(a);
    static const struct {
        const char *body, *param;
    } bad[] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "max_tokens"},
        {"{\"max_tokens\": 5, \"messages\": []}", "messages"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", "messages[0]"},
        {"{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\", \"source\": {}}]}]}",
         "messages[0].content[0]"},
        {"{\"max_tokens\": 5, \"frob\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", "frob"},
        {"{\"max_tokens\": 5, \"tool_choice\": {\"type\": \"maybe\"}, \"messages\": [{\"role\": \"user\", \"content\": "
         "\"x\"}]}",
         "tool_choice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        a = post(port, "/v1/messages", bad[i].body, &st);
        /* Anthropic's error shape: {"type": "error", "error": {"type", "message"}}, the message naming the field */
        const cJSON *ae = cJSON_GetObjectItem(a, "error");
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(a, "type")),
                   *etype = cJSON_GetStringValue(cJSON_GetObjectItem(ae, "type")),
                   *msg = cJSON_GetStringValue(cJSON_GetObjectItem(ae, "message"));
        CHECK_MSG(st == 400 && type && !strcmp(type, "error") && etype && !strcmp(etype, "invalid_request_error") &&
                      msg && strstr(msg, bad[i].param) && !cJSON_GetObjectItem(ae, "param"),
                  "%s: %d %s", bad[i].body, st, msg ? msg : "-");
        cJSON_Delete(a);
    }
    server_stop(s);
}

/* grammar on the other endpoints: /v1/responses, /completion (llama.cpp's), /v1/messages. */
TEST(server_llama, grammar_on_every_endpoint) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    static const struct {
        const char *path, *body, *field;
    } t[] = {
        {"/v1/responses", "{\"input\": \"Yes?\", \"max_output_tokens\": 8, \"grammar\": \"root ::= \\\"yes\\\" | \\\"no\\\"\"}",
         "output.0.content.0.text"},
        {"/completion", "{\"prompt\": \"Yes?\", \"n_predict\": 8, \"grammar\": \"root ::= \\\"yes\\\" | \\\"no\\\"\"}",
         "content"},
        {"/v1/messages",
         "{\"max_tokens\": 8, \"messages\": [{\"role\": \"user\", \"content\": \"Yes?\"}], \"grammar\": \"root ::= "
         "\\\"yes\\\" | \\\"no\\\"\"}",
         "content.0.text"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        int st;
        cJSON *j = post(port, t[i].path, t[i].body, &st);
        char path[64];
        snprintf(path, sizeof path, "%s", t[i].field);
        const cJSON *v = j;
        for (char *part = strtok(path, "."); part && v; part = strtok(NULL, "."))
            v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(part)) : cJSON_GetObjectItemCaseSensitive(v, part);
        const char *text = cJSON_GetStringValue(v);
        CHECK_MSG(st == 200 && text && (!strcmp(text, "yes") || !strcmp(text, "no")), "%s: %d '%s'", t[i].path, st,
                  text ? text : "-");
        cJSON_Delete(j);
    }
    server_stop(s);
}

/* serve --xtc-probability ... : the server's default samplers apply to requests that leave them out, and a
 * request's own value wins. */
TEST(server_llama, server_sampler_defaults) {
    ServerConfig c;
    test_server_config(&c);
    Server *plain = test_server_start(&c);
    REQUIRE(plain);
    int st;
    const char *greedy = "{\"prompt\": \"The quick brown\", \"max_tokens\": 8, \"temperature\": 0}";
    cJSON *a = post(server_port(plain), "/v1/completions", greedy, &st);
    char *ref = strdup(text_of(a, 0) ? text_of(a, 0) : "");
    cJSON_Delete(a);
    server_stop(plain);
    c.sampling_extra.xtc_probability = 1.0f;
    c.sampling_extra.xtc_threshold = 0.0f;
    Server *s = test_server_start(&c);
    REQUIRE(s);
    a = post(server_port(s), "/v1/completions", greedy, &st);
    CHECK_MSG(st == 200 && text_of(a, 0) && strcmp(text_of(a, 0), ref) != 0, "the default XTC changed nothing: '%s'", ref);
    cJSON_Delete(a);
    a = post(server_port(s), "/v1/completions",
             "{\"prompt\": \"The quick brown\", \"max_tokens\": 8, \"temperature\": 0, \"xtc_probability\": 0}", &st);
    CHECK_MSG(st == 200 && text_of(a, 0) && !strcmp(text_of(a, 0), ref), "xtc_probability 0 in the request: '%s' vs '%s'",
              text_of(a, 0) ? text_of(a, 0) : "-", ref);
    cJSON_Delete(a);
    free(ref);
    server_stop(s);
}

/* Scans an SSE body: the data objects' "timings" — how many chunks had one, whether predicted_n never went
 * down, the last predicted_n and the largest prompt_n seen. */
typedef struct TimingScan {
    int chunks, with_timings, last_n, prompt_n;
    bool monotonic;
} TimingScan;

static TimingScan scan_timings(const char *body) {
    TimingScan s = {.monotonic = true, .last_n = -1};
    for (const char *line = body ? strstr(body, "data: {") : NULL; line; line = strstr(line + 1, "data: {")) {
        const char *end = strchr(line, '\n');
        cJSON *j = cJSON_ParseWithLength(line + 6, end ? (size_t)(end - line - 6) : strlen(line + 6));
        s.chunks++;
        const cJSON *t = cJSON_GetObjectItem(j, "timings");
        const cJSON *n = cJSON_GetObjectItem(t, "predicted_n"), *p = cJSON_GetObjectItem(t, "prompt_n");
        if (cJSON_IsNumber(n)) {
            s.with_timings++;
            if (n->valueint < s.last_n) s.monotonic = false;
            s.last_n = n->valueint;
            if (cJSON_IsNumber(p) && p->valueint > s.prompt_n) s.prompt_n = p->valueint;
        }
        cJSON_Delete(j);
    }
    return s;
}

/* timings_per_token (llama.cpp's web UI sends it): every streamed chunk carries the counts so far, on chat and
 * /completion; without it only the last does; a non-boolean is a 400 naming it. */
TEST(server_llama, timings_per_token) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    const char *bodies[][2] = {
        {"/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 6, "
                                 "\"stream\": true, \"ignore_eos\": true, \"temperature\": 0, \"timings_per_token\": %s}"},
        {"/completion", "{\"prompt\": \"Once upon\", \"n_predict\": 6, \"stream\": true, \"ignore_eos\": true, "
                        "\"temperature\": 0, \"timings_per_token\": %s}"},
    };
    for (int k = 0; k < 2; k++) {
        char body[512];
        snprintf(body, sizeof body, bodies[k][1], "true");
        HttpResp r = http(port, "POST", bodies[k][0], NULL, body);
        TimingScan on = scan_timings(r.body);
        CHECK_MSG(r.status == 200 && on.chunks >= 2 && on.with_timings == on.chunks && on.monotonic &&
                      on.last_n == 6 && on.prompt_n > 0,
                  "%s with timings_per_token: status %d, %d chunks, %d with timings, monotonic %d, last %d, prompt %d",
                  bodies[k][0], r.status, on.chunks, on.with_timings, on.monotonic, on.last_n, on.prompt_n);
        http_free(&r);
        snprintf(body, sizeof body, bodies[k][1], "false");
        r = http(port, "POST", bodies[k][0], NULL, body);
        TimingScan off = scan_timings(r.body);
        CHECK_MSG(r.status == 200 && off.chunks >= 2 && off.with_timings == 1 && off.last_n == 6,
                  "%s without: status %d, %d chunks, %d with timings, last %d", bodies[k][0], r.status, off.chunks,
                  off.with_timings, off.last_n);
        http_free(&r);
        snprintf(body, sizeof body, bodies[k][1], "1");
        int st;
        cJSON *bad = post(port, bodies[k][0], body, &st);
        CHECK_MSG(st == 400 && error_param(bad) && !strcmp(error_param(bad), "timings_per_token"), "%s: %d",
                  bodies[k][0], st);
        cJSON_Delete(bad);
    }
    server_stop(s);
}

/* What llama.cpp's own web UI sends with its default settings (tools/server/webui's chat service): every field
 * accepted — max_tokens -1 (no limit), typ_p, dynatemp_*, return_progress, backend_sampling, a null
 * tool_calls on a user message — and the reply streams (the end tokens banned: until the 1024-token context
 * is full); max_tokens 0 and a bad dynatemp_range are 400s. */
TEST(server_llama, llama_web_ui_request) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    HttpResp r = http(port, "POST", "/v1/chat/completions", NULL,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\", \"tool_calls\": null}], \"stream\": true, "
                      "\"return_progress\": true, \"reasoning_format\": \"auto\", \"temperature\": 0.8, \"max_tokens\": -1, "
                      "\"dynatemp_range\": 0.5, \"dynatemp_exponent\": 1, \"top_k\": 40, \"top_p\": 0.95, \"min_p\": 0.05, "
                      "\"xtc_probability\": 0, \"xtc_threshold\": 0.1, \"typ_p\": 1, \"repeat_last_n\": 64, "
                      "\"repeat_penalty\": 1, \"presence_penalty\": 0, \"frequency_penalty\": 0, \"dry_multiplier\": 0, "
                      "\"dry_base\": 1.75, \"dry_allowed_length\": 2, \"dry_penalty_last_n\": -1, \"samplers\": "
                      "[\"penalties\", \"dry\", \"top_n_sigma\", \"top_k\", \"typ_p\", \"top_p\", \"min_p\", \"xtc\", "
                      "\"temperature\"], \"backend_sampling\": false, \"timings_per_token\": true, \"seed\": 3, "
                      "\"logit_bias\": {\"1000\": -100, \"1001\": -100, \"1002\": -100}}");
    TimingScan t = scan_timings(r.body);
    CHECK_MSG(r.status == 200 && strstr(r.body, "[DONE]") && t.last_n > 900 && t.with_timings == t.chunks,
              "status %d, last predicted_n %d, %d of %d chunks with timings: %.300s", r.status, t.last_n,
              t.with_timings, t.chunks, r.body ? r.body : "-");
    http_free(&r);
    const char *bad[][2] = {
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 0}", "max_tokens"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"dynatemp_range\": -1}", "dynatemp_range"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"return_progress\": 1}", "return_progress"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        int st;
        cJSON *j = post(port, "/v1/chat/completions", bad[k][0], &st);
        CHECK_MSG(st == 400 && error_param(j) && !strcmp(error_param(j), bad[k][1]), "%s: %d", bad[k][1], st);
        cJSON_Delete(j);
    }
    server_stop(s);
}
