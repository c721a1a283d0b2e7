/* responses.c — see responses.h: the Responses API request translated into a chat request, and the stored
 * conversations behind previous_response_id. The output side is responses_out.c. */
#include "server/responses.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
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

void rstore_put(ResponsesStore *st, const char *id, cJSON *messages, char *json) {
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

void responses_req_free(ResponsesReq *q) {
    if (!q) return;
    cJSON_Delete(q->echo);
    cJSON_Delete(q->history);
    free(q);
}

static void copy_json_member(cJSON *to, const cJSON *from, const char *k, const char *as) {
    const cJSON *v = json_member(from, k);
    if (v) cJSON_AddItemToObject(to, as ? as : k, cJSON_Duplicate(v, true));
}

/* The text of a content value: a string, or parts of the given text types joined. With parts (user messages),
 * input_image parts are taken: *parts becomes the chat content array (text and image_url parts in order). */
static int content_text(const cJSON *c, const char *where, bool assistant, SBuf *out, cJSON **parts, ApiError *e) {
    size_t mark = 0;
    if (cJSON_IsString(c)) {
        sbuf_puts(out, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD(where, "%s: content must be a string or an array of content parts", where);
    int k = 0;
    for (const cJSON *p = c->child; p; p = p->next, k++) {
        const cJSON *t = json_member(p, "type");
        const char *type = cJSON_IsString(t) ? t->valuestring : "";
        const char *field = !strcmp(type, "refusal") ? "refusal" : "text";
        if (!strcmp(type, "input_image") && parts) {
            const cJSON *url = json_member(p, "image_url");
            if (!cJSON_IsString(url))
                return BAD(where, "%s: content[%d]: an input_image needs 'image_url' (a data URL; file_id is not "
                                  "supported)", where, k);
            if (!*parts) *parts = cJSON_CreateArray();
            json_flush_text_part(*parts, out, &mark);
            cJSON *im = cJSON_CreateObject();
            cJSON_AddStringToObject(im, "type", "image_url");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(im, "image_url"), "url", url->valuestring);
            cJSON_AddItemToArray(*parts, im);
            continue;
        }
        if (!strcmp(type, "input_image") || !strcmp(type, "input_file") || !strcmp(type, "input_audio"))
            return BAD(where, "%s: content[%d] of type '%s' is not supported: this server handles text only", where, k,
                       type);
        if (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text") &&
            !(assistant && !strcmp(type, "refusal")))
            return BAD(where, "%s: content[%d] has an unknown type '%s'", where, k, type);
        const cJSON *text = json_member(p, field);
        if (!cJSON_IsString(text)) return BAD(where, "%s: content[%d] needs '%s' (a string)", where, k, field);
        sbuf_puts(out, text->valuestring);
    }
    if (parts && *parts) json_flush_text_part(*parts, out, &mark);
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
    const cJSON *type = json_member(it, "type"), *role = json_member(it, "role");
    const char *t = cJSON_IsString(type) ? type->valuestring : role ? "message" : "";
    if (!strcmp(t, "message")) {
        static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
        if (!cJSON_IsString(role)) return BAD(where, "%s: a message needs a 'role'", where);
        bool known = false;
        for (int k = 0; roles[k]; k++) known |= !strcmp(role->valuestring, roles[k]);
        if (!known) return BAD(where, "%s: unknown role '%s' (user, assistant, system or developer)", where, role->valuestring);
        bool assistant = !strcmp(role->valuestring, "assistant");
        SBuf text = {0};
        const cJSON *c = json_member(it, "content");
        if (!c) return BAD(where, "%s: a message needs 'content'", where);
        cJSON *parts = NULL;
        const bool user = !strcmp(role->valuestring, "user");
        if (content_text(c, where, assistant, &text, user ? &parts : NULL, e))
            return sbuf_free(&text), cJSON_Delete(parts), -1;
        cJSON *m = chat_message(!strcmp(role->valuestring, "developer") ? "system" : role->valuestring,
                                parts ? NULL : text.p ? text.p : "");
        if (parts) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", parts);
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
        const cJSON *name = json_member(it, "name"), *args = json_member(it, "arguments"), *call_id = json_member(it, "call_id");
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
        const cJSON *call_id = json_member(it, "call_id"), *output = json_member(it, "output");
        if (!cJSON_IsString(call_id)) return BAD(where, "%s: a function_call_output needs 'call_id' (a string)", where);
        SBuf text = {0};
        if (!output) return BAD(where, "%s: a function_call_output needs 'output'", where);
        if (content_text(output, where, false, &text, NULL, e)) return sbuf_free(&text), -1;
        cJSON *m = chat_message("tool", text.p ? text.p : "");
        sbuf_free(&text);
        cJSON_AddStringToObject(m, "tool_call_id", call_id->valuestring);
        cJSON_AddItemToArray(messages, m);
        *open_assistant = false;
        return 0;
    }
    if (!strcmp(t, "reasoning")) {
        SBuf text = {0};
        const cJSON *content = json_member(it, "content"), *summary = json_member(it, "summary");
        const cJSON *parts = content ? content : summary;
        for (const cJSON *p = cJSON_IsArray(parts) ? parts->child : NULL; p; p = p->next) {
            const cJSON *s = json_member(p, "text");
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
        const cJSON *type = json_member(t, "type");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
            return BAD(where, "%s: only tools of type 'function' are supported", where);
        static const char *const keys[] = {"type", "name", "description", "parameters", "strict", NULL};
        if (api_check_keys(t, keys, where, false, e)) return -1;
        cJSON *w = cJSON_CreateObject(), *fn = cJSON_CreateObject();
        cJSON_AddStringToObject(w, "type", "function");
        copy_json_member(fn, t, "name", NULL);
        copy_json_member(fn, t, "description", NULL);
        copy_json_member(fn, t, "parameters", NULL);
        copy_json_member(fn, t, "strict", NULL);
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
    const cJSON *type = json_member(tc, "type"), *name = json_member(tc, "name");
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
    const cJSON *f = json_member(text, "format");
    if (!f) return 0;
    const cJSON *type = json_member(f, "type");
    if (!cJSON_IsString(type)) return BAD("text.format", "text.format needs a 'type'");
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    cJSON_AddItemToObject(rf, "type", cJSON_Duplicate(type, true));
    if (!strcmp(type->valuestring, "json_schema")) {
        static const char *const fkeys[] = {"type", "name", "schema", "strict", "description", NULL};
        if (api_check_keys(f, fkeys, "text.format", false, e)) return -1;
        cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
        copy_json_member(js, f, "name", NULL);
        copy_json_member(js, f, "schema", NULL);
        copy_json_member(js, f, "strict", NULL);
        copy_json_member(js, f, "description", NULL);
    }
    return 0;
}

/* The chat request this Responses request means; the conversation (without instructions) in *history. */
static cJSON *to_chat(const cJSON *doc, ResponsesStore *st, cJSON **history, ApiError *e) {
    cJSON *chat = cJSON_CreateObject(), *messages = cJSON_AddArrayToObject(chat, "messages");
    *history = NULL;
    const cJSON *instructions = json_member(doc, "instructions"), *prev = json_member(doc, "previous_response_id");
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
    const cJSON *input = json_member(doc, "input");
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
    if (convert_tools(json_member(doc, "tools"), chat, e) || convert_tool_choice(json_member(doc, "tool_choice"), chat, e) ||
        convert_text(json_member(doc, "text"), chat, e))
        goto fail;
    copy_json_member(chat, doc, "max_output_tokens", "max_tokens");
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p", "repeat_penalty", "presence_penalty",
                                       "frequency_penalty", "cache_prompt", "ignore_eos", "chat_template_kwargs", "grammar", NULL};
    for (int i = 0; same[i]; i++) copy_json_member(chat, doc, same[i], NULL);
    return chat;
fail:
    cJSON_Delete(*history);
    *history = NULL;
    cJSON_Delete(chat);
    return NULL;
}

/* Replaces the whole word `from` (not part of a longer name) by `to` in text (cap bytes). */
static void replace_word(char *text, size_t cap, const char *from, const char *to) {
    char out[1024];
    size_t n = 0, nf = strlen(from), nt = strlen(to);
    for (const char *p = text; *p && n + 1 < sizeof out;) {
        bool word = !strncmp(p, from, nf) && (p == text || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
                    !(isalnum((unsigned char)p[nf]) || p[nf] == '_');
        if (word && n + nt + 1 < sizeof out) {
            memcpy(out + n, to, nt);
            n += nt;
            p += nf;
        } else {
            out[n++] = *p++;
        }
    }
    if (n >= cap) n = cap - 1;
    memcpy(text, out, n);
    text[n] = 0;
}

/* Errors of the chat validation, named as the Responses API names the fields (param and message). */
static void rename_param(ApiError *e) {
    static const char *const map[][2] = {{"max_tokens", "max_output_tokens"}, {"messages", "input"},
                                         {"response_format", "text.format"}, {"logprobs", "top_logprobs"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (!strncmp(e->param, map[i][0], strlen(map[i][0]))) snprintf(e->param, sizeof e->param, "%s", map[i][1]);
        replace_word(e->message, sizeof e->message, map[i][0], map[i][1]);
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
        "ignore_eos", "chat_template_kwargs", "grammar", NULL};
    cJSON *history = NULL, *chat = NULL;
    char *text = NULL;
    int rc = -1;
    if (api_check_keys(doc, keys, "", true, e)) goto done;
    const cJSON *bg = json_member(doc, "background"), *store = json_member(doc, "store");
    if (cJSON_IsTrue(bg)) {
        BAD("background", "background responses are not supported by this server");
        goto done;
    }
    if (store && !cJSON_IsBool(store)) {
        BAD("store", "'store' must be a boolean");
        goto done;
    }
    const cJSON *trunc = json_member(doc, "truncation");
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
    for (int i = 0; echo[i]; i++) copy_json_member(q->echo, doc, echo[i], NULL);
    r->responses = q;
    rc = 0;
done:
    free(text);
    cJSON_Delete(chat);
    cJSON_Delete(history);
    cJSON_Delete(doc);
    return rc;
}

