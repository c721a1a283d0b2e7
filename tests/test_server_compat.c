/* test_server_compat.c — what llama-server's users send (issue 30), group `server_compat`: its request fields
 * (n_predict, id_slot, include_stop_str_in_output, skip_special_tokens, reasoning_format), its native POST
 * /completion endpoint, a list of API keys, slot save / restore / erase, and TLS with a certificate made here
 * by openssl (checked with curl). In-process on the m1 test model. */
#include "test.h"
#include "test_http.h"

#include "server/server.h"
#include "server/util.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static cJSON *body_json(const HttpResp *r) { return r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL; }

static const char *str_at(const cJSON *o, const char *a, int i, const char *b, const char *c) {
    const cJSON *v = cJSON_GetObjectItem(o, a);
    if (i >= 0) v = cJSON_GetArrayItem(v, i);
    if (b) v = cJSON_GetObjectItem(v, b);
    if (c) v = cJSON_GetObjectItem(v, c);
    return cJSON_GetStringValue(v);
}

static double num(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItem(o, a);
    if (b) v = cJSON_GetObjectItem(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

/* A completion's text (choices[0].text) with a body; malloc'd ("" when missing). */
static char *completion_text(int port, const char *body, int *status) {
    HttpResp r = http(port, "POST", "/v1/completions", NULL, body);
    cJSON *j = body_json(&r);
    const char *t = str_at(j, "choices", 0, "text", NULL);
    char *out = strdup(t ? t : "");
    if (status) *status = r.status;
    cJSON_Delete(j);
    http_free(&r);
    return out;
}

/* ------------------------------------------------------------------------------------------ fields */

TEST(server_compat, request_fields) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    /* n_predict is max_tokens */
    HttpResp r = http(port, "POST", "/v1/completions", NULL, "{\"prompt\": \"a\", \"n_predict\": 3, \"ignore_eos\": true}");
    cJSON *j = body_json(&r);
    CHECK_MSG(r.status == 200 && num(j, "usage", "completion_tokens") == 3, "n_predict 3: %d %s", r.status,
              r.body ? r.body : "");
    cJSON_Delete(j);
    http_free(&r);
    r = http(port, "POST", "/v1/completions", NULL, "{\"prompt\": \"a\", \"n_predict\": 3, \"max_tokens\": 2}");
    CHECK(r.status == 400 && strstr(r.body, "n_predict"));
    http_free(&r);
    r = http(port, "POST", "/v1/chat/completions", NULL,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"n_predict\": 2, \"ignore_eos\": true}");
    j = body_json(&r);
    CHECK_MSG(r.status == 200 && num(j, "usage", "completion_tokens") == 2, "chat n_predict: %d", r.status);
    cJSON_Delete(j);
    http_free(&r);
    /* include_stop_str_in_output: the stop string ends the text instead of being cut */
    int st = 0;
    char *free_text = completion_text(port, "{\"prompt\": \"The river\", \"max_tokens\": 24, \"temperature\": 0, "
                                            "\"ignore_eos\": true}", &st);
    REQUIRE(st == 200);
    size_t n = strlen(free_text);
    if (n >= 6) {
        char stop[8] = {0};
        memcpy(stop, free_text + n / 2, 3); /* three bytes from the middle */
        char *stop_json = NULL;
        cJSON *sj = cJSON_CreateString(stop);
        stop_json = cJSON_PrintUnformatted(sj);
        cJSON_Delete(sj);
        char body[512];
        snprintf(body, sizeof body, "{\"prompt\": \"The river\", \"max_tokens\": 24, \"temperature\": 0, "
                                    "\"ignore_eos\": true, \"stop\": %s%s}", stop_json,
                 ", \"include_stop_str_in_output\": true");
        char *with = completion_text(port, body, &st);
        snprintf(body, sizeof body, "{\"prompt\": \"The river\", \"max_tokens\": 24, \"temperature\": 0, "
                                    "\"ignore_eos\": true, \"stop\": %s}", stop_json);
        char *without = completion_text(port, body, NULL);
        size_t nw = strlen(with), nwo = strlen(without), ns = strlen(stop);
        CHECK_MSG(st == 200 && nw == nwo + ns && !strncmp(with, without, nwo) && !strcmp(with + nwo, stop) &&
                      !strstr(without, stop),
                  "stop '%s': with '%s', without '%s'", stop, with, without);
        free(with);
        free(without);
        free(stop_json);
    } else {
        test_note("greedy text too short for the stop test: '%s'", free_text);
    }
    free(free_text);
    /* skip_special_tokens: false renders a control token as its text */
    r = http(port, "POST", "/tokenize", NULL, "{\"content\": \"<|im_start|>\", \"parse_special\": true}");
    j = body_json(&r);
    const cJSON *ids = cJSON_GetObjectItem(j, "tokens");
    int ctl = cJSON_GetArraySize(ids) == 1 ? cJSON_GetArrayItem(ids, 0)->valueint : -1;
    cJSON_Delete(j);
    http_free(&r);
    REQUIRE_MSG(ctl >= 0, "<|im_start|> is not one token");
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\": \"a\", \"max_tokens\": 2, \"logit_bias\": {\"%d\": 100}%s}", ctl,
             ", \"skip_special_tokens\": false");
    char *shown = completion_text(port, body, &st);
    snprintf(body, sizeof body, "{\"prompt\": \"a\", \"max_tokens\": 2, \"logit_bias\": {\"%d\": 100}}", ctl);
    char *hidden = completion_text(port, body, NULL);
    CHECK_MSG(st == 200 && strstr(shown, "<|im_start|>") && !strstr(hidden, "<|im_start|>"),
              "skip_special_tokens false: '%s', default: '%s'", shown, hidden);
    free(shown);
    free(hidden);
    /* reasoning_format: "none" leaves the text unparsed in content */
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 24, "
                       "\"temperature\": 0, \"ignore_eos\": true%s}";
    snprintf(body, sizeof body, chat, "");
    r = http(port, "POST", "/v1/chat/completions", NULL, body);
    j = body_json(&r);
    const char *reason = str_at(j, "choices", 0, "message", "reasoning_content");
    char *parsed_reason = strdup(reason ? reason : "");
    cJSON_Delete(j);
    http_free(&r);
    snprintf(body, sizeof body, chat, ", \"reasoning_format\": \"none\"");
    r = http(port, "POST", "/v1/chat/completions", NULL, body);
    j = body_json(&r);
    const char *content = str_at(j, "choices", 0, "message", "content");
    CHECK_MSG(r.status == 200 && content && !str_at(j, "choices", 0, "message", "reasoning_content") &&
                  (!parsed_reason[0] || strstr(content, parsed_reason)),
              "reasoning_format none: %s (parsed reasoning '%s')", r.body ? r.body : "", parsed_reason);
    cJSON_Delete(j);
    http_free(&r);
    free(parsed_reason);
    snprintf(body, sizeof body, chat, ", \"reasoning_format\": \"deepseek\", \"stream\": true");
    r = http(port, "POST", "/v1/chat/completions", NULL, body);
    CHECK(r.status == 200);
    http_free(&r);
    snprintf(body, sizeof body, chat, ", \"reasoning_format\": \"none\", \"stream\": true");
    r = http(port, "POST", "/v1/chat/completions", NULL, body);
    CHECK_MSG(r.status == 200 && r.body && !strstr(r.body, "reasoning_content") && strstr(r.body, "[DONE]"),
              "stream none: %.200s", r.body ? r.body : "");
    http_free(&r);
    snprintf(body, sizeof body, chat, ", \"reasoning_format\": \"bogus\"");
    r = http(port, "POST", "/v1/chat/completions", NULL, body);
    CHECK(r.status == 400 && strstr(r.body, "reasoning_format"));
    http_free(&r);
    /* id_slot: the job runs in that slot; a slot the server lacks is refused */
    r = http(port, "POST", "/completion", NULL, "{\"prompt\": \"a\", \"n_predict\": 1, \"id_slot\": 1}");
    j = body_json(&r);
    CHECK_MSG(r.status == 200 && num(j, "id_slot", NULL) == 1, "id_slot 1: %s", r.body ? r.body : "");
    cJSON_Delete(j);
    http_free(&r);
    r = http(port, "POST", "/v1/completions", NULL, "{\"prompt\": \"a\", \"id_slot\": 2}");
    CHECK(r.status == 400 && strstr(r.body, "id_slot"));
    http_free(&r);
    server_stop(s);
}

