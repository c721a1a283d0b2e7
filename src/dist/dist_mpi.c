/* dist_mpi.c — dist.h over MPI (Open MPI): the communication thread, the inbox, heartbeats and the peer
 * watch. Compiled only when the build finds mpicc (Makefile: MPI=1); dist_none.c stands in otherwise.
 *
 * Wire format: a message is one or more MPI messages ("pieces") with the same destination and tag, sent one
 * after the other; the first starts with a 16-byte prefix holding the payload's length. Pieces are at most
 * PIECE bytes, so a snapshot of any size fits MPI's int counts. */
#include "dist/dist.h"
#include "base/clock.h"

#include <mpi.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PIECE ((size_t)512 << 20)
#define PREFIX 16
#define TAG_HEARTBEAT 32000 /* above every caller's tag */
#define BEAT_S 0.25
#define CHECK_S 0.1
#define POLL_MIN_US 20   /* the communication thread's polling interval right after something happened, */
#define POLL_WAIT_US 100 /* its limit while a thread waits for a message, */
#define POLL_IDLE_US 2000 /* and while none does */

typedef struct Peer {
    char host[64];
    char machine[48]; /* host name + boot id: "the same machine" for the process check */
    int32_t pid;
    double heard;     /* when anything last came from it */
    bool watched;
    MPI_Request beat; /* the last heartbeat sent to it, or MPI_REQUEST_NULL */
} Peer;

typedef struct Out {
    struct Out *next;
    int to, tag, n_pieces;
    uint8_t *data;
    size_t bytes; /* prefix included */
    MPI_Request *req;
} Out;

static struct {
    bool up, stop;
    int rank, size;
    MPI_Comm comm;
    double timeout_s, stop_by;
    Peer *peers;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t arrived; /* inbox or failure */
    pthread_cond_t kick;    /* work for the communication thread */
    Out *q_head, *q_tail;   /* queued sends (mu) */
    Out *active;            /* started sends (communication thread) */
    DistMsg *in_head, *in_tail;
    int waiters;
    bool failed;
    int failed_rank;
    char failure[512];
    void (*hook)(void);
    uint64_t bytes_sent;
} D = {.mu = PTHREAD_MUTEX_INITIALIZER, .arrived = PTHREAD_COND_INITIALIZER, .kick = PTHREAD_COND_INITIALIZER,
       .failed_rank = -1};

/* ---- failure ------------------------------------------------------------------------------------------- */

static void failv(int rank, const char *fmt, va_list ap) {
    pthread_mutex_lock(&D.mu);
    const bool first = !D.failed;
    if (first) {
        vsnprintf(D.failure, sizeof D.failure, fmt, ap);
        D.failed = true;
        D.failed_rank = rank;
    }
    pthread_cond_broadcast(&D.arrived);
    void (*hook)(void) = first ? D.hook : NULL;
    pthread_mutex_unlock(&D.mu);
    if (hook) hook();
}

static void fail_peer(int rank, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_peer(int rank, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    failv(rank, fmt, ap);
    va_end(ap);
}

void dist_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    failv(-1, fmt, ap);
    va_end(ap);
}

static bool mpi_ok(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return true;
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, s, &n);
    dist_fail("MPI error in %s: %.*s", what, n, s);
    return false;
}

const char *dist_failure(void) {
    pthread_mutex_lock(&D.mu);
    const char *f = D.failed ? D.failure : NULL;
    pthread_mutex_unlock(&D.mu);
    return f;
}

int dist_failed_rank(void) {
    pthread_mutex_lock(&D.mu);
    int r = D.failed ? D.failed_rank : -1;
    pthread_mutex_unlock(&D.mu);
    return r;
}

void dist_on_failure(void (*hook)(void)) {
    pthread_mutex_lock(&D.mu);
    D.hook = hook;
    pthread_mutex_unlock(&D.mu);
}

/* ---- the peer watch ------------------------------------------------------------------------------------ */

