/* responses_out.c — see responses.h: a generated answer as Responses output items (reasoning, message,
 * function_call), the streamed semantic events, and the finished response stored for previous_response_id. */
#include "server/responses.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_io.h"


enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE };

typedef struct CallOut {
    char id[40], call_id[40];
    char *name, *arguments;
} CallOut;

struct ResponsesState {
    ResponsesReq req;   /* copies: echo, history (the request's own is freed early) */
    int seq;            /* sequence_number of the next event */
    bool started;       /* response.created sent */
    int open;           /* the item being streamed */
    int n_items;        /* output items so far */
    char item_id[48];
    SBuf reasoning, content, item_text;
    char reasoning_id[48], message_id[48];
    CallOut *calls;
    size_t n_calls;
    double created;
};

static void new_id(char *out, size_t cap, const char *prefix) {
    char rnd[25];
    random_alnum(rnd, 24);
    snprintf(out, cap, "%s%s", prefix, rnd);
}

ResponsesState *responses_state_new(const ApiRequest *req, Responder *r, Err *err) {
    ResponsesState *rs = calloc(1, sizeof *rs);
    if (!rs || !req->responses) {
        free(rs);
        return err_set(err, "out of memory"), NULL;
    }
    rs->req.echo = cJSON_Duplicate(req->responses->echo, true);
    rs->req.history = cJSON_Duplicate(req->responses->history, true);
    rs->req.store = req->responses->store;
    rs->req.st = req->responses->st;
    rs->created = (double)r->created;
    if (!rs->req.echo || !rs->req.history) {
        responses_state_free(rs);
        return err_set(err, "out of memory"), NULL;
    }
    return rs;
}

void responses_state_free(ResponsesState *rs) {
    if (!rs) return;
    cJSON_Delete(rs->req.echo);
    cJSON_Delete(rs->req.history);
    sbuf_free(&rs->reasoning);
    sbuf_free(&rs->content);
    sbuf_free(&rs->item_text);
    for (size_t i = 0; i < rs->n_calls; i++) free(rs->calls[i].name), free(rs->calls[i].arguments);
    free(rs->calls);
    free(rs);
}

static cJSON *text_part(const char *type, const char *text, size_t n) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    json_add_string_n(p, "text", text ? text : "", n);
    if (!strcmp(type, "output_text")) {
        cJSON_AddArrayToObject(p, "annotations");
        cJSON_AddArrayToObject(p, "logprobs");
    }
    return p;
}

static cJSON *reasoning_item(const ResponsesState *rs, bool done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "reasoning");
    cJSON_AddStringToObject(it, "id", rs->reasoning_id);
    cJSON_AddArrayToObject(it, "summary");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (done) cJSON_AddItemToArray(content, text_part("reasoning_text", rs->reasoning.p, rs->reasoning.n));
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    return it;
}

static cJSON *message_item(const ResponsesState *rs, bool done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "message");
    cJSON_AddStringToObject(it, "id", rs->message_id);
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    cJSON_AddStringToObject(it, "role", "assistant");
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (done) cJSON_AddItemToArray(content, text_part("output_text", rs->content.p, rs->content.n));
    return it;
}

static cJSON *call_item(const CallOut *c, bool done) {
    cJSON *it = cJSON_CreateObject();
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "id", c->id);
    cJSON_AddStringToObject(it, "call_id", c->call_id);
    cJSON_AddStringToObject(it, "name", c->name);
    cJSON_AddStringToObject(it, "arguments", done ? c->arguments : "");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    return it;
}

/* The output items of what is complete so far (all of it at the end). */
static cJSON *output_items(const ResponsesState *rs) {
    cJSON *out = cJSON_CreateArray();
    if (rs->reasoning_id[0]) cJSON_AddItemToArray(out, reasoning_item(rs, true));
    if (rs->message_id[0]) cJSON_AddItemToArray(out, message_item(rs, true));
    for (size_t i = 0; i < rs->n_calls; i++) cJSON_AddItemToArray(out, call_item(&rs->calls[i], true));
    return out;
}

static cJSON *usage_json(const JobResult *res, size_t reasoning_tokens) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", res->n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", res->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", res->n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens",
                            (double)reasoning_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", res->n_prompt + res->n_gen);
    return u;
}

