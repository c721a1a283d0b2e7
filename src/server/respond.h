/* respond.h — a job's generated text to OpenAI responses: SSE chunks while streaming, or one JSON body.
 *
 * For chat completions the text goes through the ChatParser of src/chat (reasoning_content, content,
 * tool_calls); completions pass the text through. Runs on the HTTP thread of the request. */
#ifndef DL_SERVER_RESPOND_H
#define DL_SERVER_RESPOND_H

#include <stdbool.h>
#include <stddef.h>

#include "chat/chat.h"
#include "server/job.h"
#include "server/openai.h"
#include "server/util.h"

typedef struct JobResult {
    JobFinish finish;
    int n_prompt, n_cached, n_gen;
    double queue_ms, prompt_ms, gen_ms;
} JobResult;

typedef struct Responder {
    bool chat, stream, include_usage;
    const char *model;
    char id[48];
    long created;
    ChatParser *parser;
    int n_calls_sent;
    bool role_sent;
    SBuf text; /* completions: everything so far (non-streaming) */
} Responder;

/* chat: fmt, starts_in_reasoning and the request's tools configure the parser. */
int resp_init(Responder *r, const ApiRequest *req, ChatFormat fmt, bool starts_in_reasoning, const char *model,
              Err *err);
void resp_free(Responder *r);

/* Streaming: the SSE events for new text (appended to out). */
int resp_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err);
/* Streaming: the last events (remaining parsed output, the finish chunk, usage, [DONE]). */
int resp_stream_end(Responder *r, const JobResult *res, SBuf *out, Err *err);
/* Streaming: an error event and [DONE] (the job failed after the stream began). */
void resp_stream_error(Responder *r, const char *message, SBuf *out);

/* Non-streaming: feed text, then build the body (malloc'd JSON). */
int resp_feed(Responder *r, const char *text, size_t n, Err *err);
char *resp_body(Responder *r, const JobResult *res, Err *err);

#endif
