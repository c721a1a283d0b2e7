/* responses.c — see responses.h: the Responses API request translated into a chat request, the stored
 * conversations behind previous_response_id, and the output items and stream events. */
#include "server/responses.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/json_io.h"

#define BAD(param, ...) api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* ------------------------------------------------------------------------------------------ store */

typedef struct StoredResponse {
    char id[48];
    cJSON *messages; /* the conversation up to and including this response, as chat messages */
    char *json;      /* the response object */
    size_t bytes;
    struct StoredResponse *prev, *next; /* LRU: head is the most recent */
} StoredResponse;

struct ResponsesStore {
    pthread_mutex_t mu;
    StoredResponse *head, *tail;
    size_t n, bytes, max_entries, max_bytes;
};

ResponsesStore *rstore_new(size_t max_entries, size_t max_bytes) {
    ResponsesStore *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    pthread_mutex_init(&st->mu, NULL);
    st->max_entries = max_entries;
    st->max_bytes = max_bytes;
    return st;
}

static void unlink_entry(ResponsesStore *st, StoredResponse *e) {
    if (e->prev) e->prev->next = e->next;
    else st->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else st->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(ResponsesStore *st, StoredResponse *e) {
    e->next = st->head;
    if (st->head) st->head->prev = e;
    st->head = e;
    if (!st->tail) st->tail = e;
}

static void drop_entry(ResponsesStore *st, StoredResponse *e) {
    unlink_entry(st, e);
    st->n--;
    st->bytes -= e->bytes;
    cJSON_Delete(e->messages);
    free(e->json);
    free(e);
}

void rstore_free(ResponsesStore *st) {
    if (!st) return;
    while (st->head) drop_entry(st, st->head);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static StoredResponse *find(ResponsesStore *st, const char *id) {
    for (StoredResponse *e = st->head; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

/* Takes ownership of messages and json. */
static void rstore_put(ResponsesStore *st, const char *id, cJSON *messages, char *json) {
    StoredResponse *e = calloc(1, sizeof *e);
    char *text = e ? json_print(messages) : NULL;
    if (!e || !text) {
        free(e);
        free(text);
        cJSON_Delete(messages);
        free(json);
        return;
    }
    snprintf(e->id, sizeof e->id, "%s", id);
    e->messages = messages;
    e->json = json;
    e->bytes = 2 * strlen(text) + strlen(json) + sizeof *e; /* the tree takes about twice its text */
    free(text);
    pthread_mutex_lock(&st->mu);
    push_front(st, e);
    st->n++;
    st->bytes += e->bytes;
    while (st->tail && st->tail != e && (st->n > st->max_entries || st->bytes > st->max_bytes)) drop_entry(st, st->tail);
    if (st->n > st->max_entries || st->bytes > st->max_bytes) drop_entry(st, e); /* larger than the whole budget */
    pthread_mutex_unlock(&st->mu);
}

/* A copy of the stored conversation, or NULL when the id is unknown. */
static cJSON *rstore_messages(ResponsesStore *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    StoredResponse *e = find(st, id);
    cJSON *m = NULL;
    if (e) {
        unlink_entry(st, e);
        push_front(st, e);
        m = cJSON_Duplicate(e->messages, true);
    }
    pthread_mutex_unlock(&st->mu);
    return m;
}

char *rstore_get_json(ResponsesStore *st, const char *id) {
    pthread_mutex_lock(&st->mu);
    StoredResponse *e = find(st, id);
    char *json = e ? strdup(e->json) : NULL;
    pthread_mutex_unlock(&st->mu);
    return json;
}

size_t rstore_count(ResponsesStore *st) {
    pthread_mutex_lock(&st->mu);
    size_t n = st->n;
    pthread_mutex_unlock(&st->mu);
    return n;
}

/* ------------------------------------------------------------------------------------------ request */

struct ResponsesReq {
    cJSON *echo;     /* request fields the response object repeats */
    cJSON *history;  /* the conversation as chat messages (stored ones + this input), without instructions */
    bool store;
    ResponsesStore *st;
};

void responses_req_free(ResponsesReq *q) {
    if (!q) return;
    cJSON_Delete(q->echo);
    cJSON_Delete(q->history);
    free(q);
}

static const cJSON *member(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static void copy_member(cJSON *to, const cJSON *from, const char *k, const char *as) {
    const cJSON *v = member(from, k);
    if (v) cJSON_AddItemToObject(to, as ? as : k, cJSON_Duplicate(v, true));
}

/* The text of a content value: a string, or parts of the given text types joined. */
static int content_text(const cJSON *c, const char *where, bool assistant, SBuf *out, ApiError *e) {
    if (cJSON_IsString(c)) {
        sbuf_puts(out, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD(where, "%s: content must be a string or an array of content parts", where);
    int k = 0;
    for (const cJSON *p = c->child; p; p = p->next, k++) {
        const cJSON *t = member(p, "type");
        const char *type = cJSON_IsString(t) ? t->valuestring : "";
        const char *field = !strcmp(type, "refusal") ? "refusal" : "text";
        if (!strcmp(type, "input_image") || !strcmp(type, "input_file") || !strcmp(type, "input_audio"))
            return BAD(where, "%s: content[%d] of type '%s' is not supported: this server handles text only", where, k,
                       type);
        if (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text") &&
            !(assistant && !strcmp(type, "refusal")))
            return BAD(where, "%s: content[%d] has an unknown type '%s'", where, k, type);
        const cJSON *text = member(p, field);
        if (!cJSON_IsString(text)) return BAD(where, "%s: content[%d] needs '%s' (a string)", where, k, field);
        sbuf_puts(out, text->valuestring);
    }
    return 0;
}

static cJSON *chat_message(const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    if (content) cJSON_AddStringToObject(m, "content", content);
    else cJSON_AddNullToObject(m, "content");
    return m;
}

/* The assistant message a function_call item belongs to: the last message when it is an assistant turn
 * (text, reasoning or earlier calls of the same turn), else a new one. */
static cJSON *assistant_for_call(cJSON *messages, bool last_is_open_assistant) {
    cJSON *last = cJSON_GetArrayItem(messages, cJSON_GetArraySize(messages) - 1);
    if (last_is_open_assistant && last) return last;
    cJSON *m = chat_message("assistant", NULL);
    cJSON_AddItemToArray(messages, m);
    return m;
}

static int convert_item(const cJSON *it, int i, cJSON *messages, char **pending_reasoning, bool *open_assistant,
                        ApiError *e) {
    char where[32];
    snprintf(where, sizeof where, "input[%d]", i);
    if (!cJSON_IsObject(it)) return BAD(where, "%s must be an object", where);
    const cJSON *type = member(it, "type"), *role = member(it, "role");
    const char *t = cJSON_IsString(type) ? type->valuestring : role ? "message" : "";
    if (!strcmp(t, "message")) {
        static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
        if (!cJSON_IsString(role)) return BAD(where, "%s: a message needs a 'role'", where);
        bool known = false;
        for (int k = 0; roles[k]; k++) known |= !strcmp(role->valuestring, roles[k]);
        if (!known) return BAD(where, "%s: unknown role '%s' (user, assistant, system or developer)", where, role->valuestring);
        bool assistant = !strcmp(role->valuestring, "assistant");
        SBuf text = {0};
        const cJSON *c = member(it, "content");
        if (!c) return BAD(where, "%s: a message needs 'content'", where);
        if (content_text(c, where, assistant, &text, e)) return sbuf_free(&text), -1;
        cJSON *m = chat_message(!strcmp(role->valuestring, "developer") ? "system" : role->valuestring,
                                text.p ? text.p : "");
        sbuf_free(&text);
        if (assistant && *pending_reasoning) {
            cJSON_AddStringToObject(m, "reasoning_content", *pending_reasoning);
            free(*pending_reasoning);
            *pending_reasoning = NULL;
        }
        cJSON_AddItemToArray(messages, m);
        *open_assistant = assistant;
        return 0;
    }
    if (!strcmp(t, "function_call")) {
        const cJSON *name = member(it, "name"), *args = member(it, "arguments"), *call_id = member(it, "call_id");
        if (!cJSON_IsString(name) || !cJSON_IsString(call_id))
            return BAD(where, "%s: a function_call needs 'call_id' and 'name' (strings)", where);
        if (args && !cJSON_IsString(args)) return BAD(where, "%s: function_call.arguments must be a string", where);
        cJSON *m = assistant_for_call(messages, *open_assistant);
        if (*pending_reasoning) {
            cJSON_AddStringToObject(m, "reasoning_content", *pending_reasoning);
            free(*pending_reasoning);
            *pending_reasoning = NULL;
        }
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!calls) calls = cJSON_AddArrayToObject(m, "tool_calls");
        cJSON *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(call, "id", call_id->valuestring);
        cJSON_AddStringToObject(call, "type", "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        cJSON_AddStringToObject(fn, "arguments", args ? args->valuestring : "{}");
        cJSON_AddItemToObject(call, "function", fn);
        cJSON_AddItemToArray(calls, call);
        *open_assistant = true;
        return 0;
    }
    if (!strcmp(t, "function_call_output")) {
        const cJSON *call_id = member(it, "call_id"), *output = member(it, "output");
        if (!cJSON_IsString(call_id)) return BAD(where, "%s: a function_call_output needs 'call_id' (a string)", where);
        SBuf text = {0};
        if (!output) return BAD(where, "%s: a function_call_output needs 'output'", where);
        if (content_text(output, where, false, &text, e)) return sbuf_free(&text), -1;
        cJSON *m = chat_message("tool", text.p ? text.p : "");
        sbuf_free(&text);
        cJSON_AddStringToObject(m, "tool_call_id", call_id->valuestring);
        cJSON_AddItemToArray(messages, m);
        *open_assistant = false;
        return 0;
    }
    if (!strcmp(t, "reasoning")) {
        SBuf text = {0};
        const cJSON *content = member(it, "content"), *summary = member(it, "summary");
        const cJSON *parts = content ? content : summary;
        for (const cJSON *p = cJSON_IsArray(parts) ? parts->child : NULL; p; p = p->next) {
            const cJSON *s = member(p, "text");
            if (cJSON_IsString(s)) sbuf_puts(&text, s->valuestring);
        }
        free(*pending_reasoning);
        *pending_reasoning = text.p ? text.p : strdup("");
        return 0;
    }
    return BAD(where, "%s: input items of type '%s' are not supported (message, function_call, function_call_output, "
                      "reasoning)", where, t);
}

static int convert_input(const cJSON *input, cJSON *messages, ApiError *e) {
    if (cJSON_IsString(input)) {
        cJSON_AddItemToArray(messages, chat_message("user", input->valuestring));
        return 0;
    }
    if (!cJSON_IsArray(input)) return BAD("input", "'input' must be a string or an array of input items");
    char *pending = NULL;
    bool open_assistant = false;
    int i = 0;
    for (const cJSON *it = input->child; it; it = it->next, i++)
        if (convert_item(it, i, messages, &pending, &open_assistant, e)) {
            free(pending);
            return -1;
        }
    free(pending); /* reasoning with nothing after it has nothing to attach to */
    return 0;
}

/* Flat Responses tools ({"type": "function", "name", "parameters", ...}) to chat tools. */
static int convert_tools(const cJSON *tools, cJSON *chat, ApiError *e) {
    if (!tools) return 0;
    if (!cJSON_IsArray(tools)) return BAD("tools", "'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(chat, "tools");
    int k = 0;
    for (const cJSON *t = tools->child; t; t = t->next, k++) {
        char where[32];
        snprintf(where, sizeof where, "tools[%d]", k);
        const cJSON *type = member(t, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
            return BAD(where, "%s: only tools of type 'function' are supported", where);
        static const char *const keys[] = {"type", "name", "description", "parameters", "strict", NULL};
        if (api_check_keys(t, keys, where, false, e)) return -1;
        cJSON *w = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "type", "function");
        copy_member(fn, t, "name", NULL);
        copy_member(fn, t, "description", NULL);
        copy_member(fn, t, "parameters", NULL);
        copy_member(fn, t, "strict", NULL);
        cJSON_AddItemToObject(w, "function", fn);
        cJSON_AddItemToArray(out, w);
    }
    return 0;
}

static int convert_tool_choice(const cJSON *tc, cJSON *chat, ApiError *e) {
    if (!tc) return 0;
    if (cJSON_IsString(tc)) {
        cJSON_AddItemToObject(chat, "tool_choice", cJSON_Duplicate(tc, true));
        return 0;
    }
    const cJSON *type = member(tc, "type"), *name = member(tc, "name");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !cJSON_IsString(name))
        return BAD("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice"), *fn = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    return 0;
}

/* text.format to response_format. */
static int convert_text(const cJSON *text, cJSON *chat, ApiError *e) {
    if (!text) return 0;
    if (!cJSON_IsObject(text)) return BAD("text", "'text' must be an object");
    static const char *const keys[] = {"format", "verbosity", NULL};
    if (api_check_keys(text, keys, "text", false, e)) return -1;
    const cJSON *f = member(text, "format");
    if (!f) return 0;
    const cJSON *type = member(f, "type");
    if (!cJSON_IsString(type)) return BAD("text.format", "text.format needs a 'type'");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddItemToObject(rf, "type", cJSON_Duplicate(type, true));
    if (!strcmp(type->valuestring, "json_schema")) {
        static const char *const fkeys[] = {"type", "name", "schema", "strict", "description", NULL};
        if (api_check_keys(f, fkeys, "text.format", false, e)) return -1;
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        copy_member(js, f, "name", NULL);
        copy_member(js, f, "schema", NULL);
        copy_member(js, f, "strict", NULL);
        copy_member(js, f, "description", NULL);
    }
    return 0;
}

/* The chat request this Responses request means; the conversation (without instructions) in *history. */
static cJSON *to_chat(const cJSON *doc, ResponsesStore *st, cJSON **history, ApiError *e) {
    cJSON *chat = cJSON_CreateObject(), *messages = cJSON_AddArrayToObject(chat, "messages");
    *history = NULL;
    const cJSON *instructions = member(doc, "instructions"), *prev = member(doc, "previous_response_id");
    if (instructions && !cJSON_IsString(instructions)) {
        BAD("instructions", "'instructions' must be a string");
        goto fail;
    }
    if (instructions) cJSON_AddItemToArray(messages, chat_message("system", instructions->valuestring));
    cJSON *hist = NULL;
    if (prev) {
        if (!cJSON_IsString(prev)) {
            BAD("previous_response_id", "'previous_response_id' must be a string");
            goto fail;
        }
        if (!(hist = rstore_messages(st, prev->valuestring))) {
            api_error(e, 400, "invalid_request_error", "previous_response_id", "previous_response_not_found",
                      "Previous response with id '%.100s' not found (responses are kept in memory for the server's "
                      "lifetime, when stored)", prev->valuestring);
            goto fail;
        }
    } else {
        hist = cJSON_CreateArray();
    }
    const cJSON *input = member(doc, "input");
    if (!input) {
        cJSON_Delete(hist);
        BAD("input", "'input' is required");
        goto fail;
    }
    if (convert_input(input, hist, e)) {
        cJSON_Delete(hist);
        goto fail;
    }
    for (const cJSON *m = hist->child; m; m = m->next) cJSON_AddItemToArray(messages, cJSON_Duplicate(m, true));
    *history = hist;
    if (convert_tools(member(doc, "tools"), chat, e) || convert_tool_choice(member(doc, "tool_choice"), chat, e) ||
        convert_text(member(doc, "text"), chat, e))
        goto fail;
    copy_member(chat, doc, "max_output_tokens", "max_tokens");
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                                       "frequency_penalty", "cache_prompt", "ignore_eos", "chat_template_kwargs", NULL};
    for (int i = 0; same[i]; i++) copy_member(chat, doc, same[i], NULL);
    return chat;
fail:
    cJSON_Delete(*history);
    *history = NULL;
    cJSON_Delete(chat);
    return NULL;
}

/* Errors of the chat validation, named as the Responses API names the fields. */
static void rename_param(ApiError *e) {
    static const char *const map[][2] = {{"max_tokens", "max_output_tokens"}, {"messages", "input"},
                                         {"response_format", "text.format"}, {"logprobs", "top_logprobs"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strncmp(e->param, map[i][0], strlen(map[i][0]))) {
            snprintf(e->param, sizeof e->param, "%s", map[i][1]);
            return;
        }
}

int responses_parse(const char *body, size_t len, const ApiDefaults *d, ResponsesStore *st, ApiRequest *r,
                    ApiError *e) {
    memset(r, 0, sizeof *r);
    if (len == 0) return BAD(NULL, "the request body is empty: a JSON object is expected");
    char msg[300], where[96];
    cJSON *doc = json_parse_body(body, len, true, msg, sizeof msg, where, sizeof where);
    if (!doc) return BAD(where[0] ? where : NULL, "%s", msg);
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        return BAD(NULL, "the request body must be a JSON object");
    }
    static const char *const keys[] = {
        "model", "input", "instructions", "previous_response_id", "store", "stream", "stream_options", "tools",
        "tool_choice", "parallel_tool_calls", "max_output_tokens", "max_tool_calls", "temperature", "top_p", "text",
        "reasoning", "metadata", "user", "truncation", "include", "service_tier", "background", "prompt_cache_key",
        "safety_identifier", "top_logprobs",
        /* extensions */
        "seed", "top_k", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty", "cache_prompt",
        "ignore_eos", "chat_template_kwargs", NULL};
    cJSON *history = NULL, *chat = NULL;
    char *text = NULL;
    int rc = -1;
    if (api_check_keys(doc, keys, "", true, e)) goto done;
    const cJSON *bg = member(doc, "background"), *store = member(doc, "store");
    if (cJSON_IsTrue(bg)) {
        BAD("background", "background responses are not supported by this server");
        goto done;
    }
    if (store && !cJSON_IsBool(store)) {
        BAD("store", "'store' must be a boolean");
        goto done;
    }
    const cJSON *trunc = member(doc, "truncation");
    if (trunc && (!cJSON_IsString(trunc) || strcmp(trunc->valuestring, "disabled") != 0))
        if (!cJSON_IsString(trunc) || strcmp(trunc->valuestring, "auto") != 0) {
            BAD("truncation", "'truncation' must be 'auto' or 'disabled'");
            goto done;
        }
    if (!(chat = to_chat(doc, st, &history, e))) goto done;
    if (!(text = json_print(chat))) {
        api_error(e, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    if (api_parse(true, text, strlen(text), d, r, e)) {
        rename_param(e);
        goto done;
    }
    ResponsesReq *q = calloc(1, sizeof *q);
    if (!q) {
        api_request_free(r);
        api_error(e, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    q->store = !store || cJSON_IsTrue(store);
    q->st = st;
    q->history = history;
    history = NULL;
    q->echo = cJSON_CreateObject();
    static const char *const echo[] = {"instructions", "max_output_tokens", "metadata", "parallel_tool_calls",
                                       "previous_response_id", "reasoning", "temperature", "text", "tool_choice",
                                       "tools", "top_p", "truncation", "user", NULL};
    for (int i = 0; echo[i]; i++) copy_member(q->echo, doc, echo[i], NULL);
    r->responses = q;
    rc = 0;
done:
    free(text);
    cJSON_Delete(chat);
    cJSON_Delete(history);
    cJSON_Delete(doc);
    return rc;
}

/* ------------------------------------------------------------------------------------------ output */

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
        const cJSON *v = member(echo, nulls[i]);
        cJSON_AddItemToObject(o, nulls[i], v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
    }
    const cJSON *v = member(echo, "metadata");
    cJSON_AddItemToObject(o, "metadata", v ? cJSON_Duplicate(v, true) : cJSON_CreateObject());
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddItemToObject(o, "output", output ? output : cJSON_CreateArray());
    v = member(echo, "parallel_tool_calls");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", !v || cJSON_IsTrue(v));
    v = member(echo, "reasoning");
    if (v) cJSON_AddItemToObject(o, "reasoning", cJSON_Duplicate(v, true));
    else {
        cJSON *re = cJSON_AddObjectToObject(o, "reasoning");
        cJSON_AddNullToObject(re, "effort");
        cJSON_AddNullToObject(re, "summary");
    }
    cJSON_AddBoolToObject(o, "store", rs->req.store);
    v = member(echo, "temperature");
    cJSON_AddItemToObject(o, "temperature", v ? cJSON_Duplicate(v, true) : cJSON_CreateNumber(1));
    v = member(echo, "text");
    if (v) cJSON_AddItemToObject(o, "text", cJSON_Duplicate(v, true));
    else cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format"), "type", "text");
    v = member(echo, "tool_choice");
    cJSON_AddItemToObject(o, "tool_choice", v ? cJSON_Duplicate(v, true) : cJSON_CreateString("auto"));
    v = member(echo, "tools");
    cJSON_AddItemToObject(o, "tools", v ? cJSON_Duplicate(v, true) : cJSON_CreateArray());
    v = member(echo, "top_p");
    cJSON_AddItemToObject(o, "top_p", v ? cJSON_Duplicate(v, true) : cJSON_CreateNumber(1));
    v = member(echo, "truncation");
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
