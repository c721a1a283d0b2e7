/* anthropic_req.c — see anthropic.h: an Anthropic Messages request to a chat request (kept apart from the
 * output side so that the HTTP fuzz target drives it without the engine). */
#include "server/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_io.h"
#include "server/llama_params.h"

#define BAD(param, ...) api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

static const cJSON *get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* The text of a content that is a string or an array of text blocks (others refused). */
static int block_text(const cJSON *c, const char *where, SBuf *out, ApiError *e) {
    if (cJSON_IsString(c)) {
        sbuf_puts(out, c->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(c)) return BAD(where, "%s must be a string or an array of text blocks", where);
    for (const cJSON *b = c->child; b; b = b->next) {
        const cJSON *t = get(b, "type"), *text = get(b, "text");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") != 0 || !cJSON_IsString(text))
            return BAD(where, "%s: only text blocks are supported here", where);
        sbuf_puts(out, text->valuestring);
    }
    return 0;
}

/* An image block with a base64 source → an image_url part (a data URL) at the end of *parts. */
static int image_part(const cJSON *b, const char *bw, cJSON **parts, const SBuf *text, size_t *mark, ApiError *e) {
    const cJSON *src = get(b, "source");
    const cJSON *st = cJSON_IsObject(src) ? get(src, "type") : NULL;
    if (!cJSON_IsString(st)) return BAD(bw, "%s: an image block needs a 'source' with a 'type'", bw);
    if (!strcmp(st->valuestring, "url"))
        return BAD(bw, "%s: remote image URLs are not fetched by this server: send the image as a base64 source", bw);
    const cJSON *mt = get(src, "media_type"), *data = get(src, "data");
    if (strcmp(st->valuestring, "base64") || !cJSON_IsString(mt) || !cJSON_IsString(data))
        return BAD(bw, "%s: an image source must be {\"type\": \"base64\", \"media_type\", \"data\"}", bw);
    SBuf url = {0};
    sbuf_printf(&url, "data:%s;base64,", mt->valuestring);
    sbuf_puts(&url, data->valuestring);
    if (url.oom) return sbuf_free(&url), api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    if (!*parts) *parts = cJSON_CreateArray();
    json_flush_text_part(*parts, text, mark);
    cJSON *im = cJSON_CreateObject();
    cJSON_AddStringToObject(im, "type", "image_url");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(im, "image_url"), "url", url.p);
    cJSON_AddItemToArray(*parts, im);
    sbuf_free(&url);
    return 0;
}

