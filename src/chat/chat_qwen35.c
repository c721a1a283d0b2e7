/* chat_qwen35.c — the Qwen3.5 / Qwen3.6 chat format (tests/data/chat/Qwen3.5-4B.jinja), natively.
 *
 * What the template does, and so what this does:
 *   - content may be a string or a list of parts (text, image, video); parts are joined, images and
 *     videos become vision placeholders; every content is trimmed (Python str.strip);
 *   - tools: a system turn "# Tools ... <tools>{json per tool}</tools> ..." with the XML call format,
 *     followed by the trimmed system message if there is one;
 *   - the last "real" user query (a user turn that is not just tool responses) splits history: later
 *     assistant turns keep their reasoning in <think>, earlier ones lose it;
 *   - reasoning comes from reasoning_content, else from a <think>...</think> inside the content;
 *   - tool calls as <tool_call><function=NAME><parameter=P>VALUE</parameter>...;
 *   - consecutive tool results are grouped into one user turn of <tool_response> blocks;
 *   - the generation prompt opens <think> (or writes an empty one when enable_thinking is false).
 * add_vision_id is never set by us, so pictures are not numbered. */
#include "chat/chat_internal.h"

#define VISION_IMAGE "<|vision_start|><|image_pad|><|vision_end|>"
#define VISION_VIDEO "<|vision_start|><|video_pad|><|vision_end|>"

/* {{ render_content(content, ..., is_system_content) }} into b. */
static int render_content(Render *r, const cJSON *content, bool is_system, StrBuf *b) {
    if (!content || cJSON_IsNull(content)) return 0;
    if (cJSON_IsString(content)) {
        sb_puts(b, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content)) return render_fail(r, "Unexpected content type.");
    for (const cJSON *item = content->child; item; item = item->next) {
        bool image, video, text;
        if (cJSON_IsObject(item)) {
            const char *type = jstr(item, "type");
            image = jget(item, "image") || jget(item, "image_url") || (type && !strcmp(type, "image"));
            video = jget(item, "video") || (type && !strcmp(type, "video"));
            text = jget(item, "text") != NULL;
        } else if (cJSON_IsString(item)) { /* Jinja's `in` on a string is a substring test */
            image = strstr(item->valuestring, "image") != NULL;
            video = strstr(item->valuestring, "video") != NULL;
            text = strstr(item->valuestring, "text") != NULL;
        } else {
            return render_fail(r, "Unexpected item type in content.");
        }
        if (image) {
            if (is_system) return render_fail(r, "System message cannot contain images.");
            sb_puts(b, VISION_IMAGE);
        } else if (video) {
            if (is_system) return render_fail(r, "System message cannot contain videos.");
            sb_puts(b, VISION_VIDEO);
        } else if (text) {
            if (cJSON_IsObject(item)) py_str(b, jget(item, "text")); /* item.text of a string is undefined: "" */
        } else {
            return render_fail(r, "Unexpected item type in content.");
        }
    }
    return 0;
}

/* render_content(...)|trim, into a buffer owned by the caller. */
static int content_trimmed(Render *r, const cJSON *msg, bool is_system, StrBuf *b, Str *out) {
    b->n = 0;
    if (render_content(r, jget(msg, "content"), is_system, b) < 0) return -1;
    sb_put(b, "", 0);
    if (b->oom) return render_fail(r, "out of memory");
    *out = py_strip((Str){b->p, b->n});
    return 0;
}

