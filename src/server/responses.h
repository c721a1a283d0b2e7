/* responses.h — OpenAI's Responses API (POST /v1/responses, GET /v1/responses/{id}) on top of the chat
 * pipeline.
 *
 * A request is translated into the chat request it means (instructions → system message, input items →
 * messages: message / function_call / function_call_output / reasoning items, flat function tools →
 * chat tools, text.format → response_format, max_output_tokens → max_tokens), validated by api_parse like
 * any chat request, rendered and generated the same way. The output is parsed by the model's ChatParser
 * and returned as Responses items: reasoning (reasoning_text content), message (output_text), function_call.
 * Streaming sends the semantic events (response.created, response.output_item.added,
 * response.output_text.delta, ..., response.completed / response.incomplete) with sequence numbers.
 *
 * previous_response_id: with store (the default), the conversation of every response — its input and its
 * output as chat messages — is kept in memory for the server's lifetime (bounded, least recently used
 * dropped first), and a later request that names it continues from there. Instructions are not carried
 * over (as in the OpenAI API). */
#ifndef DL_SERVER_RESPONSES_H
#define DL_SERVER_RESPONSES_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/openai.h"
#include "server/respond.h"

typedef struct ResponsesStore ResponsesStore;

/* At most max_entries responses and max_bytes of their conversations. */
ResponsesStore *rstore_new(size_t max_entries, size_t max_bytes);
void rstore_free(ResponsesStore *st);
/* The stored response object (malloc'd JSON), or NULL. */
char *rstore_get_json(ResponsesStore *st, const char *id);
size_t rstore_count(ResponsesStore *st);

/* Keeps a finished response under id: its conversation (chat messages) and its object (JSON); takes both. */
void rstore_put(ResponsesStore *st, const char *id, cJSON *messages, char *json);

/* What a parsed request carries for its response (responses.c fills it, responses_out.c uses it). */
struct ResponsesReq {
    cJSON *echo;    /* request fields the response object repeats */
    cJSON *history; /* the conversation as chat messages (stored ones + this input), without instructions */
    bool store;
    ResponsesStore *st;
};

/* Parses and validates a /v1/responses body into r (a chat request, r->responses set). */
int responses_parse(const char *body, size_t len, const ApiDefaults *d, ResponsesStore *store, ApiRequest *r,
                    ApiError *e);
/* Frees what responses_parse attached to a request. */
void responses_req_free(ResponsesReq *q);

/* The Responder side (respond.c calls these for RESP_RESPONSES). */
ResponsesState *responses_state_new(const ApiRequest *req, Responder *r, Err *err);
void responses_state_free(ResponsesState *rs);
int responses_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err);
int responses_stream_finish(Responder *r, const JobResult *res, SBuf *out, Err *err);
void responses_stream_error(Responder *r, const char *message, SBuf *out);
char *responses_body(Responder *r, const JobResult *res, Err *err);

#endif
