/* matmul_bench.c — micro-benchmark of the matrix multiply at the shapes of Qwen3.5-0.8B and -9B
 * (docs/KERNELS.md, "Matrix multiply", has the numbers).
 *
 *   matmul_bench [--formats q8_0,q4_K,...] [--model 0.8b|9b|all] [--T 1,512] [--threads 1,2]
 *                [--isa ref|avx2|avx512] [--reps N] [--no-head] [--shape OUTxIN] [--arith fast|llama]
 *
 * Per shape, T and thread count: the best of N runs (the machine is shared: the minimum is the
 * least disturbed run), as GFLOP/s (2·rows·cols·T / time; int8 ops for the quantized formats) and, for
 * T = 1, the weight bytes read per second (GB/s). The machine is shared, so each figure is given twice:
 * from wall-clock time and from process CPU time divided by the thread count ("cpu" columns: what the
 * kernels do when they get the cores; spinning pool threads count as busy). Weights are random bits with sane scales: the speed of
 * these kernels does not depend on the values. */
#include "base/fp16.h"
#include "backend/cpu/host_backend.h"
#include "base/pool.h"
#include "gguf/format.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/ops.h"
#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return ((float)(rnd() & 0xffffff) / 16777216.f) * 2.f - 1.f; }

static void *xalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n + 64) != 0) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* random bits; the fp16 scale fields set to small finite values */
static void fill_weights(const Format *f, uint8_t *dst, int64_t rows, int64_t cols) {
    const size_t rb = format_row_bytes(f, cols);
    if (f->id == FMT_F32 || f->id == FMT_F16 || f->id == FMT_BF16) {
        float buf[256];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t i = 0; i < cols; i += 256) {
                const int64_t n = cols - i < 256 ? cols - i : 256;
                for (int64_t k = 0; k < n; k++) buf[k] = rndf() * 0.1f;
                f->from_float(buf, dst + r * rb + (size_t)i * (size_t)f->bytes, n);
            }
        return;
    }
    uint32_t *p32 = (uint32_t *)dst;
    for (size_t i = 0; i < rb * (size_t)rows / 4; i++) p32[i] = rnd();
    const uint16_t h = fp32_to_fp16(0.01f);
    for (int64_t b = 0; b < rows * (cols / f->block); b++) {
        uint8_t *blk = dst + (size_t)b * (size_t)f->bytes;
        size_t off = 0;
        switch (f->id) {
        case FMT_MXFP4: blk[0] = 120; continue;
        case FMT_IQ1_M: /* the fp16 d lives in the top nibbles of the four scale words */
            for (int i = 0; i < 4; i++) {
                uint16_t w;
                memcpy(&w, blk + 48 + 2 * i, 2);
                w = (uint16_t)((w & 0x0fff) | ((h >> (4 * i)) & 15) << 12);
                memcpy(blk + 48 + 2 * i, &w, 2);
            }
            continue;
        case FMT_Q2_K: off = 80; break;
        case FMT_Q3_K: off = 108; break;
        case FMT_Q6_K: off = 208; break;
        default: off = 0; break;
        }
        memcpy(blk + off, &h, 2);
        if (f->id == FMT_Q2_K || f->id == FMT_Q4_K || f->id == FMT_Q5_K || f->id == FMT_Q4_1 || f->id == FMT_Q5_1)
            memcpy(blk + off + 2, &h, 2);
    }
}

/* read bandwidth probe: a streaming sum over 256 MiB, split over the pool's threads (best of 3) */
typedef struct Probe {
    const uint64_t *p;
    size_t n;
    uint64_t sum[8];
} Probe;
static void probe_fn(void *ctx, int64_t b, int64_t e, int thread) {
    Probe *pr = ctx;
    for (int64_t s = b; s < e; s++) {
        const uint64_t *v = pr->p + (size_t)s * (pr->n / 2);
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        for (size_t i = 0; i < pr->n / 2; i += 4) a0 += v[i], a1 += v[i + 1], a2 += v[i + 2], a3 += v[i + 3];
        pr->sum[s] = a0 + a1 + a2 + a3;
    }
}
static double probe(Pool *pool, int threads) {
    static uint64_t *buf;
    const size_t n = (256u << 20) / 8;
    if (!buf) {
        buf = xalloc(n * 8);
        for (size_t i = 0; i < n; i++) buf[i] = i;
    }
    Probe pr = {buf, n, {0}};
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
        const double t0 = now_s();
        if (threads == 1)
            probe_fn(&pr, 0, 2, 0);
        else
            pool_for(pool, 2, 1, probe_fn, &pr);
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    return (double)(n * 8) / best * 1e-9;
}

