/* seq_bench.c — micro-benchmark of the sequence kernels at real shapes (docs/KERNELS.md has the numbers).
 *
 *   seq_bench [deltanet|conv|attn|attnkv|attnpp|all] [--threads N] [--isa ref|avx2|avx512] [--quick]
 *
 * deltanet: recurrent (llama.cpp's order), fused (the fast arithmetic's) and chunked, Hk = 16, Hv = 16 and 32, d = 128, T = 1 … 4096: µs per token.
 * conv:     C = 8192 channels, 4 taps, T = 1 … 4096: µs per token.
 * attn:     16 query heads over 2 KV heads of 256 dims: decode (T = 1) at contexts 64 … 16384, and prefill
 *           (pos0 = 0, T = n): µs per call, mirroring (bit-identical) vs tiled (online softmax), the tiled kernel
 *           also as the fast arithmetic runs it (the scores always through the GEMM: batch-invariant).
 * attnkv:   the op as the fast arithmetic runs it (attention_cpu_select: mirroring up to ATTN_TILED_MIN_CTX, tiled
 *           after), decode (T = 1) at contexts 2048 … 32768 (--quick: … 8192) with the cache in F32, F16, Q8_0 and
 *           Q4_0 (K and V alike): µs per call per layer, and the cache's bytes read per call.
 * attnpp:   the op as the fast arithmetic runs a prompt's chunk at depth (the b1 shape: 8 query heads over 2 KV
 *           heads of 256, an F16 cache): T = 512 rows at pos0 = n − 512 for n = 4096 … 32768 (--quick: … 16384):
 *           µs per call per layer and the multiply-adds' rate (scores and P·V, causal). */
#include "backend/backend.h"
#include "base/pool.h"
#include "gguf/format.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/seq_kernels.h"
#include "kernels/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* one thread: the thread's CPU time (the machine may be shared: time spent descheduled does not count);
 * several: wall time */
static int cpu_clock;
static double now(void) {
    struct timespec ts;
    clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}
static float *falloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n * sizeof(float) + 64) != 0) abort();
    return p;
}
static float *frandn(size_t n, float scale) {
    float *p = falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = scale * frand();
    return p;
}
static void l2rows(float *x, size_t rows, int d) {
    for (size_t r = 0; r < rows; r++) {
        double s = 0;
        for (int i = 0; i < d; i++) s += (double)x[r * d + i] * x[r * d + i];
        for (int i = 0; i < d; i++) x[r * d + i] /= (float)sqrt(s);
    }
}

static int quick;

/* the fastest single call among as many as fit in about budget_s (at least 3): on a shared machine the
 * minimum is the run nobody disturbed */
typedef void (*BenchFn)(void *ctx);
static double timeit(BenchFn fn, void *ctx, double budget_s) {
    fn(ctx); /* warm up */
    if (quick) budget_s *= 0.5;
    double best = 1e30;
    const double start = now();
    for (int n = 0; n < 3 || (now() - start < budget_s && n < 2000); n++) {
        const double t0 = now();
        fn(ctx);
        const double t = now() - t0;
        if (t < best) best = t;
    }
    return best;
}

/* ---- delta-net ---- */
typedef struct DnBench {
    DeltaNetFn fn;
    OpCtx oc;
    DeltaNetArgs a;
} DnBench;
static void dn_call(void *ctx) {
    DnBench *b = ctx;
    b->fn(&b->oc, &b->a);
}

