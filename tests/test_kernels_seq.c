/* test_kernels_seq.c — the fast sequence kernels (kernels/cpu/deltanet_*, conv_*, attention_*) against the
 * scalar references, on every ISA level this CPU supports, with odd sizes and NaN-poisoned outputs:
 *   recurrent delta-net, conv + SiLU, mirroring attention (F32, F16, Q8_0 and Q4_0 caches): bit for bit
 *   (memcmp) with the reference;
 *   fused delta-net (the fast arithmetic's): bit for bit with its reference, in one batch or split, and
 *   against the recurrent reference, ≤ 1e-5;
 *   chunked delta-net: against the recurrent reference, max|Δ|/max|ref| ≤ 1e-5 on outputs and state;
 *   tiled attention: against attention_ref, max|Δ|/max|ref| ≤ 1e-5; in the fast arithmetic the same bits for a
 *   query row alone, in a batch or in chunks, across the switch from the mirroring kernel, on every cache type;
 *   1 thread and 2 threads: identical bits, for every kernel;
 *   many sequences in one op (deltanet_seqs in its three forms, conv_silu_seqs): each sequence the bits of its
 *   single call, every table, 1 and 2 threads. */
#include "test.h"

#include "base/fp16.h"

#include "base/pool.h"
#include "gguf/format.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/seq_kernels.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x243F6A8885A308D3ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static float *falloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) != 0) abort();
    return p;
}
static float *fpoison(size_t n) {
    float *p = falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}
static float *fdup(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static void l2n(float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    const float inv = 1.0f / (float)sqrt(s);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

static double rel_err(const float *ref, const float *x, size_t n) {
    double m = 0, d = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return INFINITY;
        m = fmax(m, fabs(ref[i]));
        d = fmax(d, fabs((double)ref[i] - x[i]));
    }
    return m > 0 ? d / m : d;
}

static bool same_bits(const float *a, const float *b, size_t n, size_t *where) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            if (where) *where = i;
            return false;
        }
    return true;
}

/* the ISA levels to test: every one the CPU supports above the reference */
static int test_isas(Isa *out) {
    int n = 0;
    for (int i = ISA_AVX2; i < ISA_COUNT; i++)
        if (isa_supported((Isa)i)) out[n++] = (Isa)i;
    return n;
}

static Pool *pool2(void) {
    static Pool *p;
    if (!p) {
        Err err = {{0}};
        p = pool_create(2, &err);
    }
    return p;
}

/* ---- delta-net ------------------------------------------------------------------------------------------ */

typedef struct DnCase {
    int T, Hk, Hv, D;
    bool grouped, state;
    float *q, *k, *v, *g, *beta, *s0;
} DnCase;

static void dn_make(DnCase *c) {
    const size_t nq = (size_t)c->T * c->Hk * c->D, nv = (size_t)c->T * c->Hv * c->D, ns = (size_t)c->Hv * c->D * c->D;
    c->q = falloc(nq), c->k = falloc(nq), c->v = falloc(nv), c->g = falloc((size_t)c->T * c->Hv),
    c->beta = falloc((size_t)c->T * c->Hv), c->s0 = falloc(ns);
    for (size_t i = 0; i < nq; i++) c->q[i] = frand(), c->k[i] = frand();
    for (int i = 0; i < c->T * c->Hk; i++) l2n(c->q + (size_t)i * c->D, c->D), l2n(c->k + (size_t)i * c->D, c->D);
    for (size_t i = 0; i < nv; i++) c->v[i] = frand();
    for (int i = 0; i < c->T * c->Hv; i++) {
        c->g[i] = -0.5f * (frand() + 1.0f) * (i % 7 == 0 ? 4.0f : 0.2f);
        c->beta[i] = 0.5f * (frand() + 1.0f);
    }
    for (size_t i = 0; i < ns; i++) c->s0[i] = c->state ? 0.3f * frand() : 0.0f;
}
static void dn_free(DnCase *c) { free(c->q), free(c->k), free(c->v), free(c->g), free(c->beta), free(c->s0); }

/* runs fn on a copy of the starting state; returns out and state (caller frees) */
static void dn_run(DeltaNetFn fn, const DnCase *c, Pool *pool, void *scratch, size_t scratch_bytes, float **out,
                   float **state) {
    const size_t nv = (size_t)c->T * c->Hv * c->D, ns = (size_t)c->Hv * c->D * c->D;
    *out = fpoison(nv);
    *state = fdup(c->s0, ns);
    OpCtx oc = {MATMUL_GGML, pool, scratch, scratch_bytes};
    DeltaNetArgs a = {c->T, c->Hk, c->Hv, c->D, c->D, c->grouped, c->q, c->k, c->v, c->g, c->beta, *state, *out, NULL, NULL};
    fn(&oc, &a);
}

/* the shapes of the bitwise delta-net tests: d = 20 (not a multiple of 16) takes the references' path */
static const struct {
    int T, Hk, Hv, D;
    bool grouped;
} dn_cases[] = {{1, 2, 4, 16, true},    {7, 2, 6, 32, false},  {5, 1, 3, 48, false},   {3, 2, 2, 80, true},
                {17, 2, 4, 128, false}, {2, 1, 1, 192, true},  {1, 16, 32, 128, true}, {4, 16, 16, 128, false},
                {9, 1, 2, 20, false},   {64, 2, 2, 64, true},  {130, 1, 2, 128, false}, {33, 3, 3, 112, false}};

TEST(kernels, deltanet_recurrent_bitwise) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    for (size_t ci = 0; ci < sizeof dn_cases / sizeof dn_cases[0]; ci++)
        for (int st = 0; st < 2; st++) {
            DnCase c = {.T = dn_cases[ci].T, .Hk = dn_cases[ci].Hk, .Hv = dn_cases[ci].Hv, .D = dn_cases[ci].D,
                        .grouped = dn_cases[ci].grouped, .state = st};
            dn_make(&c);
            const size_t nv = (size_t)c.T * c.Hv * c.D, ns = (size_t)c.Hv * c.D * c.D;
            float *ro, *rs;
            dn_run(deltanet_recurrent_ref, &c, NULL, NULL, 0, &ro, &rs);
            for (int ii = 0; ii < n_isa; ii++)
                for (int th = 1; th <= 2; th++) {
                    float *o, *s;
                    dn_run(deltanet_recurrent_cpu_select(isas[ii]), &c, th == 2 ? pool2() : NULL, NULL, 0, &o, &s);
                    size_t w = 0;
                    CHECK_MSG(same_bits(ro, o, nv, &w), "%s T=%d Hk=%d Hv=%d D=%d %d thread(s): out[%zu] %.9g vs %.9g",
                              isa_name(isas[ii]), c.T, c.Hk, c.Hv, c.D, th, w, ro[w], o[w]);
                    CHECK_MSG(same_bits(rs, s, ns, &w),
                              "%s T=%d Hk=%d Hv=%d D=%d %d thread(s): state[%zu] %.9g vs %.9g", isa_name(isas[ii]), c.T,
                              c.Hk, c.Hv, c.D, th, w, rs[w], s[w]);
                    free(o), free(s);
                }
            free(ro), free(rs);
            dn_free(&c);
        }
}

