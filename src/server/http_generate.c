/* http_generate.c — the generation endpoints: a request becomes one job per choice (a /v1/completions
 * request with several prompts has several), submitted to the scheduler together; the answer is one JSON
 * body or an SSE stream that interleaves the choices' chunks.
 *
 * While a request waits or streams, its socket is polled every 50 ms: a client that has gone away
 * cancels its jobs at once (the scheduler frees the slots at its next iteration) instead of when the
 * next write fails. A stream that waits (queue, long prompt) sends SSE comments every 15 s. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/anthropic.h"
#include "server/http_internal.h"
#include "server/json_io.h"
#include "server/respond.h"

static atomic_ullong job_counter;

typedef struct Gen {
    Server *s;
    int k;            /* choices */
    int per_prompt;   /* choices per prompt (n): choice i is prompt i / per_prompt */
    Job **jobs;
    Responder *resp;
    JobResult *res;
    bool *finished;   /* the choice's finish was emitted */
    int n_finished;
    const char *kind; /* for the log */
    int fd;
    /* streaming */
    SBuf out;
    size_t out_pos;
    bool ended;
    double last_send, last_poll;
} Gen;

static void gen_free(Gen *g) {
    if (!g) return;
    for (int i = 0; i < g->k; i++) {
        if (g->jobs && g->jobs[i]) job_unref(g->jobs[i]);
        if (g->resp) resp_free(&g->resp[i]);
    }
    free(g->jobs);
    free(g->resp);
    free(g->res);
    free(g->finished);
    sbuf_free(&g->out);
    free(g);
}

