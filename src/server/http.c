/* http.c — libmicrohttpd glue: routes, authentication, body limits, error responses, and the hand-over
 * of generation requests to the scheduler (SSE streaming or one JSON body).
 *
 * MHD runs one thread per connection, so a handler may block: a non-streaming request waits for its job
 * in the access handler, a streaming one in the content-reader callback. While waiting, the socket is
 * polled every 50 ms: a client that has gone away cancels its job at once (the scheduler frees the slot
 * at its next iteration) instead of when the next write fails.
 *
 * Routes (also without the /v1 prefix):
 *   GET  /health                no authentication; 200 {"status": "ok", slots, queue, cache}
 *   GET  /v1/models, /v1/models/{id}
 *   POST /v1/chat/completions, /v1/completions
 *   GET  /, /web/NAME           the chat page (web.c; no authentication; --no-webui: 404)
 * Anything else is 404, a wrong method 405 (with Allow). With an API key every route but /health needs
 * "Authorization: Bearer KEY" (401 otherwise, checked before routing). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "server/respond.h"
#include "server/server_internal.h"
#include "server/web.h"

typedef enum Route { R_NONE, R_HEALTH, R_MODELS, R_MODEL_ONE, R_CHAT, R_COMPLETIONS } Route;

typedef struct ConnCtx {
    Route route;
    char model_id[256]; /* R_MODEL_ONE */
    SBuf body;
    bool too_large;
    unsigned long long dropped; /* bytes read and dropped after too_large */
} ConnCtx;

typedef struct Stream {
    Server *s;
    Job *job;
    Responder resp;
    SBuf out;
    size_t out_pos;
    bool ended;
    int fd;
    double last_send, last_poll;
    const char *kind;
} Stream;

static atomic_ullong job_counter;

/* ------------------------------------------------------------------------------------------ responses */

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, char *json /* freed */,
                                 const char *hdr_name, const char *hdr_value) {
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        json = strdup(oom);
        status = 500;
        if (!json) return MHD_NO;
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), json, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(json);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (hdr_name) MHD_add_response_header(r, hdr_name, hdr_value);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const ApiError *e, const char *method, const char *url) {
    srv_log(e->status >= 500 ? LOG_WARN : LOG_INFO, "%s %s -> %d: %s", method, url, e->status, e->message);
    const char *hn = NULL, *hv = NULL;
    if (e->status == 503) hn = "Retry-After", hv = "1";
    else if (e->status == 401) hn = "WWW-Authenticate", hv = "Bearer";
    else if (e->status == 405) hn = "Allow", hv = e->param[0] ? e->param : "GET";
    ApiError copy = *e;
    if (e->status == 405) copy.param[0] = 0; /* the param field carried the Allow value */
    return send_json(c, (unsigned)e->status, api_error_json(&copy), hn, hv);
}

static char *health_json(Server *s) {
    SchedStats st;
    sched_stats(s->sched, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON *sl = cJSON_AddObjectToObject(o, "slots");
    cJSON_AddNumberToObject(sl, "total", st.n_slots);
    cJSON_AddNumberToObject(sl, "busy", st.busy);
    cJSON_AddNumberToObject(sl, "idle", st.n_slots - st.busy);
    cJSON *q = cJSON_AddObjectToObject(o, "queue");
    cJSON_AddNumberToObject(q, "waiting", st.queued);
    cJSON_AddNumberToObject(q, "max", st.queue_max);
    cJSON *t = cJSON_AddObjectToObject(o, "totals");
    cJSON_AddNumberToObject(t, "requests", (double)st.jobs_done);
    cJSON_AddNumberToObject(t, "prompt_tokens", (double)st.tokens_prompt);
    cJSON_AddNumberToObject(t, "cached_tokens", (double)st.tokens_cached);
    cJSON_AddNumberToObject(t, "generated_tokens", (double)st.tokens_generated);
    if (s->cache) {
        PcacheStats ps;
        pcache_stats(s->cache, &ps);
        cJSON *c = cJSON_AddObjectToObject(o, "prefix_cache");
        cJSON_AddNumberToObject(c, "ram_entries", (double)ps.ram_entries);
        cJSON_AddNumberToObject(c, "ram_bytes", (double)ps.ram_bytes);
        cJSON_AddNumberToObject(c, "disk_entries", (double)ps.disk_entries);
        cJSON_AddNumberToObject(c, "disk_bytes", (double)ps.disk_bytes);
        cJSON_AddNumberToObject(c, "hits_ram", (double)ps.hits_ram);
        cJSON_AddNumberToObject(c, "hits_disk", (double)ps.hits_disk);
        cJSON_AddNumberToObject(c, "misses", (double)ps.misses);
        cJSON_AddNumberToObject(c, "stores", (double)ps.stores);
        cJSON_AddNumberToObject(c, "evictions", (double)ps.evictions);
        cJSON_AddNumberToObject(c, "ignored_files", (double)ps.ignored_files);
    }
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}

static cJSON *model_object(Server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)(long)s->started);
    cJSON_AddStringToObject(m, "owned_by", "deltallm");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", s->info->arch);
    cJSON_AddNumberToObject(meta, "n_ctx", s->info->n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx_train", s->info->n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_vocab", s->info->n_vocab);
    cJSON_AddNumberToObject(meta, "slots", s->cfg.parallel);
    if (s->have_template) cJSON_AddStringToObject(meta, "chat_format", chat_format_name(s->tmpl.format));
    return m;
}

