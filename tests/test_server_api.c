/* test_server_api.c — the endpoints beyond chat and completions (group `server`), in-process on m1:
 * /tokenize, /detokenize, /apply-template, /props, /slots, /metrics (Prometheus text, --metrics), CORS
 * (--cors-origin), logprobs / top_logprobs in chat and completions, and the Responses API
 * (/v1/responses: output items, streamed events, tools, previous_response_id, GET by id). The Node suite
 * (tests/server/responses.mjs) checks the Responses API with the official openai client. */
#include "test.h"
#include "test_http.h"

#include "deltallm.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static Server *start(bool metrics, const char *cors) {
    ServerConfig c;
    test_server_config(&c);
    c.metrics = metrics;
    c.cors_origin = cors;
    return test_server_start(&c);
}

static cJSON *post_json(int port, const char *path, const char *body, int *status) {
    HttpResp r = http(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_ParseWithLength(r.body, r.body_len) : NULL;
    http_free(&r);
    return j;
}

static const cJSON *at(const cJSON *o, const char *path) {
    /* "a.b.0.c": members and array indexes */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *part = strtok(buf, "."); part && v; part = strtok(NULL, "."))
        v = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, atoi(part)) : cJSON_GetObjectItemCaseSensitive(v, part);
    return v;
}

/* ------------------------------------------------------------------------------------------ utilities */

