/* test_backend_ops.c — every op of the backend interface (backend/backend.h) on every backend against the
 * reference backend, on odd shapes, in the manner of ggml's test-backend-ops: inputs are uploaded, the op
 * runs, outputs are downloaded, and only the vtable is used, so a new backend is tested by its row in the
 * registry (backend/registry.c: backend_list() reads it). Host backends must match the reference bit for bit;
 * a device backend states an NMSE bound per op (device_bound below). */
#include "test.h"
#include "test_rand.h"

#include "backend/backend.h"
#include "kernels/cpu/isa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NA 8192 /* floats in each random input of the row ops (their outputs: two blocks of NA) */
#define NA_ROUTE NA /* moe_route's selection: the second block's first 2048 ints */

/* ---- the backends under test ------------------------------------------------------------------------------ */

typedef struct BeCase {
    char label[32];
    BackendOptions o;
    double nmse;  /* 0: bit for bit */
    bool device;  /* a device backend: NMSE bounds per op (device_bound) */
} BeCase;

/* The reference first, then every host backend at every ISA this CPU has (1 and 2 threads), then every device
 * of every device backend in the registry (a device backend with none here makes the test SKIP, after the
 * host backends' cases ran). */
static int backend_list(BeCase *out, MatMode mode) {
    int n = 0;
    out[n++] = (BeCase){"ref", {.name = "ref", .cpu.isa = ISA_REF, .n_threads = 1, .mode = mode}, 0, false};
    for (int isa = ISA_REF; isa < ISA_COUNT; isa++) {
        if (!isa_supported((Isa)isa)) continue;
        for (int th = 1; th <= 2; th++) {
            BeCase *c = &out[n++];
            *c = (BeCase){"", {.name = "cpu", .cpu.isa = isa, .n_threads = th, .mode = mode, .cpu.pack = true}, 0, false};
            snprintf(c->label, sizeof c->label, "cpu:%s/%dt", isa_name((Isa)isa), th);
        }
    }
    int nr;
    const BackendReg *reg = backend_registry(&nr);
    for (int r = 0; r < nr; r++) {
        if (reg[r].host) continue;
        Err err = {{0}};
        if (!backend_available(&reg[r], &err)) {
            test_skip("%s: %s (its cases did not run)", reg[r].name, err.msg);
            continue;
        }
        BeCase *c = &out[n++];
        *c = (BeCase){"", {.name = reg[r].name, .mode = mode}, 0, true};
        snprintf(c->label, sizeof c->label, "%s", reg[r].name);
    }
    return n;
}

/* ---- the NMSE bounds of a device backend, per op ------------------------------------------------------------
 * A device computes in F32 in its own summation orders, with its own exp / sin / cos, and multiplies F32
 * activations with dequantized weights in either mode (its ggml-mode products are compared with the
 * reference's exact mode, over_backends). Pure data movement is bit for bit (0). The worst NMSE seen per op
 * is printed after each test (device_report). */
static double device_bound(const char *op, const char *what, MatMode mode) {
    static const struct {
        const char *op;
        double exact, ggml;
    } bounds[] = {
        {"matmul", 1e-10, 1e-10},   {"get_rows", 1e-12, 1e-12},   {"memory", 0, 0},          {"copy_rows", 0, 0},
        {"gather_rows", 0, 0},     {"scatter_rows", 0, 0},       {"kv_append", 0, 0},       {"conv_silu", 1e-10, 1e-10},
        {"deltanet", 1e-10, 1e-10}, {"attention", 1e-10, 1e-10},
    };
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++)
        if (strcmp(op, bounds[i].op) == 0) return mode == MATMUL_EXACT ? bounds[i].exact : bounds[i].ggml;
    return 1e-10; /* the other row ops: F32 throughout */
}

/* A device whose batched products run on tensor cores rounds their inputs to f16 (11 bits): products and
 * the fused experts get 1e-5 there. */
static double device_bound_for(Backend *be, const char *op, const char *what, MatMode mode) {
    BackendStats st;
    backend_stats(be, &st);
    if (st.f16_products && (strcmp(op, "matmul") == 0 || strcmp(op, "moe_ffn") == 0)) return 1e-5;
    return device_bound(op, what, mode);
}

#define MAX_REPORT 32
typedef struct OpWorst {
    const char *op;
    double worst;
    int cases;
} OpWorst;
static OpWorst report[MAX_REPORT];
static int n_report;

static void device_seen(const char *op, double e) {
    int i = 0;
    while (i < n_report && strcmp(report[i].op, op) != 0) i++;
    if (i == n_report) {
        if (n_report == MAX_REPORT) return;
        report[n_report++] = (OpWorst){op, 0, 0};
    }
    if (e > report[i].worst) report[i].worst = e;
    report[i].cases++;
}

/* the worst NMSE of the device backend per op since the last report */
static void device_report(void) {
    for (int i = 0; i < n_report; i++)
        test_note("device %-22s worst NMSE %.3g over %d cases", report[i].op, report[i].worst, report[i].cases);
    n_report = 0;
}

/* ---- a bump allocator over one device buffer per backend ---------------------------------------------------- */

typedef struct Env {
    Backend *be;
    BBuf *buf;
    size_t at, cap;
} Env;

static bool env_open(Env *e, const BeCase *c, const Weight *w, int n_w) {
    Err err = {{0}};
    memset(e, 0, sizeof *e);
    e->be = backend_create(&c->o, &err);
    if (!e->be) return test_check(false, __FILE__, __LINE__, "backend_create", "%s: %s", c->label, err.msg);
    if (e->be->vt->bind(e->be, w, n_w, &err))
        return test_check(false, __FILE__, __LINE__, "bind", "%s: %s", c->label, err.msg);
    const BackendSizes sz = {.max_rows = 80, .max_cols = 512, .max_ctx = 64, .head_dim = 256, .gqa_group = 8, .d_k = 128, .d_v = 128};
    if (e->be->vt->reserve(e->be, &sz, &err)) return test_check(false, __FILE__, __LINE__, "reserve", "%s", err.msg);
    e->cap = 1u << 20; /* every case fits */
    if (!(e->buf = e->be->vt->alloc(e->be, e->cap, &err))) return test_check(false, __FILE__, __LINE__, "alloc", "%s", err.msg);
    return true;
}

static void env_close(Env *e) {
    if (e->buf) e->be->vt->free(e->be, e->buf);
    backend_destroy(e->be);
}

/* A fresh view of bytes, uploaded from src (or zero). */
static BView put(Env *e, const void *src, size_t bytes) {
    ASSERT(e->at + bytes <= e->cap);
    BView v = {e->buf, e->at};
    e->at += (bytes + 63) & ~(size_t)63;
    if (src) e->be->vt->upload(e->be, v, src, bytes);
    else e->be->vt->fill(e->be, v, 0, bytes);
    return v;
}

static float *get(Env *e, BView v, size_t n) {
    float *h = malloc(n * sizeof *h + 4);
    e->be->vt->download(e->be, h, v, n * sizeof *h);
    return h;
}

static float *frnd(size_t n, float scale) {
    float *x = malloc(n * sizeof *x + 4);
    for (size_t i = 0; i < n; i++) x[i] = trand_f() * scale;
    return x;
}

/* Compares a backend's output with the reference's: bitwise, or NMSE ≤ bound. */
static bool same(const char *op, const char *what, const BeCase *c, const float *ref, const float *x, size_t n) {
    if (c->device && strcmp(op, "moe_route") == 0 && memcmp(ref + NA_ROUTE, x + NA_ROUTE, 2048 * 4) != 0)
        return test_check(false, __FILE__, __LINE__, op, "%s %s (%s): another expert selection", op, what, c->label);
    if (c->nmse == 0) {
        if (c->device) device_seen(op, 0);
        for (size_t i = 0; i < n; i++)
            if (memcmp(&ref[i], &x[i], 4) != 0)
                return test_check(false, __FILE__, __LINE__, op, "%s %s (%s): [%zu] %.9g, reference %.9g", op, what,
                                  c->label, i, x[i], ref[i]);
        return true;
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]), den += (double)ref[i] * ref[i];
    const double e = den > 0 ? num / den : num;
    if (c->device) device_seen(op, e);
    return test_check(e <= c->nmse, __FILE__, __LINE__, op, "%s %s (%s): NMSE %.3g > %.3g", op, what, c->label, e, c->nmse);
}

/* Runs `run` (which fills out[0..n)) on every backend and compares with the reference. */
typedef void (*RunFn)(Env *e, const void *ctx, float *out);
/* The op's output on the first listed backend (the scalar reference), malloc'd, for a check against its
 * definition; NULL when that backend does not open (env_open has reported why). */