/* The response object. status: "in_progress", "completed", "incomplete", "failed". */
static cJSON *response_object(const Responder *r, const char *status, cJSON *output, const JobResult *res,
                              const char *error) {
    const ResponsesState *rs = r->rs;
    const cJSON *echo = rs->req.echo;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", rs->created);
    cJSON_AddStringToObject(o, "status", status);
    cJSON_AddBoolToObject(o, "background", false);
    if (error) {
        cJSON *er = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(er, "code", "server_error");
        json_add_string_n(er, "message", error, strlen(error));
    } else {
        cJSON_AddNullToObject(o, "error");
    }
    if (!strcmp(status, "incomplete"))
        cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(o, "incomplete_details");
    static const char *const nulls[] = {"instructions", "max_output_tokens", "previous_response_id", "user", NULL};
    for (int i = 0; nulls[i]; i++) {
        const cJSON *v = json_member(echo, nulls[i]);
        cJSON_AddItemToObject(o, nulls[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    const cJSON *v = json_member(echo, "metadata");
    cJSON_AddItemToObject(o, "metadata", v ? cJSON_Duplicate(v, true) : cJSON_CreateObject());
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    v = json_member(echo, "parallel_tool_calls");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", !v || cJSON_IsTrue(v));
    v = json_member(echo, "reasoning");
    if (v) cJSON_AddItemToObject(o, "reasoning", cJSON_Duplicate(v, true));
    else {
        cJSON *re = cJSON_AddObjectToObject(o, "reasoning");
        cJSON_AddNullToObject(re, "effort");
        cJSON_AddNullToObject(re, "summary");
    }
    cJSON_AddBoolToObject(o, "store", rs->req.store);
    v = json_member(echo, "temperature");
    cJSON_AddItemToObject(o, "temperature", v ? cJSON_Duplicate(v, true) : cJSON_CreateNumber(1));
    v = json_member(echo, "text");
    if (v) cJSON_AddItemToObject(o, "text", cJSON_Duplicate(v, true));
    else cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format"), "type", "text");
    v = json_member(echo, "tool_choice");
    cJSON_AddItemToObject(o, "tool_choice", v ? cJSON_Duplicate(v, true) : cJSON_CreateString("auto"));
    v = json_member(echo, "tools");
    cJSON_AddItemToObject(o, "tools", v ? cJSON_Duplicate(v, true) : cJSON_CreateArray());
    v = json_member(echo, "top_p");
    cJSON_AddItemToObject(o, "top_p", v ? cJSON_Duplicate(v, true) : cJSON_CreateNumber(1));
    v = json_member(echo, "truncation");
    cJSON_AddItemToObject(o, "truncation", v ? cJSON_Duplicate(v, true) : cJSON_CreateString("disabled"));
    if (res) {
        size_t reasoning_tokens = 0;
        int32_t *ids = NULL;
        DlError de;
        if (rs->reasoning.n && r->engine &&
            dl_tokenize(r->engine, rs->reasoning.p, rs->reasoning.n, false, &ids, &reasoning_tokens, &de) == 0)
            free(ids);
        if (reasoning_tokens > (size_t)res->n_gen) reasoning_tokens = (size_t)res->n_gen;
        cJSON_AddItemToObject(o, "usage", usage_json(res, reasoning_tokens));
    } else {
        cJSON_AddNullToObject(o, "usage");
    }
    return o;
}

/* Takes the parser's new output into the state: reasoning, content, completed calls. */
static void absorb(ResponsesState *rs, const ChatDelta *d) {
    if (d->reasoning_len) {
        if (!rs->reasoning_id[0]) new_id(rs->reasoning_id, sizeof rs->reasoning_id, "rs_");
        sbuf_put(&rs->reasoning, d->reasoning, d->reasoning_len);
    }
    if (d->content_len) {
        if (!rs->message_id[0]) new_id(rs->message_id, sizeof rs->message_id, "msg_");
        sbuf_put(&rs->content, d->content, d->content_len);
    }
    if (d->n_tool_calls) {
        CallOut *c = realloc(rs->calls, (rs->n_calls + d->n_tool_calls) * sizeof *c);
        if (!c) return;
        rs->calls = c;
        for (size_t i = 0; i < d->n_tool_calls; i++) {
            CallOut *o = &rs->calls[rs->n_calls++];
            memset(o, 0, sizeof *o);
            new_id(o->id, sizeof o->id, "fc_");
            new_id(o->call_id, sizeof o->call_id, "call_");
            o->name = strdup(d->tool_calls[i].name);
            o->arguments = strdup(d->tool_calls[i].arguments);
            if (!o->name || !o->arguments) {
                free(o->name), free(o->arguments);
                rs->n_calls--;
            }
        }
    }
}

/* The assistant turn as a chat message (for the stored conversation). */
static cJSON *assistant_message(const ResponsesState *rs) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "assistant");
    json_add_string_n(m, "content", rs->content.p ? rs->content.p : "", rs->content.n);
    if (rs->reasoning.n) json_add_string_n(m, "reasoning_content", rs->reasoning.p, rs->reasoning.n);
    if (rs->n_calls) {
        cJSON *calls = cJSON_AddArrayToObject(m, "tool_calls");
        for (size_t i = 0; i < rs->n_calls; i++) {
            cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "id", rs->calls[i].call_id);
            cJSON_AddStringToObject(c, "type", "function");
            cJSON_AddStringToObject(f, "name", rs->calls[i].name);
            cJSON_AddStringToObject(f, "arguments", rs->calls[i].arguments);
            cJSON_AddItemToObject(c, "function", f);
            cJSON_AddItemToArray(calls, c);
        }
    }
    return m;
}