TEST(kernels, deltanet_chunked_vs_recurrent) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    static const int Ts[] = {1, 5, 63, 64, 65, 200, 1000};
    static const struct {
        int Hk, Hv, D;
        bool grouped;
    } shapes[] = {{2, 4, 16, true}, {2, 6, 32, false}, {1, 2, 128, false}, {2, 4, 48, true}};
    const size_t sbytes = deltanet_scratch_bytes(128, 128, 2);
    void *scratch = NULL;
    REQUIRE(posix_memalign(&scratch, 64, sbytes) == 0);
    double worst = 0;
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int st = 0; st < 2; st++) {
                if (shapes[si].D == 128 && Ts[ti] > 200) continue; /* the real size: up to 200 tokens */
                DnCase c = {.T = Ts[ti], .Hk = shapes[si].Hk, .Hv = shapes[si].Hv, .D = shapes[si].D,
                            .grouped = shapes[si].grouped, .state = st};
                dn_make(&c);
                const size_t nv = (size_t)c.T * c.Hv * c.D, ns = (size_t)c.Hv * c.D * c.D;
                float *ro, *rs;
                dn_run(deltanet_recurrent_ref, &c, NULL, NULL, 0, &ro, &rs);
                for (int ii = 0; ii < n_isa; ii++) {
                    float *o1, *s1, *o2, *s2;
                    DeltaNetFn fn = deltanet_chunked_cpu_select(isas[ii]);
                    dn_run(fn, &c, NULL, scratch, sbytes, &o1, &s1);
                    dn_run(fn, &c, pool2(), scratch, sbytes, &o2, &s2);
                    const double eo = rel_err(ro, o1, nv), es = rel_err(rs, s1, ns);
                    worst = fmax(worst, fmax(eo, es));
                    CHECK_MSG(eo <= 1e-5 && es <= 1e-5, "%s T=%d Hk=%d Hv=%d D=%d %s %s: output %.3g state %.3g",
                              isa_name(isas[ii]), c.T, c.Hk, c.Hv, c.D, c.grouped ? "grouped" : "tiled",
                              st ? "with state" : "zero state", eo, es);
                    CHECK_MSG(same_bits(o1, o2, nv, NULL) && same_bits(s1, s2, ns, NULL),
                              "%s T=%d D=%d: 1 and 2 threads differ", isa_name(isas[ii]), c.T, c.D);
                    free(o1), free(s1), free(o2), free(s2);
                }
                free(ro), free(rs);
                dn_free(&c);
            }
    test_note("chunked vs recurrent reference: worst relative error %.2e", worst);
    free(scratch);
}

/* tokens t0 … t1−1 of c through fn, on state (from state_in when not NULL), into out (rows t0 …) */
static void dn_run_part(DeltaNetFn fn, const DnCase *c, Pool *pool, void *scratch, size_t sbytes, int t0, int t1,
                        float *out, float *state, const float *state_in) {
    const size_t qk = (size_t)t0 * c->Hk * c->D, vo = (size_t)t0 * c->Hv * c->D, gb = (size_t)t0 * c->Hv;
    OpCtx oc = {MATMUL_FAST, pool, scratch, sbytes};
    DeltaNetArgs a = {t1 - t0, c->Hk, c->Hv, c->D, c->D, c->grouped, c->q + qk, c->k + qk, c->v + vo, c->g + gb,
                      c->beta + gb, state, out + vo, state_in, NULL};
    fn(&oc, &a);
}

/* the delta rule in float64 (outputs only), from c's inputs */
static double *dn_f64(const DnCase *c) {
    const int D = c->D;
    double *S = malloc(sizeof(double) * (size_t)c->Hv * D * D), *out = malloc(sizeof(double) * (size_t)c->T * c->Hv * D);
    for (size_t i = 0; i < (size_t)c->Hv * D * D; i++) S[i] = c->s0[i];
    for (int j = 0; j < c->Hv; j++) {
        const int kh = c->grouped ? j / (c->Hv / c->Hk) : j % c->Hk;
        for (int t = 0; t < c->T; t++) {
            const float *q = c->q + ((size_t)t * c->Hk + kh) * D, *k = c->k + ((size_t)t * c->Hk + kh) * D;
            const double e = exp((double)c->g[t * c->Hv + j]), beta = c->beta[t * c->Hv + j];
            for (int x = 0; x < D; x++) {
                double *row = S + ((size_t)j * D + x) * D, a = 0, o = 0;
                for (int i = 0; i < D; i++) row[i] *= e, a += row[i] * k[i];
                const double d = (c->v[((size_t)t * c->Hv + j) * D + x] - a) * beta;
                for (int i = 0; i < D; i++) row[i] += k[i] * d, o += row[i] * q[i];
                out[((size_t)t * c->Hv + j) * D + x] = o / sqrt((double)D);
            }
        }
    }
    free(S);
    return out;
}

/* The fast arithmetic's recurrent form (its state in its own layout, ops.h): every ISA equals the scalar
 * reference bit for bit (1 and 2 threads, in place and out of place), a batch split anywhere gives the same
 * bits (the columns' numbers and the scale steps do not depend on the batch), and it agrees with llama.cpp's
 * order (the recurrent reference) on the physical state. Decays: the usual mix, and strong ones (g down to
 * −90, so that the scale folds into the state every few tokens, and c underflows). */
