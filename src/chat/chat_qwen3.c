/* chat_qwen3.c — the Qwen3 / Qwen3-Next chat format (tests/data/chat/Qwen-Qwen3-0.6B.jinja), natively.
 *
 * What the template does, and so what this does:
 *   - content is used as a string everywhere (a list of parts is an error in the template);
 *   - tools: a system turn with the system message (if any) first, then "# Tools ... <tools>{json per
 *     tool}</tools>" and the JSON call format;
 *   - the last real user query (not just a <tool_response>) splits history: an assistant turn after it
 *     shows <think>reasoning</think> when it is the last message or has reasoning; earlier ones do not;
 *   - reasoning comes from reasoning_content, else from a <think>...</think> inside the content;
 *   - tool calls as <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>, string arguments
 *     verbatim, objects as JSON;
 *   - consecutive tool results are grouped into one user turn of <tool_response> blocks;
 *   - the generation prompt is a bare assistant turn, or one with an empty <think></think> when
 *     enable_thinking is false;
 *   - messages with other roles (or a system message that is not first) render as plain turns / not
 *     at all exactly as the template does. */
#include "chat/chat_internal.h"

static int render_tools_header(Render *r, const cJSON *messages, const cJSON *tools) {
    StrBuf *o = &r->out;
    sb_puts(o, "<|im_start|>system\n");
    if (role_is(messages->child, "system")) {
        Str sys;
        if (content_as_string(r, messages->child, &sys) < 0) return -1;
        sb_put(o, sys.p, sys.n);
        sb_puts(o, "\n\n");
    }
    sb_puts(o, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
               "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (const cJSON *t = tools->child; t; t = t->next) {
        sb_putc(o, '\n');
        py_tojson(o, t);
    }
    sb_puts(o, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
               "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
               "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    return 0;
}

static int render_assistant(Render *r, const cJSON *m, bool after_query, bool last) {
    StrBuf *o = &r->out;
    Str raw, content, reasoning = str_of("");
    if (content_as_string(r, m, &raw) < 0) return -1;
    content = raw;
    const cJSON *rc = jget(m, "reasoning_content");
    if (rc && !cJSON_IsNull(rc)) {
        if (!cJSON_IsString(rc)) return render_fail(r, "reasoning_content must be a string");
        reasoning = str_of(rc->valuestring);
    } else if (str_find(raw, "</think>") >= 0) {
        /* content = content.split('</think>')[-1].lstrip('\n') */
        for (long k; (k = str_find(content, "</think>")) >= 0;) content = (Str){content.p + k + 8, content.n - (size_t)k - 8};
        content = py_lstrip_chars(content, "\n");
        /* reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        Str before = {raw.p, (size_t)str_find(raw, "</think>")};
        before = py_rstrip_chars(before, "\n");
        for (long k; (k = str_find(before, "<think>")) >= 0;) before = (Str){before.p + k + 7, before.n - (size_t)k - 7};
        reasoning = py_lstrip_chars(before, "\n");
    }
    sb_puts(o, "<|im_start|>assistant\n");
    if (after_query && (last || reasoning.n)) {
        Str rs = py_strip_chars(reasoning, "\n"), cs = py_lstrip_chars(content, "\n");
        sb_puts(o, "<think>\n");
        sb_put(o, rs.p, rs.n);
        sb_puts(o, "\n</think>\n\n");
        sb_put(o, cs.p, cs.n);
    } else {
        sb_put(o, content.p, content.n);
    }

    const cJSON *calls = jget(m, "tool_calls");
    if (py_truthy(calls)) {
        if (!cJSON_IsArray(calls)) return render_fail(r, "tool_calls must be an array");
        int i = 0;
        for (const cJSON *call = calls->child; call; call = call->next, i++) {
            const cJSON *fn;
            const char *name;
            if (call_function(r, call, &fn, &name) < 0) return -1;
            const cJSON *args = jget(fn, "arguments");
            if (!args) return render_fail(r, "tool call '%s' has no arguments", name);
            if (i > 0 || content.n) sb_putc(o, '\n');
            sb_puts(o, "<tool_call>\n{\"name\": \"");
            sb_puts(o, name);
            sb_puts(o, "\", \"arguments\": ");
            if (cJSON_IsString(args)) sb_puts(o, args->valuestring);
            else py_tojson(o, args);
            sb_puts(o, "}\n</tool_call>");
        }
    }
    sb_puts(o, "<|im_end|>\n");
    return 0;
}

int render_qwen3(Render *r, const cJSON *messages, const cJSON *tools) {
    StrBuf *o = &r->out;
    int n = cJSON_GetArraySize(messages);
    if (tools && tools->child) {
        if (render_tools_header(r, messages, tools) < 0) return -1;
    } else if (role_is(messages->child, "system")) {
        Str sys;
        if (content_as_string(r, messages->child, &sys) < 0) return -1;
        sb_puts(o, "<|im_start|>system\n");
        sb_put(o, sys.p, sys.n);
        sb_puts(o, "<|im_end|>\n");
    }

    /* the last user turn that is a real query; without one, the last message's index */
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        const cJSON *m = cJSON_GetArrayItem(messages, i);
        if (!role_is(m, "user")) continue;
        const cJSON *c = jget(m, "content");
        Str content;
        if (cJSON_IsArray(c) && !r->opt->flatten_text_parts)
            return render_fail(r, "user content must be a string, not a list ('list object' has no attribute 'startswith')");
        if (content_as_string(r, m, &content) < 0) return -1;
        if (!(str_starts(content, "<tool_response>") && str_ends(content, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }

    int i = 0;
    const cJSON *prev = NULL;
    for (const cJSON *m = messages->child; m; prev = m, m = m->next, i++) {
        const char *role = jstr(m, "role");
        if (role_is(m, "user") || (role_is(m, "system") && i > 0)) {
            if (render_turn(r, role, m) < 0) return -1;
        } else if (role_is(m, "assistant")) {
            if (render_assistant(r, m, i > last_query, m->next == NULL) < 0) return -1;
        } else if (role_is(m, "tool")) {
            if (!prev || !role_is(prev, "tool")) sb_puts(o, "<|im_start|>user");
            sb_puts(o, "\n<tool_response>\n");
            Str content = printed(r, jget(m, "content"));
            sb_put(o, content.p, content.n);
            sb_puts(o, "\n</tool_response>");
            if (!m->next || !role_is(m->next, "tool")) sb_puts(o, "<|im_end|>\n");
        }
        /* the first system message was rendered above; other roles are not rendered by the template */
    }
    if (r->opt->add_generation_prompt) {
        sb_puts(o, "<|im_start|>assistant\n");
        if (thinking_disabled(r)) sb_puts(o, "<think>\n\n</think>\n\n");
    }
    return 0;
}
