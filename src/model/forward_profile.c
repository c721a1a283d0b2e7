/* forward_profile.c — profiling of the forward pass (model.h: forward_profile_*): the timed wrappers of
 * the heavy ops (forward_internal.h: fwd_*), time per phase, and major page faults during compute. On a
 * host backend an op is done when it returns, so wall time per op is its cost. On a device (a backend with
 * timestamps: BackendVt.mark) the same phases and ops are timed on the device's clock from marks recorded
 * into the stream, read back when the pass ends, and the report adds the host↔device bytes per token. */
#include "model/forward_internal.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* mark tags: a phase's end is its Phase; these, and TAG_OP + the op's slot for an op's end */
enum { TAG_PASS = -1, TAG_OP_START = -2, TAG_PHASE_START = -3, TAG_OP = 1000 };

static bool dev_marks(const Forward *f) { return f->prof.enabled && f->be->vt->mark; }

double fwd_phase_start(Forward *f) {
    if (dev_marks(f)) f->be->vt->mark(f->be, TAG_PHASE_START);
    return now_s();
}

void fwd_phase(Forward *f, Phase ph, double *t0) {
    if (!f->prof.enabled) return;
    double t = now_s();
    f->prof.phase[ph] += t - *t0;
    *t0 = t;
    if (dev_marks(f)) f->be->vt->mark(f->be, (int)ph);
}

static int op_slot(Profile *p, const char *name) {
    int i = 0;
    while (i < p->n_ops && p->ops[i].name != name) i++;
    if (i == p->n_ops) {
        if (p->n_ops == PROFILE_MAX_OPS) return -1;
        p->ops[p->n_ops++] = (ProfOp){name, 0, 0, 0};
    }
    return i;
}

void fwd_prof_op(Forward *f, const char *name, double dt) {
    const int i = op_slot(&f->prof, name);
    if (i < 0) return;
    f->prof.ops[i].seconds += dt;
    f->prof.ops[i].calls++;
    if (dev_marks(f)) f->be->vt->mark(f->be, TAG_OP + i);
}

static long majflt(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_majflt;
}

void fwd_prof_begin(Forward *f) {
    f->prof.flt0 = majflt();
    f->prof.t0 = now_s();
    BackendStats st;
    backend_stats(f->be, &st);
    f->prof.h2d0 = st.h2d_bytes, f->prof.d2h0 = st.d2h_bytes;
    if (dev_marks(f)) f->be->vt->mark(f->be, TAG_PASS);
}

/* the device's marks of the pass: phase time from the last phase boundary to a phase's end, op time
 * between an op's start and end marks */
static void read_marks(Forward *f) {
    Profile *p = &f->prof;
    enum { CAP = 4096 };
    static int tags[CAP]; /* profiling only: one pass at a time per process is what the report assumes */
    static double sec[CAP];
    const int n = f->be->vt->marks(f->be, tags, sec, CAP);
    double t_phase = n ? sec[0] : 0, t_op = 0;
    for (int i = 0; i < n; i++) {
        const int g = tags[i];
        if (g == TAG_PASS || g == TAG_PHASE_START) t_phase = sec[i];
        else if (g == TAG_OP_START) t_op = sec[i];
        else if (g >= 0 && g < PH_COUNT) p->dev_phase[g] += sec[i] - t_phase, t_phase = sec[i];
        else if (g >= TAG_OP && g < TAG_OP + p->n_ops) p->ops[g - TAG_OP].dev_seconds += sec[i] - t_op;
    }
    if (n > 1) p->dev_total += sec[n - 1] - sec[0];
    p->device = p->device || n > 0;
}

void fwd_prof_end(Forward *f) {
    f->prof.majflt += majflt() - f->prof.flt0;
    f->prof.total += now_s() - f->prof.t0;
    f->prof.forwards++;
    f->prof.tokens += (uint64_t)f->rows;
    BackendStats st;
    backend_stats(f->be, &st);
    f->prof.h2d += st.h2d_bytes - f->prof.h2d0;
    f->prof.d2h += st.d2h_bytes - f->prof.d2h0;
    if (dev_marks(f)) {
        f->be->vt->mark(f->be, TAG_PASS); /* the pass's end, read with the rest at the next wait */
        Err e = {{0}};
        f->be->vt->submit(f->be, &e);
        f->be->vt->wait(f->be, &e);
        read_marks(f);
    }
}