TEST(kernels, deltanet_fused_bitwise) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    double worst = 0, e2_fused = 0, e2_llama = 0, n2 = 0;
    int n_resc = 0;
    for (size_t ci = 0; ci < sizeof dn_cases / sizeof dn_cases[0]; ci++)
        for (int st = 0; st < 3; st++) {
            DnCase c = {.T = dn_cases[ci].T, .Hk = dn_cases[ci].Hk, .Hv = dn_cases[ci].Hv, .D = dn_cases[ci].D,
                        .grouped = dn_cases[ci].grouped, .state = st > 0};
            dn_make(&c);
            if (st == 2) /* strong decays */
                for (int i = 0; i < c.T * c.Hv; i++) c.g[i] = i % 5 == 0 ? -12.0f : i % 11 == 3 ? -90.0f : c.g[i];
            const size_t nv = (size_t)c.T * c.Hv * c.D, ns = (size_t)c.Hv * c.D * c.D;
            const size_t nf = DELTANET_FUSED_FLOATS(c.Hv, c.D, c.D);
            float *f0 = falloc(nf), *ro = fpoison(nv), *rf = falloc(nf), *rs = falloc(ns), *lo, *ls;
            deltanet_state_to_fused(c.s0, f0, c.Hv, c.D, c.D);
            for (int j = 0; j < c.Hv; j++) { /* count the scale folds the reference takes */
                float cs = 1.0f;
                for (int t = 0; t < c.T; t++) {
                    cs *= expf(c.g[t * c.Hv + j]);
                    if (dn_fused_rescales(cs)) n_resc++, cs = 1.0f;
                }
            }
            memcpy(rf, f0, nf * sizeof(float));
            dn_run_part(deltanet_fused_ref, &c, NULL, NULL, 0, 0, c.T, ro, rf, NULL);
            deltanet_fused_to_state(rf, rs, c.Hv, c.D, c.D);
            dn_run(deltanet_recurrent_ref, &c, NULL, NULL, 0, &lo, &ls);
            const double eo = rel_err(lo, ro, nv), es = rel_err(ls, rs, ns);
            worst = fmax(worst, fmax(eo, es));
            if (c.D >= 64 && st < 2) { /* against float64: the squared errors of both orders */
                double *x = dn_f64(&c);
                for (size_t i = 0; i < nv; i++)
                    e2_fused += (ro[i] - x[i]) * (ro[i] - x[i]), e2_llama += (lo[i] - x[i]) * (lo[i] - x[i]), n2 += x[i] * x[i];
                free(x);
            }
            CHECK_MSG(eo <= 1e-5 && es <= 1e-5, "T=%d Hk=%d Hv=%d D=%d decays %d: fused vs recurrent output %.3g state %.3g",
                      c.T, c.Hk, c.Hv, c.D, st, eo, es);
            for (int ii = 0; ii < n_isa; ii++) {
                DeltaNetFn fn = deltanet_fused_cpu_select(isas[ii]);
                for (int th = 1; th <= 2; th++) {
                    float *o = fpoison(nv), *s = falloc(nf), *in = falloc(nf);
                    memcpy(in, f0, nf * sizeof(float));
                    for (size_t i = 0; i < nf; i++) s[i] = NAN;
                    if (th == 1) dn_run_part(fn, &c, NULL, NULL, 0, 0, c.T, o, in, NULL); /* in place */
                    else dn_run_part(fn, &c, pool2(), NULL, 0, 0, c.T, o, s, in);
                    size_t w = 0;
                    CHECK_MSG(same_bits(ro, o, nv, &w), "%s T=%d Hk=%d Hv=%d D=%d decays %d %d thread(s): out[%zu] %.9g vs %.9g",
                              isa_name(isas[ii]), c.T, c.Hk, c.Hv, c.D, st, th, w, ro[w], o[w]);
                    CHECK_MSG(same_bits(rf, th == 1 ? in : s, nf, &w),
                              "%s T=%d Hk=%d Hv=%d D=%d decays %d %d thread(s): state[%zu] %.9g vs %.9g", isa_name(isas[ii]),
                              c.T, c.Hk, c.Hv, c.D, st, th, w, rf[w], (th == 1 ? in : s)[w]);
                    if (th == 2) CHECK_MSG(same_bits(f0, in, nf, NULL), "%s: out of place, state_in changed", isa_name(isas[ii]));
                    free(o), free(s), free(in);
                }
                /* split batches (token by token when short, else at 1, 5 and 64) */
                float *o = fpoison(nv), *s = falloc(nf);
                memcpy(s, f0, nf * sizeof(float));
                int cut[] = {0, 1, 5, 64, c.T}, prev = 0;
                for (size_t k = 1; k < sizeof cut / sizeof cut[0]; k++) {
                    const int t1 = cut[k] < c.T ? cut[k] : c.T;
                    if (c.T <= 8)
                        for (int t = prev; t < t1; t++) dn_run_part(fn, &c, pool2(), NULL, 0, t, t + 1, o, s, NULL);
                    else if (t1 > prev) dn_run_part(fn, &c, pool2(), NULL, 0, prev, t1, o, s, NULL);
                    prev = t1 > prev ? t1 : prev;
                }
                size_t w = 0;
                CHECK_MSG(same_bits(ro, o, nv, &w) && same_bits(rf, s, nf, NULL),
                          "%s T=%d D=%d decays %d: split batches differ from one batch (out[%zu])", isa_name(isas[ii]), c.T,
                          c.D, st, w);
                free(o), free(s);
            }
            free(f0), free(ro), free(rf), free(rs), free(lo), free(ls);
            dn_free(&c);
        }
    const double rf = sqrt(e2_fused / n2), rl = sqrt(e2_llama / n2);
    test_note("fused vs llama.cpp's recurrent order: worst relative difference %.2e; rms error against float64: "
              "fused %.3e, llama.cpp's order %.3e; %d scale folds", worst, rf, rl, n_resc);
    CHECK_MSG(rf <= 1.1 * rl, "the fused order is less accurate than llama.cpp's: %.3e vs %.3e", rf, rl);
    CHECK_MSG(n_resc >= 50, "the strong decays folded the scale only %d times", n_resc);
}

/* A fused state from elsewhere (restored bytes) may hold any pending count: out of range or NaN reads as 0 in the
 * reference and the kernels alike, without reading outside the state. */
TEST(kernels, deltanet_fused_bad_count) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    DnCase c = {.T = 3, .Hk = 2, .Hv = 4, .D = 32, .grouped = false, .state = true};
    dn_make(&c);
    const size_t nv = (size_t)c.T * c.Hv * c.D, nf = DELTANET_FUSED_FLOATS(c.Hv, c.D, c.D);
    const float bad[] = {NAN, -1.0f, 1e9f, (float)DN_FUSED_C, INFINITY};
    for (size_t bi = 0; bi < sizeof bad / sizeof bad[0]; bi++) {
        float *f0 = falloc(nf), *ro = fpoison(nv), *rf = falloc(nf);
        deltanet_state_to_fused(c.s0, f0, c.Hv, c.D, c.D);
        for (int j = 0; j < c.Hv; j++) f0[nf - 2 * (size_t)c.Hv + 2 * j + 1] = bad[bi];
        memcpy(rf, f0, nf * sizeof(float));
        dn_run_part(deltanet_fused_ref, &c, NULL, NULL, 0, 0, c.T, ro, rf, NULL);
        for (int ii = 0; ii < n_isa; ii++) {
            float *o = fpoison(nv), *s = falloc(nf);
            memcpy(s, f0, nf * sizeof(float));
            dn_run_part(deltanet_fused_cpu_select(isas[ii]), &c, pool2(), NULL, 0, 0, c.T, o, s, NULL);
            CHECK_MSG(same_bits(ro, o, nv, NULL) && same_bits(rf, s, nf, NULL), "%s count %g: differs from the reference",
                      isa_name(isas[ii]), bad[bi]);
            free(o), free(s);
        }
        free(f0), free(ro), free(rf);
    }
    dn_free(&c);
}

/* ---- conv + SiLU ---------------------------------------------------------------------------------------- */

