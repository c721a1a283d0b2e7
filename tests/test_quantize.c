/* test_quantize.c — `deltallm quantize`: the ggml-identical quantizers against ggml's own vectors
 * (tests/data/formats: made by ggml's quantize_chunk without an importance matrix), the type mixes of
 * llama-quantize for our archs, and the command on a small model (types and bytes of every tensor). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/format.h"
#include "quantize/quant_ggml.h"
#include "test.h"

#define ROW_LEN 1024
#define W_ROWS 8

TEST(quantize, blocks_equal_ggml) {
    static const char *const names[] = {"q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "iq4_nl", "iq4_xs",
                                        "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16", "bf16"};
    for (size_t t = 0; t < sizeof names / sizeof *names; t++) {
        const Format *f = NULL;
        for (uint32_t id = 0; id < FMT_COUNT && !f; id++)
            if (format_get(id) && !strcmp(format_get(id)->name, names[t])) f = format_get(id);
        if (!CHECK_MSG(f != NULL, "%s", names[t])) continue;
        FormatFromFloat q = qg_quantizer(f->id);
        if (!CHECK_MSG(q != NULL, "%s: no quantizer", names[t])) continue;
        char rel[96];
        size_t ns = 0, nw = 0;
        snprintf(rel, sizeof rel, "formats/%s.weights.src.f32", names[t]);
        float *src = test_read_file(test_data(rel), &ns);
        snprintf(rel, sizeof rel, "formats/%s.weights.bin", names[t]);
        uint8_t *want = test_read_file(test_data(rel), &nw);
        const size_t bytes = W_ROWS * format_row_bytes(f, ROW_LEN);
        uint8_t *got = malloc(bytes);
        if (CHECK_MSG(src && want && ns == W_ROWS * ROW_LEN * sizeof(float) && nw == bytes, "%s vectors", names[t])) {
            for (int r = 0; r < W_ROWS; r++) q(src + r * ROW_LEN, got + r * format_row_bytes(f, ROW_LEN), ROW_LEN);
            int bad = 0, nb = W_ROWS * ROW_LEN / f->block;
            for (int b = 0; b < nb; b++) bad += memcmp(got + (size_t)b * f->bytes, want + (size_t)b * f->bytes, (size_t)f->bytes) != 0;
            CHECK_MSG(bad == 0, "%s: %d of %d blocks differ from ggml", names[t], bad, nb);
        }
        free(src), free(want), free(got);
    }
}

#include <cjson/cJSON.h>

#include "quantize/quantize.h"

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* `deltallm quantize` writes the file llama.cpp's llama_model_quantize() writes, byte for byte: goldens
 * (size and FNV-1a-64 of llama.cpp's output) recorded by tools/oracle/check_quantize.sh. */
TEST(quantize, files_equal_llama_quantize) {
    char *txt = test_read_file(test_data("quantize/llama-quantize.json"), NULL);
    REQUIRE_MSG(txt != NULL, "quantize/llama-quantize.json missing");
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    REQUIRE(root != NULL);
    int n_checked = 0;
    const cJSON *model, *type;
    cJSON_ArrayForEach(model, root) {
        char in[512], out[512];
        snprintf(out, sizeof out, "models/%s", model->string);
        snprintf(in, sizeof in, "%s", test_data(out));
        if (access(in, R_OK) != 0) snprintf(in, sizeof in, "assets/%s", model->string); /* the trained default */
        cJSON_ArrayForEach(type, model) {
            const QuantFtype *ft = quant_ftype_find(type->string);
            if (!CHECK_MSG(ft != NULL, "%s", type->string)) continue;
            snprintf(out, sizeof out, "%s/q-%s", test_tmpdir(), type->string);
            QuantizeOpts o = {.in = in, .out = out, .ftype = ft, .n_threads = 2};
            Err err = {{0}};
            if (!CHECK_MSG(gguf_quantize(&o, &err) == 0, "%s %s: %s", model->string, type->string, err.msg)) continue;
            size_t n = 0;
            uint8_t *got = test_read_file(out, &n);
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx", got ? (unsigned long long)fnv1a64(got, n) : 0ull);
            const cJSON *want_n = cJSON_GetObjectItem(type, "bytes"), *want_h = cJSON_GetObjectItem(type, "fnv1a64");
            CHECK_MSG(got && (double)n == want_n->valuedouble && !strcmp(hex, want_h->valuestring),
                      "%s %s: %zu bytes fnv %s, llama.cpp wrote %.0f bytes fnv %s", model->string, type->string, n, hex,
                      want_n->valuedouble, want_h->valuestring);
            free(got);
            remove(out);
            n_checked++;
        }
    }
    test_note("%d model/type pairs byte-identical to llama.cpp's output", n_checked);
    CHECK(n_checked >= 28);
    cJSON_Delete(root);
}

TEST(quantize, refuses_bad_requests) {
    CHECK(quant_ftype_find("q4_k_m") != NULL);
    CHECK(quant_ftype_find("IQ2_XXS") == NULL); /* needs an importance matrix and a quantizer deltallm lacks */
    CHECK(quant_ftype_find("Q7") == NULL);
    char out[512];
    snprintf(out, sizeof out, "%s/q-bad", test_tmpdir());
    QuantizeOpts o = {.in = test_data("vocab/ggml-vocab-qwen35.gguf"), .out = out, .ftype = quant_ftype_find("Q8_0")};
    Err err = {{0}};
    CHECK(gguf_quantize(&o, &err) != 0); /* a vocabulary-only file has no block_count */
    CHECK_MSG(strchr(err.msg, '\n') == NULL && err.msg[0], "one line: %s", err.msg);
    o.in = "/nonexistent.gguf";
    err_clear(&err);
    CHECK(gguf_quantize(&o, &err) != 0 && err.msg[0]);
}
