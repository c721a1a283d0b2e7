/* anthropic.h — the Anthropic Messages API (POST /v1/messages), as llama-server serves it to Anthropic-protocol
 * clients: the request becomes a chat request (system, messages with text / thinking / tool_use / tool_result
 * blocks, tools with input_schema, tool_choice auto / any / tool / none, thinking, stop_sequences) checked by
 * api_parse; the output is a message with thinking, text and tool_use content blocks, or its stream of events
 * (message_start, content_block_start / _delta / _stop, message_delta with the stop_reason and usage,
 * message_stop). Images and documents are refused (text only). */
#ifndef DL_SERVER_ANTHROPIC_H
#define DL_SERVER_ANTHROPIC_H

#include "server/openai.h"
#include "server/respond.h"

/* Parses and checks a /v1/messages body into a chat request (as api_parse). */
int anthropic_parse(const char *body, size_t len, const ApiDefaults *d, ApiRequest *r, ApiError *e);

typedef struct AnthropicState AnthropicState;
AnthropicState *anthropic_state_new(void);
void anthropic_state_free(AnthropicState *a);

/* The Responder hooks (kind RESP_ANTHROPIC). */
int anthropic_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err);
int anthropic_stream_finish(Responder *r, const JobResult *res, SBuf *out, Err *err);
char *anthropic_body(Responder *r, const JobResult *res, Err *err);
/* An error in Anthropic's shape, {"type": "error", "error": {"type": ..., "message": ...}}, its type from the
 * HTTP status (invalid_request_error, authentication_error, not_found_error, request_too_large, ...). */
char *anthropic_error_json(const ApiError *e);

#endif