TEST(kernels, conv_silu_bitwise) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    static const struct {
        int T, C, K;
    } cases[] = {{1, 64, 4}, {5, 100, 4}, {17, 8192, 4}, {2, 37, 4}, {9, 48, 3}, {3, 131, 5}, {64, 40, 4}, {1, 7, 2},
                   {1, 6160, 4}, {1, 16, 4}, {2, 96, 4}, {1, 47, 4}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int T = cases[ci].T, C = cases[ci].C, K = cases[ci].K;
        const size_t nx = (size_t)T * C, ns = (size_t)C * (K - 1);
        float *x = falloc(nx), *w = falloc((size_t)C * K), *st = falloc(ns);
        /* wide range: large negative pre-activations take exp's saturation and underflow paths */
        for (size_t i = 0; i < nx; i++) x[i] = frand() * (i % 13 == 0 ? 120.0f : 3.0f);
        for (size_t i = 0; i < (size_t)C * K; i++) w[i] = frand();
        for (size_t i = 0; i < ns; i++) st[i] = frand() * 2.0f;
        float *ry = fpoison(nx), *rs = fdup(st, ns);
        OpCtx oc = {MATMUL_GGML, NULL, NULL, 0};
        conv_silu_ref(&oc, x, T, C, K, w, rs, ry);
        for (int ii = 0; ii < n_isa; ii++)
            for (int th = 1; th <= 2; th++) {
                float *y = fpoison(nx), *s = fdup(st, ns);
                OpCtx o2 = {MATMUL_GGML, th == 2 ? pool2() : NULL, NULL, 0};
                conv_cpu_select(isas[ii])(&o2, x, T, C, K, w, s, y);
                size_t at = 0;
                CHECK_MSG(same_bits(ry, y, nx, &at), "%s T=%d C=%d K=%d %d thread(s): y[%zu] %.9g vs %.9g",
                          isa_name(isas[ii]), T, C, K, th, at, ry[at], y[at]);
                CHECK_MSG(same_bits(rs, s, ns, &at), "%s T=%d C=%d K=%d: state[%zu]", isa_name(isas[ii]), T, C, K, at);
                free(y), free(s);
            }
        free(x), free(w), free(st), free(ry), free(rs);
    }
}

/* the SIMD exp against op_expf_poly over the ranges that matter, through the conv's SiLU (1 tap, weight 1:
 * y = silu(x)) — every lane, including denormal results and both saturations */
TEST(kernels, silu_poly_lanes) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    const int C = 4096, K = 2;
    float *x = falloc(C), *w = falloc((size_t)C * K), *st = falloc(C), *ry = falloc(C), *y = falloc(C);
    for (int i = 0; i < C; i++) {
        w[2 * i] = 0.0f, w[2 * i + 1] = 1.0f;
        /* −200 … 200 in uneven steps, and the exp argument's edges around ±88, ±103, ±133 */
        x[i] = -200.0f + 400.0f * (float)i / C + 0.01f * frand();
        if (i % 17 == 0) x[i] = (i % 2 ? 1.0f : -1.0f) * (88.0f + 50.0f * (frand() + 1.0f) / 2.0f);
    }
    x[0] = 0.0f, x[1] = -0.0f, x[2] = INFINITY, x[3] = -INFINITY;
    OpCtx oc = {MATMUL_GGML, NULL, NULL, 0};
    memset(st, 0, sizeof(float) * C);
    conv_silu_ref(&oc, x, 1, C, K, w, st, ry);
    for (int ii = 0; ii < n_isa; ii++) {
        memset(st, 0, sizeof(float) * C);
        conv_cpu_select(isas[ii])(&oc, x, 1, C, K, w, st, y);
        int bad = 0;
        for (int i = 0; i < C; i++)
            if (memcmp(&ry[i], &y[i], 4) != 0 && !(isnan(ry[i]) && isnan(y[i]))) {
                if (bad++ < 3)
                    CHECK_MSG(false, "%s: silu(%.9g) = %.9g, reference %.9g", isa_name(isas[ii]), x[i], y[i], ry[i]);
            }
        CHECK_MSG(bad == 0, "%s: %d lanes differ", isa_name(isas[ii]), bad);
    }
    free(x), free(w), free(st), free(ry), free(y);
}

/* ---- attention ------------------------------------------------------------------------------------------ */

typedef struct AtCase {
    int T, pos0, H, Hkv, d;
    float *q, *k, *v;
} AtCase;

static void at_make(AtCase *c) {
    const int n = c->pos0 + c->T;
    c->q = falloc((size_t)c->T * c->H * c->d);
    c->k = falloc((size_t)n * c->Hkv * c->d);
    c->v = falloc((size_t)n * c->Hkv * c->d);
    for (size_t i = 0; i < (size_t)c->T * c->H * c->d; i++) c->q[i] = 2.0f * frand();
    for (size_t i = 0; i < (size_t)n * c->Hkv * c->d; i++) c->k[i] = 2.0f * frand(), c->v[i] = frand();
}

/* the arithmetic and the cache's K and V formats the attention cases run with */
static MatMode at_mode = MATMUL_GGML;
static uint32_t at_kt = FMT_F32, at_vt = FMT_F32;

/* n cache values in format `type` (NULL for F32: the values themselves): F16 rounded to nearest even, Q8_0 and
 * Q4_0 by the format table's quantizers in blocks of 32, as the CPU backend's kv_append writes them */
static void *kv_encode(const float *x, size_t n, uint32_t type) {
    if (type == FMT_F32) return NULL;
    const Format *f = format_get(type);
    void *p = malloc(format_row_bytes(f, (int64_t)n));
    if (type == FMT_F16)
        for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = fp32_to_fp16(x[i]);
    else (f->from_float ? f->from_float : f->quantize)(x, p, (int64_t)n);
    return p;
}

/* minimal: only the scratch attention_ref asks for (the fast kernels then work on fewer heads at once) */
static float *at_run_s(AttentionFn fn, const AtCase *c, Pool *pool, bool minimal) {
    const int nth = pool_size(pool);
    size_t sb = attention_scratch_bytes(c->pos0 + c->T, nth);
    if (!minimal && attention_fast_scratch_bytes(c->pos0 + c->T, c->d, c->H / c->Hkv, nth) > sb)
        sb = attention_fast_scratch_bytes(c->pos0 + c->T, c->d, c->H / c->Hkv, nth);
    float *scratch = fpoison(sb / sizeof(float));
    float *out = fpoison((size_t)c->T * c->H * c->d);
    OpCtx oc = {at_mode, pool, scratch, sb};
    AttnArgs a = {c->T, c->pos0, c->H, c->Hkv, c->d, 1.0f / sqrtf((float)c->d), c->q, c->k, c->v, out, at_kt, at_vt};
    const size_t n = (size_t)(c->pos0 + c->T) * c->Hkv * c->d;
    void *kc = kv_encode(c->k, n, at_kt), *vc = kv_encode(c->v, n, at_vt);
    if (kc) a.k = kc;
    if (vc) a.v = vc;
    fn(&oc, &a);
    free(scratch), free(kc), free(vc);
    return out;
}
static float *at_run(AttentionFn fn, const AtCase *c, Pool *pool) { return at_run_s(fn, c, pool, false); }

static AttentionFn mirror_fn(Isa isa) { return isa == ISA_AVX512 ? attention_mirror_avx512 : attention_mirror_avx2; }
static AttentionFn tiled_fn(Isa isa) { return isa == ISA_AVX512 ? attention_tiled_avx512 : attention_tiled_avx2; }

/* An F16 cache in the fast arithmetic: the mirroring kernel equals the reference bit for bit, and the reference
 * equals the F32 path run on the F16-rounded values (the cache is widened exactly, nothing else changes). */
