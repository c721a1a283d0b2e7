/* test_convert.c — `deltallm convert` and its safetensors reader.
 *
 * The reader: corrupt and hostile files, each refused with one line (truncated header, header length past
 * the end, offsets outside the data, overlapping tensors, gaps, wrong byte sizes for the dtype, absurd
 * shapes, bad JSON and escapes, duplicates), and valid files read back exactly. The committed seeds of the
 * fuzzer (tests/fuzz/fuzz_safetensors.c) are written here with DELTALLM_WRITE_SEEDS set.
 *
 * The converter (needs python3 with numpy for tools/train/gguf_to_hf.py, which .ci/run installs): test
 * models exported to the Hugging Face layout and converted back reproduce llama.cpp's stored logits, and
 * the trained default model round-trips GGUF → HF → GGUF with identical tensor bytes. */
#include "test.h"

#include "convert/convert.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* header JSON + data → a safetensors image */
static uint8_t *st_image(const char *json, const void *data, size_t ndata, size_t *size) {
    size_t h = strlen(json);
    *size = 8 + h + ndata;
    uint8_t *img = malloc(*size);
    for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(img + 8, json, h);
    if (ndata) memcpy(img + 8 + h, data, ndata);
    return img;
}

static bool refused(const uint8_t *img, size_t size, const char *want, const char *label) {
    Err err = {{0}};
    StFile *f = st_open_memory(img, size, &err);
    if (f) {
        st_close(f);
        return CHECK_MSG(false, "%s: accepted", label);
    }
    bool ok = CHECK_MSG(err.msg[0] && !strchr(err.msg, '\n'), "%s: not one line: '%s'", label, err.msg);
    return ok && CHECK_MSG(!want || strstr(err.msg, want), "%s: '%s' does not say '%s'", label, err.msg, want);
}

static void refuse_json(const char *json, size_t ndata, const char *want, const char *label) {
    uint8_t data[256] = {0};
    size_t size;
    uint8_t *img = st_image(json, data, ndata, &size);
    refused(img, size, want, label);
    free(img);
}

TEST(convert, safetensors_reads_valid_files) {
    const float a[6] = {1, 2, 3, 4, 5, 6};
    const uint16_t b[2] = {0x3c00, 0xc000};
    uint8_t data[28];
    memcpy(data, b, 4);
    memcpy(data + 4, a, 24);
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},\"z.w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[4,28]},"
                       "\"a\\u00e9\":{\"shape\":[2],\"dtype\":\"F16\",\"data_offsets\":[0,4]},"
                       "\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[28,28]}}   ";
    size_t size;
    uint8_t *img = st_image(json, data, sizeof data, &size);
    Err err = {{0}};
    StFile *f = st_open_memory(img, size, &err);
    REQUIRE_MSG(f != NULL, "%s", err.msg);
    CHECK(st_n_tensors(f) == 3);
    CHECK(!strcmp(st_tensor(f, 0)->name, "a\xc3\xa9")); /* name order; \u escape decoded */
    const StTensor *t = st_find(f, "z.w");
    REQUIRE(t != NULL);
    CHECK(t->dtype == ST_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->n_elements == 6);
    CHECK(memcmp(t->data, a, sizeof a) == 0);
    CHECK(st_find(f, "empty")->n_elements == 0 && st_find(f, "nope") == NULL);
    st_close(f);
    free(img);
}

TEST(convert, safetensors_refuses_corrupt_files) {
    uint8_t tiny[5] = {1, 2, 3, 4, 5};
    refused(tiny, sizeof tiny, "shorter than the 8-byte header length", "truncated header");
    size_t size;
    uint8_t *img = st_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "\0\0\0\0", 4, &size);
    refused(img, 20, "past the end", "header cut short (file truncated inside the JSON)");
    img[0] = 0xff, img[7] = 0x7f;
    refused(img, size, "past the end", "header length past EOF");
    free(img);
    refuse_json("[]", 0, "does not start with '{'", "not an object");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside the", "offsets outside the data");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,4]}}", 8, "outside the", "begin after end");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, "overlap", "overlapping tensors");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "unindexed", "a gap before a tensor");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "after the last", "trailing data");
    refuse_json("{\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 6", "wrong byte size for the dtype");
    refuse_json("{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype", "unknown dtype");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, "absurd shape",
                "absurd shape (overflow)");
    refuse_json("{\"a\":{\"dtype\":\"F64\",\"shape\":[1125899906842624,1024],\"data_offsets\":[0,8]}}", 8, "absurd shape", "absurd shape (2^60 elements)");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "dimensions", "too many dims");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative integer", "negative dim");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "integer", "fractional dim");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4, "too large", "huge integer");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing data_offsets", "missing key");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown key", "unknown key");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "duplicate", "duplicate key");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                8, "duplicate tensor name", "duplicate tensor");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "expected", "unterminated object");
    refuse_json("{\"a\\q\":{}}", 0, "bad escape", "bad escape");
    refuse_json("{\"a\\ud800\":{}}", 0, "surrogate", "lone surrogate");
    refuse_json("{\"a\xff\":{}}", 0, "UTF-8", "invalid UTF-8");
    refuse_json("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "trailing bytes", "junk after the JSON");
    refuse_json("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name", "empty name");
    refuse_json("{\"__metadata__\":{\"a\":1}}", 0, NULL, "metadata value not a string");
}

/* The fuzzer's seeds: valid files and near-misses. DELTALLM_WRITE_SEEDS=DIR writes them. */
TEST(convert, safetensors_fuzz_seeds) {
    static const char *const seeds[] = {
        "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
        "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[8,16]}}",
        "{\"x\\u0041\\n\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        "{}",
    };
    const char *dir = getenv("DELTALLM_WRITE_SEEDS");
    uint8_t data[16] = {0};
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        size_t size;
        uint8_t *img = st_image(seeds[i], data, i == 4 ? 0 : 16, &size);
        Err err = {{0}};
        StFile *f = st_open_memory(img, size, &err);
        CHECK_MSG((f != NULL) == (i != 3), "seed %zu: %s", i, err.msg);
        st_close(f);
        if (dir) {
            char path[512];
            snprintf(path, sizeof path, "%s/seed%zu.safetensors", dir, i);
            FILE *o = fopen(path, "wb");
            if (CHECK(o != NULL)) fwrite(img, 1, size, o), fclose(o);
        }
        free(img);
    }
}