static void bench_deltanet(Pool *pool, Isa isa) {
    static const int Ts[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    const int D = 128, Hk = 16, Tmax = quick ? 1024 : 4096;
    const int nth = pool_size(pool);
    const Ops *ops = ops_cpu(isa);
    size_t sb = deltanet_scratch_bytes(D, D, nth);
    void *scratch = NULL;
    if (posix_memalign(&scratch, 64, sb) != 0) abort();
    for (int Hv = 16; Hv <= 32; Hv += 16) {
        float *q = frandn((size_t)Tmax * Hk * D, 1), *k = frandn((size_t)Tmax * Hk * D, 1);
        l2rows(q, (size_t)Tmax * Hk, D), l2rows(k, (size_t)Tmax * Hk, D);
        float *v = frandn((size_t)Tmax * Hv * D, 1), *g = falloc((size_t)Tmax * Hv), *beta = falloc((size_t)Tmax * Hv);
        for (size_t i = 0; i < (size_t)Tmax * Hv; i++) g[i] = -0.1f * (frand() + 1.0f), beta[i] = 0.5f * (frand() + 1.0f);
        float *state = frandn((size_t)Hv * D * D, 0.1f), *out = falloc((size_t)Tmax * Hv * D);
        float *fstate = falloc(DELTANET_FUSED_FLOATS(Hv, D, D)); /* the fused form's own layout */
        deltanet_state_to_fused(state, fstate, Hv, D, D);
        printf("delta-net %s, Hk=%d Hv=%d d=%d, %d thread(s): us/token\n", ops->name, Hk, Hv, D, nth);
        printf("  %6s %12s %12s %12s %8s %8s\n", "T", "recurrent", "fused", "chunked", "rec/fus", "rec/chk");
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0] && Ts[ti] <= Tmax; ti++) {
            const int T = Ts[ti];
            DnBench b = {ops->deltanet_recurrent, {MATMUL_GGML, pool, scratch, sb},
                         {T, Hk, Hv, D, D, Hv != Hk, q, k, v, g, beta, state, out, NULL, NULL}};
            const double tr = timeit(dn_call, &b, 0.3) / T * 1e6;
            b.fn = ops->deltanet_fused, b.a.state = fstate;
            const double tw = timeit(dn_call, &b, 0.3) / T * 1e6;
            b.fn = ops->deltanet_chunked, b.a.state = state;
            const double tc = timeit(dn_call, &b, 0.3) / T * 1e6;
            printf("  %6d %12.2f %12.2f %12.2f %8.2f %8.2f\n", T, tr, tw, tc, tr / tw, tr / tc);
            fflush(stdout);
            /* keep the state bounded: the benchmark loops on it */
            for (size_t i = 0; i < (size_t)Hv * D * D; i++)
                if (!isfinite(state[i]) || fabsf(state[i]) > 10.0f) state[i] = 0.1f;
            deltanet_state_to_fused(state, fstate, Hv, D, D);
        }
        free(q), free(k), free(v), free(g), free(beta), free(state), free(fstate), free(out);
    }
    free(scratch);
}

/* ---- conv ---- */
typedef struct ConvBench {
    ConvSiluFn fn;
    OpCtx oc;
    const float *x, *w;
    int T, C, K;
    float *state, *y;
} ConvBench;
static void conv_call(void *ctx) {
    ConvBench *b = ctx;
    b->fn(&b->oc, b->x, b->T, b->C, b->K, b->w, b->state, b->y);
}
static void bench_conv(Pool *pool, Isa isa) {
    static const int Ts[] = {1, 16, 128, 1024, 4096};
    const int C = 8192, K = 4, Tmax = quick ? 1024 : 4096;
    float *x = frandn((size_t)Tmax * C, 1), *w = frandn((size_t)C * K, 1), *st = frandn((size_t)C * (K - 1), 1),
          *y = falloc((size_t)Tmax * C);
    printf("conv+silu %s, C=%d K=%d, %d thread(s): us/token (reference)\n", isa_name(isa), C, K, pool_size(pool));
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0] && Ts[ti] <= Tmax; ti++) {
        ConvBench b = {conv_cpu_select(isa), {MATMUL_GGML, pool, NULL, 0}, x, w, Ts[ti], C, K, st, y};
        const double t = timeit(conv_call, &b, 0.2) / Ts[ti] * 1e6;
        b.fn = conv_silu_ref;
        const double tr = timeit(conv_call, &b, 0.2) / Ts[ti] * 1e6;
        printf("  T=%5d %10.3f  (%.3f)\n", Ts[ti], t, tr);
    }
    free(x), free(w), free(st), free(y);
}

