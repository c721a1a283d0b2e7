/* dist.h — the one interface to MPI: the ranks of the job this process was started in (mpirun), messages
 * between them, and failure detection. dist_mpi.c implements it over Open MPI; dist_none.c (a build without
 * MPI) refuses dist_init with one line. Nothing else in deltallm includes <mpi.h>.
 *
 * A communication thread owns MPI (MPI_THREAD_SERIALIZED: the main thread only initialises and finalises):
 * it starts queued sends, receives every incoming message at once into an inbox (so no send can block on a
 * peer that is computing, and no exchange can deadlock), keeps MPI progressing while the caller computes,
 * and watches the peers: heartbeats every 250 ms, and for ranks on the same host a look at their process.
 * A peer that dies (same host: seen within ~100 ms) or stops answering for the timeout, and any MPI error
 * (the communicator returns errors instead of aborting), makes the job "failed": every waiting dist_recv
 * returns the one line that says why, and the hook set with dist_on_failure runs once.
 *
 * Messages are byte strings of any length (split into pieces of at most 512 MiB on the wire); between two
 * ranks with one tag they arrive in the order they were sent. Watched peers: rank 0 watches every rank,
 * the others watch rank 0. */
#ifndef DL_DIST_DIST_H
#define DL_DIST_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Joins the job (MPI_Init_thread), learns every rank's host and process id, starts the communication
 * thread (with every signal blocked). timeout_s: how long a watched peer may stay silent (≥ 1). Once per
 * process; fails with one line (no MPI in this build, or the MPI library's thread level too low). */
int dist_init(int *argc, char ***argv, double timeout_s, Err *err);
bool dist_built(void);  /* this build has MPI (dist_mpi.c) */
bool dist_active(void); /* dist_init succeeded and dist_finalize has not run */
int dist_rank(void);
int dist_size(void);
const char *dist_host(int rank);
int dist_pid(int rank);

/* Queues a message of head followed by body (either may be empty) for rank `to`; the bytes are copied.
 * Fails only when `to` is the rank that failed (the others can still be told to stop). */
int dist_send(int to, int tag, const void *head, size_t head_bytes, const void *body, size_t body_bytes, Err *err);

typedef struct DistMsg {
    int from, tag;
    size_t bytes;
    uint8_t *data; /* 16-byte aligned */
    struct DistMsg *next;
} DistMsg;

/* Waits for the oldest message from rank `from` with `tag` (-1: any rank, any tag) and returns it (free with
 * dist_msg_free), or NULL with the job's failure in err. */
DistMsg *dist_recv(int from, int tag, Err *err);
void dist_msg_free(DistMsg *m);

/* Marks the job failed with a line (a protocol error found by a caller); the first failure wins. */
void dist_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The job's failure, or NULL while it is healthy. */
const char *dist_failure(void);
/* Runs once, on the communication thread, when the job fails (e.g. to start a server's shutdown). */
void dist_on_failure(void (*hook)(void));
/* A peer that failed (-1 while healthy, or when the failure is not one peer's). */
int dist_failed_rank(void);

/* Bytes this process has handed to MPI, and how many sends. */
uint64_t dist_bytes_sent(void);

/* Leaves the job: delivers what is queued (waiting at most a few seconds), stops the thread, and calls
 * MPI_Finalize when the job is healthy (with a dead peer it would wait forever). Safe to call twice. */
void dist_finalize(void);

#endif
