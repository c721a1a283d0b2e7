/* chat.h — OpenAI-style conversations to Qwen prompt text, and generated text back to reasoning,
 * content and tool calls.
 *
 * Rendering: no Jinja engine. The chat formats of the Qwen models are implemented natively and
 * reproduce their templates byte for byte (golden renderings in tests/data/chat/). A model's format is
 * chosen from its GGUF tokenizer.chat_template by recognisable markers (chat_format_detect); a template
 * that matches none of them is refused with a clear message rather than rendered approximately.
 *
 * Parsing: a ChatParser is fed the generated text piece by piece (as the detokenizer produces it) and
 * returns what became final: reasoning text, content text and completed tool calls.
 *
 * Everything here is pure computation on cJSON values and strings; nothing prints. Errors: int
 * functions return 0 on success and -1 with a one-line message in *err.
 *
 * A server's request, end to end:
 *     ChatTemplate tmpl;  chat_template_init(&tmpl, tokenizer_chat_template(tok), &err);     // once
 *     ChatRenderOptions o = {.add_generation_prompt = true, .enable_thinking = CHAT_THINKING_DEFAULT,
 *                            .flatten_text_parts = true};
 *     chat_render_request(&tmpl, request_json, &o, &prompt, &len, &err);
 *     tokenizer_encode(tok, prompt, len, TOKENIZE_PARSE_SPECIAL, &ids, &err);
 *     p = chat_parser_new(tmpl.format, chat_prompt_opens_reasoning(prompt, len), tools_json, &err);
 *     d = detokenizer_new(tok, 0, &err);
 *     for each sampled id until tokenizer_is_eog(tok, id):
 *         detokenizer_push(d, id, &text, &n, &err);  chat_parser_feed(p, text, n, &delta, &err);
 *         -> stream delta.reasoning / delta.content / delta.tool_calls
 *     detokenizer_flush(d, ...); chat_parser_feed(...); chat_parser_finish(p, &delta, &err); */
#ifndef DL_CHAT_CHAT_H
#define DL_CHAT_CHAT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

typedef enum ChatFormat {
    CHAT_FORMAT_CHATML,      /* plain ChatML, Qwen1.5/Qwen2 style (optionally a default system prompt) */
    CHAT_FORMAT_QWEN3,       /* Qwen3 / Qwen3-Next: <think> reasoning, JSON tool calls in <tool_call> */
    CHAT_FORMAT_QWEN3_CODER, /* Qwen3-Coder: XML tool calls, no reasoning */
    CHAT_FORMAT_QWEN35,      /* Qwen3.5 / 3.6: <think> reasoning, XML tool calls, content parts */
} ChatFormat;

/* Which format a chat template is:
 *   no "<|im_start|>"                                  -> refused (not a ChatML template)
 *   "<function=" and "<think>"                         -> QWEN35
 *   "<function=" without "<think>"                     -> QWEN3_CODER
 *   "<tool_call>" (JSON calls) and "<think>"           -> QWEN3
 *   "<tool_call>" without "<think>"                    -> refused (Qwen2.5-style tools: not supported)
 *   otherwise                                          -> CHATML; a default system turn
 *                                                         "You are a helpful assistant" is added before a
 *                                                         first non-system message when the template has
 *                                                         that text.
 * *default_system (may be NULL) tells whether CHATML has the default system turn. */
int chat_format_detect(const char *template_text, ChatFormat *fmt, bool *default_system, Err *err);
const char *chat_format_name(ChatFormat fmt);
/* "chatml", "qwen3", "qwen3-coder", "qwen35" -> format; -1 when unknown. */
int chat_format_from_name(const char *name, ChatFormat *fmt);

typedef struct ChatTemplate {
    ChatFormat format;
    bool default_system; /* CHATML only: "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n" */
    bool thinking_opt_in; /* thinks only when enable_thinking is true (chat_thinking_opt_in): by default the
                             generation prompt holds an empty think block, as with enable_thinking false */
} ChatTemplate;

/* Whether a Qwen template thinks only on request: its generation prompt opens <think> when
 * "enable_thinking is defined and enable_thinking is true" (the embedded model's template, tools/train/
 * tinychat.jinja), where Qwen's own templates think unless it is false. */
bool chat_thinking_opt_in(const char *template_text);

/* chat_format_detect into a ChatTemplate (template_text may be NULL: "the model has no chat template"). */
int chat_template_init(ChatTemplate *tmpl, const char *template_text, Err *err);

enum { CHAT_THINKING_DEFAULT = -1 };

