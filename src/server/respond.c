/* respond.c — see respond.h: OpenAI chunk and response objects. */
#include "server/respond.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static cJSON *add_strn(cJSON *obj, const char *key, const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return NULL;
    memcpy(tmp, s, n);
    tmp[n] = 0;
    cJSON *v = cJSON_AddStringToObject(obj, key, tmp);
    free(tmp);
    return v;
}

int resp_init(Responder *r, const ApiRequest *req, ChatFormat fmt, bool starts_in_reasoning, const char *model,
              Err *err) {
    memset(r, 0, sizeof *r);
    r->chat = req->chat;
    r->stream = req->stream;
    r->include_usage = req->include_usage;
    r->model = model;
    r->created = (long)time(NULL);
    char rnd[25];
    random_alnum(rnd, 24);
    snprintf(r->id, sizeof r->id, "%s%s", req->chat ? "chatcmpl-" : "cmpl-", rnd);
    if (req->chat && !(r->parser = chat_parser_new(fmt, starts_in_reasoning, req->tools, err))) return -1;
    return 0;
}

void resp_free(Responder *r) {
    chat_parser_free(r->parser);
    sbuf_free(&r->text);
    memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------------------------------------ pieces */

static cJSON *base_object(const Responder *r, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object",
                            r->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "deltallm");
    return o;
}

static cJSON *usage_object(const JobResult *res) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", res->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", res->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", res->n_prompt + res->n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", res->n_cached);
    return u;
}

static cJSON *timings_object(const JobResult *res) {
    cJSON *t = cJSON_CreateObject();
    int pn = res->n_prompt - res->n_cached;
    cJSON_AddNumberToObject(t, "cache_n", res->n_cached);
    cJSON_AddNumberToObject(t, "prompt_n", pn);
    cJSON_AddNumberToObject(t, "prompt_ms", res->prompt_ms);
    cJSON_AddNumberToObject(t, "prompt_per_second", res->prompt_ms > 0 ? pn * 1000.0 / res->prompt_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", res->n_gen);
    cJSON_AddNumberToObject(t, "predicted_ms", res->gen_ms);
    cJSON_AddNumberToObject(t, "predicted_per_second", res->gen_ms > 0 ? res->n_gen * 1000.0 / res->gen_ms : 0);
    cJSON_AddNumberToObject(t, "queue_ms", res->queue_ms);
    return t;
}

static void sse(SBuf *out, cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    if (!s) {
        out->oom = true;
        return;
    }
    sbuf_puts(out, "data: ");
    sbuf_puts(out, s);
    sbuf_puts(out, "\n\n");
    free(s);
}

/* One streaming chunk; delta (chat) or text (completion) is filled by the caller. */
static cJSON *chunk(const Responder *r, cJSON **delta_or_choice, const char *finish) {
    cJSON *o = base_object(r, true), *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) *delta_or_choice = cJSON_AddObjectToObject(c, "delta");
    else *delta_or_choice = c;
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return o;
}

static void tool_call_json(cJSON *arr, const ChatToolCall *call, int index, bool with_index) {
    cJSON *c = cJSON_CreateObject();
    char id[40], rnd[25];
    random_alnum(rnd, 24);
    snprintf(id, sizeof id, "call_%s", rnd);
    if (with_index) cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(c, "function");
    cJSON_AddStringToObject(f, "name", call->name);
    cJSON_AddStringToObject(f, "arguments", call->arguments);
    cJSON_AddItemToArray(arr, c);
}

static void role_chunk(Responder *r, SBuf *out) {
    if (r->role_sent || !r->chat) return;
    r->role_sent = true;
    cJSON *d, *o = chunk(r, &d, NULL);
    cJSON_AddStringToObject(d, "role", "assistant");
    cJSON_AddStringToObject(d, "content", "");
    sse(out, o);
}

static void delta_chunks(Responder *r, const ChatDelta *dl, SBuf *out) {
    if (dl->reasoning_len || dl->content_len || dl->n_tool_calls) role_chunk(r, out);
    cJSON *d, *o;
    if (dl->reasoning_len) {
        o = chunk(r, &d, NULL);
        add_strn(d, "reasoning_content", dl->reasoning, dl->reasoning_len);
        sse(out, o);
    }
    if (dl->content_len) {
        o = chunk(r, &d, NULL);
        add_strn(d, "content", dl->content, dl->content_len);
        sse(out, o);
    }
    for (size_t i = 0; i < dl->n_tool_calls; i++) {
        o = chunk(r, &d, NULL);
        tool_call_json(cJSON_AddArrayToObject(d, "tool_calls"), &dl->tool_calls[i], r->n_calls_sent++, true);
        sse(out, o);
    }
}

