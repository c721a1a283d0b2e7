/* chat_prompt.h — `run --chat`: one user message rendered through the model's own chat template. */
#ifndef DL_CLI_CHAT_PROMPT_H
#define DL_CLI_CHAT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

/* Renders [{"role": "user", "content": user}] with add_generation_prompt; *out is malloc'ed. */
int chat_prompt_render(const char *chat_template, const char *user, bool enable_thinking, char **out, char *err,
                       size_t err_cap);

#endif