static char *models_json(Server *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(s));
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return json;
}

/* ------------------------------------------------------------------------------------------ helpers */

/* Whether the peer has closed its side (or the socket failed). */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
        char ch;
        ssize_t r = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0) return true;
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
    }
    return false;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Takes the job's new text and state. Waits up to wait_ms when there is nothing new (a non-streamed
 * job only signals when it is done: its consumer does not wake up for every token). */
static bool take_output(Job *j, SBuf *text, JobResult *res, int wait_ms) {
    pthread_mutex_lock(&j->mu);
    if ((!j->notify_text || !j->text.n) && !j->done && wait_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)wait_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    if (j->text.n) {
        sbuf_put(text, j->text.p, j->text.n);
        j->text.n = 0;
    }
    bool done = j->done;
    if (done) {
        res->finish = j->finish;
        res->n_prompt = (int)j->n_prompt;
        res->n_cached = j->n_cached;
        res->n_gen = j->n_gen;
        res->queue_ms = (j->t_admit - j->t_submit) * 1000.0;
        double tp = j->t_prompt_done > 0 ? j->t_prompt_done : j->t_end;
        res->prompt_ms = j->t_admit > 0 ? (tp - j->t_admit) * 1000.0 : 0;
        res->gen_ms = j->t_prompt_done > 0 ? (j->t_end - j->t_prompt_done) * 1000.0 : 0;
    }
    pthread_mutex_unlock(&j->mu);
    return done;
}

static void log_job(const Job *j, const char *kind, const JobResult *res) {
    static const char *const names[] = {"none", "stop", "length", "cancelled", "error"};
    double ttft = j->t_first > 0 ? (j->t_first - j->t_submit) * 1000.0 : -1;
    srv_log(LOG_INFO, "job %llu %s: prompt %d (cached %d), generated %d, finish %s, queue %.0f ms, ttft %.0f ms, "
                      "total %.0f ms",
            (unsigned long long)j->id, kind, res->n_prompt, res->n_cached, res->n_gen, names[res->finish],
            res->queue_ms, ttft, (j->t_end - j->t_submit) * 1000.0);
}

