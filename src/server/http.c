/* http.c — libmicrohttpd glue: routes, request framing, authentication, CORS, body limits, the read
 * deadline, error responses. The handlers live in http_generate.c (generation) and endpoints.c.
 *
 * MHD runs one thread per connection, so a handler may block (a non-streaming generation waits in the
 * access handler, a streaming one in the content-reader callback).
 *
 * Routes (the same paths with a /v1 prefix are accepted):
 *   GET  /health                    no authentication
 *   GET  /v1/models, /v1/models/{id}, /props, /slots, /metrics (with --metrics), /v1/responses/{id}
 *   POST /v1/chat/completions, /v1/completions, /v1/responses, /tokenize, /detokenize, /apply-template
 *   GET  /, /web/NAME               the chat page (web.c; no authentication; --no-webui: 404)
 * Paths match exactly (no trailing slash, no %00: a NUL in a path is kept as the text "%00"). Anything
 * else is 404, a wrong method 405 (with Allow). With an API key every route but /health needs
 * "Authorization: Bearer KEY" (401 otherwise, checked before routing); CORS preflights need none.
 *
 * Framing (RFC 9112): a request with both Content-Length and Transfer-Encoding, with two Content-Length
 * headers, or with a transfer coding other than chunked is refused and the connection closed — a proxy
 * in front might frame it differently (request smuggling). A body over --max-body is read and dropped to
 * its end (bounded by the read deadline and by min(1 GiB, 128 x --max-body)) so that the client, still
 * sending, receives the 413 instead of a reset. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netdb.h>
#include <unistd.h>

#include "server/anthropic.h"
#include "server/http_internal.h"
#include "server/json_io.h"
#include "server/web.h"

typedef struct ConnCtx {
    Route route;
    char id[256]; /* R_MODEL_ONE, R_RESPONSE_ONE */
    SBuf body;
    bool too_large;
    unsigned long long dropped; /* bytes read and dropped after too_large */
    bool refused;               /* perr is the answer, sent once the body has been read (and dropped) */
    bool deferred;              /* no body: begin() runs at the next call */
    bool waiting;               /* begin() did not answer: the body comes next */
    ApiError perr;
} ConnCtx;

/* ------------------------------------------------------------------------------------------ responses */

enum MHD_Result http_queue(Server *s, struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (http_origin_allowed(s->cfg.cors_origin, origin)) {
        bool any = !strcmp(s->cfg.cors_origin, "*");
        MHD_add_response_header(r, "Access-Control-Allow-Origin", any ? "*" : origin);
        if (!any) MHD_add_response_header(r, "Vary", "Origin");
    }
    if (status >= 500) atomic_fetch_add(&s->counters.status_5xx, 1);
    else if (status >= 400) atomic_fetch_add(&s->counters.status_4xx, 1);
    return MHD_queue_response(c, status, r);
}

static enum MHD_Result send_buffer(Server *s, struct MHD_Connection *c, unsigned status, const char *type, char *buf,
                                   size_t len, const char *const *headers /* name, value, ..., NULL */) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(buf);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    for (int i = 0; headers && headers[i]; i += 2) MHD_add_response_header(r, headers[i], headers[i + 1]);
    enum MHD_Result rc = http_queue(s, c, status, r);
    MHD_destroy_response(r);
    return rc;
}

enum MHD_Result http_send_json(Server *s, struct MHD_Connection *c, unsigned status, char *json, const char *hdr_name,
                               const char *hdr_value) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        if (!(json = strdup(oom))) return MHD_NO;
        status = 500;
        hdr_name = NULL;
    }
    const char *h[] = {hdr_name, hdr_value, NULL};
    return send_buffer(s, c, status, "application/json", json, strlen(json), hdr_name ? h : NULL);
}

enum MHD_Result http_send_text(Server *s, struct MHD_Connection *c, unsigned status, const char *type, const char *text,
                               size_t len) {
    char *copy = malloc(len + 1);
    if (!copy) return MHD_NO;
    memcpy(copy, text, len);
    copy[len] = 0;
    return send_buffer(s, c, status, type, copy, len, NULL);
}