TEST(server, tokenize_detokenize_apply_template) {
    Server *s = start(false, NULL);
    REQUIRE(s);
    int port = server_port(s), st;
    cJSON *j = post_json(port, "/tokenize", "{\"content\": \"Hello world <|im_start|>\"}", &st);
    const cJSON *toks = at(j, "tokens");
    CHECK_MSG(st == 200 && cJSON_GetArraySize(toks) > 2, "tokenize: %d", st);
    char *ids = cJSON_PrintUnformatted(toks);
    bool special_one = cJSON_GetArraySize(toks) >= 1 && cJSON_GetArrayItem(toks, cJSON_GetArraySize(toks) - 1)->valueint == 1001;
    CHECK_MSG(special_one, "<|im_start|> is one control token with parse_special (default): %s", ids);
    cJSON_Delete(j);
    char body[2048];
    snprintf(body, sizeof body, "{\"tokens\": %s}", ids);
    j = post_json(port, "/detokenize", body, &st);
    CHECK_MSG(st == 200 && !strcmp(cJSON_GetStringValue(at(j, "content")), "Hello world <|im_start|>"), "detokenize: %s",
              cJSON_GetStringValue(at(j, "content")));
    cJSON_Delete(j);
    free(ids);
    j = post_json(port, "/tokenize", "{\"content\": \"h\\u00e9\", \"with_pieces\": true, \"parse_special\": false}", &st);
    const cJSON *first = at(j, "tokens.0");
    CHECK(st == 200 && cJSON_IsNumber(at(first, "id")) && at(first, "piece"));
    cJSON_Delete(j);
    j = post_json(port, "/tokenize", "{\"content\": 5}", &st);
    CHECK(st == 400);
    cJSON_Delete(j);
    j = post_json(port, "/detokenize", "{\"tokens\": [1, 99999]}", &st);
    CHECK(st == 400);
    cJSON_Delete(j);
    j = post_json(port, "/apply-template",
                  "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": "
                  "\"Hi\"}], \"chat_template_kwargs\": {\"enable_thinking\": false}}",
                  &st);
    const char *prompt = cJSON_GetStringValue(at(j, "prompt"));
    CHECK_MSG(st == 200 && prompt && !strcmp(prompt, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                                                     "<|im_start|>assistant\n<think>\n\n</think>\n\n"),
              "apply-template: %s", prompt ? prompt : "");
    cJSON_Delete(j);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ props, slots */

typedef struct Bg {
    int port;
    HttpResp r;
} Bg;

static void *long_request(void *arg) {
    Bg *b = arg;
    b->r = http(b->port, "POST", "/v1/completions", NULL,
                "{\"prompt\": \"tell\", \"max_tokens\": 300, \"ignore_eos\": true, \"stream\": true}");
    return NULL;
}

TEST(server, props_slots_metrics) {
    Server *s = start(true, NULL);
    REQUIRE(s);
    int port = server_port(s);
    HttpResp r = http(port, "GET", "/props", NULL, NULL);
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    CHECK(r.status == 200 && at(j, "default_generation_settings.n_ctx")->valueint == 1024);
    CHECK(at(j, "total_slots")->valueint == 2 && !strcmp(cJSON_GetStringValue(at(j, "chat_format")), "qwen35"));
    CHECK(cJSON_IsString(at(j, "chat_template")) || cJSON_IsNull(at(j, "chat_template")));
    cJSON_Delete(j);
    http_free(&r);
    /* a slot busy with a long stream shows in /slots */
    Bg bg = {port, {0}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, long_request, &bg) == 0);
    bool seen = false;
    for (int i = 0; i < 400 && !seen; i++) {
        r = http(port, "GET", "/slots", NULL, NULL);
        j = r.body ? cJSON_Parse(r.body) : NULL;
        for (const cJSON *sl = j ? j->child : NULL; sl; sl = sl->next)
            if (cJSON_IsTrue(at(sl, "is_processing")) && at(sl, "n_decoded")->valueint > 0 &&
                at(sl, "n_prompt_tokens")->valueint > 0)
                seen = true;
        CHECK(cJSON_GetArraySize(j) == 2);
        cJSON_Delete(j);
        http_free(&r);
        usleep(5000);
    }
    CHECK_MSG(seen, "/slots never showed the running request");
    pthread_join(th, NULL);
    CHECK(bg.r.status == 200);
    http_free(&bg.r);
    r = http(port, "POST", "/v1/chat/completions", NULL,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4, "
             "\"ignore_eos\": true}"); /* a random-weight model may draw its end token early: exactly 4 */
    CHECK(r.status == 200);
    http_free(&r);
    r = http(port, "GET", "/v1/nope", NULL, NULL);
    http_free(&r);
    /* every sample line is NAME{LABELS} VALUE with a number; the counters catch up once the slot is released */
    int samples = 0, bad = 0;
    double gen = -1, chats = -1;
    for (int tries = 0; tries < 100 && gen < 304; tries++) {
        if (tries) usleep(10000);
        r = http(port, "GET", "/metrics", NULL, NULL);
        CHECK_MSG(r.status == 200 && r.head && strstr(r.head, "text/plain; version=0.0.4"), "metrics: %d", r.status);
        samples = bad = 0;
        for (char *line = r.body ? strtok(r.body, "\n") : NULL; line; line = strtok(NULL, "\n")) {
            if (line[0] == '#') continue;
            char name[200];
            double v;
            if (sscanf(line, "%199s %lf", name, &v) != 2 || strncmp(name, "deltallm_", 9) != 0) bad++;
            samples++;
            if (!strcmp(name, "deltallm_generated_tokens_total")) gen = v;
            if (!strcmp(name, "deltallm_requests_total{endpoint=\"chat\"}")) chats = v;
        }
        http_free(&r);
    }
    CHECK_MSG(samples > 20 && bad == 0, "%d samples, %d malformed", samples, bad);
    CHECK_MSG(gen >= 304 && chats == 1, "generated %g, chat requests %g", gen, chats);
    server_stop(s);
    s = start(false, NULL);
    REQUIRE(s);
    r = http(server_port(s), "GET", "/metrics", NULL, NULL);
    CHECK(r.status == 501 && is_error_object(r.body) && strstr(r.body, "--metrics"));
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ CORS */

static bool has_header(const HttpResp *r, const char *line) { return r->head && strstr(r->head, line) != NULL; }

TEST(server, cors_origins) {
    Server *s = start(false, "http://a.example, http://b.example");
    REQUIRE(s);
    int port = server_port(s);
    HttpResp r = http(port, "OPTIONS", "/v1/chat/completions",
                      "Origin: http://a.example\r\nAccess-Control-Request-Method: POST\r\n"
                      "Access-Control-Request-Headers: authorization, content-type\r\n",
                      NULL);
    CHECK_MSG(r.status == 204 && has_header(&r, "Access-Control-Allow-Origin: http://a.example") &&
                  has_header(&r, "Access-Control-Allow-Methods: GET, HEAD, POST, OPTIONS") &&
                  has_header(&r, "Access-Control-Allow-Headers: authorization, content-type"),
              "preflight: %d\n%s", r.status, r.head ? r.head : "");
    http_free(&r);
    r = http(port, "GET", "/v1/models", "Origin: http://b.example\r\n", NULL);
    CHECK(r.status == 200 && has_header(&r, "Access-Control-Allow-Origin: http://b.example") && has_header(&r, "Vary: Origin"));
    http_free(&r);
    r = http(port, "GET", "/v1/models", "Origin: http://evil.example\r\n", NULL);
    CHECK(r.status == 200 && !has_header(&r, "Access-Control-Allow-Origin"));
    http_free(&r);
    r = http(port, "OPTIONS", "/v1/models", "Origin: http://evil.example\r\nAccess-Control-Request-Method: GET\r\n", NULL);
    CHECK(r.status == 405 && !has_header(&r, "Access-Control-Allow-Origin"));
    http_free(&r);
    server_stop(s);
    /* "*", also on errors and streams; without --cors-origin no header at all */
    s = start(false, "*");
    REQUIRE(s);
    r = http(server_port(s), "POST", "/v1/completions", "Origin: http://x.example\r\n",
             "{\"prompt\": \"a\", \"max_tokens\": 2, \"stream\": true}");
    CHECK(r.status == 200 && has_header(&r, "Access-Control-Allow-Origin: *"));
    http_free(&r);
    r = http(server_port(s), "POST", "/v1/completions", "Origin: http://x.example\r\n", "{");
    CHECK(r.status == 400 && has_header(&r, "Access-Control-Allow-Origin: *"));
    http_free(&r);
    server_stop(s);
    s = start(false, NULL);
    REQUIRE(s);
    r = http(server_port(s), "GET", "/health", "Origin: http://x.example\r\n", NULL);
    CHECK(r.status == 200 && !has_header(&r, "Access-Control-Allow-Origin"));
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ logprobs */

/* Checks one chat logprobs entry; returns false when malformed. */
static bool entry_ok(const cJSON *e, int top) {
    const cJSON *lp = at(e, "logprob"), *tops = at(e, "top_logprobs");
    if (!cJSON_IsString(at(e, "token")) || !cJSON_IsNumber(lp) || lp->valuedouble > 1e-6 || !cJSON_IsArray(at(e, "bytes")))
        return false;
    if (cJSON_GetArraySize(tops) != top) return false;
    double prev = 1;
    for (const cJSON *t = tops->child; t; t = t->next) {
        double v = at(t, "logprob")->valuedouble;
        if (v > prev + 1e-9 || v > 1e-6) return false;
        prev = v;
    }
    return true;
}

TEST(server, logprobs_in_openai_shape) {
    Server *s = start(false, NULL);
    REQUIRE(s);
    int port = server_port(s), st;
    cJSON *j = post_json(port, "/v1/chat/completions",
                         "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 8, \"temperature\": 0, "
                         "\"logprobs\": true, \"top_logprobs\": 3, \"ignore_eos\": true}",
                         &st);
    const cJSON *content = at(j, "choices.0.logprobs.content");
    int n = cJSON_GetArraySize(content), bad = 0, argmax = 0;
    for (const cJSON *e = content ? content->child : NULL; e; e = e->next) {
        bad += !entry_ok(e, 3);
        /* greedy: the chosen token is the most likely one */
        argmax += fabs(at(e, "logprob")->valuedouble - at(e, "top_logprobs.0.logprob")->valuedouble) < 1e-5;
    }
    CHECK_MSG(st == 200 && n == at(j, "usage.completion_tokens")->valueint && n == 8 && bad == 0 && argmax == n,
              "chat logprobs: %d entries, %d malformed, %d argmax", n, bad, argmax);
    cJSON_Delete(j);
    /* streamed: entries ride on the chunks, as many as tokens */
    HttpResp r = http(port, "POST", "/v1/chat/completions", NULL,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 6, \"logprobs\": true, "
                      "\"ignore_eos\": true, \"stream\": true, \"chat_template_kwargs\": {\"enable_thinking\": false}}");
    int streamed = 0;
    for (char *ev = r.body ? strstr(r.body, "data: {") : NULL; ev; ev = strstr(ev + 1, "data: {")) {
        char *end = strstr(ev, "\n\n");
        cJSON *c = end ? cJSON_ParseWithLength(ev + 6, (size_t)(end - ev - 6)) : NULL;
        const cJSON *lp = at(c, "choices.0.logprobs.content");
        for (const cJSON *e = lp ? lp->child : NULL; e; e = e->next) streamed += entry_ok(e, 0);
        cJSON_Delete(c);
    }
    CHECK_MSG(streamed == 6, "streamed logprobs entries: %d", streamed);
    http_free(&r);
    /* legacy completions */
    j = post_json(port, "/v1/completions", "{\"prompt\": \"Once\", \"max_tokens\": 5, \"logprobs\": 2, \"ignore_eos\": true}",
                  &st);
    const cJSON *lp = at(j, "choices.0.logprobs");
    int nt = cJSON_GetArraySize(at(lp, "tokens"));
    CHECK_MSG(st == 200 && nt == 5 && cJSON_GetArraySize(at(lp, "token_logprobs")) == 5 &&
                  cJSON_GetArraySize(at(lp, "top_logprobs")) == 5 && cJSON_GetArraySize(at(lp, "text_offset")) == 5,
              "completion logprobs: %d tokens", nt);
    CHECK(cJSON_GetArraySize(at(lp, "top_logprobs.0")) >= 1 && cJSON_GetArraySize(at(lp, "top_logprobs.0")) <= 2);
    CHECK(at(lp, "text_offset.0")->valueint == 0);
    cJSON_Delete(j);
    /* without logprobs the field is null; out of range is refused */
    j = post_json(port, "/v1/completions", "{\"prompt\": \"Once\", \"max_tokens\": 1}", &st);
    CHECK(cJSON_IsNull(at(j, "choices.0.logprobs")));
    cJSON_Delete(j);
    j = post_json(port, "/v1/chat/completions",
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"top_logprobs\": 2}", &st);
    CHECK(st == 400);
    cJSON_Delete(j);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ Responses */

TEST(server, responses_api) {
    Server *s = start(false, NULL);
    REQUIRE(s);
    int port = server_port(s), st;
    cJSON *j = post_json(port, "/v1/responses",
                         "{\"input\": \"Hello\", \"instructions\": \"Be brief.\", \"max_output_tokens\": 12, "
                         "\"temperature\": 0, \"metadata\": {\"k\": \"v\"}}",
                         &st);
    CHECK_MSG(st == 200 && !strcmp(cJSON_GetStringValue(at(j, "object")), "response"), "status %d", st);
    const char *id = cJSON_GetStringValue(at(j, "id"));
    CHECK(id && !strncmp(id, "resp_", 5));
    const cJSON *out = at(j, "output");
    bool reasoning = false, message = false;
    for (const cJSON *it = out ? out->child : NULL; it; it = it->next) {
        const char *t = cJSON_GetStringValue(at(it, "type"));
        reasoning |= t && !strcmp(t, "reasoning") && cJSON_IsString(at(it, "content.0.text"));
        message |= t && !strcmp(t, "message") && !strcmp(cJSON_GetStringValue(at(it, "content.0.type")), "output_text");
    }
    CHECK_MSG(reasoning && message, "output items: reasoning %d, message %d", reasoning, message);
    CHECK(!strcmp(cJSON_GetStringValue(at(j, "status")), "incomplete") &&
          !strcmp(cJSON_GetStringValue(at(j, "incomplete_details.reason")), "max_output_tokens"));
    CHECK(at(j, "usage.output_tokens")->valueint == 12 && at(j, "usage.input_tokens")->valueint > 0);
    CHECK(!strcmp(cJSON_GetStringValue(at(j, "metadata.k")), "v") && !strcmp(cJSON_GetStringValue(at(j, "instructions")), "Be brief."));
    int first_input = at(j, "usage.input_tokens")->valueint;
    char saved[64];
    snprintf(saved, sizeof saved, "%s", id ? id : "");
    cJSON_Delete(j);
    /* previous_response_id continues the conversation: the prompt holds the first turn and its answer */
    j = post_json(port, "/v1/responses", "{\"input\": \"And then?\", \"max_output_tokens\": 1}", &st);
    int alone = at(j, "usage.input_tokens") ? at(j, "usage.input_tokens")->valueint : -1;
    cJSON_Delete(j);
    char body[512];
    snprintf(body, sizeof body, "{\"input\": \"And then?\", \"previous_response_id\": \"%s\", \"max_output_tokens\": 4}",
             saved);
    j = post_json(port, "/v1/responses", body, &st);
    CHECK_MSG(st == 200 && at(j, "usage.input_tokens")->valueint >= alone + 10 && first_input > 0 &&
                  !strcmp(cJSON_GetStringValue(at(j, "previous_response_id")), saved),
              "second turn: %d, input %d", st, at(j, "usage.input_tokens") ? at(j, "usage.input_tokens")->valueint : -1);
    cJSON_Delete(j);
    HttpResp r = http(port, "GET", "/v1/responses/", NULL, NULL);
    http_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/v1/responses/%s", saved);
    r = http(port, "GET", path, NULL, NULL);
    CHECK(r.status == 200 && strstr(r.body, saved));
    http_free(&r);
    j = post_json(port, "/v1/responses", "{\"input\": \"x\", \"previous_response_id\": \"resp_nope\"}", &st);
    CHECK(st == 400 && !strcmp(cJSON_GetStringValue(at(j, "error.code")), "previous_response_not_found"));
    cJSON_Delete(j);
    /* store: false is not kept */
    j = post_json(port, "/v1/responses", "{\"input\": \"x\", \"store\": false, \"max_output_tokens\": 1}", &st);
    snprintf(path, sizeof path, "/v1/responses/%s", cJSON_GetStringValue(at(j, "id")));
    cJSON_Delete(j);
    r = http(port, "GET", path, NULL, NULL);
    CHECK(r.status == 404);
    http_free(&r);
    /* a forced function call, then its output sent back */
    const char *tools = "\"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"type\": "
                        "\"object\", \"properties\": {\"city\": {\"enum\": [\"Paris\", \"Lima\"]}}, \"required\": [\"city\"]}}]";
    snprintf(body, sizeof body, "{\"input\": \"Weather in Paris?\", %s, \"tool_choice\": \"required\"}", tools);
    j = post_json(port, "/v1/responses", body, &st);
    const cJSON *call = NULL;
    for (const cJSON *it = at(j, "output") ? at(j, "output")->child : NULL; it; it = it->next)
        if (!strcmp(cJSON_GetStringValue(at(it, "type")), "function_call")) call = it;
    CHECK_MSG(st == 200 && call && !strcmp(cJSON_GetStringValue(at(call, "name")), "get_weather") &&
                  strstr(cJSON_GetStringValue(at(call, "arguments")), "\"city\""),
              "function call: %d", st);
    char input[1024];
    snprintf(input, sizeof input,
             "{\"input\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}, {\"type\": \"function_call\", "
             "\"call_id\": \"%s\", \"name\": \"get_weather\", \"arguments\": %s}, {\"type\": \"function_call_output\", "
             "\"call_id\": \"%s\", \"output\": \"21 C\"}], %s, \"max_output_tokens\": 3}",
             call ? cJSON_GetStringValue(at(call, "call_id")) : "c", "\"{\\\"city\\\": \\\"Paris\\\"}\"",
             call ? cJSON_GetStringValue(at(call, "call_id")) : "c", tools);
    cJSON_Delete(j);
    j = post_json(port, "/v1/responses", input, &st);
    CHECK_MSG(st == 200, "tool output turn: %d", st);
    cJSON_Delete(j);
    /* streamed: response.created first, sequence numbers in order, response.completed / incomplete last */
    r = http(port, "POST", "/v1/responses", NULL, "{\"input\": \"Hi\", \"stream\": true, \"max_output_tokens\": 10}");
    int seq = 0, bad_seq = 0;
    char first[64] = "", last[64] = "";
    for (char *ev = r.body ? strstr(r.body, "event: ") : NULL; ev; ev = strstr(ev + 1, "event: ")) {
        char *data = strstr(ev, "data: "), *end = data ? strstr(data, "\n\n") : NULL;
        cJSON *e = end ? cJSON_ParseWithLength(data + 6, (size_t)(end - data - 6)) : NULL;
        const char *type = cJSON_GetStringValue(at(e, "type"));
        if (!first[0]) snprintf(first, sizeof first, "%s", type ? type : "?");
        snprintf(last, sizeof last, "%s", type ? type : "?");
        bad_seq += !at(e, "sequence_number") || at(e, "sequence_number")->valueint != seq++;
        cJSON_Delete(e);
    }
    CHECK_MSG(r.status == 200 && !strcmp(first, "response.created") &&
                  (!strcmp(last, "response.incomplete") || !strcmp(last, "response.completed")) && !bad_seq &&
                  seq > 8,
              "stream: %d events, first %s, last %s, %d out of order", seq, first, last, bad_seq);
    http_free(&r);
    /* refused: unknown fields, unsupported items and tools */
    const char *bad[] = {"{\"input\": \"x\", \"frobnicate\": 1}", "{}",
                         "{\"input\": [{\"type\": \"web_search_call\"}]}",
                         "{\"input\": \"x\", \"tools\": [{\"type\": \"web_search\"}]}",
                         "{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", \"image_url\": \"x\"}]}]}",
                         "{\"input\": \"x\", \"max_output_tokens\": 0}", "{\"input\": \"x\", \"background\": true}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        j = post_json(port, "/v1/responses", bad[i], &st);
        CHECK_MSG(st == 400 && cJSON_IsString(at(j, "error.message")), "case %zu: %d", i, st);
        cJSON_Delete(j);
    }
    j = post_json(port, "/v1/responses", "{\"input\": \"x\", \"max_output_tokens\": 0}", &st);
    CHECK(!strcmp(cJSON_GetStringValue(at(j, "error.param")), "max_output_tokens"));
    cJSON_Delete(j);
    server_stop(s);
}