/* A process on this machine that is gone (or a zombie nobody has reaped yet). */
static bool local_process_gone(int pid) {
    if (kill(pid, 0) == -1 && errno == ESRCH) return true;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return paren && (paren[2] == 'Z' || paren[2] == 'X');
}

static void watch_peers(double t) {
    const Peer *me = &D.peers[D.rank];
    for (int r = 0; r < D.size; r++) {
        const Peer *p = &D.peers[r];
        if (!p->watched) continue;
        if (!strcmp(p->machine, me->machine) && local_process_gone(p->pid)) {
            fail_peer(r, "rank %d (pid %d on %s) died", r, p->pid, p->host);
            return;
        }
        if (t - p->heard > D.timeout_s) {
            fail_peer(r, "rank %d (pid %d on %s) has not answered for %.0f s", r, p->pid, p->host, t - p->heard);
            return;
        }
    }
}

static void send_beats(int dead) {
    static uint8_t beat[PREFIX]; /* an empty message */
    for (int r = 0; r < D.size; r++) {
        Peer *p = &D.peers[r];
        if (!p->watched || r == dead) continue;
        if (p->beat != MPI_REQUEST_NULL) {
            int done = 0;
            if (!mpi_ok(MPI_Test(&p->beat, &done, MPI_STATUS_IGNORE), "MPI_Test")) return;
            if (!done) continue; /* the last one is still on its way */
        }
        if (!mpi_ok(MPI_Isend(beat, PREFIX, MPI_BYTE, r, TAG_HEARTBEAT, D.comm, &p->beat), "MPI_Isend")) return;
    }
}

/* ---- receiving ----------------------------------------------------------------------------------------- */

static void heard(int rank) { D.peers[rank].heard = now_s(); }