/* close: the connection ends after this answer (its framing cannot be trusted, or its body was not read). */
static enum MHD_Result send_error(Server *s, struct MHD_Connection *c, const ApiError *e, const char *method,
                                  const char *url, bool close) {
    srv_log(e->status >= 500 ? LOG_WARN : LOG_INFO, "%s %s -> %d: %s", method, url, e->status, e->message);
    const char *h[6] = {NULL};
    int n = 0;
    if (e->status == 503) h[n++] = "Retry-After", h[n++] = "1";
    else if (e->status == 401) h[n++] = "WWW-Authenticate", h[n++] = "Bearer";
    else if (e->status == 405) h[n++] = "Allow", h[n++] = e->param[0] ? e->param : "GET";
    if (close) h[n++] = "Connection", h[n++] = "close";
    ApiError copy = *e;
    if (e->status == 405) copy.param[0] = 0; /* the param field carried the Allow value */
    char *json = http_route(url, NULL, 0) == R_MESSAGES ? anthropic_error_json(&copy) : api_error_json(&copy);
    if (!json) return http_send_json(s, c, 500, NULL, NULL, NULL);
    return send_buffer(s, c, (unsigned)e->status, "application/json", json, strlen(json), h);
}

enum MHD_Result http_send_error(Server *s, struct MHD_Connection *c, const ApiError *e, const char *method,
                                const char *url) {
    return send_error(s, c, e, method, url, false);
}

/* ------------------------------------------------------------------------------------------ routing */

static bool authorized(Server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    if (http_bearer_matches_any(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), s->api_key)) return true;
    /* Anthropic's clients send the key as x-api-key (as llama-server accepts it) */
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    char bearer[1100];
    return x && strlen(x) < 1024 && snprintf(bearer, sizeof bearer, "Bearer %s", x) > 0 &&
           http_bearer_matches_any(bearer, s->api_key);
}

/* MHD's unescaper (see http_unescape). */
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls, (void)c;
    return http_unescape(s);
}

typedef struct HeaderScan {
    int n_cl, n_te, n_auth, n_host;
    const char *bad; /* why a header is refused (NULL: none) */
    char name[64];   /* the header it is about */
} HeaderScan;

/* RFC 9110 §5.6.2: a field name is a token. */
static bool is_token(const char *s, size_t n) {
    if (!n) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch <= 32 || ch >= 127 || strchr("\"(),/:;<=>?@[\\]{}", ch)) return false;
    }
    return true;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
                                   const char *value, size_t value_size) {
    (void)kind;
    HeaderScan *h = cls;
    if (!key || h->bad) return MHD_YES;
    if (!h->bad && !is_token(key, key_size))
        h->bad = "a header name must be a token: no whitespace before the colon (RFC 9112 5.1)";
    else if (value && strlen(value) != value_size) h->bad = "a header value may not hold a NUL byte";
    if (h->bad) {
        snprintf(h->name, sizeof h->name, "%.*s", (int)(key_size < 60 ? key_size : 60), key);
        return MHD_YES;
    }
    if (!strcasecmp(key, "Content-Length")) {
        h->n_cl++;
        bool digits = value && *value;
        for (const char *p = value; p && *p; p++) digits &= *p >= '0' && *p <= '9';
        if (!digits) h->bad = "Content-Length must be a decimal number";
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        h->n_te++;
    } else if (!strcasecmp(key, "Authorization")) {
        h->n_auth++;
    } else if (!strcasecmp(key, "Host")) {
        h->n_host++;
    }
    if (h->bad) snprintf(h->name, sizeof h->name, "%s", key);
    return MHD_YES;
}

/* Requests whose framing or headers are ambiguous (RFC 9112 §3.2, §5.1, §6.1, §6.3): refused, the connection
 * closed — a proxy in front might read them differently (request smuggling). */