static float *run_on_reference(MatMode mode, const Weight *w, int n_w, RunFn run, const void *ctx, size_t no) {
    BeCase all[16];
    backend_list(all, mode);
    Env e;
    float *out = NULL;
    if (env_open(&e, &all[0], w, n_w)) {
        out = malloc(no * sizeof *out);
        run(&e, ctx, out);
    }
    env_close(&e);
    return out;
}
static int over_backends(const char *op, const char *what, MatMode mode, const Weight *w, int n_w, RunFn run,
                         const void *ctx, size_t n) {
    BeCase cs[16];
    const int nb = backend_list(cs, mode);
    float *ref = NULL;
    int compared = 0;
    /* the one op the CPU kernels do not reproduce bit for bit: the chunked delta-net (float accumulation in
     * another order and the SIMD exp in the within-chunk decays, docs/KERNELS.md); its bound */
    const bool chunked_dn = strcmp(op, "deltanet") == 0 && strstr(what, "chunked");
    /* a device multiplies F32 activations in every mode: in the ggml and fast modes its products are compared
     * with the reference's exact mode (their activation rounding is the CPU's, not an error) */
    float *ref_exact = NULL;
    for (int i = 0; i < nb; i++) {
        if (chunked_dn && cs[i].o.cpu.isa != ISA_REF && cs[i].nmse == 0) cs[i].nmse = 1e-12;
        const bool vs_exact = cs[i].device && mode != MATMUL_EXACT && strcmp(op, "matmul") == 0;
        if (vs_exact && !ref_exact) {
            BeCase rc = cs[0];
            rc.o.mode = MATMUL_EXACT;
            Env e;
            if (env_open(&e, &rc, w, n_w)) {
                ref_exact = malloc(n * sizeof *ref_exact + 4);
                run(&e, ctx, ref_exact);
            }
            env_close(&e);
        }
        Env e;
        if (!env_open(&e, &cs[i], w, n_w)) {
            env_close(&e);
            continue;
        }
        if (cs[i].device) cs[i].nmse = device_bound_for(e.be, op, what, mode);
        float *out = malloc(n * sizeof *out + 4);
        for (size_t k = 0; k < n; k++) out[k] = NAN;
        run(&e, ctx, out);
        if (i == 0) ref = out;
        else compared += same(op, what, &cs[i], vs_exact ? ref_exact : ref, out, n), free(out);
        env_close(&e);
    }
    free(ref_exact);
    free(ref);
    return compared;
}

/* ---- weights ---------------------------------------------------------------------------------------------- */

/* A random matrix (or expert stack) of a format as a registry entry with id 0. */
static Weight mat(uint32_t type, int64_t cols, int64_t rows, int n_expert, void **mem) {
    const Format *f = format_get(type);
    const size_t rb = format_row_bytes(f, cols), one = rb * (size_t)rows, n = n_expert ? (size_t)n_expert : 1;
    uint8_t *d = malloc(one * n + 64);
    for (size_t r = 0; r < (size_t)rows * n; r++) trand_row(f, d + r * rb, cols);
    *mem = d;
    return (Weight){.id = 0, .name = "w", .layer = 0, .type = type, .cols = cols, .rows = rows, .n_expert = n_expert,
                    .row_bytes = rb, .bytes = one, .expert_stride = one, .host = d, .gemv = n_expert > 0};
}

static Weight vec(int id, const float *x, int n) {
    return (Weight){.id = id, .name = "v", .layer = 0, .type = FMT_F32, .cols = n, .rows = 1, .row_bytes = (size_t)n * 4,
                    .bytes = (size_t)n * 4, .host = x};
}

/* ---- matmul and get_rows --------------------------------------------------------------------------------- */

typedef struct MmCase {
    const Weight *w;
    int64_t T;
    int expert;
    int64_t o0, o1;
    const float *x;
    const void *data;
} MmCase;

static void run_matmul(Env *e, const void *ctx, float *out) {
    const MmCase *c = ctx;
    const int64_t rows = c->o1 ? c->o1 - c->o0 : c->w->rows;
    const MatArgs a = {c->w, c->expert, c->data, c->o0, c->o1, put(e, c->x, sizeof(float) * (size_t)(c->T * c->w->cols)),
                       put(e, NULL, sizeof(float) * (size_t)(c->T * rows)), c->T, NULL, 0};
    e->be->vt->matmul(e->be, &a);
    float *y = get(e, a.y, (size_t)(c->T * rows));
    memcpy(out, y, sizeof(float) * (size_t)(c->T * rows));
    free(y);
}

TEST(backend_ops, matmul_every_format) {
    static const int64_t rows_list[] = {5, 40, 67}, T_list[] = {1, 3, 17};
    int cases = 0, ok = 0;
    for (uint32_t id = 0; id < FMT_COUNT; id++) {
        const Format *f = format_get(id);
        if (!f || !f->weight || !f->vec_dot) continue;
        const int64_t cols = f->block == 1 ? 80 : 2 * f->block;
        for (int mode = 0; mode < 3; mode++) /* MATMUL_GGML, MATMUL_EXACT, MATMUL_FAST (the default) */
            for (size_t ri = 0; ri < 3; ri++)
                for (size_t ti = 0; ti < 3; ti++) {
                    void *mem;
                    const Weight w = mat(id, cols, rows_list[ri], 0, &mem);
                    float *x = malloc(sizeof(float) * (size_t)(T_list[ti] * cols));
                    for (int64_t i = 0; i < T_list[ti] * cols; i++) x[i] = trand_act();
                    const MmCase c = {&w, T_list[ti], -1, 0, 0, x, NULL};
                    char what[64];
                    snprintf(what, sizeof what, "%s %lldx%lld T=%lld %s", f->name, (long long)rows_list[ri],
                             (long long)cols, (long long)T_list[ti], arith_name((MatMode)mode));
                    ok += over_backends("matmul", what, (MatMode)mode, &w, 1, run_matmul, &c,
                                        (size_t)(T_list[ti] * rows_list[ri])) > 0;
                    cases++;
                    free(x), free(mem);
                }
    }
    test_note("%d of %d format × shape × mode cases identical on every backend", ok, cases);
    device_report();
}

TEST(backend_ops, matmul_experts_ranges_and_provided_data) {
    void *mem;
    float *x = frnd(7 * 256, 2.0f);
    /* an expert of the stack, and the same bytes handed in by a provider; in the fast arithmetic a stack of 32-row
     * experts is packed (P16 panels per expert) and a provider's bytes are the file's */
    for (int mi = 0; mi < 2; mi++) {
        const MatMode mode = mi ? MATMUL_FAST : MATMUL_GGML;
        static const uint32_t types[] = {FMT_Q4_K, FMT_Q5_K, FMT_Q6_K, FMT_Q8_0};
        for (size_t ti = 0; ti < (mi ? 4 : 1); ti++) {
            const int rows = mi ? 32 : 24;
            const Weight w = mat(types[ti], 256, rows, 5, &mem);
            for (int e = 0; e < 5; e += 2) {
                const MmCase c = {&w, 7, e, 0, 0, x, NULL};
                over_backends("matmul", "expert", mode, &w, 1, run_matmul, &c, 7 * (size_t)rows);
                const MmCase p = {&w, 7, e, 0, 0, x, (const uint8_t *)mem + (size_t)e * w.expert_stride};
                over_backends("matmul", "provided expert", mode, &w, 1, run_matmul, &p, 7 * (size_t)rows);
            }
            free(mem);
        }
    }
    /* a row range of a packed Q8_0 matrix: the same bits as those rows of the whole product */
    const Weight q = mat(FMT_Q8_0, 96, 64, 0, &mem);
    const MmCase all = {&q, 3, -1, 0, 0, x, NULL}, part = {&q, 3, -1, 16, 48, x, NULL};
    over_backends("matmul", "rows 16..48", MATMUL_GGML, &q, 1, run_matmul, &part, 3 * 32);
    BeCase cs[16];
    const int nb = backend_list(cs, MATMUL_GGML);
    for (int i = 0; i < nb; i++) {
        Env e;
        if (env_open(&e, &cs[i], &q, 1)) {
            float *yall = malloc(sizeof(float) * 3 * 64), *ypart = malloc(sizeof(float) * 3 * 32);
            run_matmul(&e, &all, yall);
            run_matmul(&e, &part, ypart);
            bool eq = true;
            for (int t = 0; t < 3; t++) eq &= memcmp(ypart + t * 32, yall + t * 64 + 16, 32 * 4) == 0;
            CHECK_MSG(eq, "%s: a row range differs from the same rows of the whole product", cs[i].label);
            free(yall), free(ypart);
        }
        env_close(&e);
    }
    free(mem), free(x);
    device_report();
}

typedef struct GrCase {
    const Weight *w;
    const int32_t *ids;
    int n;
} GrCase;

static void run_get_rows(Env *e, const void *ctx, float *out) {
    const GrCase *c = ctx;
    const BView ids = put(e, c->ids, sizeof(int32_t) * (size_t)c->n), o = put(e, NULL, sizeof(float) * (size_t)c->n * c->w->cols);
    e->be->vt->get_rows(e->be, c->w, ids, c->n, o);
    float *y = get(e, o, (size_t)c->n * c->w->cols);
    memcpy(out, y, sizeof(float) * (size_t)c->n * c->w->cols);
    free(y);
}

TEST(backend_ops, get_rows) {
    static const uint32_t types[] = {FMT_F32, FMT_F16, FMT_BF16, FMT_Q8_0, FMT_Q4_K, FMT_Q6_K, FMT_IQ2_XXS};
    const int32_t ids[] = {3, 0, 29, 47, 17};
    /* 48 rows: a Q8_0 table is packed (R8 in llama.cpp's arithmetic, P16 in the fast one; a tied embedding is
     * also the head) and its rows come from the packed copy */
    for (int mi = 0; mi < 2; mi++)
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
            void *mem;
            const Weight w = mat(types[i], 256, 48, 0, &mem);
            const GrCase c = {&w, ids, 5};
            over_backends("get_rows", format_name(types[i]), mi ? MATMUL_FAST : MATMUL_GGML, &w, 1, run_get_rows, &c, 5 * 256);
            free(mem);
        }
    device_report();
}

/* ---- the row ops: one case table, one runner ---------------------------------------------------------------- */