static const char *final_status(const JobResult *res) { return res->finish == FINISH_LENGTH ? "incomplete" : "completed"; }

/* The finished response: its object (malloc'd JSON), stored with its conversation when the request asked. */
static char *finish_and_store(Responder *r, const JobResult *res) {
    ResponsesState *rs = r->rs;
    cJSON *o = response_object(r, final_status(res), output_items(rs), res, NULL);
    char *json = json_print(o);
    cJSON_Delete(o);
    if (json && rs->req.store && rs->req.st) {
        cJSON *conv = rs->req.history;
        rs->req.history = NULL;
        cJSON_AddItemToArray(conv, assistant_message(rs));
        rstore_put(rs->req.st, r->id, conv, strdup(json));
    }
    return json;
}

/* ------------------------------------------------------------------------------------------ events */

static void event(ResponsesState *rs, SBuf *out, const char *type, cJSON *ev) {
    cJSON_AddStringToObject(ev, "type", type);
    cJSON_AddNumberToObject(ev, "sequence_number", rs->seq++);
    resp_sse(out, type, ev);
}

static cJSON *item_event(int output_index, cJSON *item) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddNumberToObject(ev, "output_index", output_index);
    cJSON_AddItemToObject(ev, "item", item);
    return ev;
}

static cJSON *part_event(const ResponsesState *rs, cJSON *part) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "item_id", rs->item_id);
    cJSON_AddNumberToObject(ev, "output_index", rs->n_items - 1);
    cJSON_AddNumberToObject(ev, "content_index", 0);
    if (part) cJSON_AddItemToObject(ev, "part", part);
    return ev;
}

static void start(Responder *r, SBuf *out) {
    ResponsesState *rs = r->rs;
    if (rs->started) return;
    rs->started = true;
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddItemToObject(ev, "response", response_object(r, "in_progress", NULL, NULL, NULL));
    event(rs, out, "response.created", ev);
    ev = cJSON_CreateObject();
    cJSON_AddItemToObject(ev, "response", response_object(r, "in_progress", NULL, NULL, NULL));
    event(rs, out, "response.in_progress", ev);
}

static void close_item(ResponsesState *rs, SBuf *out) {
    if (rs->open == ITEM_NONE) return;
    bool reasoning = rs->open == ITEM_REASONING;
    const char *ptype = reasoning ? "reasoning_text" : "output_text";
    cJSON *ev = part_event(rs, NULL);
    json_add_string_n(ev, "text", rs->item_text.p ? rs->item_text.p : "", rs->item_text.n);
    if (!reasoning) cJSON_AddArrayToObject(ev, "logprobs");
    event(rs, out, reasoning ? "response.reasoning_text.done" : "response.output_text.done", ev);
    event(rs, out, "response.content_part.done", part_event(rs, text_part(ptype, rs->item_text.p, rs->item_text.n)));
    event(rs, out, "response.output_item.done",
          item_event(rs->n_items - 1, reasoning ? reasoning_item(rs, true) : message_item(rs, true)));
    rs->open = ITEM_NONE;
    rs->item_text.n = 0;
}

/* Text of one kind: opens its item (closing another) and sends the delta. */
static void text_delta(ResponsesState *rs, int kind, const char *text, size_t n, SBuf *out) {
    if (!n) return;
    bool reasoning = kind == ITEM_REASONING;
    if (rs->open != kind) {
        close_item(rs, out);
        rs->open = kind;
        snprintf(rs->item_id, sizeof rs->item_id, "%s", reasoning ? rs->reasoning_id : rs->message_id);
        event(rs, out, "response.output_item.added",
              item_event(rs->n_items++, reasoning ? reasoning_item(rs, false) : message_item(rs, false)));
        event(rs, out, "response.content_part.added",
              part_event(rs, text_part(reasoning ? "reasoning_text" : "output_text", "", 0)));
    }
    sbuf_put(&rs->item_text, text, n);
    cJSON *ev = part_event(rs, NULL);
    json_add_string_n(ev, "delta", text, n);
    if (!reasoning) cJSON_AddArrayToObject(ev, "logprobs");
    event(rs, out, reasoning ? "response.reasoning_text.delta" : "response.output_text.delta", ev);
}

