/* anthropic.c — see anthropic.h: chat output (the chat parser's reasoning, content and tool calls) to Anthropic
 * messages and stream events (the requests: anthropic_req.c). */
#include "server/anthropic.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_io.h"

/* ------------------------------------------------------------------------------------------ output */

enum { BLOCK_NONE, BLOCK_TEXT, BLOCK_THINKING };

struct AnthropicState {
    bool started; /* message_start sent */
    int open;     /* the content block open now */
    int index;    /* the next block's index */
};

AnthropicState *anthropic_state_new(void) { return calloc(1, sizeof(AnthropicState)); }
void anthropic_state_free(AnthropicState *a) { free(a); }

static cJSON *usage(int in, int out) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", in);
    cJSON_AddNumberToObject(u, "output_tokens", out);
    return u;
}

static cJSON *message_object(const Responder *r) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", r->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", r->model);
    return m;
}

static void event(SBuf *out, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    resp_sse(out, type, o);
}

static void start(Responder *r, SBuf *out) {
    AnthropicState *a = r->as;
    if (a->started) return;
    a->started = true;
    cJSON *o = cJSON_CreateObject(), *m = message_object(r);
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(r->n_prompt, 0));
    cJSON_AddItemToObject(o, "message", m);
    event(out, "message_start", o);
}

static void close_block(Responder *r, SBuf *out) {
    AnthropicState *a = r->as;
    if (a->open == BLOCK_NONE) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", a->index++);
    event(out, "content_block_stop", o);
    a->open = BLOCK_NONE;
}

static void block_delta(Responder *r, int kind, const char *s, size_t n, SBuf *out) {
    AnthropicState *a = r->as;
    if (!n) return;
    if (a->open != kind) {
        close_block(r, out);
        cJSON *o = cJSON_CreateObject(), *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", a->index);
        cJSON_AddStringToObject(b, "type", kind == BLOCK_TEXT ? "text" : "thinking");
        cJSON_AddStringToObject(b, kind == BLOCK_TEXT ? "text" : "thinking", "");
        if (kind == BLOCK_THINKING) cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToObject(o, "content_block", b);
        event(out, "content_block_start", o);
        a->open = kind;
    }
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", a->index);
    cJSON_AddStringToObject(d, "type", kind == BLOCK_TEXT ? "text_delta" : "thinking_delta");
    json_add_string_n(d, kind == BLOCK_TEXT ? "text" : "thinking", s, n);
    cJSON_AddItemToObject(o, "delta", d);
    event(out, "content_block_delta", o);
}

static void tool_id(char *out, size_t cap) {
    char rnd[25];
    random_alnum(rnd, 24);
    snprintf(out, cap, "toolu_%s", rnd);
}

static cJSON *tool_input(const ChatToolCall *c) {
    cJSON *in = c->arguments ? cJSON_Parse(c->arguments) : NULL;
    if (!cJSON_IsObject(in)) cJSON_Delete(in), in = cJSON_CreateObject();
    return in;
}

static void emit_delta(Responder *r, const ChatDelta *dl, SBuf *out) {
    block_delta(r, BLOCK_THINKING, dl->reasoning, dl->reasoning_len, out);
    block_delta(r, BLOCK_TEXT, dl->content, dl->content_len, out);
    for (size_t i = 0; i < dl->n_tool_calls; i++) {
        const ChatToolCall *c = &dl->tool_calls[i];
        close_block(r, out);
        AnthropicState *a = r->as;
        char id[48];
        tool_id(id, sizeof id);
        cJSON *o = cJSON_CreateObject(), *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", a->index);
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", c->name ? c->name : "");
        cJSON_AddItemToObject(b, "input", cJSON_CreateObject());
        cJSON_AddItemToObject(o, "content_block", b);
        event(out, "content_block_start", o);
        cJSON *in = tool_input(c);
        char *json = json_print(in);
        cJSON_Delete(in);
        o = cJSON_CreateObject();
        cJSON *d = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", a->index);
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", json ? json : "{}");
        free(json);
        cJSON_AddItemToObject(o, "delta", d);
        event(out, "content_block_delta", o);
        a->open = BLOCK_TEXT + 10; /* a tool_use block: closed by close_block */
        close_block(r, out);
    }
}