/* Waits for one receive while keeping the watch (a sender that dies mid-message must not hang us). */
static bool wait_recv(MPI_Request *req, int from) {
    double next = now_s();
    for (;;) {
        int done = 0;
        if (!mpi_ok(MPI_Test(req, &done, MPI_STATUS_IGNORE), "MPI_Test")) return false;
        if (done) return true;
        int hb = 0;
        MPI_Status st;
        if (!mpi_ok(MPI_Iprobe(from, TAG_HEARTBEAT, D.comm, &hb, &st), "MPI_Iprobe")) return false;
        if (hb) {
            uint8_t beat[PREFIX];
            if (!mpi_ok(MPI_Recv(beat, PREFIX, MPI_BYTE, from, TAG_HEARTBEAT, D.comm, MPI_STATUS_IGNORE), "MPI_Recv"))
                return false;
            heard(from);
        }
        const double t = now_s();
        if (t >= next) {
            watch_peers(t);
            next = t + CHECK_S;
        }
        if (dist_failure()) {
            MPI_Cancel(req);
            return false;
        }
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

static bool recv_piece(void *buf, int count, int from, int tag) {
    MPI_Request req;
    if (!mpi_ok(MPI_Irecv(buf, count, MPI_BYTE, from, tag, D.comm, &req), "MPI_Irecv")) return false;
    return wait_recv(&req, from);
}

/* Receives the message whose first piece was probed. */
static bool receive(const MPI_Status *st) {
    const int from = st->MPI_SOURCE, tag = st->MPI_TAG;
    int count = 0;
    if (!mpi_ok(MPI_Get_count(st, MPI_BYTE, &count), "MPI_Get_count")) return false;
    if (tag == TAG_HEARTBEAT) {
        uint8_t beat[PREFIX];
        if (count != PREFIX) return dist_fail("a malformed heartbeat from rank %d", from), false;
        if (!mpi_ok(MPI_Recv(beat, count, MPI_BYTE, from, tag, D.comm, MPI_STATUS_IGNORE), "MPI_Recv")) return false;
        heard(from);
        return true;
    }
    if (count < PREFIX) return dist_fail("a message of %d bytes from rank %d (too short)", count, from), false;
    uint8_t *first = malloc((size_t)count);
    if (!first) return dist_fail("out of memory receiving %d bytes from rank %d", count, from), false;
    if (!recv_piece(first, count, from, tag)) return free(first), false;
    uint64_t total;
    memcpy(&total, first, 8);
    DistMsg *m = calloc(1, sizeof *m);
    const size_t got = (size_t)count - PREFIX;
    if (total < got || !m) {
        free(first), free(m);
        return dist_fail("a malformed message from rank %d", from), false;
    }
    if (total == got) { /* one piece: keep its buffer (the payload starts 16 bytes in: aligned) */
        m->data = first + PREFIX;
        m->bytes = got;
    } else {
        uint8_t *all = malloc(PREFIX + total);
        if (!all) {
            free(first), free(m);
            return dist_fail("out of memory receiving %llu bytes from rank %d", (unsigned long long)total, from), false;
        }
        memcpy(all + PREFIX, first + PREFIX, got);
        free(first);
        for (size_t at = got; at < total;) {
            const size_t n = total - at < PIECE ? total - at : PIECE;
            if (!recv_piece(all + PREFIX + at, (int)n, from, tag)) return free(all), free(m), false;
            at += n;
        }
        m->data = all + PREFIX;
        m->bytes = total;
    }
    m->from = from;
    m->tag = tag;
    heard(from);
    pthread_mutex_lock(&D.mu);
    if (D.in_tail) D.in_tail->next = m;
    else D.in_head = m;
    D.in_tail = m;
    pthread_cond_broadcast(&D.arrived);
    pthread_mutex_unlock(&D.mu);
    return true;
}

/* ---- sending ------------------------------------------------------------------------------------------- */

static bool start_send(Out *o) {
    o->n_pieces = (int)((o->bytes + PIECE - 1) / PIECE);
    o->req = malloc(sizeof *o->req * (size_t)o->n_pieces);
    if (!o->req) return dist_fail("out of memory sending to rank %d", o->to), false;
    size_t at = 0;
    for (int i = 0; i < o->n_pieces; i++) {
        const size_t n = o->bytes - at < PIECE ? o->bytes - at : PIECE;
        if (!mpi_ok(MPI_Isend(o->data + at, (int)n, MPI_BYTE, o->to, o->tag, D.comm, &o->req[i]), "MPI_Isend"))
            return false;
        at += n;
    }
    return true;
}

static void out_free(Out *o) {
    free(o->req);
    free(o->data);
    free(o);
}

/* ---- the communication thread -------------------------------------------------------------------------- */

static void *comm_main(void *arg) {
    (void)arg;
    double next_beat = 0, next_check = 0;
    long idle_us = POLL_MIN_US;
    for (;;) {
        pthread_mutex_lock(&D.mu);
        Out *q = D.q_head;
        D.q_head = D.q_tail = NULL;
        const bool stop = D.stop, failed = D.failed;
        const int dead = D.failed_rank;
        pthread_mutex_unlock(&D.mu);
        bool busy = q != NULL;
        while (q) { /* start in queue order: pieces and messages keep their order on the wire */
            Out *next = q->next;
            q->next = NULL;
            if (failed && q->to == dead) {
                out_free(q); /* nobody will receive it */
            } else if (!start_send(q)) {
                out_free(q);
            } else {
                Out **pp = &D.active;
                while (*pp) pp = &(*pp)->next;
                *pp = q;
            }
            q = next;
        }
        for (Out **pp = &D.active; *pp;) {
            int done = 0;
            if (!mpi_ok(MPI_Testall((*pp)->n_pieces, (*pp)->req, &done, MPI_STATUSES_IGNORE), "MPI_Testall")) break;
            if (!done) {
                pp = &(*pp)->next;
                continue;
            }
            Out *o = *pp;
            *pp = o->next;
            out_free(o);
            busy = true;
        }
        for (int k = 0; k < 64; k++) {
            int flag = 0;
            MPI_Status st;
            if (!mpi_ok(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, D.comm, &flag, &st), "MPI_Iprobe") || !flag) break;
            if (!receive(&st)) break; /* the job failed: said so */
            busy = true;
        }
        const double t = now_s();
        if (t >= next_beat) { /* also after a failure: the live peers wait for the stop without timing out */
            send_beats(dead);
            next_beat = t + BEAT_S;
        }
        if (!failed && t >= next_check) {
            watch_peers(t);
            next_check = t + CHECK_S;
        }
        bool pending = D.q_head != NULL; /* what a live peer still has to receive */
        for (const Out *o = D.active; o && !pending; o = o->next) pending = o->to != dead;
        if (stop && (!pending || t > D.stop_by)) break;
        if (busy) {
            idle_us = POLL_MIN_US;
            continue;
        }
        /* nothing happened: wait a little longer each time, up to 100 µs while a thread waits for a message
         * and 2 ms while the process computes (a queued send wakes the thread at once). A rank that waits on
         * a core another rank computes on (more ranks than cores) then costs that rank little. */
        pthread_mutex_lock(&D.mu);
        if (!D.q_head && !D.stop) {
            const long cap = D.waiters > 0 ? POLL_WAIT_US : POLL_IDLE_US;
            idle_us = idle_us * 2 < cap ? idle_us * 2 : cap;
            const long us = idle_us;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += us * 1000;
            if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
            pthread_cond_timedwait(&D.kick, &D.mu, &ts);
        }
        pthread_mutex_unlock(&D.mu);
    }
    return NULL;
}

/* ---- the interface ------------------------------------------------------------------------------------- */

static void machine_id(char *out, size_t cap, const char *host) {
    char boot[40] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = 0;
        fclose(f);
        boot[strcspn(boot, "\n")] = 0;
    }
    snprintf(out, cap, "%.15s/%s", host, boot);
}

