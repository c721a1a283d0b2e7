/* chat_prompt.h — the model's chat template for `run --chat` and `chat`: which format (the GGUF's template,
 * or --chat-template-file / --chat-format), and a one-turn prompt rendered with it. */
#ifndef DL_CLI_CHAT_PROMPT_H
#define DL_CLI_CHAT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat.h"

/* The chat format: format_name if given (chatml, qwen3, qwen3-coder, qwen35), else detected from the text
 * of template_file if given, else from gguf_template (may be NULL). */
int chat_prompt_template(const char *gguf_template, const char *template_file, const char *format_name,
                         ChatTemplate *t, char *err, size_t err_cap);

/* Renders [{"role": "system", ...} when system, {"role": "user", "content": user}] with the generation
 * prompt; *out is malloc'ed. */
int chat_prompt_render(const ChatTemplate *t, const char *system, const char *user, bool enable_thinking, char **out,
                       char *err, size_t err_cap);

#endif
