/* cmd_chat_format.c — `deltallm chat-format`: render an OpenAI-style conversation as the model's prompt.
 *
 *   deltallm chat-format -m MODEL.gguf [--chat-template FILE | --format NAME] [--flatten-parts] < conv.json
 *
 * conv.json is {"messages": [...], "tools": [...], "add_generation_prompt": bool, "enable_thinking":
 * bool} (or just the messages array). The template comes from the model's tokenizer.chat_template
 * (vocab-only files work), from a Jinja file given with --chat-template, or is named with --format
 * (chatml, qwen3, qwen3-coder, qwen35). The prompt is printed exactly, with no newline added. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

/* The model's chat template (malloc'd), or NULL with a message printed. */
static char *model_template(const char *path) {
    Err err = {{0}};
    Gguf *g = gguf_open(path, &err);
    if (!g) {
        fprintf(stderr, "deltallm chat-format: %s\n", err.msg);
        return NULL;
    }
    GgufStr s;
    int rc = gguf_get_str(g, "tokenizer.chat_template", &s, true, &err);
    char *t = rc == 1 ? strndup(s.ptr, s.len) : NULL;
    if (rc != 1) fprintf(stderr, "deltallm chat-format: %s: %s (use --chat-template FILE or --format NAME)\n", path, err.msg);
    gguf_close(g);
    return t;
}

int cmd_chat_format(int argc, char **argv) {
    const char *model = NULL, *tmpl_file = NULL, *format = NULL;
    bool flatten = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm chat-format -m MODEL.gguf [--chat-template-file FILE | --chat-format NAME] [--flatten-parts]\n"
                   "                            < conv.json\n"
                   "  conv.json: {\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true, \"enable_thinking\": false}\n"
                   "  --chat-template-file F   use this Jinja template instead of the model's (its format is detected)\n"
                   "  --chat-format NAME       chatml | qwen3 | qwen3-coder | qwen35 (no model needed)\n"
                   "  --flatten-parts          join text content parts for templates that only take strings\n"
                   "  (--chat-template and --format are the older names of the first two)\n");
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) return cli_usage_error("chat-format", "%s needs a file", a);
            model = argv[i];
        } else if (!strcmp(a, "--chat-template-file") || !strcmp(a, "--chat-template")) {
            if (++i >= argc) return cli_usage_error("chat-format", "%s needs a file", a);
            tmpl_file = argv[i];
        } else if (!strcmp(a, "--chat-format") || !strcmp(a, "--format")) {
            if (++i >= argc) return cli_usage_error("chat-format", "%s needs a name", a);
            format = argv[i];
        } else if (!strcmp(a, "--flatten-parts")) {
            flatten = true;
        } else {
            return cli_usage_error("chat-format", "unknown argument '%s' (the conversation is read from stdin)", a);
        }
    }
    if (!model && !tmpl_file && !format) return cli_usage_error("chat-format", "-m MODEL.gguf is required");
    if (tmpl_file && format) return cli_usage_error("chat-format", "give --chat-template-file or --chat-format, not both");

    ChatTemplate tmpl = {CHAT_FORMAT_CHATML, false, false};
    Err err = {{0}};
    if (format) {
        if (chat_format_from_name(format, &tmpl.format) < 0)
            return cli_usage_error("chat-format", "unknown format '%s' (chatml, qwen3, qwen3-coder, qwen35)", format);
        tmpl.default_system = false;
    } else {
        char *text = NULL;
        if (tmpl_file) {
            size_t n;
            if (!(text = cli_read_file(tmpl_file, &n))) {
                fprintf(stderr, "deltallm chat-format: cannot read %s: %s\n", tmpl_file, strerror(errno));
                return 1;
            }
        } else if (!(text = model_template(model))) {
            return 1;
        }
        int rc = chat_format_detect(text, &tmpl.format, &tmpl.default_system, &err);
        free(text);
        if (rc < 0) {
            fprintf(stderr, "deltallm chat-format: %s\n", err.msg);
            return 1;
        }
    }

    size_t len;
    char *input = cli_read_stream(stdin, &len);
    if (!input) {
        fprintf(stderr, "deltallm chat-format: cannot read the conversation from stdin\n");
        return 1;
    }
    const char *end = NULL;
    cJSON *req = chat_json_parse(input, len, &end); /* numbers kept exactly as written */
    if (!req) {
        size_t at = end && end >= input ? (size_t)(end - input) : 0;
        fprintf(stderr, "deltallm chat-format: the conversation is not valid JSON (at byte %zu)\n", at);
        free(input);
        return 1;
    }
    for (const char *p = end; p && p < input + len; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            fprintf(stderr, "deltallm chat-format: unexpected text after the JSON value (at byte %zu)\n",
                    (size_t)(p - input));
            cJSON_Delete(req);
            free(input);
            return 1;
        }
    }
    free(input);
    char *prompt = NULL;
    size_t plen = 0;
    ChatRenderOptions defaults = {false, CHAT_THINKING_DEFAULT, flatten};
    int rc = chat_render_request(&tmpl, req, &defaults, &prompt, &plen, &err);
    cJSON_Delete(req);
    if (rc < 0) {
        fprintf(stderr, "deltallm chat-format: %s\n", err.msg);
        return 1;
    }
    fwrite(prompt, 1, plen, stdout);
    free(prompt);
    return fflush(stdout) == 0 ? 0 : 1;
}