int dist_init(int *argc, char ***argv, double timeout_s, Err *err) {
    if (D.up) return 0;
    int init = 0, provided = 0;
    MPI_Initialized(&init);
    if (!init && MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return err_set(err, "MPI_Init_thread failed (was this started by mpirun?)");
    if (init) MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_SERIALIZED)
        return err_set(err, "the MPI library offers thread level %d; deltallm needs MPI_THREAD_SERIALIZED", provided);
    if (MPI_Comm_dup(MPI_COMM_WORLD, &D.comm) != MPI_SUCCESS ||
        MPI_Comm_set_errhandler(D.comm, MPI_ERRORS_RETURN) != MPI_SUCCESS)
        return err_set(err, "cannot set up the MPI communicator");
    MPI_Comm_rank(D.comm, &D.rank);
    MPI_Comm_size(D.comm, &D.size);
    D.timeout_s = timeout_s >= 1 ? timeout_s : 1;
    D.peers = calloc((size_t)D.size, sizeof *D.peers);
    if (!D.peers) return err_set(err, "out of memory");
    Peer me = {{0}, {0}, (int32_t)getpid(), 0, false, MPI_REQUEST_NULL};
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    machine_id(me.machine, sizeof me.machine, me.host);
    if (MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, D.peers, (int)sizeof me, MPI_BYTE, D.comm) != MPI_SUCCESS)
        return err_set(err, "cannot exchange the ranks' host names");
    const double t = now_s();
    for (int r = 0; r < D.size; r++) {
        D.peers[r].heard = t;
        D.peers[r].beat = MPI_REQUEST_NULL;
        D.peers[r].watched = r != D.rank && (D.rank == 0 || r == 0);
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* the thread inherits this: signals go to the program's threads */
    const int rc = pthread_create(&D.thread, NULL, comm_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return err_set(err, "cannot start the MPI communication thread");
    D.up = true;
    return 0;
}

bool dist_built(void) { return true; }
bool dist_active(void) { return D.up; }
int dist_rank(void) { return D.rank; }
int dist_size(void) { return D.up ? D.size : 1; }
const char *dist_host(int rank) { return D.up && rank >= 0 && rank < D.size ? D.peers[rank].host : "?"; }
int dist_pid(int rank) { return D.up && rank >= 0 && rank < D.size ? D.peers[rank].pid : 0; }

uint64_t dist_bytes_sent(void) {
    pthread_mutex_lock(&D.mu);
    uint64_t n = D.bytes_sent;
    pthread_mutex_unlock(&D.mu);
    return n;
}

int dist_send(int to, int tag, const void *head, size_t head_bytes, const void *body, size_t body_bytes, Err *err) {
    ASSERT(D.up && to >= 0 && to < D.size && to != D.rank && tag >= 0 && tag < TAG_HEARTBEAT);
    if (dist_failed_rank() == to) return err_set(err, "%s", dist_failure());
    Out *o = calloc(1, sizeof *o);
    const size_t total = head_bytes + body_bytes;
    uint8_t *data = o ? malloc(PREFIX + total) : NULL;
    if (!data) {
        free(o);
        return err_set(err, "out of memory for a message of %zu bytes", total);
    }
    const uint64_t len = total;
    memset(data, 0, PREFIX);
    memcpy(data, &len, 8);
    if (head_bytes) memcpy(data + PREFIX, head, head_bytes);
    if (body_bytes) memcpy(data + PREFIX + head_bytes, body, body_bytes);
    *o = (Out){NULL, to, tag, 0, data, PREFIX + total, NULL};
    pthread_mutex_lock(&D.mu);
    if (D.q_tail) D.q_tail->next = o;
    else D.q_head = o;
    D.q_tail = o;
    D.bytes_sent += total;
    pthread_cond_signal(&D.kick);
    pthread_mutex_unlock(&D.mu);
    return 0;
}

DistMsg *dist_recv(int from, int tag, Err *err) {
    pthread_mutex_lock(&D.mu);
    D.waiters++;
    pthread_cond_signal(&D.kick);
    DistMsg *m = NULL;
    for (;;) {
        DistMsg *prev = NULL;
        for (m = D.in_head; m; prev = m, m = m->next)
            if ((from < 0 || m->from == from) && (tag < 0 || m->tag == tag)) break;
        if (m) {
            if (prev) prev->next = m->next;
            else D.in_head = m->next;
            if (D.in_tail == m) D.in_tail = prev;
            m->next = NULL;
            break;
        }
        if (D.failed || !D.up) break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000000L;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&D.arrived, &D.mu, &ts);
    }
    D.waiters--;
    if (!m) err_set(err, "%s", D.failed ? D.failure : "not part of an MPI job");
    pthread_mutex_unlock(&D.mu);
    return m;
}

void dist_msg_free(DistMsg *m) {
    if (m) free(m->data - PREFIX);
    free(m);
}

void dist_finalize(void) {
    if (!D.up) return;
    pthread_mutex_lock(&D.mu);
    D.stop = true;
    D.stop_by = now_s() + 3.0;
    pthread_cond_signal(&D.kick);
    pthread_mutex_unlock(&D.mu);
    pthread_join(D.thread, NULL);
    const bool healthy = !D.failed && !D.active;
    while (D.active) {
        Out *o = D.active;
        D.active = o->next;
        out_free(o); /* undelivered (a failed job): its requests are abandoned with the process */
    }
    while (D.in_head) {
        DistMsg *m = D.in_head;
        D.in_head = m->next;
        dist_msg_free(m);
    }
    D.in_tail = NULL;
    D.up = false;
    if (healthy) {
        for (int r = 0; r < D.size; r++)
            if (D.peers[r].beat != MPI_REQUEST_NULL) MPI_Cancel(&D.peers[r].beat), MPI_Request_free(&D.peers[r].beat);
        MPI_Comm_free(&D.comm);
        MPI_Finalize();
    }
    free(D.peers);
    D.peers = NULL;
}