typedef struct ChatRenderOptions {
    bool add_generation_prompt; /* end with the opening of an assistant turn */
    int enable_thinking;        /* CHAT_THINKING_DEFAULT (as if not given), 0 = false, 1 = true. Only false
                                   changes anything: an empty <think></think> is pre-filled. */
    bool flatten_text_parts;    /* for formats whose template rejects content arrays (all but QWEN35):
                                   join text-only parts into one string instead of failing */
} ChatRenderOptions;

/* Renders messages (a cJSON array of {"role", "content", "reasoning_content", "tool_calls", ...}) and
 * tools (array of OpenAI tool definitions, or NULL) into the prompt text the model's template would
 * produce. *out is malloc'd and NUL-terminated (length *len). Fails, like the template, on what the
 * template refuses (e.g. no user message for QWEN35, a system message not first, content arrays
 * where they are not supported), and on malformed input (message not an object, tool call without a
 * name, arguments that are neither an object nor a string holding one).
 * Deviations from the templates, for API use: null/missing content is treated as ""; tool-call
 * arguments given as a JSON string are parsed for the XML formats (whose templates need an object). */
int chat_render(const ChatTemplate *tmpl, const cJSON *messages, const cJSON *tools, const ChatRenderOptions *opt,
                char **out, size_t *len, Err *err);

/* Convenience for a request object {"messages": [...], "tools": [...], "add_generation_prompt": bool,
 * "enable_thinking": bool, "chat_template_kwargs": {"enable_thinking": bool}} — the shape of the golden
 * cases and of OpenAI requests. A bare array is taken as the messages. Options the request does not
 * set come from defaults (NULL: add_generation_prompt false, thinking default, no flattening). */
int chat_render_request(const ChatTemplate *tmpl, const cJSON *request, const ChatRenderOptions *defaults, char **out,
                        size_t *len, Err *err);

/* Whether a rendered prompt leaves the model inside a reasoning block (ends with an open "<think>\n"),
 * i.e. whether its output starts as reasoning. Pass to chat_parser_new. */
bool chat_prompt_opens_reasoning(const char *prompt, size_t len);

/* cJSON parsing that keeps every number's exact text (as cJSON_Raw nodes): a double cannot hold
 * 207310705731958600 or 1e400, and prints 2.0 as 2. The renderer and the output parser print raw numbers
 * the way Python's json.dumps prints them (integers exactly). Parse messages and tools with this before
 * rendering; use plain cJSON_Parse for values you validate as numbers. end (may be NULL) receives where
 * parsing stopped (or failed). NULL on invalid JSON. */
cJSON *chat_json_parse(const char *text, size_t len, const char **end);

/* --------------------------------------------------------------------------------------- output */

typedef struct ChatToolCall {
    char *name;
    char *arguments; /* a JSON object, as text */
} ChatToolCall;

/* What one feed made final. Pointers stay valid until the next call on the parser. */
typedef struct ChatDelta {
    const char *reasoning; /* new reasoning text (may be empty, never NULL) */
    size_t reasoning_len;
    const char *content; /* new content text */
    size_t content_len;
    const ChatToolCall *tool_calls; /* tool calls completed by this feed */
    size_t n_tool_calls;
} ChatDelta;

typedef struct ChatParser ChatParser;

/* starts_in_reasoning: the prompt ended inside <think> (chat_prompt_opens_reasoning). tools: the
 * request's tool definitions (may be NULL); with them, XML parameter values are typed by the schema
 * (a "string" parameter stays a string), without them a value that parses as JSON is taken as JSON.
 * The parser copies what it needs from tools. */
ChatParser *chat_parser_new(ChatFormat fmt, bool starts_in_reasoning, const cJSON *tools, Err *err);
void chat_parser_free(ChatParser *p);

/* Feeds generated text (any split, even inside a tag or a UTF-8 character). Text that could still turn
 * out to be part of a tag (<think>, </think>, <tool_call>, ...) is held back until it is decided.
 * Reasoning loses the newlines around it, content the newlines after </think> and the whitespace next
 * to tool calls — the parts the templates add when rendering them back. A <tool_call> block whose
 * body does not parse is passed through as content, unchanged. */
int chat_parser_feed(ChatParser *p, const char *text, size_t len, ChatDelta *delta, Err *err);
/* End of generation: releases held text; an unterminated <think> ends the reasoning, an unterminated
 * <tool_call> is parsed if it is complete enough, else passed through as content. */
int chat_parser_finish(ChatParser *p, ChatDelta *delta, Err *err);

/* Everything parsed so far (for non-streaming responses). Valid until chat_parser_free. */
const char *chat_parser_reasoning(const ChatParser *p, size_t *len);
const char *chat_parser_content(const ChatParser *p, size_t *len);
size_t chat_parser_tool_calls(const ChatParser *p, const ChatToolCall **calls);

#endif
