/* conn_guard.c — see conn_guard.h: the list of open connections, the watchdog that enforces the header and
 * read deadlines, and the eviction at the connection cap. */
#include "server/conn_guard.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/util.h"

struct GuardedConn {
    int fd;
    bool reading;   /* the deadline applies */
    bool headers;   /* the current request's headers are in (the body deadline applies, not the header one) */
    bool served;    /* a response was sent: an idle keep-alive connection has the read deadline, not the header
                       one (clients reuse sockets after seconds of quiet) */
    bool shut;      /* the watchdog shut it down */
    double since;   /* when reading began */
    char peer[64];
    GuardedConn *prev, *next;
};

struct ConnGuard {
    double deadline, header_deadline; /* ≤ 0: none */
    int cap, n_open;                  /* cap ≤ 0: no eviction */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    GuardedConn *head;
    bool stop;
    pthread_t thread;
    uint64_t timeouts, evictions;
};

/* Whether a connection has overstayed its deadline (the header deadline before its headers are in). */
static bool overdue(const ConnGuard *g, const GuardedConn *c, double now) {
    if (!c->reading || c->shut) return false;
    double limit = g->deadline; /* the header deadline, when shorter, applies before the first request's headers */
    if (!c->headers && !c->served && g->header_deadline > 0 && (limit <= 0 || g->header_deadline < limit))
        limit = g->header_deadline;
    return limit > 0 && now - c->since >= limit;
}

static void *watchdog(void *arg) {
    ConnGuard *g = arg;
    /* checks often enough that a connection overstays by at most a tenth of the deadline (20 ms – 1 s) */
    double d = g->header_deadline > 0 && (g->deadline <= 0 || g->header_deadline < g->deadline) ? g->header_deadline
                                                                                                 : g->deadline;
    double period = d <= 0 ? 1 : d / 10 < 0.02 ? 0.02 : d / 10 > 1 ? 1 : d / 10;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)(period * 1e9);
        ts.tv_sec += ns / 1000000000L;
        ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        double now = now_s();
        for (GuardedConn *c = g->head; c; c = c->next) {
            if (!overdue(g, c, now)) continue;
            c->shut = true;
            g->timeouts++;
            shutdown(c->fd, SHUT_RDWR);
            srv_log(LOG_INFO, "closing the connection from %s: no complete request %s within %.3g s", c->peer,
                    c->headers ? "body" : "header", now - c->since);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

ConnGuard *guard_new(double deadline_s, double header_deadline_s, int cap, Err *err) {
    ConnGuard *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, "out of memory"), NULL;
    g->deadline = deadline_s;
    g->header_deadline = header_deadline_s;
    g->cap = cap;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    if (pthread_create(&g->thread, NULL, watchdog, g) != 0) {
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return err_set(err, "cannot start the connection watchdog thread"), NULL;
    }
    return g;
}

void guard_free(ConnGuard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->thread, NULL);
    while (g->head) {
        GuardedConn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

GuardedConn *guard_open(ConnGuard *g, int fd, const char *peer) {
    GuardedConn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    c->reading = true;
    c->since = now_s();
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    pthread_mutex_lock(&g->mu);
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    g->n_open++;
    /* over the cap: the connection that has waited longest for its headers gives way (the list is newest
     * first, so the last match is the oldest). Connections whose request is in, or being answered, stay. */
    int live = 0;
    for (GuardedConn *o = g->head; o; o = o->next) live += !o->shut;
    if (g->cap > 0 && live > g->cap) {
        GuardedConn *victim = NULL;
        for (GuardedConn *o = g->head->next; o; o = o->next)
            if (o->reading && !o->headers && !o->shut) victim = o;
        if (!victim) victim = c; /* every other one is busy: the newcomer is refused */
        victim->shut = true;
        g->evictions++;
        shutdown(victim->fd, SHUT_RDWR);
        srv_log(LOG_DEBUG, "closing the connection from %s: %d connections open, it had not sent its headers (%.3g s)",
                victim->peer, live, now_s() - victim->since);
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

void guard_close(ConnGuard *g, GuardedConn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    g->n_open--;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void guard_headers_read(ConnGuard *g, GuardedConn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->headers = true;
    pthread_mutex_unlock(&g->mu);
}

void guard_request_read(ConnGuard *g, GuardedConn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->reading = false;
    pthread_mutex_unlock(&g->mu);
}

void guard_next(ConnGuard *g, GuardedConn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->reading = true;
    c->headers = false;
    c->served = true;
    c->since = now_s();
    pthread_mutex_unlock(&g->mu);
}

uint64_t guard_timeouts(ConnGuard *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->timeouts;
    pthread_mutex_unlock(&g->mu);
    return n;
}

uint64_t guard_evictions(ConnGuard *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->evictions;
    pthread_mutex_unlock(&g->mu);
    return n;
}
