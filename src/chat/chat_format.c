/* chat_format.c — choosing the chat format from a template, the render entry points, the helpers the
 * renderers share (chat_internal.h), and plain ChatML.
 *
 * Plain ChatML is the template of Qwen1.5/Qwen2 vocabularies (and of the test models):
 *   {% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}
 *   {{ '<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}
 *   {{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}
 *   {% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
 * and, without the default system turn, every template that writes ChatML turns and nothing else. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat_internal.h"

static const char *const format_names[] = {"chatml", "qwen3", "qwen3-coder", "qwen35"};

const char *chat_format_name(ChatFormat fmt) {
    return (unsigned)fmt < sizeof format_names / sizeof format_names[0] ? format_names[fmt] : "?";
}

int chat_format_from_name(const char *name, ChatFormat *fmt) {
    for (int i = 0; i < (int)(sizeof format_names / sizeof format_names[0]); i++) {
        if (!strcmp(name, format_names[i])) {
            *fmt = (ChatFormat)i;
            return 0;
        }
    }
    return -1;
}

int chat_format_detect(const char *t, ChatFormat *fmt, bool *default_system, Err *err) {
    if (default_system) *default_system = false;
    if (!t || !*t) return err_set(err, "the model has no chat template (tokenizer.chat_template): give one with "
                                        "--chat-template-file FILE, or a format with --chat-format chatml");
    if (!strstr(t, "<|im_start|>"))
        return err_set(err, "unsupported chat template: not a ChatML/Qwen template (no <|im_start|>); "
                            "deltallm renders the Qwen formats natively, not arbitrary Jinja");
    bool think = strstr(t, "<think>") != NULL;
    if (strstr(t, "<function=")) {
        *fmt = think ? CHAT_FORMAT_QWEN35 : CHAT_FORMAT_QWEN3_CODER;
        return 0;
    }
    if (strstr(t, "<tool_call>")) {
        if (!think)
            return err_set(err, "unsupported chat template: JSON tool calls without <think> (Qwen2.5 style); "
                                "supported are Qwen3/Qwen3-Next, Qwen3-Coder, Qwen3.5/3.6 and plain ChatML");
        *fmt = CHAT_FORMAT_QWEN3;
        return 0;
    }
    *fmt = CHAT_FORMAT_CHATML;
    if (default_system) *default_system = strstr(t, "You are a helpful assistant") != NULL;
    return 0;
}

bool chat_thinking_opt_in(const char *t) {
    return t && strstr(t, "enable_thinking is defined and enable_thinking is true") != NULL;
}

int chat_template_init(ChatTemplate *tmpl, const char *template_text, Err *err) {
    tmpl->thinking_opt_in = chat_thinking_opt_in(template_text);
    return chat_format_detect(template_text, &tmpl->format, &tmpl->default_system, err);
}

/* -------------------------------------------------------------------------------- shared helpers */

int render_fail(Render *r, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(r->err, "chat template (%s): %s", chat_format_name(r->tmpl->format), msg);
}

static StrBuf *temp(Render *r) {
    if (r->n_temps == r->cap_temps) {
        size_t cap = r->cap_temps ? r->cap_temps * 2 : 16;
        StrBuf *t = realloc(r->temps, cap * sizeof *t);
        if (!t) return NULL;
        r->temps = t;
        r->cap_temps = cap;
    }
    StrBuf *b = &r->temps[r->n_temps++];
    memset(b, 0, sizeof *b);
    return b;
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsArray(v)) return "list";
    if (cJSON_IsObject(v)) return "dict";
    if (cJSON_IsNumber(v) || cJSON_IsRaw(v)) return "number";
    if (cJSON_IsBool(v)) return "bool";
    return "value";
}

