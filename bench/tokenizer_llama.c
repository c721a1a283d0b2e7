/* tokenizer_llama.c — times llama.cpp's tokenizer in-process, for bench/tokenizer.sh.
 *
 *   tokenizer_llama MODEL.gguf FILE REPS     prints "bytes B tokens N runs R best_ms X mean_ms Y"
 *
 * Our own harness against llama.h (like ../shared/tools/llref.c): it loads the vocabulary only and
 * calls llama_tokenize(add_special = false, parse_special = true) REPS times on the whole file, so the
 * number excludes loading and printing — the same thing `deltallm tokenize --bench` measures. Built and
 * run by bench/tokenizer.sh against the prebuilt llama.cpp v0.4.0 libraries that build-llref.sh fetches. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf FILE REPS\n", argv[0]);
        return 2;
    }
    int reps = atoi(argv[3]);
    FILE *f = fopen(argv[2], "rb");
    if (!f || reps < 1) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) return 1;
    text[len] = 0;
    fclose(f);

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int32_t cap = (int32_t)len + 16;
    llama_token *ids = malloc(sizeof *ids * (size_t)cap);
    double best = 1e30, total = 0;
    int32_t n = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        n = llama_tokenize(vocab, text, (int32_t)len, ids, cap, false, true);
        double dt = now_s() - t0;
        total += dt;
        if (dt < best) best = dt;
    }
    if (n < 0) {
        fprintf(stderr, "tokenization failed\n");
        return 1;
    }
    printf("bytes %ld tokens %d runs %d best_ms %.3f mean_ms %.3f\n", len, n, reps, best * 1e3, total / reps * 1e3);
    free(ids);
    free(text);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
