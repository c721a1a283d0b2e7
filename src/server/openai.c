/* openai.c — see openai.h: validation of chat and completion request bodies, error objects. */
#include "server/openai.h"

#include "chat/chat.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_io.h"
#include "server/responses.h"
#include "server/util.h"

/* Client text in a message or param (field names, roles, paths) keeps the error on one line: control
 * characters are written escaped, as in the log. */
static void one_line(char *dst, size_t cap, const char *src) {
    SBuf b = {0}, nul = {0};
    /* the parser's spelling of a NUL inside a string (C0 80, json_io.c) is shown as the client wrote it */
    for (const char *p = src; *p; p++) {
        if ((unsigned char)p[0] == 0xC0 && (unsigned char)p[1] == 0x80) sbuf_puts(&nul, "\\u0000"), p++;
        else sbuf_put(&nul, p, 1);
    }
    if (nul.p) src = nul.p;
    log_escape(&b, src, strlen(src));
    sbuf_free(&nul);
    snprintf(dst, cap, "%s", b.p ? b.p : "");
    sbuf_free(&b);
}

int api_error(ApiError *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = type ? type : "invalid_request_error";
    one_line(e->param, sizeof e->param, param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    one_line(e->message, sizeof e->message, msg);
    return -1;
}

/* Messages and params echo client text (field names, paths, roles) and may have been cut inside a UTF-8
 * character by the fixed-size buffers: the body is made valid UTF-8 whatever they hold. */
char *api_error_json(const ApiError *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    json_add_string_n(err, "message", e->message, strlen(e->message));
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) json_add_string_n(err, "param", e->param, strlen(e->param));
    else cJSON_AddNullToObject(err, "param");
    if (e->code[0]) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    char *s = json_print(root);
    cJSON_Delete(root);
    return s;
}

#define BAD(param, ...) api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* ------------------------------------------------------------------------------------------ helpers */

static bool in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

const char *api_type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "invalid";
}

/* Refuses members of obj that are not in allowed. top: the OpenAI wording for top-level fields. */
int api_check_keys(const cJSON *obj, const char *const *allowed, const char *where, bool top, ApiError *e) {
    for (const cJSON *m = obj->child; m; m = m->next) {
        if (m->string && in_list(m->string, allowed)) continue;
        char param[96];
        snprintf(param, sizeof param, "%s%s%s", where, *where ? "." : "", m->string ? m->string : "");
        if (top) return BAD(param, "Unrecognized request argument supplied: %s", m->string ? m->string : "");
        return BAD(param, "%s: unknown field '%s'", where, m->string ? m->string : "");
    }
    return 0;
}