typedef struct Pinned {
    int port;
    int status;
    double id_slot;
} Pinned;

static void *pinned_request(void *arg) {
    Pinned *p = arg;
    HttpResp r = http(p->port, "POST", "/completion", NULL, "{\"prompt\": \"b\", \"n_predict\": 1, \"id_slot\": 0}");
    cJSON *j = body_json(&r);
    p->status = r.status;
    p->id_slot = num(j, "id_slot", NULL);
    cJSON_Delete(j);
    http_free(&r);
    return NULL;
}

TEST(server_compat, id_slot_waits_for_its_slot) {
    ServerConfig c;
    test_server_config(&c);
    c.ctx_size = 4096;
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    /* slot 0 busy with a long stream */
    int fd = http_connect(port);
    REQUIRE(fd >= 0);
    http_send_request(fd, "POST", "/completion", NULL,
                      "{\"prompt\": \"a\", \"n_predict\": 4000, \"ignore_eos\": true, \"stream\": true, \"id_slot\": 0}");
    char first[64];
    REQUIRE(recv(fd, first, sizeof first, 0) > 0);
    /* a job pinned to slot 0 waits; one that is not goes ahead into slot 1 */
    Pinned p = {.port = port, .status = -1};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, pinned_request, &p) == 0);
    usleep(100000);
    HttpResp r = http(port, "POST", "/completion", NULL, "{\"prompt\": \"c\", \"n_predict\": 1}");
    cJSON *j = body_json(&r);
    CHECK_MSG(r.status == 200 && num(j, "id_slot", NULL) == 1, "unpinned: %d %s", r.status, r.body ? r.body : "");
    cJSON_Delete(j);
    http_free(&r);
    CHECK_MSG(p.status == -1, "the pinned job did not wait for slot 0 (status %d)", p.status);
    close(fd); /* the long stream ends: slot 0 is free */
    pthread_join(th, NULL);
    CHECK_MSG(p.status == 200 && p.id_slot == 0, "pinned: %d in slot %g", p.status, p.id_slot);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ /completion */