#define TIMED(f, label, call)                                                                                   \
    do {                                                                                                       \
        if (!(f)->prof.enabled) {                                                                              \
            call;                                                                                              \
        } else {                                                                                               \
            if (dev_marks(f)) (f)->be->vt->mark((f)->be, TAG_OP_START);                                         \
            const double t_ = now_s();                                                                       \
            call;                                                                                              \
            fwd_prof_op((f), (label), now_s() - t_);                                                         \
        }                                                                                                      \
    } while (0)

/* a product of b->h while the norm is folded (Forward.hn): b->x with the norm */
static MatArgs fold(const Forward *f, MatArgs a) {
    if (f->hn && a.x.buf == f->b.h.buf && a.x.off == f->b.h.off) {
        a.x = f->b.x;
        a.x_norm = f->hn;
        a.x_eps = f->hn_eps;
    }
    return a;
}

void fwd_matmul(Forward *f, const char *name, const Weight *w, BView x, int64_t T, BView y) {
    const MatArgs a = fold(f, (MatArgs){w, -1, NULL, 0, 0, x, y, T, NULL, 0});
    TIMED(f, name, f->be->vt->matmul(f->be, &a));
}

void fwd_matmul_pair(Forward *f, const char *const name[3], const Weight *wa, const Weight *wc, BView x, int64_t T,
                     BView ya, BView yc) {
    if (!f->be->vt->matmul_pair) {
        fwd_matmul(f, name[0], wa, x, T, ya);
        fwd_matmul(f, name[1], wc, x, T, yc);
        return;
    }
    const MatArgs a = fold(f, (MatArgs){wa, -1, NULL, 0, 0, x, ya, T, NULL, 0});
    const MatArgs c = fold(f, (MatArgs){wc, -1, NULL, 0, 0, x, yc, T, NULL, 0});
    TIMED(f, name[2], f->be->vt->matmul_pair(f->be, &a, &c));
}

void fwd_out_matmul(Forward *f, const char *name, const Weight *w, BView x, int64_t T, int il) {
    if (!f->be->vt->matmul_add || fwd_dumping(f, il)) {
        fwd_matmul(f, name, w, x, T, f->b.tmp);
        return;
    }
    const MatArgs a = {w, -1, NULL, 0, 0, x, f->b.x, T, NULL, 0};
    TIMED(f, name, f->be->vt->matmul_add(f->be, &a));
    f->res_done = true;
}

bool fwd_out_matmul_gated(Forward *f, const char *name, const Weight *w, BView x, BView z, const Weight *nw, int n,
                          float eps, int64_t T, int il) {
    /* batches past fold_norm_rows (the rows a folded norm takes) would be declined: not offered, so a profile
     * lists no empty op */
    if (!f->be->vt->matmul_add_gated || !f->be->vt->matmul_add || T > f->be->fold_norm_rows || fwd_dumping(f, il))
        return false;
    const MatArgs a = {w, -1, NULL, 0, 0, x, f->b.x, T, NULL, 0};
    bool done = false;
    TIMED(f, name, done = f->be->vt->matmul_add_gated(f->be, &a, z, nw, n, eps));
    if (done) f->res_done = true;
    return done;
}

void fwd_matmul_expert(Forward *f, const char *name, const Weight *w, int e, const void *data, BView x, int64_t T,
                       BView y) {
    const MatArgs a = {w, e, data, 0, 0, x, y, T, NULL, 0};
    TIMED(f, name, f->be->vt->matmul(f->be, &a));
}

void fwd_conv_silu(Forward *f, BView x, int T, int C, int K, const Weight *w, BView state, BView y) {
    TIMED(f, "conv1d+silu", f->be->vt->conv_silu(f->be, x, T, C, K, w, state, y));
}