int content_as_string(Render *r, const cJSON *msg, Str *out) {
    const cJSON *c = jget(msg, "content");
    *out = str_of("");
    if (!c || cJSON_IsNull(c)) return 0;
    if (cJSON_IsString(c)) {
        *out = str_of(c->valuestring);
        return 0;
    }
    if (cJSON_IsArray(c) && r->opt->flatten_text_parts) {
        StrBuf *b = temp(r);
        if (!b) return render_fail(r, "out of memory");
        for (const cJSON *part = c->child; part; part = part->next) {
            const char *text = jstr(part, "text"), *type = jstr(part, "type");
            /* ChatML with pictures is Qwen2-VL's template: each image part becomes the vision markers */
            if (!text && r->tmpl->format == CHAT_FORMAT_CHATML && type &&
                (!strcmp(type, "image") || !strcmp(type, "image_url"))) {
                sb_puts(b, "<|vision_start|><|image_pad|><|vision_end|>");
                continue;
            }
            if (!text) return render_fail(r, "only text content parts can be used with this model's template");
            sb_puts(b, text);
        }
        sb_put(b, "", 0);
        if (b->oom) return render_fail(r, "out of memory");
        *out = (Str){b->p, b->n};
        return 0;
    }
    return render_fail(r, "message content must be a string, not a %s (can only concatenate str to str)", type_name(c));
}

int render_turn(Render *r, const char *role, const cJSON *msg) {
    Str content;
    if (content_as_string(r, msg, &content) < 0) return -1;
    sb_puts(&r->out, "<|im_start|>");
    sb_puts(&r->out, role);
    sb_putc(&r->out, '\n');
    sb_put(&r->out, content.p, content.n);
    sb_puts(&r->out, "<|im_end|>\n");
    return 0;
}

Str printed(Render *r, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return str_of("");
    if (cJSON_IsString(v)) return str_of(v->valuestring);
    StrBuf *b = temp(r);
    if (!b) return str_of("");
    py_str(b, v);
    sb_put(b, "", 0);
    return b->oom ? str_of("") : (Str){b->p, b->n};
}

int call_function(Render *r, const cJSON *call, const cJSON **fn, const char **name) {
    if (!cJSON_IsObject(call)) return render_fail(r, "a tool call must be an object");
    const cJSON *f = jget(call, "function");
    *fn = f ? f : call;
    *name = jstr(*fn, "name");
    if (!*name) return render_fail(r, "a tool call needs a function name (string)");
    return 0;
}

int call_arguments_object(Render *r, const cJSON *fn, const cJSON **args) {
    const cJSON *a = jget(fn, "arguments");
    *args = NULL;
    if (!a) return 0;
    if (cJSON_IsObject(a)) {
        *args = a;
        return 0;
    }
    if (cJSON_IsString(a)) {
        cJSON *parsed = chat_json_parse(a->valuestring, strlen(a->valuestring), NULL);
        if (!cJSON_IsObject(parsed)) {
            cJSON_Delete(parsed);
            return render_fail(r, "tool call arguments must be a JSON object (or a string holding one)");
        }
        if (r->n_owned == r->cap_owned) {
            size_t cap = r->cap_owned ? r->cap_owned * 2 : 8;
            cJSON **o = realloc(r->owned, cap * sizeof *o);
            if (!o) {
                cJSON_Delete(parsed);
                return render_fail(r, "out of memory");
            }
            r->owned = o;
            r->cap_owned = cap;
        }
        r->owned[r->n_owned++] = parsed;
        *args = parsed;
        return 0;
    }
    return render_fail(r, "tool call arguments must be a JSON object, not a %s", type_name(a));
}

void render_xml_parameters(Render *r, const cJSON *args) {
    for (const cJSON *a = args ? args->child : NULL; a; a = a->next) {
        sb_puts(&r->out, "<parameter=");
        sb_puts(&r->out, a->string ? a->string : "");
        sb_puts(&r->out, ">\n");
        if (cJSON_IsObject(a) || cJSON_IsArray(a)) py_tojson(&r->out, a);
        else py_str(&r->out, a);
        sb_puts(&r->out, "\n</parameter>\n");
    }
}

/* ------------------------------------------------------------------------------------------ ChatML */

int render_chatml(Render *r, const cJSON *messages) {
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        if (i == 0 && r->tmpl->default_system && !role_is(messages->child, "system"))
            sb_puts(&r->out, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n");
        const char *role = jstr(m, "role");
        if (!role) return render_fail(r, "message %d has no role (string)", i);
        if (render_turn(r, role, m) < 0) return -1;
    }
    if (r->opt->add_generation_prompt) sb_puts(&r->out, "<|im_start|>assistant\n");
    return 0;
}

