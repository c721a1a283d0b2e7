/* respond.c — see respond.h: OpenAI chunk and response objects, per choice, with logprobs. */
#include "server/respond.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/anthropic.h"
#include "server/json_io.h"
#include "server/responses.h"

int resp_init(Responder *r, const ApiRequest *req, RespKind kind, int index, ChatFormat fmt, bool starts_in_reasoning,
              const char *model, const DlEngine *engine, const char *id, Err *err) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->chat = kind != RESP_COMPLETION && kind != RESP_LLAMA;
    r->stream = req->stream;
    r->include_usage = req->include_usage;
    r->index = index;
    r->model = model;
    r->engine = engine;
    r->logprobs = req->logprobs;
    r->timings_per_token = req->stream && req->llama.timings_per_token;
    r->created = (long)time(NULL);
    if (id) {
        snprintf(r->id, sizeof r->id, "%s", id);
    } else {
        char rnd[25];
        random_alnum(rnd, 24);
        snprintf(r->id, sizeof r->id, "%s%s",
                 kind == RESP_CHAT ? "chatcmpl-" : kind == RESP_RESPONSES ? "resp_" : kind == RESP_ANTHROPIC ? "msg_" : "cmpl-",
                 rnd);
    }
    r->raw = kind == RESP_CHAT && req->llama.reasoning_raw; /* reasoning_format "none": no parsing */
    if (r->chat && !r->raw && !(r->parser = chat_parser_new(fmt, starts_in_reasoning, req->tools, err))) return -1;
    if (kind == RESP_RESPONSES && !(r->rs = responses_state_new(req, r, err))) return -1;
    if (kind == RESP_ANTHROPIC && !(r->as = anthropic_state_new())) return err_set(err, "out of memory");
    return 0;
}

void resp_free(Responder *r) {
    chat_parser_free(r->parser);
    responses_state_free(r->rs);
    anthropic_state_free(r->as);
    sbuf_free(&r->text);
    free(r->lp);
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

cJSON *resp_usage_object(const JobResult *res) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", res->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", res->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", res->n_prompt + res->n_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", res->n_cached);
    return u;
}

/* Chat: completion_tokens_details.reasoning_tokens, the reasoning text of choices r[0..k) counted in tokens
 * (as the Responses API counts them), at most the tokens generated. */
static cJSON *chat_usage(Responder *r, int k, const JobResult *total) {
    cJSON *u = resp_usage_object(total);
    if (!r[0].chat) return u;
    size_t n = 0;
    for (int i = 0; i < k; i++) {
        size_t len = 0, n_ids = 0;
        const char *text = r[i].parser ? chat_parser_reasoning(r[i].parser, &len) : NULL;
        int32_t *ids = NULL;
        DlError de;
        if (len && r[i].engine && dl_tokenize(r[i].engine, text, len, false, &ids, &n_ids, &de) == 0) n += n_ids;
        free(ids);
    }
    if (n > (size_t)total->n_gen) n = (size_t)total->n_gen;
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "completion_tokens_details"), "reasoning_tokens", (double)n);
    return u;
}

cJSON *resp_timings_object(const JobResult *res) {
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

void resp_total(const JobResult *res, int k, int per_prompt, JobResult *total) {
    memset(total, 0, sizeof *total);
    for (int i = 0; i < k; i++) {
        if (per_prompt <= 1 || i % per_prompt == 0) { /* a prompt counts once, however many choices it has */
            total->n_prompt += res[i].n_prompt;
            total->n_cached += res[i].n_cached;
        }
        total->n_gen += res[i].n_gen;
        if (res[i].queue_ms > total->queue_ms) total->queue_ms = res[i].queue_ms;
        total->prompt_ms += res[i].prompt_ms;
        total->gen_ms += res[i].gen_ms;
    }
    total->finish = k ? res[0].finish : FINISH_NONE;
}

void resp_sse(SBuf *out, const char *event, cJSON *obj) {
    char *s = json_print(obj);
    cJSON_Delete(obj);
    if (!s) {
        out->oom = true;
        return;
    }
    if (event) sbuf_printf(out, "event: %s\n", event);
    sbuf_puts(out, "data: ");
    sbuf_puts(out, s);
    sbuf_puts(out, "\n\n");
    free(s);
}

/* ------------------------------------------------------------------------------------------ logprobs */

void resp_keep_logprobs(Responder *r, const TokenLogprob *lp, size_t n_lp) {
    if (r->logprobs < 0 || !n_lp) return;
    if (r->n_lp + n_lp > r->cap_lp) {
        size_t cap = r->cap_lp ? r->cap_lp : 16;
        while (cap < r->n_lp + n_lp) cap *= 2;
        TokenLogprob *p = realloc(r->lp, cap * sizeof *p);
        if (!p) return;
        r->lp = p;
        r->cap_lp = cap;
    }
    memcpy(r->lp + r->n_lp, lp, n_lp * sizeof *lp);
    r->n_lp += n_lp;
}

static const char *piece_of(const Responder *r, int32_t id, size_t *n) {
    const char *p = dl_token_piece(r->engine, id, n);
    if (!p) *n = 0;
    return p ? p : "";
}

/* {"token", "logprob", "bytes"} (chat), token text made valid UTF-8, bytes exact. */
static cJSON *chat_token(const Responder *r, int32_t id, float logprob) {
    size_t n;
    const char *p = piece_of(r, id, &n);
    cJSON *o = cJSON_CreateObject();
    json_add_string_n(o, "token", p, n);
    cJSON_AddNumberToObject(o, "logprob", isfinite(logprob) ? logprob : -9999.0);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)p[i]));
    return o;
}

