/* llamacpp_vk_harness.c — llama.cpp's side of the GPU comparison (bench/vulkan_h200.sh): pp and tg in
 * llama-bench's manner (ppN: N random tokens in one llama_decode from an empty context; tgN: N one-token
 * decodes from an empty context; a warm-up first; mean ± sd over --reps) with every layer offloaded, against
 * the libraries of llama.cpp v0.4.0: the npm prebuilt Vulkan build (@node-llama-cpp/linux-x64-vulkan) or the
 * CUDA build the bench script makes from the same release's source; one JSON line per test. Built only by the
 * bench script (it needs llama.h), not by `make bench`.
 *
 *   llamacpp_vk_harness -m MODEL.gguf [-p 512] [-n 128] [-r 3] [-ngl 999] [--backend-dir DIR] [--fa auto|on|off]
 *                       [--require NAME] [--engine LABEL]
 * --require NAME: refuse to measure (exit 3) unless a GPU device whose name starts with NAME ("Vulkan", "CUDA")
 * was loaded, so a backend that did not load cannot pass its CPU numbers off as the GPU's.
 */
#include "llama.h"
#include "ggml-backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(s2 / (n - 1)) : 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *backend_dir = NULL, *fa = "auto", *require = NULL;
    const char *engine = "llama.cpp v0.4.0 (npm vulkan build)";
    int n_pp = 512, n_tg = 128, reps = 3, ngl = 999;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "-p")) n_pp = atoi(v);
        else if (!strcmp(a, "-n")) n_tg = atoi(v);
        else if (!strcmp(a, "-r")) reps = atoi(v);
        else if (!strcmp(a, "-ngl")) ngl = atoi(v);
        else if (!strcmp(a, "--backend-dir")) backend_dir = v;
        else if (!strcmp(a, "--fa")) fa = v;
        else if (!strcmp(a, "--require")) require = v;
        else if (!strcmp(a, "--engine")) engine = v;
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (!model_path || reps < 1 || n_pp < 0 || n_tg < 0) {
        fprintf(stderr, "usage: %s -m MODEL.gguf [-p N] [-n N] [-r N] [-ngl N] [--backend-dir DIR] [--fa auto|on|off]\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    if (backend_dir) ggml_backend_load_all_from_path(backend_dir);
    else ggml_backend_load_all();
    int found = 0;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        fprintf(stderr, "llama.cpp device %zu: %s (%s)\n", i, ggml_backend_dev_name(d), ggml_backend_dev_description(d));
        if (require && ggml_backend_dev_type(d) != GGML_BACKEND_DEVICE_TYPE_CPU &&
            !strncmp(ggml_backend_dev_name(d), require, strlen(require)))
            found = 1;
    }
    if (require && !found) {
        fprintf(stderr, "llama.cpp: no %s device was loaded (see the device lines above)\n", require);
        return 3;
    }
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = ngl;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", model_path);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    struct llama_context_params cp = llama_context_default_params();
    const int n_max = n_pp > n_tg ? n_pp : n_tg;
    cp.n_ctx = n_max + 16 < 256 ? 256 : n_max + 16;
    cp.n_batch = n_pp > 0 ? n_pp : 1;
    cp.n_ubatch = cp.n_batch < 512 ? cp.n_batch : 512;
    cp.n_seq_max = 1;
    cp.no_perf = true;
    cp.flash_attn_type = !strcmp(fa, "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : !strcmp(fa, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "cannot create a context\n");
        return 1;
    }
    llama_memory_t mem = llama_get_memory(ctx);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n_max + 1));
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i <= n_max; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((r >> 33) % (uint64_t)n_vocab);
    }
    double *tps = malloc(sizeof(double) * (size_t)reps);
    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    for (int kind = 0; kind < 2; kind++) {
        const int n = kind == 0 ? n_pp : n_tg;
        if (n == 0) continue;
        for (int k = -1; k < reps; k++) { /* k = -1: warm-up */
            llama_memory_clear(mem, true);
            const double t0 = now_s();
            if (kind == 0) {
                if (llama_decode(ctx, llama_batch_get_one(toks, n))) return fprintf(stderr, "llama_decode failed\n"), 1;
            } else {
                for (int i = 0; i < (k < 0 ? 4 : n); i++)
                    if (llama_decode(ctx, llama_batch_get_one(&toks[i], 1))) return fprintf(stderr, "llama_decode failed\n"), 1;
            }
            llama_synchronize(ctx);
            if (k >= 0) tps[k] = n / (now_s() - t0);
        }
        double m, sd;
        stats(tps, reps, &m, &sd);
        printf("{\"engine\": \"%s\", \"model\": \"%s\", \"desc\": \"%s\", \"ngl\": %d, \"test\": \"%s%d\", "
               "\"tps_mean\": %.3f, \"tps_sd\": %.3f}\n",
               engine, model_path, desc, ngl, kind ? "tg" : "pp", n, m, sd);
        fflush(stdout);
    }
    free(tps);
    free(toks);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
