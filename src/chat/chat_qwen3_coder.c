/* chat_qwen3_coder.c — the Qwen3-Coder chat format (tests/data/chat/Qwen3-Coder.jinja), natively.
 *
 * What the template does, and so what this does:
 *   - no reasoning at all: assistant content is written as it is, reasoning_content is ignored;
 *   - tools are described in XML (<function><name>..<description>..<parameters><parameter>...), not
 *     JSON; schema keys other than name/type/description are written as <key>value</key> ("extra
 *     keys"), with JSON for lists and objects and Python str() for the rest;
 *   - without a system message but with tools, a default system line introduces them;
 *   - tool calls as <tool_call><function=NAME><parameter=P>VALUE</parameter>... after the trimmed
 *     content; tool results grouped into one user turn, each block followed by a newline;
 *   - the generation prompt is a bare assistant turn (enable_thinking has no effect). */
#include "chat/chat_internal.h"

/* The template's render_extra_keys macro: every key of d not in handled, as "\n<key>value</key>". */
static void render_extra_keys(Render *r, const cJSON *d, const char *const *handled) {
    if (!cJSON_IsObject(d)) return;
    for (const cJSON *kv = d->child; kv; kv = kv->next) {
        const char *key = kv->string ? kv->string : "";
        bool skip = false;
        for (const char *const *h = handled; *h && !skip; h++) skip = !strcmp(key, *h);
        if (skip) continue;
        sb_puts(&r->out, "\n<");
        sb_puts(&r->out, key);
        sb_putc(&r->out, '>');
        if (cJSON_IsObject(kv) || cJSON_IsArray(kv)) py_tojson(&r->out, kv);
        else py_str(&r->out, kv);
        sb_puts(&r->out, "</");
        sb_puts(&r->out, key);
        sb_putc(&r->out, '>');
    }
}

/* '\n<tag>' ~ (value|trim) ~ '</tag>' when the key is present. */
static void render_trimmed_field(Render *r, const cJSON *obj, const char *key, const char *tag) {
    const cJSON *v = jget(obj, key);
    if (!v) return;
    StrBuf b = {0};
    py_str(&b, v);
    sb_put(&b, "", 0);
    Str s = py_strip((Str){b.p ? b.p : "", b.n});
    sb_puts(&r->out, "\n<");
    sb_puts(&r->out, tag);
    sb_putc(&r->out, '>');
    sb_put(&r->out, s.p, s.n);
    sb_puts(&r->out, "</");
    sb_puts(&r->out, tag);
    sb_putc(&r->out, '>');
    if (b.oom) r->out.oom = true;
    sb_free(&b);
}

static int render_tool(Render *r, const cJSON *tool) {
    static const char *const param_handled[] = {"name", "type", "description", NULL};
    static const char *const params_handled[] = {"type", "properties", NULL};
    static const char *const tool_handled[] = {"type", "name", "description", "parameters", NULL};
    StrBuf *o = &r->out;
    if (!cJSON_IsObject(tool)) return render_fail(r, "a tool definition must be an object");
    const cJSON *fn = jget(tool, "function");
    if (fn) tool = fn;
    sb_puts(o, "\n<function>\n<name>");
    const cJSON *name = jget(tool, "name");
    if (name) py_str(o, name); /* an undefined name prints nothing */
    sb_puts(o, "</name>");
    render_trimmed_field(r, tool, "description", "description");
    sb_puts(o, "\n<parameters>");
    const cJSON *params = jget(tool, "parameters");
    const cJSON *props = jget(params, "properties");
    if (cJSON_IsObject(params) && cJSON_IsObject(props)) {
        for (const cJSON *p = props->child; p; p = p->next) {
            sb_puts(o, "\n<parameter>\n<name>");
            sb_puts(o, p->string ? p->string : "");
            sb_puts(o, "</name>");
            const cJSON *type = jget(p, "type");
            if (type) {
                sb_puts(o, "\n<type>");
                py_str(o, type);
                sb_puts(o, "</type>");
            }
            render_trimmed_field(r, p, "description", "description");
            render_extra_keys(r, p, param_handled);
            sb_puts(o, "\n</parameter>");
        }
    }
    render_extra_keys(r, params, params_handled);
    sb_puts(o, "\n</parameters>");
    render_extra_keys(r, tool, tool_handled);
    sb_puts(o, "\n</function>");
    return 0;
}

