/* attention_device_bench.c — decode's attention on a device per context length: one query over N cached keys,
 * one workgroup per head walking all of them (tune split=0) against the split over the keys (flash-decoding,
 * the default from 513 keys: docs/VULKAN.md), time per call (best of --reps, each a whole submission waited
 * for). qwen3.5-9B's attention shape by default (16 heads, 4 KV heads, d = 256). The last column is the
 * dispatches of the default's call: 1 where it does not split (up to 512 keys: the same kernel twice, the
 * ratio is the noise), 2 where it does.
 *
 *   make bench && build/attention_device_bench [--device vulkan] [--h 16] [--hkv 4] [--d 256] [--reps 5]
 *                                              [--ctx 512,1024,4096,16384,32768] [--json]
 */
#include "backend/backend.h"
#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

int main(int argc, char **argv) {
    const char *device = "vulkan", *ctx = "512,1024,4096,16384,32768";
    int h = 16, hkv = 4, d = 256, reps = 5;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--h") && i + 1 < argc) h = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hkv") && i + 1 < argc) hkv = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--d") && i + 1 < argc) d = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ctx") && i + 1 < argc) ctx = argv[++i];
        else if (!strcmp(argv[i], "--json")) json = true;
        else {
            fprintf(stderr, "usage: %s [--device NAME] [--h N] [--hkv N] [--d N] [--reps N] [--ctx N,N,..] [--json]\n", argv[0]);
            return 2;
        }
    }
    int ns[16], nn = 0, n_max = 0;
    for (const char *c = ctx; *c && nn < 16;) {
        ns[nn] = atoi(c);
        if (ns[nn] < 1) break;
        if (ns[nn] > n_max) n_max = ns[nn];
        nn++;
        c = strchr(c, ',') ? strchr(c, ',') + 1 : c + strlen(c);
    }
    if (!nn || h < 1 || hkv < 1 || h % hkv || d < 1 || d > 512 || reps < 1) {
        fprintf(stderr, "bad shape or --ctx '%s'\n", ctx);
        return 2;
    }
    Err err = {{0}};
    Backend *be[2];
    static const char *const tunes[2] = {"split=0", NULL};
    const BackendSizes sz = {.max_rows = 1, .max_cols = (int64_t)h * d, .max_ctx = n_max, .head_dim = d, .gqa_group = h / hkv,
                             .d_k = 128, .d_v = 128};
    for (int i = 0; i < 2; i++) {
        be[i] = backend_create(&(BackendOptions){.name = device, .cpu.isa = -1, .tune = tunes[i]}, &err);
        if (!be[i] || be[i]->vt->reserve(be[i], &sz, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
    }
    const size_t nq = (size_t)h * d, nkv = (size_t)n_max * hkv * d;
    float *x = malloc(4 * (nq + 2 * nkv)), *out[2] = {malloc(4 * nq), malloc(4 * nq)};
    uint64_t seed = 11;
    for (size_t i = 0; i < nq + 2 * nkv; i++) x[i] = rnd(&seed);
    BBuf *buf[2];
    for (int i = 0; i < 2; i++) {
        buf[i] = be[i]->vt->alloc(be[i], 4 * (2 * nq + 2 * nkv), &err);
        if (!buf[i]) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        be[i]->vt->upload(be[i], (BView){buf[i], 0}, x, 4 * (nq + 2 * nkv));
    }
    int bad = 0;
    if (json) printf("[\n");
    else printf("| keys | one workgroup per head ms | split over the keys ms | split / one | dispatches |\n|---:|---:|---:|---:|---:|\n");
    for (int ci = 0; ci < nn; ci++) {
        double best[2] = {1e30, 1e30};
        uint64_t disp = 0;
        for (int i = 0; i < 2; i++) {
            const BView q = {buf[i], 0}, k = bv_f32(q, (int64_t)nq), v = bv_f32(k, (int64_t)ns[ci] * hkv * d);
            const BView o = bv_f32(q, (int64_t)(nq + 2 * nkv));
            /* the cache rows 0 … n−1 of K then of V (v follows the first n rows of k) */
            const AttentionArgs a = {1, ns[ci] - 1, h, hkv, d, 1.0f / sqrtf((float)d), q, k, v, o, {0}, 0};
            for (int r = 0; r < reps + 1; r++) { /* the first call warms up (pipelines, caches) */
                const double t0 = now_s();
                be[i]->vt->begin(be[i]);
                BackendStats s0, s1;
                backend_stats(be[i], &s0);
                be[i]->vt->attention(be[i], &a);
                backend_stats(be[i], &s1);
                disp = s1.dispatches - s0.dispatches;
                if (be[i]->vt->submit(be[i], &err) || be[i]->vt->wait(be[i], &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                const double t = now_s() - t0;
                if (r > 0 && t < best[i]) best[i] = t;
            }
            be[i]->vt->download(be[i], out[i], o, 4 * nq);
        }
        double num = 0, den = 0;
        for (size_t j = 0; j < nq; j++) num += ((double)out[1][j] - out[0][j]) * ((double)out[1][j] - out[0][j]), den += (double)out[0][j] * out[0][j];
        if (num > 1e-10 * den) {
            fprintf(stderr, "the split and the unsplit attention differ at %d keys: NMSE %.2e\n", ns[ci], num / den);
            bad = 1;
        }
        if (json)
            printf("  {\"device\": \"%s\", \"keys\": %d, \"h\": %d, \"hkv\": %d, \"d\": %d, \"one_ms\": %.4f, \"split_ms\": %.4f, "
                   "\"dispatches\": %llu}%s\n",
                   be[0]->name, ns[ci], h, hkv, d, best[0] * 1e3, best[1] * 1e3, (unsigned long long)disp, ci + 1 < nn ? "," : "");
        else printf("| %d | %.3f | %.3f | %.2f | %llu |\n", ns[ci], best[0] * 1e3, best[1] * 1e3, best[1] / best[0],
                    (unsigned long long)disp);
        fflush(stdout);
    }
    if (json) printf("]\n");
    for (int i = 0; i < 2; i++) {
        be[i]->vt->free(be[i], buf[i]);
        backend_destroy(be[i]);
    }
    free(x), free(out[0]), free(out[1]);
    return bad;
}
