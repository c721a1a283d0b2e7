/* rollback_bench.c — what returning to token k of a batch costs, the two ways it can be done
 * (docs/MODEL.md, "Rollback"):
 *   replay      (what deltallm does) the scan writes the new state beside the old one and logs its inputs; keeping
 *               k < n tokens re-runs k tokens of the scan from the old state;
 *   checkpoints the scan stores the whole state after every token; keeping k copies checkpoint k back.
 * On a model file, through the forward pass: a decode step, a plain batch of n tokens, the same batch tentative,
 * and keep(k); and at the kernel level for the model's delta-net shape: the scan of n tokens with and without
 * per-token checkpoints, and the copies a checkpoint restore needs. Times are the fastest of 9 runs.
 *
 *   build/rollback_bench MODEL.gguf [-t THREADS] [--json]
 */
#include "base/bigalloc.h"
#include "base/pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels_cpu.h"
#include "model/model.h"
#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, const char *msg) {
    fprintf(stderr, "rollback_bench: %s: %s\n", what, msg);
    exit(1);
}

#define REPS 9

/* the fastest of REPS runs: on a shared machine the least disturbed one (the same for every variant) */
static double fastest(double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int threads = 2;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = true;
        else path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: rollback_bench MODEL.gguf [-t THREADS] [--json]\n");
        return 2;
    }
    Err er = {{0}};
    Model *m = model_load(path, &er);
    if (!m) die(path, er.msg);
    Isa isa;
    if (isa_parse(getenv("DELTALLM_ISA"), &isa, &er)) die("isa", er.msg);
    ForwardOptions fo = {.max_batch = 64, .max_ctx = 1024,
                         .backend = {.name = "cpu", .cpu.isa = (int)isa, .n_threads = threads, .mode = MATMUL_GGML, .cpu.pack = true}};
    Forward *fw = forward_new(m, &fo, &er);
    SeqState *s = fw ? seqstate_new(m, forward_backend(fw), 1024, 0, 0, &er) : NULL;
    if (!s || seqstate_enable_rollback(s, m, 16, &er)) die("forward", er.msg);
    const int V = m->cfg.n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V * 16);
    int32_t toks[600];
    for (int i = 0; i < 600; i++) toks[i] = (i * 7919 + 13) % V;
    for (int p0 = 0; p0 < 500; p0 += 50)
        if (forward_run(fw, s, toks + p0, 50, logits, 1, &er)) die("prompt", er.msg);
    const size_t snap_n = seqstate_saved_bytes(s, 500);
    void *snap = malloc(snap_n);
    seqstate_save(s, snap);