static void cancel_all(Gen *g) {
    for (int i = 0; i < g->k; i++)
        if (g->jobs[i]) sched_cancel(g->s->sched, g->jobs[i]);
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

typedef struct Taken {
    SBuf text;
    TokenLogprob *lp;
    size_t n_lp, cap_lp;
    JobResult now; /* the counts and times so far (timings_per_token) */
} Taken;

/* Takes the job's new text, logprobs and state. Waits up to wait_ms when there is nothing new (a
 * non-streamed job only signals when it is done: its consumer does not wake up for every token). */
static bool take_output(Job *j, Taken *t, JobResult *res, int wait_ms) {
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
        sbuf_put(&t->text, j->text.p, j->text.n);
        j->text.n = 0;
    }
    if (j->n_lp) { /* swap the buffers: no copy under the lock */
        TokenLogprob *p = t->lp;
        size_t cap = t->cap_lp;
        t->lp = j->lp, t->n_lp = j->n_lp, t->cap_lp = j->cap_lp;
        j->lp = p, j->n_lp = 0, j->cap_lp = cap;
    }
    bool done = j->done;
    if (!done) { /* the job so far: its counts, and the times up to now */
        double now = now_s(), tp = j->t_prompt_done > 0 ? j->t_prompt_done : now;
        t->now.n_prompt = (int)j->n_prompt;
        t->now.n_cached = j->n_cached;
        t->now.n_gen = j->n_gen;
        t->now.queue_ms = j->t_admit > 0 ? (j->t_admit - j->t_submit) * 1000.0 : (now - j->t_submit) * 1000.0;
        t->now.prompt_ms = j->t_admit > 0 ? (tp - j->t_admit) * 1000.0 : 0;
        t->now.gen_ms = j->t_prompt_done > 0 ? (now - j->t_prompt_done) * 1000.0 : 0;
    }
    if (done) {
        res->finish = j->finish;
        res->slot = j->slot_ran;
        res->stop_word = j->stop.matched;
        res->stopping_word = j->stop.matched && j->stop.which >= 0 ? j->stop.stops[j->stop.which] : NULL;
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

static void taken_reset(Taken *t) {
    t->text.n = 0;
    t->n_lp = 0;
}

static void taken_free(Taken *t) {
    sbuf_free(&t->text);
    free(t->lp);
}

static void log_job(const Job *j, const char *kind, const JobResult *res) {
    static const char *const names[] = {"none", "stop", "length", "cancelled", "error"};
    double ttft = j->t_first > 0 ? (j->t_first - j->t_submit) * 1000.0 : -1;
    srv_log(LOG_INFO, "job %llu %s: prompt %d (cached %d), generated %d, finish %s, queue %.0f ms, ttft %.0f ms, "
                      "total %.0f ms",
            (unsigned long long)j->id, kind, res->n_prompt, res->n_cached, res->n_gen, names[res->finish],
            res->queue_ms, ttft, (j->t_end - j->t_submit) * 1000.0);
}

/* The first choice not finished yet (whose condition variable a waiting consumer sleeps on). */
static int first_open(const Gen *g) {
    for (int i = 0; i < g->k; i++)
        if (!g->finished[i]) return i;
    return -1;
}

/* ------------------------------------------------------------------------------------------ streaming */

/* One pass over the choices: new text to events, finished choices to their finish events. Returns -1 when
 * the stream must end with an error (logged). */
static int pump(Gen *g, Taken *t, int wait_ms) {
    Err err = {{0}};
    int wait_on = first_open(g);
    for (int i = 0; i < g->k; i++) {
        if (g->finished[i]) continue;
        taken_reset(t);
        bool done = take_output(g->jobs[i], t, &g->res[i], i == wait_on ? wait_ms : 0);
        g->resp[i].now = done ? g->res[i] : t->now;
        if (resp_stream_text(&g->resp[i], t->text.p, t->text.n, t->lp, t->n_lp, &g->out, &err)) goto fail;
        if (!done) continue;
        const JobResult *res = &g->res[i];
        g->finished[i] = true;
        g->n_finished++;
        if (res->finish == FINISH_CANCELLED) return -1;
        if (res->finish == FINISH_ERROR) {
            resp_stream_error(&g->resp[i], g->jobs[i]->error, &g->out);
            g->ended = true;
            cancel_all(g);
            log_job(g->jobs[i], g->kind, res);
            return 0;
        }
        JobResult total;
        bool last = g->n_finished == g->k;
        if (last) resp_total(g->res, g->k, g->per_prompt, &total);
        if (resp_stream_finish(&g->resp[i], res, last ? &total : NULL, &g->out, &err)) goto fail;
        log_job(g->jobs[i], g->kind, res);
        if (last) {
            if (resp_stream_done(&g->resp[0], &total, &g->out, &err)) goto fail;
            g->ended = true;
        }
    }
    return 0;
fail:
    srv_log(LOG_ERROR, "%s: %s", g->kind, err.msg);
    cancel_all(g);
    return -1;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    Gen *g = cls;
    Taken t = {0};
    ssize_t rc = 0;
    for (;;) {
        if (g->out_pos < g->out.n) {
            size_t n = g->out.n - g->out_pos < max ? g->out.n - g->out_pos : max;
            memcpy(buf, g->out.p + g->out_pos, n);
            g->out_pos += n;
            g->last_send = now_s();
            rc = (ssize_t)n;
            break;
        }
        g->out.n = g->out_pos = 0;
        if (g->ended) {
            rc = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (pump(g, &t, 50)) {
            rc = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        double now = now_s();
        if (g->out.n == 0 && now - g->last_poll >= 0.05) {
            g->last_poll = now;
            if (client_gone(g->fd)) {
                srv_log(LOG_INFO, "%s: client disconnected, cancelling", g->kind);
                cancel_all(g);
                rc = MHD_CONTENT_READER_END_WITH_ERROR;
                break;
            }
            if (now - g->last_send > 15) sbuf_puts(&g->out, ": keep-alive\n\n");
        }
    }
    taken_free(&t);
    return rc;
}

static void sse_free(void *cls) {
    Gen *g = cls;
    for (int i = 0; i < g->k; i++) {
        pthread_mutex_lock(&g->jobs[i]->mu);
        bool done = g->jobs[i]->done;
        pthread_mutex_unlock(&g->jobs[i]->mu);
        if (!done) {
            srv_log(LOG_INFO, "job %llu: stream closed early, cancelling", (unsigned long long)g->jobs[i]->id);
            sched_cancel(g->s->sched, g->jobs[i]);
        }
    }
    gen_free(g);
}

/* ------------------------------------------------------------------------------------------ whole body */

static enum MHD_Result wait_body(Gen *g, struct MHD_Connection *c, const char *method, const char *url) {
    Server *s = g->s;
    Taken t = {0};
    Err err = {{0}};
    ApiError e;
    bool failed = false;
    double last_poll = 0;
    while (g->n_finished < g->k && !failed) {
        int wait_on = first_open(g);
        for (int i = 0; i < g->k && !failed; i++) {
            if (g->finished[i]) continue;
            taken_reset(&t);
            bool done = take_output(g->jobs[i], &t, &g->res[i], i == wait_on ? 50 : 0);
            if (resp_feed(&g->resp[i], t.text.p, t.text.n, t.lp, t.n_lp, &err)) failed = true;
            if (done) g->finished[i] = true, g->n_finished++;
        }
        double now = now_s();
        if (g->n_finished < g->k && !failed && now - last_poll >= 0.05) {
            last_poll = now;
            if (client_gone(g->fd)) {
                srv_log(LOG_INFO, "%s: client disconnected, cancelling", g->kind);
                cancel_all(g);
                taken_free(&t);
                gen_free(g);
                return MHD_NO;
            }
        }
    }
    taken_free(&t);
    enum MHD_Result out;
    const Job *bad = NULL;
    bool cancelled = false;
    for (int i = 0; i < g->k; i++) {
        if (g->res[i].finish == FINISH_ERROR && !bad) bad = g->jobs[i];
        cancelled |= g->res[i].finish == FINISH_CANCELLED;
    }
    if (failed) {
        cancel_all(g);
        api_error(&e, 500, "server_error", NULL, NULL, "%s", err.msg);
        out = http_send_error(s, c, &e, method, url);
    } else if (bad) {
        bool shutting = strstr(bad->error, "shutting down") != NULL;
        api_error(&e, shutting ? 503 : 500, "server_error", NULL, NULL, "%s", bad->error);
        out = http_send_error(s, c, &e, method, url);
    } else if (cancelled) {
        out = MHD_NO;
    } else {
        JobResult total;
        resp_total(g->res, g->k, g->per_prompt, &total);
        char *body = resp_body(g->resp, g->k, g->res, &total, &err);
        if (!body) srv_log(LOG_ERROR, "%s: %s", g->kind, err.msg);
        out = http_send_json(s, c, 200, body, NULL, NULL);
        for (int i = 0; i < g->k; i++) log_job(g->jobs[i], g->kind, &g->res[i]);
    }
    gen_free(g);
    return out;
}

/* ------------------------------------------------------------------------------------------ entry */

static const char *kind_name(Route route, bool stream) {
    if (route == R_CHAT) return stream ? "chat/stream" : "chat";
    if (route == R_RESPONSES) return stream ? "responses/stream" : "responses";
    if (route == R_LLAMA_COMPLETION) return stream ? "completion(llama)/stream" : "completion(llama)";
    if (route == R_MESSAGES) return stream ? "messages/stream" : "messages";
    return stream ? "completion/stream" : "completion";
}

/* n > 1: choice i of its prompt shares the prompt's evaluation with the first choice (the leader), and draws
 * with its own seed (seed + its number), so the choices differ and a given seed repeats all of them. */
static int share_choice(Job **jobs, int i, int n) {
    const int c = i % n;
    Job *j = jobs[i];
    if (c == 0) {
        if (!(j->share = prompt_share_new())) return -1;
        j->share_leader = true;
        return 0;
    }
    j->share = jobs[i - c]->share;
    atomic_fetch_add(&j->share->refs, 1);
    j->sp.seed += (uint64_t)c;
    return 0;
}

/* The jobs and responders of a parsed request; NULL with *e set. */
static Gen *prepare(Server *s, const ApiRequest *req, Route route, ApiError *e) {
    const int n = req->n > 1 ? req->n : 1; /* choices per prompt: choice i is prompt i / n */
    int k = (req->chat ? 1 : req->n_prompts) * n;
    Gen *g = calloc(1, sizeof *g);
    if (g) {
        g->s = s;
        g->k = k;
        g->per_prompt = n;
        g->jobs = calloc((size_t)k, sizeof *g->jobs);
        g->resp = calloc((size_t)k, sizeof *g->resp);
        g->res = calloc((size_t)k, sizeof *g->res);
        g->finished = calloc((size_t)k, sizeof *g->finished);
    }
    if (!g || !g->jobs || !g->resp || !g->res || !g->finished) {
        gen_free(g);
        return api_error(e, 500, "server_error", NULL, NULL, "out of memory"), NULL;
    }
    g->kind = kind_name(route, req->stream);
    RespKind rk = route == R_CHAT        ? RESP_CHAT
                  : route == R_RESPONSES ? RESP_RESPONSES
                  : route == R_LLAMA_COMPLETION ? RESP_LLAMA
                  : route == R_MESSAGES         ? RESP_ANTHROPIC
                                                : RESP_COMPLETION;
    for (int i = 0; i < k; i++) {
        bool sir = false;
        if (prepare_job(s, req, i / n, &g->jobs[i], &sir, e)) {
            if (k > n && e->param[0] && !strcmp(e->param, "prompt")) snprintf(e->param, sizeof e->param, "prompt[%d]", i / n);
            gen_free(g);
            return NULL;
        }
        if (n > 1 && share_choice(g->jobs, i, n)) {
            api_error(e, 500, "server_error", NULL, NULL, "out of memory");
            gen_free(g);
            return NULL;
        }
        g->jobs[i]->id = atomic_fetch_add(&job_counter, 1) + 1;
        g->jobs[i]->notify_text = req->stream;
        Err err = {{0}};
        if (resp_init(&g->resp[i], req, rk, i, s->tmpl.format, sir, s->model_id, s->engine, i ? g->resp[0].id : NULL,
                      &err)) {
            api_error(e, 500, "server_error", NULL, NULL, "%s", err.msg);
            gen_free(g);
            return NULL;
        }
        g->resp[i].n_prompt = (int)g->jobs[i]->n_prompt;
    }
    return g;
}

/* Submits every job or none (a full queue refuses the whole request). */
static int submit_all(Gen *g, ApiError *e) {
    int rc = sched_submit_all(g->s->sched, g->jobs, g->k);
    if (rc == SUBMIT_QUEUE_FULL)
        return api_error(e, 503, "server_error", NULL, "queue_full",
                         "the server is busy: all %d slots are in use and the queue is full%s; retry later",
                         g->s->cfg.parallel, g->k > 1 ? " (each prompt of a batch takes a place)" : "");
    if (rc != SUBMIT_OK) return api_error(e, 503, "server_error", NULL, NULL, "the server is shutting down");
    return 0;
}

enum MHD_Result http_generate(Server *s, struct MHD_Connection *c, Route route, const char *body, size_t len,
                              const char *method, const char *url) {
    ApiRequest req;
    ApiError e;
    int rc = route == R_RESPONSES  ? responses_parse(body, len, &s->defaults, s->store, &req, &e)
             : route == R_MESSAGES ? anthropic_parse(body, len, &s->defaults, &req, &e)
                                   : api_parse(route == R_CHAT, body, len, &s->defaults, &req, &e);
    if (rc) return http_send_error(s, c, &e, method, url);
    Gen *g = prepare(s, &req, route, &e);
    bool stream = req.stream;
    api_request_free(&req);
    if (!g) return http_send_error(s, c, &e, method, url);
    g->fd = conn_fd(c);
    if (submit_all(g, &e)) {
        gen_free(g);
        return http_send_error(s, c, &e, method, url);
    }
    if (!stream) return wait_body(g, c, method, url);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_reader, g, sse_free);
    if (!r) {
        cancel_all(g);
        gen_free(g);
        return MHD_NO;
    }
    g->last_send = now_s();
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result q = http_queue(s, c, 200, r);
    MHD_destroy_response(r);
    return q;
}