enum { OP_RMS, OP_RMS_NOW, OP_L2, OP_ADD, OP_COPY_ROWS, OP_GATES_GROUPED, OP_GATES, OP_GATED_NORM, OP_ROPE, OP_IMROPE,
       OP_KV, OP_MUL_SIGMOID, OP_SILU, OP_SWIGLU, OP_ROUTE, OP_GATHER, OP_SCATTER, OP_COMBINE, OP_SIGMOID, OP_ADD_SCALED,
       OP_COUNT };
static const char *const op_names[OP_COUNT] = {"rms_norm", "rms_norm (no weight)", "l2_norm", "add", "copy_rows",
                                               "dn_gates (grouped)", "dn_gates", "gated_norm", "rope (neox)",
                                               "rope (imrope)", "kv_append", "mul_sigmoid", "silu", "swiglu",
                                               "moe_route", "gather_rows", "scatter_rows", "moe_combine", "sigmoid",
                                               "add_scaled"};

typedef struct RowCase {
    int op, R, H, n;
    const float *a, *b, *c; /* inputs (sizes by op) */
    const int32_t *idx;
    const Weight *w0, *w1;
} RowCase;


static void run_row(Env *e, const void *ctx, float *out) {
    const RowCase *c = ctx;
    Backend *be = e->be;
    const BackendVt *vt = be->vt;
    const BView a = put(e, c->a, NA * 4), b = put(e, c->b, NA * 4), cc = put(e, c->c, NA * 4);
    const BView idx = put(e, c->idx, 64 * 4), y = put(e, NULL, NA * 4), y2 = put(e, NULL, NA * 4);
    const int R = c->R, H = c->H, n = c->n;
    const VecSet strided = {R, H, n, (int64_t)H * n + 5, n + 1, (int64_t)H * n, n}; /* gaps between inputs */
    switch (c->op) {
    case OP_RMS: vt->rms_norm(be, a, y, c->w0, &strided, 1e-6f); break;
    case OP_RMS_NOW: vt->rms_norm(be, a, y, NULL, &strided, 1e-6f); break;
    case OP_L2: vt->l2_norm(be, a, y, &strided, 1e-6f); break;
    case OP_ADD: vt->copy(be, y, a, NA * 4), vt->add(be, y, b, (int64_t)R * n); break;
    case OP_COPY_ROWS: vt->copy_rows(be, bv_f32(y, 3), n + 7, bv_f32(a, 1), n + 2, R, n); break;
    case OP_GATES_GROUPED:
    case OP_GATES: {
        const int grp = c->op == OP_GATES_GROUPED ? 3 : 0, Hv = H;
        const GateArgs g = {R, Hv, grp, grp ? 2 * Hv : Hv, a, grp ? bv_f32(a, grp) : b, y, y2, c->w0, c->w1};
        vt->dn_gates(be, &g);
        break;
    }
    case OP_GATED_NORM: vt->gated_norm(be, a, b, c->w0, R * H, n, 1e-6f, y); break;
    case OP_ROPE:
    case OP_IMROPE: {
        static const int sections[4] = {11, 11, 10, 0};
        const RopeArgs r = {R, H, n, n - 16, (int64_t)H * n, 10000000.0f, 1.0f, c->op == OP_IMROPE ? sections : NULL, false};
        vt->copy(be, y, a, NA * 4);
        vt->rope(be, y, idx, &r);
        break;
    }
    case OP_KV: vt->kv_append(be, y, 3, a, R, n, false); break;
    case OP_MUL_SIGMOID: {
        const VecSet s = {R, H, n, (int64_t)2 * H * n, 2 * n, (int64_t)H * n, n};
        vt->copy(be, y, a, NA * 4);
        vt->mul_sigmoid(be, y, bv_f32(b, n), &s);
        break;
    }
    case OP_SILU: vt->silu(be, a, y, R, n); break;
    case OP_SWIGLU: vt->swiglu(be, a, b, y, R, n); break;
    case OP_ROUTE: { /* probabilities in place, selection (ints, read back as bits) and weights */
        vt->copy(be, y, a, NA * 4);
        vt->moe_route(be, y, y2, bv_f32(y2, 2048), R, n, H);
        break;
    }
    case OP_GATHER: vt->gather_rows(be, y, a, idx, 9, n); break;
    case OP_SCATTER: vt->scatter_rows(be, y, a, idx, 9, n); break;
    case OP_COMBINE: vt->moe_combine(be, y, a, b, R, H, n); break;
    case OP_SIGMOID: vt->copy(be, y, a, NA * 4), vt->sigmoid(be, y, (int64_t)R * n); break;
    case OP_ADD_SCALED: vt->copy(be, y, a, NA * 4), vt->add_scaled(be, y, b, cc, R, n); break;
    }
    float *h1 = get(e, y, NA), *h2 = get(e, y2, NA);
    memcpy(out, h1, NA * 4);
    memcpy(out + NA, h2, NA * 4);
    free(h1), free(h2);
}

/* What the reference backend computed, checked against the ops' definitions in double (layouts and strides:
 * the part a backend-to-backend comparison cannot see when the backends share code). */
static double rel(double a, double b) { return fabs(a - b) / (fabs(b) + 1e-6); }

static int check_definition(const RowCase *c, const float *out) {
    const int R = c->R, H = c->H, n = c->n;
    const float *a = c->a, *b = c->b, *w = c->w0->host;
    const float *y = out, *y2 = out + NA;
    int bad = 0;
    switch (c->op) {
    case OP_RMS:
    case OP_L2:
        for (int r = 0; r < R; r++)
            for (int h = 0; h < H; h++) {
                const float *x = a + (int64_t)r * (H * n + 5) + h * (n + 1);
                double ss = 0;
                for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
                const double sc = c->op == OP_RMS ? 1 / sqrt(ss / n + 1e-6) : 1 / fmax(sqrt(ss), 1e-6);
                for (int i = 0; i < n; i++)
                    bad += rel(y[(int64_t)r * H * n + h * n + i], x[i] * sc * (c->op == OP_RMS ? w[i] : 1)) > 1e-5;
            }
        break;
    case OP_COPY_ROWS:
        for (int r = 0; r < R; r++)
            for (int i = 0; i < n; i++) bad += y[3 + r * (n + 7) + i] != a[1 + r * (n + 2) + i];
        break;
    case OP_GATES_GROUPED:
        for (int t = 0; t < R; t++)
            for (int j = 0; j < H; j++) {
                const float bj = a[t * 2 * H + (j / 3) * 6 + j % 3], aj = a[t * 2 * H + (j / 3) * 6 + 3 + j % 3];
                bad += rel(y[t * H + j], 1 / (1 + exp(-bj))) > 1e-6;
                bad += rel(y2[t * H + j], log1p(exp(aj + w[j])) * ((const float *)c->w1->host)[j]) > 1e-5;
            }
        break;
    case OP_MUL_SIGMOID:
        for (int r = 0; r < R; r++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < n; i++) {
                    const double g = b[n + r * 2 * H * n + h * 2 * n + i];
                    bad += rel(y[r * H * n + h * n + i], a[r * H * n + h * n + i] / (1 + exp(-g))) > 1e-6;
                }
        break;
    case OP_GATHER:
        for (int i = 0; i < 9; i++)
            for (int x = 0; x < n; x++) bad += y[i * n + x] != a[c->idx[i] * n + x];
        break;
    case OP_SCATTER:
        for (int i = 0; i < 9; i++)
            for (int x = 0; x < n; x++) bad += y[c->idx[i] * n + x] != a[i * n + x];
        break;
    case OP_COMBINE:
        for (int t = 0; t < R; t++)
            for (int x = 0; x < n; x++) {
                double s = 0;
                for (int k = 0; k < H; k++) s += (double)a[(t * H + k) * n + x] * b[t * H + k];
                bad += rel(y[t * n + x], s) > 1e-5;
            }
        break;
    case OP_ROUTE:
        for (int t = 0; t < R; t++) {
            const int32_t *sel = (const int32_t *)y2 + t * H;
            for (int k = 0; k < H; k++) /* descending probabilities */
                bad += k > 0 && y[t * n + sel[k]] > y[t * n + sel[k - 1]];
        }
        break;
    default: return -1; /* not checked here */
    }
    return bad;
}

