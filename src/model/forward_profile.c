/* forward_profile.c — profiling of the forward pass (model.h: forward_profile_*): the timed wrappers of
 * the heavy ops (forward_internal.h: fwd_*), time per phase, and major page faults during compute. On a
 * host backend an op is done when it returns, so wall time per op is its cost. */
#include "model/forward_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

double fwd_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fwd_phase(Forward *f, Phase ph, double *t0) {
    if (!f->prof.enabled) return;
    double t = fwd_now();
    f->prof.phase[ph] += t - *t0;
    *t0 = t;
}

void fwd_prof_op(Forward *f, const char *name, double dt) {
    Profile *p = &f->prof;
    int i = 0;
    while (i < p->n_ops && p->ops[i].name != name) i++;
    if (i == p->n_ops) {
        if (p->n_ops == PROFILE_MAX_OPS) return;
        p->ops[p->n_ops++] = (ProfOp){name, 0, 0};
    }
    p->ops[i].seconds += dt;
    p->ops[i].calls++;
}

static long majflt(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_majflt;
}

void fwd_prof_begin(Forward *f) {
    f->prof.flt0 = majflt();
    f->prof.t0 = fwd_now();
}

void fwd_prof_end(Forward *f) {
    f->prof.majflt += majflt() - f->prof.flt0;
    f->prof.total += fwd_now() - f->prof.t0;
    f->prof.forwards++;
    f->prof.tokens += (uint64_t)f->rows;
}

#define TIMED(f, label, call)                                                                                   \
    do {                                                                                                       \
        if (!(f)->prof.enabled) {                                                                              \
            call;                                                                                              \
        } else {                                                                                               \
            const double t_ = fwd_now();                                                                       \
            call;                                                                                              \
            fwd_prof_op((f), (label), fwd_now() - t_);                                                         \
        }                                                                                                      \
    } while (0)

void fwd_matmul(Forward *f, const char *name, const Weight *w, BView x, int64_t T, BView y) {
    const MatArgs a = {w, -1, NULL, 0, 0, x, y, T};
    TIMED(f, name, f->be->vt->matmul(f->be, &a));
}

void fwd_matmul_expert(Forward *f, const char *name, const Weight *w, int e, const void *data, BView x, int64_t T,
                       BView y) {
    const MatArgs a = {w, e, data, 0, 0, x, y, T};
    TIMED(f, name, f->be->vt->matmul(f->be, &a));
}

void fwd_conv_silu(Forward *f, BView x, int T, int C, int K, const Weight *w, BView state, BView y) {
    TIMED(f, "conv1d+silu", f->be->vt->conv_silu(f->be, x, T, C, K, w, state, y));
}

void fwd_deltanet(Forward *f, const DeltaArgs *a) {
    TIMED(f, a->chunked ? "deltanet (chunked)" : "deltanet (recurrent)", f->be->vt->deltanet(f->be, a));
}

void fwd_attention(Forward *f, const AttentionArgs *a) { TIMED(f, "attention", f->be->vt->attention(f->be, a)); }

void fwd_swiglu(Forward *f, BView g, BView u, int rows, int n) {
    TIMED(f, "swiglu", f->be->vt->swiglu(f->be, g, u, g, rows, n));
}

void forward_profile_enable(Forward *f, bool on) {
    memset(&f->prof, 0, sizeof f->prof);
    f->prof.enabled = on;
}

static int cmp_op(const void *a, const void *b) {
    const ProfOp *x = a, *y = b;
    return x->seconds < y->seconds ? 1 : x->seconds > y->seconds ? -1 : 0;
}

int forward_profile_report(const Forward *f, char *buf, size_t cap) {
    static const char *const names[PH_COUNT] = {"embedding", "attention layers", "delta-net pre-scan (proj+conv)",
                                                "delta-net scan", "delta-net post-scan (norm+ssm_out)",
                                                "MoE / FFN", "head (norm+logits)"};
    const Profile *p = &f->prof;
    size_t n = 0;
#define OUT(...) (n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, __VA_ARGS__))
    const double tot = p->total > 0 ? p->total : 1e-12;
    OUT("profile: %llu forward passes, %llu tokens, %.3f s, ops: %s, major page faults during compute: %ld\n",
        (unsigned long long)p->forwards, (unsigned long long)p->tokens, p->total, f->be->name, p->majflt);
    OUT("  %-36s %10s %7s\n", "phase", "ms", "%");
    double covered = 0;
    for (int i = 0; i < PH_COUNT; i++) {
        OUT("  %-36s %10.2f %6.1f%%\n", names[i], p->phase[i] * 1e3, 100 * p->phase[i] / tot);
        covered += p->phase[i];
    }
    OUT("  %-36s %10.2f %6.1f%%\n", "other (norms, residuals)", (p->total - covered) * 1e3, 100 * (p->total - covered) / tot);
    ProfOp ops[PROFILE_MAX_OPS];
    memcpy(ops, p->ops, sizeof(ProfOp) * (size_t)p->n_ops);
    qsort(ops, (size_t)p->n_ops, sizeof ops[0], cmp_op);
    OUT("  %-36s %10s %7s %8s\n", "op", "ms", "%", "calls");
    for (int i = 0; i < p->n_ops; i++)
        OUT("  %-36s %10.2f %6.1f%% %8llu\n", ops[i].name, ops[i].seconds * 1e3, 100 * ops[i].seconds / tot,
            (unsigned long long)ops[i].calls);
#undef OUT
    return (int)n;
}