TEST(kernels, attention_f16_cache_fast_bitwise) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    static const struct {
        int T, pos0, H, Hkv, d;
    } cases[] = {{1, 0, 2, 1, 32}, {7, 0, 4, 2, 32}, {1, 216, 4, 1, 64}, {64, 0, 8, 1, 256}, {1, 1000, 16, 2, 256},
                 {5, 300, 8, 8, 128}, {33, 17, 4, 1, 48}, {300, 0, 2, 1, 32}, {3, 2100, 4, 2, 128}};
    at_mode = MATMUL_FAST;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        AtCase c = {cases[ci].T, cases[ci].pos0, cases[ci].H, cases[ci].Hkv, cases[ci].d, NULL, NULL, NULL};
        at_make(&c);
        const size_t no = (size_t)c.T * c.H * c.d, nkv = (size_t)(c.pos0 + c.T) * c.Hkv * c.d;
        at_kt = at_vt = FMT_F16;
        float *ro = at_run(attention_ref, &c, NULL);
        for (int ii = 0; ii < n_isa; ii++)
            for (int th = 1; th <= 2; th++) {
                /* (past ATTN_TILED_MIN_CTX the op tiles: the mirroring kernel itself; attention_tiled_fast_invariant) */
                float *o = at_run(c.pos0 + c.T > ATTN_TILED_MIN_CTX ? mirror_fn(isas[ii]) : attention_cpu_select(isas[ii]), &c,
                                  th == 2 ? pool2() : NULL);
                size_t at = 0;
                CHECK_MSG(same_bits(ro, o, no, &at), "%s T=%d pos0=%d H=%d Hkv=%d d=%d %d thread(s): out[%zu] %.9g vs %.9g",
                          isa_name(isas[ii]), c.T, c.pos0, c.H, c.Hkv, c.d, th, at, ro[at], o[at]);
                free(o);
            }
        at_kt = at_vt = FMT_F32;
        for (size_t i = 0; i < nkv; i++) c.k[i] = fp16_to_fp32(fp32_to_fp16(c.k[i])), c.v[i] = fp16_to_fp32(fp32_to_fp16(c.v[i]));
        float *rf = at_run(attention_ref, &c, NULL);
        CHECK_MSG(same_bits(ro, rf, no, NULL), "T=%d pos0=%d: the F16 cache is not the F32 path on rounded values", c.T, c.pos0);
        free(ro), free(rf), free(c.q), free(c.k), free(c.v);
    }
    at_mode = MATMUL_GGML;
}

/* Q8_0 / Q4_0 caches, K and V each in its own format, in the fast arithmetic: the mirroring kernel (and the op
 * as the table has it) equals the reference bit for bit on every ISA level, 1 and 2 threads, full and minimal
 * scratch (the whole-row and the column-block P·V); and the reference equals the F32 path on the dequantized
 * values (the format table's to_float: ggml's bits). Head dims 32 (scores only through the scalar tail), 96 and
 * 160 (vector part and tail), 64 … 256; contexts past ATTN_TILED_MIN_CTX (the mirroring kernel; the op tiles
 * there: attention_tiled_fast_invariant). */
TEST(kernels, attention_quant_cache_fast_bitwise) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    static const struct {
        int T, pos0, H, Hkv, d;
    } cases[] = {{1, 0, 2, 1, 32},   {7, 0, 4, 2, 32},     {1, 216, 4, 1, 64},   {33, 17, 4, 1, 96},   {5, 300, 8, 8, 128},
                 {64, 0, 8, 1, 256}, {1, 1000, 16, 2, 256}, {300, 0, 2, 1, 32}, {3, 2100, 4, 2, 128}, {2, 255, 2, 1, 160}};
    static const uint32_t kinds[][2] = {
        {FMT_Q8_0, FMT_Q8_0}, {FMT_Q4_0, FMT_Q4_0}, {FMT_Q8_0, FMT_Q4_0}, {FMT_Q4_0, FMT_F16}, {FMT_F32, FMT_Q8_0}};
    at_mode = MATMUL_FAST;
    int n_cmp = 0, n_same = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
            AtCase c = {cases[ci].T, cases[ci].pos0, cases[ci].H, cases[ci].Hkv, cases[ci].d, NULL, NULL, NULL};
            at_make(&c);
            const size_t no = (size_t)c.T * c.H * c.d, nkv = (size_t)(c.pos0 + c.T) * c.Hkv * c.d;
            at_kt = kinds[ki][0], at_vt = kinds[ki][1];
            float *ro = at_run(attention_ref, &c, NULL);
            for (int ii = 0; ii < n_isa; ii++)
                for (int th = 1; th <= 2; th++)
                    for (int minimal = 0; minimal < 2; minimal++) {
                        const bool op = !minimal && th == 1 && c.pos0 + c.T <= ATTN_TILED_MIN_CTX;
                        float *o = at_run_s(op ? attention_cpu_select(isas[ii]) : mirror_fn(isas[ii]), &c,
                                            th == 2 ? pool2() : NULL, minimal);
                        size_t at = 0;
                        const bool same = same_bits(ro, o, no, &at);
                        CHECK_MSG(same, "%s K %s V %s T=%d pos0=%d H=%d Hkv=%d d=%d %d thread(s)%s: out[%zu] %.9g vs %.9g",
                                  isa_name(isas[ii]), format_name(at_kt), format_name(at_vt), c.T, c.pos0, c.H, c.Hkv, c.d,
                                  th, minimal ? ", minimal scratch" : "", at, ro[at], o[at]);
                        n_cmp++, n_same += same;
                        free(o);
                    }
            /* the spec: the F32 path on the values the cache holds */
            for (int which = 0; which < 2; which++) {
                float *x = which ? c.v : c.k;
                const uint32_t t = which ? at_vt : at_kt;
                void *enc = kv_encode(x, nkv, t);
                if (enc) format_get(t)->to_float(enc, x, (int64_t)nkv);
                free(enc);
            }
            at_kt = at_vt = FMT_F32;
            float *rf = at_run(attention_ref, &c, NULL);
            CHECK_MSG(same_bits(ro, rf, no, NULL), "K %s V %s T=%d pos0=%d d=%d: not the F32 path on the dequantized values",
                      format_name(kinds[ki][0]), format_name(kinds[ki][1]), c.T, c.pos0, c.d);
            free(ro), free(rf), free(c.q), free(c.k), free(c.v);
        }
    test_note("quantized caches: %d of %d kernel runs bit-identical to the reference", n_same, n_cmp);
    at_mode = MATMUL_GGML;
}