TEST(backend_ops, row_ops) {
    float *a = frnd(NA, 3.0f), *b = frnd(NA, 2.0f), *c = frnd(NA, 1.0f), *w0 = frnd(512, 1.0f), *w1 = frnd(512, 1.0f);
    for (int i = 0; i < 512; i++) w1[i] = -fabsf(w1[i]) - 0.05f; /* ssm_a < 0 */
    for (int i = 0; i < 64; i += 7) a[i] = 30.0f * (i % 2 ? 1 : -1); /* saturating sigmoid / softplus / exp */
    int32_t idx[64];
    for (int i = 0; i < 64; i++) idx[i] = (i * 5 + 2) % 11 + 1000 * (i >= 9); /* 9 distinct row ids (scatter), then positions */
    for (int i = 9; i < 64; i++) idx[i] = 997 + 13 * i;
    for (int i = 0; i < 9; i++) idx[i] = (i * 4 + 1) % 9; /* a permutation of 0..8 */
    Weight ws[2] = {vec(0, w0, 512), vec(1, w1, 512)};
    struct {
        int op, R, H, n;
    } shapes[] = {
        {OP_RMS, 5, 3, 67},       {OP_RMS, 3, 1, 256},       {OP_RMS_NOW, 4, 2, 33},   {OP_L2, 5, 3, 67},
        {OP_L2, 2, 4, 128},       {OP_ADD, 7, 1, 131},       {OP_COPY_ROWS, 9, 1, 37}, {OP_GATES_GROUPED, 5, 12, 1},
        {OP_GATES, 5, 7, 1},      {OP_GATED_NORM, 3, 5, 67}, {OP_GATED_NORM, 2, 4, 128}, {OP_ROPE, 5, 3, 64},
        {OP_IMROPE, 5, 3, 80},    {OP_KV, 6, 1, 75},         {OP_MUL_SIGMOID, 5, 3, 41}, {OP_SILU, 5, 1, 83},
        {OP_SWIGLU, 5, 1, 83},    {OP_ROUTE, 7, 4, 37},      {OP_ROUTE, 3, 8, 256},    {OP_GATHER, 1, 1, 51},
        {OP_SCATTER, 1, 1, 51},   {OP_COMBINE, 5, 3, 67},    {OP_SIGMOID, 5, 1, 99},   {OP_ADD_SCALED, 6, 1, 77},
    };
    bool seen[OP_COUNT] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const RowCase rc = {shapes[i].op, shapes[i].R, shapes[i].H, shapes[i].n, a, b, c, idx, &ws[0], &ws[1]};
        char what[48];
        snprintf(what, sizeof what, "R=%d H=%d n=%d", rc.R, rc.H, rc.n);
        const int ok = over_backends(op_names[rc.op], what, MATMUL_GGML, ws, 2, run_row, &rc, 2 * NA);
        seen[rc.op] |= ok > 0;
        BeCase all[16];
        backend_list(all, MATMUL_GGML);
        Env e;
        if (env_open(&e, &all[0], ws, 2)) {
            float *out = malloc(2 * NA * sizeof *out);
            run_row(&e, &rc, out);
            const int bad = check_definition(&rc, out);
            CHECK_MSG(bad <= 0, "%s %s: %d elements off the op's definition", op_names[rc.op], what, bad);
            free(out);
        }
        env_close(&e);
    }
    for (int op = 0; op < OP_COUNT; op++) CHECK_MSG(seen[op], "op %s never compared", op_names[op]);
    free(a), free(b), free(c), free(w0), free(w1);
    device_report();
}

/* ---- sequence ops: conv, delta-net, attention ---------------------------------------------------------------- */

typedef struct SeqCase {
    int which; /* 0 conv, 1 delta-net, 2 attention */
    int T, H, Hk, d, C;
    bool chunked, out_of_place, steps, grouped;
    const float *x, *s0, *g, *beta;
    const Weight *w;
} SeqCase;

static void l2rows(float *x, size_t rows, int n) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < n; i++) s += (double)x[r * n + i] * x[r * n + i];
        for (int i = 0; i < n; i++) x[r * n + i] /= (float)sqrt(s + 1e-12);
    }
}

static void run_seq(Env *e, const void *ctx, float *out) {
    const SeqCase *c = ctx;
    Backend *be = e->be;
    size_t n_out = 0;
    if (c->which == 0) {
        const BView x = put(e, c->x, sizeof(float) * (size_t)c->T * c->C), st = put(e, c->s0, sizeof(float) * (size_t)c->C * 3);
        const BView y = put(e, NULL, sizeof(float) * (size_t)c->T * c->C);
        be->vt->conv_silu(be, x, c->T, c->C, 4, c->w, st, y);
        float *hy = get(e, y, (size_t)c->T * c->C), *hs = get(e, st, (size_t)c->C * 3);
        memcpy(out, hy, sizeof(float) * (size_t)c->T * c->C), n_out = (size_t)c->T * c->C;
        memcpy(out + n_out, hs, sizeof(float) * (size_t)c->C * 3);
        free(hy), free(hs);
    } else if (c->which == 1) {
        const size_t nq = (size_t)c->T * c->Hk * c->d, nv = (size_t)c->T * c->H * c->d, ns = (size_t)c->H * c->d * c->d;
        const BView q = put(e, c->x, nq * 4), k = put(e, c->x + nq, nq * 4), v = put(e, c->x + 2 * nq, nv * 4);
        const BView g = put(e, c->g, (size_t)c->T * c->H * 4), bt = put(e, c->beta, (size_t)c->T * c->H * 4);
        const BView s_in = put(e, c->s0, ns * 4), s_out = c->out_of_place ? put(e, NULL, ns * 4) : s_in;
        const BView o = put(e, NULL, nv * 4), steps = put(e, NULL, c->steps ? ns * 4 * (size_t)c->T : 64);
        const DeltaArgs a = {c->T, c->Hk, c->H, c->d, c->d, c->grouped, c->chunked,
                             q, k, v, g, bt, s_in, s_out, o, steps, c->steps};
        be->vt->deltanet(be, &a);
        float *ho = get(e, o, nv), *hs = get(e, s_out, ns), *hi = get(e, s_in, ns);
        memcpy(out, ho, nv * 4), memcpy(out + nv, hs, ns * 4), memcpy(out + nv + ns, hi, ns * 4);
        if (c->steps) {
            float *hst = get(e, steps, ns * (size_t)c->T);
            memcpy(out + nv + 2 * ns, hst, ns * 4 * (size_t)c->T);
            free(hst);
        }
        free(ho), free(hs), free(hi);
    } else {
        const int pos0 = 9, n = pos0 + c->T, Hkv = c->Hk;
        const size_t nq = (size_t)c->T * c->H * c->d, nkv = (size_t)n * Hkv * c->d;
        const BView q = put(e, c->x, nq * 4), k = put(e, c->x + nq, nkv * 4), v = put(e, c->x + nq + nkv, nkv * 4);
        const BView o = put(e, NULL, nq * 4);
        const AttentionArgs a = {c->T, pos0, c->H, Hkv, c->d, 1.0f / sqrtf((float)c->d), q, k, v, o, {0}, 0};
        be->vt->attention(be, &a);
        float *ho = get(e, o, nq);
        memcpy(out, ho, nq * 4);
        free(ho);
    }
}

TEST(backend_ops, conv_deltanet_attention) {
    float *x = frnd(1 << 20, 1.0f), *s0 = frnd(1 << 18, 0.3f), *g = frnd(4096, 1.0f), *beta = frnd(4096, 1.0f);
    for (int i = 0; i < 4096; i++) g[i] = -0.3f * (g[i] + 1.0f), beta[i] = 0.5f * (beta[i] + 1.0f);
    float *taps = frnd(4 * 300, 1.0f);
    const Weight w = vec(0, taps, 4 * 300);
    static const int convs[][2] = {{1, 37}, {5, 300}, {70, 19}};
    for (int i = 0; i < 3; i++) {
        const SeqCase c = {0, convs[i][0], 0, 0, 0, convs[i][1], false, false, false, false, x, s0, g, beta, &w};
        char what[32];
        snprintf(what, sizeof what, "T=%d C=%d", c.T, c.C);
        over_backends("conv_silu", what, MATMUL_GGML, &w, 1, run_seq, &c, (size_t)c.T * c.C + (size_t)c.C * 3);
    }
    static const struct {
        int T, H, Hk, d;
        bool chunked, oop, steps;
    } dn[] = {{1, 4, 2, 32, false, false, false}, {5, 4, 2, 32, false, true, true},  {3, 6, 3, 16, false, true, true},
              {70, 4, 4, 32, true, false, false}, {70, 4, 2, 32, true, true, false}, {9, 2, 1, 128, false, true, false}};
    for (size_t i = 0; i < sizeof dn / sizeof dn[0]; i++) {
        const size_t nq = (size_t)dn[i].T * dn[i].Hk * dn[i].d;
        l2rows(x, 2 * nq / dn[i].d, dn[i].d); /* q and k are L2-normed */
        const SeqCase c = {1, dn[i].T, dn[i].H, dn[i].Hk, dn[i].d, 0, dn[i].chunked, dn[i].oop, dn[i].steps, i % 2 == 1, x, s0, g, beta, NULL};
        char what[96];
        snprintf(what, sizeof what, "T=%d Hv=%d Hk=%d d=%d %s%s%s%s", c.T, c.H, c.Hk, c.d, c.chunked ? "chunked" : "recurrent",
                 c.grouped ? " grouped" : "", c.out_of_place ? " out of place" : "", c.steps ? " + steps" : "");
        const size_t ns = (size_t)c.H * c.d * c.d;
        over_backends("deltanet", what, MATMUL_GGML, NULL, 0, run_seq, &c,
                      (size_t)c.T * c.H * c.d + 2 * ns + (c.steps ? ns * (size_t)c.T : 0));
    }
    static const int at[][4] = {{1, 4, 2, 64}, {7, 8, 2, 256}, {3, 6, 6, 32}};
    for (int i = 0; i < 3; i++) {
        const SeqCase c = {2, at[i][0], at[i][1], at[i][2], at[i][3], 0, false, false, false, false, x, s0, g, beta, NULL};
        char what[32];
        snprintf(what, sizeof what, "T=%d H=%d Hkv=%d d=%d", c.T, c.H, c.Hk, c.d);
        over_backends("attention", what, MATMUL_GGML, NULL, 0, run_seq, &c, (size_t)c.T * c.H * c.d);
    }
    free(x), free(s0), free(g), free(beta), free(taps);
    device_report();
}

/* S·k against Sᵀ·k (the seed's bug class): the state is stored transposed ([Hv][Dv][Dk], kernels/ops.h), and a
 * kernel reading it in the other orientation matches the reference run on the transposed state. So, on a state
 * that is not symmetric, every backend's outputs and new state must match the reference's on the state as
 * given and be far from the reference's on the transposed one — in the recurrent and the chunked form. */
static double nmse_of(const float *ref, const float *x, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]), den += (double)ref[i] * ref[i];
    return den > 0 ? num / den : num;
}

