/* chat_prompt.c — see chat_prompt.h: picks the chat format and renders a one-turn conversation with chat/. */
#include "cli/chat_prompt.h"

#include "cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int chat_prompt_template(const char *gguf_template, const char *template_file, const char *format_name,
                         ChatTemplate *t, char *err, size_t err_cap) {
    char *file_text = NULL;
    const char *text = gguf_template;
    if (template_file) {
        size_t n;
        if (!(file_text = cli_read_file(template_file, &n))) {
            snprintf(err, err_cap, "cannot read the chat template %s: %s", template_file, strerror(errno));
            return -1;
        }
        text = file_text;
    }
    Err e = {{0}};
    int rc = 0;
    if (format_name) {
        if (chat_format_from_name(format_name, &t->format)) {
            snprintf(err, err_cap, "unknown chat format '%s' (chatml, qwen3, qwen3-coder, qwen35)", format_name);
            rc = -1;
        }
        t->default_system = t->format == CHAT_FORMAT_CHATML && text && strstr(text, "You are a helpful assistant");
    } else if (chat_template_init(t, text, &e)) {
        snprintf(err, err_cap, "%s%s%s", template_file ? template_file : "", template_file ? ": " : "", e.msg);
        rc = -1;
    }
    free(file_text);
    return rc;
}

int chat_prompt_render(const ChatTemplate *t, const char *system, const char *user, bool enable_thinking, char **out,
                       char *err, size_t err_cap) {
    Err e = {{0}};
    cJSON *msgs = cJSON_CreateArray();
    bool ok = msgs != NULL;
    const char *roles[2] = {"system", "user"}, *texts[2] = {system, user};
    for (int i = 0; i < 2 && ok; i++) {
        if (!texts[i]) continue;
        cJSON *m = cJSON_CreateObject();
        ok = m && cJSON_AddItemToArray(msgs, m) && cJSON_AddStringToObject(m, "role", roles[i]) &&
             cJSON_AddStringToObject(m, "content", texts[i]);
    }
    int rc = -1;
    if (ok) {
        ChatRenderOptions opt = {.add_generation_prompt = true,
                                 .enable_thinking = enable_thinking ? CHAT_THINKING_DEFAULT : 0,
                                 .flatten_text_parts = true};
        size_t len;
        rc = chat_render(t, msgs, NULL, &opt, out, &len, &e);
        if (rc) snprintf(err, err_cap, "%s", e.msg);
    } else {
        snprintf(err, err_cap, "out of memory");
    }
    cJSON_Delete(msgs);
    return rc;
}