TEST(server_compat, native_completion_endpoint) {
    ServerConfig c;
    test_server_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    const char *req = "{\"prompt\": \"The river\", \"n_predict\": 6, \"temperature\": 0, \"ignore_eos\": true%s}";
    char body[300];
    snprintf(body, sizeof body, req, "");
    HttpResp r = http(port, "POST", "/completion", NULL, body);
    cJSON *j = body_json(&r);
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(j, "content"));
    CHECK_MSG(r.status == 200 && content && cJSON_IsTrue(cJSON_GetObjectItem(j, "stop")) &&
                  num(j, "tokens_predicted", NULL) == 6 && num(j, "tokens_evaluated", NULL) > 0 &&
                  !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "stop_type")), "limit") &&
                  num(j, "timings", "predicted_n") == 6,
              "/completion: %d %s", r.status, r.body ? r.body : "");
    char *whole = strdup(content ? content : "");
    cJSON_Delete(j);
    http_free(&r);
    /* streamed: pieces with stop false, one final with stop true, no [DONE]; the same text */
    snprintf(body, sizeof body, req, ", \"stream\": true");
    r = http(port, "POST", "/completion", NULL, body);
    CHECK(r.status == 200 && r.head && strstr(r.head, "text/event-stream"));
    SBuf text = {0};
    int finals = 0, pieces = 0;
    for (const char *p = r.body; p && (p = strstr(p, "data: ")); p += 6) {
        const char *end = strstr(p, "\n\n");
        cJSON *ev = end ? cJSON_ParseWithLength(p + 6, (size_t)(end - p - 6)) : NULL;
        const char *piece = cJSON_GetStringValue(cJSON_GetObjectItem(ev, "content"));
        if (piece) sbuf_puts(&text, piece);
        if (cJSON_IsTrue(cJSON_GetObjectItem(ev, "stop"))) finals++;
        else pieces++;
        cJSON_Delete(ev);
    }
    CHECK_MSG(finals == 1 && pieces >= 1 && !strstr(r.body, "[DONE]") && text.p && !strcmp(text.p, whole),
              "stream: %d finals, %d pieces, '%s' vs '%s'", finals, pieces, text.p ? text.p : "", whole);
    sbuf_free(&text);
    free(whole);
    http_free(&r);
    /* a stop word: stop_type "word" and the word named */
    r = http(port, "POST", "/completion", NULL, "{\"prompt\": \"a b a b a b\", \"n_predict\": 30, \"stop\": [\" \"]}");
    j = body_json(&r);
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(j, "stop_type"));
    CHECK_MSG(r.status == 200 && type && (strcmp(type, "word") || !strcmp(str_at(j, "stopping_word", -1, NULL, NULL), " ")),
              "stop word: %s", r.body ? r.body : "");
    cJSON_Delete(j);
    http_free(&r);
    /* several prompts: an array of results */
    r = http(port, "POST", "/completion", NULL, "{\"prompt\": [\"a\", \"b\"], \"n_predict\": 2}");
    j = body_json(&r);
    CHECK_MSG(r.status == 200 && cJSON_IsArray(j) && cJSON_GetArraySize(j) == 2, "batch: %s", r.body ? r.body : "");
    cJSON_Delete(j);
    http_free(&r);
    r = http(port, "GET", "/completion", NULL, NULL);
    CHECK(r.status == 405);
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ keys */

