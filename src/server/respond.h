/* respond.h — a job's generated text to OpenAI responses: SSE chunks while streaming, or one JSON body.
 *
 * One Responder per choice (a /v1/completions request with several prompts has one choice per prompt;
 * chat has one). For chat completions the text goes through the ChatParser of src/chat
 * (reasoning_content, content, tool_calls); completions pass the text through; the Responses API
 * (kind RESP_RESPONSES) is formatted by responses.c from the same parser. With logprobs, the entries of
 * the tokens behind each piece of text travel with it (OpenAI's shapes: chat {"content": [...]},
 * completions {"tokens", "token_logprobs", "top_logprobs", "text_offset"}). Runs on the HTTP thread. */
#ifndef DL_SERVER_RESPOND_H
#define DL_SERVER_RESPOND_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat.h"
#include "deltallm.h"
#include "server/job.h"
#include "server/openai.h"
#include "server/util.h"

typedef struct JobResult {
    JobFinish finish;
    int n_prompt, n_cached, n_gen;
    double queue_ms, prompt_ms, gen_ms;
    int slot;                  /* the slot that ran it */
    bool stop_word;            /* a stop string ended it */
    const char *stopping_word; /* that string (the job's copy) */
} JobResult;

typedef enum RespKind {
    RESP_CHAT,
    RESP_COMPLETION,
    RESP_RESPONSES,
    RESP_LLAMA,     /* POST /completion */
    RESP_ANTHROPIC, /* POST /v1/messages (anthropic.c) */
} RespKind;

typedef struct ResponsesState ResponsesState; /* responses.c */

typedef struct Responder {
    RespKind kind;
    bool chat; /* kind != RESP_COMPLETION: the text goes through the chat parser */
    bool stream, include_usage;
    int index; /* the choice */
    const char *model;
    const DlEngine *engine; /* token pieces for logprobs */
    char id[48];
    long created;
    ChatParser *parser; /* NULL with raw */
    bool raw;           /* chat with reasoning_format "none": the text is the content, unparsed */
    int n_calls_sent;
    bool role_sent;
    SBuf text;          /* completions: everything so far (non-streaming) */
    int logprobs;       /* -1: none; else the number of alternatives per token */
    TokenLogprob *lp;   /* entries not yet sent (streaming) or all of them (non-streaming) */
    size_t n_lp, cap_lp;
    size_t text_offset; /* completions: bytes of text before the next entry */
    ResponsesState *rs; /* RESP_RESPONSES */
    struct AnthropicState *as; /* RESP_ANTHROPIC */
    int n_prompt;       /* the job's prompt tokens (the Anthropic stream reports them first) */
    bool timings_per_token; /* streamed chunks carry "timings": the counts and times in `now` */
    JobResult now;          /* the job so far (set by the stream's pump before each resp_stream_text) */
} Responder;

/* chat: fmt, starts_in_reasoning and the request's tools configure the parser. id: shared by the choices of
 * one request (NULL: a new one). */
int resp_init(Responder *r, const ApiRequest *req, RespKind kind, int index, ChatFormat fmt, bool starts_in_reasoning,
              const char *model, const DlEngine *engine, const char *id, Err *err);
void resp_free(Responder *r);

/* Streaming: the events for new text and the logprobs of its tokens (appended to out). */
int resp_stream_text(Responder *r, const char *text, size_t n, const TokenLogprob *lp, size_t n_lp, SBuf *out,
                     Err *err);
/* Streaming: the choice is complete (remaining parsed output, its finish chunk). total: the usage of the
 * whole request when this is the last choice to finish (it then carries the usage, unless include_usage). */
int resp_stream_finish(Responder *r, const JobResult *res, const JobResult *total, SBuf *out, Err *err);
/* Streaming: after every choice finished — the usage chunk (include_usage) and [DONE]. */
int resp_stream_done(Responder *r, const JobResult *total, SBuf *out, Err *err);
/* Streaming: an error event and [DONE] (the job failed after the stream began). */
void resp_stream_error(Responder *r, const char *message, SBuf *out);

/* Non-streaming: feed text (and logprobs), then build the body of all k choices (malloc'd JSON). */
int resp_feed(Responder *r, const char *text, size_t n, const TokenLogprob *lp, size_t n_lp, Err *err);
char *resp_body(Responder *r, int k, const JobResult *res, const JobResult *total, Err *err);

/* The request's usage: generated tokens summed over its k choices, prompt and cached tokens once per prompt
 * (per_prompt choices share one: OpenAI counts a prompt once, whatever n is; the other choices restore its
 * state); queue time the longest choice's. */
void resp_total(const JobResult *res, int k, int per_prompt, JobResult *total);

/* Shared with responses.c. */
cJSON *resp_usage_object(const JobResult *res);
cJSON *resp_timings_object(const JobResult *res);
void resp_sse(SBuf *out, const char *event, cJSON *obj /* consumed */);
/* Appends logprobs entries to r's pending list. */
void resp_keep_logprobs(Responder *r, const TokenLogprob *lp, size_t n_lp);
/* The chat form of r's pending entries ({"content": [...], "refusal": null}); empties the list. */
cJSON *resp_chat_logprobs(Responder *r);

/* respond_llama.c: llama.cpp's /completion shapes. */
int llama_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err);
int llama_stream_finish(Responder *r, const JobResult *res, SBuf *out, Err *err);
char *llama_body(Responder *r, int k, const JobResult *res, Err *err);

#endif