TEST(kernels, attention_mirror_bitwise) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    static const struct {
        int T, pos0, H, Hkv, d;
    } cases[] = {{1, 0, 2, 1, 32},    {7, 0, 4, 2, 32},    {1, 216, 4, 1, 64},  {64, 0, 8, 1, 256}, {1, 1000, 16, 2, 256},
                 {5, 300, 8, 8, 128}, {33, 17, 4, 1, 48},  {2, 255, 2, 1, 256}, {1, 63, 4, 4, 80},  {300, 0, 2, 1, 32},
                 {1, 40, 2, 1, 512},  {3, 77, 4, 2, 512}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        AtCase c = {cases[ci].T, cases[ci].pos0, cases[ci].H, cases[ci].Hkv, cases[ci].d, NULL, NULL, NULL};
        at_make(&c);
        const size_t no = (size_t)c.T * c.H * c.d;
        float *ro = at_run(attention_ref, &c, NULL);
        for (int ii = 0; ii < n_isa; ii++)
            for (int th = 1; th <= 2; th++) {
                for (int minimal = 0; minimal < 2; minimal++) {
                    float *o = at_run_s(mirror_fn(isas[ii]), &c, th == 2 ? pool2() : NULL, minimal);
                    size_t at = 0;
                    CHECK_MSG(same_bits(ro, o, no, &at),
                              "%s T=%d pos0=%d H=%d Hkv=%d d=%d %d thread(s)%s: out[%zu] %.9g vs %.9g", isa_name(isas[ii]),
                              c.T, c.pos0, c.H, c.Hkv, c.d, th, minimal ? ", minimal scratch" : "", at, ro[at], o[at]);
                    free(o);
                }
                float *o;
                /* the op as the table has it: mirroring at these lengths */
                if (c.pos0 + c.T < ATTN_TILED_MIN_CTX && th == 1) {
                    o = at_run(attention_cpu_select(isas[ii]), &c, NULL);
                    CHECK_MSG(same_bits(ro, o, no, NULL), "%s: the op at context %d is not bit-identical",
                              isa_name(isas[ii]), c.pos0 + c.T);
                    free(o);
                }
            }
        free(ro), free(c.q), free(c.k), free(c.v);
    }
}

TEST(kernels, attention_tiled_tolerance) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    static const int Ts[] = {1, 7, 64, 300}, P0[] = {0, 1000}, G[] = {1, 4, 8}, Ds[] = {256, 32};
    double worst = 0;
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 2; b++)
            for (size_t gi = 0; gi < 3; gi++)
                for (size_t di = 0; di < 2; di++) {
                    const int Hkv = 1;
                    AtCase c = {Ts[a], P0[b], G[gi] * Hkv, Hkv, Ds[di], NULL, NULL, NULL};
                    at_make(&c);
                    const size_t no = (size_t)c.T * c.H * c.d;
                    /* the scalar reference where it is quick, else the mirroring kernel (bit-identical to it:
                     * attention_mirror_bitwise) */
                    const bool big = (double)c.T * c.H * (c.pos0 + c.T) * c.d > 2e7 && n_isa > 0;
                    float *ro = at_run(big ? mirror_fn(isas[n_isa - 1]) : attention_ref, &c, NULL);
                    for (int ii = 0; ii < n_isa; ii++) {
                        float *o1 = at_run(tiled_fn(isas[ii]), &c, NULL), *o2 = at_run(tiled_fn(isas[ii]), &c, pool2());
                        const double e = rel_err(ro, o1, no);
                        worst = fmax(worst, e);
                        CHECK_MSG(e <= 1e-5, "%s T=%d pos0=%d H=%d Hkv=%d d=%d: %.3g", isa_name(isas[ii]), c.T, c.pos0,
                                  c.H, c.Hkv, c.d, e);
                        CHECK_MSG(same_bits(o1, o2, no, NULL), "%s T=%d pos0=%d: 1 and 2 threads differ",
                                  isa_name(isas[ii]), c.T, c.pos0);
                        free(o1), free(o2);
                        /* the op as the table has it (mirroring or tiled by context length) */
                        o1 = at_run(attention_cpu_select(isas[ii]), &c, NULL);
                        CHECK_MSG(rel_err(ro, o1, no) <= 1e-5, "%s T=%d pos0=%d: the op is off by %.3g", isa_name(isas[ii]),
                                  c.T, c.pos0, rel_err(ro, o1, no));
                        free(o1);
                    }
                    free(ro), free(c.q), free(c.k), free(c.v);
                }
    /* the op at a context where the table switches to the tiled kernel */
    for (int ii = 0; ii < n_isa; ii++) {
        AtCase c = {2, ATTN_TILED_MIN_CTX, 8, 1, 32, NULL, NULL, NULL};
        at_make(&c);
        const size_t no = (size_t)c.T * c.H * c.d;
        float *ro = at_run(attention_ref, &c, NULL), *o = at_run(attention_cpu_select(isas[ii]), &c, pool2());
        CHECK_MSG(rel_err(ro, o, no) <= 1e-5, "%s: the op at context %d is off by %.3g", isa_name(isas[ii]), c.pos0 + c.T,
                  rel_err(ro, o, no));
        free(ro), free(o), free(c.q), free(c.k), free(c.v);
    }
    test_note("tiled attention vs reference: worst relative error %.2e", worst);
}

/* The fast arithmetic's op across ATTN_TILED_MIN_CTX (rows up to it mirror, later rows run the tiled kernel):
 * a query row gives the same bits alone (decode), in the whole batch, in chunks of 7 and in chunks of 4 (a
 * verify), with 1 or 2 threads, on F32, F16 and Q8_0 / Q4_0 caches; the mirrored rows are attention_ref's bits
 * and the tiled ones within 1e-5 of it. */