/* One Anthropic message → one or more chat messages appended to msgs. */
static int convert_message(const cJSON *m, int i, cJSON *msgs, ApiError *e) {
    char where[64];
    snprintf(where, sizeof where, "messages[%d]", i);
    if (!cJSON_IsObject(m)) return BAD(where, "%s must be an object", where);
    const cJSON *role = get(m, "role"), *content = get(m, "content");
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return BAD(where, "%s: role must be 'user' or 'assistant'", where);
    const bool user = !strcmp(role->valuestring, "user");
    if (!content) return BAD(where, "%s needs a content", where);
    SBuf text = {0}, thinking = {0};
    cJSON *calls = NULL, *parts = NULL; /* parts: the user's text and images, when it has images */
    size_t mark = 0;
    int rc = 0;
    if (cJSON_IsString(content)) {
        sbuf_puts(&text, content->valuestring);
    } else if (!cJSON_IsArray(content)) {
        rc = BAD(where, "%s.content must be a string or an array of content blocks", where);
    } else {
        int k = 0;
        for (const cJSON *b = content->child; b && !rc; b = b->next, k++) {
            char bw[96];
            snprintf(bw, sizeof bw, "%s.content[%d]", where, k);
            const cJSON *t = get(b, "type");
            const char *type = cJSON_IsString(t) ? t->valuestring : "";
            if (!strcmp(type, "text")) {
                const cJSON *x = get(b, "text");
                if (!cJSON_IsString(x)) rc = BAD(bw, "%s: a text block needs 'text'", bw);
                else sbuf_puts(&text, x->valuestring);
            } else if (!strcmp(type, "thinking") && !user) {
                const cJSON *x = get(b, "thinking");
                if (cJSON_IsString(x)) sbuf_puts(&thinking, x->valuestring);
            } else if (!strcmp(type, "redacted_thinking") && !user) {
                continue;
            } else if (!strcmp(type, "tool_use") && !user) {
                const cJSON *id = get(b, "id"), *name = get(b, "name"), *input = get(b, "input");
                if (!cJSON_IsString(id) || !cJSON_IsString(name) || (input && !cJSON_IsObject(input))) {
                    rc = BAD(bw, "%s: a tool_use block needs 'id', 'name' and an object 'input'", bw);
                    break;
                }
                if (!calls) calls = cJSON_CreateArray();
                cJSON *call = cJSON_CreateObject();
                cJSON_AddStringToObject(call, "id", id->valuestring);
                cJSON_AddStringToObject(call, "type", "function");
                cJSON *f = cJSON_AddObjectToObject(call, "function");
                cJSON_AddStringToObject(f, "name", name->valuestring);
                char *args = input ? json_print(input) : NULL;
                cJSON_AddStringToObject(f, "arguments", args ? args : "{}");
                free(args);
                cJSON_AddItemToArray(calls, call);
            } else if (!strcmp(type, "tool_result") && user) {
                const cJSON *id = get(b, "tool_use_id"), *c = get(b, "content");
                if (!cJSON_IsString(id)) {
                    rc = BAD(bw, "%s: a tool_result block needs 'tool_use_id'", bw);
                    break;
                }
                SBuf r = {0};
                if (c && block_text(c, bw, &r, e)) {
                    sbuf_free(&r);
                    rc = -1;
                    break;
                }
                cJSON *tm = cJSON_CreateObject();
                cJSON_AddStringToObject(tm, "role", "tool");
                cJSON_AddStringToObject(tm, "tool_call_id", id->valuestring);
                json_add_string_n(tm, "content", r.p ? r.p : "", r.n);
                cJSON_AddItemToArray(msgs, tm);
                sbuf_free(&r);
            } else if (!strcmp(type, "image") && user) {
                rc = image_part(b, bw, &parts, &text, &mark, e);
            } else if (!strcmp(type, "image") || !strcmp(type, "document")) {
                rc = BAD(bw, "%s: content of type '%s' is not supported: this server handles text only", bw, type);
            } else {
                rc = BAD(bw, "%s: unknown or misplaced content block type '%s'", bw, type);
            }
        }
    }
    if (!rc && (text.n || thinking.n || calls || parts || (cJSON_IsString(content)))) {
        cJSON *cm = cJSON_CreateObject();
        cJSON_AddStringToObject(cm, "role", role->valuestring);
        if (parts) json_flush_text_part(parts, &text, &mark), cJSON_AddItemToObject(cm, "content", parts), parts = NULL;
        else if (text.n || !calls) json_add_string_n(cm, "content", text.p ? text.p : "", text.n);
        else cJSON_AddNullToObject(cm, "content");
        if (thinking.n) json_add_string_n(cm, "reasoning_content", thinking.p, thinking.n);
        if (calls) cJSON_AddItemToObject(cm, "tool_calls", calls), calls = NULL;
        cJSON_AddItemToArray(msgs, cm);
    }
    cJSON_Delete(calls);
    cJSON_Delete(parts);
    sbuf_free(&text);
    sbuf_free(&thinking);
    return rc;
}

static int convert_tools(const cJSON *tools, const cJSON *choice, cJSON *chat, ApiError *e) {
    if (tools) {
        if (!cJSON_IsArray(tools)) return BAD("tools", "'tools' must be an array");
        cJSON *arr = cJSON_AddArrayToObject(chat, "tools");
        int k = 0;
        for (const cJSON *t = tools->child; t; t = t->next, k++) {
            char w[32];
            snprintf(w, sizeof w, "tools[%d]", k);
            const cJSON *name = get(t, "name"), *desc = get(t, "description"), *schema = get(t, "input_schema");
            if (!cJSON_IsObject(t) || !cJSON_IsString(name)) return BAD(w, "%s needs a 'name'", w);
            if (schema && !cJSON_IsObject(schema)) return BAD(w, "%s: input_schema must be an object", w);
            cJSON *o = cJSON_CreateObject(), *f;
            cJSON_AddStringToObject(o, "type", "function");
            f = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            if (cJSON_IsString(desc)) cJSON_AddStringToObject(f, "description", desc->valuestring);
            cJSON_AddItemToObject(f, "parameters", schema ? cJSON_Duplicate(schema, true) : cJSON_CreateObject());
            cJSON_AddItemToArray(arr, o);
        }
    }
    if (choice) {
        const cJSON *t = get(choice, "type");
        if (!cJSON_IsObject(choice) || !cJSON_IsString(t)) return BAD("tool_choice", "tool_choice must be an object with a 'type'");
        const char *ty = t->valuestring;
        if (!strcmp(ty, "auto")) cJSON_AddStringToObject(chat, "tool_choice", "auto");
        else if (!strcmp(ty, "any")) cJSON_AddStringToObject(chat, "tool_choice", "required");
        else if (!strcmp(ty, "none")) cJSON_AddStringToObject(chat, "tool_choice", "none");
        else if (!strcmp(ty, "tool")) {
            const cJSON *name = get(choice, "name");
            if (!cJSON_IsString(name)) return BAD("tool_choice", "tool_choice of type 'tool' needs a 'name'");
            cJSON *o = cJSON_CreateObject(), *f;
            cJSON_AddStringToObject(o, "type", "function");
            f = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(f, "name", name->valuestring);
            cJSON_AddItemToObject(chat, "tool_choice", o);
        } else {
            return BAD("tool_choice", "tool_choice.type must be auto, any, tool or none");
        }
    }
    return 0;
}

