/* http_internal.h — what the HTTP files share: routes, sending JSON and errors (with CORS headers), and the
 * handlers of http_generate.c (generation) and endpoints.c (everything else). Internal to src/server/. */
#ifndef DL_SERVER_HTTP_INTERNAL_H
#define DL_SERVER_HTTP_INTERNAL_H

#include <microhttpd.h>

#include "server/http_parse.h"
#include "server/server_internal.h"



/* Queues a response with the CORS headers the request's Origin earns (every response goes through here). */
enum MHD_Result http_queue(Server *s, struct MHD_Connection *c, unsigned status, struct MHD_Response *r);
/* A JSON body (json is freed; NULL: a 500 "out of memory"); hdr_name/value: one extra header or NULL. */
enum MHD_Result http_send_json(Server *s, struct MHD_Connection *c, unsigned status, char *json, const char *hdr_name,
                               const char *hdr_value);
/* An OpenAI error object, logged (client text escaped by the log). */
enum MHD_Result http_send_error(Server *s, struct MHD_Connection *c, const ApiError *e, const char *method,
                                const char *url);
/* Text with a content type (text is copied). */
enum MHD_Result http_send_text(Server *s, struct MHD_Connection *c, unsigned status, const char *type, const char *text,
                               size_t len);

/* http_generate.c: /v1/chat/completions, /v1/completions, /v1/responses (body read completely). */
enum MHD_Result http_generate(Server *s, struct MHD_Connection *c, Route route, const char *body, size_t len,
                              const char *method, const char *url);

/* endpoints.c: the GET routes (id: the path's last part for R_MODEL_ONE / R_RESPONSE_ONE) and the POST
 * utility routes /tokenize, /detokenize, /apply-template. */
enum MHD_Result http_get(Server *s, struct MHD_Connection *c, Route route, const char *id, const char *method,
                         const char *url);
enum MHD_Result http_utility(Server *s, struct MHD_Connection *c, Route route, const char *body, size_t len,
                             const char *method, const char *url);

#endif