#define RESTORE() seqstate_restore(s, snap, 500)

    /* ---- end to end ---- */
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        RESTORE();
        const double t0 = now_s();
        forward_run(fw, s, toks + 500, 1, logits, 1, &er);
        t[r] = now_s() - t0;
    }
    const double step = fastest(t, REPS);
    if (!json) {
        printf("model %s, %d threads, kernels %s; decode step %.2f ms\n\n", path, threads, forward_ops_name(fw), step * 1e3);
        printf("| n | batch of n (all logits) ms | tentative ms | overhead | keep(0) ms | keep(1) ms | keep(n-1) ms | keep(n-1) / step |\n");
        printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    } else {
        printf("{\"model\": \"%s\", \"threads\": %d, \"ops\": \"%s\", \"decode_step_ms\": %.4f, \"batches\": [", path, threads,
               forward_ops_name(fw), step * 1e3);
    }
    static const int ns[] = {2, 4, 8};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        double tp[REPS], tt[REPS], tk[3][REPS];
        for (int r = 0; r < REPS; r++) {
            RESTORE();
            double t0 = now_s();
            forward_run(fw, s, toks + 500, n, logits, n, &er);
            tp[r] = now_s() - t0;
            const int ks[3] = {0, 1, n - 1};
            for (int ki = 0; ki < 3; ki++) {
                RESTORE();
                BatchSeq q = {s, toks + 500, n, n, logits, true};
                t0 = now_s();
                if (forward_batch(fw, &q, 1, &er)) die("tentative", er.msg);
                const double t1 = now_s();
                if (forward_keep(fw, s, ks[ki], &er)) die("keep", er.msg);
                tk[ki][r] = now_s() - t1;
                if (ki == 0) tt[r] = t1 - t0;
            }
        }
        const double mp = fastest(tp, REPS), mt = fastest(tt, REPS), k0 = fastest(tk[0], REPS), k1 = fastest(tk[1], REPS),
                     kn = fastest(tk[2], REPS);
        if (!json)
            printf("| %d | %.2f | %.2f | %+.1f%% | %.3f | %.3f | %.3f | %.1f%% |\n", n, mp * 1e3, mt * 1e3, 100 * (mt / mp - 1),
                   k0 * 1e3, k1 * 1e3, kn * 1e3, 100 * kn / step);
        else
            printf("%s{\"n\": %d, \"plain_ms\": %.4f, \"tentative_ms\": %.4f, \"keep0_ms\": %.4f, \"keep1_ms\": %.4f, "
                   "\"keep_n1_ms\": %.4f}",
                   ni ? ", " : "", n, mp * 1e3, mt * 1e3, k0 * 1e3, k1 * 1e3, kn * 1e3);
    }

    /* ---- the checkpoint alternative, at the kernel level, for this model's delta-net shape ---- */
    const ModelConfig *c = &m->cfg;
    const int Hv = c->ssm_n_v_head, Hk = c->ssm_n_k_head, D = c->ssm_d_state, L = c->n_recurrent;
    Pool *pool = threads > 1 ? pool_create(threads, &er) : NULL;
    const Ops *ops = ops_cpu(isa);
    const size_t ns_state = (size_t)Hv * D * D, nmax = 8;
    float *q = big_alloc(sizeof(float) * nmax * Hk * D), *k = big_alloc(sizeof(float) * nmax * Hk * D);
    float *v = big_alloc(sizeof(float) * nmax * Hv * D), *g = big_alloc(sizeof(float) * nmax * Hv);
    float *b = big_alloc(sizeof(float) * nmax * Hv), *o = big_alloc(sizeof(float) * nmax * Hv * D);
    float *st = big_alloc(sizeof(float) * ns_state * (size_t)L), *steps = big_alloc(sizeof(float) * ns_state * nmax * (size_t)L);
    for (size_t i = 0; i < nmax * Hk * D; i++) q[i] = k[i] = 1.0f / sqrtf((float)D);
    for (size_t i = 0; i < nmax * Hv * D; i++) v[i] = 0.1f;
    for (size_t i = 0; i < nmax * Hv; i++) g[i] = -0.1f, b[i] = 0.5f;
    memset(st, 0, sizeof(float) * ns_state * (size_t)L);
    memset(steps, 0, sizeof(float) * ns_state * nmax * (size_t)L);
    OpCtx oc = {MATMUL_GGML, pool, NULL, 0};
    if (!json) {
        printf("\nthe other way, per-token checkpoints: %d delta-net layers of %d heads × %d × %d (%.1f MiB of state)\n\n", L,
               Hv, D, D, (double)ns_state * 4 * L / (1 << 20));
        printf("| n | scan ms | scan + checkpoints ms | checkpoint cost | restore (copy) ms | replay of n-1 ms |\n");
        printf("|---:|---:|---:|---:|---:|---:|\n");
    } else {
        printf("], \"checkpoints\": [");
    }
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        double a[REPS], cst[REPS], rs[REPS], rp[REPS];
        for (int r = 0; r < REPS; r++) {
            for (int pass = 0; pass < 3; pass++) {
                const double t0 = now_s();
                for (int l = 0; l < L; l++) {
                    DeltaNetArgs d = {pass == 2 ? n - 1 : n, Hk, Hv, D, D, c->arch == ARCH_QWEN3NEXT, q, k, v, g, b,
                                      st + (size_t)l * ns_state, o, NULL, pass == 1 ? steps + (size_t)l * ns_state * nmax : NULL};
                    ops->deltanet_recurrent(&oc, &d);
                }
                const double dt = now_s() - t0;
                if (pass == 0) a[r] = dt;
                else if (pass == 1) cst[r] = dt;
                else rp[r] = dt;
            }
            const double t0 = now_s();
            for (int l = 0; l < L; l++) memcpy(st + (size_t)l * ns_state, steps + (size_t)l * ns_state * nmax, ns_state * 4);
            rs[r] = now_s() - t0;
        }
        const double ma = fastest(a, REPS), mc = fastest(cst, REPS), mr = fastest(rs, REPS), mp = fastest(rp, REPS);
        if (!json)
            printf("| %d | %.3f | %.3f | %+.1f%% of a decode step | %.3f | %.3f |\n", n, ma * 1e3, mc * 1e3,
                   100 * (mc - ma) / step, mr * 1e3, mp * 1e3);
        else
            printf("%s{\"n\": %d, \"scan_ms\": %.4f, \"scan_checkpoints_ms\": %.4f, \"restore_ms\": %.4f, \"replay_ms\": %.4f}",
                   ni ? ", " : "", n, ma * 1e3, mc * 1e3, mr * 1e3, mp * 1e3);
    }
    if (json) printf("]}\n");
    pool_destroy(pool);
    free(snap), free(logits);
    seqstate_free(s);
    forward_free(fw);
    model_free(m);
    return 0;
}