TEST(server_compat, api_key_list) {
    ServerConfig c;
    test_server_config(&c);
    c.api_key = "k1, k2";
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    struct {
        const char *header;
        int status;
    } cases[] = {{"Authorization: Bearer k1\r\n", 200}, {"Authorization: Bearer k2\r\n", 200},
                 {"Authorization: Bearer k3\r\n", 401}, {"Authorization: Bearer k1, k2\r\n", 401},
                 {"Authorization: Bearer k\r\n", 401},  {NULL, 401}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        HttpResp r = http(port, "GET", "/v1/models", cases[i].header, NULL);
        CHECK_MSG(r.status == cases[i].status, "%s -> %d", cases[i].header ? cases[i].header : "(none)", r.status);
        http_free(&r);
    }
    server_stop(s);
    c.api_key = "k1,,k2";
    Err err = {{0}};
    CHECK(!(s = server_start(&c, &err)) && strstr(err.msg, "empty key"));
    server_stop(s);
    /* a key file: one key per line */
    char path[600];
    snprintf(path, sizeof path, "%s/keys.txt", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs("alpha\r\n\n  beta  \n", f);
    fclose(f);
    char *keys = NULL;
    REQUIRE(server_read_key_file(path, &keys, &err) == 0);
    CHECK_MSG(keys && !strcmp(keys, "alpha,beta"), "keys '%s'", keys ? keys : "");
    free(keys);
}

/* ------------------------------------------------------------------------------------------ slots */

static cJSON *slot_call(int port, int id, const char *action, const char *body, int *status) {
    char path[96];
    snprintf(path, sizeof path, "/slots/%d?action=%s", id, action);
    HttpResp r = http(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *j = body_json(&r);
    if (r.status != 200) test_note("%s %s -> %d %s", path, body ? body : "", r.status, r.body ? r.body : "");
    http_free(&r);
    return j;
}

TEST(server_compat, slot_save_restore_erase) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/slots", test_tmpdir());
    REQUIRE(mkdir(dir, 0700) == 0);
    ServerConfig c;
    test_server_config(&c);
    c.no_cache = true; /* what a job finds cached comes from the restored slot only */
    c.slot_save_path = dir;
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    const char *prompt = "{\"prompt\": \"Once upon a time there was a river\", \"n_predict\": %d, \"temperature\": 0, "
                         "\"ignore_eos\": true, \"id_slot\": 0}";
    char body[300];
    snprintf(body, sizeof body, prompt, 1);
    HttpResp r = http(port, "POST", "/completion", NULL, body);
    cJSON *j = body_json(&r);
    int n_prompt = (int)num(j, "tokens_evaluated", NULL);
    CHECK(r.status == 200 && n_prompt > 3);
    cJSON_Delete(j);
    http_free(&r);
    /* a fresh run of the longer answer, for comparison */
    snprintf(body, sizeof body, prompt, 8);
    r = http(port, "POST", "/completion", NULL, body);
    j = body_json(&r);
    char *fresh = strdup(cJSON_GetStringValue(cJSON_GetObjectItem(j, "content")) ?: "");
    cJSON_Delete(j);
    http_free(&r);
    /* the run of 1 token again, then save: the slot holds the prompt (the sampled token is not evaluated) */
    snprintf(body, sizeof body, prompt, 1);
    r = http(port, "POST", "/completion", NULL, body);
    http_free(&r);
    int st;
    j = slot_call(port, 0, "save", "{\"filename\": \"one.slot\"}", &st);
    CHECK_MSG(st == 200 && num(j, "n_saved", NULL) == n_prompt && num(j, "n_written", NULL) > 0 &&
                  num(j, "timings", "save_ms") >= 0,
              "save: %d, n_saved %g of %d", st, num(j, "n_saved", NULL), n_prompt);
    cJSON_Delete(j);
    char file[700];
    snprintf(file, sizeof file, "%s/one.slot", dir);
    struct stat sb;
    CHECK(stat(file, &sb) == 0 && sb.st_size > 64);
    j = slot_call(port, 0, "erase", NULL, &st);
    CHECK_MSG(st == 200 && num(j, "n_erased", NULL) == n_prompt, "erase: %d", st);
    cJSON_Delete(j);
    /* restore into slot 1, then a job there continues from it: the prompt is not computed again */
    j = slot_call(port, 1, "restore", "{\"filename\": \"one.slot\"}", &st);
    CHECK_MSG(st == 200 && num(j, "n_restored", NULL) == n_prompt && num(j, "n_read", NULL) == (double)sb.st_size,
              "restore: %d", st);
    cJSON_Delete(j);
    snprintf(body, sizeof body, "{\"prompt\": \"Once upon a time there was a river\", \"n_predict\": 8, "
                                "\"temperature\": 0, \"ignore_eos\": true, \"id_slot\": 1}");
    r = http(port, "POST", "/completion", NULL, body);
    j = body_json(&r);
    const char *resumed = cJSON_GetStringValue(cJSON_GetObjectItem(j, "content"));
    CHECK_MSG(r.status == 200 && num(j, "tokens_cached", NULL) == n_prompt && resumed && !strcmp(resumed, fresh),
              "after restore: cached %g of %d, '%s' vs fresh '%s'", num(j, "tokens_cached", NULL), n_prompt,
              resumed ? resumed : "", fresh);
    cJSON_Delete(j);
    http_free(&r);
    free(fresh);
    /* a prompt that does not start with the restored tokens computes from scratch */
    j = slot_call(port, 1, "restore", "{\"filename\": \"one.slot\"}", &st);
    cJSON_Delete(j);
    r = http(port, "POST", "/completion", NULL, "{\"prompt\": \"Something else\", \"n_predict\": 2, \"id_slot\": 1}");
    j = body_json(&r);
    CHECK(r.status == 200 && num(j, "tokens_cached", NULL) == 0);
    cJSON_Delete(j);
    http_free(&r);
    /* refusals: names, missing and foreign files, unknown actions and slots */
    const char *bad_names[] = {"{\"filename\": \"../x\"}", "{\"filename\": \".hidden\"}", "{\"filename\": \"a/b\"}", "{}",
                               NULL};
    for (int i = 0; i < 5; i++) {
        j = slot_call(port, 0, "save", bad_names[i], &st);
        CHECK_MSG(st == 400, "save %s: %d", bad_names[i] ? bad_names[i] : "(no body)", st);
        cJSON_Delete(j);
    }
    j = slot_call(port, 0, "restore", "{\"filename\": \"missing.slot\"}", &st);
    CHECK(st == 400);
    cJSON_Delete(j);
    snprintf(file, sizeof file, "%s/junk.slot", dir);
    FILE *f = fopen(file, "wb");
    REQUIRE(f);
    fputs("not a checkpoint at all, but long enough to hold a header of some sort.............", f);
    fclose(f);
    j = slot_call(port, 0, "restore", "{\"filename\": \"junk.slot\"}", &st);
    CHECK(st == 400);
    cJSON_Delete(j);
    j = slot_call(port, 0, "frobnicate", NULL, &st);
    CHECK(st == 400);
    cJSON_Delete(j);
    j = slot_call(port, 7, "erase", NULL, &st);
    CHECK(st == 404);
    cJSON_Delete(j);
    server_stop(s);
    /* without --slot-save-path: save and restore are refused, erase works */
    test_server_config(&c);
    REQUIRE((s = test_server_start(&c)));
    j = slot_call(server_port(s), 0, "save", "{\"filename\": \"x\"}", &st);
    CHECK(st == 501);
    cJSON_Delete(j);
    j = slot_call(server_port(s), 0, "erase", NULL, &st);
    CHECK(st == 200);
    cJSON_Delete(j);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ TLS */

TEST(server_compat, tls_with_a_fresh_certificate) {
    if (system("command -v openssl >/dev/null 2>&1 && command -v curl >/dev/null 2>&1") != 0) {
        test_skip("openssl or curl missing (.ci/run installs both)");
        return;
    }
    char key[600], cert[600], cmd[2000];
    snprintf(key, sizeof key, "%s/tls.key", test_tmpdir());
    snprintf(cert, sizeof cert, "%s/tls.crt", test_tmpdir());
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey rsa:2048 -nodes -keyout '%s' -out '%s' -days 1 -subj /CN=127.0.0.1 "
             "> /dev/null 2>&1",
             key, cert);
    REQUIRE_MSG(system(cmd) == 0, "openssl could not make a certificate");
    ServerConfig c;
    test_server_config(&c);
    c.ssl_key_file = key;
    c.ssl_cert_file = cert;
    Err err = {{0}};
    Server *s = server_start(&c, &err);
    REQUIRE_MSG(s, "TLS server: %s", err.msg);
    int port = server_port(s);
    snprintf(cmd, sizeof cmd,
             "curl -s --max-time 20 --cacert '%s' https://127.0.0.1:%d/v1/completions -H 'Content-Type: "
             "application/json' -d '{\"prompt\": \"a\", \"max_tokens\": 2}'",
             cert, port);
    FILE *p = popen(cmd, "r");
    REQUIRE(p);
    char out[4096] = {0};
    size_t n = fread(out, 1, sizeof out - 1, p);
    int rc = pclose(p);
    CHECK_MSG(rc == 0 && n > 0 && strstr(out, "\"text_completion\""), "curl over TLS: rc %d, '%s'", rc, out);
    /* a stream over TLS ends with [DONE] */
    snprintf(cmd, sizeof cmd,
             "curl -s -N --max-time 20 --cacert '%s' https://127.0.0.1:%d/v1/chat/completions -d '{\"messages\": "
             "[{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4, \"stream\": true}'",
             cert, port);
    REQUIRE((p = popen(cmd, "r")));
    memset(out, 0, sizeof out);
    n = fread(out, 1, sizeof out - 1, p);
    rc = pclose(p);
    CHECK_MSG(rc == 0 && strstr(out, "chat.completion.chunk") && strstr(out, "data: [DONE]"), "stream over TLS: '%s'",
              out);
    /* plain HTTP to the TLS port gets no HTTP answer */
    HttpResp r = http(port, "GET", "/health", NULL, NULL);
    CHECK_MSG(r.status == 0, "plain HTTP on the TLS port: %d", r.status);
    http_free(&r);
    server_stop(s);
    /* one file only, or a file that is not PEM: a clear refusal */
    c.ssl_cert_file = NULL;
    CHECK(!(s = server_start(&c, &err)) && strstr(err.msg, "both"));
    server_stop(s);
    c.ssl_cert_file = key; /* a key is not a certificate */
    c.ssl_key_file = cert;
    CHECK_MSG(!(s = server_start(&c, &err)) && strstr(err.msg, "TLS"), "bad PEM: %s", err.msg);
    server_stop(s);
}