cJSON *resp_chat_logprobs(Responder *r) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (size_t i = 0; i < r->n_lp; i++) {
        const TokenLogprob *e = &r->lp[i];
        cJSON *t = chat_token(r, e->id, e->logprob), *top = cJSON_AddArrayToObject(t, "top_logprobs");
        for (int k = 0; k < e->n_top && k < r->logprobs; k++)
            cJSON_AddItemToArray(top, chat_token(r, e->top_id[k], e->top_logprob[k]));
        cJSON_AddItemToArray(content, t);
    }
    cJSON_AddNullToObject(o, "refusal");
    r->n_lp = 0;
    return o;
}

/* Legacy completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}. */
static cJSON *completion_logprobs(Responder *r) {
    cJSON *o = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(o, "tokens"),
          *lps = cJSON_AddArrayToObject(o, "token_logprobs"), *tops = cJSON_AddArrayToObject(o, "top_logprobs"),
          *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (size_t i = 0; i < r->n_lp; i++) {
        const TokenLogprob *e = &r->lp[i];
        size_t n;
        const char *p = piece_of(r, e->id, &n);
        cJSON_AddItemToArray(tokens, json_string_n(p, n));
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(isfinite(e->logprob) ? e->logprob : -9999.0));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < e->n_top && k < r->logprobs; k++) {
            size_t m;
            const char *q = piece_of(r, e->top_id[k], &m);
            SBuf key = {0};
            utf8_sanitize(&key, q, m);
            if (key.p && !cJSON_GetObjectItemCaseSensitive(top, key.p))
                cJSON_AddNumberToObject(top, key.p, isfinite(e->top_logprob[k]) ? e->top_logprob[k] : -9999.0);
            sbuf_free(&key);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)r->text_offset));
        r->text_offset += n;
    }
    r->n_lp = 0;
    return o;
}

/* ------------------------------------------------------------------------------------------ chunks */

/* One streaming chunk of choice r->index; delta (chat) or the choice (completion) is filled by the caller.
 * Pending logprobs ride on it. */
static cJSON *chunk(Responder *r, cJSON **delta_or_choice, const char *finish) {
    cJSON *o = base_object(r, true), *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", r->index);
    if (r->chat) *delta_or_choice = cJSON_AddObjectToObject(c, "delta");
    else *delta_or_choice = c;
    if (r->logprobs >= 0 && r->n_lp)
        cJSON_AddItemToObject(c, "logprobs", r->chat ? resp_chat_logprobs(r) : completion_logprobs(r));
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    if (r->timings_per_token && !finish) cJSON_AddItemToObject(o, "timings", resp_timings_object(&r->now));
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
    resp_sse(out, NULL, o);
}

