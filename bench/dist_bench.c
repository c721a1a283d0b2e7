/* dist_bench.c — what one hop of the pipeline costs apart from the compute: a ping-pong between rank 0 and
 * rank 1 through src/dist/ (the communication threads, the copies, the inbox — the path a batch takes),
 * for messages of the size a batch's hidden rows have (default 16 KiB: one token of n_embd 4096 in F32).
 * Prints the best and the mean round trip, and half of each as the one-way cost of a hop; the input of
 * docs/DISTRIBUTED.md's on-paper part.
 *
 *   mpirun -np 2 build/dist_bench [BYTES] [ROUNDS]        (--mca btl self,tcp: over TCP loopback)
 */
#include "dist/dist.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    Err e = {{0}};
    if (dist_init(&argc, &argv, 30, &e)) {
        fprintf(stderr, "dist_bench: %s\n", e.msg);
        return 1;
    }
    const size_t bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 16384;
    const int rounds = argc > 2 ? atoi(argv[2]) : 2000, warm = rounds / 10;
    int rc = 0;
    if (dist_size() != 2) {
        if (dist_rank() == 0) fprintf(stderr, "dist_bench: run it on 2 ranks (mpirun -np 2)\n");
        dist_finalize();
        return 1;
    }
    char *buf = calloc(bytes ? bytes : 1, 1);
    double best = 1e9, sum = 0;
    for (int i = 0; buf && i < warm + rounds; i++) {
        const double t0 = now_s();
        DistMsg *m = NULL;
        if (dist_rank() == 0) {
            if (dist_send(1, 7, buf, bytes, NULL, 0, &e) || !(m = dist_recv(1, 7, &e))) break;
        } else {
            if (!(m = dist_recv(0, 7, &e)) || dist_send(0, 7, m->data, m->bytes, NULL, 0, &e)) break;
        }
        dist_msg_free(m);
        const double dt = now_s() - t0;
        if (i >= warm) sum += dt, best = dt < best ? dt : best;
    }
    if (e.msg[0]) {
        fprintf(stderr, "dist_bench: rank %d: %s\n", dist_rank(), e.msg);
        rc = 1;
    } else if (dist_rank() == 0) {
        printf("dist ping-pong, %zu bytes, %d rounds (rank 0 on %s, rank 1 on %s): round trip best %.1f us, "
               "mean %.1f us; one hop best %.1f us, mean %.1f us\n",
               bytes, rounds, dist_host(0), dist_host(1), best * 1e6, sum / rounds * 1e6, best * 0.5e6,
               sum / rounds * 0.5e6);
    }
    free(buf);
    dist_finalize();
    return rc;
}
