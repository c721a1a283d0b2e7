/* chat_parse.c — generated text -> reasoning, content and tool calls, incrementally (see chat.h).
 *
 * A small state machine over the text as it streams in:
 *
 *   START ──"<think>"──> REASONING ──"</think>"──> CONTENT <──"</tool_call>"── TOOL_CALL
 *     └──────── anything else ────────────────────────┘  └────"<tool_call>"────────┘
 *
 * START exists only for formats with reasoning whose prompt did not already open <think>: leading
 * whitespace and then "<think>" enter REASONING, anything else is content. Tags are found by plain byte
 * search; a text tail that could be the beginning of the tag being looked for is held back until the
 * next piece decides it. Whitespace the templates put around blocks is not reported: newlines just
 * inside <think>...</think>, newlines after </think>, whitespace before, between and after tool calls.
 *
 * Tool-call bodies:
 *   QWEN3 / CHATML  {"name": "...", "arguments": {...}}  (arguments may also be a string holding JSON)
 *   QWEN35 / CODER  <function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>
 * XML values are typed with the request's tool schema when there is one ("string" parameters stay
 * strings; integer/number/boolean/object/array are converted when they parse), otherwise a value that
 * is a JSON object, array, number, true/false or null is taken as JSON and anything else as a string.
 * Arguments come out as JSON text in Python's json.dumps style ({"city": "Paris"}). */
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"

typedef enum ParseState { ST_START, ST_REASONING, ST_CONTENT, ST_TOOL, ST_DONE } ParseState;

static const char TAG_THINK[] = "<think>", TAG_THINK_END[] = "</think>", TAG_CALL[] = "<tool_call>",
                  TAG_CALL_END[] = "</tool_call>";

struct ChatParser {
    ChatFormat fmt;
    bool reasoning_enabled, xml_calls;
    cJSON *tools;
    ParseState state;
    StrBuf pending;       /* input not yet decided */
    bool reasoning_begun; /* a non-newline reasoning byte was emitted (leading newlines are dropped) */
    size_t reasoning_nl;  /* trailing newlines of reasoning held back */
    bool content_begun;   /* content text was emitted (leading newlines after </think> are dropped) */
    bool skip_ws;         /* after a tool call: leading whitespace is dropped */
    StrBuf content_ws;    /* trailing whitespace of content held back */
    StrBuf tool_body;
    bool any_tool_call;
    /* this feed's output */
    StrBuf d_reasoning, d_content;
    size_t delta_first_call;
    /* everything so far */
    StrBuf all_reasoning, all_content;
    ChatToolCall *calls;
    size_t n_calls, cap_calls;
};

ChatParser *chat_parser_new(ChatFormat fmt, bool starts_in_reasoning, const cJSON *tools, Err *err) {
    ChatParser *p = calloc(1, sizeof *p);
    if (!p) {
        err_set(err, "out of memory");
        return NULL;
    }
    p->fmt = fmt;
    p->reasoning_enabled = fmt != CHAT_FORMAT_QWEN3_CODER;
    p->xml_calls = fmt == CHAT_FORMAT_QWEN35 || fmt == CHAT_FORMAT_QWEN3_CODER;
    if (cJSON_IsArray(tools) && !(p->tools = cJSON_Duplicate(tools, true))) {
        free(p);
        err_set(err, "out of memory");
        return NULL;
    }
    p->state = !p->reasoning_enabled ? ST_CONTENT : starts_in_reasoning ? ST_REASONING : ST_START;
    return p;
}

void chat_parser_free(ChatParser *p) {
    if (!p) return;
    cJSON_Delete(p->tools);
    sb_free(&p->pending);
    sb_free(&p->content_ws);
    sb_free(&p->tool_body);
    sb_free(&p->d_reasoning);
    sb_free(&p->d_content);
    sb_free(&p->all_reasoning);
    sb_free(&p->all_content);
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    free(p);
}