TEST(backend_ops, deltanet_state_orientation) {
    enum { H = 4, Hk = 2, D = 32 };
    const size_t ns = (size_t)H * D * D;
    float *x = frnd(3 * 70 * H * D, 1.0f), *s0 = frnd(ns, 0.3f), *s0t = malloc(ns * sizeof *s0t);
    float *g = frnd(70 * H, 1.0f), *beta = frnd(70 * H, 1.0f);
    for (int i = 0; i < 70 * H; i++) g[i] = -0.3f * (g[i] + 1.0f), beta[i] = 0.5f * (beta[i] + 1.0f);
    for (int h = 0; h < H; h++)
        for (int r = 0; r < D; r++)
            for (int c = 0; c < D; c++) s0t[((size_t)h * D + c) * D + r] = s0[((size_t)h * D + r) * D + c];
    BeCase cs[16];
    const int nb = backend_list(cs, MATMUL_GGML);
    for (int form = 0; form < 2; form++) {
        const int T = form ? 70 : 5;
        l2rows(x, 2 * (size_t)T * Hk, D); /* q and k are L2-normed */
        SeqCase c = {1, T, H, Hk, D, 0, form == 1, true, false, false, x, s0, g, beta, NULL};
        const size_t n = (size_t)T * H * D + ns; /* the outputs and the new state */
        float *ref = malloc((n + ns) * sizeof *ref), *ref_t = malloc((n + ns) * sizeof *ref_t), *out = malloc((n + ns) * sizeof *out);
        Env e;
        if (env_open(&e, &cs[0], NULL, 0)) run_seq(&e, &c, ref);
        env_close(&e);
        c.s0 = s0t;
        if (env_open(&e, &cs[0], NULL, 0)) run_seq(&e, &c, ref_t);
        env_close(&e);
        c.s0 = s0;
        const double apart = nmse_of(ref, ref_t, n);
        CHECK_MSG(apart > 1e-3, "the two orientations are too close to tell apart (NMSE %.3g)", apart);
        for (int i = 1; i < nb; i++) {
            if (!env_open(&e, &cs[i], NULL, 0)) {
                env_close(&e);
                continue;
            }
            run_seq(&e, &c, out);
            env_close(&e);
            const double right = nmse_of(ref, out, n), wrong = nmse_of(ref_t, out, n);
            if (cs[i].device) test_note("%s %s: NMSE %.2g against the reference, %.2g against its transposed state", cs[i].label,
                                        form ? "chunked" : "recurrent", right, wrong);
            CHECK_MSG(right <= 1e-10 && wrong > 1e-3, "%s %s: NMSE %.3g against the reference, %.3g against the transposed state",
                      cs[i].label, form ? "chunked" : "recurrent", right, wrong);
        }
        free(ref), free(ref_t), free(out);
    }
    free(x), free(s0), free(s0t), free(g), free(beta);
}

/* ---- the fused MoE experts of a device (moe_ffn) ------------------------------------------------------------ */

/* eo[t·k + s] = down_e(silu(gate_e·x_t) ⊙ up_e·x_t), e = sel[t·k + s], row by row (one-row products) on the
 * backend of case rc */
static void moe_reference(const BeCase *rc, const Weight *w, const float *x, const int32_t *sel, int R, int k, int E, int F,
                          float *eo) {
    Env e;
    if (!env_open(&e, rc, w, 3)) {
        env_close(&e);
        return;
    }
    const BView xv = put(&e, x, sizeof(float) * (size_t)R * E), g = put(&e, NULL, 4 * (size_t)F), u = put(&e, NULL, 4 * (size_t)F);
    const BView y = put(&e, NULL, 4 * (size_t)E);
    for (int i = 0; i < R * k; i++) {
        const BView xr = bv_f32(xv, (int64_t)(i / k) * E);
        const MatArgs ga = {&w[0], sel[i], NULL, 0, 0, xr, g, 1, NULL, 0}, ua = {&w[1], sel[i], NULL, 0, 0, xr, u, 1, NULL, 0};
        const MatArgs da = {&w[2], sel[i], NULL, 0, 0, g, y, 1, NULL, 0};
        e.be->vt->matmul(e.be, &ga);
        e.be->vt->matmul(e.be, &ua);
        e.be->vt->swiglu(e.be, g, u, g, 1, F);
        e.be->vt->matmul(e.be, &da);
        e.be->vt->download(e.be, eo + (size_t)i * E, y, 4 * (size_t)E);
    }
    env_close(&e);
}

/* The exact arithmetic against the reference backend's one-row products; the fast one (P16 panels, experts
 * spread over threads whole) against the same backend's one-row products, which batch invariance makes the
 * same bits. 10 experts of which 9 are chosen (2 threads spread them when 4+ are used), one never. */
TEST(backend_ops, moe_ffn_fused_experts) {
    const int E = 256, F = 96, nE = 10, k = 2;
    void *mg, *mu, *md;
    Weight w[3] = {mat(FMT_Q4_K, E, F, nE, &mg), mat(FMT_Q4_K, E, F, nE, &mu), mat(FMT_Q8_0, F, E, nE, &md)};
    w[1].id = 1, w[2].id = 2;
    static const int Rs[] = {1, 5, 40}; /* a decode row; a few rows (vector kernel); 16 per expert (tiled) */
    for (int mode = 0; mode < 2; mode++) {
        BeCase cs[16];
        const int nb = backend_list(cs, mode ? MATMUL_FAST : MATMUL_EXACT);
        for (size_t ri = 0; ri < 3; ri++) {
            const int R = Rs[ri];
            float *x = frnd((size_t)R * E, 1.0f), *ref = malloc(sizeof(float) * (size_t)R * k * E);
            int32_t *sel = malloc(sizeof(int32_t) * (size_t)R * k);
            for (int t = 0; t < R; t++) { /* two distinct experts per row, expert 9 never chosen */
                sel[t * k] = (t * 7 + 1) % 9;
                sel[t * k + 1] = (sel[t * k] + 1 + t % 5) % 9;
            }
            if (!mode) moe_reference(&cs[0], w, x, sel, R, k, E, F, ref);
            for (int i = 0; i < nb; i++) {
                if (mode && cs[i].device) continue; /* a device's fast arithmetic has its own bounds elsewhere */
                Env e;
                if (!env_open(&e, &cs[i], w, 3)) {
                    env_close(&e);
                    continue;
                }
                if (e.be->vt->moe_ffn) {
                    if (mode) moe_reference(&cs[i], w, x, sel, R, k, E, F, ref);
                    const size_t n = (size_t)R * k;
                    const MoeArgs a = {&w[0], &w[1], &w[2], put(&e, x, sizeof(float) * (size_t)R * E), put(&e, sel, 4 * n),
                                       put(&e, NULL, sizeof(float) * n * E), put(&e, NULL, sizeof(float) * n * F),
                                       put(&e, NULL, sizeof(float) * n * F), put(&e, NULL, 4 * MOE_WORK_INTS(R, k, nE)), R,
                                       k, nE};
                    e.be->vt->moe_ffn(e.be, &a);
                    Err err = {{0}};
                    CHECK_MSG(e.be->vt->wait(e.be, &err) == 0, "%s: %s", cs[i].label, err.msg);
                    float *eo = get(&e, a.eo, n * E);
                    char what[32];
                    snprintf(what, sizeof what, "%s R=%d", mode ? "fast" : "exact", R);
                    if (cs[i].device) cs[i].nmse = device_bound_for(e.be, "moe_ffn", what, MATMUL_EXACT);
                    same("moe_ffn", what, &cs[i], ref, eo, n * E);
                    free(eo);
                }
                env_close(&e);
            }
            free(x), free(ref), free(sel);
        }
    }
    free(mg), free(mu), free(md);
    device_report();
}

/* The decode fusions of an MoE layer on a device (optional ops; a backend without them is not a case):
 * moe_ffn_combine — the experts' down products summed with the routing weights in slot order by one workgroup per
 * row — against the reference's one-row products and the combine in C (NMSE), and bit for bit against the same
 * backend's moe_ffn + moe_combine; k = 1 … 8 experts per row, 1 … 4 rows sharing experts in other slot orders
 * (k distinct per row, 10 experts), down rows not a multiple of the kernel's 16 (72) and K-quant rows (256). */