/* ---- attention ---- */
typedef struct AttnBench {
    AttentionFn fn;
    OpCtx oc;
    AttnArgs a;
} AttnBench;
static void attn_call(void *ctx) {
    AttnBench *b = ctx;
    b->fn(&b->oc, &b->a);
}
static void bench_attn(Pool *pool, Isa isa) {
    static const int Ns[] = {64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
    const int H = 16, Hkv = 2, d = 256, Nmax = quick ? 4096 : 16384;
    const int nth = pool_size(pool);
    AttentionFn mirror = isa == ISA_AVX512 ? attention_mirror_avx512 : attention_mirror_avx2;
    AttentionFn tiled = isa == ISA_AVX512 ? attention_tiled_avx512 : attention_tiled_avx2;
    float *q = frandn((size_t)Nmax * H * d, 1), *k = frandn((size_t)Nmax * Hkv * d, 1),
          *v = frandn((size_t)Nmax * Hkv * d, 1), *o = falloc((size_t)Nmax * H * d);
    size_t sb = attention_scratch_bytes(Nmax, nth);
    if (sb < attention_fast_scratch_bytes(Nmax, d, H / Hkv, nth)) sb = attention_fast_scratch_bytes(Nmax, d, H / Hkv, nth);
    void *scratch = NULL;
    if (posix_memalign(&scratch, 64, sb) != 0) abort();
    printf("attention %s, H=%d Hkv=%d d=%d, %d thread(s): us/call (reference where cheap)\n", isa_name(isa), H, Hkv, d, nth);
    printf("  %-8s %6s %12s %12s %12s %12s\n", "", "n", "mirror", "tiled", "tiled fast", "ref");
    for (int mode = 0; mode < 2; mode++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0] && Ns[ni] <= Nmax; ni++) {
            const int n = Ns[ni];
            if (mode == 1 && n > (quick ? 2048 : 4096)) continue;
            const int T = mode == 0 ? 1 : n, pos0 = mode == 0 ? n - 1 : 0;
            AttnBench b = {mirror, {MATMUL_GGML, pool, scratch, sb},
                           {T, pos0, H, Hkv, d, 1.0f / 16.0f, q, k, v, o, FMT_F32, FMT_F32}};
            const double tm = timeit(attn_call, &b, 0.3) * 1e6;
            b.fn = tiled;
            const double tt = timeit(attn_call, &b, 0.3) * 1e6;
            b.oc.mode = MATMUL_FAST; /* the fast arithmetic's: scores always through the GEMM (batch-invariant) */
            const double tf = timeit(attn_call, &b, 0.3) * 1e6;
            b.oc.mode = MATMUL_GGML;
            double tr = NAN;
            if ((double)T * n <= 300000.0) {
                b.fn = attention_ref;
                tr = timeit(attn_call, &b, 0.3) * 1e6;
            }
            printf("  %-8s %6d %12.1f %12.1f %12.1f %12.1f\n", mode == 0 ? "decode" : "prefill", n, tm, tt, tf, tr);
            fflush(stdout);
        }
    free(q), free(k), free(v), free(o), free(scratch);
}

/* ---- attention over the cache types of the fast arithmetic ---- */
static void bench_attnkv(Pool *pool, Isa isa) {
    static const int Ns[] = {2048, 4096, 8192, 16384, 32768};
    static const uint32_t fmts[] = {FMT_F32, FMT_F16, FMT_Q8_0, FMT_Q4_0};
    static const char *const names[] = {"f32", "f16", "q8_0", "q4_0"};
    const int H = 16, Hkv = 2, d = 256, Nmax = quick ? 8192 : 32768, row = Hkv * d;
    const int nth = pool_size(pool);
    AttentionFn op = attention_cpu_select(isa);
    float *q = frandn((size_t)H * d, 1), *kf = frandn((size_t)Nmax * row, 1), *vf = frandn((size_t)Nmax * row, 1);
    float *o = falloc((size_t)H * d);
    void *kq = malloc((size_t)Nmax * row * 4), *vq = malloc((size_t)Nmax * row * 4);
    size_t sb = attention_fast_scratch_bytes(Nmax, d, H / Hkv, nth);
    if (sb < attention_scratch_bytes(Nmax, nth)) sb = attention_scratch_bytes(Nmax, nth);
    void *scratch = NULL;
    if (!kq || !vq || posix_memalign(&scratch, 64, sb) != 0) abort();
    printf("attention decode by KV cache type, %s, H=%d Hkv=%d d=%d, %d thread(s), the fast arithmetic's op:\n"
           "  us/call (one layer, one token), and the cache read per call\n", isa_name(isa), H, Hkv, d, nth);
    printf("  %-6s", "n");
    for (int f = 0; f < 4; f++) printf(" %12s %9s", names[f], "MiB");
    printf("\n");
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0] && Ns[ni] <= Nmax; ni++) {
        const int n = Ns[ni];
        printf("  %-6d", n);
        for (int f = 0; f < 4; f++) {
            const Format *ff = format_get(fmts[f]);
            const FormatFromFloat qz = ff->quantize ? ff->quantize : ff->from_float;
            const void *k = kf, *v = vf;
            if (fmts[f] != FMT_F32) { /* the cache's rows as kv_append writes them: whole rows of the format */
                const size_t rb = kv_row_bytes(fmts[f], row);
                for (int t = 0; t < n; t++) {
                    qz(kf + (size_t)t * row, (uint8_t *)kq + (size_t)t * rb, row);
                    qz(vf + (size_t)t * row, (uint8_t *)vq + (size_t)t * rb, row);
                }
                k = kq, v = vq;
            }
            AttnBench b = {op, {MATMUL_FAST, pool, scratch, sb}, {1, n - 1, H, Hkv, d, 1.0f / 16.0f, q, k, v, o, fmts[f], fmts[f]}};
            const double t = timeit(attn_call, &b, 0.3) * 1e6;
            printf(" %12.1f %9.1f", t, 2.0 * (double)n * (double)kv_row_bytes(fmts[f], row) / (1 << 20));
            fflush(stdout);
        }
        printf("\n");
    }
    free(q), free(kf), free(vf), free(o), free(kq), free(vq), free(scratch);
}