/* ------------------------------------------------------------------------------------------ entry */

int chat_render(const ChatTemplate *tmpl, const cJSON *messages, const cJSON *tools, const ChatRenderOptions *opt,
                char **out, size_t *len, Err *err) {
    static const ChatRenderOptions defaults = {false, CHAT_THINKING_DEFAULT, false};
    Render r = {.tmpl = tmpl, .opt = opt ? opt : &defaults, .err = err};
    *out = NULL;
    *len = 0;
    int rc;
    if (!cJSON_IsArray(messages) || !messages->child) {
        rc = render_fail(&r, "No messages provided.");
    } else if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) {
        rc = render_fail(&r, "tools must be an array of tool definitions");
    } else {
        rc = 0;
        for (const cJSON *m = messages->child; m && rc == 0; m = m->next)
            if (!cJSON_IsObject(m)) rc = render_fail(&r, "every message must be an object");
        if (rc == 0) {
            const cJSON *tl = cJSON_IsArray(tools) ? tools : NULL;
            switch (tmpl->format) {
            case CHAT_FORMAT_CHATML: rc = render_chatml(&r, messages); break;
            case CHAT_FORMAT_QWEN3: rc = render_qwen3(&r, messages, tl); break;
            case CHAT_FORMAT_QWEN3_CODER: rc = render_qwen3_coder(&r, messages, tl); break;
            case CHAT_FORMAT_QWEN35: rc = render_qwen35(&r, messages, tl); break;
            default: rc = render_fail(&r, "unknown format %d", (int)tmpl->format);
            }
        }
    }
    for (size_t i = 0; i < r.n_temps; i++) sb_free(&r.temps[i]);
    free(r.temps);
    for (size_t i = 0; i < r.n_owned; i++) cJSON_Delete(r.owned[i]);
    free(r.owned);
    if (rc == 0 && r.out.oom) rc = err_set(err, "out of memory while rendering the chat");
    if (rc < 0) {
        sb_free(&r.out);
        return -1;
    }
    *out = sb_take(&r.out, len);
    return *out ? 0 : err_set(err, "out of memory while rendering the chat");
}

int chat_render_request(const ChatTemplate *tmpl, const cJSON *request, const ChatRenderOptions *defaults, char **out,
                        size_t *len, Err *err) {
    ChatRenderOptions opt = {false, CHAT_THINKING_DEFAULT, false};
    if (defaults) opt = *defaults;
    if (cJSON_IsArray(request)) return chat_render(tmpl, request, NULL, &opt, out, len, err);
    if (!cJSON_IsObject(request))
        return err_set(err, "a chat request must be a JSON object with \"messages\" (or an array of messages)");
    const cJSON *messages = jget(request, "messages");
    if (!cJSON_IsArray(messages)) return err_set(err, "the chat request has no \"messages\" array");
    const cJSON *agp = jget(request, "add_generation_prompt");
    if (agp && !cJSON_IsBool(agp)) return err_set(err, "\"add_generation_prompt\" must be true or false");
    if (agp) opt.add_generation_prompt = cJSON_IsTrue(agp);
    const cJSON *kwargs = jget(request, "chat_template_kwargs");
    const cJSON *et = jget(kwargs, "enable_thinking");
    if (jget(request, "enable_thinking")) et = jget(request, "enable_thinking");
    if (et && !cJSON_IsNull(et)) {
        if (!cJSON_IsBool(et)) return err_set(err, "\"enable_thinking\" must be true or false");
        opt.enable_thinking = cJSON_IsTrue(et) ? 1 : 0;
    }
    return chat_render(tmpl, messages, jget(request, "tools"), &opt, out, len, err);
}

bool chat_prompt_opens_reasoning(const char *prompt, size_t len) {
    Str s = {prompt, len};
    Str t = py_rstrip_chars(s, "\n");
    if (!str_ends(t, "<think>")) return false;
    /* the open tag must not be closed after it: we only look at the very end, so it is open */
    return true;
}
