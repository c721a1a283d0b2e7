/* vision_bench.c — the vision encoder's speed on the CPU (bench/vision.sh runs it beside llama.cpp's mtmd on
 * the same files and writes the table).
 *
 *   vision_bench --mmproj F --rgb FILE --size WxH [--threads 1,2] [--reps N] [--arith fast|llama|exact] [--profile]
 *                [--no-warmup] [--device NAME] [--out FILE]
 *
 * FILE: raw RGB bytes, W·H·3 (what bench/vision.sh writes for both engines). Per thread count: the image
 * pre-processed once, one untimed encode (not with --no-warmup), then the best and mean of N timed encodes (the machine is shared:
 * the minimum is the least disturbed run). --profile adds the time per stage. One JSON line per thread count.
 * --device NAME: the tower through the backend interface on that backend (vision/vision_dev.h: "vulkan", or a
 * host backend in the exact arithmetic), its weights bound once before the timed encodes. --out FILE: the last
 * encode's embeddings as raw floats ([tokens][width]), to compare paths. */
#include "base/clock.h"
#include "base/pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels_cpu.h"
#include "vision/encoder.h"
#include "vision/mmproj.h"
#include "vision/preprocess.h"
#include "vision/vision_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *mp = NULL, *rgbp = NULL, *threads = "1,2", *arith = "fast", *device = NULL, *outp = NULL;
    int w = 0, h = 0, reps = 3, profile = 0, warm = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--mmproj") && v) mp = v, i++;
        else if (!strcmp(a, "--rgb") && v) rgbp = v, i++;
        else if (!strcmp(a, "--size") && v) sscanf(v, "%dx%d", &w, &h), i++;
        else if (!strcmp(a, "--threads") && v) threads = v, i++;
        else if (!strcmp(a, "--reps") && v) reps = atoi(v), i++;
        else if (!strcmp(a, "--arith") && v) arith = v, i++;
        else if (!strcmp(a, "--profile")) profile = 1;
        else if (!strcmp(a, "--no-warmup")) warm = 0;
        else if (!strcmp(a, "--device") && v) device = v, i++;
        else if (!strcmp(a, "--out") && v) outp = v, i++;
        else {
            fprintf(stderr, "usage: vision_bench --mmproj F --rgb FILE --size WxH [--threads 1,2] [--reps N] [--arith fast|llama|exact] [--profile]\n");
            return 2;
        }
    }
    if (!mp || !rgbp || w < 1 || h < 1 || reps < 1) {
        fprintf(stderr, "vision_bench: --mmproj, --rgb and --size are needed\n");
        return 2;
    }
    Err err = {{0}};
    Mmproj *m = mmproj_open(mp, &err);
    if (!m) {
        fprintf(stderr, "vision_bench: %s\n", err.msg);
        return 1;
    }
    uint8_t *rgb = malloc((size_t)w * h * 3);
    FILE *f = fopen(rgbp, "rb");
    if (!rgb || !f || fread(rgb, 1, (size_t)w * h * 3, f) != (size_t)w * h * 3) {
        fprintf(stderr, "vision_bench: cannot read %d×%d×3 bytes from %s\n", w, h, rgbp);
        return 1;
    }
    fclose(f);
    float *pix;
    int nx, ny;
    const double tp = now_s();
    if (vision_preprocess(m, rgb, w, h, &pix, &nx, &ny, &err)) {
        fprintf(stderr, "vision_bench: %s\n", err.msg);
        return 1;
    }
    const double t_pre = now_s() - tp;
    const int T = vision_n_tokens(m, nx, ny), W = mmproj_out_width(m);
    float *out = malloc(sizeof(float) * (size_t)T * W);
    for (const char *p = threads; *p;) {
        const int nt = atoi(p);
        Pool *pool = pool_create(nt, &err);
        if (!pool) {
            fprintf(stderr, "vision_bench: %s\n", err.msg);
            return 1;
        }
        VisionDev *vd = NULL;
        if (device && !(vd = vision_dev_open(m, &(BackendOptions){.name = device, .n_threads = nt, .mode = MATMUL_EXACT, .cpu.isa = -1}, &err))) {
            fprintf(stderr, "vision_bench: %s\n", err.msg);
            return 1;
        }
        VisionProfile prof;
        VisionRun run = {ops_cpu(isa_best()), !strcmp(arith, "exact") ? MATMUL_EXACT : !strcmp(arith, "llama") ? MATMUL_GGML : MATMUL_FAST, pool, isa_best(), NULL};
        if (warm && (vd ? vision_dev_encode(vd, pix, nx, ny, out, &err) : vision_encode(m, pix, nx, ny, &run, out, &err))) {
            fprintf(stderr, "vision_bench: %s\n", err.msg);
            return 1;
        }
        double best = 1e30, sum = 0;
        memset(&prof, 0, sizeof prof);
        run.prof = profile ? &prof : NULL;
        for (int r = 0; r < reps; r++) {
            const double t0 = now_s();
            if (vd) vision_dev_encode(vd, pix, nx, ny, out, &err);
            else vision_encode(m, pix, nx, ny, &run, out, &err);
            const double dt = now_s() - t0;
            sum += dt;
            if (dt < best) best = dt;
        }
        printf("{\"engine\": \"deltallm\", \"arith\": \"%s\", \"size\": \"%dx%d\", \"patches\": %d, \"tokens\": %d, \"threads\": %d, "
               "\"min_ms\": %.1f, \"mean_ms\": %.1f, \"reps\": %d, \"preprocess_ms\": %.1f",
               device ? device : arith, nx, ny, 4 * T, T, nt, best * 1e3, sum / reps * 1e3, reps, t_pre * 1e3);
        if (profile)
            printf(", \"profile_ms\": {\"matmul\": %.1f, \"attention\": %.1f, \"norm_rope_act\": %.1f}", prof.matmul * 1e3 / reps,
                   prof.attention * 1e3 / reps, prof.other * 1e3 / reps);
        printf("}\n");
        fflush(stdout);
        vision_dev_close(vd);
        pool_destroy(pool);
        while (*p && *p != ',') p++;
        if (*p == ',') p++;
    }
    if (outp) {
        FILE *fo = fopen(outp, "wb");
        if (!fo || fwrite(out, sizeof(float), (size_t)T * W, fo) != (size_t)T * W) fprintf(stderr, "vision_bench: cannot write %s\n", outp);
        if (fo) fclose(fo);
    }
    free(out), free(pix), free(rgb);
    mmproj_close(m);
    return 0;
}