/* ------------------------------------------------------------------------------------------ streaming */

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    Stream *st = cls;
    for (;;) {
        if (st->out_pos < st->out.n) {
            size_t n = st->out.n - st->out_pos < max ? st->out.n - st->out_pos : max;
            memcpy(buf, st->out.p + st->out_pos, n);
            st->out_pos += n;
            st->last_send = now_s();
            return (ssize_t)n;
        }
        st->out.n = st->out_pos = 0;
        if (st->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        SBuf text = {0};
        JobResult res = {0};
        bool done = take_output(st->job, &text, &res, 50);
        Err err = {{0}};
        int rc = resp_stream_text(&st->resp, text.p, text.n, &st->out, &err);
        sbuf_free(&text);
        if (rc == 0 && done) {
            st->ended = true;
            if (res.finish == FINISH_CANCELLED) return MHD_CONTENT_READER_END_WITH_ERROR;
            if (res.finish == FINISH_ERROR) resp_stream_error(&st->resp, st->job->error, &st->out);
            else rc = resp_stream_end(&st->resp, &res, &st->out, &err);
            log_job(st->job, st->kind, &res);
        }
        if (rc) {
            srv_log(LOG_ERROR, "job %llu: %s", (unsigned long long)st->job->id, err.msg);
            sched_cancel(st->s->sched, st->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        double now = now_s();
        if (st->out.n == 0 && now - st->last_poll >= 0.05) {
            st->last_poll = now;
            if (client_gone(st->fd)) {
                srv_log(LOG_INFO, "job %llu: client disconnected, cancelling", (unsigned long long)st->job->id);
                sched_cancel(st->s->sched, st->job);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            if (now - st->last_send > 15) sbuf_puts(&st->out, ": keep-alive\n\n");
        }
    }
}

static void sse_free(void *cls) {
    Stream *st = cls;
    pthread_mutex_lock(&st->job->mu);
    bool done = st->job->done;
    pthread_mutex_unlock(&st->job->mu);
    if (!done) {
        srv_log(LOG_INFO, "job %llu: stream closed early, cancelling", (unsigned long long)st->job->id);
        sched_cancel(st->s->sched, st->job);
    }
    job_unref(st->job);
    resp_free(&st->resp);
    sbuf_free(&st->out);
    free(st);
}

/* ------------------------------------------------------------------------------------------ generation */

static enum MHD_Result handle_generation(Server *s, struct MHD_Connection *c, ConnCtx *cc, const char *method,
                                         const char *url) {
    ApiRequest req;
    ApiError e;
    bool chat = cc->route == R_CHAT;
    if (api_parse(chat, cc->body.p ? cc->body.p : "", cc->body.n, &s->defaults, &req, &e))
        return send_error(c, &e, method, url);
    Job *job = NULL;
    bool sir = false;
    if (prepare_job(s, &req, &job, &sir, &e)) {
        api_request_free(&req);
        return send_error(c, &e, method, url);
    }
    job->id = atomic_fetch_add(&job_counter, 1) + 1;
    job->notify_text = req.stream;
    Responder resp;
    Err err = {{0}};
    if (resp_init(&resp, &req, s->tmpl.format, sir, s->model_id, &err)) {
        job_unref(job);
        api_request_free(&req);
        api_error(&e, 500, "server_error", NULL, NULL, "%s", err.msg);
        return send_error(c, &e, method, url);
    }
    bool stream = req.stream;
    api_request_free(&req);
    const char *kind = chat ? (stream ? "chat/stream" : "chat") : (stream ? "completion/stream" : "completion");
    int rc = sched_submit(s->sched, job);
    if (rc != SUBMIT_OK) {
        job_unref(job);
        resp_free(&resp);
        if (rc == SUBMIT_QUEUE_FULL)
            api_error(&e, 503, "server_error", NULL, "queue_full",
                      "the server is busy: all %d slots are in use and the queue is full; retry later", s->cfg.parallel);
        else
            api_error(&e, 503, "server_error", NULL, NULL, "the server is shutting down");
        return send_error(c, &e, method, url);
    }
    if (stream) {
        Stream *st = calloc(1, sizeof *st);
        struct MHD_Response *r = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_reader, st,
                                                                        sse_free)
                                    : NULL;
        if (!r) {
            free(st);
            sched_cancel(s->sched, job);
            job_unref(job);
            resp_free(&resp);
            return MHD_NO;
        }
        *st = (Stream){.s = s, .job = job, .resp = resp, .fd = conn_fd(c), .last_send = now_s(), .kind = kind};
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        enum MHD_Result q = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return q;
    }
    /* non-streaming: wait here, watching the socket */
    int fd = conn_fd(c);
    JobResult res = {0};
    SBuf text = {0};
    bool done = false, failed = false;
    double last_poll = 0;
    while (!done && !failed) {
        done = take_output(job, &text, &res, 50);
        if (resp_feed(&resp, text.p, text.n, &err)) failed = true;
        text.n = 0;
        double now = now_s();
        if (!done && !failed && now - last_poll >= 0.05) {
            last_poll = now;
            if (client_gone(fd)) {
                srv_log(LOG_INFO, "job %llu: client disconnected, cancelling", (unsigned long long)job->id);
                sched_cancel(s->sched, job);
                sbuf_free(&text);
                job_unref(job);
                resp_free(&resp);
                return MHD_NO;
            }
        }
    }
    sbuf_free(&text);
    enum MHD_Result out;
    if (failed) {
        sched_cancel(s->sched, job);
        api_error(&e, 500, "server_error", NULL, NULL, "%s", err.msg);
        out = send_error(c, &e, method, url);
    } else if (res.finish == FINISH_CANCELLED) {
        out = MHD_NO;
    } else if (res.finish == FINISH_ERROR) {
        bool shutting = strstr(job->error, "shutting down") != NULL;
        api_error(&e, shutting ? 503 : 500, "server_error", NULL, NULL, "%s", job->error);
        out = send_error(c, &e, method, url);
    } else {
        char *body = resp_body(&resp, &res, &err);
        out = send_json(c, 200, body, NULL, NULL);
        log_job(job, kind, &res);
    }
    job_unref(job);
    resp_free(&resp);
    return out;
}

/* ------------------------------------------------------------------------------------------ routing */

static bool authorized(Server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h) return false;
    while (*h == ' ') h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    return const_time_equal(h, n, s->api_key, s->api_key_len);
}

static Route route_of(const char *url, ConnCtx *cc) {
    char path[512];
    size_t n = strcspn(url, "?#");
    if (n >= sizeof path) return R_NONE;
    memcpy(path, url, n);
    path[n] = 0;
    while (n > 1 && path[n - 1] == '/') path[--n] = 0;
    const char *p = path;
    if (!strcmp(p, "/health") || !strcmp(p, "/v1/health")) return R_HEALTH;
    if (!strncmp(p, "/v1/", 4)) p += 3;
    if (!strcmp(p, "/models")) return R_MODELS;
    if (!strncmp(p, "/models/", 8) && p[8]) {
        snprintf(cc->model_id, sizeof cc->model_id, "%s", p + 8);
        return R_MODEL_ONE;
    }
    if (!strcmp(p, "/chat/completions")) return R_CHAT;
    if (!strcmp(p, "/completions")) return R_COMPLETIONS;
    return R_NONE;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *upload_data, size_t *upload_data_size,
                                      void **con_cls) {
    (void)version;
    Server *s = cls;
    ConnCtx *cc = *con_cls;
    ApiError e;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *con_cls = cc;
        int web_rc;
        if (!s->cfg.no_webui && web_serve(c, url, method, &web_rc)) return (enum MHD_Result)web_rc;
        cc->route = route_of(url, cc);
        bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
        if (cc->route != R_HEALTH && !authorized(s, c)) {
            api_error(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                      "missing or invalid API key: send 'Authorization: Bearer KEY'");
            return send_error(c, &e, method, url);
        }
        if (cc->route == R_NONE) {
            api_error(&e, 404, "invalid_request_error", NULL, "not_found", "unknown endpoint: %s %s", method, url);
            return send_error(c, &e, method, url);
        }
        bool wants_post = cc->route == R_CHAT || cc->route == R_COMPLETIONS;
        if (wants_post ? !post : !get) {
            api_error(&e, 405, "invalid_request_error", wants_post ? "POST" : "GET, HEAD", "method_not_allowed",
                      "method %s is not allowed on %s (use %s)", method, url, wants_post ? "POST" : "GET");
            return send_error(c, &e, method, url);
        }
        if (!wants_post) {
            if (cc->route == R_HEALTH) return send_json(c, 200, health_json(s), NULL, NULL);
            if (cc->route == R_MODELS) return send_json(c, 200, models_json(s), NULL, NULL);
            if (strcmp(cc->model_id, s->model_id) != 0) {
                api_error(&e, 404, "invalid_request_error", "model", "model_not_found", "the model '%s' does not exist",
                          cc->model_id);
                return send_error(c, &e, method, url);
            }
            cJSON *m = model_object(s);
            char *json = cJSON_PrintUnformatted(m);
            cJSON_Delete(m);
            return send_json(c, 200, json, NULL, NULL);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        if (declared > s->cfg.max_body_bytes) {
            /* Answering before the upload is read makes the connection close under a client that is still
             * sending, which then sees a reset instead of the 413. Bodies up to a few times the limit are
             * read and dropped so the error arrives; anything bigger is refused at once. */
            if (declared > 4 * (unsigned long long)s->cfg.max_body_bytes) {
                api_error(&e, 413, "invalid_request_error", NULL, "request_too_large",
                          "the request body exceeds the limit of %zu bytes", s->cfg.max_body_bytes);
                return send_error(c, &e, method, url);
            }
            cc->too_large = true;
        }
        return MHD_YES;
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
            if (cc->dropped > 4 * (unsigned long long)s->cfg.max_body_bytes) { /* chunked upload without end */
                *upload_data_size = 0;
                api_error(&e, 413, "invalid_request_error", NULL, "request_too_large",
                          "the request body exceeds the limit of %zu bytes", s->cfg.max_body_bytes);
                return send_error(c, &e, method, url);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cc->too_large) {
        api_error(&e, 413, "invalid_request_error", NULL, "request_too_large",
                  "the request body exceeds the limit of %zu bytes", s->cfg.max_body_bytes);
        return send_error(c, &e, method, url);
    }
    if (cc->body.oom) {
        api_error(&e, 500, "server_error", NULL, NULL, "out of memory");
        return send_error(c, &e, method, url);
    }
    return handle_generation(s, c, cc, method, url);
}

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    ConnCtx *cc = *con_cls;
    if (!cc) return;
    sbuf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
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

int http_start(Server *s, Err *err) {
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
    bool v6 = pick->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (v6) ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)s->cfg.port);
    else ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)s->cfg.port);
    unsigned flags = MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
                     (v6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, access_handler, s, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
                                 request_completed, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, s, MHD_OPTION_END);
    if (!s->daemon)
        return err_set(err, "cannot listen on %s:%d (address in use, or not allowed)", s->cfg.host, s->cfg.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void http_stop(Server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
