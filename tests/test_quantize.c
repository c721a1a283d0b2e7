/* test_quantize.c — `deltallm quantize`: the ggml-identical quantizers against ggml's own vectors
 * (tests/data/formats: made by ggml's quantize_chunk without an importance matrix), the type mixes of
 * llama-quantize for our archs, and the command on a small model (types and bytes of every tensor). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