TEST(backend_ops, moe_ffn_combine_decode) {
    static const struct {
        uint32_t gu, down;
        int E, F;
    } sets[] = {{FMT_F16, FMT_Q8_0, 72, 96}, {FMT_Q4_K, FMT_Q6_K, 256, 256}};
    const int nE = 10;
    BeCase cs[16];
    const int nb = backend_list(cs, MATMUL_EXACT);
    for (size_t si = 0; si < 2; si++) {
        const int E = sets[si].E, F = sets[si].F;
        void *mg, *mu, *md;
        Weight w[3] = {mat(sets[si].gu, E, F, nE, &mg), mat(sets[si].gu, E, F, nE, &mu), mat(sets[si].down, F, E, nE, &md)};
        w[1].id = 1, w[2].id = 2;
        for (int i = 1; i < nb; i++) {
            Env e;
            if (!env_open(&e, &cs[i], w, 3) || !e.be->vt->moe_ffn_combine) {
                env_close(&e);
                continue;
            }
            double worst = 0;
            int taken = 0, bitwise = 0;
            for (int k = 1; k <= 8; k++)
                for (int R = 1; R <= 4; R++) {
                    const size_t n = (size_t)R * k;
                    float *x = frnd((size_t)R * E, 1.0f), *wt = frnd(n, 1.0f), *eo = malloc(sizeof(float) * n * E);
                    float *ref = malloc(sizeof(float) * (size_t)R * E);
                    int32_t sel[32];
                    for (int t = 0; t < R; t++) /* row t: experts t … t + k − 1, every other row in reverse */
                        for (int j = 0; j < k; j++) sel[t * k + j] = (t + (t % 2 ? k - 1 - j : j)) % nE;
                    moe_reference(&cs[0], w, x, sel, R, k, E, F, eo);
                    for (int t = 0; t < R; t++)
                        for (int c = 0; c < E; c++) {
                            float acc = eo[(size_t)t * k * E + c] * wt[t * k];
                            for (int j = 1; j < k; j++) acc += eo[((size_t)t * k + j) * E + c] * wt[t * k + j];
                            ref[(size_t)t * E + c] = acc;
                        }
                    e.at = 0;
                    const BView wv = put(&e, wt, 4 * n), out = put(&e, NULL, sizeof(float) * (size_t)R * E),
                                out2 = put(&e, NULL, sizeof(float) * (size_t)R * E);
                    const MoeArgs a = {&w[0], &w[1], &w[2], put(&e, x, sizeof(float) * (size_t)R * E), put(&e, sel, 4 * n),
                                       put(&e, NULL, sizeof(float) * n * E), put(&e, NULL, sizeof(float) * n * F),
                                       put(&e, NULL, sizeof(float) * n * F), put(&e, NULL, 4 * MOE_WORK_INTS(R, k, nE)), R,
                                       k, nE};
                    const bool done = e.be->vt->moe_ffn_combine(e.be, &a, wv, out);
                    e.be->vt->moe_ffn(e.be, &a);
                    e.be->vt->moe_combine(e.be, out2, a.eo, wv, R, k, E);
                    Err err = {{0}};
                    CHECK_MSG(e.be->vt->wait(e.be, &err) == 0, "%s: %s", cs[i].label, err.msg);
                    char what[48];
                    snprintf(what, sizeof what, "%s k=%d R=%d", format_get(sets[si].down)->name, k, R);
                    CHECK_MSG(done, "%s: moe_ffn_combine declined %s (decode: vector kernel, R, k <= 8)", cs[i].label, what);
                    if (done) {
                        taken++;
                        float *y = get(&e, out, (size_t)R * E), *y2 = get(&e, out2, (size_t)R * E);
                        cs[i].nmse = device_bound_for(e.be, "moe_ffn", what, MATMUL_EXACT);
                        same("moe_ffn_combine", what, &cs[i], ref, y, (size_t)R * E);
                        const bool eq = memcmp(y, y2, sizeof(float) * (size_t)R * E) == 0;
                        bitwise += eq;
                        CHECK_MSG(eq, "%s %s: moe_ffn_combine differs from moe_ffn + moe_combine", cs[i].label, what);
                        double num = 0, den = 0;
                        for (size_t j = 0; j < (size_t)R * E; j++)
                            num += ((double)y[j] - ref[j]) * ((double)y[j] - ref[j]), den += (double)ref[j] * ref[j];
                        if (den > 0 && num / den > worst) worst = num / den;
                        free(y), free(y2);
                    }
                    free(x), free(wt), free(eo), free(ref);
                }
            test_note("%s, %s experts: %d cases (k 1-8, 1-4 rows) taken, worst NMSE against the reference %.3g, %d bit "
                      "for bit against moe_ffn + moe_combine",
                      cs[i].label, format_get(sets[si].down)->name, taken, worst, bitwise);
            env_close(&e);
        }
        free(mg), free(mu), free(md);
    }
    device_report();
}

/* matmul_add_sigmoid (the shared expert's down with its σ-gated add and the residual in the epilogue) against the
 * reference's product with y + d·σ(g) and res + y in C (NMSE), and bit for bit against the same backend's matmul,
 * sigmoid, add_scaled and add; 1 … 4 rows, with and without the residual, rows not a multiple of 16 */
TEST(backend_ops, matmul_add_sigmoid) {
    static const struct {
        uint32_t type;
        int cols, rows;
    } sets[] = {{FMT_Q8_0, 96, 72}, {FMT_Q4_K, 256, 40}};
    BeCase cs[16];
    const int nb = backend_list(cs, MATMUL_EXACT);
    for (size_t si = 0; si < 2; si++) {
        const int C = sets[si].cols, N = sets[si].rows;
        void *mw;
        Weight w = mat(sets[si].type, C, N, 0, &mw);
        for (int i = 1; i < nb; i++) {
            Env e, r;
            if (!env_open(&e, &cs[i], &w, 1) || !e.be->vt->matmul_add_sigmoid) {
                env_close(&e);
                continue;
            }
            REQUIRE(env_open(&r, &cs[0], &w, 1));
            for (int T = 1; T <= 4; T++)
                for (int with_res = 0; with_res < 2; with_res++) {
                    const size_t ny = (size_t)T * N;
                    float *x = frnd((size_t)T * C, 1.0f), *g = frnd((size_t)T, 3.0f), *y0 = frnd(ny, 1.0f), *r0 = frnd(ny, 1.0f);
                    /* the reference: the product on the reference backend, the epilogue in C */
                    r.at = 0;
                    const BView rx = put(&r, x, sizeof(float) * (size_t)T * C), ry = put(&r, NULL, sizeof(float) * ny);
                    r.be->vt->matmul(r.be, &(MatArgs){&w, -1, NULL, 0, 0, rx, ry, T, NULL, 0});
                    float *d = get(&r, ry, ny), *ref = malloc(sizeof(float) * ny * 2);
                    for (int t = 0; t < T; t++)
                        for (int c = 0; c < N; c++) {
                            const size_t j = (size_t)t * N + c;
                            ref[j] = y0[j] + d[j] * (1.0f / (1.0f + expf(-g[t])));
                            ref[ny + j] = with_res ? r0[j] + ref[j] : r0[j];
                        }
                    e.at = 0;
                    const BView ex = put(&e, x, sizeof(float) * (size_t)T * C), eg = put(&e, g, 4 * (size_t)T),
                                ey = put(&e, y0, 4 * ny), er = put(&e, r0, 4 * ny);
                    const BView fg = put(&e, g, 4 * (size_t)T), fy = put(&e, y0, 4 * ny), fr = put(&e, r0, 4 * ny),
                                ft = put(&e, NULL, 4 * ny);
                    const bool done = e.be->vt->matmul_add_sigmoid(e.be, &(MatArgs){&w, -1, NULL, 0, 0, ex, ey, T, NULL, 0}, eg,
                                                                   with_res ? er : (BView){0});
                    e.be->vt->matmul(e.be, &(MatArgs){&w, -1, NULL, 0, 0, ex, ft, T, NULL, 0});
                    e.be->vt->sigmoid(e.be, fg, T);
                    e.be->vt->add_scaled(e.be, fy, ft, fg, T, N);
                    if (with_res) e.be->vt->add(e.be, fr, fy, (int64_t)ny);
                    Err err = {{0}};
                    CHECK_MSG(e.be->vt->wait(e.be, &err) == 0, "%s: %s", cs[i].label, err.msg);
                    char what[48];
                    snprintf(what, sizeof what, "%s T=%d%s", format_get(sets[si].type)->name, T, with_res ? " +res" : "");
                    CHECK_MSG(done, "%s: matmul_add_sigmoid declined %s", cs[i].label, what);
                    if (done) {
                        float *got = malloc(sizeof(float) * ny * 2), *un = malloc(sizeof(float) * ny * 2);
                        e.be->vt->download(e.be, got, ey, 4 * ny);
                        e.be->vt->download(e.be, got + ny, er, 4 * ny);
                        e.be->vt->download(e.be, un, fy, 4 * ny);
                        e.be->vt->download(e.be, un + ny, fr, 4 * ny);
                        cs[i].nmse = device_bound_for(e.be, "matmul", what, MATMUL_EXACT);
                        same("matmul_add_sigmoid", what, &cs[i], ref, got, 2 * ny);
                        CHECK_MSG(memcmp(got, un, sizeof(float) * 2 * ny) == 0,
                                  "%s %s: matmul_add_sigmoid differs from matmul, sigmoid, add_scaled, add", cs[i].label, what);
                        free(got), free(un);
                    }
                    free(x), free(g), free(y0), free(r0), free(d), free(ref);
                }
            env_close(&r);
            env_close(&e);
        }
        free(mw);
    }
    device_report();
}

/* ---- the vision tower's ops: layer_norm, bias_act, rope_2d, attention_full ---------------------------------- */

enum { VIS_LN, VIS_LN_NOWB, VIS_BIAS, VIS_BIAS_GELU, VIS_GELU, VIS_ROPE2D, VIS_ATTN, VIS_COUNT };
static const char *const vis_names[VIS_COUNT] = {"layer_norm", "layer_norm (no w, b)", "bias_act", "bias_act (gelu)",
                                                 "bias_act (gelu, no bias)", "rope_2d", "attention_full"};

typedef struct VisCase {
    int op, R, H, n; /* attention: R = T, n = d */
    const float *a;
    const int32_t *pos; /* [R][2] */
    const Weight *w, *b;
} VisCase;

/* strided layouts: LayerNorm vectors with gaps; rope rows of H heads + 5 floats; attention q, k, v as the thirds of
 * one [T][3·H·d] qkv row (as the tower has them) and an output row with a gap of 3 */
static size_t vis_out_floats(const VisCase *c) {
    switch (c->op) {
    case VIS_LN:
    case VIS_LN_NOWB: return (size_t)c->R * c->H * c->n;
    case VIS_ROPE2D: return (size_t)c->R * ((size_t)c->H * c->n + 5);
    case VIS_ATTN: return (size_t)c->R * ((size_t)c->H * c->n + 3);
    default: return (size_t)c->R * c->n;
    }
}