void fwd_deltanet(Forward *f, const DeltaArgs *a) {
    const char *form = backend_state_layout(f->be) == STATE_FUSED ? "deltanet (fused)" : a->chunked ? "deltanet (chunked)" : "deltanet (recurrent)";
    TIMED(f, form, f->be->vt->deltanet(f->be, a));
}

/* the ops for many sequences, under the single ops' labels (their shares of a step compare directly) */
void fwd_conv_silu_seqs(Forward *f, const ConvSeq *s, int n, int C, int K, const Weight *w) {
    TIMED(f, "conv1d+silu", f->be->vt->conv_silu_seqs(f->be, s, n, C, K, w));
}

void fwd_deltanet_seqs(Forward *f, const DeltaArgs *a, int n) {
    const char *form = backend_state_layout(f->be) == STATE_FUSED ? "deltanet (fused)"
                       : a->chunked                                ? "deltanet (chunked)"
                                                                   : "deltanet (recurrent)";
    TIMED(f, form, f->be->vt->deltanet_seqs(f->be, a, n));
}

void fwd_moe_ffn(Forward *f, const MoeArgs *a) { TIMED(f, "moe experts (fused)", f->be->vt->moe_ffn(f->be, a)); }

bool fwd_moe_ffn_combine(Forward *f, const MoeArgs *a, BView w, BView out) {
    if (!f->be->vt->moe_ffn_combine) return false;
    bool done = false;
    TIMED(f, "moe experts+combine (fused)", done = f->be->vt->moe_ffn_combine(f->be, a, w, out));
    return done;
}

bool fwd_out_matmul_sigmoid(Forward *f, const char *name, const Weight *w, BView x, BView g, int64_t T, int il) {
    if (!f->be->vt->matmul_add_sigmoid || T > f->be->fold_norm_rows || fwd_dumping(f, il)) return false;
    const MatArgs a = {w, -1, NULL, 0, 0, x, f->b.tmp, T, NULL, 0};
    bool done = false;
    TIMED(f, name, done = f->be->vt->matmul_add_sigmoid(f->be, &a, g, f->b.x));
    if (done) f->res_done = true;
    return done;
}

void fwd_attention(Forward *f, const AttentionArgs *a) { TIMED(f, "attention", f->be->vt->attention(f->be, a)); }

void fwd_attention_gated(Forward *f, const AttentionArgs *a, BView gate, int64_t g_row, int64_t g_head) {
    TIMED(f, "attention+gate", f->be->vt->attention_gated(f->be, a, gate, g_row, g_head));
}

void fwd_swiglu(Forward *f, BView g, BView u, int rows, int n) {
    TIMED(f, "swiglu", f->be->vt->swiglu(f->be, g, u, g, rows, n));
}

void fwd_gate_up(Forward *f, const char *const label[3], const Weight *wg, const Weight *wu, BView x, int64_t T, BView g,
                 BView u) {
    if (!f->be->vt->matmul_swiglu) { /* the three calls */
        fwd_matmul(f, label[0], wg, x, T, g);
        fwd_matmul(f, label[1], wu, x, T, u);
        fwd_swiglu(f, g, u, (int)T, (int)wg->rows);
        return;
    }
    const MatArgs ag = fold(f, (MatArgs){wg, -1, NULL, 0, 0, x, g, T, NULL, 0});
    const MatArgs au = fold(f, (MatArgs){wu, -1, NULL, 0, 0, x, u, T, NULL, 0});
    TIMED(f, label[2], f->be->vt->matmul_swiglu(f->be, &ag, &au));
}

/* ---- a device's command counts ---------------------------------------------------------------------------- */

static bool is_device(const Forward *f) { return f->be->vt->mark != NULL; }

void fwd_count_begin(Forward *f) {
    if (!is_device(f)) return;
    BackendStats st;
    backend_stats(f->be, &st);
    f->cnt_d0 = st.dispatches, f->cnt_b0 = st.barriers, f->cnt_h0 = st.host_ns;
    f->cnt_r0 = st.recorded, f->cnt_p0 = st.replays;
}