TEST(kernels, attention_tiled_fast_invariant) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    static const uint32_t kts[] = {FMT_F32, FMT_F16, FMT_Q8_0}, vts[] = {FMT_F32, FMT_F16, FMT_Q4_0};
    /* chunks of 1..4 tokens run the direct path (≤ 16 rows: the cache read by the products, rows padded to a
     * register tile), 5 and 7 the tile path, the whole batch too; group 4 and group 3 (decode's 3 rows padded) */
    static const int chunks[] = {1, 7, 4, 2, 3, 5};
    static const int groups[][2] = {{4, 1}, {6, 2}};
    at_mode = MATMUL_FAST;
    for (int gi = 0; gi < 2; gi++) {
        AtCase c = {40, ATTN_TILED_MIN_CTX - 12, groups[gi][0], groups[gi][1], 64, NULL, NULL, NULL}; /* rows 0..11 mirror, 12..39 tiled */
        at_make(&c);
        const size_t rowf = (size_t)c.H * c.d, no = (size_t)c.T * rowf;
        const int nm = ATTN_TILED_MIN_CTX - c.pos0;
        int bad = 0;
        double worst = 0;
        for (size_t ti = 0; ti < sizeof kts / sizeof kts[0]; ti++) {
            at_kt = kts[ti], at_vt = vts[ti];
            float *ro = at_run(attention_ref, &c, NULL);
            for (int ii = 0; ii < n_isa; ii++) {
                const AttentionFn fn = attention_cpu_select(isas[ii]);
                float *whole = at_run(fn, &c, NULL), *whole2 = at_run(fn, &c, pool2());
                CHECK_MSG(same_bits(whole, whole2, no, NULL), "%s types %u/%u: 1 and 2 threads differ", isa_name(isas[ii]), at_kt, at_vt);
                CHECK_MSG(same_bits(ro, whole, (size_t)nm * rowf, NULL), "%s types %u/%u: the mirrored rows are not the reference's",
                          isa_name(isas[ii]), at_kt, at_vt);
                const double e = rel_err(ro + nm * rowf, whole + nm * rowf, no - nm * rowf);
                worst = fmax(worst, e);
                CHECK_MSG(e <= 1e-5, "%s types %u/%u: the tiled rows are off by %.3g", isa_name(isas[ii]), at_kt, at_vt, e);
                for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++)
                    for (int t0 = 0; t0 < c.T; t0 += chunks[ci]) {
                        const int n = c.T - t0 < chunks[ci] ? c.T - t0 : chunks[ci];
                        AtCase s = {n, c.pos0 + t0, c.H, c.Hkv, c.d, c.q + t0 * rowf, c.k, c.v};
                        float *o = at_run(fn, &s, ci % 2 == 0 ? pool2() : NULL);
                        size_t w = 0;
                        if (!same_bits(whole + t0 * rowf, o, (size_t)n * rowf, &w))
                            bad++, CHECK_MSG(false, "%s types %u/%u: rows %d..%d in chunks of %d differ from the batch at row %zu",
                                             isa_name(isas[ii]), at_kt, at_vt, t0, t0 + n - 1, chunks[ci], t0 + w / rowf);
                        free(o);
                    }
                free(whole), free(whole2);
            }
            free(ro);
        }
        if (!bad)
            test_note("heads %d / %d, context %d..%d (tiled past %d), F32 / F16 / Q8_0+Q4_0 caches: alone = batch = chunks of "
                      "2, 3, 4, 5 and 7, 1 and 2 threads; mirrored rows = reference bits, tiled within %.2e", c.H, c.Hkv,
                      c.pos0 + 1, c.pos0 + c.T, ATTN_TILED_MIN_CTX, worst);
        free(c.q), free(c.k), free(c.v);
    }
    at_mode = MATMUL_GGML, at_kt = FMT_F32, at_vt = FMT_F32;
}

/* ---- many sequences in one op (Ops.deltanet_seqs, Ops.conv_silu_seqs) ------------------------------------ */

/* N sequences of one layer's shape, each its own T, inputs and state, through deltanet_seqs against N single calls
 * of the same table's form, bit for bit (outputs and states): every ISA level and the reference table, 1 and 2
 * threads (2 threads split the odd head counts into row ranges), the three forms, one sequence out of place
 * (state_in: a tentative one), d = 20 (the references' path) beside the kernels' */
TEST(kernels, deltanet_seqs_bitwise) {
    Isa isas[ISA_COUNT + 1];
    int n_isa = test_isas(isas);
    isas[n_isa++] = ISA_REF;
    static const struct {
        int Hk, Hv, D;
        bool grouped;
    } shapes[] = {{1, 3, 32, true}, {2, 6, 128, false}, {1, 1, 64, true}, {3, 3, 20, false}, {1, 5, 48, false}};
    enum { N = 5 };
    static const int Ts[N] = {1, 4, 1, 17, 70};
    const size_t sbytes = deltanet_scratch_bytes(128, 128, 2);
    void *scratch = NULL;
    if (posix_memalign(&scratch, 64, sbytes) != 0) abort();
    int n_cmp = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        DnCase c[N];
        for (int i = 0; i < N; i++) {
            c[i] = (DnCase){.T = Ts[i], .Hk = shapes[si].Hk, .Hv = shapes[si].Hv, .D = shapes[si].D,
                            .grouped = shapes[si].grouped, .state = true};
            dn_make(&c[i]);
        }
        const int D = shapes[si].D, Hv = shapes[si].Hv;
        for (int form = DN_FORM_RECURRENT; form <= DN_FORM_FUSED; form++) {
            const size_t ns = form == DN_FORM_FUSED ? DELTANET_FUSED_FLOATS(Hv, D, D) : (size_t)Hv * D * D;
            float *s0[N];
            for (int i = 0; i < N; i++) {
                s0[i] = falloc(ns);
                if (form == DN_FORM_FUSED) deltanet_state_to_fused(c[i].s0, s0[i], Hv, D, D);
                else memcpy(s0[i], c[i].s0, ns * sizeof(float));
            }
            for (int ii = 0; ii < n_isa; ii++) {
                const Ops *ops = isas[ii] == ISA_REF ? &ops_ref : ops_cpu(isas[ii]);
                const DeltaNetFn one = form == DN_FORM_FUSED     ? ops->deltanet_fused
                                       : form == DN_FORM_CHUNKED ? ops->deltanet_chunked
                                                                 : ops->deltanet_recurrent;
                for (int th = 1; th <= 2; th++) {
                    OpCtx oc = {form == DN_FORM_FUSED ? MATMUL_FAST : MATMUL_GGML, th == 2 ? pool2() : NULL, scratch, sbytes};
                    float *ro[N], *rs[N], *o[N], *s[N];
                    DeltaNetArgs a[N];
                    DeltaNetForm fm[N];
                    for (int i = 0; i < N; i++) {
                        const size_t nv = (size_t)c[i].T * Hv * D;
                        const bool out_of_place = i == 2; /* the new state beside the old, as a tentative sequence's */
                        ro[i] = fpoison(nv), o[i] = fpoison(nv);
                        rs[i] = out_of_place ? fpoison(ns) : fdup(s0[i], ns);
                        s[i] = out_of_place ? fpoison(ns) : fdup(s0[i], ns);
                        a[i] = (DeltaNetArgs){c[i].T, c[i].Hk, Hv, D, D, c[i].grouped, c[i].q, c[i].k, c[i].v, c[i].g,
                                              c[i].beta, rs[i], ro[i], out_of_place ? s0[i] : NULL, NULL};
                        one(&oc, &a[i]);
                        a[i].state = s[i], a[i].out = o[i];
                        fm[i] = (DeltaNetForm)form;
                    }
                    ops->deltanet_seqs(&oc, a, fm, N);
                    for (int i = 0; i < N; i++) {
                        const size_t nv = (size_t)c[i].T * Hv * D;
                        size_t w = 0;
                        CHECK_MSG(same_bits(ro[i], o[i], nv, &w), "%s form %d Hv=%d D=%d %d thread(s) seq %d (T=%d): out[%zu] %.9g vs %.9g",
                                  ops->name, form, Hv, D, th, i, c[i].T, w, ro[i][w], o[i][w]);
                        CHECK_MSG(same_bits(rs[i], s[i], ns, &w), "%s form %d Hv=%d D=%d %d thread(s) seq %d (T=%d): state[%zu]",
                                  ops->name, form, Hv, D, th, i, c[i].T, w);
                        free(ro[i]), free(rs[i]), free(o[i]), free(s[i]);
                        n_cmp++;
                    }
                }
            }
            for (int i = 0; i < N; i++) free(s0[i]);
        }
        for (int i = 0; i < N; i++) dn_free(&c[i]);
    }
    free(scratch);
    test_note("%d sequences compared, the same bits as their single calls", n_cmp);
}

/* N sequences (T 1 … 20) through conv_silu_seqs against N conv_silu calls: bit for bit, every table, 1 and 2
 * threads, channels not a multiple of 64 or of 16 */