static const char *finish_reason(const Responder *r, JobFinish f) {
    if (f == FINISH_LENGTH) return "length";
    if (r->parser) {
        const ChatToolCall *calls;
        if (chat_parser_tool_calls(r->parser, &calls)) return "tool_calls";
    }
    return "stop";
}

/* ------------------------------------------------------------------------------------------ streaming */

int resp_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err) {
    if (!n) return 0;
    if (r->chat) {
        ChatDelta dl;
        if (chat_parser_feed(r->parser, text, n, &dl, err)) return -1;
        delta_chunks(r, &dl, out);
    } else {
        cJSON *c, *o = chunk(r, &c, NULL);
        add_strn(c, "text", text, n);
        sse(out, o);
    }
    return out->oom ? err_set(err, "out of memory") : 0;
}

int resp_stream_end(Responder *r, const JobResult *res, SBuf *out, Err *err) {
    if (r->chat) {
        ChatDelta dl;
        if (chat_parser_finish(r->parser, &dl, err)) return -1;
        delta_chunks(r, &dl, out);
        role_chunk(r, out);
    }
    cJSON *d, *o = chunk(r, &d, finish_reason(r, res->finish));
    if (!r->chat) cJSON_AddStringToObject(d, "text", "");
    cJSON_AddItemToObject(o, "timings", timings_object(res));
    /* usage in every final response: here, unless the client asked for OpenAI's separate usage chunk */
    if (!r->include_usage) cJSON_AddItemToObject(o, "usage", usage_object(res));
    sse(out, o);
    if (r->include_usage) {
        o = base_object(r, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage_object(res));
        sse(out, o);
    }
    sbuf_puts(out, "data: [DONE]\n\n");
    return out->oom ? err_set(err, "out of memory") : 0;
}

void resp_stream_error(Responder *r, const char *message, SBuf *out) {
    (void)r;
    ApiError e;
    api_error(&e, 500, "server_error", NULL, NULL, "%s", message);
    char *s = api_error_json(&e);
    if (s) {
        sbuf_puts(out, "data: ");
        sbuf_puts(out, s);
        sbuf_puts(out, "\n\n");
        free(s);
    }
    sbuf_puts(out, "data: [DONE]\n\n");
}

/* ------------------------------------------------------------------------------------------ whole body */

int resp_feed(Responder *r, const char *text, size_t n, Err *err) {
    if (!n) return 0;
    if (r->chat) return chat_parser_feed(r->parser, text, n, NULL, err);
    sbuf_put(&r->text, text, n);
    return r->text.oom ? err_set(err, "out of memory") : 0;
}

char *resp_body(Responder *r, const JobResult *res, Err *err) {
    cJSON *o = base_object(r, false), *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->chat) {
        if (chat_parser_finish(r->parser, NULL, err)) {
            cJSON_Delete(o);
            return NULL;
        }
        size_t n_reason, n_content;
        const char *reason = chat_parser_reasoning(r->parser, &n_reason);
        const char *content = chat_parser_content(r->parser, &n_content);
        const ChatToolCall *calls;
        size_t n_calls = chat_parser_tool_calls(r->parser, &calls);
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (!n_content && n_calls) cJSON_AddNullToObject(m, "content");
        else add_strn(m, "content", content, n_content);
        if (n_reason) add_strn(m, "reasoning_content", reason, n_reason);
        if (n_calls) {
            cJSON *arr = cJSON_AddArrayToObject(m, "tool_calls");
            for (size_t i = 0; i < n_calls; i++) tool_call_json(arr, &calls[i], (int)i, false);
        }
    } else {
        add_strn(c, "text", r->text.p ? r->text.p : "", r->text.n);
    }
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_reason(r, res->finish));
    cJSON_AddItemToObject(o, "usage", usage_object(res));
    cJSON_AddItemToObject(o, "timings", timings_object(res));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) err_set(err, "out of memory");
    return s;
}