static bool bad_framing(struct MHD_Connection *c, ApiError *e) {
    HeaderScan h;
    memset(&h, 0, sizeof h);
    MHD_get_connection_values_n(c, MHD_HEADER_KIND, scan_header, &h);
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    if (h.bad)
        return api_error(e, 400, "invalid_request_error", NULL, "bad_header", "bad header '%s': %s", h.name, h.bad),
               true;
    const char *dup = h.n_auth > 1 ? "Authorization" : h.n_te > 1 ? "Transfer-Encoding" : h.n_host > 1 ? "Host" : NULL;
    if (dup)
        return api_error(e, 400, "invalid_request_error", NULL, "bad_header", "a request may have one %s header only",
                         dup),
               true;
    if (te && h.n_cl)
        return api_error(e, 400, "invalid_request_error", NULL, "bad_framing",
                         "a request may not have both Content-Length and Transfer-Encoding (RFC 9112)"),
               true;
    if (h.n_cl > 1)
        return api_error(e, 400, "invalid_request_error", NULL, "bad_framing",
                         "a request may have one Content-Length header only"),
               true;
    if (te && strcasecmp(te, "chunked") != 0)
        return api_error(e, 501, "invalid_request_error", NULL, "bad_framing",
                         "Transfer-Encoding '%.60s' is not supported (only chunked)", te),
               true;
    return false;
}

static enum MHD_Result preflight(Server *s, struct MHD_Connection *c) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    const char *want = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", want ? want : "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result rc = http_queue(s, c, 204, r);
    MHD_destroy_response(r);
    return rc;
}

