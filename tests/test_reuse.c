/* test_reuse.c — a conversation's next turn evaluates only what it adds (group `reuse`, issue 29):
 *   - the state a session holds after decoding a reply token by token is bit for bit the state a prefill of
 *     the same tokens gives (the default arithmetic is batch-invariant), so a checkpoint taken at the end of
 *     a reply is as good as a prefill: logits compared with memcmp, on the trained model and on m1;
 *   - the server keeps that checkpoint (and one right before the last turn header): with a ChatML template
 *     the next turn's cached_tokens covers the previous prompt and the reply; with Qwen3.5's (which writes a
 *     past reply without the empty think block the generation prompt had) it covers the previous prompt up to
 *     its last turn header; the warm turn's logprobs equal a cold one's exactly. */
#include "test.h"
#include "test_http.h"

#include "deltallm.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------ engine */

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = l[i] > l[b] ? i : b;
    return b;
}

static void decode_state_equals_prefill(const char *path) {
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = path;
    p.n_threads = 1;
    p.n_ctx = 256;
    p.n_seq_max = 2;
    DlError e = {{0}};
    DlEngine *en = dl_engine_open(&p, &e);
    REQUIRE_MSG(en, "%s: %s", path, e.msg);
    const int V = dl_engine_info(en)->n_vocab;
    enum { NP = 37, NG = 23, NS = 11 };
    int32_t all[NP + NG + NS];
    for (int i = 0; i < NP; i++) all[i] = (i * 7919 + 13) % (V - 8);
    DlSession *a = dl_session_new(en, &e), *b = dl_session_new(en, &e), *c = dl_session_new(en, &e);
    REQUIRE(a && b && c);
    /* a: prefill the prompt, then decode a greedy reply one token at a time, as the server does */
    REQUIRE(dl_session_eval(a, all, NP, &e) == 0);
    for (int i = 0; i < NG; i++) {
        all[NP + i] = argmax(dl_session_logits(a), V);
        REQUIRE(dl_decode_batch(&a, &all[NP + i], 1, &e) == 0);
    }
    /* the reply's end state, kept as a checkpoint and restored into c */
    size_t size = dl_session_snapshot_size(a);
    void *buf = malloc(size);
    REQUIRE(buf && dl_session_snapshot(a, buf, size, &e) == 0 && dl_session_restore(c, buf, size, &e) == 0);
    free(buf);
    /* the next turn: NS more tokens on the warm sessions, everything at once on the cold one */
    for (int i = 0; i < NS; i++) all[NP + NG + i] = (i * 104729 + 7) % (V - 8);
    REQUIRE(dl_session_eval(a, all + NP + NG, NS, &e) == 0);
    REQUIRE(dl_session_eval(c, all + NP + NG, NS, &e) == 0);
    REQUIRE(dl_session_eval(b, all, NP + NG + NS, &e) == 0);
    const float *la = dl_session_logits(a), *lb = dl_session_logits(b), *lc = dl_session_logits(c);
    CHECK_MSG(!memcmp(la, lb, sizeof(float) * (size_t)V), "%s: after a decoded reply the logits differ from a cold prefill", path);
    CHECK_MSG(!memcmp(lc, lb, sizeof(float) * (size_t)V), "%s: restored from the reply checkpoint, the logits differ", path);
    /* and the turn after that, decoded */
    int same = 1;
    for (int i = 0; i < 6; i++) {
        int32_t t = argmax(lb, V);
        DlSession *ss[2] = {a, b};
        int32_t tt[2] = {t, t};
        REQUIRE(dl_decode_batch(ss, tt, 2, &e) == 0);
        la = dl_session_logits(a), lb = dl_session_logits(b);
        same &= !memcmp(la, lb, sizeof(float) * (size_t)V);
    }
    CHECK_MSG(same, "%s: the decoded continuation differs", path);
    test_note("%s: %d prompt + %d decoded + %d new tokens: logits bit-identical to a cold prefill", path, NP, NG, NS);
    dl_session_free(a), dl_session_free(b), dl_session_free(c);
    dl_engine_close(en);
}

TEST(reuse, decoded_reply_state_is_prefill_state) {
    decode_state_equals_prefill("assets/tinybible-f16.gguf");
    decode_state_equals_prefill(test_data("models/m1-qwen3next-legacy-f32.gguf"));
}

/* ------------------------------------------------------------------------------------------ server */

static cJSON *post(int port, const char *path, const char *body) {
    HttpResp r = http(port, "POST", path, NULL, body);
    cJSON *j = r.status == 200 && r.body ? cJSON_ParseWithLength(r.body, r.body_len) : NULL;
    if (!j) test_note("%s: status %d: %.300s", path, r.status, r.body ? r.body : "");
    http_free(&r);
    return j;
}

/* The prompt tokens of a chat request's messages (rendered with /apply-template, then /tokenize). */
static cJSON *prompt_tokens(int port, const cJSON *msgs) {
    cJSON *req = cJSON_CreateObject();
    cJSON_AddItemToObject(req, "messages", cJSON_Duplicate(msgs, true));
    char *body = cJSON_PrintUnformatted(req);
    cJSON *t = post(port, "/apply-template", body);
    free(body);
    cJSON_Delete(req);
    if (!t) return NULL;
    cJSON *q = cJSON_CreateObject();
    cJSON_AddStringToObject(q, "content", cJSON_GetStringValue(cJSON_GetObjectItem(t, "prompt")));
    body = cJSON_PrintUnformatted(q);
    cJSON *ids = post(port, "/tokenize", body);
    free(body);
    cJSON_Delete(q), cJSON_Delete(t);
    cJSON *tok = ids ? cJSON_DetachItemFromObject(ids, "tokens") : NULL;
    cJSON_Delete(ids);
    return tok;
}

