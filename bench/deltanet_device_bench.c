/* deltanet_device_bench.c — the delta rule's two forms on one backend (a device by default), per sequence
 * length: the recurrent (fused sequential) form against the chunked form, time per call (best of --reps,
 * each a whole submission waited for), as the table docs/VULKAN.md's choice is read from. qwen3.5's shapes
 * by default (16 key heads, 32 value heads, d = 128).
 *
 *   make bench && build/deltanet_device_bench [--device vulkan] [--hk 16] [--hv 32] [--d 128] [--reps 5] [--json]
 */
#include "backend/backend.h"
#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static float rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

int main(int argc, char **argv) {
    const char *device = "vulkan";
    int hk = 16, hv = 32, d = 128, reps = 5;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "--hk") && i + 1 < argc) hk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hv") && i + 1 < argc) hv = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--d") && i + 1 < argc) d = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = true;
        else {
            fprintf(stderr, "usage: %s [--device NAME] [--hk N] [--hv N] [--d N] [--reps N] [--json]\n", argv[0]);
            return 2;
        }
    }
    if (hk < 1 || hv < hk || hv % hk || d < 16 || d > 256 || reps < 1) {
        fprintf(stderr, "bad shape\n");
        return 2;
    }
    static const int Ts[] = {1, 4, 16, 32, 64, 128, 256, 512, 1024};
    const int T_max = 1024;
    Err err = {{0}};
    Backend *be = backend_create(&(BackendOptions){.name = device, .cpu.isa = -1}, &err);
    if (!be) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const size_t nq = (size_t)T_max * hk * d, nv = (size_t)T_max * hv * d, ns = (size_t)hv * d * d, nh = (size_t)T_max * hv;
    const BackendSizes sz = {.max_rows = T_max, .max_cols = (int64_t)hv * d, .max_ctx = T_max, .head_dim = 128, .gqa_group = 1,
                             .d_k = d, .d_v = d};
    BBuf *buf = be->vt->reserve(be, &sz, &err) ? NULL : be->vt->alloc(be, 4 * (2 * nq + 2 * nv + 2 * ns + 2 * nh), &err);
    if (!buf) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    float *h = malloc(4 * (2 * nq + nv + ns + 2 * nh));
    uint64_t seed = 7;
    for (size_t i = 0; i < 2 * nq + nv + ns + 2 * nh; i++) h[i] = rnd(&seed);
    for (size_t r = 0; r < 2 * nq / (size_t)d; r++) { /* q and k are L2-normed */
        double s = 0;
        for (int i = 0; i < d; i++) s += (double)h[r * d + i] * h[r * d + i];
        for (int i = 0; i < d; i++) h[r * d + i] /= (float)sqrt(s);
    }
    float *g = h + 2 * nq + nv + ns, *beta = g + nh;
    for (size_t i = 0; i < nh; i++) g[i] = -0.3f * (g[i] + 1.0f), beta[i] = 0.5f * (beta[i] + 1.0f);
    for (size_t i = 0; i < ns; i++) h[2 * nq + nv + i] *= 0.1f;
    const BView q = {buf, 0}, k = bv_f32(q, (int64_t)nq), v = bv_f32(k, (int64_t)nq), s0 = bv_f32(v, (int64_t)nv);
    const BView gv = bv_f32(s0, (int64_t)ns), bv = bv_f32(gv, (int64_t)nh), st = bv_f32(bv, (int64_t)nh), o = bv_f32(st, (int64_t)ns);
    be->vt->upload(be, q, h, 4 * (2 * nq + nv + ns + 2 * nh));
    if (json) printf("[\n");
    else printf("| T | recurrent ms | chunked ms | chunked / recurrent |\n|---:|---:|---:|---:|\n");
    for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
        double best[2] = {1e30, 1e30};
        for (int form = 0; form < 2; form++)
            for (int r = 0; r < reps + 1; r++) { /* the first call warms up (pipelines, caches) */
                const DeltaArgs a = {Ts[ti], hk, hv, d, d, false, form == 1, q, k, v, gv, bv, s0, st, o, {0}, false};
                const double t0 = now_s();
                be->vt->begin(be);
                be->vt->deltanet(be, &a);
                if (be->vt->submit(be, &err) || be->vt->wait(be, &err)) {
                    fprintf(stderr, "%s\n", err.msg);
                    return 1;
                }
                const double t = now_s() - t0;
                if (r > 0 && t < best[form]) best[form] = t;
            }
        if (json)
            printf("  {\"device\": \"%s\", \"T\": %d, \"hk\": %d, \"hv\": %d, \"d\": %d, \"recurrent_ms\": %.4f, \"chunked_ms\": %.4f}%s\n",
                   be->name, Ts[ti], hk, hv, d, best[0] * 1e3, best[1] * 1e3, ti + 1 < sizeof Ts / sizeof Ts[0] ? "," : "");
        else printf("| %d | %.3f | %.3f | %.2f |\n", Ts[ti], best[0] * 1e3, best[1] * 1e3, best[1] / best[0]);
        fflush(stdout);
    }
    if (json) printf("]\n");
    free(h);
    be->vt->free(be, buf);
    backend_destroy(be);
    return 0;
}
