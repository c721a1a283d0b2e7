/* http_parse.h — the server's own parsing of what a client sends in the request line and headers: the route
 * of a path, percent-decoding, the CORS origin check, the bearer token check. Pure functions on strings
 * (libmicrohttpd does the HTTP framing), so the HTTP fuzzer (tests/fuzz/fuzz_http.c) drives them directly. */
#ifndef DL_SERVER_HTTP_PARSE_H
#define DL_SERVER_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum Route {
    R_NONE,
    R_HEALTH,
    R_MODELS,
    R_MODEL_ONE,
    R_CHAT,
    R_COMPLETIONS,
    R_RESPONSES,
    R_RESPONSE_ONE,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_APPLY_TEMPLATE,
    R_PROPS,
    R_SLOTS,
    R_METRICS,
    R_LLAMA_COMPLETION, /* POST /completion: llama.cpp's native endpoint */
    R_SLOT_ACTION,      /* POST /slots/{id}?action=save|restore|erase */
    R_MESSAGES,         /* POST /v1/messages: the Anthropic Messages API */
    R_COUNT
} Route;

/* The route's name in logs and metrics. */
const char *route_name(Route r);
/* The route of a (decoded) path, matched exactly with an optional "/v1" prefix; id (cap bytes) receives the
 * {id} of /v1/models/{id} and /v1/responses/{id}. */
Route http_route(const char *path, char *id, size_t cap);
/* Whether the route takes POST (else GET / HEAD). */
bool http_wants_post(Route r);
/* Percent-decoding in place, except %00: a NUL would cut the path short ("/health%00" would read as
 * "/health"), so it stays the text "%00". Returns the new length. */
size_t http_unescape(char *s);
/* Whether origin is allowed by the configured origins ("*" or a comma-separated list; NULL: none). */
bool http_origin_allowed(const char *configured, const char *origin);
/* Whether an Authorization header value ("Bearer KEY", case-insensitive scheme, blanks around) carries key
 * (compared in constant time). */
bool http_bearer_matches(const char *header, const char *key, size_t key_len);
/* The same against a comma-separated list of keys (blanks around each ignored): every key is compared, so
 * the time taken does not tell which one matched. */
bool http_bearer_matches_any(const char *header, const char *keys);

#endif