int render_qwen3_coder(Render *r, const cJSON *messages, const cJSON *tools) {
    StrBuf *o = &r->out;
    const cJSON *first = messages->child, *loop_start = first;
    bool has_system = role_is(first, "system"), has_tools = tools && tools->child;
    if (has_system) {
        Str sys;
        if (content_as_string(r, first, &sys) < 0) return -1;
        sb_puts(o, "<|im_start|>system\n");
        sb_put(o, sys.p, sys.n);
        loop_start = first->next;
    } else if (has_tools) {
        sb_puts(o, "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.");
    }
    if (has_tools) {
        sb_puts(o, "\n\n# Tools\n\nYou have access to the following tools:\n\n<tools>");
        for (const cJSON *t = tools->child; t; t = t->next)
            if (render_tool(r, t) < 0) return -1;
        sb_puts(o, "\n</tools>");
        sb_puts(o, "\n\nIf you choose to call a tool ONLY reply in the following format with NO suffix:\n\n"
                   "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
                   "</parameter>\n<parameter=example_parameter_2>\nvalue_2\n</parameter>\n</function>\n"
                   "</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: "
                   "the tool calling block MUST begin with an opening <tool_call> tag and end with a closing "
                   "</tool_call> tag.\n- Required parameters MUST be specified\n- You may provide optional "
                   "reasoning for your function call in natural language BEFORE the function call, but NOT "
                   "after\n- If there is no function call available, answer the question like normal with your "
                   "current knowledge and do not tell the user about function calls\n</IMPORTANT>");
    }
    if (has_system || has_tools) sb_puts(o, "<|im_end|>\n");

    const cJSON *prev = NULL;
    for (const cJSON *m = loop_start; m; prev = m, m = m->next) {
        const char *role = jstr(m, "role");
        const cJSON *calls = jget(m, "tool_calls");
        if (role_is(m, "assistant") && cJSON_IsArray(calls) && calls->child) {
            sb_puts(o, "<|im_start|>assistant");
            const char *c = jstr(m, "content");
            Str ct = py_strip(str_of(c));
            if (c && ct.n) {
                sb_putc(o, '\n');
                sb_put(o, ct.p, ct.n);
                sb_putc(o, '\n');
            }
            for (const cJSON *call = calls->child; call; call = call->next) {
                const cJSON *fn, *args;
                const char *name;
                if (call_function(r, call, &fn, &name) < 0 || call_arguments_object(r, fn, &args) < 0) return -1;
                sb_puts(o, "\n<tool_call>\n<function=");
                sb_puts(o, name);
                sb_puts(o, ">\n");
                render_xml_parameters(r, args);
                sb_puts(o, "</function>\n</tool_call>");
            }
            sb_puts(o, "<|im_end|>\n");
        } else if (role_is(m, "user") || role_is(m, "system") || role_is(m, "assistant")) {
            if (render_turn(r, role, m) < 0) return -1;
        } else if (role_is(m, "tool")) {
            if (prev && !role_is(prev, "tool")) sb_puts(o, "<|im_start|>user\n");
            sb_puts(o, "<tool_response>\n");
            Str content = printed(r, jget(m, "content"));
            sb_put(o, content.p, content.n);
            sb_puts(o, "\n</tool_response>\n");
            if (!m->next || !role_is(m->next, "tool")) sb_puts(o, "<|im_end|>\n");
        } else {
            if (!role) return render_fail(r, "every message needs a role (string)");
            if (render_turn(r, role, m) < 0) return -1;
        }
    }
    if (r->opt->add_generation_prompt) sb_puts(o, "<|im_start|>assistant\n");
    return 0;
}
