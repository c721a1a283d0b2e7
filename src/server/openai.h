/* openai.h — OpenAI request bodies in, validated requests out; OpenAI-style error objects.
 *
 * api_parse checks a /v1/chat/completions or /v1/completions body completely before anything is
 * computed: JSON syntax, the type and range of every parameter, unknown top-level fields (refused, as
 * the OpenAI API does), the shape of messages, content parts, tools, tool_choice, response_format and
 * stream_options (unknown fields refused there too), and parameters deltallm cannot honour (n > 1,
 * logprobs, images, ...: refused with a message saying so rather than silently ignored). Known
 * parameters that do not change the output (user, metadata, store, ...) are accepted and ignored. */
#ifndef DL_SERVER_OPENAI_H
#define DL_SERVER_OPENAI_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deltallm.h"
#include "server/job.h"
#include "server/llama_params.h"
#include "server/stop.h"

typedef struct ApiError {
    int status;       /* HTTP status */
    const char *type; /* "invalid_request_error", ... */
    char param[96];   /* the offending parameter ("" when none) */
    char code[48];    /* "" when none */
    char message[600];
} ApiError;

/* Sets *e and returns -1. */
int api_error(ApiError *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* {"error": {"message", "type", "param", "code"}} (malloc'd). */
char *api_error_json(const ApiError *e);

typedef enum ToolChoice { TOOL_CHOICE_AUTO, TOOL_CHOICE_NONE, TOOL_CHOICE_REQUIRED, TOOL_CHOICE_NAMED } ToolChoice;
typedef enum RespFormat { RF_TEXT, RF_JSON_OBJECT, RF_JSON_SCHEMA } RespFormat;

/* Server-side defaults for what a request leaves out. */
typedef struct ApiDefaults {
    DlSamplingParams sampling; /* temperature, top_k, top_p, min_p */
    DlSamplerExtra extra;      /* llama.cpp's further samplers (serve --mirostat ...), when has_extra */
    bool has_extra;
    int n_vocab;               /* for logit_bias and token prompts */
    int chat_max_tokens;       /* -1: until the context is full */
    int completion_max_tokens; /* OpenAI's default for /v1/completions is 16 */
    bool images;               /* a vision projector is loaded (serve --mmproj): image_url parts are taken */
} ApiDefaults;

enum { API_MAX_PROMPTS = 256, API_MAX_N = 16 };

/* One /v1/completions prompt: text (JSON_NUL for NUL characters), or token ids. */
typedef struct ApiPrompt {
    const char *text; /* points into the request document, or NULL */
    int32_t *ids;     /* malloc'd, when text is NULL */
    size_t n_ids;
} ApiPrompt;

typedef struct ResponsesReq ResponsesReq; /* responses.c: what a /v1/responses request echoes and stores */

/* llama-server's fields (openai_llama.c); all zero is the default. */
typedef struct ApiLlama {
    int n_predict; /* n_predict_given: replaces max_tokens (-1: until the context is full) */
    bool n_predict_given;
    bool id_slot_given; /* id_slot ≥ 0: the job runs in that slot (-1, the default: any) */
    int id_slot;
    bool include_stop; /* include_stop_str_in_output: the matched stop string ends the text */
    bool keep_special; /* skip_special_tokens: false renders control tokens as text */
    bool reasoning_raw; /* reasoning_format "none": chat text is returned unparsed, <think> included */
    bool timings_per_token; /* every streamed chunk carries the "timings" so far (llama.cpp's web UI asks) */
} ApiLlama;

typedef struct ApiRequest {
    bool chat;
    cJSON *doc; /* the body; the pointers below point into it (messages and tools: into render_doc) */
    cJSON *render_doc; /* chat: the body again, numbers kept as written (chat_json_parse), for rendering */
    bool stream, include_usage;
    int n; /* choices per prompt (≥ 1): the prompt is evaluated once, its state copied to each */
    int max_tokens; /* -1: until the context is full */
    bool max_tokens_given;
    DlSamplingParams sp;
    SamplerSpec *spx; /* llama.cpp's further samplers (llama_params.h), NULL: none */
    bool seed_given;
    const char *stop[STOP_MAX];
    int n_stop;
    LogitBias *bias;
    int n_bias;
    bool cache_prompt;
    bool ignore_eos; /* extension: end-of-generation tokens are never sampled (benchmarks) */
    int logprobs;    /* -1: none; else alternatives per token (chat: top_logprobs; completions: logprobs) */
    /* chat */
    cJSON *messages;
    const cJSON *tools; /* NULL when absent, empty or tool_choice is "none" */
    ToolChoice tool_choice;
    const char *tool_name; /* TOOL_CHOICE_NAMED */
    int enable_thinking;   /* -1 default, 0, 1 */
    RespFormat response_format;
    const cJSON *schema; /* RF_JSON_SCHEMA (may be NULL: any object) */
    const char *grammar; /* a GBNF grammar (llama.cpp's `grammar`; every endpoint), or NULL */
    /* completion: one choice per prompt */
    ApiPrompt *prompts; /* malloc'd */
    int n_prompts;
    /* /v1/responses */
    ResponsesReq *responses;
    ApiLlama llama;
} ApiRequest;

/* Parses and validates a body. On failure *e holds the 4xx to send; r is left empty. */
int api_parse(bool chat, const char *body, size_t len, const ApiDefaults *d, ApiRequest *r, ApiError *e);
void api_request_free(ApiRequest *r);

/* openai_llama.c: takes llama-server's fields out of r->doc (before the strict key check) and applies them
 * (after the OpenAI fields are parsed). */
int api_llama_take(ApiRequest *r, ApiError *e);
int api_llama_apply(ApiRequest *r, ApiError *e);

/* Helpers shared with responses.c. */
const char *api_type_name(const cJSON *v); /* "a string", "an object", ... */
/* Refuses members of obj not in allowed (top: OpenAI's wording for top-level fields). */
int api_check_keys(const cJSON *obj, const char *const *allowed, const char *where, bool top, ApiError *e);

#endif