static int render_tools_header(Render *r, const cJSON *messages, const cJSON *tools, StrBuf *tmp) {
    StrBuf *o = &r->out;
    sb_puts(o, "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
    for (const cJSON *t = tools->child; t; t = t->next) {
        sb_putc(o, '\n');
        py_tojson(o, t);
    }
    sb_puts(o, "\n</tools>");
    sb_puts(o, "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
               "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
               "</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
               "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\n"
               "Reminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> "
               "block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be "
               "specified\n- You may provide optional reasoning for your function call in natural language "
               "BEFORE the function call, but NOT after\n- If there is no function call available, answer the "
               "question like normal with your current knowledge and do not tell the user about function "
               "calls\n</IMPORTANT>");
    if (role_is(messages->child, "system")) {
        Str content;
        if (content_trimmed(r, messages->child, true, tmp, &content) < 0) return -1;
        if (content.n) {
            sb_puts(o, "\n\n");
            sb_put(o, content.p, content.n);
        }
    }
    sb_puts(o, "<|im_end|>\n");
    return 0;
}

static int render_assistant(Render *r, const cJSON *m, Str content, bool keep_reasoning) {
    StrBuf *o = &r->out;
    Str reasoning = str_of("");
    const cJSON *rc = jget(m, "reasoning_content");
    if (cJSON_IsString(rc)) {
        reasoning = str_of(rc->valuestring);
    } else if (str_find(content, "</think>") >= 0) {
        /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
        Str before = {content.p, (size_t)str_find(content, "</think>")};
        before = py_rstrip_chars(before, "\n");
        for (long k; (k = str_find(before, "<think>")) >= 0;) before = (Str){before.p + k + 7, before.n - (size_t)k - 7};
        reasoning = py_lstrip_chars(before, "\n");
        /* content.split('</think>')[-1].lstrip('\n') */
        for (long k; (k = str_find(content, "</think>")) >= 0;) content = (Str){content.p + k + 8, content.n - (size_t)k - 8};
        content = py_lstrip_chars(content, "\n");
    }
    reasoning = py_strip(reasoning);
    sb_puts(o, "<|im_start|>assistant\n");
    if (keep_reasoning) {
        sb_puts(o, "<think>\n");
        sb_put(o, reasoning.p, reasoning.n);
        sb_puts(o, "\n</think>\n\n");
    }
    sb_put(o, content.p, content.n);

    const cJSON *calls = jget(m, "tool_calls");
    if (calls && !cJSON_IsNull(calls) && !cJSON_IsArray(calls)) return render_fail(r, "tool_calls must be an array");
    int i = 0;
    for (const cJSON *call = cJSON_IsArray(calls) ? calls->child : NULL; call; call = call->next, i++) {
        const cJSON *fn, *args;
        const char *name;
        if (call_function(r, call, &fn, &name) < 0 || call_arguments_object(r, fn, &args) < 0) return -1;
        if (i > 0) sb_puts(o, "\n<tool_call>\n<function=");
        else if (py_strip(content).n) sb_puts(o, "\n\n<tool_call>\n<function=");
        else sb_puts(o, "<tool_call>\n<function=");
        sb_puts(o, name);
        sb_puts(o, ">\n");
        render_xml_parameters(r, args);
        sb_puts(o, "</function>\n</tool_call>");
    }
    sb_puts(o, "<|im_end|>\n");
    return 0;
}

int render_qwen35(Render *r, const cJSON *messages, const cJSON *tools) {
    StrBuf tmp = {0};
    int rc = -1;
    StrBuf *o = &r->out;
    int n = cJSON_GetArraySize(messages);

    if (tools && tools->child) {
        if (render_tools_header(r, messages, tools, &tmp) < 0) goto done;
    } else if (role_is(messages->child, "system")) {
        Str content;
        if (content_trimmed(r, messages->child, true, &tmp, &content) < 0) goto done;
        sb_puts(o, "<|im_start|>system\n");
        sb_put(o, content.p, content.n);
        sb_puts(o, "<|im_end|>\n");
    }

    /* the last user turn that is a real query, not only <tool_response> blocks */
    int last_query = -1;
    for (int i = n - 1; i >= 0 && last_query < 0; i--) {
        const cJSON *m = cJSON_GetArrayItem(messages, i);
        if (!role_is(m, "user")) continue;
        Str content;
        if (content_trimmed(r, m, false, &tmp, &content) < 0) goto done;
        if (!(str_starts(content, "<tool_response>") && str_ends(content, "</tool_response>"))) last_query = i;
    }
    if (last_query < 0) {
        render_fail(r, "No user query found in messages.");
        goto done;
    }

    int i = 0;
    const cJSON *prev = NULL;
    for (const cJSON *m = messages->child; m; prev = m, m = m->next, i++) {
        Str content;
        if (content_trimmed(r, m, false, &tmp, &content) < 0) goto done;
        if (role_is(m, "system")) {
            if (i != 0) {
                render_fail(r, "System message must be at the beginning.");
                goto done;
            }
        } else if (role_is(m, "user")) {
            sb_puts(o, "<|im_start|>user\n");
            sb_put(o, content.p, content.n);
            sb_puts(o, "<|im_end|>\n");
        } else if (role_is(m, "assistant")) {
            if (render_assistant(r, m, content, i > last_query) < 0) goto done;
        } else if (role_is(m, "tool")) {
            if (prev && !role_is(prev, "tool")) sb_puts(o, "<|im_start|>user");
            sb_puts(o, "\n<tool_response>\n");
            sb_put(o, content.p, content.n);
            sb_puts(o, "\n</tool_response>");
            if (!m->next || !role_is(m->next, "tool")) sb_puts(o, "<|im_end|>\n");
        } else {
            render_fail(r, "Unexpected message role.");
            goto done;
        }
    }
    if (r->opt->add_generation_prompt)
        sb_puts(o, thinking_disabled(r) ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n<think>\n");
    rc = 0;
done:
    sb_free(&tmp);
    return rc;
}