TEST(kernels, conv_silu_seqs_bitwise) {
    Isa isas[ISA_COUNT + 1];
    int n_isa = test_isas(isas);
    isas[n_isa++] = ISA_REF;
    static const struct {
        int C, K;
    } shapes[] = {{6144, 4}, {100, 4}, {37, 3}, {131, 5}};
    enum { N = 6 };
    static const int Ts[N] = {1, 1, 3, 20, 1, 2};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int C = shapes[si].C, K = shapes[si].K;
        const size_t ns = (size_t)C * (K - 1);
        float *w = falloc((size_t)C * K), *x[N], *st[N];
        for (size_t i = 0; i < (size_t)C * K; i++) w[i] = frand();
        for (int i = 0; i < N; i++) {
            x[i] = falloc((size_t)Ts[i] * C), st[i] = falloc(ns);
            for (size_t k = 0; k < (size_t)Ts[i] * C; k++) x[i][k] = frand() * 3.0f;
            for (size_t k = 0; k < ns; k++) st[i][k] = frand() * 2.0f;
        }
        for (int ii = 0; ii < n_isa; ii++) {
            const Ops *ops = isas[ii] == ISA_REF ? &ops_ref : ops_cpu(isas[ii]);
            for (int th = 1; th <= 2; th++) {
                OpCtx oc = {MATMUL_FAST, th == 2 ? pool2() : NULL, NULL, 0};
                float *ry[N], *rs[N], *y[N], *s[N];
                ConvSeqArgs sa[N];
                for (int i = 0; i < N; i++) {
                    const size_t nx = (size_t)Ts[i] * C;
                    ry[i] = fpoison(nx), y[i] = fpoison(nx), rs[i] = fdup(st[i], ns), s[i] = fdup(st[i], ns);
                    ops->conv_silu(&oc, x[i], Ts[i], C, K, w, rs[i], ry[i]);
                    sa[i] = (ConvSeqArgs){x[i], Ts[i], s[i], y[i]};
                }
                ops->conv_silu_seqs(&oc, sa, N, C, K, w);
                for (int i = 0; i < N; i++) {
                    size_t at = 0;
                    CHECK_MSG(same_bits(ry[i], y[i], (size_t)Ts[i] * C, &at) && same_bits(rs[i], s[i], ns, NULL),
                              "%s C=%d K=%d %d thread(s) seq %d (T=%d): differs from its single call (y[%zu])", ops->name, C,
                              K, th, i, Ts[i], at);
                    free(ry[i]), free(rs[i]), free(y[i]), free(s[i]);
                }
            }
        }
        for (int i = 0; i < N; i++) free(x[i]), free(st[i]);
        free(w);
    }
}

/* more sequences than one pool job takes (OPS_SEQS_MAX): 40 one-token sequences, each the bits of its single call
 * (fused and recurrent forms, conv), 2 threads */
TEST(kernels, seqs_more_than_one_job) {
    Isa isas[ISA_COUNT];
    const int n_isa = test_isas(isas);
    enum { N = OPS_SEQS_MAX + 8, HV = 3, D = 32, C = 200, K = 4 };
    DnCase c[N];
    float *x[N], *st[N], *w = falloc((size_t)C * K);
    for (size_t i = 0; i < (size_t)C * K; i++) w[i] = frand();
    for (int i = 0; i < N; i++) {
        c[i] = (DnCase){.T = 1 + i % 2, .Hk = 1, .Hv = HV, .D = D, .grouped = true, .state = true};
        dn_make(&c[i]);
        x[i] = falloc((size_t)c[i].T * C), st[i] = falloc((size_t)C * (K - 1));
        for (size_t k = 0; k < (size_t)c[i].T * C; k++) x[i][k] = frand();
        for (size_t k = 0; k < (size_t)C * (K - 1); k++) st[i][k] = frand();
    }
    for (int ii = 0; ii < n_isa; ii++) {
        const Ops *ops = ops_cpu(isas[ii]);
        OpCtx oc = {MATMUL_FAST, pool2(), NULL, 0};
        for (int form = DN_FORM_RECURRENT; form <= DN_FORM_FUSED; form += 2) {
            const size_t ns = form == DN_FORM_FUSED ? DELTANET_FUSED_FLOATS(HV, D, D) : (size_t)HV * D * D;
            float *ro[N], *rs[N], *o[N], *s[N];
            DeltaNetArgs a[N];
            DeltaNetForm fm[N];
            for (int i = 0; i < N; i++) {
                const size_t nv = (size_t)c[i].T * HV * D;
                ro[i] = fpoison(nv), o[i] = fpoison(nv), rs[i] = falloc(ns), s[i] = falloc(ns);
                if (form == DN_FORM_FUSED) deltanet_state_to_fused(c[i].s0, rs[i], HV, D, D);
                else memcpy(rs[i], c[i].s0, ns * sizeof(float));
                memcpy(s[i], rs[i], ns * sizeof(float));
                a[i] = (DeltaNetArgs){c[i].T, 1, HV, D, D, true, c[i].q, c[i].k, c[i].v, c[i].g, c[i].beta, rs[i], ro[i], NULL, NULL};
                (form == DN_FORM_FUSED ? ops->deltanet_fused : ops->deltanet_recurrent)(&oc, &a[i]);
                a[i].state = s[i], a[i].out = o[i], fm[i] = (DeltaNetForm)form;
            }
            ops->deltanet_seqs(&oc, a, fm, N);
            for (int i = 0; i < N; i++) {
                CHECK_MSG(same_bits(ro[i], o[i], (size_t)c[i].T * HV * D, NULL) && same_bits(rs[i], s[i], ns, NULL),
                          "%s form %d seq %d of %d: differs from its single call", ops->name, form, i, N);
                free(ro[i]), free(rs[i]), free(o[i]), free(s[i]);
            }
        }
        float *ry[N], *rs[N], *y[N], *s[N];
        ConvSeqArgs sa[N];
        for (int i = 0; i < N; i++) {
            const size_t nx = (size_t)c[i].T * C, ns = (size_t)C * (K - 1);
            ry[i] = fpoison(nx), y[i] = fpoison(nx), rs[i] = fdup(st[i], ns), s[i] = fdup(st[i], ns);
            ops->conv_silu(&oc, x[i], c[i].T, C, K, w, rs[i], ry[i]);
            sa[i] = (ConvSeqArgs){x[i], c[i].T, s[i], y[i]};
        }
        ops->conv_silu_seqs(&oc, sa, N, C, K, w);
        for (int i = 0; i < N; i++) {
            CHECK_MSG(same_bits(ry[i], y[i], (size_t)c[i].T * C, NULL) && same_bits(rs[i], s[i], (size_t)C * (K - 1), NULL),
                      "%s conv seq %d of %d: differs from its single call", ops->name, i, N);
            free(ry[i]), free(rs[i]), free(y[i]), free(s[i]);
        }
    }
    for (int i = 0; i < N; i++) dn_free(&c[i]), free(x[i]), free(st[i]);
    free(w);
}