static const cJSON *get(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_number(const cJSON *obj, const char *key, double lo, double hi, bool integer, double *out, bool *given,
                      ApiError *e) {
    const cJSON *v = get(obj, key);
    if (given) *given = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(key, "'%s' must be %s, not %s", key, integer ? "an integer" : "a number", api_type_name(v));
    double x = v->valuedouble;
    if (integer && x != floor(x)) return BAD(key, "'%s' must be an integer, not %g", key, x);
    if (x < lo || x > hi) return BAD(key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(const cJSON *obj, const char *key, bool *out, ApiError *e) {
    const cJSON *v = get(obj, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return BAD(key, "'%s' must be a boolean, not %s", key, api_type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

static int check_type(const cJSON *obj, const char *key, int (*is)(const cJSON *), const char *what, ApiError *e) {
    const cJSON *v = get(obj, key);
    if (v && !is(v)) return BAD(key, "'%s' must be %s, not %s", key, what, api_type_name(v));
    return 0;
}
static int is_string(const cJSON *v) { return cJSON_IsString(v); }
static int is_bool(const cJSON *v) { return cJSON_IsBool(v); }
static int is_object(const cJSON *v) { return cJSON_IsObject(v); }

/* A name a tool may have (OpenAI: ^[a-zA-Z0-9_-]{1,64}$); it is written into the model's format verbatim. */
static bool valid_tool_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------ common */

static int check_stop_string(const char *s, ApiError *e) {
    if (strlen(s) > STOP_MAX_LEN) return BAD("stop", "a stop string may have at most %d bytes", STOP_MAX_LEN);
    if (strstr(s, JSON_NUL)) return BAD("stop", "a stop string may not contain NUL characters");
    return 0;
}

static int parse_stop(const cJSON *root, ApiRequest *r, ApiError *e) {
    const cJSON *v = get(root, "stop");
    if (!v) return 0;
    if (cJSON_IsString(v)) {
        if (check_stop_string(v->valuestring, e)) return -1;
        r->stop[r->n_stop++] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v)) return BAD("stop", "'stop' must be a string or an array of strings, not %s", api_type_name(v));
    if (cJSON_GetArraySize(v) > STOP_MAX) return BAD("stop", "at most %d stop strings are supported", STOP_MAX);
    for (const cJSON *s = v->child; s; s = s->next) {
        if (!cJSON_IsString(s)) return BAD("stop", "'stop' must be an array of strings, found %s", api_type_name(s));
        if (check_stop_string(s->valuestring, e)) return -1;
        r->stop[r->n_stop++] = s->valuestring;
    }
    return 0;
}

static int parse_logit_bias(const cJSON *root, const ApiDefaults *d, ApiRequest *r, ApiError *e) {
    const cJSON *v = get(root, "logit_bias");
    if (!v) return 0;
    if (!cJSON_IsObject(v)) return BAD("logit_bias", "'logit_bias' must be an object, not %s", api_type_name(v));
    int n = cJSON_GetArraySize(v);
    if (n == 0) return 0;
    if (n > 1024) return BAD("logit_bias", "at most 1024 logit_bias entries are supported");
    r->bias = calloc((size_t)n, sizeof *r->bias);
    if (!r->bias) return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    for (const cJSON *m = v->child; m; m = m->next) {
        char *end;
        long id = strtol(m->string ? m->string : "", &end, 10);
        if (!m->string || !*m->string || *end || id < 0 || id >= d->n_vocab)
            return BAD("logit_bias", "logit_bias keys must be token ids in [0, %d), got '%s'", d->n_vocab,
                       m->string ? m->string : "");
        if (!cJSON_IsNumber(m) || m->valuedouble < -100 || m->valuedouble > 100)
            return BAD("logit_bias", "logit_bias values must be numbers in [-100, 100]");
        r->bias[r->n_bias++] = (LogitBias){(int32_t)id, (float)m->valuedouble};
    }
    return 0;
}

static int parse_common(const cJSON *root, const ApiDefaults *d, ApiRequest *r, ApiError *e) {
    double x;
    bool given;
    if (check_type(root, "model", is_string, "a string", e)) return -1;
    if (get_bool(root, "stream", &r->stream, e)) return -1;
    const cJSON *so = get(root, "stream_options");
    if (so) {
        static const char *const keys[] = {"include_usage", "include_obfuscation", NULL};
        if (!cJSON_IsObject(so)) return BAD("stream_options", "'stream_options' must be an object, not %s", api_type_name(so));
        if (api_check_keys(so, keys, "stream_options", false, e)) return -1;
        if (get_bool(so, "include_usage", &r->include_usage, e)) return -1;
        bool ignored;
        if (get_bool(so, "include_obfuscation", &ignored, e)) return -1;
    }
    if (get_number(root, "n", 1, 1e9, true, &x, &given, e)) return -1;
    r->n = given ? (int)x : 1;
    if (r->n > API_MAX_N) return BAD("n", "at most n = %d choices per prompt are supported", API_MAX_N);
    r->sp = d->sampling;
    r->sp.repeat_penalty = 1.0f;
    r->sp.presence_penalty = r->sp.frequency_penalty = 0.0f;
    r->sp.penalty_last_n = 4096;
    if (get_number(root, "temperature", 0, 2, false, &x, &given, e)) return -1;
    if (given) r->sp.temperature = (float)x;
    if (get_number(root, "top_p", 0, 1, false, &x, &given, e)) return -1;
    if (given) r->sp.top_p = (float)x;
    if (get_number(root, "top_k", -1, 1e9, true, &x, &given, e)) return -1;
    if (given) r->sp.top_k = (int)x;
    if (get_number(root, "min_p", 0, 1, false, &x, &given, e)) return -1;
    if (given) r->sp.min_p = (float)x;
    if (get_number(root, "presence_penalty", -2, 2, false, &x, &given, e)) return -1;
    if (given) r->sp.presence_penalty = (float)x;
    if (get_number(root, "frequency_penalty", -2, 2, false, &x, &given, e)) return -1;
    if (given) r->sp.frequency_penalty = (float)x;
    if (get_number(root, "repeat_penalty", 0.01, 10, false, &x, &given, e)) return -1;
    if (given) r->sp.repeat_penalty = (float)x;
    if (get_number(root, "seed", -9.2e18, 1.8e19, true, &x, &given, e)) return -1;
    r->seed_given = given;
    r->sp.seed = given ? (x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x) : random_u64();
    if (get_number(root, "max_tokens", -1, 1e9, true, &x, &given, e)) return -1;
    if (given && x == 0) return BAD("max_tokens", "'max_tokens' must be -1 (no limit, as llama-server takes it) or ≥ 1");
    if (given) r->max_tokens = (int)x, r->max_tokens_given = true; /* -1: until the context is full */
    if (r->chat) {
        if (get_number(root, "max_completion_tokens", 1, 1e9, true, &x, &given, e)) return -1;
        if (given) r->max_tokens = (int)x, r->max_tokens_given = true;
    }
    if (!r->max_tokens_given) r->max_tokens = r->chat ? d->chat_max_tokens : d->completion_max_tokens;
    r->cache_prompt = true;
    if (get_bool(root, "cache_prompt", &r->cache_prompt, e)) return -1;
    if (get_bool(root, "ignore_eos", &r->ignore_eos, e)) return -1;
    if (check_type(root, "user", is_string, "a string", e)) return -1;
    if (parse_stop(root, r, e)) return -1;
    if (parse_logit_bias(root, d, r, e)) return -1;
    int n_probs;
    if (llama_params_parse(root, d->has_extra ? &d->extra : NULL, &r->sp, &r->spx, &n_probs, e)) return -1;
    if (llama_output_parse(root, &r->grammar, &r->schema, e)) return -1;
    if (n_probs >= 0 && r->logprobs < 0) r->logprobs = n_probs; /* llama.cpp's name for the alternatives */
    return 0;
}

/* ------------------------------------------------------------------------------------------ chat */

/* Inside messages, unknown keys are ignored (clients echo back what they received: audio, annotations,
 * parsed, ...); the fields deltallm reads are checked. Top-level fields stay strict. */
static int parse_content(cJSON *m, int i, const char *role, bool images, ApiError *e) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", i);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    bool assistant = !strcmp(role, "assistant");
    if (!c || cJSON_IsNull(c)) {
        if (assistant) return 0;
        return BAD(param, "messages[%d] (%s) needs a content", i, role);
    }
    if (cJSON_IsString(c)) return 0;
    if (!cJSON_IsArray(c)) return BAD(param, "%s must be a string or an array of content parts, not %s", param, api_type_name(c));
    if (!c->child) return BAD(param, "%s is an empty array: give a string or at least one content part", param);
    int k = 0;
    for (const cJSON *p = c->child; p; p = p->next, k++) {
        char where[80];
        snprintf(where, sizeof where, "%s[%d]", param, k);
        if (!cJSON_IsObject(p)) return BAD(where, "%s must be an object", where);
        const cJSON *t = get(p, "type");
        if (!cJSON_IsString(t)) return BAD(where, "%s needs a 'type'", where);
        if (!strcmp(t->valuestring, "image_url") && images) {
            if (strcmp(role, "user"))
                return BAD(where, "%s: only user messages may hold images (this one is %s)", where, role);
            const cJSON *u = get(p, "image_url");
            if (cJSON_IsObject(u)) u = get(u, "url");
            if (!cJSON_IsString(u)) return BAD(where, "%s: an image_url part needs image_url.url (a string)", where);
            continue; /* the URL and the image are checked when the job is prepared (server/vision.c) */
        }
        if (!strcmp(t->valuestring, "image_url") || !strcmp(t->valuestring, "image"))
            return BAD(where, "%s: content of type '%s' is not supported: this server was started without a vision "
                       "projector (serve --mmproj FILE takes images)", where, t->valuestring);
        if (!strcmp(t->valuestring, "input_audio") || !strcmp(t->valuestring, "file"))
            return BAD(where, "%s: content of type '%s' is not supported: this server handles text%s only", where,
                       t->valuestring, images ? " and images" : "");
        bool text = !strcmp(t->valuestring, "text");
        if (!text && strcmp(t->valuestring, "refusal") != 0)
            return BAD(where, "%s: unknown content part type '%s' (text or refusal)", where, t->valuestring);
        if (!text && !assistant) return BAD(where, "%s: only assistant messages have refusal parts", where);
        if (!cJSON_IsString(get(p, text ? "text" : "refusal")))
            return BAD(where, "%s: a %s part needs '%s' (a string)", where, t->valuestring, t->valuestring);
    }
    return 0;
}

static int parse_tool_calls(cJSON *m, int i, ApiError *e) {
    const cJSON *calls = get(m, "tool_calls");
    if (!calls) return 0;
    char param[64];
    snprintf(param, sizeof param, "messages[%d].tool_calls", i);
    if (!cJSON_IsArray(calls)) return BAD(param, "%s must be an array", param);
    int k = 0;
    for (const cJSON *c = calls->child; c; c = c->next, k++) {
        char where[96];
        snprintf(where, sizeof where, "%s[%d]", param, k);
        if (!cJSON_IsObject(c)) return BAD(where, "%s must be an object", where);
        const cJSON *t = get(c, "type"), *f = get(c, "function");
        if (t && (!cJSON_IsString(t) || strcmp(t->valuestring, "function") != 0))
            return BAD(where, "%s: type must be 'function'", where);
        if (!cJSON_IsObject(f)) return BAD(where, "%s needs a 'function' object", where);
        if (!cJSON_IsString(get(f, "name"))) return BAD(where, "%s: function.name must be a string", where);
        const cJSON *a = get(f, "arguments");
        if (a && !cJSON_IsString(a) && !cJSON_IsObject(a))
            return BAD(where, "%s: function.arguments must be a string holding a JSON object", where);
        if (cJSON_IsString(a)) {
            cJSON *parsed = cJSON_Parse(a->valuestring);
            bool ok = cJSON_IsObject(parsed);
            cJSON_Delete(parsed);
            if (!ok) return BAD(where, "%s: function.arguments must be a JSON object (as a string)", where);
        }
    }
    return 0;
}

static int parse_messages(ApiRequest *r, bool images, ApiError *e) {
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(r->doc, "messages");
    if (!msgs || cJSON_IsNull(msgs)) return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(msgs)) return BAD("messages", "'messages' must be an array, not %s", api_type_name(msgs));
    if (!msgs->child) return BAD("messages", "'messages' must contain at least one message");
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool", NULL};
    int i = 0;
    for (cJSON *m = msgs->child; m; m = m->next, i++) {
        char where[48];
        snprintf(where, sizeof where, "messages[%d]", i);
        if (!cJSON_IsObject(m)) return BAD(where, "%s must be an object, not %s", where, api_type_name(m));
        const cJSON *role = get(m, "role");
        if (!cJSON_IsString(role)) return BAD(where, "%s needs a 'role' (string)", where);
        if (!in_list(role->valuestring, roles))
            return BAD(where, "%s: unknown role '%s' (system, developer, user, assistant or tool)", where,
                       role->valuestring);
        if (check_type(m, "name", is_string, "a string", e)) return -1;
        if (check_type(m, "reasoning_content", is_string, "a string", e)) return -1;
        if (check_type(m, "refusal", is_string, "a string", e)) return -1;
        if (check_type(m, "audio", is_object, "an object", e)) return -1;          /* accepted, not rendered */
        if (check_type(m, "function_call", is_object, "an object", e)) return -1;  /* deprecated; not rendered */
        if (parse_content(m, i, role->valuestring, images, e)) return -1;
        if (get(m, "tool_calls") && strcmp(role->valuestring, "assistant") != 0)
            return BAD(where, "%s: only assistant messages have tool_calls", where);
        if (parse_tool_calls(m, i, e)) return -1;
        if (!strcmp(role->valuestring, "tool") && !cJSON_IsString(get(m, "tool_call_id")))
            return BAD(where, "%s: a tool message needs 'tool_call_id' (string)", where);
    }
    r->messages = msgs;
    return 0;
}

static int parse_tools(ApiRequest *r, ApiError *e) {
    const cJSON *tools = get(r->doc, "tools");
    if (tools) {
        if (!cJSON_IsArray(tools)) return BAD("tools", "'tools' must be an array, not %s", api_type_name(tools));
        if (cJSON_GetArraySize(tools) > 256) return BAD("tools", "at most 256 tools are supported");
        static const char *const keys[] = {"type", "function", NULL},
                                 *const fkeys[] = {"name", "description", "parameters", "strict", NULL};
        int k = 0;
        for (const cJSON *t = tools->child; t; t = t->next, k++) {
            char where[48];
            snprintf(where, sizeof where, "tools[%d]", k);
            if (!cJSON_IsObject(t)) return BAD(where, "%s must be an object", where);
            if (api_check_keys(t, keys, where, false, e)) return -1;
            const cJSON *type = get(t, "type"), *f = get(t, "function");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0)
                return BAD(where, "%s: only tools of type 'function' are supported", where);
            if (!cJSON_IsObject(f)) return BAD(where, "%s needs a 'function' object", where);
            if (api_check_keys(f, fkeys, where, false, e)) return -1;
            const cJSON *name = get(f, "name");
            if (!cJSON_IsString(name) || !valid_tool_name(name->valuestring))
                return BAD(where, "%s: function.name must match ^[a-zA-Z0-9_-]{1,64}$", where);
            if (check_type(f, "description", is_string, "a string", e)) return -1;
            if (check_type(f, "parameters", is_object, "an object", e)) return -1;
            if (check_type(f, "strict", is_bool, "a boolean", e)) return -1;
            for (const cJSON *u = tools->child; u != t; u = u->next)
                if (!strcmp(cJSON_GetObjectItemCaseSensitive(get(u, "function"), "name")->valuestring, name->valuestring))
                    return BAD(where, "%s: two tools are named '%s'", where, name->valuestring);
        }
        if (tools->child) r->tools = tools;
    }
    const cJSON *tc = get(r->doc, "tool_choice");
    r->tool_choice = TOOL_CHOICE_AUTO;
    if (cJSON_IsString(tc)) {
        if (!strcmp(tc->valuestring, "none")) r->tool_choice = TOOL_CHOICE_NONE;
        else if (!strcmp(tc->valuestring, "auto")) r->tool_choice = TOOL_CHOICE_AUTO;
        else if (!strcmp(tc->valuestring, "required")) r->tool_choice = TOOL_CHOICE_REQUIRED;
        else return BAD("tool_choice", "'tool_choice' must be 'none', 'auto', 'required' or a function");
    } else if (cJSON_IsObject(tc)) {
        static const char *const keys[] = {"type", "function", NULL}, *const fkeys[] = {"name", NULL};
        if (api_check_keys(tc, keys, "tool_choice", false, e)) return -1;
        const cJSON *type = get(tc, "type"), *f = get(tc, "function");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !cJSON_IsObject(f))
            return BAD("tool_choice", "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (api_check_keys(f, fkeys, "tool_choice.function", false, e)) return -1;
        const cJSON *name = get(f, "name");
        if (!cJSON_IsString(name)) return BAD("tool_choice", "tool_choice.function.name must be a string");
        r->tool_choice = TOOL_CHOICE_NAMED;
        r->tool_name = name->valuestring;
        bool found = false;
        for (const cJSON *t = r->tools ? r->tools->child : NULL; t && !found; t = t->next)
            found = !strcmp(cJSON_GetObjectItemCaseSensitive(get(t, "function"), "name")->valuestring, r->tool_name);
        if (!found) return BAD("tool_choice", "tool_choice names '%s', which is not in tools", r->tool_name);
    } else if (tc) {
        return BAD("tool_choice", "'tool_choice' must be a string or an object, not %s", api_type_name(tc));
    }
    if (r->tool_choice == TOOL_CHOICE_REQUIRED && !r->tools)
        return BAD("tool_choice", "tool_choice 'required' needs tools");
    if (r->tool_choice == TOOL_CHOICE_NONE) r->tools = NULL;
    return 0;
}

static int parse_response_format(ApiRequest *r, ApiError *e) {
    const cJSON *rf = get(r->doc, "response_format");
    r->response_format = RF_TEXT;
    if (!rf) return 0;
    if (!cJSON_IsObject(rf)) return BAD("response_format", "'response_format' must be an object");
    static const char *const keys[] = {"type", "json_schema", NULL},
                             *const skeys[] = {"name", "description", "schema", "strict", NULL};
    if (api_check_keys(rf, keys, "response_format", false, e)) return -1;
    const cJSON *t = get(rf, "type");
    if (!cJSON_IsString(t)) return BAD("response_format", "response_format.type must be a string");
    if (!strcmp(t->valuestring, "text")) return 0;
    if (!strcmp(t->valuestring, "json_object")) {
        r->response_format = RF_JSON_OBJECT;
    } else if (!strcmp(t->valuestring, "json_schema")) {
        const cJSON *js = get(rf, "json_schema");
        if (!cJSON_IsObject(js)) return BAD("response_format", "response_format.json_schema must be an object");
        if (api_check_keys(js, skeys, "response_format.json_schema", false, e)) return -1;
        if (!cJSON_IsString(get(js, "name"))) return BAD("response_format", "response_format.json_schema.name is required");
        if (check_type(js, "schema", is_object, "an object", e)) return -1;
        r->response_format = RF_JSON_SCHEMA;
        r->schema = get(js, "schema");
    } else {
        return BAD("response_format", "response_format.type must be 'text', 'json_object' or 'json_schema'");
    }
    if (r->tool_choice == TOOL_CHOICE_REQUIRED || r->tool_choice == TOOL_CHOICE_NAMED)
        return BAD("response_format", "a JSON response_format cannot be combined with a forced tool call");
    return 0;
}

static int parse_chat(ApiRequest *r, const ApiDefaults *d, ApiError *e) {
    static const char *const keys[] = {
        "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
        "stream_options", "stop", "presence_penalty", "frequency_penalty", "seed", "tools", "tool_choice",
        "parallel_tool_calls", "user", "logit_bias", "logprobs", "top_logprobs", "response_format", "metadata",
        "store", "service_tier", "reasoning_effort", "modalities", "prompt_cache_key", "safety_identifier",
        "verbosity", "prediction", "audio", "web_search_options", "functions", "function_call",
        /* extensions (llama.cpp / vLLM names) */
        "top_k", "min_p", "repeat_penalty", "chat_template_kwargs", "cache_prompt", "ignore_eos", LLAMA_SAMPLING_KEYS,
        "grammar", "json_schema", NULL};
    const cJSON *root = r->doc;
    if (api_check_keys(root, keys, "", true, e)) return -1;
    if (get(root, "functions") || get(root, "function_call"))
        return BAD(get(root, "functions") ? "functions" : "function_call",
                   "'functions' and 'function_call' are deprecated and not supported: use 'tools' and 'tool_choice'");
    const char *unsupported[] = {"prediction", "audio", "web_search_options"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (get(root, unsupported[i])) return BAD(unsupported[i], "'%s' is not supported by this server", unsupported[i]);
    bool lp = false;
    if (get_bool(root, "logprobs", &lp, e)) return -1;
    double x;
    bool given;
    if (get_number(root, "top_logprobs", 0, LOGPROBS_MAX_TOP, true, &x, &given, e)) return -1;
    if (given && x > 0 && !lp) return BAD("top_logprobs", "top_logprobs needs logprobs: true");
    r->logprobs = lp ? (given ? (int)x : 0) : -1;
    const cJSON *mod = get(root, "modalities");
    if (mod) {
        if (!cJSON_IsArray(mod)) return BAD("modalities", "'modalities' must be an array");
        for (const cJSON *m = mod->child; m; m = m->next)
            if (!cJSON_IsString(m) || strcmp(m->valuestring, "text") != 0)
                return BAD("modalities", "only the 'text' modality is supported");
    }
    if (check_type(root, "parallel_tool_calls", is_bool, "a boolean", e)) return -1;
    if (check_type(root, "store", is_bool, "a boolean", e)) return -1;
    if (check_type(root, "metadata", is_object, "an object", e)) return -1;
    if (check_type(root, "reasoning_effort", is_string, "a string", e)) return -1;
    if (check_type(root, "service_tier", is_string, "a string", e)) return -1;
    if (check_type(root, "verbosity", is_string, "a string", e)) return -1;
    if (check_type(root, "prompt_cache_key", is_string, "a string", e)) return -1;
    if (check_type(root, "safety_identifier", is_string, "a string", e)) return -1;
    if (parse_common(root, d, r, e)) return -1;
    const cJSON *kw = get(root, "chat_template_kwargs");
    r->enable_thinking = -1;
    if (kw) {
        if (!cJSON_IsObject(kw)) return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        const cJSON *et = get(kw, "enable_thinking");
        if (et && !cJSON_IsBool(et))
            return BAD("chat_template_kwargs.enable_thinking", "chat_template_kwargs.enable_thinking must be a boolean");
        if (et) r->enable_thinking = cJSON_IsTrue(et);
    }
    if (parse_messages(r, d->images, e)) return -1;
    if (parse_tools(r, e)) return -1;
    const cJSON *llama_schema = r->schema; /* llama.cpp's top-level json_schema, read by parse_common */
    r->schema = NULL;
    if (parse_response_format(r, e)) return -1;
    if ((r->grammar || llama_schema) && (r->response_format != RF_TEXT || r->tool_choice == TOOL_CHOICE_REQUIRED ||
                                         r->tool_choice == TOOL_CHOICE_NAMED))
        return BAD(r->grammar ? "grammar" : "json_schema", "'%s' cannot be combined with a JSON response_format or a "
                   "forced tool call", r->grammar ? "grammar" : "json_schema");
    if (llama_schema) r->response_format = RF_JSON_SCHEMA, r->schema = llama_schema;
    return 0;
}

/* ------------------------------------------------------------------------------------------ completion */

static int token_array(const cJSON *a, int index, const ApiDefaults *d, ApiPrompt *out, ApiError *e) {
    int n = cJSON_GetArraySize(a);
    char param[32];
    snprintf(param, sizeof param, index < 0 ? "prompt" : "prompt[%d]", index);
    if (!n) return BAD(param, "'%s' is empty", param);
    out->ids = malloc(sizeof(int32_t) * (size_t)n);
    if (!out->ids) return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    for (const cJSON *t = a->child; t; t = t->next) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= d->n_vocab)
            return BAD(param, "token prompts must hold token ids in [0, %d)", d->n_vocab);
        out->ids[out->n_ids++] = (int32_t)t->valuedouble;
    }
    return 0;
}

/* prompt: a string, an array of token ids, or an array of several of either (one choice each). */
static int parse_prompts(const cJSON *p, const ApiDefaults *d, ApiRequest *r, ApiError *e) {
    if (!p) return BAD("prompt", "'prompt' is required");
    bool batch = cJSON_IsArray(p) && p->child && (cJSON_IsString(p->child) || cJSON_IsArray(p->child));
    int n = batch ? cJSON_GetArraySize(p) : 1;
    if (n > API_MAX_PROMPTS) return BAD("prompt", "at most %d prompts per request are supported", API_MAX_PROMPTS);
    if (!(r->prompts = calloc((size_t)n, sizeof *r->prompts)))
        return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    r->n_prompts = n;
    int i = 0;
    for (const cJSON *q = batch ? p->child : p; i < n; q = q->next, i++) {
        char param[32];
        snprintf(param, sizeof param, batch ? "prompt[%d]" : "prompt", i);
        if (batch && !cJSON_IsString(q) && !cJSON_IsArray(q))
            return BAD(param, "a batch of prompts holds strings or arrays of token ids, not %s", api_type_name(q));
        if (cJSON_IsString(q)) {
            if (!q->valuestring[0]) return BAD(param, "'%s' is empty", param);
            r->prompts[i].text = q->valuestring;
        } else if (cJSON_IsArray(q)) {
            if (token_array(q, batch ? i : -1, d, &r->prompts[i], e)) return -1;
        } else {
            return BAD("prompt", "'prompt' must be a string, an array of token ids, or an array of several of them");
        }
    }
    return 0;
}

static int parse_completion(ApiRequest *r, const ApiDefaults *d, ApiError *e) {
    static const char *const keys[] = {"model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream",
                                       "stream_options", "stop", "presence_penalty", "frequency_penalty", "seed",
                                       "logit_bias", "user", "echo", "suffix", "best_of", "logprobs",
                                       "top_k", "min_p", "repeat_penalty", "cache_prompt", "ignore_eos",
                                       LLAMA_SAMPLING_KEYS, "grammar", "json_schema", NULL};
    const cJSON *root = r->doc;
    if (api_check_keys(root, keys, "", true, e)) return -1;
    bool echo = false;
    if (get_bool(root, "echo", &echo, e)) return -1;
    if (echo) return BAD("echo", "echo is not supported by this server");
    const cJSON *suffix = get(root, "suffix");
    if (suffix && (!cJSON_IsString(suffix) || suffix->valuestring[0]))
        return BAD("suffix", "suffix (fill-in-the-middle) is not supported by this server");
    double x;
    bool given;
    if (get_number(root, "best_of", 1, 1e9, true, &x, &given, e)) return -1;
    if (given && x != 1) return BAD("best_of", "only best_of = 1 is supported");
    if (get_number(root, "logprobs", 0, 5, true, &x, &given, e)) return -1;
    r->logprobs = given ? (int)x : -1;
    if (parse_common(root, d, r, e)) return -1;
    if (r->schema) r->response_format = RF_JSON_SCHEMA; /* llama.cpp's top-level json_schema */
    if (parse_prompts(get(root, "prompt"), d, r, e)) return -1;
    if (r->n_prompts * r->n > API_MAX_PROMPTS)
        return BAD("n", "at most %d choices per request are supported (prompts × n)", API_MAX_PROMPTS);
    return 0;
}

/* What the chat templates need from a message that the API allows in more shapes: developer is system;
 * an assistant's refusal (a refusal part, or the refusal field with no content) is rendered as its text. */
static void normalise_for_render(cJSON *m) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "developer"))
        cJSON_ReplaceItemInObjectCaseSensitive(m, "role", cJSON_CreateString("system"));
    cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    for (cJSON *p = cJSON_IsArray(content) ? content->child : NULL; p; p = p->next) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
        cJSON *refusal = cJSON_GetObjectItemCaseSensitive(p, "refusal");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "refusal") != 0 || !cJSON_IsString(refusal)) continue;
        cJSON_ReplaceItemInObjectCaseSensitive(p, "type", cJSON_CreateString("text"));
        cJSON_AddItemToObject(p, "text", cJSON_DetachItemViaPointer(p, refusal));
    }
    const cJSON *refusal = cJSON_GetObjectItemCaseSensitive(m, "refusal");
    bool empty = !content || cJSON_IsNull(content) || (cJSON_IsString(content) && !content->valuestring[0]);
    if (empty && cJSON_IsString(refusal) && refusal->valuestring[0]) {
        cJSON *text = cJSON_CreateString(refusal->valuestring);
        if (content) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", text);
        else cJSON_AddItemToObject(m, "content", text);
    }
}

