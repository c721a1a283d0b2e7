/* dist_none.c — dist.h in a build without MPI (no mpicc when it was built, or MPI=0): dist_init says so;
 * nothing else is ever reached, as no rank but this one exists. */
#include "dist/dist.h"

int dist_init(int *argc, char ***argv, double timeout_s, Err *err) {
    (void)argc, (void)argv, (void)timeout_s;
    return err_set(err, "this build has no MPI (install Open MPI, e.g. apt-get install libopenmpi-dev openmpi-bin, "
                        "and rebuild)");
}
bool dist_built(void) { return false; }
bool dist_active(void) { return false; }
int dist_rank(void) { return 0; }
int dist_size(void) { return 1; }
const char *dist_host(int rank) { return (void)rank, "?"; }
int dist_pid(int rank) { return (void)rank, 0; }
int dist_send(int to, int tag, const void *head, size_t head_bytes, const void *body, size_t body_bytes, Err *err) {
    (void)to, (void)tag, (void)head, (void)head_bytes, (void)body, (void)body_bytes;
    return err_set(err, "not part of an MPI job");
}
DistMsg *dist_recv(int from, int tag, Err *err) {
    (void)from, (void)tag;
    err_set(err, "not part of an MPI job");
    return NULL;
}
void dist_msg_free(DistMsg *m) { (void)m; }
void dist_fail(const char *fmt, ...) { (void)fmt; }
const char *dist_failure(void) { return NULL; }
void dist_on_failure(void (*hook)(void)) { (void)hook; }
int dist_failed_rank(void) { return -1; }
uint64_t dist_bytes_sent(void) { return 0; }
void dist_finalize(void) {}
