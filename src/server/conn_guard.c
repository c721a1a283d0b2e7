/* conn_guard.c — see conn_guard.h: the list of open connections and the watchdog that enforces the read
 * deadline. */
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
    bool shut;      /* the watchdog shut it down */
    double since;   /* when reading began */
    char peer[64];
    GuardedConn *prev, *next;
};

struct ConnGuard {
    double deadline;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    GuardedConn *head;
    bool stop;
    pthread_t thread;
    uint64_t timeouts;
};

static void *watchdog(void *arg) {
    ConnGuard *g = arg;
    /* checks often enough that a connection overstays by at most a tenth of the deadline (≥ 20 ms) */
    double period = g->deadline / 10 < 0.02 ? 0.02 : g->deadline / 10 > 1 ? 1 : g->deadline / 10;
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
            if (!c->reading || c->shut || now - c->since < g->deadline) continue;
            c->shut = true;
            g->timeouts++;
            shutdown(c->fd, SHUT_RDWR);
            srv_log(LOG_INFO, "closing the connection from %s: no complete request within %.3g s", c->peer,
                    g->deadline);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

ConnGuard *guard_new(double deadline_s, Err *err) {
    ConnGuard *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, "out of memory"), NULL;
    g->deadline = deadline_s;
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
    pthread_mutex_unlock(&g->mu);
    return c;
}

void guard_close(ConnGuard *g, GuardedConn *c) {
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&g->mu);
    free(c);
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
    c->since = now_s();
    pthread_mutex_unlock(&g->mu);
}

uint64_t guard_timeouts(ConnGuard *g) {
    pthread_mutex_lock(&g->mu);
    uint64_t n = g->timeouts;
    pthread_mutex_unlock(&g->mu);
    return n;
}