static cJSON *chat(int port, const cJSON *msgs, int max_tokens, bool cache, bool logprobs) {
    cJSON *req = cJSON_CreateObject();
    cJSON_AddItemToObject(req, "messages", cJSON_Duplicate(msgs, true));
    cJSON_AddNumberToObject(req, "max_tokens", max_tokens);
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddBoolToObject(req, "cache_prompt", cache);
    if (logprobs) {
        cJSON_AddBoolToObject(req, "logprobs", true);
        cJSON_AddNumberToObject(req, "top_logprobs", 5);
    }
    char *body = cJSON_PrintUnformatted(req);
    cJSON *j = post(port, "/v1/chat/completions", body);
    free(body);
    cJSON_Delete(req);
    return j;
}

static int usage(const cJSON *r, const char *what) {
    const cJSON *u = cJSON_GetObjectItem(r, "usage");
    if (!strcmp(what, "cached")) u = cJSON_GetObjectItem(u, "prompt_tokens_details"), what = "cached_tokens";
    const cJSON *v = cJSON_GetObjectItem(u, what);
    return cJSON_IsNumber(v) ? v->valueint : -1;
}

static void add_msg(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
}

static int common_prefix(const cJSON *a, const cJSON *b) {
    int n = 0;
    for (const cJSON *x = a ? a->child : NULL, *y = b ? b->child : NULL; x && y && x->valueint == y->valueint;
         x = x->next, y = y->next)
        n++;
    return n;
}

/* Two turns of a conversation on m1, turn 2 warm (after turn 1) and cold (cache_prompt false). */
static void two_turns(const char *format) {
    ServerConfig c;
    test_server_config(&c);
    c.cache_chunk = 64; /* the interval checkpoints alone would give 0 or 64 here */
    if (format) c.chat_format = format;
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    cJSON *msgs = cJSON_CreateArray();
    add_msg(msgs, "user", "Who are you? Tell me in a few words, please.");
    cJSON *r1 = chat(port, msgs, 12, true, false);
    REQUIRE(r1);
    const cJSON *msg = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r1, "choices"), 0), "message");
    const char *reply = cJSON_GetStringValue(cJSON_GetObjectItem(msg, "content"));
    REQUIRE(reply);
    const int n1 = usage(r1, "prompt_tokens"), g1 = usage(r1, "completion_tokens");
    cJSON *p1 = prompt_tokens(port, msgs);
    add_msg(msgs, "assistant", reply);
    add_msg(msgs, "user", "And what can you do?");
    cJSON *p2 = prompt_tokens(port, msgs);
    REQUIRE(p1 && p2 && cJSON_GetArraySize(p1) == n1);
    /* the checkpoints: before turn 1's last header (its last <|im_start|>), and at the end of its reply (the
       tokens it evaluated: all it emitted unless max_tokens cut it, then all but the last) */
    int32_t im_start = -1;
    cJSON *q = post(port, "/tokenize", "{\"content\": \"<|im_start|>\"}");
    if (q) im_start = cJSON_GetArrayItem(cJSON_GetObjectItem(q, "tokens"), 0)->valueint;
    cJSON_Delete(q);
    int stable = 0;
    for (int i = 0; i < n1; i++)
        if (cJSON_GetArrayItem(p1, i)->valueint == im_start) stable = i;
    const char *finish = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r1, "choices"), 0), "finish_reason"));
    const int evaluated = n1 + g1 - (finish && !strcmp(finish, "length") ? 1 : 0);
    const int shared = common_prefix(p1, p2);
    const int expect = format ? evaluated : stable;
    cJSON *warm = chat(port, msgs, 4, true, true), *cold = chat(port, msgs, 4, false, true);
    REQUIRE(warm && cold);
    const int cached = usage(warm, "cached");
    test_note("%s: turn 1 %d prompt + %d reply tokens; turn 2 %d tokens, %d cached (expected %d)", format ? format : "qwen35",
              n1, g1, cJSON_GetArraySize(p2), cached, expect);
    if (format) { /* ChatML: the next prompt holds the previous one and the reply verbatim */
        CHECK_MSG(shared >= n1, "turn 2's prompt does not start with turn 1's (%d of %d)", shared, n1);
        CHECK_MSG(cached == evaluated, "cached %d, the previous prompt + reply are %d", cached, evaluated);
    } else {
        CHECK_MSG(cached == stable && stable > 0, "cached %d, turn 1's last header at %d", cached, stable);
    }
    CHECK(usage(cold, "cached") == 0);
    char *lw = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(warm, "choices"), 0), "logprobs"));
    char *lc = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cold, "choices"), 0), "logprobs"));
    CHECK_MSG(lw && lc && !strcmp(lw, lc) && strlen(lw) > 40, "warm and cold logprobs differ:\n%.400s\n%.400s", lw, lc);
    free(lw), free(lc);
    cJSON_Delete(warm), cJSON_Delete(cold), cJSON_Delete(r1), cJSON_Delete(p1), cJSON_Delete(p2), cJSON_Delete(msgs);
    server_stop(s);
}

TEST(reuse, next_turn_resumes_after_the_reply_chatml) { two_turns("chatml"); }

TEST(reuse, next_turn_resumes_at_the_last_header_qwen35) { two_turns(NULL); }