/* ------------------------------------------------------------------------------------------ output */

static void out_reasoning(ChatParser *p, const char *s, size_t n) {
    sb_put(&p->d_reasoning, s, n);
    sb_put(&p->all_reasoning, s, n);
}

static void out_content(ChatParser *p, const char *s, size_t n) {
    sb_put(&p->d_content, s, n);
    sb_put(&p->all_content, s, n);
}

/* Reasoning text: leading newlines dropped, trailing newlines held until more reasoning follows. */
static void emit_reasoning(ChatParser *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n') {
            if (p->reasoning_begun) p->reasoning_nl++;
            continue;
        }
        for (; p->reasoning_nl; p->reasoning_nl--) out_reasoning(p, "\n", 1);
        size_t j = i;
        while (j < n && s[j] != '\n') j++;
        out_reasoning(p, s + i, j - i);
        p->reasoning_begun = true;
        i = j - 1;
    }
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* Content text: newlines right after </think> and whitespace right after a tool call are dropped;
 * trailing whitespace is held until non-whitespace follows (it is dropped before a tool call). */
static void emit_content(ChatParser *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!p->content_begun && (p->skip_ws ? is_ws(s[i]) : s[i] == '\n')) continue;
        if (is_ws(s[i])) {
            sb_putc(&p->content_ws, s[i]);
            continue;
        }
        if (p->content_ws.n) {
            out_content(p, p->content_ws.p, p->content_ws.n);
            p->content_ws.n = 0;
        }
        size_t j = i;
        while (j < n && !is_ws(s[j])) j++;
        out_content(p, s + i, j - i);
        p->content_begun = true;
        p->skip_ws = false;
        i = j - 1;
    }
}

/* ---------------------------------------------------------------------------------- tool call bodies */

static cJSON *find_param_schema(const ChatParser *p, const char *fn_name, const char *param) {
    for (const cJSON *t = p->tools ? p->tools->child : NULL; t; t = t->next) {
        const cJSON *f = jget(t, "function") ? jget(t, "function") : t;
        const char *name = jstr(f, "name");
        if (name && !strcmp(name, fn_name)) return cJSON_GetObjectItemCaseSensitive(jget(jget(f, "parameters"), "properties"), param);
    }
    return NULL;
}

static bool schema_allows(const cJSON *schema, const char *type) {
    const cJSON *t = jget(schema, "type");
    if (cJSON_IsString(t)) return !strcmp(t->valuestring, type);
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : NULL; e; e = e->next)
        if (cJSON_IsString(e) && !strcmp(e->valuestring, type)) return true;
    return false;
}

/* Strict JSON number syntax (cJSON alone would accept "0123" or "1."). */
static bool is_json_number(const char *s) {
    if (*s == '-') s++;
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9') while (*s >= '0' && *s <= '9') s++;
    else return false;
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return false;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == 0;
}

