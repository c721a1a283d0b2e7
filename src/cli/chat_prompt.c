/* chat_prompt.c — see chat_prompt.h: builds the one-message conversation and renders it with chat/. */
#include "cli/chat_prompt.h"

#include "chat/chat.h"

#include <stdio.h>
#include <string.h>

int chat_prompt_render(const char *chat_template, const char *user, bool enable_thinking, char **out, char *err,
                       size_t err_cap) {
    Err e = {{0}};
    ChatTemplate t = {0};
    if (!chat_template) {
        snprintf(err, err_cap, "--chat: the model has no chat template (tokenizer.chat_template)");
        return -1;
    }
    if (chat_format_detect(chat_template, &t.format, &t.default_system, &e)) {
        snprintf(err, err_cap, "--chat: %s", e.msg);
        return -1;
    }
    cJSON *msgs = cJSON_CreateArray(), *m = cJSON_CreateObject();
    int rc = -1;
    if (msgs && m && cJSON_AddStringToObject(m, "role", "user") && cJSON_AddStringToObject(m, "content", user)) {
        cJSON_AddItemToArray(msgs, m);
        m = NULL;
        ChatRenderOptions opt = {.add_generation_prompt = true,
                                 .enable_thinking = enable_thinking ? CHAT_THINKING_DEFAULT : 0,
                                 .flatten_text_parts = true};
        size_t len;
        rc = chat_render(&t, msgs, NULL, &opt, out, &len, &e);
        if (rc) snprintf(err, err_cap, "--chat: %s", e.msg);
    } else {
        snprintf(err, err_cap, "out of memory");
    }
    cJSON_Delete(m);
    cJSON_Delete(msgs);
    return rc;
}