static void delta_chunks(Responder *r, const ChatDelta *dl, SBuf *out) {
    if (dl->reasoning_len || dl->content_len || dl->n_tool_calls) role_chunk(r, out);
    cJSON *d, *o;
    if (dl->reasoning_len) {
        o = chunk(r, &d, NULL);
        json_add_string_n(d, "reasoning_content", dl->reasoning, dl->reasoning_len);
        resp_sse(out, NULL, o);
    }
    if (dl->content_len) {
        o = chunk(r, &d, NULL);
        json_add_string_n(d, "content", dl->content, dl->content_len);
        resp_sse(out, NULL, o);
    }
    for (size_t i = 0; i < dl->n_tool_calls; i++) {
        o = chunk(r, &d, NULL);
        tool_call_json(cJSON_AddArrayToObject(d, "tool_calls"), &dl->tool_calls[i], r->n_calls_sent++, true);
        resp_sse(out, NULL, o);
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

int resp_stream_text(Responder *r, const char *text, size_t n, const TokenLogprob *lp, size_t n_lp, SBuf *out,
                     Err *err) {
    resp_keep_logprobs(r, lp, n_lp);
    if (!n) return 0;
    if (r->kind == RESP_RESPONSES) return responses_stream_text(r, text, n, out, err);
    if (r->kind == RESP_LLAMA) return llama_stream_text(r, text, n, out, err);
    if (r->kind == RESP_ANTHROPIC) return anthropic_stream_text(r, text, n, out, err);
    if (r->raw) {
        ChatDelta dl;
        memset(&dl, 0, sizeof dl);
        dl.content = text;
        dl.content_len = n;
        delta_chunks(r, &dl, out);
    } else if (r->chat) {
        ChatDelta dl;
        if (chat_parser_feed(r->parser, text, n, &dl, err)) return -1;
        delta_chunks(r, &dl, out);
    } else {
        cJSON *c, *o = chunk(r, &c, NULL);
        json_add_string_n(c, "text", text, n);
        resp_sse(out, NULL, o);
    }
    return out->oom ? err_set(err, "out of memory") : 0;
}

int resp_stream_finish(Responder *r, const JobResult *res, const JobResult *total, SBuf *out, Err *err) {
    if (r->kind == RESP_RESPONSES) return responses_stream_finish(r, res, out, err);
    if (r->kind == RESP_LLAMA) return llama_stream_finish(r, res, out, err);
    if (r->kind == RESP_ANTHROPIC) return anthropic_stream_finish(r, res, out, err);
    if (r->raw) {
        role_chunk(r, out);
    } else if (r->chat) {
        ChatDelta dl;
        if (chat_parser_finish(r->parser, &dl, err)) return -1;
        delta_chunks(r, &dl, out);
        role_chunk(r, out);
    }
    cJSON *d, *o = chunk(r, &d, finish_reason(r, res->finish));
    if (!r->chat) cJSON_AddStringToObject(d, "text", "");
    cJSON_AddItemToObject(o, "timings", resp_timings_object(res));
    /* usage in every final response: here, unless the client asked for OpenAI's separate usage chunk */
    if (total && !r->include_usage) cJSON_AddItemToObject(o, "usage", chat_usage(r, 1, total));
    resp_sse(out, NULL, o);
    return out->oom ? err_set(err, "out of memory") : 0;
}

int resp_stream_done(Responder *r, const JobResult *total, SBuf *out, Err *err) {
    if (r->kind == RESP_RESPONSES || r->kind == RESP_LLAMA || r->kind == RESP_ANTHROPIC) return 0;
    if (r->include_usage) {
        cJSON *o = base_object(r, true);
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", chat_usage(r, 1, total));
        resp_sse(out, NULL, o);
    }
    sbuf_puts(out, "data: [DONE]\n\n");
    return out->oom ? err_set(err, "out of memory") : 0;
}

void resp_stream_error(Responder *r, const char *message, SBuf *out) {
    if (r->kind == RESP_RESPONSES) {
        responses_stream_error(r, message, out);
        return;
    }
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

int resp_feed(Responder *r, const char *text, size_t n, const TokenLogprob *lp, size_t n_lp, Err *err) {
    resp_keep_logprobs(r, lp, n_lp);
    if (!n) return 0;
    if (r->chat && !r->raw) return chat_parser_feed(r->parser, text, n, NULL, err);
    sbuf_put(&r->text, text, n);
    return r->text.oom ? err_set(err, "out of memory") : 0;
}

static int choice_json(Responder *r, const JobResult *res, cJSON *choices, Err *err) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", r->index);
    if (r->raw) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        json_add_string_n(m, "content", r->text.p ? r->text.p : "", r->text.n);
    } else if (r->chat) {
        if (chat_parser_finish(r->parser, NULL, err)) return -1;
        size_t n_reason, n_content;
        const char *reason = chat_parser_reasoning(r->parser, &n_reason);
        const char *content = chat_parser_content(r->parser, &n_content);
        const ChatToolCall *calls;
        size_t n_calls = chat_parser_tool_calls(r->parser, &calls);
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (!n_content && n_calls) cJSON_AddNullToObject(m, "content");
        else json_add_string_n(m, "content", content, n_content);
        if (n_reason) json_add_string_n(m, "reasoning_content", reason, n_reason);
        if (n_calls) {
            cJSON *arr = cJSON_AddArrayToObject(m, "tool_calls");
            for (size_t i = 0; i < n_calls; i++) tool_call_json(arr, &calls[i], (int)i, false);
        }
    } else {
        json_add_string_n(c, "text", r->text.p ? r->text.p : "", r->text.n);
    }
    if (r->logprobs >= 0) cJSON_AddItemToObject(c, "logprobs", r->chat ? resp_chat_logprobs(r) : completion_logprobs(r));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_reason(r, res->finish));
    return 0;
}

char *resp_body(Responder *r, int k, const JobResult *res, const JobResult *total, Err *err) {
    if (r[0].kind == RESP_RESPONSES) return responses_body(&r[0], &res[0], err);
    if (r[0].kind == RESP_LLAMA) return llama_body(r, k, res, err);
    if (r[0].kind == RESP_ANTHROPIC) return anthropic_body(&r[0], &res[0], err);
    cJSON *o = base_object(&r[0], false), *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < k; i++)
        if (choice_json(&r[i], &res[i], choices, err)) {
            cJSON_Delete(o);
            return NULL;
        }
    cJSON_AddItemToObject(o, "usage", chat_usage(r, k, total));
    cJSON_AddItemToObject(o, "timings", resp_timings_object(total));
    char *s = json_print(o);
    cJSON_Delete(o);
    if (!s) err_set(err, "out of memory");
    return s;
}