/* s as a JSON value with numbers kept exact (raw), or NULL; a bare number must be strict JSON syntax */
static cJSON *parse_json_exact(const char *s) {
    const char *end = NULL;
    const size_t n = strlen(s);
    cJSON *v = chat_json_parse(s, n, &end);
    while (v && end && *end && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (v && ((end && *end) || (cJSON_IsRaw(v) && !is_json_number(s)))) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

/* An XML parameter value as a typed JSON value. */
static cJSON *typed_value(const ChatParser *p, const char *fn, const char *param, const char *text) {
    const cJSON *schema = find_param_schema(p, fn, param);
    if (schema) {
        if (schema_allows(schema, "string")) return cJSON_CreateString(text);
        if (schema_allows(schema, "boolean")) {
            if (!strcmp(text, "true") || !strcmp(text, "True")) return cJSON_CreateTrue();
            if (!strcmp(text, "false") || !strcmp(text, "False")) return cJSON_CreateFalse();
        }
        if ((schema_allows(schema, "integer") || schema_allows(schema, "number")) && is_json_number(text))
            return parse_json_exact(text);
        cJSON *v = parse_json_exact(text);
        if (v && (cJSON_IsObject(v) || cJSON_IsArray(v) || cJSON_IsNull(v))) return v;
        cJSON_Delete(v);
        return cJSON_CreateString(text);
    }
    cJSON *v = parse_json_exact(text);
    if (v && !cJSON_IsString(v)) return v;
    cJSON_Delete(v);
    return cJSON_CreateString(text);
}

static const char *skip_ws(const char *s, const char *end) {
    while (s < end && is_ws(*s)) s++;
    return s;
}

static bool starts_with(const char *s, const char *end, const char *prefix) {
    size_t n = strlen(prefix);
    return (size_t)(end - s) >= n && memcmp(s, prefix, n) == 0;
}

/* <function=NAME> ... </function> -> name and arguments object. */
static bool parse_xml_call(const ChatParser *p, const char *s, size_t n, char **name_out, cJSON **args_out) {
    const char *end = s + n, *q = skip_ws(s, end);
    if (!starts_with(q, end, "<function=")) return false;
    q += 10;
    const char *gt = memchr(q, '>', (size_t)(end - q));
    if (!gt || gt == q || memchr(q, '\n', (size_t)(gt - q))) return false;
    char *name = strndup(q, (size_t)(gt - q));
    cJSON *args = cJSON_CreateObject();
    bool ok = name && args;
    q = gt + 1;
    while (ok) {
        q = skip_ws(q, end);
        if (q == end) break; /* tolerate a missing </function> */
        if (starts_with(q, end, "</function>")) {
            q = skip_ws(q + 11, end);
            ok = q == end;
            break;
        }
        if (!starts_with(q, end, "<parameter=")) {
            ok = false;
            break;
        }
        q += 11;
        gt = memchr(q, '>', (size_t)(end - q));
        if (!gt || gt == q) {
            ok = false;
            break;
        }
        char *pname = strndup(q, (size_t)(gt - q));
        const char *v = gt + 1, *ve = memmem(v, (size_t)(end - v), "</parameter>", 12);
        const char *next = ve ? ve + 12 : end;
        if (!ve) { /* unterminated last parameter (generation cut short): up to </function> or the end */
            const char *fe = memmem(v, (size_t)(end - v), "</function>", 11);
            ve = next = fe ? fe : end;
        }
        if (v < ve && *v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        char *val = pname ? strndup(v, (size_t)(ve - v)) : NULL;
        cJSON *typed = val ? typed_value(p, name, pname, val) : NULL;
        ok = typed != NULL;
        if (ok) cJSON_AddItemToObject(args, pname, typed);
        free(pname);
        free(val);
        q = next;
    }
    if (!ok) {
        free(name);
        cJSON_Delete(args);
        return false;
    }
    *name_out = name;
    *args_out = args;
    return true;
}

/* {"name": ..., "arguments": ...} -> name and arguments object. */
static bool parse_json_call(const char *s, size_t n, char **name_out, cJSON **args_out) {
    char *text = malloc(n + 1); /* not strndup: the text may hold a NUL, and n bytes are parsed */
    if (text) memcpy(text, s, n), text[n] = 0;
    const char *end = NULL;
    cJSON *v = text ? chat_json_parse(text, n, &end) : NULL;
    bool ok = cJSON_IsObject(v) && end && skip_ws(end, text + n) == text + n; /* nothing but whitespace after it */
    const char *name = ok ? jstr(v, "name") : NULL;
    const cJSON *a = ok ? jget(v, "arguments") : NULL;
    if (ok && !a) a = jget(v, "parameters");
    cJSON *args = NULL;
    if (name) {
        if (!a || cJSON_IsNull(a)) args = cJSON_CreateObject();
        else if (cJSON_IsObject(a)) args = cJSON_Duplicate(a, true);
        else if (cJSON_IsString(a) &&
                 !cJSON_IsObject(args = chat_json_parse(a->valuestring, strlen(a->valuestring), NULL))) {
            cJSON_Delete(args);
            args = NULL;
        }
    }
    bool good = name && args && (*name_out = strdup(name)) != NULL;
    if (good) *args_out = args;
    else cJSON_Delete(args);
    cJSON_Delete(v);
    free(text);
    return good;
}

static int add_call(ChatParser *p, char *name, cJSON *args) {
    StrBuf b = {0};
    py_tojson(&b, args);
    cJSON_Delete(args);
    char *json = sb_take(&b, NULL);
    if (json && p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? p->cap_calls * 2 : 4;
        ChatToolCall *c = realloc(p->calls, cap * sizeof *c);
        if (c) {
            p->calls = c;
            p->cap_calls = cap;
        } else {
            free(json);
            json = NULL;
        }
    }
    if (!json) {
        free(name);
        return -1;
    }
    p->calls[p->n_calls++] = (ChatToolCall){name, json};
    p->any_tool_call = true;
    return 0;
}

/* A complete <tool_call> body: a call, or (when it does not parse) the raw text as content. */
static int finish_tool_body(ChatParser *p, bool closed) {
    char *name = NULL;
    cJSON *args = NULL;
    const char *s = p->tool_body.p ? p->tool_body.p : "";
    size_t n = p->tool_body.n;
    bool ok = p->xml_calls ? parse_xml_call(p, s, n, &name, &args) : parse_json_call(s, n, &name, &args);
    int rc = 0;
    if (ok) {
        rc = add_call(p, name, args);
        p->content_ws.n = 0; /* whitespace before a call is not content */
        p->content_begun = false;
        p->skip_ws = true;
    } else {
        emit_content(p, TAG_CALL, strlen(TAG_CALL));
        emit_content(p, s, n);
        if (closed) emit_content(p, TAG_CALL_END, strlen(TAG_CALL_END));
    }
    p->tool_body.n = 0;
    return rc;
}

/* --------------------------------------------------------------------------------------- the machine */

/* Length of the longest proper prefix of tag that the text ends with. */
static size_t partial_tag(const char *s, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t k = t - 1; k > 0; k--)
        if (n >= k && memcmp(s + n - k, tag, k) == 0) return k;
    return 0;
}

/* Consumes what can be decided from p->pending. With final, nothing is held back. */
static int run(ChatParser *p, bool final) {
    for (;;) {
        const char *s = p->pending.p ? p->pending.p : "";
        size_t n = p->pending.n, used = 0;
        bool progress = false;
        switch (p->state) {
        case ST_START: {
            size_t i = 0;
            while (i < n && is_ws(s[i])) i++;
            size_t rest = n - i, tl = strlen(TAG_THINK);
            if (rest >= tl && memcmp(s + i, TAG_THINK, tl) == 0) {
                used = i + tl;
                p->state = ST_REASONING;
            } else if (!final && rest < tl && memcmp(s + i, TAG_THINK, rest) == 0) {
                return 0; /* maybe "<think>" still */
            } else {
                p->state = ST_CONTENT;
            }
            progress = true;
            break;
        }
        case ST_REASONING: {
            const char *hit = memmem(s, n, TAG_THINK_END, strlen(TAG_THINK_END));
            if (hit) {
                emit_reasoning(p, s, (size_t)(hit - s));
                p->reasoning_nl = 0;
                used = (size_t)(hit - s) + strlen(TAG_THINK_END);
                p->state = ST_CONTENT;
                p->content_begun = false;
                progress = true;
            } else {
                size_t keep = final ? 0 : partial_tag(s, n, TAG_THINK_END);
                emit_reasoning(p, s, n - keep);
                used = n - keep;
            }
            break;
        }
        case ST_CONTENT: {
            const char *hit = memmem(s, n, TAG_CALL, strlen(TAG_CALL));
            if (hit) {
                emit_content(p, s, (size_t)(hit - s));
                used = (size_t)(hit - s) + strlen(TAG_CALL);
                p->state = ST_TOOL;
                progress = true;
            } else {
                size_t keep = final ? 0 : partial_tag(s, n, TAG_CALL);
                emit_content(p, s, n - keep);
                used = n - keep;
            }
            break;
        }
        case ST_TOOL: {
            const char *hit = memmem(s, n, TAG_CALL_END, strlen(TAG_CALL_END));
            if (hit) {
                sb_put(&p->tool_body, s, (size_t)(hit - s));
                used = (size_t)(hit - s) + strlen(TAG_CALL_END);
                if (finish_tool_body(p, true) < 0) return -1;
                p->state = ST_CONTENT;
                progress = true;
            } else {
                size_t keep = final ? 0 : partial_tag(s, n, TAG_CALL_END);
                sb_put(&p->tool_body, s, n - keep);
                used = n - keep;
            }
            break;
        }
        case ST_DONE: return 0;
        }
        if (used) {
            memmove(p->pending.p, p->pending.p + used, n - used);
            p->pending.n = n - used;
            p->pending.p[p->pending.n] = 0;
        }
        if (!progress) return 0;
    }
}

static void begin_delta(ChatParser *p) {
    p->d_reasoning.n = 0;
    p->d_content.n = 0;
    sb_put(&p->d_reasoning, "", 0);
    sb_put(&p->d_content, "", 0);
    p->delta_first_call = p->n_calls;
}

static int end_delta(ChatParser *p, ChatDelta *d, Err *err) {
    if (p->d_reasoning.oom || p->d_content.oom || p->all_reasoning.oom || p->all_content.oom || p->pending.oom ||
        p->tool_body.oom || p->content_ws.oom)
        return err_set(err, "out of memory while parsing the model output");
    if (d) {
        d->reasoning = p->d_reasoning.p;
        d->reasoning_len = p->d_reasoning.n;
        d->content = p->d_content.p;
        d->content_len = p->d_content.n;
        d->tool_calls = p->calls ? p->calls + p->delta_first_call : NULL; /* NULL + 0 is undefined */
        d->n_tool_calls = p->n_calls - p->delta_first_call;
    }
    return 0;
}

int chat_parser_feed(ChatParser *p, const char *text, size_t len, ChatDelta *d, Err *err) {
    if (p->state == ST_DONE) return err_set(err, "chat parser: output fed after finish");
    begin_delta(p);
    sb_put(&p->pending, text, len);
    if (run(p, false) < 0) return err_set(err, "out of memory while parsing the model output");
    return end_delta(p, d, err);
}

int chat_parser_finish(ChatParser *p, ChatDelta *d, Err *err) {
    begin_delta(p);
    if (p->state != ST_DONE) {
        if (run(p, true) < 0) return err_set(err, "out of memory while parsing the model output");
        if (p->state == ST_TOOL && finish_tool_body(p, false) < 0)
            return err_set(err, "out of memory while parsing the model output");
        if (p->content_ws.n && !p->any_tool_call) out_content(p, p->content_ws.p, p->content_ws.n);
        p->content_ws.n = 0;
        p->state = ST_DONE;
    }
    return end_delta(p, d, err);
}

const char *chat_parser_reasoning(const ChatParser *p, size_t *len) {
    *len = p->all_reasoning.n;
    return p->all_reasoning.p ? p->all_reasoning.p : "";
}

const char *chat_parser_content(const ChatParser *p, size_t *len) {
    *len = p->all_content.n;
    return p->all_content.p ? p->all_content.p : "";
}

size_t chat_parser_tool_calls(const ChatParser *p, const ChatToolCall **calls) {
    *calls = p->calls;
    return p->n_calls;
}