static void run_vis(Env *e, const void *ctx, float *out) {
    const VisCase *c = ctx;
    Backend *be = e->be;
    const BackendVt *vt = be->vt;
    const int R = c->R, H = c->H, n = c->n;
    const size_t no = vis_out_floats(c);
    const BView a = put(e, c->a, NA * 4), pos = put(e, c->pos, 2 * 80 * 4), y = put(e, NULL, no * 4);
    switch (c->op) {
    case VIS_LN:
    case VIS_LN_NOWB: {
        const VecSet s = {R, H, n, (int64_t)H * n + 5, n + 1, (int64_t)H * n, n};
        const bool wb = c->op == VIS_LN;
        vt->layer_norm(be, a, y, wb ? c->w : NULL, wb ? c->b : NULL, &s, 1e-6f);
        break;
    }
    case VIS_BIAS:
    case VIS_BIAS_GELU:
    case VIS_GELU:
        vt->copy(be, y, a, no * 4);
        vt->bias_act(be, y, c->op == VIS_GELU ? NULL : c->b, R, n, c->op == VIS_BIAS ? ACT_NONE : ACT_GELU);
        break;
    case VIS_ROPE2D: {
        const Rope2dArgs r = {R, H, n, (int64_t)H * n + 5, 10000.0f};
        vt->copy(be, y, a, no * 4);
        vt->rope_2d(be, y, pos, &r);
        break;
    }
    case VIS_ATTN: {
        const int64_t E = (int64_t)H * n;
        const FullAttnArgs at = {R, H, n, 1.0f / sqrtf((float)n), a, bv_f32(a, E), bv_f32(a, 2 * E), y, 3 * E, 3 * E, 3 * E, E + 3};
        vt->fill(be, y, 0, no * 4);
        vt->attention_full(be, &at);
        break;
    }
    }
    float *h = get(e, y, no);
    memcpy(out, h, no * 4);
    free(h);
}

static double gelu_d(double x) { return 0.5 * x * (1 + tanh(0.7978845608028654 * x * (1 + 0.044715 * x * x))); }

/* The reference backend's output against the op's definition in double */
static int check_vis_definition(const VisCase *c, const float *y) {
    const int R = c->R, H = c->H, n = c->n;
    const float *a = c->a, *w = c->w->host, *b = c->b->host;
    int bad = 0;
    switch (c->op) {
    case VIS_LN:
    case VIS_LN_NOWB:
        for (int r = 0; r < R; r++)
            for (int h = 0; h < H; h++) {
                const float *x = a + (int64_t)r * (H * n + 5) + h * (n + 1);
                double m = 0, v = 0;
                for (int i = 0; i < n; i++) m += x[i];
                m /= n;
                for (int i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
                const double sc = 1 / sqrt(v / n + 1e-6);
                for (int i = 0; i < n; i++) {
                    const double want = c->op == VIS_LN ? (x[i] - m) * sc * w[i] + b[i] : (x[i] - m) * sc;
                    bad += fabs(y[(int64_t)r * H * n + h * n + i] - want) > 1e-5 * (1 + fabs(want));
                }
            }
        break;
    case VIS_BIAS:
    case VIS_BIAS_GELU:
    case VIS_GELU:
        for (int r = 0; r < R; r++)
            for (int i = 0; i < n; i++) {
                const double x = (double)a[r * n + i] + (c->op == VIS_GELU ? 0 : b[i]);
                const double want = c->op == VIS_BIAS ? x : gelu_d(x);
                bad += fabs(y[r * n + i] - want) > 1e-5 * (1 + fabs(want));
            }
        break;
    case VIS_ROPE2D: {
        const double s = pow(10000.0, -4.0 / n);
        for (int r = 0; r < R; r++)
            for (int h = 0; h < H; h++) {
                const float *x = a + (int64_t)r * (H * n + 5) + h * n;
                const float *o = y + (int64_t)r * (H * n + 5) + h * n;
                for (int k = 0; k < n / 2; k++) {
                    const double th = k < n / 4 ? c->pos[2 * r] * pow(s, k) : c->pos[2 * r + 1] * pow(s, k - n / 4);
                    bad += fabs(o[k] - (x[k] * cos(th) - x[k + n / 2] * sin(th))) > 5e-4;
                    bad += fabs(o[k + n / 2] - (x[k] * sin(th) + x[k + n / 2] * cos(th))) > 5e-4;
                }
            }
        for (int r = 0; r < R; r++) /* the gap between rows is not written */
            for (int i = 0; i < 5; i++) bad += y[(int64_t)r * (H * n + 5) + H * n + i] != a[(int64_t)r * (H * n + 5) + H * n + i];
        break;
    }
    case VIS_ATTN: {
        const int64_t E = (int64_t)H * n;
        double *p = malloc(sizeof(double) * (size_t)R);
        for (int t = 0; t < R; t++)
            for (int h = 0; h < H; h++) {
                const float *q = a + t * 3 * E + h * n;
                double mx = -1e300, sum = 0;
                for (int u = 0; u < R; u++) {
                    const float *k = a + u * 3 * E + E + h * n;
                    double s = 0;
                    for (int i = 0; i < n; i++) s += (double)q[i] * k[i];
                    p[u] = s / sqrt(n);
                    mx = fmax(mx, p[u]);
                }
                for (int u = 0; u < R; u++) sum += p[u] = exp(p[u] - mx);
                for (int i = 0; i < n; i++) {
                    double o = 0;
                    for (int u = 0; u < R; u++) o += p[u] / sum * a[u * 3 * E + 2 * E + h * n + i];
                    bad += fabs(y[t * (E + 3) + h * n + i] - o) > 1e-5;
                }
            }
        for (int t = 0; t < R; t++) /* the gap */
            for (int i = 0; i < 3; i++) bad += y[t * (E + 3) + E + i] != 0;
        free(p);
        break;
    }
    }
    return bad;
}

TEST(backend_ops, vision_ops) {
    float *a = frnd(NA, 2.0f), *w = frnd(512, 1.0f), *bias = frnd(512, 1.0f);
    for (int i = 0; i < 64; i += 7) a[i] = 30.0f * (i % 2 ? 1 : -1); /* GELU's saturated ends */
    for (int i = 3; i < 300; i += 11) a[i] += 4.0f;                   /* a LayerNorm mean away from 0 */
    int32_t pos[2 * 80];
    for (int r = 0; r < 80; r++) pos[2 * r] = (r * 7) % 48, pos[2 * r + 1] = (r * 5 + 3) % 48; /* rows and columns differ */
    Weight ws[2] = {vec(0, w, 512), vec(1, bias, 512)};
    static const int shapes[][4] = {
        {VIS_LN, 5, 3, 67},     {VIS_LN, 2, 1, 300},     {VIS_LN_NOWB, 4, 2, 33}, {VIS_BIAS, 7, 1, 131},
        {VIS_BIAS_GELU, 5, 1, 83}, {VIS_GELU, 3, 1, 77}, {VIS_ROPE2D, 5, 3, 24},  {VIS_ROPE2D, 7, 4, 72},
        {VIS_ATTN, 1, 2, 16},   {VIS_ATTN, 7, 3, 24},    {VIS_ATTN, 70, 2, 16},   {VIS_ATTN, 9, 2, 72},
    };
    bool seen[VIS_COUNT] = {0};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const VisCase vc = {shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], a, pos, &ws[0], &ws[1]};
        char what[48];
        snprintf(what, sizeof what, "R=%d H=%d n=%d", vc.R, vc.H, vc.n);
        const size_t no = vis_out_floats(&vc);
        seen[vc.op] |= over_backends(vis_names[vc.op], what, MATMUL_GGML, ws, 2, run_vis, &vc, no) > 0;
        float *out = run_on_reference(MATMUL_GGML, ws, 2, run_vis, &vc, no);
        if (out) {
            const int bad = check_vis_definition(&vc, out);
            CHECK_MSG(bad == 0, "%s %s: %d elements off the op's definition", vis_names[vc.op], what, bad);
            free(out);
        }
    }
    for (int op = 0; op < VIS_COUNT; op++) CHECK_MSG(seen[op], "op %s never compared", vis_names[op]);
    free(a), free(w), free(bias);
    device_report();
}

/* ---- rope with (time, height, width) positions per row (RopeArgs.thw: an image's rows) ---------------------- */

typedef struct ThwCase {
    int R, H, d, n_rot;
    const int *sections; /* NULL: NEOX (t only) */
    const float *a;
    const int32_t *thw; /* [R][3] */
} ThwCase;

/* rows of H heads of d with a gap of 5 floats (not written) */
static size_t thw_floats(const ThwCase *c) { return (size_t)c->R * ((size_t)c->H * c->d + 5); }

static void run_thw(Env *e, const void *ctx, float *out) {
    const ThwCase *c = ctx;
    const size_t no = thw_floats(c);
    const BView y = put(e, c->a, no * 4), pos = put(e, c->thw, 3 * 4 * (size_t)c->R);
    const RopeArgs r = {c->R, c->H, c->d, c->n_rot, (int64_t)c->H * c->d + 5, 10000000.0f, 1.0f, c->sections, true};
    e->be->vt->rope(e->be, y, pos, &r);
    float *h = get(e, y, no);
    memcpy(out, h, no * 4);
    free(h);
}