static GuardedConn *guarded(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void request_read(Server *s, struct MHD_Connection *c) {
    if (s->guard) guard_request_read(s->guard, guarded(c));
}

/* How much of a body that will not be used is read and dropped before answering: a refused request (no
 * key, unknown route) gets no more than --max-body of reading, an oversized one min(1 GiB, 128 x). */
static unsigned long long drop_limit(const Server *s, const ConnCtx *cc) {
    if (cc->refused) return s->cfg.max_body_bytes;
    unsigned long long by_body = 128ull * s->cfg.max_body_bytes;
    return by_body < (1ull << 30) ? by_body : 1ull << 30;
}

static enum MHD_Result too_large(Server *s, struct MHD_Connection *c, const char *method, const char *url, bool close) {
    ApiError e;
    api_error(&e, 413, "invalid_request_error", NULL, "request_too_large",
              "the request body exceeds the limit of %zu bytes", s->cfg.max_body_bytes);
    return send_error(s, c, &e, method, url, close);
}

/* The request's headers are in (and, for a request without a body, the request is complete): answers, or
 * returns MHD_YES with cc->waiting set to read the body first. */
static enum MHD_Result begin(Server *s, struct MHD_Connection *c, ConnCtx *cc, const char *url, const char *method) {
    ApiError e;
    int web_rc;
    if (!s->cfg.no_webui && web_serve(c, url, method, &web_rc)) return request_read(s, c), (enum MHD_Result)web_rc;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!strcmp(method, "OPTIONS") && cc->route != R_NONE && http_origin_allowed(s->cfg.cors_origin, origin) &&
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return request_read(s, c), preflight(s, c);
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    bool want_post = http_wants_post(cc->route);
    if (cc->route != R_HEALTH && !authorized(s, c))
        api_error(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                  "missing or invalid API key: send 'Authorization: Bearer KEY'");
    else if (cc->route == R_NONE)
        api_error(&e, 404, "invalid_request_error", NULL, "not_found", "unknown endpoint: %s %.300s", method, url);
    else if (want_post ? !post : !get)
        api_error(&e, 405, "invalid_request_error", want_post ? "POST" : "GET, HEAD", "method_not_allowed",
                  "method %s is not allowed on %s (use %s)", method, url, want_post ? "POST" : "GET");
    else
        e.status = 0;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
    unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
    if (e.status) {
        /* a request with a body is answered once its body is read: answering first would close the connection
         * on unread data, and the client could see a reset instead of the error */
        if (get || (!te && !declared)) return request_read(s, c), send_error(s, c, &e, method, url, false);
        cc->refused = true;
        if (declared > drop_limit(s, cc)) return request_read(s, c), send_error(s, c, &e, method, url, true);
        cc->perr = e;
        cc->too_large = true; /* the body is dropped */
        cc->waiting = true;
        return MHD_YES;
    }
    if (!want_post) {
        request_read(s, c);
        return http_get(s, c, cc->route, cc->id, method, url);
    }
    if (declared > s->cfg.max_body_bytes) {
        /* A client that waits for "100 Continue" has sent nothing yet: answer now. Otherwise read and drop the
         * body, so the client still sending sees the 413 rather than a reset (up to a bound). */
        const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Expect");
        if ((expect && !strcasecmp(expect, "100-continue")) || declared > drop_limit(s, cc))
            return request_read(s, c), too_large(s, c, method, url, true);
        cc->too_large = true;
    }
    cc->waiting = true;
    return MHD_YES;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *upload_data, size_t *upload_data_size,
                                      void **con_cls) {
    (void)version;
    Server *s = cls;
    ConnCtx *cc = *con_cls;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *con_cls = cc;
        if (s->guard) guard_headers_read(s->guard, guarded(c));
        cc->route = http_route(url, cc->id, sizeof cc->id);
        atomic_fetch_add(&s->counters.requests[cc->route], 1);
        ApiError e;
        if (bad_framing(c, &e)) return request_read(s, c), send_error(s, c, &e, method, url, true);
        /* A request without a body is answered at the next call, when libmicrohttpd has it complete: a
         * response queued now counts as "early" and closes the connection (no keep-alive, and a pipelined
         * request after it would be lost). */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (!MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding") && (!cl || !strtoull(cl, NULL, 10))) {
            cc->deferred = true;
            return MHD_YES;
        }
        return begin(s, c, cc, url, method);
    }
    if (cc->deferred) {
        cc->deferred = false;
        enum MHD_Result rc = begin(s, c, cc, url, method);
        if (!cc->waiting) return rc;
    }
    if (*upload_data_size) {
        if (!cc->too_large) {
            if (cc->body.n + *upload_data_size > s->cfg.max_body_bytes) {
                cc->too_large = true;
                sbuf_free(&cc->body);
            } else {
                sbuf_put(&cc->body, upload_data, *upload_data_size);
            }
        }
        if (cc->too_large) {
            cc->dropped += *upload_data_size;
            if (cc->dropped > drop_limit(s, cc)) { /* a chunked upload beyond any reason */
                *upload_data_size = 0;
                request_read(s, c);
                return cc->refused ? send_error(s, c, &cc->perr, method, url, true) : too_large(s, c, method, url, true);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    request_read(s, c);
    if (cc->refused) return send_error(s, c, &cc->perr, method, url, false);
    if (cc->too_large) return too_large(s, c, method, url, false);
    if (cc->body.oom) {
        ApiError e;
        api_error(&e, 500, "server_error", NULL, NULL, "out of memory");
        return http_send_error(s, c, &e, method, url);
    }
    const char *body = cc->body.p ? cc->body.p : "";
    if (cc->route == R_CHAT || cc->route == R_COMPLETIONS || cc->route == R_RESPONSES || cc->route == R_LLAMA_COMPLETION ||
        cc->route == R_MESSAGES)
        return http_generate(s, c, cc->route, body, cc->body.n, method, url);
    if (cc->route == R_SLOT_ACTION) {
        ApiError e;
        char *json = NULL;
        const char *action = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "action");
        if (slot_action(s, cc->id, action, body, cc->body.n, &json, &e)) return http_send_error(s, c, &e, method, url);
        return http_send_json(s, c, 200, json, NULL, NULL);
    }
    return http_utility(s, c, cc->route, body, cc->body.n, method, url);
}

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    Server *s = cls;
    if (s->guard) guard_next(s->guard, guarded(c)); /* the next request on this connection has its own deadline */
    ConnCtx *cc = *con_cls;
    if (!cc) return;
    sbuf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

static void notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe) {
    Server *s = cls;
    if (!s->guard) return;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        guard_close(s->guard, *socket_context);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ad = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char peer[64] = "?";
    if (ad && ad->client_addr) {
        const struct sockaddr *sa = ad->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, peer, sizeof peer);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, peer, sizeof peer);
    }
    *socket_context = fd ? guard_open(s->guard, fd->connect_fd, peer) : NULL;
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    srv_log(LOG_DEBUG, "http: %s", msg);
}

/* ------------------------------------------------------------------------------------------ start/stop */