static const char *stop_reason(Responder *r, const JobResult *res) {
    const ChatToolCall *calls;
    if (r->parser && chat_parser_tool_calls(r->parser, &calls)) return "tool_use";
    if (res->finish == FINISH_LENGTH) return "max_tokens";
    if (res->stop_word) return "stop_sequence";
    return "end_turn";
}

int anthropic_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err) {
    start(r, out);
    ChatDelta dl;
    if (chat_parser_feed(r->parser, text, n, &dl, err)) return -1;
    emit_delta(r, &dl, out);
    return out->oom ? err_set(err, "out of memory") : 0;
}

int anthropic_stream_finish(Responder *r, const JobResult *res, SBuf *out, Err *err) {
    start(r, out);
    ChatDelta dl;
    if (chat_parser_finish(r->parser, &dl, err)) return -1;
    emit_delta(r, &dl, out);
    close_block(r, out);
    cJSON *o = cJSON_CreateObject(), *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "stop_reason", stop_reason(r, res));
    if (res->stop_word && res->stopping_word) cJSON_AddStringToObject(d, "stop_sequence", res->stopping_word);
    else cJSON_AddNullToObject(d, "stop_sequence");
    cJSON_AddItemToObject(o, "delta", d);
    cJSON_AddItemToObject(o, "usage", usage(res->n_prompt, res->n_gen));
    event(out, "message_delta", o);
    event(out, "message_stop", cJSON_CreateObject());
    return out->oom ? err_set(err, "out of memory") : 0;
}

char *anthropic_body(Responder *r, const JobResult *res, Err *err) {
    if (chat_parser_finish(r->parser, NULL, err)) return NULL;
    size_t n_reason, n_content;
    const char *reason = chat_parser_reasoning(r->parser, &n_reason);
    const char *content = chat_parser_content(r->parser, &n_content);
    const ChatToolCall *calls;
    const size_t n_calls = chat_parser_tool_calls(r->parser, &calls);
    cJSON *m = message_object(r), *arr = cJSON_AddArrayToObject(m, "content");
    if (n_reason) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        json_add_string_n(b, "thinking", reason, n_reason);
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(arr, b);
    }
    if (n_content || (!n_reason && !n_calls)) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        json_add_string_n(b, "text", content ? content : "", n_content);
        cJSON_AddItemToArray(arr, b);
    }
    for (size_t i = 0; i < n_calls; i++) {
        char id[48];
        tool_id(id, sizeof id);
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "tool_use");
        cJSON_AddStringToObject(b, "id", id);
        cJSON_AddStringToObject(b, "name", calls[i].name ? calls[i].name : "");
        cJSON_AddItemToObject(b, "input", tool_input(&calls[i]));
        cJSON_AddItemToArray(arr, b);
    }
    cJSON_AddStringToObject(m, "stop_reason", stop_reason(r, res));
    if (res->stop_word && res->stopping_word) cJSON_AddStringToObject(m, "stop_sequence", res->stopping_word);
    else cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(res->n_prompt, res->n_gen));
    char *s = json_print(m);
    cJSON_Delete(m);
    if (!s) err_set(err, "out of memory");
    return s;
}

/* ------------------------------------------------------------------------------------------ errors */

char *anthropic_error_json(const ApiError *e) {
    static const struct {
        int status;
        const char *type;
    } types[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
                 {404, "not_found_error"},       {413, "request_too_large"},     {429, "rate_limit_error"},
                 {503, "overloaded_error"},      {529, "overloaded_error"}};
    const char *type = e->status >= 500 ? "api_error" : "invalid_request_error";
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (types[i].status == e->status) type = types[i].type;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "type", "error");
    cJSON *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "type", type);
    /* no param field in this shape: the message names the parameter */
    char msg[sizeof e->param + sizeof e->message + 4];
    if (e->param[0] && !strstr(e->message, e->param)) snprintf(msg, sizeof msg, "%s: %s", e->param, e->message);
    else snprintf(msg, sizeof msg, "%s", e->message);
    json_add_string_n(err, "message", msg, strlen(msg));
    char *s = json_print(root);
    cJSON_Delete(root);
    return s;
}