/* The axis of pair i (0 t, 1 h, 2 w, 3 the 4th section: angle 0), written from docs/VISION.md's rule */
static int thw_axis(const int *sec, int i) {
    if (!sec) return 0;
    const int n = sec[0] + sec[1] + sec[2] + sec[3], s = i % n;
    if (s % 3 == 0 && s < 3 * sec[0]) return 0;
    if (s % 3 == 1 && s < 3 * sec[1]) return 1;
    if (s % 3 == 2 && s < 3 * sec[2]) return 2;
    return 3;
}

/* the reference backend's output against the definition in double: pair i of the first n_rot turns by
 * pos[axis]·base^(−2i/n_rot); the float angle is built by i products (relative error ≲ (i + 1)·2⁻²⁴), hence the
 * tolerance; the rest of each head and the gaps untouched. Counts how many pairs turned by the h or w axis. */
static int check_thw_definition(const ThwCase *c, const float *y, int *hw_pairs) {
    const int R = c->R, H = c->H, d = c->d, half = c->n_rot / 2;
    const int64_t rs = (int64_t)H * d + 5;
    int bad = 0;
    *hw_pairs = 0;
    for (int r = 0; r < R; r++) {
        for (int h = 0; h < H; h++) {
            const float *x = c->a + r * rs + h * d, *o = y + r * rs + h * d;
            for (int i = 0; i < half; i++) {
                const int ax = thw_axis(c->sections, i);
                const double p = ax == 3 ? 0 : c->thw[3 * r + ax];
                *hw_pairs += (ax == 1 || ax == 2) && h == 0;
                const double th = p * pow(10000000.0, -2.0 * i / c->n_rot);
                const double x0 = x[i], x1 = x[i + half], amp = fabs(x0) + fabs(x1);
                const double tol = 1e-5 + amp * (4.0 * (i + 1) * 6e-8 * fabs(th) + 1e-6);
                bad += fabs(o[i] - (x0 * cos(th) - x1 * sin(th))) > tol;
                bad += fabs(o[i + half] - (x0 * sin(th) + x1 * cos(th))) > tol;
            }
            for (int i = c->n_rot; i < d; i++) bad += o[i] != x[i];
        }
        for (int i = 0; i < 5; i++) bad += y[r * rs + H * d + i] != c->a[r * rs + H * d + i];
    }
    return bad;
}

/* Every backend against the reference on odd shapes (host: bit for bit; a device: its NMSE bound), the reference
 * against the definition; sections {11, 11, 10, 0} (Qwen3.5's: 32 pairs, the w section ending at pair 29) and
 * {3, 3, 2, 4} over 20 pairs (wrapping at 12: pairs 8–11 and 20… in the 4th section, each axis's boundary crossed)
 * and NEOX; positions with t, h and w apart, some past 4000 (the device's 2π reduction). Then on every backend
 * rows with t = h = w = p give the one-position rope's bits at p (text rows of an image batch). */
TEST(backend_ops, rope_thw) {
    static const int qwen[4] = {11, 11, 10, 0}, small[4] = {3, 3, 2, 4};
    static const struct {
        int R, H, d, n_rot;
        const int *sections;
    } shapes[] = {{5, 3, 64, 64, qwen}, {7, 2, 80, 64, qwen}, {9, 3, 48, 40, small}, {3, 1, 38, 38, NULL}, {1, 4, 64, 64, qwen}};
    float *a = frnd(NA, 3.0f);
    int32_t thw[3 * 16];
    for (int r = 0; r < 16; r++) { /* an image at p0 = 4 (y, x) = (r / 4, r % 4), a few rows far on */
        const int p0 = r < 12 ? 4 : 4100 + 3 * r;
        thw[3 * r] = p0, thw[3 * r + 1] = p0 + r / 4 + (r % 3), thw[3 * r + 2] = p0 + 2 * (r % 4) + 1;
    }
    bool compared = false;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const ThwCase tc = {shapes[i].R, shapes[i].H, shapes[i].d, shapes[i].n_rot, shapes[i].sections, a, thw};
        REQUIRE(thw_floats(&tc) <= NA);
        char what[64];
        snprintf(what, sizeof what, "R=%d H=%d d=%d n_rot=%d %s", tc.R, tc.H, tc.d, tc.n_rot,
                 tc.sections == qwen ? "[11,11,10,0]" : tc.sections ? "[3,3,2,4]" : "neox");
        const size_t no = thw_floats(&tc);
        compared |= over_backends("rope (thw)", what, MATMUL_GGML, NULL, 0, run_thw, &tc, no) > 0;
        float *out = run_on_reference(MATMUL_GGML, NULL, 0, run_thw, &tc, no);
        if (out) {
            int hw = 0;
            const int bad = check_thw_definition(&tc, out, &hw);
            CHECK_MSG(bad == 0, "rope (thw) %s: %d elements off the definition", what, bad);
            CHECK_MSG(tc.sections ? hw > 0 : hw == 0, "rope (thw) %s: %d pairs on the h / w axes", what, hw);
            free(out);
        }
    }
    CHECK_MSG(compared, "rope (thw) never compared");
    /* text rows: t = h = w = p through the thw form = the one-position form, bit for bit, on every backend */
    BeCase cs[16];
    const int nb = backend_list(cs, MATMUL_GGML);
    int32_t p1[16], p3[3 * 16];
    for (int r = 0; r < 16; r++) p1[r] = r < 12 ? 7 * r + 1 : 5000 + r, p3[3 * r] = p3[3 * r + 1] = p3[3 * r + 2] = p1[r];
    for (int bi = 0; bi < nb; bi++) {
        Env e;
        if (!env_open(&e, &cs[bi], NULL, 0)) {
            env_close(&e);
            continue;
        }
        for (int si = 0; si < 2; si++) {
            const int R = 13, H = 3, d = 64;
            const size_t no = (size_t)R * H * d;
            const BView y1 = put(&e, a, no * 4), y3 = put(&e, a, no * 4), q1 = put(&e, p1, sizeof p1), q3 = put(&e, p3, sizeof p3);
            RopeArgs r = {R, H, d, 64, (int64_t)H * d, 10000000.0f, 1.0f, si ? qwen : NULL, false};
            e.be->vt->rope(e.be, y1, q1, &r);
            r.thw = true;
            e.be->vt->rope(e.be, y3, q3, &r);
            float *o1 = get(&e, y1, no), *o3 = get(&e, y3, no);
            CHECK_MSG(!memcmp(o1, o3, no * 4), "%s %s: t = h = w = p is not the text rope's bits", cs[bi].label,
                      si ? "imrope" : "neox");
            free(o1), free(o3);
        }
        env_close(&e);
    }
    free(a);
    device_report();
}

/* ---- memory: upload, download, copy, fill round trips ------------------------------------------------------- */

static void run_mem(Env *e, const void *ctx, float *out) {
    const float *src = ctx;
    const BView a = put(e, src, 1000 * 4), b = put(e, NULL, 1000 * 4);
    e->be->vt->copy(e->be, bv_f32(b, 100), bv_f32(a, 3), 500 * 4);
    e->be->vt->fill(e->be, bv_f32(b, 700), 0xff, 10 * 4);
    float *h = get(e, b, 1000);
    memcpy(out, h, 1000 * 4);
    free(h);
}

TEST(backend_ops, memory_round_trips) {
    float *src = frnd(1000, 5.0f);
    over_backends("memory", "copy + fill", MATMUL_GGML, NULL, 0, run_mem, src, 1000);
    free(src);
    device_report();
}

/* ---- the registry ------------------------------------------------------------------------------------------- */

/* A backend that leaves a required slot empty: the CPU backend with its rope taken out. */
static BackendVt broken_vt;
static Backend *broken_create(const BackendOptions *o, int index, Err *err) {
    Backend *be = backend_create(&(BackendOptions){.name = "cpu", .cpu.isa = -1, .n_threads = 1}, err);
    if (!be) return NULL;
    broken_vt = *be->vt;
    broken_vt.rope = NULL;
    be->vt = &broken_vt;
    return be;
}

TEST(backend_ops, registry_refuses_a_backend_with_an_empty_slot) {
    const BackendReg broken = {.name = "broken", .create = broken_create};
    Err err = {{0}};
    Backend *be = backend_create_from(&broken, &(BackendOptions){0}, 0, &err);
    CHECK(be == NULL);
    backend_destroy(be);
    CHECK_MSG(strstr(err.msg, "'rope'") && strstr(err.msg, "broken") && !strchr(err.msg, '\n'), "got: %s", err.msg);
    test_note("refused: %s", err.msg);
    /* every row of the registry is complete, and names and lookups come from it */
    int n;
    const BackendReg *reg = backend_registry(&n);
    REQUIRE(n >= 2);
    for (int i = 0; i < n; i++) {
        memset(&err, 0, sizeof err);
        if (!backend_available(&reg[i], &err)) continue;
        CHECK_MSG(strstr(backend_names(), reg[i].name), "%s not in '%s'", reg[i].name, backend_names());
        be = backend_create(&(BackendOptions){.name = reg[i].name, .cpu.isa = -1, .n_threads = 1}, &err);
        CHECK_MSG(be != NULL, "%s: %s", reg[i].name, err.msg);
        backend_destroy(be);
        CHECK(backend_is_host(reg[i].name) == reg[i].host);
    }
    memset(&err, 0, sizeof err);
    CHECK(!backend_create(&(BackendOptions){.name = "nosuch"}, &err));
    CHECK_MSG(strstr(err.msg, "unknown backend 'nosuch'") && strstr(err.msg, backend_names()), "got: %s", err.msg);
    memset(&err, 0, sizeof err);
    CHECK(!backend_create(&(BackendOptions){.name = "cpu:1"}, &err));
    CHECK_MSG(strstr(err.msg, "no device index"), "got: %s", err.msg);
}