/* ---- a prompt's chunk at depth (prefill's tiled attention on an F16 cache) ---- */
static void bench_attnpp(Pool *pool, Isa isa) {
    static const int Ns[] = {4096, 8192, 16384, 32768};
    const int H = 8, Hkv = 2, d = 256, T = 512, Nmax = quick ? 16384 : 32768, row = Hkv * d;
    const int nth = pool_size(pool);
    AttentionFn op = attention_cpu_select(isa);
    float *q = frandn((size_t)T * H * d, 1), *kf = frandn((size_t)Nmax * row, 1), *vf = frandn((size_t)Nmax * row, 1);
    float *o = falloc((size_t)T * H * d);
    const Format *ff = format_get(FMT_F16);
    const size_t rb = kv_row_bytes(FMT_F16, row);
    void *kq = malloc((size_t)Nmax * rb), *vq = malloc((size_t)Nmax * rb);
    size_t sb = attention_fast_scratch_bytes(Nmax, d, H / Hkv, nth);
    if (sb < attention_scratch_bytes(Nmax, nth)) sb = attention_scratch_bytes(Nmax, nth);
    void *scratch = NULL;
    if (!kq || !vq || posix_memalign(&scratch, 64, sb) != 0) abort();
    for (int t = 0; t < Nmax; t++) {
        ff->from_float(kf + (size_t)t * row, (uint8_t *)kq + (size_t)t * rb, row);
        ff->from_float(vf + (size_t)t * row, (uint8_t *)vq + (size_t)t * rb, row);
    }
    printf("attention prefill chunk at depth, %s, H=%d Hkv=%d d=%d, T=%d, F16 cache, %d thread(s), the fast "
           "arithmetic's op:\n  us/call (one layer), GMAC/s (scores + P·V)\n", isa_name(isa), H, Hkv, d, T, nth);
    for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0] && Ns[ni] <= Nmax; ni++) {
        const int n = Ns[ni];
        AttnBench b = {op,
                       {MATMUL_FAST, pool, scratch, sb},
                       {T, n - T, H, Hkv, d, 1.0f / 16.0f, q, kq, vq, o, FMT_F16, FMT_F16}};
        const double t = timeit(attn_call, &b, 1.0);
        const double mac = 2.0 * H * d * ((double)T * (n - T) + (double)T * (T + 1) / 2);
        printf("  n=%-6d %12.1f %8.1f\n", n, t * 1e6, mac / t * 1e-9);
        fflush(stdout);
    }
    free(q), free(kf), free(vf), free(o), free(kq), free(vq), free(scratch);
}

int main(int argc, char **argv) {
    const char *what = "all";
    int threads = 1;
    Isa isa = isa_supported(ISA_AVX512) ? ISA_AVX512 : ISA_AVX2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) {
            const char *s = argv[++i];
            isa = !strcmp(s, "avx2") ? ISA_AVX2 : !strcmp(s, "ref") ? ISA_REF : ISA_AVX512;
        } else what = argv[i];
    }
    if (!isa_supported(isa)) {
        fprintf(stderr, "ISA %s not supported here\n", isa_name(isa));
        return 1;
    }
    cpu_clock = threads <= 1;
    Err err = {{0}};
    Pool *pool = threads > 1 ? pool_create(threads, &err) : NULL;
    if (threads > 1 && !pool) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (!strcmp(what, "all") || !strcmp(what, "deltanet")) bench_deltanet(pool, isa);
    if (!strcmp(what, "all") || !strcmp(what, "conv")) bench_conv(pool, isa);
    if ((!strcmp(what, "all") || !strcmp(what, "attn")) && isa != ISA_REF) bench_attn(pool, isa);
    if ((!strcmp(what, "all") || !strcmp(what, "attnkv")) && isa != ISA_REF) bench_attnkv(pool, isa);
    if ((!strcmp(what, "all") || !strcmp(what, "attnpp")) && isa != ISA_REF) bench_attnpp(pool, isa);
    pool_destroy(pool);
    return 0;
}
