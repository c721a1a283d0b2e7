/* chat_prompt.c — see chat_prompt.h. */
#include "cli/chat_prompt.h"

#include <stdio.h>

int chat_prompt_render(const char *chat_template, const char *user, bool enable_thinking, char **out, char *err,
                       size_t err_cap) {
    (void)chat_template, (void)user, (void)enable_thinking, (void)out;
    snprintf(err, err_cap, "--chat is not available yet in this build");
    return -1;
}