int anthropic_parse(const char *body, size_t len, const ApiDefaults *d, ApiRequest *r, ApiError *e) {
    memset(r, 0, sizeof *r);
    if (!len) return BAD(NULL, "the request body is empty: a JSON object is expected");
    char msg[300], where[96];
    cJSON *doc = json_parse_body(body, len, false, msg, sizeof msg, where, sizeof where);
    if (!doc) return BAD(where[0] ? where : NULL, "%s", msg);
    int rc = 0;
    cJSON *chat = cJSON_CreateObject();
    static const char *const keys[] = {"model", "max_tokens", "messages", "system", "stop_sequences", "stream",
                                       "temperature", "top_p", "top_k", "tools", "tool_choice", "thinking", "metadata",
                                       "service_tier", "seed", "min_p", "cache_prompt", "grammar", LLAMA_SAMPLING_KEYS,
                                       NULL};
    if (!cJSON_IsObject(doc)) rc = BAD(NULL, "the request body must be a JSON object");
    if (!rc) rc = api_check_keys(doc, keys, "", true, e);
    const cJSON *mt = get(doc, "max_tokens"), *msgs = get(doc, "messages");
    if (!rc && !mt) rc = BAD("max_tokens", "'max_tokens' is required");
    if (!rc && (!cJSON_IsArray(msgs) || !msgs->child)) rc = BAD("messages", "'messages' must be a non-empty array");
    cJSON *out = rc ? NULL : cJSON_AddArrayToObject(chat, "messages");
    const cJSON *sys = rc ? NULL : get(doc, "system");
    if (sys) {
        SBuf s = {0};
        rc = block_text(sys, "system", &s, e);
        if (!rc) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "system");
            json_add_string_n(m, "content", s.p ? s.p : "", s.n);
            cJSON_AddItemToArray(out, m);
        }
        sbuf_free(&s);
    }
    int i = 0;
    for (const cJSON *m = rc ? NULL : msgs->child; m && !rc; m = m->next, i++) rc = convert_message(m, i, out, e);
    if (!rc) rc = convert_tools(get(doc, "tools"), get(doc, "tool_choice"), chat, e);
    const cJSON *th = rc ? NULL : get(doc, "thinking");
    if (th) {
        const cJSON *t = get(th, "type");
        if (!cJSON_IsString(t) || (strcmp(t->valuestring, "enabled") && strcmp(t->valuestring, "disabled")))
            rc = BAD("thinking", "thinking.type must be 'enabled' or 'disabled'");
        else
            cJSON_AddBoolToObject(cJSON_AddObjectToObject(chat, "chat_template_kwargs"), "enable_thinking",
                                  !strcmp(t->valuestring, "enabled"));
    }
    /* the rest is the chat request's, under its names (checked by api_parse) */
    static const char *const same[] = {"model", "max_tokens", "stream", "temperature", "top_p", "top_k", "seed", "min_p",
                                       "cache_prompt", "grammar", LLAMA_SAMPLING_KEYS, NULL};
    for (int k = 0; !rc && same[k]; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, same[k]);
        if (v) cJSON_AddItemToObject(chat, same[k], cJSON_Duplicate(v, true));
    }
    const cJSON *stops = rc ? NULL : get(doc, "stop_sequences");
    if (stops) cJSON_AddItemToObject(chat, "stop", cJSON_Duplicate(stops, true));
    if (!rc && get(doc, "metadata") && !cJSON_IsObject(get(doc, "metadata")))
        rc = BAD("metadata", "'metadata' must be an object");
    char *text = rc ? NULL : json_print(chat);
    cJSON_Delete(chat);
    cJSON_Delete(doc);
    if (rc) return -1;
    if (!text) return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    rc = api_parse(true, text, strlen(text), d, r, e);
    free(text);
    return rc;
}