/* The prompt is rendered from a second parse of the body that keeps numbers exactly as written (a double
 * would turn 207310705731958600 into 2.073107057319586e+17 and 2.0 into 2); the validated values above stay
 * in r->doc. */
static int use_exact_numbers(ApiRequest *r, const char *body, size_t len, ApiError *e) {
    char msg[300], where[96];
    r->render_doc = json_parse_body(body, len, true, msg, sizeof msg, where, sizeof where);
    cJSON *msgs = r->render_doc ? cJSON_GetObjectItemCaseSensitive(r->render_doc, "messages") : NULL;
    if (!msgs) return api_error(e, 500, "server_error", NULL, NULL, "out of memory parsing the request");
    for (cJSON *m = msgs->child; m; m = m->next) normalise_for_render(m);
    r->messages = msgs;
    if (r->tools) r->tools = cJSON_GetObjectItemCaseSensitive(r->render_doc, "tools");
    return 0;
}

/* ------------------------------------------------------------------------------------------ entry */

int api_parse(bool chat, const char *body, size_t len, const ApiDefaults *d, ApiRequest *r, ApiError *e) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    if (len == 0) return BAD(NULL, "the request body is empty: a JSON object is expected");
    char msg[300], where[96];
    if (!(r->doc = json_parse_body(body, len, false, msg, sizeof msg, where, sizeof where)))
        return BAD(where[0] ? where : NULL, "%s", msg);
    if (!cJSON_IsObject(r->doc)) {
        api_request_free(r);
        return BAD(NULL, "the request body must be a JSON object");
    }
    int rc = api_llama_take(r, e);
    if (rc == 0) rc = chat ? parse_chat(r, d, e) : parse_completion(r, d, e);
    if (rc == 0) rc = api_llama_apply(r, e);
    if (rc == 0 && chat) rc = use_exact_numbers(r, body, len, e);
    if (rc) api_request_free(r);
    return rc;
}

void api_request_free(ApiRequest *r) {
    cJSON_Delete(r->doc);
    cJSON_Delete(r->render_doc);
    free(r->bias);
    sampler_spec_free(r->spx);
    for (int i = 0; i < r->n_prompts; i++) free(r->prompts[i].ids);
    free(r->prompts);
    responses_req_free(r->responses);
    memset(r, 0, sizeof *r);
}