int http_bind(Server *s, Err *err) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int gai = getaddrinfo(s->cfg.host, NULL, &hints, &ai);
    if (gai != 0 || !ai) return err_set(err, "cannot resolve the host '%s': %s", s->cfg.host, gai_strerror(gai));
    /* a name such as "localhost" may resolve to both families: prefer IPv4, where clients usually go */
    const struct addrinfo *pick = ai;
    for (const struct addrinfo *a = ai; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    memcpy(&addr, pick->ai_addr, pick->ai_addrlen);
    const socklen_t len = pick->ai_addrlen;
    const int family = pick->ai_family;
    freeaddrinfo(ai);
    if (family == AF_INET6) ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)s->cfg.port);
    else ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)s->cfg.port);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) return err_set(err, "cannot open a socket: %s", strerror(errno));
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&addr, len) != 0 || listen(fd, 128) != 0) {
        const int e = errno;
        close(fd);
        return err_set(err, "cannot listen on %s:%d: %s%s", s->cfg.host, s->cfg.port, strerror(e),
                       e == EADDRINUSE ? " (another server runs there: pick another --port, or 0 for any free one)"
                       : e == EACCES   ? " (ports below 1024 need privileges: pick another --port)"
                                       : "");
    }
    s->listen_fd = fd;
    return 0;
}

int http_start(Server *s, Err *err) {
    if (s->listen_fd < 0 && http_bind(s, err)) return -1;
    struct sockaddr_storage addr;
    socklen_t alen = sizeof addr;
    const bool v6 = getsockname(s->listen_fd, (struct sockaddr *)&addr, &alen) == 0 && addr.ss_family == AF_INET6;
    if (!(s->guard = guard_new(s->cfg.read_timeout_s, s->cfg.header_timeout_s, s->cfg.max_connections, err)))
        return -1;
    /* libmicrohttpd refuses connections beyond its own limit before we see them: it is set above the cap, and
     * the guard closes the oldest connection still waiting for headers when one opens beyond the cap */
    unsigned mhd_limit = (unsigned)s->cfg.max_connections + 8 + (unsigned)s->cfg.max_connections / 4;
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    unsigned per_ip = s->cfg.max_connections_per_ip > 0 ? (unsigned)s->cfg.max_connections_per_ip : 0;
    /* TLS (--ssl-key-file, --ssl-cert-file): libmicrohttpd's GnuTLS support, the PEM files read into memory */
    struct MHD_OptionItem tls[3] = {{MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}, {MHD_OPTION_END, 0, NULL}};
    char *key_pem = NULL, *cert_pem = NULL;
    if (s->cfg.ssl_key_file || s->cfg.ssl_cert_file) {
        int rc = 0;
        if (!s->cfg.ssl_key_file || !s->cfg.ssl_cert_file)
            rc = err_set(err, "TLS needs both --ssl-key-file and --ssl-cert-file");
        else if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
            rc = err_set(err, "TLS is not available: this libmicrohttpd was built without GnuTLS");
        else if (!(key_pem = server_read_file(s->cfg.ssl_key_file, err)) ||
                 !(cert_pem = server_read_file(s->cfg.ssl_cert_file, err)))
            rc = -1;
        if (rc) {
            free(key_pem);
            guard_free(s->guard);
            s->guard = NULL;
            return -1;
        }
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, key_pem};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, cert_pem};
    }
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, access_handler, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
        MHD_OPTION_CONNECTION_LIMIT, mhd_limit, MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_s, MHD_OPTION_NOTIFY_COMPLETED, request_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, s, MHD_OPTION_UNESCAPE_CALLBACK, unescape, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
    /* libmicrohttpd parses the PEM text at start and keeps its own credentials */
    free(key_pem);
    free(cert_pem);
    if (!s->daemon) {
        guard_free(s->guard);
        s->guard = NULL;
        if (flags & MHD_USE_TLS)
            return err_set(err, "cannot start TLS on %s:%d: the address is in use, or the key or certificate is not "
                                "valid PEM (--ssl-key-file %s, --ssl-cert-file %s)",
                           s->cfg.host, s->cfg.port, s->cfg.ssl_key_file, s->cfg.ssl_cert_file);
        return err_set(err, "cannot serve on %s:%d (libmicrohttpd refused the socket; see the log above)", s->cfg.host,
                       s->cfg.port);
    }
    s->listen_fd = -1; /* the daemon's now: MHD_stop_daemon closes it */
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void http_stop(Server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    guard_free(s->guard);
    s->guard = NULL;
}
