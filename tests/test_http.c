/* test_http.c — see test_http.h. */
#include "test_http.h"

#include "test.h"

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

int http_connect_from(int port, const char *from) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (from) {
        struct sockaddr_in b = {.sin_family = AF_INET};
        inet_pton(AF_INET, from, &b.sin_addr);
        if (bind(fd, (struct sockaddr *)&b, sizeof b) != 0) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    struct timeval tv = {60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

int http_connect(int port) { return http_connect_from(port, NULL); }

void http_send_request(int fd, const char *method, const char *path, const char *extra_headers, const char *body) {
    char head[4096];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.0\r\nHost: localhost\r\n%s", method, path,
                     extra_headers ? extra_headers : "");
    if (body) n += snprintf(head + n, sizeof head - (size_t)n, "Content-Length: %zu\r\n", strlen(body));
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    if (write(fd, head, (size_t)n) != n) return;
    if (body && write(fd, body, strlen(body)) < 0) return;
}

HttpResp http_read_response(int fd) {
    HttpResp r = {0};
    size_t cap = 1 << 16, n = 0;
    char *all = malloc(cap + 1);
    ssize_t k;
    while (all && (k = read(fd, all + n, cap - n)) > 0) {
        n += (size_t)k;
        if (n == cap) {
            char *p = realloc(all, 2 * cap + 1);
            if (!p) break;
            all = p;
            cap *= 2;
        }
    }
    if (!all || !n) {
        free(all);
        return r;
    }
    all[n] = 0;
    char *sep = strstr(all, "\r\n\r\n");
    if (sscanf(all, "HTTP/1.%*d %d", &r.status) != 1 || !sep) {
        r.status = 0;
        free(all);
        return r;
    }
    *sep = 0;
    r.head = strdup(all);
    r.body_len = n - (size_t)(sep + 4 - all);
    r.body = malloc(r.body_len + 1);
    if (r.body) {
        memcpy(r.body, sep + 4, r.body_len);
        r.body[r.body_len] = 0;
    }
    free(all);
    return r;
}

HttpResp http(int port, const char *method, const char *path, const char *extra_headers, const char *body) {
    HttpResp r = {0};
    int fd = http_connect(port);
    if (fd < 0) return r;
    http_send_request(fd, method, path, extra_headers, body);
    r = http_read_response(fd);
    close(fd);
    return r;
}

HttpResp http_raw(int port, const char *bytes, size_t n) {
    HttpResp r = {0};
    int fd = http_connect(port);
    if (fd < 0) return r;
    if (write(fd, bytes, n) == (ssize_t)n) r = http_read_response(fd);
    close(fd);
    return r;
}

void http_free(HttpResp *r) {
    free(r->head);
    free(r->body);
    r->head = r->body = NULL;
}

bool is_error_object(const char *body) {
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    const cJSON *e = cJSON_GetObjectItem(j, "error");
    bool ok = cJSON_IsString(cJSON_GetObjectItem(e, "message")) && cJSON_IsString(cJSON_GetObjectItem(e, "type"));
    cJSON_Delete(j);
    return ok;
}

void test_server_config(ServerConfig *c) {
    server_config_init(c);
    c->model_path = test_data("models/m1-qwen3next-legacy-f32.gguf");
    c->port = 0;
    c->parallel = 2;
    c->ctx_size = 1024;
    c->threads = 1;
    c->chat_template_file = test_data("chat/Qwen3.5-4B.jinja");
}

Server *test_server_start(const ServerConfig *c) {
    Err err = {{0}};
    Server *s = server_start(c, &err);
    CHECK_MSG(s, "the server did not start: %s", err.msg);
    return s;
}

int test_greedy_logprob(const float *logits, int V, double *lp) {
    int best = 0;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++)
        if (logits[v] > mx) mx = logits[v], best = v;
    for (int v = 0; v < V; v++) sum += exp((double)logits[v] - mx);
    *lp = -log(sum);
    return best;
}

ApiDefaults test_api_defaults(void) {
    ApiDefaults d;
    memset(&d, 0, sizeof d);
    dl_sampling_params_init(&d.sampling);
    d.n_vocab = 1003;
    d.chat_max_tokens = -1;
    d.completion_max_tokens = 16;
    return d;
}