static void call_events(ResponsesState *rs, size_t first, SBuf *out) {
    for (size_t i = first; i < rs->n_calls; i++) {
        close_item(rs, out);
        const CallOut *c = &rs->calls[i];
        int index = rs->n_items++;
        event(rs, out, "response.output_item.added", item_event(index, call_item(c, false)));
        cJSON *ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "item_id", c->id);
        cJSON_AddNumberToObject(ev, "output_index", index);
        cJSON_AddStringToObject(ev, "delta", c->arguments);
        event(rs, out, "response.function_call_arguments.delta", ev);
        ev = cJSON_CreateObject();
        cJSON_AddStringToObject(ev, "item_id", c->id);
        cJSON_AddNumberToObject(ev, "output_index", index);
        cJSON_AddStringToObject(ev, "name", c->name);
        cJSON_AddStringToObject(ev, "arguments", c->arguments);
        event(rs, out, "response.function_call_arguments.done", ev);
        event(rs, out, "response.output_item.done", item_event(index, call_item(c, true)));
    }
}

/* The parser's delta to events. Reasoning and message items are numbered in the order they open; the
 * final response lists reasoning, message, calls — the order in which the Qwen formats produce them. */
static void delta_events(Responder *r, const ChatDelta *d, SBuf *out) {
    ResponsesState *rs = r->rs;
    size_t calls_before = rs->n_calls;
    absorb(rs, d);
    text_delta(rs, ITEM_REASONING, d->reasoning, d->reasoning_len, out);
    text_delta(rs, ITEM_MESSAGE, d->content, d->content_len, out);
    call_events(rs, calls_before, out);
}

int responses_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err) {
    start(r, out);
    ChatDelta d;
    if (chat_parser_feed(r->parser, text, n, &d, err)) return -1;
    delta_events(r, &d, out);
    return out->oom ? err_set(err, "out of memory") : 0;
}

int responses_stream_finish(Responder *r, const JobResult *res, SBuf *out, Err *err) {
    ResponsesState *rs = r->rs;
    start(r, out);
    ChatDelta d;
    if (chat_parser_finish(r->parser, &d, err)) return -1;
    delta_events(r, &d, out);
    if (!rs->message_id[0] && !rs->n_calls) { /* nothing said: an empty message, as OpenAI sends */
        close_item(rs, out);
        new_id(rs->message_id, sizeof rs->message_id, "msg_");
        rs->open = ITEM_MESSAGE;
        snprintf(rs->item_id, sizeof rs->item_id, "%s", rs->message_id);
        event(rs, out, "response.output_item.added", item_event(rs->n_items++, message_item(rs, false)));
        event(rs, out, "response.content_part.added", part_event(rs, text_part("output_text", "", 0)));
    }
    close_item(rs, out);
    char *json = finish_and_store(r, res);
    cJSON *resp = json ? cJSON_Parse(json) : NULL;
    free(json);
    if (!resp) return err_set(err, "out of memory");
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddItemToObject(ev, "response", resp);
    event(rs, out, res->finish == FINISH_LENGTH ? "response.incomplete" : "response.completed", ev);
    return out->oom ? err_set(err, "out of memory") : 0;
}

void responses_stream_error(Responder *r, const char *message, SBuf *out) {
    ResponsesState *rs = r->rs;
    start(r, out);
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "code", "server_error");
    json_add_string_n(ev, "message", message, strlen(message));
    cJSON_AddNullToObject(ev, "param");
    event(rs, out, "error", ev);
    ev = cJSON_CreateObject();
    cJSON_AddItemToObject(ev, "response", response_object(r, "failed", output_items(rs), NULL, message));
    event(rs, out, "response.failed", ev);
}

char *responses_body(Responder *r, const JobResult *res, Err *err) {
    if (chat_parser_finish(r->parser, NULL, err)) return NULL;
    ResponsesState *rs = r->rs;
    /* non-streamed, the parser's totals are the output */
    ChatDelta all = {0};
    all.reasoning = chat_parser_reasoning(r->parser, &all.reasoning_len);
    all.content = chat_parser_content(r->parser, &all.content_len);
    all.n_tool_calls = chat_parser_tool_calls(r->parser, &all.tool_calls);
    absorb(rs, &all);
    if (!rs->message_id[0] && !rs->n_calls) new_id(rs->message_id, sizeof rs->message_id, "msg_");
    char *json = finish_and_store(r, res);
    if (!json) err_set(err, "out of memory");
    return json;
}
