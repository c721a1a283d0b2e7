/* llquant.c — the quantize oracle: llama.cpp v0.4.0's llama_model_quantize() (public llama.h API) on a GGUF,
 * no importance matrix. Built against the npm prebuilt library by tools/oracle/check_quantize.sh; never
 * part of the product build or of `make test`.
 *
 * usage: llquant IN.gguf OUT.gguf FTYPE_ID [THREADS] */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: llquant IN.gguf OUT.gguf FTYPE_ID [THREADS]\n");
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    p.ftype = (enum llama_ftype)atoi(argv[3]);
    p.nthread = argc > 4 ? atoi(argv[4]) : 2;
    uint32_t rc = llama_model_quantize(argv[1], argv[2], &p);
    llama_backend_free();
    if (rc) fprintf(stderr, "llquant: llama_model_quantize failed (%u)\n", rc);
    return rc ? 1 : 0;
}