void fwd_count_end(Forward *f) {
    if (!is_device(f)) return;
    BackendStats st;
    backend_stats(f->be, &st);
    f->cnt.passes++;
    f->cnt.tokens += (uint64_t)f->rows;
    f->cnt.dispatches += st.dispatches - f->cnt_d0;
    f->cnt.barriers += st.barriers - f->cnt_b0;
    f->cnt.host_s += (double)(st.host_ns - f->cnt_h0) * 1e-9;
    f->cnt.recorded += st.recorded - f->cnt_r0;
    f->cnt.replays += st.replays - f->cnt_p0;
}

void fwd_count_layers(Forward *f, uint64_t *d0, uint64_t *b0, int n) {
    if (!is_device(f)) return;
    BackendStats st;
    backend_stats(f->be, &st);
    if (n > 0) {
        f->cnt.layer_steps += (uint64_t)n;
        f->cnt.layer_dispatches += st.dispatches - *d0;
        f->cnt.layer_barriers += st.barriers - *b0;
    }
    *d0 = st.dispatches, *b0 = st.barriers;
}

bool forward_device_counts(Forward *f, DevCounts *out, bool reset) {
    if (!is_device(f)) return false;
    *out = f->cnt;
    if (reset) memset(&f->cnt, 0, sizeof f->cnt);
    return true;
}

void forward_profile_enable(Forward *f, bool on) {
    memset(&f->prof, 0, sizeof f->prof);
    memset(&f->cnt, 0, sizeof f->cnt);
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
    /* on a device the phases and ops are the device's times; the host's total is still the wall time */
    const bool dev = p->device;
    const double total = dev ? p->dev_total : p->total, tot = total > 0 ? total : 1e-12;
    OUT("profile: %llu forward passes, %llu tokens, %.3f s, ops: %s, major page faults during compute: %ld\n",
        (unsigned long long)p->forwards, (unsigned long long)p->tokens, p->total, f->be->name, p->majflt);
    if (dev || p->h2d || p->d2h) {
        const double tk = p->tokens ? (double)p->tokens : 1;
        OUT("  device time %.3f s (timestamps); host<->device per token: %.0f B up, %.0f B down\n", p->dev_total,
            (double)p->h2d / tk, (double)p->d2h / tk);
    }
    if (is_device(f) && f->cnt.tokens) {
        const DevCounts *c = &f->cnt;
        const double tk = (double)c->tokens, ls = c->layer_steps ? (double)c->layer_steps : 1;
        OUT("  device commands per token: %.2f dispatches, %.2f barriers, host %.1f us issuing; per layer: %.2f "
            "dispatches, %.2f barriers (%s; the profile's timestamps add a barrier each: bench --json counts without)\n",
            (double)c->dispatches / tk, (double)c->barriers / tk, c->host_s * 1e6 / tk,
            (double)c->layer_dispatches / ls * ((double)c->passes / tk), (double)c->layer_barriers / ls * ((double)c->passes / tk),
            c->passes == c->tokens ? "decode" : "per pass, per token");
    }
    OUT("  %-36s %10s %7s\n", "phase", "ms", "%");
    double covered = 0;
    for (int i = 0; i < PH_COUNT; i++) {
        const double t = dev ? p->dev_phase[i] : p->phase[i];
        OUT("  %-36s %10.2f %6.1f%%\n", names[i], t * 1e3, 100 * t / tot);
        covered += t;
    }
    OUT("  %-36s %10.2f %6.1f%%\n", "other (norms, residuals)", (total - covered) * 1e3, 100 * (total - covered) / tot);
    ProfOp ops[PROFILE_MAX_OPS];
    memcpy(ops, p->ops, sizeof(ProfOp) * (size_t)p->n_ops);
    for (int i = 0; dev && i < p->n_ops; i++) ops[i].seconds = ops[i].dev_seconds;
    qsort(ops, (size_t)p->n_ops, sizeof ops[0], cmp_op);
    OUT("  %-36s %10s %7s %8s\n", "op", "ms", "%", "calls");
    for (int i = 0; i < p->n_ops; i++)
        OUT("  %-36s %10.2f %6.1f%% %8llu\n", ops[i].name, ops[i].seconds * 1e3, 100 * ops[i].seconds / tot,
            (unsigned long long)ops[i].calls);
#undef OUT
    return (int)n;
}
