/* test_http.h — what the server tests share: a tiny HTTP/1.0 client on raw sockets, so a test can send
 * exactly the bytes it wants (dribbled headers, conflicting framing, chunked bodies) and see the status,
 * headers and body that come back; and the in-process server they start. */
#ifndef DL_TESTS_TEST_HTTP_H
#define DL_TESTS_TEST_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "server/openai.h"
#include "server/server.h"

/* The tests' server: m1, any free port, 2 slots of 1024 tokens, one thread (m1 is tiny: the pool's hand-offs
 * would dominate), the Qwen3.5 template. */
void test_server_config(ServerConfig *c);
/* Starts it; NULL (and a failed check with the reason) when it cannot. */
Server *test_server_start(const ServerConfig *c);
/* Defaults for api_parse as a server on m1 has them. */
ApiDefaults test_api_defaults(void);
/* The greedy token of a logits row of V and, in *lp, its log-probability (log-softmax in double): what a
 * server's logprobs report for that token, as the tests recompute it from an engine's logits. */
int test_greedy_logprob(const float *logits, int V, double *lp);

typedef struct HttpResp {
    int status; /* 0: no response (connection closed or reset first) */
    char *head, *body;
    size_t body_len;
} HttpResp;

/* A connected socket to 127.0.0.1:port, from the local address `from` (NULL: any), or -1. */
int http_connect_from(int port, const char *from);
int http_connect(int port);
/* Writes a request with a Content-Length for body (NULL: none). */
void http_send_request(int fd, const char *method, const char *path, const char *extra_headers, const char *body);
/* Reads until the peer closes; parses status, head and body. */
HttpResp http_read_response(int fd);
/* One request on a new connection. */
HttpResp http(int port, const char *method, const char *path, const char *extra_headers, const char *body);
/* Sends raw bytes on a new connection and reads the answer. */
HttpResp http_raw(int port, const char *bytes, size_t n);
void http_free(HttpResp *r);
/* Whether body is an OpenAI error object {"error": {"message", "type", ...}}. */
bool is_error_object(const char *body);

#endif