typedef struct Shape {
    const char *model, *name;
    int64_t in, out;
} Shape;

static const Shape shapes[] = {
    {"0.8b", "qkv", 1024, 6144},       {"0.8b", "attn_gate", 1024, 2048}, {"0.8b", "ssm_out", 2048, 1024},
    {"0.8b", "ffn_up", 1024, 3584},    {"0.8b", "ffn_down", 3584, 1024},  {"0.8b", "head", 1024, 248320},
    {"9b", "qkv", 4096, 8192},         {"9b", "attn_gate", 4096, 4096},   {"9b", "ssm_out", 4096, 4096},
    {"9b", "ffn_up", 4096, 12288},     {"9b", "ffn_down", 12288, 4096},   {"9b", "head", 4096, 248320},
};

static int parse_list(const char *s, int64_t *out, int cap) {
    int n = 0;
    while (*s && n < cap) {
        out[n++] = strtoll(s, (char **)&s, 10);
        if (*s == ',') s++;
    }
    return n;
}

static const Format *format_by_name(const char *name) {
    for (uint32_t id = 0; id < FMT_COUNT; id++) {
        const Format *f = format_get(id);
        if (f && strcmp(f->name, name) == 0) return f;
    }
    return NULL;
}

int main(int argc, char **argv) {
    const char *formats = "q8_0", *model = "all", *isa_s = NULL, *arith = "fast";
    int64_t Ts[8] = {1, 512}, ths[8] = {1, 2};
    int nT = 2, nth = 2, reps = 5;
    int no_head = 0;
    int64_t shape_in = 0, shape_out = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--formats") && i + 1 < argc) formats = argv[++i];
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) nT = parse_list(argv[++i], Ts, 8);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) nth = parse_list(argv[++i], ths, 8);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa_s = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-head")) no_head = 1;
        else if (!strcmp(argv[i], "--arith") && i + 1 < argc) arith = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) {
            if (sscanf(argv[++i], "%ldx%ld", (long *)&shape_out, (long *)&shape_in) != 2) return 2;
        } else {
            fprintf(stderr, "usage: matmul_bench [--formats q8_0,...] [--model 0.8b|9b|all] [--T 1,512] "
                            "[--threads 1,2] [--isa ref|avx2|avx512] [--reps N] [--no-head] [--shape OUTxIN] [--arith fast|llama]\n");
            return 2;
        }
    }
    Isa isa;
    Err err = {0};
    if (isa_parse(isa_s ? isa_s : getenv("DELTALLM_ISA"), &isa, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const MatmulFn mm = ops_cpu(isa)->matmul;
    const MatMode mode = !strcmp(arith, "llama") ? MATMUL_GGML : MATMUL_FAST;
    {
        Pool *p2 = pool_create(2, &err);
        printf("ISA %s; read bandwidth probe: %.1f GB/s (1 thread), %.1f GB/s (2 threads)\n\n", isa_name(isa), probe(NULL, 1),
               p2 ? probe(p2, 2) : 0.0);
        pool_destroy(p2);
    }
    printf("| format | model | matrix | in→out | T | threads | ms | GFLOP/s | GB/s | cpu ms | cpu GFLOP/s | cpu GB/s |\n"
           "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    char fl[256];
    snprintf(fl, sizeof fl, "%s", formats);
    for (char *fn = strtok(fl, ","); fn; fn = strtok(NULL, ",")) {
        const Format *f = format_by_name(fn);
        if (!f || !f->weight) {
            fprintf(stderr, "unknown weight format %s\n", fn);
            return 2;
        }
        const int n_shapes = shape_in ? 1 : (int)(sizeof shapes / sizeof shapes[0]);
        for (int s = 0; s < n_shapes; s++) {
            const Shape sh = shape_in ? (Shape){"-", "custom", shape_in, shape_out} : shapes[s];
            if (!shape_in && strcmp(model, "all") && strcmp(model, sh.model)) continue;
            if (no_head && !strcmp(sh.name, "head")) continue;
            if (sh.in % f->block) continue;
            const size_t rb = format_row_bytes(f, sh.in);
            MatW w = {NULL, f->id, sh.in, sh.out, rb, false, NULL, PACK_NONE};
            uint8_t *wd = xalloc(rb * (size_t)sh.out), *pk = NULL;
            fill_weights(f, wd, sh.out, sh.in);
            w.data = wd;
            if (mode == MATMUL_FAST && isa == ISA_AVX512 && pack_p16_format(&w)) { /* as the CPU backend packs */
                pk = xalloc(pack_p16_bytes(&w) * (size_t)(sh.out / 16));
                pack_p16(pk, &w);
                w.pack = pk;
                w.pack_kind = PACK_P16;
            } else if (mode == MATMUL_GGML && f->id == FMT_Q8_0 && sh.out % 8 == 0) {
                pk = xalloc(rb * (size_t)sh.out);
                pack_rows8(pk, wd, sh.out, rb, 34);
                w.pack = pk;
                w.pack_kind = PACK_R8;
            }
            int64_t maxT = 0;
            for (int k = 0; k < nT; k++) maxT = Ts[k] > maxT ? Ts[k] : maxT;
            float *x = xalloc((size_t)(maxT * sh.in) * sizeof(float));
            for (int64_t i = 0; i < maxT * sh.in; i++) x[i] = rndf();
            float *y = xalloc((size_t)(maxT * sh.out) * sizeof(float));
            for (int ti = 0; ti < nth; ti++) {
                Pool *pool = pool_create((int)ths[ti], &err);
                if (!pool) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                const size_t sb = ops_scratch_bytes(maxT, sh.in, (int)ths[ti]);
                void *scratch = xalloc(sb);
                const OpCtx c = {mode, pool, scratch, sb};
                for (int k = 0; k < nT; k++) {
                    const int64_t T = Ts[k];
                    const double flop = 2.0 * (double)sh.in * (double)sh.out * (double)T;
                    int r = T * sh.out * sh.in > ((int64_t)1 << 33) ? 2 : reps; /* the big heads: fewer */
                    mm(&c, &w, x, T, y); /* warm-up */
                    double best = 1e30, cbest = 1e30;
                    for (int rep = 0; rep < r; rep++) {
                        const double t0 = now_s(), c0 = cpu_now();
                        mm(&c, &w, x, T, y);
                        const double dt = now_s() - t0, cdt = (cpu_now() - c0) / (double)ths[ti];
                        if (dt < best) best = dt;
                        if (cdt < cbest) cbest = cdt;
                    }
                    printf("| %s | %s | %s | %ld→%ld | %ld | %ld | %.3f | %.1f | ", f->name, sh.model, sh.name,
                           (long)sh.in, (long)sh.out, (long)T, (long)ths[ti], best * 1e3, flop / best * 1e-9);
                    const double bytes = (double)rb * (double)sh.out;
                    if (T == 1)
                        printf("%.1f | %.3f | %.1f | %.1f |\n", bytes / best * 1e-9, cbest * 1e3, flop / cbest * 1e-9,
                               bytes / cbest * 1e-9);
                    else
                        printf("- | %.3f | %.1f | - |\n", cbest * 1e3, flop / cbest * 1e-9);
                    fflush(stdout);
                }
                free(scratch);
                pool_destroy(pool);
            }
            free(wd), free(pk), free(x), free(y);
        }
    }
    return 0;
}
