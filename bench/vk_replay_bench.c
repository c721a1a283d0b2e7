/* vk_replay_bench.c — the host's cost of issuing a decoded token on a device, recording every pass against the
 * pass recorded once and replayed (docs/VULKAN.md "A decode pass recorded once"), in one process on one model:
 * per configuration (DELTALLM_VK_TUNE-style strings, default "graph=0" then ""), n decode steps of one sequence
 * after a warm-up step, with the stream's counts per token (host µs issuing — begin to submission, waits
 * excluded —, dispatches, barriers, commands recorded, replays). Cheaper than `deltallm bench` on a slow
 * device (no probe, no repetitions): lavapipe decodes the 0.8B model at ~0.05 t/s.
 *
 *   make bench && build/vk_replay_bench MODEL.gguf [--device vulkan] [-n 4] [--tune graph=0] [--tune ""] ...
 */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *path = NULL, *device = "vulkan";
    const char *tunes[8];
    int n_tunes = 0, n = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device") && i + 1 < argc) device = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tune") && i + 1 < argc && n_tunes < 8) tunes[n_tunes++] = argv[++i];
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            fprintf(stderr, "usage: %s MODEL.gguf [--device NAME] [-n N] [--tune STRING]...\n", argv[0]);
            return 2;
        }
    }
    if (!path || n < 1) {
        fprintf(stderr, "usage: %s MODEL.gguf [--device NAME] [-n N] [--tune STRING]...\n", argv[0]);
        return 2;
    }
    if (n_tunes == 0) tunes[n_tunes++] = "graph=0", tunes[n_tunes++] = "";
    Err err = {{0}};
    Model *m = model_load(path, &err);
    if (!m) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const int V = m->cfg.n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)V);
    printf("| model | tune | steps | host us/token | dispatches/token | barriers/token | recorded/token | replays | s/token |\n");
    printf("|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    for (int c = 0; c < n_tunes && rc == 0; c++) {
        const ForwardOptions fo = {.max_batch = 1, .max_ctx = n + 16, .backend = {.name = device, .tune = tunes[c]}};
        Forward *f = forward_new(m, &fo, &err);
        SeqState *s = f ? seqstate_new(m, forward_backend(f), n + 16, 0, 0, &err) : NULL;
        if (!s || !logits) {
            fprintf(stderr, "%s\n", err.msg);
            rc = 1;
            forward_free(f);
            break;
        }
        int32_t tok = 11;
        rc = forward_run(f, s, &tok, 1, logits, 1, &err); /* warm-up: pipelines, the capture */
        DevCounts d;
        forward_device_counts(f, &d, true);
        const double t0 = now_s();
        for (int t = 0; t < n && rc == 0; t++) {
            tok = (int32_t)((t * 37 + 5) % V);
            rc = forward_run(f, s, &tok, 1, logits, 1, &err);
        }
        const double secs = now_s() - t0;
        if (rc) fprintf(stderr, "%s\n", err.msg);
        else if (forward_device_counts(f, &d, false) && d.tokens) {
            const double tk = (double)d.tokens;
            printf("| %s | %s | %d | %.1f | %.2f | %.2f | %.2f | %llu | %.2f |\n", m->cfg.name, tunes[c][0] ? tunes[c] : "default",
                   n, d.host_s * 1e6 / tk, (double)d.dispatches / tk, (double)d.barriers / tk, (double)d.recorded / tk,
                   (unsigned long long)d.replays, secs / tk);
            fflush(stdout);
        }
        seqstate_free(s);
        forward_free(f);
    }
    free(logits);
    model_free(m);
    return rc;
}
