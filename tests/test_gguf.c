/* test_gguf.c — the GGUF reader and writer (group `gguf`).
 *
 * Every refused case is a small file built here, byte by byte (the Buf helpers below), or a valid file
 * from the writer with bytes patched at known offsets: no corrupt blobs are committed. Each case checks
 * that the open fails and that the one-line message names the problem (and, where the reader knows it,
 * the byte offset or the tensor). Positive tests cover every value type through writer and reader, the
 * typed accessors, alignment, split sets, the six test models (against their .gguf.json sidecars), and
 * `deltallm inspect`. The fuzzer (tests/fuzz/fuzz_gguf.c) takes its seeds from gguf/fuzz_seeds here. */
#include "test.h"

#include "gguf/format.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/config.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- a raw GGUF builder ------------------------------------------------------------------------------ */

typedef struct Buf {
    uint8_t *p;
    size_t len, cap;
} Buf;

static void b_put(Buf *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
}
static void b_u8(Buf *b, uint8_t v) { b_put(b, &v, 1); }
static void b_u32(Buf *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(Buf *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(Buf *b, const char *s) {
    b_u64(b, strlen(s));
    b_put(b, s, strlen(s));
}
static void b_set_u32(Buf *b, size_t at, uint32_t v) { memcpy(b->p + at, &v, 4); }
static void b_set_u64(Buf *b, size_t at, uint64_t v) { memcpy(b->p + at, &v, 8); }
static void b_free(Buf *b) {
    free(b->p);
    *b = (Buf){0};
}

static void hdr(Buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b_put(b, "GGUF", 4);
    b_u32(b, version);
    b_u64(b, n_tensors);
    b_u64(b, n_kv);
}
static void kv_key(Buf *b, const char *key, uint32_t type) {
    b_str(b, key);
    b_u32(b, type);
}
static void kv_str(Buf *b, const char *key, const char *v) {
    kv_key(b, key, GGUF_TYPE_STRING);
    b_str(b, v);
}
static void kv_u32(Buf *b, const char *key, uint32_t v) {
    kv_key(b, key, GGUF_TYPE_U32);
    b_u32(b, v);
}
/* A tensor record: name, n_dims, ne[], type, offset. */
static void tinfo(Buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset) {
    b_str(b, name);
    b_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) b_u64(b, ne[d]);
    b_u32(b, type);
    b_u64(b, offset);
}
/* Pads to the alignment (the data section starts there) and appends n bytes of tensor data. */
static void data(Buf *b, uint32_t align, size_t n) {
    while (b->len % align) b_u8(b, 0);
    for (size_t i = 0; i < n; i++) b_u8(b, (uint8_t)(i * 7 + 1));
}

/* The small valid file the truncation test cuts: two KVs and two tensors; the last tensor's data ends at
 * the end of the file (64 + 32 bytes, no padding after it), so every proper prefix is incomplete. */
static void small_valid_at(Buf *b, size_t *meta_end, size_t *dir_end) {
    hdr(b, 3, 2, 2);
    kv_str(b, "general.architecture", "test");
    kv_key(b, "test.values", GGUF_TYPE_ARRAY);
    b_u32(b, GGUF_TYPE_I32);
    b_u64(b, 3);
    b_u32(b, 1), b_u32(b, 2), b_u32(b, 3);
    *meta_end = b->len;
    tinfo(b, "t.a", 2, (const uint64_t[]){8, 2}, FMT_F32, 0);
    tinfo(b, "t.b", 1, (const uint64_t[]){16}, FMT_F16, 64);
    *dir_end = b->len;
    data(b, 32, 96);
}
static void small_valid(Buf *b) {
    size_t m, d;
    small_valid_at(b, &m, &d);
}

/* ---- expectations ------------------------------------------------------------------------------------- */

static bool one_line(const char *msg) { return msg[0] && !strchr(msg, '\n') && !strchr(msg, '\r'); }

/* Opens the image and expects failure with every needle in the message. */
static bool expect_fail_(const void *p, size_t n, const char *const *needles, const char *file, int line) {
    Err err = {{0}};
    Gguf *g = gguf_open_memory(p, n, &err);
    if (g) {
        gguf_close(g);
        return test_check(false, file, line, "open fails", "the reader accepted it");
    }
    bool ok = test_check(one_line(err.msg), file, line, "one-line message", "'%s'", err.msg);
    for (int i = 0; needles[i]; i++)
        ok &= test_check(strstr(err.msg, needles[i]) != NULL, file, line, "message names the problem",
                         "'%s' not in '%s'", needles[i], err.msg);
    test_note("refused: %s", err.msg);
    return ok;
}
#define EXPECT_FAIL(b, ...) expect_fail_((b)->p, (b)->len, (const char *const[]){__VA_ARGS__, NULL}, __FILE__, __LINE__)

static Gguf *open_ok_(const void *p, size_t n, const char *file, int line) {
    Err err = {{0}};
    Gguf *g = gguf_open_memory(p, n, &err);
    test_check(g != NULL, file, line, "open succeeds", "%s", err.msg);
    return g;
}
#define OPEN_OK(b) open_ok_((b)->p, (b)->len, __FILE__, __LINE__)

static bool contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

/* ---- header ------------------------------------------------------------------------------------------- */

TEST(gguf, rejects_bad_magic) {
    Buf b = {0};
    small_valid(&b);
    memcpy(b.p, "GGML", 4);
    EXPECT_FAIL(&b, "bad magic", "byte offset 0");
    /* through a file too: the message names the file */
    char path[512];
    snprintf(path, sizeof path, "%s/badmagic.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fwrite(b.p, 1, b.len, f);
    fclose(f);
    Err err = {{0}};
    CHECK(gguf_open(path, &err) == NULL);
    CHECK_MSG(contains(err.msg, "bad magic") && contains(err.msg, "badmagic.gguf"), "%s", err.msg);
    b_free(&b);
}

TEST(gguf, rejects_other_versions) {
    const uint32_t versions[] = {0, 1, 2, 4, 0x03000000u};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        Buf b = {0};
        small_valid(&b);
        b_set_u32(&b, 4, versions[i]);
        char want[64];
        snprintf(want, sizeof want, "unsupported GGUF version %u", versions[i]);
        EXPECT_FAIL(&b, want, "byte offset 4");
        b_free(&b);
    }
}

TEST(gguf, rejects_file_shorter_than_header) {
    Buf b = {0};
    small_valid(&b);
    for (size_t n = 0; n < 24; n++) {
        Err err = {{0}};
        Gguf *g = gguf_open_memory(n ? b.p : NULL, n, &err);
        CHECK_MSG(!g && contains(err.msg, "truncated") && contains(err.msg, "byte offset"), "%zu bytes: %s", n, err.msg);
        gguf_close(g);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/short.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fwrite(b.p, 1, 10, f);
    fclose(f);
    Err err = {{0}};
    CHECK(gguf_open(path, &err) == NULL);
    CHECK_MSG(contains(err.msg, "shorter than a GGUF header"), "%s", err.msg);
    test_note("refused: %s", err.msg);
    b_free(&b);
}

/* Every proper prefix of a valid file must be refused with a message, never read past its end (ASan
 * checks that: each prefix is copied into its own exact-size allocation). One test for truncated header,
 * metadata, tensor directory and tensor data. */
TEST(gguf, rejects_truncation_at_every_offset) {
    Buf b = {0};
    size_t meta_end, dir_end;
    small_valid_at(&b, &meta_end, &dir_end);
    Gguf *full = OPEN_OK(&b);
    REQUIRE(full);
    gguf_close(full);
    int kinds[4] = {0};
    for (size_t n = 0; n < b.len; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        Err err = {{0}};
        Gguf *g = gguf_open_memory(copy, n, &err);
        bool named = contains(err.msg, "truncated") || contains(err.msg, "past the end") ||
                     contains(err.msg, "impossible with");
        CHECK_MSG(!g && one_line(err.msg) && named, "prefix of %zu bytes: %s", n, g ? "accepted" : err.msg);
        kinds[n < 24 ? 0 : n < meta_end ? 1 : n < dir_end ? 2 : 3]++;
        gguf_close(g);
        free(copy);
    }
    test_note("%zu prefixes refused (header %d, metadata %d, tensor directory %d, tensor data %d)", b.len, kinds[0],
              kinds[1], kinds[2], kinds[3]);
    b_free(&b);
}

TEST(gguf, rejects_absurd_counts) {
    Buf b = {0};
    small_valid(&b);
    b_set_u64(&b, 16, 1ull << 40);
    EXPECT_FAIL(&b, "absurd metadata count 1099511627776", "byte offset 16");
    b_set_u64(&b, 16, UINT64_MAX);
    EXPECT_FAIL(&b, "absurd metadata count");
    b_set_u64(&b, 16, 2);
    b_set_u64(&b, 8, 1ull << 40);
    EXPECT_FAIL(&b, "absurd tensor count 1099511627776", "byte offset 8");
    b_set_u64(&b, 8, UINT64_MAX);
    EXPECT_FAIL(&b, "absurd tensor count");
    b_free(&b);
}

/* ---- metadata ----------------------------------------------------------------------------------------- */

TEST(gguf, rejects_string_length_past_eof) {
    /* key */
    Buf b = {0};
    hdr(&b, 3, 0, 1);
    size_t at = b.len;
    b_u64(&b, 1000);
    b_put(&b, "general.name", 12);
    char off[64];
    snprintf(off, sizeof off, "byte offset %zu", at);
    EXPECT_FAIL(&b, "metadata key", "string length 1000 runs past the end of the file", off);
    b_set_u64(&b, at, UINT64_MAX);
    EXPECT_FAIL(&b, "metadata key", "runs past the end of the file", off);
    b_free(&b);
    /* value */
    hdr(&b, 3, 0, 1);
    kv_key(&b, "general.name", GGUF_TYPE_STRING);
    at = b.len;
    b_u64(&b, 1ull << 62);
    b_put(&b, "abc", 3);
    snprintf(off, sizeof off, "byte offset %zu", at);
    EXPECT_FAIL(&b, "metadata 'general.name'", "runs past the end of the file", off);
    b_free(&b);
    /* tensor name */
    hdr(&b, 3, 1, 0);
    at = b.len;
    b_u64(&b, 40);
    b_put(&b, "blk.0.attn_q.weight", 19);
    while (b.len < 200) b_u8(&b, 0); /* enough bytes for the count checks, not for the name */
    b_set_u64(&b, at, 1000);
    snprintf(off, sizeof off, "byte offset %zu", at);
    EXPECT_FAIL(&b, "tensor name", "string length 1000 runs past the end of the file", off);
    b_free(&b);
}

TEST(gguf, rejects_array_count_past_eof) {
    /* scalar elements: count x size past EOF, and count x size overflowing 64 bits */
    const uint64_t counts[] = {1000, 1ull << 61, UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        Buf b = {0};
        hdr(&b, 3, 0, 1);
        kv_key(&b, "test.arr", GGUF_TYPE_ARRAY);
        size_t at = b.len;
        b_u32(&b, GGUF_TYPE_U64);
        b_u64(&b, counts[i]);
        b_u64(&b, 1), b_u64(&b, 2);
        char off[64];
        snprintf(off, sizeof off, "byte offset %zu", at);
        EXPECT_FAIL(&b, "metadata 'test.arr'", "u64 elements runs past the end of the file", off);
        b_free(&b);
    }
    /* strings: a count no file of this size can hold, then a plausible count whose last string is cut */
    Buf b = {0};
    hdr(&b, 3, 0, 1);
    kv_key(&b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    size_t at = b.len;
    b_u32(&b, GGUF_TYPE_STRING);
    b_u64(&b, 1ull << 40);
    b_str(&b, "a"), b_str(&b, "b");
    char off[64];
    snprintf(off, sizeof off, "byte offset %zu", at);
    EXPECT_FAIL(&b, "metadata 'tokenizer.ggml.tokens'", "array count 1099511627776 is impossible", off);
    b_set_u64(&b, at + 4, 2);
    b.len -= 1; /* "b" loses its byte */
    EXPECT_FAIL(&b, "metadata 'tokenizer.ggml.tokens'", "string length 1 runs past the end of the file");
    b_free(&b);
    /* nested arrays: the outer count, then an inner one */
    hdr(&b, 3, 0, 1);
    kv_key(&b, "test.nested", GGUF_TYPE_ARRAY);
    at = b.len;
    b_u32(&b, GGUF_TYPE_ARRAY);
    b_u64(&b, 1000);
    b_u32(&b, GGUF_TYPE_U8);
    b_u64(&b, 2);
    b_u8(&b, 1), b_u8(&b, 2);
    snprintf(off, sizeof off, "byte offset %zu", at);
    EXPECT_FAIL(&b, "metadata 'test.nested'", "array count 1000 is impossible", off);
    b_set_u64(&b, at + 4, 1);
    b_set_u64(&b, at + 16, 3);
    snprintf(off, sizeof off, "byte offset %zu", at + 12);
    EXPECT_FAIL(&b, "metadata 'test.nested'", "array of 3 u8 elements runs past the end of the file", off);
    b_free(&b);
}

/* An array nested `depth` deep: [[[...[7]...]]]. */
static void nested(Buf *b, int depth) {
    hdr(b, 3, 0, 1);
    kv_key(b, "test.deep", GGUF_TYPE_ARRAY);
    for (int d = 1; d < depth; d++) {
        b_u32(b, GGUF_TYPE_ARRAY);
        b_u64(b, 1);
    }
    b_u32(b, GGUF_TYPE_I32);
    b_u64(b, 1);
    b_u32(b, 7);
}

TEST(gguf, rejects_arrays_nested_too_deeply) {
    Buf b = {0};
    nested(&b, 8);
    Gguf *g = OPEN_OK(&b);
    if (g) {
        const GgufValue *v = gguf_get(g, "test.deep");
        for (int d = 1; v && d < 8; d++) v = v->arr.n == 1 && v->arr.type == GGUF_TYPE_ARRAY ? &v->arr.items[0] : NULL;
        CHECK(v && v->arr.type == GGUF_TYPE_I32 && v->arr.n == 1 && gguf_arr_i64(&v->arr, 0) == 7);
        gguf_close(g);
    }
    b_free(&b);
    nested(&b, 9);
    EXPECT_FAIL(&b, "metadata 'test.deep'", "arrays nested too deeply", "byte offset");
    b_free(&b);
    /* a deep chain that would recurse thousands of levels is stopped at the same depth */
    hdr(&b, 3, 0, 1);
    kv_key(&b, "test.deep", GGUF_TYPE_ARRAY);
    for (int d = 0; d < 5000; d++) {
        b_u32(&b, GGUF_TYPE_ARRAY);
        b_u64(&b, 1);
    }
    EXPECT_FAIL(&b, "arrays nested too deeply");
    b_free(&b);
}

TEST(gguf, rejects_unknown_value_types) {
    const uint32_t types[] = {GGUF_TYPE_COUNT, 100, UINT32_MAX};
    for (int i = 0; i < 3; i++) {
        Buf b = {0};
        hdr(&b, 3, 0, 1);
        b_str(&b, "test.x");
        size_t at = b.len;
        b_u32(&b, types[i]);
        b_u64(&b, 0);
        char want[64], off[64];
        snprintf(want, sizeof want, "unknown value type %u", types[i]);
        snprintf(off, sizeof off, "byte offset %zu", at);
        EXPECT_FAIL(&b, "metadata 'test.x'", want, off);
        b_free(&b);
        /* as an array element type */
        hdr(&b, 3, 0, 1);
        kv_key(&b, "test.arr", GGUF_TYPE_ARRAY);
        at = b.len;
        b_u32(&b, types[i]);
        b_u64(&b, 0);
        snprintf(want, sizeof want, "unknown array element type %u", types[i]);
        snprintf(off, sizeof off, "byte offset %zu", at);
        EXPECT_FAIL(&b, "metadata 'test.arr'", want, off);
        b_free(&b);
    }
}

TEST(gguf, rejects_duplicate_and_empty_keys) {
    Buf b = {0};
    hdr(&b, 3, 0, 3);
    kv_str(&b, "general.name", "a");
    kv_u32(&b, "general.x", 1);
    size_t at = b.len;
    kv_str(&b, "general.name", "b");
    char off[64];
    snprintf(off, sizeof off, "byte offset %zu", at);
    EXPECT_FAIL(&b, "duplicate metadata key 'general.name'", off);
    b_free(&b);
    hdr(&b, 3, 0, 1);
    kv_u32(&b, "", 1);
    EXPECT_FAIL(&b, "empty metadata key", "byte offset 24");
    b_free(&b);
}

TEST(gguf, rejects_bad_alignment) {
    const uint32_t bad[] = {0, 3, 48, 1u << 17};
    for (int i = 0; i < 4; i++) {
        Buf b = {0};
        hdr(&b, 3, 0, 1);
        kv_u32(&b, "general.alignment", bad[i]);
        char want[80];
        snprintf(want, sizeof want, "general.alignment %u is not a power of two", bad[i]);
        EXPECT_FAIL(&b, want);
        b_free(&b);
    }
    Buf b = {0};
    hdr(&b, 3, 0, 1);
    kv_key(&b, "general.alignment", GGUF_TYPE_U64);
    b_u64(&b, 32);
    EXPECT_FAIL(&b, "general.alignment must be u32, found u64");
    b_free(&b);
    hdr(&b, 3, 0, 1);
    kv_str(&b, "general.alignment", "32");
    EXPECT_FAIL(&b, "general.alignment must be u32, found str");
    b_free(&b);
}

/* ---- tensor directory ---------------------------------------------------------------------------------- */

/* One tensor record after a one-KV header, followed by `pad` bytes of data (so size checks pass). */
static size_t one_tensor(Buf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                         size_t n_data) {
    hdr(b, 3, 1, 1);
    kv_str(b, "general.architecture", "test");
    size_t at = b->len;
    tinfo(b, name, n_dims, ne, type, offset);
    data(b, 32, n_data);
    return at;
}

TEST(gguf, rejects_bad_dims) {
    Buf b = {0};
    size_t at = one_tensor(&b, "t", 0, NULL, FMT_F32, 0, 64);
    char off[64];
    snprintf(off, sizeof off, "byte offset %zu", at + 9);
    EXPECT_FAIL(&b, "tensor 't': 0 dimensions (1 to 4 allowed)", off);
    b_free(&b);
    one_tensor(&b, "t", 5, (const uint64_t[]){1, 1, 1, 1, 1}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "tensor 't': 5 dimensions (1 to 4 allowed)", off);
    b_free(&b);
    hdr(&b, 3, 1, 0);
    b_str(&b, "t");
    b_u32(&b, UINT32_MAX);
    while (b.len < 200) b_u8(&b, 0);
    EXPECT_FAIL(&b, "tensor 't': 4294967295 dimensions (1 to 4 allowed)");
    b_free(&b);
    /* ne = 0, ne past INT64_MAX */
    at = one_tensor(&b, "t", 2, (const uint64_t[]){4, 0}, FMT_F32, 0, 64);
    snprintf(off, sizeof off, "byte offset %zu", at + 9 + 4 + 8);
    EXPECT_FAIL(&b, "tensor 't': absurd dimension ne[1] = 0", off);
    b_free(&b);
    one_tensor(&b, "t", 1, (const uint64_t[]){1ull << 63}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "tensor 't': absurd dimension ne[0] = 9223372036854775808");
    b_free(&b);
    one_tensor(&b, "t", 1, (const uint64_t[]){UINT64_MAX}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "absurd dimension ne[0]");
    b_free(&b);
}

TEST(gguf, rejects_element_count_overflow) {
    Buf b = {0};
    /* 2^32 * 2^32 = 2^64 wraps to 0 */
    one_tensor(&b, "big", 2, (const uint64_t[]){1ull << 32, 1ull << 32}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "tensor 'big': element count overflows at dimension 1");
    b_free(&b);
    /* 2^21 cubed = 2^63: fits in u64, not in int64 */
    one_tensor(&b, "big", 3, (const uint64_t[]){1ull << 21, 1ull << 21, 1ull << 21}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "tensor 'big': element count overflows at dimension 2");
    b_free(&b);
    /* across four dims */
    one_tensor(&b, "big", 4, (const uint64_t[]){65536, 65536, 65536, 65536}, FMT_F16, 0, 64);
    EXPECT_FAIL(&b, "tensor 'big': element count overflows at dimension 3");
    b_free(&b);
}

TEST(gguf, rejects_byte_size_overflow) {
    Buf b = {0};
    /* 2^62 f32 elements = 2^64 bytes */
    one_tensor(&b, "huge", 2, (const uint64_t[]){1ull << 31, 1ull << 31}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "tensor 'huge': byte size overflows");
    b_free(&b);
    /* a size that fits in 64 bits but not in the file */
    one_tensor(&b, "huge", 2, (const uint64_t[]){1ull << 30, 1ull << 30}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "tensor 'huge': data", "lies outside the file");
    b_free(&b);
}

TEST(gguf, rejects_tensor_data_outside_file) {
    Buf b = {0};
    one_tensor(&b, "w", 1, (const uint64_t[]){16}, FMT_F32, 1u << 20, 64);
    EXPECT_FAIL(&b, "tensor 'w': data (64 bytes at offset 1048576 of the data section", "lies outside the file");
    b_free(&b);
    /* one byte short */
    one_tensor(&b, "w", 1, (const uint64_t[]){16}, FMT_F32, 0, 63);
    EXPECT_FAIL(&b, "tensor 'w'", "lies outside the file");
    b_free(&b);
    /* an offset that wraps the address computation */
    one_tensor(&b, "w", 1, (const uint64_t[]){16}, FMT_F32, UINT64_MAX - 31, 64);
    EXPECT_FAIL(&b, "tensor 'w'", "lies outside the file");
    b_free(&b);
}

TEST(gguf, rejects_misaligned_offset) {
    Buf b = {0};
    size_t at = one_tensor(&b, "w", 1, (const uint64_t[]){8}, FMT_F32, 8, 64);
    char off[64];
    snprintf(off, sizeof off, "byte offset %zu", at + 9 + 4 + 8 + 4);
    EXPECT_FAIL(&b, "tensor 'w': data offset 8 is not a multiple of the alignment 32", off);
    b_free(&b);
    /* aligned to 32 but not to a declared 64 */
    hdr(&b, 3, 1, 1);
    kv_u32(&b, "general.alignment", 64);
    tinfo(&b, "w", 1, (const uint64_t[]){8}, FMT_F32, 32);
    data(&b, 64, 128);
    EXPECT_FAIL(&b, "tensor 'w': data offset 32 is not a multiple of the alignment 64");
    b_free(&b);
}

TEST(gguf, rejects_duplicate_tensor_names) {
    Buf b = {0};
    hdr(&b, 3, 3, 0);
    tinfo(&b, "blk.0.attn_q.weight", 1, (const uint64_t[]){8}, FMT_F32, 0);
    tinfo(&b, "blk.0.attn_k.weight", 1, (const uint64_t[]){8}, FMT_F32, 32);
    tinfo(&b, "blk.0.attn_q.weight", 1, (const uint64_t[]){8}, FMT_F32, 64);
    data(&b, 32, 96);
    EXPECT_FAIL(&b, "duplicate tensor name 'blk.0.attn_q.weight'", "tensors 0 and 2");
    b_free(&b);
}

TEST(gguf, rejects_unknown_tensor_types) {
    const struct {
        uint32_t id;
        const char *name;
    } cases[] = {{4, "q4_2 (removed)"}, {5, "q4_3 (removed)"}, {31, "q4_0_4_4 (removed)"}, {36, "iq4_nl_4_4 (removed)"},
                 {24, "i8"},           {34, "tq1_0"},          {40, "?"},                  {UINT32_MAX, "?"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Buf b = {0};
        size_t at = one_tensor(&b, "w", 1, (const uint64_t[]){256}, cases[i].id, 0, 1024);
        char want[96], off[64];
        snprintf(want, sizeof want, "tensor 'w': unsupported type id %u (%s)", cases[i].id, cases[i].name);
        snprintf(off, sizeof off, "byte offset %zu", at + 9 + 4 + 8);
        EXPECT_FAIL(&b, want, off);
        b_free(&b);
    }
}

TEST(gguf, rejects_row_not_multiple_of_block) {
    Buf b = {0};
    one_tensor(&b, "w", 2, (const uint64_t[]){33, 2}, FMT_Q8_0, 0, 256);
    EXPECT_FAIL(&b, "tensor 'w': row length 33 is not a multiple of the q8_0 block size 32");
    b_free(&b);
    one_tensor(&b, "w", 1, (const uint64_t[]){128}, FMT_Q4_K, 0, 256);
    EXPECT_FAIL(&b, "tensor 'w': row length 128 is not a multiple of the q4_K block size 256");
    b_free(&b);
}

TEST(gguf, rejects_bad_tensor_names) {
    char name[80];
    memset(name, 'x', 64);
    name[64] = '\0';
    Buf b = {0};
    size_t at = one_tensor(&b, name, 1, (const uint64_t[]){8}, FMT_F32, 0, 64);
    char off[64];
    snprintf(off, sizeof off, "byte offset %zu", at);
    EXPECT_FAIL(&b, "is 64 bytes long (at most 63)", off);
    b_free(&b);
    name[63] = '\0'; /* 63 bytes: ggml's limit, accepted */
    one_tensor(&b, name, 1, (const uint64_t[]){8}, FMT_F32, 0, 64);
    Gguf *g = OPEN_OK(&b);
    CHECK(g && gguf_find_tensor(g, name) != NULL);
    gguf_close(g);
    b_free(&b);
    one_tensor(&b, "", 1, (const uint64_t[]){8}, FMT_F32, 0, 64);
    EXPECT_FAIL(&b, "tensor 0 has an empty name");
    b_free(&b);
    hdr(&b, 3, 1, 0);
    b_u64(&b, 3);
    b_put(&b, "a\0b", 3);
    b_u32(&b, 1), b_u64(&b, 8), b_u32(&b, FMT_F32), b_u64(&b, 0);
    data(&b, 32, 32);
    EXPECT_FAIL(&b, "tensor name with a NUL byte");
    b_free(&b);
}

/* ---- model config errors -------------------------------------------------------------------------------- */

/* The metadata of test model `m` (no tensors) with the keys starting with `drop` left out and extra KVs
 * appended by `add`; returns the image (caller frees) through *out. */
static bool config_variant(const char *m, const char *drop, void (*add)(GgufWriter *), uint8_t **out, size_t *size) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", m);
    Err err = {{0}};
    Gguf *src = gguf_open(test_data(rel), &err);
    if (!src) return test_check(false, __FILE__, __LINE__, "open model", "%s", err.msg), false;
    GgufWriter *w = gguf_writer_new(0);
    const char *skip[] = {drop ? drop : "\x01", "tokenizer."};
    bool ok = gguf_w_copy_kv(w, src, skip, 2) == 0;
    if (add) add(w);
    ok = ok && gguf_writer_write_mem(w, out, size, &err) == 0;
    gguf_writer_free(w);
    gguf_close(src);
    return ok;
}

static bool config_fails(const uint8_t *p, size_t n, const char *want, const char *file, int line) {
    Err err = {{0}};
    Gguf *g = gguf_open_memory(p, n, &err);
    if (!g) return test_check(false, file, line, "open", "%s", err.msg);
    ModelConfig c;
    bool failed = model_config_read(&c, g, &err) != 0;
    gguf_close(g);
    test_note("refused: %s", err.msg);
    return test_check(failed && one_line(err.msg) && strstr(err.msg, want), file, line, "model_config_read fails",
                      "want '%s', got '%s'", want, failed ? err.msg : "success");
}
#define CONFIG_FAILS(m, drop, add, want)                                                                   \
    do {                                                                                                   \
        uint8_t *img_ = NULL;                                                                              \
        size_t n_ = 0;                                                                                     \
        if (config_variant(m, drop, add, &img_, &n_)) config_fails(img_, n_, want, __FILE__, __LINE__);    \
        free(img_);                                                                                        \
    } while (0)

static void add_arch_llama(GgufWriter *w) { gguf_w_str(w, "general.architecture", "llama"); }
static void add_arch_long(GgufWriter *w) { gguf_w_str(w, "general.architecture", "qwen35moe-but-much-longer-than-sixteen"); }
static void add_arch_u32(GgufWriter *w) { gguf_w_u32(w, "general.architecture", 3); }
static void add_embd_str(GgufWriter *w) { gguf_w_str(w, "qwen35moe.embedding_length", "64"); }
static void add_embd_f32(GgufWriter *w) { gguf_w_f32(w, "qwen35moe.embedding_length", 64.0f); }
static void add_eps_u32(GgufWriter *w) { gguf_w_u32(w, "qwen35moe.attention.layer_norm_rms_epsilon", 1); }
static void add_heads_f32_arr(GgufWriter *w) {
    const float h[4] = {4, 4, 4, 4};
    gguf_w_arr(w, "qwen35moe.attention.head_count", GGUF_TYPE_F32, h, 4);
}
static void add_heads_nan_arr(GgufWriter *w) {
    const float h[4] = {0.0f / 0.0f, 1e30f, -1e30f, 4};
    gguf_w_arr(w, "qwen35moe.attention.head_count", GGUF_TYPE_F32, h, 4);
}
static void add_sections_big(GgufWriter *w) {
    const int64_t s[4] = {(int64_t)1 << 32 | 2, 1, 1, 0}; /* would read as 2 if narrowed first */
    gguf_w_arr(w, "qwen35moe.rope.dimension_sections", GGUF_TYPE_I64, s, 4);
}
static void add_recurrent_f32(GgufWriter *w) {
    const float r[4] = {1, 1, 1, 0.0f / 0.0f};
    gguf_w_arr(w, "qwen35moe.attention.recurrent_layers", GGUF_TYPE_F32, r, 4);
}

TEST(gguf, config_rejects_unknown_arch) {
    CONFIG_FAILS("m4-qwen35moe-q8_0", "general.architecture", add_arch_llama, "unknown architecture 'llama'");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "general.architecture", add_arch_long,
                 "unknown architecture 'qwen35moe-but-much-longer-than-sixteen'");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "general.architecture", add_arch_u32,
                 "metadata 'general.architecture' must be a string, found u32");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "general.architecture", NULL,
                 "missing required metadata key 'general.architecture'");
    /* the vocab files are valid GGUF of another arch */
    Err err = {{0}};
    Gguf *g = gguf_open(test_data("vocab/ggml-vocab-qwen2.gguf"), &err);
    REQUIRE_MSG(g, "%s", err.msg);
    ModelConfig c;
    CHECK(model_config_read(&c, g, &err) != 0);
    CHECK_MSG(contains(err.msg, "unknown architecture 'qwen2'"), "%s", err.msg);
    gguf_close(g);
}

TEST(gguf, config_rejects_missing_and_mistyped_keys) {
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.embedding_length", NULL,
                 "missing required metadata key 'qwen35moe.embedding_length'");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.ssm.state_size", NULL,
                 "missing required metadata key 'qwen35moe.ssm.state_size'");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.rope.dimension_sections", NULL,
                 "missing required metadata key 'qwen35moe.rope.dimension_sections'");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.embedding_length", add_embd_str,
                 "metadata 'qwen35moe.embedding_length' must be an integer, found str");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.embedding_length", add_embd_f32,
                 "metadata 'qwen35moe.embedding_length' must be an integer, found f32");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.attention.layer_norm_rms_epsilon", add_eps_u32,
                 "must be a float, found u32");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.attention.head_count", add_heads_f32_arr,
                 "metadata 'qwen35moe.attention.head_count' must be an integer or an array of integers");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.attention.head_count", add_heads_nan_arr, "array of integers");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.rope.dimension_sections", add_sections_big,
                 "rope.dimension_sections[0] = 4294967298 is out of range");
    CONFIG_FAILS("m4-qwen35moe-q8_0", "qwen35moe.attention.recurrent_layers", add_recurrent_f32,
                 "must be an array of 4 flags");
}

/* ---- positive: values, accessors, alignment --------------------------------------------------------------- */

/* A file with one KV of every value type, arrays of every element type, empty arrays and strings, and
 * nested arrays. */
static void all_types(Buf *b) {
    hdr(b, 3, 0, 29);
    kv_key(b, "v.u8", GGUF_TYPE_U8), b_u8(b, 200);
    kv_key(b, "v.i8", GGUF_TYPE_I8), b_u8(b, (uint8_t)-100);
    kv_key(b, "v.u16", GGUF_TYPE_U16), b_put(b, &(uint16_t){60000}, 2);
    kv_key(b, "v.i16", GGUF_TYPE_I16), b_put(b, &(int16_t){-30000}, 2);
    kv_key(b, "v.u32", GGUF_TYPE_U32), b_u32(b, 4000000000u);
    kv_key(b, "v.i32", GGUF_TYPE_I32), b_put(b, &(int32_t){-2000000000}, 4);
    kv_key(b, "v.f32", GGUF_TYPE_F32), b_put(b, &(float){1.5f}, 4);
    kv_key(b, "v.bool", GGUF_TYPE_BOOL), b_u8(b, 1);
    kv_str(b, "v.str", "hello");
    kv_str(b, "v.empty_str", "");
    kv_key(b, "v.u64", GGUF_TYPE_U64), b_u64(b, (1ull << 63) + 5);
    kv_key(b, "v.i64", GGUF_TYPE_I64), b_put(b, &(int64_t){-(1ll << 62)}, 8);
    kv_key(b, "v.f64", GGUF_TYPE_F64), b_put(b, &(double){-2.25e300}, 8);
    /* scalar arrays of every element type, 3 elements each: 1, 2, 3 (bool: 1, 0, 1) */
    const GgufValueType scal[] = {GGUF_TYPE_U8,  GGUF_TYPE_I8,  GGUF_TYPE_U16, GGUF_TYPE_I16, GGUF_TYPE_U32,
                                  GGUF_TYPE_I32, GGUF_TYPE_F32, GGUF_TYPE_U64, GGUF_TYPE_I64, GGUF_TYPE_F64};
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "a.%s", gguf_value_type_name(scal[i]));
        kv_key(b, key, GGUF_TYPE_ARRAY);
        b_u32(b, scal[i]);
        b_u64(b, 3);
        for (int j = 1; j <= 3; j++) {
            uint8_t raw[8] = {0};
            if (scal[i] == GGUF_TYPE_F32) memcpy(raw, &(float){(float)j}, 4);
            else if (scal[i] == GGUF_TYPE_F64) memcpy(raw, &(double){(double)j}, 8);
            else raw[0] = (uint8_t)j;
            b_put(b, raw, gguf_value_type_size(scal[i]));
        }
    }
    kv_key(b, "a.bool", GGUF_TYPE_ARRAY), b_u32(b, GGUF_TYPE_BOOL), b_u64(b, 3), b_u8(b, 1), b_u8(b, 0), b_u8(b, 1);
    kv_key(b, "a.str", GGUF_TYPE_ARRAY), b_u32(b, GGUF_TYPE_STRING), b_u64(b, 3);
    b_str(b, "x"), b_str(b, ""), b_str(b, "zz");
    kv_key(b, "a.empty", GGUF_TYPE_ARRAY), b_u32(b, GGUF_TYPE_U32), b_u64(b, 0);
    /* nested: [[1, 2], [3]] of i32, [[], ["s"]] of strings */
    kv_key(b, "n.i32", GGUF_TYPE_ARRAY), b_u32(b, GGUF_TYPE_ARRAY), b_u64(b, 2);
    b_u32(b, GGUF_TYPE_I32), b_u64(b, 2), b_u32(b, 1), b_u32(b, 2);
    b_u32(b, GGUF_TYPE_I32), b_u64(b, 1), b_u32(b, 3);
    kv_key(b, "n.str", GGUF_TYPE_ARRAY), b_u32(b, GGUF_TYPE_ARRAY), b_u64(b, 2);
    b_u32(b, GGUF_TYPE_STRING), b_u64(b, 0);
    b_u32(b, GGUF_TYPE_STRING), b_u64(b, 1), b_str(b, "s");
    kv_key(b, "n.empty", GGUF_TYPE_ARRAY), b_u32(b, GGUF_TYPE_ARRAY), b_u64(b, 0);
}

static bool value_eq(const GgufValue *a, const GgufValue *b);
static bool array_eq(const GgufArray *a, const GgufArray *b) {
    if (a->type != b->type || a->n != b->n) return false;
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->type == GGUF_TYPE_STRING) {
            if (a->strs[i].len != b->strs[i].len || memcmp(a->strs[i].ptr, b->strs[i].ptr, a->strs[i].len)) return false;
        } else if (a->type == GGUF_TYPE_ARRAY) {
            if (!value_eq(&a->items[i], &b->items[i])) return false;
        }
    }
    size_t es = gguf_value_type_size(a->type);
    return !es || a->n == 0 || memcmp(a->raw, b->raw, (size_t)a->n * es) == 0;
}
static bool value_eq(const GgufValue *a, const GgufValue *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_TYPE_STRING: return a->s.len == b->s.len && memcmp(a->s.ptr, b->s.ptr, a->s.len) == 0;
    case GGUF_TYPE_ARRAY: return array_eq(&a->arr, &b->arr);
    case GGUF_TYPE_F32: case GGUF_TYPE_F64: return a->f == b->f;
    case GGUF_TYPE_I8: case GGUF_TYPE_I16: case GGUF_TYPE_I32: case GGUF_TYPE_I64: return a->i == b->i;
    default: return a->u == b->u;
    }
}

static void check_all_types(const Gguf *g) {
    CHECK(gguf_n_kv(g) == 29);
    const GgufValue *v;
    CHECK((v = gguf_get(g, "v.u8")) && v->type == GGUF_TYPE_U8 && v->u == 200);
    CHECK((v = gguf_get(g, "v.i8")) && v->type == GGUF_TYPE_I8 && v->i == -100);
    CHECK((v = gguf_get(g, "v.u16")) && v->type == GGUF_TYPE_U16 && v->u == 60000);
    CHECK((v = gguf_get(g, "v.i16")) && v->type == GGUF_TYPE_I16 && v->i == -30000);
    CHECK((v = gguf_get(g, "v.u32")) && v->type == GGUF_TYPE_U32 && v->u == 4000000000u);
    CHECK((v = gguf_get(g, "v.i32")) && v->type == GGUF_TYPE_I32 && v->i == -2000000000);
    CHECK((v = gguf_get(g, "v.f32")) && v->type == GGUF_TYPE_F32 && v->f == 1.5);
    CHECK((v = gguf_get(g, "v.bool")) && v->type == GGUF_TYPE_BOOL && v->u == 1);
    CHECK((v = gguf_get(g, "v.str")) && v->type == GGUF_TYPE_STRING && gguf_str_eq(v->s, "hello"));
    CHECK((v = gguf_get(g, "v.empty_str")) && v->type == GGUF_TYPE_STRING && v->s.len == 0);
    CHECK((v = gguf_get(g, "v.u64")) && v->type == GGUF_TYPE_U64 && v->u == (1ull << 63) + 5);
    CHECK((v = gguf_get(g, "v.i64")) && v->type == GGUF_TYPE_I64 && v->i == -(1ll << 62));
    CHECK((v = gguf_get(g, "v.f64")) && v->type == GGUF_TYPE_F64 && v->f == -2.25e300);
    const char *scal[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "u64", "i64", "f64"};
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "a.%s", scal[i]);
        v = gguf_get(g, key);
        CHECK_MSG(v && v->type == GGUF_TYPE_ARRAY && v->arr.n == 3 && v->arr.raw, "%s", key);
        if (!v || v->arr.n != 3) continue;
        CHECK_MSG(strcmp(gguf_value_type_name(v->arr.type), scal[i]) == 0, "%s", key);
        for (int j = 0; j < 3; j++)
            CHECK_MSG(gguf_arr_i64(&v->arr, (uint64_t)j) == j + 1 && gguf_arr_f64(&v->arr, (uint64_t)j) == j + 1, "%s[%d]", key, j);
    }
    CHECK((v = gguf_get(g, "a.bool")) && v->arr.type == GGUF_TYPE_BOOL && v->arr.n == 3 &&
          gguf_arr_i64(&v->arr, 0) == 1 && gguf_arr_i64(&v->arr, 1) == 0);
    CHECK((v = gguf_get(g, "a.str")) && v->arr.type == GGUF_TYPE_STRING && v->arr.n == 3 && gguf_str_eq(v->arr.strs[0], "x") &&
          v->arr.strs[1].len == 0 && gguf_str_eq(v->arr.strs[2], "zz"));
    CHECK((v = gguf_get(g, "a.empty")) && v->arr.type == GGUF_TYPE_U32 && v->arr.n == 0);
    v = gguf_get(g, "n.i32");
    CHECK(v && v->arr.type == GGUF_TYPE_ARRAY && v->arr.n == 2);
    if (v && v->arr.n == 2) {
        const GgufArray *x = &v->arr.items[0].arr, *y = &v->arr.items[1].arr;
        CHECK(x->type == GGUF_TYPE_I32 && x->n == 2 && gguf_arr_i64(x, 0) == 1 && gguf_arr_i64(x, 1) == 2);
        CHECK(y->type == GGUF_TYPE_I32 && y->n == 1 && gguf_arr_i64(y, 0) == 3);
    }
    v = gguf_get(g, "n.str");
    CHECK(v && v->arr.type == GGUF_TYPE_ARRAY && v->arr.n == 2);
    if (v && v->arr.n == 2) {
        CHECK(v->arr.items[0].arr.type == GGUF_TYPE_STRING && v->arr.items[0].arr.n == 0);
        CHECK(v->arr.items[1].arr.n == 1 && gguf_str_eq(v->arr.items[1].arr.strs[0], "s"));
    }
    CHECK((v = gguf_get(g, "n.empty")) && v->arr.type == GGUF_TYPE_ARRAY && v->arr.n == 0);
}

TEST(gguf, every_value_type_round_trips) {
    Buf b = {0};
    all_types(&b);
    Gguf *g = OPEN_OK(&b);
    REQUIRE(g);
    check_all_types(g);
    /* writer: copy every KV and write it back out */
    GgufWriter *w = gguf_writer_new(0);
    CHECK(gguf_w_copy_kv(w, g, NULL, 0) == 0);
    uint8_t *img = NULL;
    size_t n = 0;
    Err err = {{0}};
    CHECK_MSG(gguf_writer_write_mem(w, &img, &n, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    CHECK_MSG(n == b.len && memcmp(img, b.p, n) == 0, "the copy is byte-identical (%zu vs %zu bytes)", n, b.len);
    Gguf *g2 = gguf_open_memory(img, n, &err);
    CHECK_MSG(g2, "%s", err.msg);
    if (g2) {
        check_all_types(g2);
        for (int64_t i = 0; i < gguf_n_kv(g); i++) {
            const GgufKV *a = gguf_kv(g, i), *c = gguf_kv(g2, i);
            CHECK_MSG(c && a->key.len == c->key.len && memcmp(a->key.ptr, c->key.ptr, a->key.len) == 0 &&
                          value_eq(&a->val, &c->val), "kv %lld", (long long)i);
        }
        gguf_close(g2);
    }
    free(img);
    gguf_close(g);
    b_free(&b);
}

/* Found by the fuzzer: the writer kept copied keys and array strings as C strings, so a NUL byte inside
 * one cut it short. Keys and strings are bytes with a length; they must survive the copy exactly. */
TEST(gguf, writer_copies_bytes_exactly) {
    Buf b = {0};
    hdr(&b, 3, 0, 3);
    b_u64(&b, 3), b_put(&b, "k\0x", 3), b_u32(&b, GGUF_TYPE_ARRAY);
    b_u32(&b, GGUF_TYPE_STRING), b_u64(&b, 2);
    b_u64(&b, 1), b_u8(&b, 0);
    b_u64(&b, 3), b_put(&b, "a\0b", 3);
    b_u64(&b, 3), b_put(&b, "k\0y", 3), b_u32(&b, GGUF_TYPE_STRING), b_u64(&b, 2), b_put(&b, "\0\0", 2);
    char longkey[600];
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    kv_u32(&b, longkey, 9);
    Gguf *g = OPEN_OK(&b);
    REQUIRE(g);
    GgufWriter *w = gguf_writer_new(0);
    CHECK(gguf_w_copy_kv(w, g, NULL, 0) == 0);
    uint8_t *img = NULL;
    size_t n = 0;
    Err err = {{0}};
    CHECK_MSG(gguf_writer_write_mem(w, &img, &n, &err) == 0, "%s", err.msg);
    CHECK_MSG(n == b.len && img && memcmp(img, b.p, n) == 0, "the copy is byte-identical (%zu vs %zu bytes)", n, b.len);
    gguf_writer_free(w);
    free(img);
    gguf_close(g);
    b_free(&b);
}

TEST(gguf, writer_api_round_trips) {
    GgufWriter *w = gguf_writer_new(64);
    gguf_w_u32(w, "w.u32", 7);
    gguf_w_i32(w, "w.i32", -7);
    gguf_w_u64(w, "w.u64", UINT64_MAX);
    gguf_w_f32(w, "w.f32", 0.25f);
    gguf_w_bool(w, "w.bool", 0);
    gguf_w_str(w, "w.str", "x y");
    gguf_w_str(w, "w.empty", "");
    const int16_t a16[5] = {-1, 2, -3, 4, -5};
    gguf_w_arr(w, "w.arr", GGUF_TYPE_I16, a16, 5);
    gguf_w_arr(w, "w.arr_empty", GGUF_TYPE_F64, NULL, 0);
    const char *strs[] = {"a", "", "ccc"};
    gguf_w_arr_str(w, "w.strs", strs, 3);
    gguf_w_arr_str(w, "w.strs_empty", NULL, 0);
    float t1[16];
    uint16_t t2[64];
    for (int i = 0; i < 16; i++) t1[i] = (float)i;
    for (int i = 0; i < 64; i++) t2[i] = (uint16_t)(i * 3);
    Err err = {{0}};
    CHECK(gguf_w_tensor(w, "t1", FMT_F32, 2, (const int64_t[]){4, 4}, t1, NULL, NULL, &err) == 0);
    CHECK(gguf_w_tensor(w, "t2", FMT_F16, 1, (const int64_t[]){64}, t2, NULL, NULL, &err) == 0);
    CHECK(gguf_w_tensor(w, "t3", FMT_Q8_0, 1, (const int64_t[]){33}, t2, NULL, NULL, &err) != 0);
    err = (Err){{0}};
    uint8_t *img = NULL;
    size_t n = 0;
    REQUIRE_MSG(gguf_writer_write_mem(w, &img, &n, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    Gguf *g = gguf_open_memory(img, n, &err);
    REQUIRE_MSG(g, "%s", err.msg);
    CHECK(gguf_version(g) == 3 && gguf_alignment(g) == 64 && gguf_n_splits(g) == 1 && gguf_file_size(g) == n);
    const GgufValue *v;
    CHECK((v = gguf_get(g, "general.alignment")) && v->type == GGUF_TYPE_U32 && v->u == 64);
    CHECK((v = gguf_get(g, "w.u32")) && v->type == GGUF_TYPE_U32 && v->u == 7);
    CHECK((v = gguf_get(g, "w.i32")) && v->type == GGUF_TYPE_I32 && v->i == -7);
    CHECK((v = gguf_get(g, "w.u64")) && v->type == GGUF_TYPE_U64 && v->u == UINT64_MAX);
    CHECK((v = gguf_get(g, "w.f32")) && v->type == GGUF_TYPE_F32 && v->f == 0.25);
    CHECK((v = gguf_get(g, "w.bool")) && v->type == GGUF_TYPE_BOOL && v->u == 0);
    CHECK((v = gguf_get(g, "w.str")) && gguf_str_eq(v->s, "x y"));
    CHECK((v = gguf_get(g, "w.empty")) && v->type == GGUF_TYPE_STRING && v->s.len == 0);
    CHECK((v = gguf_get(g, "w.arr")) && v->arr.type == GGUF_TYPE_I16 && v->arr.n == 5 && gguf_arr_i64(&v->arr, 4) == -5);
    CHECK((v = gguf_get(g, "w.arr_empty")) && v->arr.type == GGUF_TYPE_F64 && v->arr.n == 0);
    CHECK((v = gguf_get(g, "w.strs")) && v->arr.n == 3 && v->arr.strs[1].len == 0 && gguf_str_eq(v->arr.strs[2], "ccc"));
    CHECK((v = gguf_get(g, "w.strs_empty")) && v->arr.type == GGUF_TYPE_STRING && v->arr.n == 0);
    CHECK(gguf_get(g, "w.missing") == NULL);
    /* general.alignment 64 is respected: data section and every tensor on a 64-byte boundary */
    const void *base;
    size_t size;
    gguf_split_mapping(g, 0, &base, &size);
    CHECK(base == img && size == n);
    REQUIRE(gguf_n_tensors(g) == 2);
    for (int64_t i = 0; i < 2; i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        CHECK_MSG(t->file_off % 64 == 0 && t->offset % 64 == 0, "%s at %llu", t->name, (unsigned long long)t->file_off);
        CHECK((const uint8_t *)t->data == img + t->file_off);
    }
    const GgufTensor *a = gguf_find_tensor(g, "t1"), *c = gguf_find_tensor(g, "t2");
    CHECK(a && a->n_dims == 2 && a->ne[0] == 4 && a->ne[1] == 4 && a->ne[2] == 1 && a->ne[3] == 1 && a->n_elements == 16 &&
          a->nbytes == 64 && a->type == FMT_F32 && memcmp(a->data, t1, 64) == 0);
    CHECK(c && c->n_dims == 1 && c->nbytes == 128 && c->offset == 64 && memcmp(c->data, t2, 128) == 0);
    CHECK(gguf_find_tensor(g, "t3") == NULL && gguf_find_tensor(g, "t") == NULL && gguf_find_tensor(g, "") == NULL);
    CHECK(gguf_tensor(g, 2) == NULL && gguf_tensor(g, -1) == NULL && gguf_kv(g, -1) == NULL && gguf_kv(g, gguf_n_kv(g)) == NULL);
    gguf_close(g);
    free(img);
    /* a general.alignment that disagrees with the writer's is refused */
    w = gguf_writer_new(32);
    gguf_w_u32(w, "general.alignment", 64);
    err = (Err){{0}};
    CHECK(gguf_writer_write_mem(w, &img, &n, &err) != 0);
    CHECK_MSG(contains(err.msg, "general.alignment"), "%s", err.msg);
    gguf_writer_free(w);
}

TEST(gguf, typed_accessors_coerce_and_check_range) {
    Buf b = {0};
    all_types(&b);
    Gguf *g = OPEN_OK(&b);
    REQUIRE(g);
    Err err = {{0}};
    uint32_t u = 0;
    int64_t i = 0;
    float f = 0;
    bool bo = false;
    GgufStr s;
    const GgufArray *arr;
    /* every integer type converts when the value fits */
    CHECK(gguf_get_u32(g, "v.u8", &u, true, &err) == 1 && u == 200);
    CHECK(gguf_get_u32(g, "v.u16", &u, true, &err) == 1 && u == 60000);
    CHECK(gguf_get_u32(g, "v.u32", &u, true, &err) == 1 && u == 4000000000u);
    CHECK(gguf_get_i64(g, "v.i8", &i, true, &err) == 1 && i == -100);
    CHECK(gguf_get_i64(g, "v.i16", &i, true, &err) == 1 && i == -30000);
    CHECK(gguf_get_i64(g, "v.i32", &i, true, &err) == 1 && i == -2000000000);
    CHECK(gguf_get_i64(g, "v.u32", &i, true, &err) == 1 && i == 4000000000ll);
    CHECK(gguf_get_i64(g, "v.i64", &i, true, &err) == 1 && i == -(1ll << 62));
    CHECK(gguf_get_f32(g, "v.f32", &f, true, &err) == 1 && f == 1.5f);
    CHECK(gguf_get_f32(g, "v.f64", &f, true, &err) == 1 && f < -1e38f); /* out of float range: -inf */
    CHECK(gguf_get_bool(g, "v.bool", &bo, true, &err) == 1 && bo);
    CHECK(gguf_get_str(g, "v.str", &s, true, &err) == 1 && gguf_str_eq(s, "hello"));
    CHECK(gguf_get_arr(g, "a.str", &arr, true, &err) == 1 && arr->n == 3);
    CHECK(err.msg[0] == '\0');
    /* out of range, wrong type, missing */
    err = (Err){{0}};
    u = 123;
    CHECK(gguf_get_u32(g, "v.i8", &u, true, &err) == -1 && u == 123);
    CHECK_MSG(contains(err.msg, "metadata 'v.i8' = -100 is out of range for u32"), "%s", err.msg);
    err = (Err){{0}};
    CHECK(gguf_get_u32(g, "v.i64", &u, true, &err) == -1 && contains(err.msg, "out of range for u32"));
    err = (Err){{0}};
    CHECK(gguf_get_u32(g, "v.u64", &u, true, &err) == -1 &&
          contains(err.msg, "metadata 'v.u64' = 9223372036854775813 is out of range for u32"));
    err = (Err){{0}};
    i = 42;
    CHECK(gguf_get_i64(g, "v.u64", &i, true, &err) == -1 && i == 42 && contains(err.msg, "out of range for i64"));
    err = (Err){{0}};
    CHECK(gguf_get_u32(g, "v.f32", &u, true, &err) == -1 && contains(err.msg, "metadata 'v.f32' must be an integer, found f32"));
    err = (Err){{0}};
    CHECK(gguf_get_u32(g, "v.bool", &u, true, &err) == -1 && contains(err.msg, "must be an integer, found bool"));
    err = (Err){{0}};
    CHECK(gguf_get_u32(g, "a.u32", &u, true, &err) == -1 && contains(err.msg, "must be an integer, found arr"));
    err = (Err){{0}};
    CHECK(gguf_get_f32(g, "v.u32", &f, true, &err) == -1 && contains(err.msg, "metadata 'v.u32' must be a float, found u32"));
    err = (Err){{0}};
    CHECK(gguf_get_bool(g, "v.u8", &bo, true, &err) == -1 && contains(err.msg, "must be a bool, found u8"));
    err = (Err){{0}};
    CHECK(gguf_get_str(g, "a.str", &s, true, &err) == -1 && contains(err.msg, "must be a string, found arr"));
    err = (Err){{0}};
    CHECK(gguf_get_arr(g, "v.str", &arr, true, &err) == -1 && contains(err.msg, "must be an array, found str"));
    err = (Err){{0}};
    u = 5;
    CHECK(gguf_get_u32(g, "v.nope", &u, false, &err) == 0 && u == 5 && err.msg[0] == '\0');
    CHECK(gguf_get_u32(g, "v.nope", &u, true, &err) == -1 && contains(err.msg, "missing required metadata key 'v.nope'"));
    /* element accessors */
    CHECK(gguf_get_arr(g, "a.f64", &arr, true, &err) == 1 && gguf_arr_f64(arr, 2) == 3.0 && gguf_arr_i64(arr, 2) == 3);
    CHECK(gguf_type_is_int(GGUF_TYPE_U64) && !gguf_type_is_int(GGUF_TYPE_BOOL) && !gguf_type_is_int(GGUF_TYPE_F32));
    char buf[4];
    CHECK(strcmp(gguf_str_copy(s, buf, sizeof buf), "hel") == 0);
    gguf_close(g);
    b_free(&b);
    /* float array elements read as integers saturate instead of overflowing */
    hdr(&b, 3, 0, 1);
    kv_key(&b, "f", GGUF_TYPE_ARRAY), b_u32(&b, GGUF_TYPE_F64), b_u64(&b, 4);
    b_put(&b, &(double){0.0 / 0.0}, 8), b_put(&b, &(double){1e300}, 8), b_put(&b, &(double){-1e300}, 8);
    b_put(&b, &(double){-2.75}, 8);
    g = OPEN_OK(&b);
    if (g) {
        const GgufArray *fa = &gguf_get(g, "f")->arr;
        CHECK(gguf_arr_i64(fa, 0) == 0 && gguf_arr_i64(fa, 1) == INT64_MAX && gguf_arr_i64(fa, 2) == INT64_MIN &&
              gguf_arr_i64(fa, 3) == -2);
        gguf_close(g);
    }
    b_free(&b);
}

TEST(gguf, accepts_edge_shapes) {
    /* 4 dims, a zero-tensor file, alignment 1, a tensor count 0 file with trailing bytes */
    Buf b = {0};
    hdr(&b, 3, 2, 1);
    kv_u32(&b, "general.alignment", 1);
    tinfo(&b, "four", 4, (const uint64_t[]){2, 3, 4, 5}, FMT_F32, 0);
    tinfo(&b, "odd", 1, (const uint64_t[]){3}, FMT_F16, 480);
    data(&b, 1, 486);
    Gguf *g = OPEN_OK(&b);
    if (g) {
        const GgufTensor *t = gguf_find_tensor(g, "four");
        CHECK(t && t->n_dims == 4 && t->n_elements == 120 && t->nbytes == 480 && gguf_alignment(g) == 1);
        t = gguf_find_tensor(g, "odd");
        const GgufTensor *four = gguf_find_tensor(g, "four");
        /* alignment 1: the data starts right after the directory, no padding anywhere */
        CHECK(t && four && four->file_off == b.len - 486 && t->nbytes == 6 && t->file_off == four->file_off + 480);
        gguf_close(g);
    }
    b_free(&b);
    hdr(&b, 3, 0, 0);
    g = OPEN_OK(&b);
    CHECK(g && gguf_n_kv(g) == 0 && gguf_n_tensors(g) == 0 && gguf_find_tensor(g, "x") == NULL);
    gguf_close(g);
    b_free(&b);
}

/* ---- the test models ---------------------------------------------------------------------------------- */

/* The six models the issue names; any other model under tests/data/models with a sidecar is checked too. */
static const char *const six_models[] = {"m1-qwen3next-legacy-f32", "m2-qwen3next-new-mixed", "m3-qwen35-dense-bf16",
                                         "m4-qwen35moe-q8_0", "m5-qwen35-7layer-int3-f16", "m6-qwen35moe-iq2xxs"};
#define MAX_MODELS 32
static char model_names[MAX_MODELS][128];

static int cmp_name(const void *a, const void *b) { return strcmp(a, b); }

/* Names (without .gguf) of the models under tests/data/models that have a .gguf.json sidecar, sorted. */
static int list_models(void) {
    int n = 0;
    DIR *d = opendir(test_data("models"));
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d)) && n < MAX_MODELS;) {
        size_t l = strlen(e->d_name);
        if (l < 6 || l >= 128 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
        char side[300];
        snprintf(side, sizeof side, "%s/%s.json", test_data("models"), e->d_name);
        if (access(side, R_OK) != 0) continue;
        snprintf(model_names[n], sizeof model_names[n], "%.*s", (int)(l - 5), e->d_name);
        n++;
    }
    closedir(d);
    qsort(model_names, (size_t)n, sizeof model_names[0], cmp_name);
    for (int i = 0; i < 6; i++) {
        bool found = false;
        for (int j = 0; j < n; j++) found |= strcmp(model_names[j], six_models[i]) == 0;
        CHECK_MSG(found, "test model %s is missing", six_models[i]);
    }
    return n;
}

static int jint(const cJSON *o, const char *k) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(x) ? x->valueint : -999;
}

TEST(gguf, test_models_match_sidecars) {
    int n_models = list_models();
    const char *models[MAX_MODELS];
    for (int m = 0; m < n_models; m++) models[m] = model_names[m];
    for (int m = 0; m < n_models; m++) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/%s.gguf.json", models[m]);
        char *txt = test_read_file(test_data(rel), NULL);
        cJSON *j = txt ? cJSON_Parse(txt) : NULL;
        free(txt);
        CHECK_MSG(j, "sidecar %s", rel);
        if (!j) continue;
        snprintf(rel, sizeof rel, "models/%s.gguf", models[m]);
        Err err = {{0}};
        Gguf *g = gguf_open(test_data(rel), &err);
        CHECK_MSG(g, "%s: %s", rel, err.msg);
        ModelConfig c;
        if (!g || model_config_read(&c, g, &err) != 0) {
            CHECK_MSG(false, "%s: %s", rel, err.msg);
            gguf_close(g);
            cJSON_Delete(j);
            continue;
        }
        const cJSON *cf = cJSON_GetObjectItemCaseSensitive(j, "config");
        const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "arch");
        CHECK_MSG(cJSON_IsString(arch) && strcmp(arch->valuestring, c.arch_name) == 0, "%s arch %s", models[m], c.arch_name);
        CHECK_MSG((int64_t)gguf_file_size(g) == (int64_t)cJSON_GetObjectItemCaseSensitive(j, "bytes")->valuedouble, "%s", models[m]);
#define SAME(field, key) CHECK_MSG(c.field == jint(cf, key), "%s: " #field " %d, sidecar %s %d", models[m], c.field, key, jint(cf, key))
        SAME(n_embd, "n_embd");
        SAME(n_layer, "n_layer");
        SAME(n_layer_all, "n_layer");
        SAME(n_head, "n_head");
        SAME(n_head_kv, "n_head_kv");
        SAME(head_dim, "head_dim");
        SAME(n_rot, "n_rot");
        SAME(ssm_d_state, "ssm_d_state");
        SAME(ssm_n_k_head, "ssm_n_group");
        SAME(ssm_n_v_head, "ssm_dt_rank");
        SAME(ssm_d_conv, "ssm_d_conv");
        SAME(ssm_d_inner, "d_inner");
        SAME(n_ctx_train, "ctx");
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cf, "moe"))) {
            CHECK_MSG(c.moe, "%s", models[m]);
            SAME(n_expert, "n_expert");
            SAME(n_expert_used, "n_expert_used");
            SAME(n_ff_exp, "n_ff_exp");
            SAME(n_ff_shexp, "n_ff_shexp");
        } else {
            CHECK_MSG(!c.moe, "%s", models[m]);
            SAME(n_ff, "n_ff");
        }
#undef SAME
        CHECK(c.ssm_key_dim == c.ssm_n_k_head * c.ssm_d_state && c.ssm_conv_dim == 2 * c.ssm_key_dim + c.ssm_d_inner);
        CHECK_MSG(c.rms_eps == (float)cJSON_GetObjectItemCaseSensitive(cf, "rms_eps")->valuedouble, "%s", models[m]);
        CHECK_MSG(c.rope_base == (float)cJSON_GetObjectItemCaseSensitive(cf, "rope_base")->valuedouble, "%s", models[m]);
        const cJSON *secs = cJSON_GetObjectItemCaseSensitive(cf, "rope_sections");
        if (cJSON_IsArray(secs))
            for (int i = 0; i < 4; i++) CHECK_MSG(c.rope_sections[i] == cJSON_GetArrayItem(secs, i)->valueint, "%s sec %d", models[m], i);
        CHECK(c.rope_imrope == (c.arch != ARCH_QWEN3NEXT));
        /* layer kinds */
        bool rec[MODEL_MAX_LAYERS] = {false};
        const cJSON *x;
        int n_rec = 0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(j, "recurrent_layers")) rec[x->valueint] = true, n_rec++;
        CHECK_MSG(c.n_recurrent == n_rec && c.n_attention == c.n_layer - n_rec, "%s", models[m]);
        for (int i = 0; i < c.n_layer; i++) CHECK_MSG(c.recurrent[i] == rec[i], "%s layer %d", models[m], i);
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(j, "attention_layers")) CHECK(!c.recurrent[x->valueint]);
        /* vocab and tensors */
        CHECK_MSG(c.n_vocab == jint(cJSON_GetObjectItemCaseSensitive(j, "vocab"), "n_vocab"), "%s n_vocab %d", models[m], c.n_vocab);
        const cJSON *types = cJSON_GetObjectItemCaseSensitive(j, "tensor_types");
        CHECK_MSG(cJSON_GetArraySize(types) == gguf_n_tensors(g), "%s: %d types, %lld tensors", models[m],
                  cJSON_GetArraySize(types), (long long)gguf_n_tensors(g));
        cJSON_ArrayForEach(x, types) {
            const GgufTensor *t = gguf_find_tensor(g, x->string);
            CHECK_MSG(t && strcasecmp(format_name(t->type), x->valuestring) == 0, "%s: %s is %s, sidecar %s", models[m],
                      x->string, t ? format_name(t->type) : "missing", x->valuestring);
        }
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const GgufTensor *t = gguf_tensor(g, i);
            CHECK(gguf_find_tensor(g, t->name) == t && t->file_off % gguf_alignment(g) == 0 &&
                  t->file_off + t->nbytes <= gguf_file_size(g));
        }
        test_note("%s: %s, %lld tensors, %lld kv, n_embd %d, %d layers (%d delta-net)", models[m], c.arch_name,
                  (long long)gguf_n_tensors(g), (long long)gguf_n_kv(g), c.n_embd, c.n_layer, c.n_recurrent);
        gguf_close(g);
        cJSON_Delete(j);
    }
}

TEST(gguf, vocab_files_open) {
    const char *files[] = {"vocab/ggml-vocab-qwen2.gguf", "vocab/ggml-vocab-qwen35.gguf"};
    for (int i = 0; i < 2; i++) {
        Err err = {{0}};
        Gguf *g = gguf_open(test_data(files[i]), &err);
        CHECK_MSG(g, "%s: %s", files[i], err.msg);
        if (!g) continue;
        const GgufArray *toks, *merges;
        CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &toks, true, &err) == 1 && toks->type == GGUF_TYPE_STRING &&
              toks->n > 150000);
        CHECK(gguf_get_arr(g, "tokenizer.ggml.merges", &merges, true, &err) == 1 && merges->n > 100000);
        CHECK(gguf_n_tensors(g) == 0);
        gguf_close(g);
    }
}

/* ---- split sets --------------------------------------------------------------------------------------- */

typedef struct SplitOpts {
    int n_parts;
    int no[8];               /* split.no written in each part (-1: leave the key out) */
    int count[8];            /* split.count written in each part (-1: leave out) */
    int tensors_count;       /* split.tensors.count (-1: the real total) */
    bool first_no_tensors;   /* gguf-split --no-tensor-first-split */
    bool duplicate;          /* the last part repeats the first tensor of the second */
    uint32_t first_align;    /* alignment of the first part (gguf-split copies general.alignment there only) */
} SplitOpts;

static SplitOpts split_defaults(int n) {
    SplitOpts o = {.n_parts = n, .tensors_count = -1, .first_align = 32};
    for (int i = 0; i < n; i++) o.no[i] = i, o.count[i] = n;
    return o;
}

/* Writes src as prefix-0000K-of-0000N.gguf the way gguf-split does: the first part carries all metadata;
 * every part carries split.no (u16), split.count (u16), split.tensors.count (i32). Tensors are dealt out
 * in file order. The split keys are copied from a tiny raw image so they have gguf-split's exact types. */
static bool write_split(const Gguf *src, const char *prefix, const SplitOpts *o) {
    int64_t nt = gguf_n_tensors(src);
    int first_t = o->first_no_tensors ? 1 : 0, parts_with_t = o->n_parts - first_t;
    for (int p = 0; p < o->n_parts; p++) {
        Buf keys = {0};
        int n_keys = (o->no[p] >= 0) + (o->count[p] >= 0) + 1;
        hdr(&keys, 3, 0, (uint64_t)n_keys);
        if (o->no[p] >= 0) kv_key(&keys, "split.no", GGUF_TYPE_U16), b_put(&keys, &(uint16_t){(uint16_t)o->no[p]}, 2);
        if (o->count[p] >= 0) kv_key(&keys, "split.count", GGUF_TYPE_U16), b_put(&keys, &(uint16_t){(uint16_t)o->count[p]}, 2);
        kv_key(&keys, "split.tensors.count", GGUF_TYPE_I32);
        b_put(&keys, &(int32_t){o->tensors_count >= 0 ? o->tensors_count : (int32_t)nt + o->duplicate}, 4);
        Err err = {{0}};
        Gguf *kg = gguf_open_memory(keys.p, keys.len, &err);
        GgufWriter *w = gguf_writer_new(p == 0 ? o->first_align : 0);
        bool ok = kg != NULL;
        if (p == 0) {
            const char *skip[] = {"split."};
            ok = ok && gguf_w_copy_kv(w, src, skip, 1) == 0;
        }
        ok = ok && gguf_w_copy_kv(w, kg, NULL, 0) == 0;
        if (p >= first_t) {
            int k = p - first_t;
            int64_t lo = nt * k / parts_with_t, hi = nt * (k + 1) / parts_with_t;
            for (int64_t i = lo; i < hi; i++) {
                const GgufTensor *t = gguf_tensor(src, i);
                ok = ok && gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL, &err) == 0;
            }
            if (o->duplicate && p == o->n_parts - 1) {
                const GgufTensor *t = gguf_tensor(src, nt * 1 / parts_with_t);
                ok = ok && gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL, &err) == 0;
            }
        }
        char path[600];
        snprintf(path, sizeof path, "%s-%05d-of-%05d.gguf", prefix, p + 1, o->n_parts);
        ok = ok && gguf_writer_write_file(w, path, &err) == 0;
        test_check(ok, __FILE__, __LINE__, "write split part", "%s: %s", path, err.msg);
        gguf_writer_free(w);
        gguf_close(kg);
        b_free(&keys);
        if (!ok) return false;
    }
    return true;
}

static Gguf *open_m4(void) {
    Err err = {{0}};
    Gguf *g = gguf_open(test_data("models/m4-qwen35moe-q8_0.gguf"), &err);
    test_check(g != NULL, __FILE__, __LINE__, "open m4", "%s", err.msg);
    return g;
}

static void split_prefix(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", test_tmpdir(), name); }

/* The split set opened through `part` must hold exactly src's metadata and tensors. */
static void check_split_equals(const Gguf *src, const char *part, int n_parts) {
    Err err = {{0}};
    Gguf *g = gguf_open(part, &err);
    CHECK_MSG(g, "%s: %s", part, err.msg);
    if (!g) return;
    CHECK(gguf_n_splits(g) == n_parts && gguf_n_tensors(g) == gguf_n_tensors(src));
    for (int64_t i = 0; i < gguf_n_tensors(src); i++) {
        const GgufTensor *a = gguf_tensor(src, i), *b = gguf_find_tensor(g, a->name);
        CHECK_MSG(b && b->type == a->type && b->nbytes == a->nbytes && memcmp(a->data, b->data, a->nbytes) == 0 &&
                      b->split >= 0 && b->split < n_parts,
                  "%s", a->name);
        if (b) {
            const void *base;
            size_t size;
            gguf_split_mapping(g, b->split, &base, &size);
            CHECK((const uint8_t *)b->data == (const uint8_t *)base + b->file_off && b->file_off + b->nbytes <= size);
        }
    }
    /* metadata comes from the first part */
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        const GgufKV *kv = gguf_kv(src, i);
        char key[256];
        gguf_str_copy(kv->key, key, sizeof key);
        const GgufValue *v = gguf_get(g, key);
        CHECK_MSG(v && value_eq(v, &kv->val), "%s", key);
    }
    const GgufValue *v = gguf_get(g, "split.count");
    CHECK(v && v->type == GGUF_TYPE_U16 && (int)v->u == n_parts);
    ModelConfig a, b;
    CHECK(model_config_read(&a, src, &err) == 0 && model_config_read(&b, g, &err) == 0);
    CHECK(a.n_vocab == b.n_vocab && a.n_embd == b.n_embd && a.n_layer == b.n_layer);
    gguf_close(g);
}

TEST(gguf, split_set_opens_as_one_model) {
    Gguf *src = open_m4();
    REQUIRE(src);
    char prefix[512], part[600];
    split_prefix(prefix, sizeof prefix, "m4split");
    SplitOpts o = split_defaults(3);
    if (write_split(src, prefix, &o)) {
        for (int k = 1; k <= 3; k++) {
            snprintf(part, sizeof part, "%s-%05d-of-00003.gguf", prefix, k);
            check_split_equals(src, part, 3);
        }
    }
    /* --no-tensor-first-split, and a first part with its own alignment (the others keep 32) */
    split_prefix(prefix, sizeof prefix, "m4split-notensors");
    o.first_no_tensors = true;
    o.first_align = 64;
    if (write_split(src, prefix, &o)) {
        snprintf(part, sizeof part, "%s-00002-of-00003.gguf", prefix);
        check_split_equals(src, part, 3);
    }
    /* one part only */
    split_prefix(prefix, sizeof prefix, "m4split-one");
    o = split_defaults(1);
    if (write_split(src, prefix, &o)) {
        snprintf(part, sizeof part, "%s-00001-of-00001.gguf", prefix);
        check_split_equals(src, part, 1);
    }
    gguf_close(src);
}

static void split_fails_(const char *name, const SplitOpts *o, int open_part, const char *want, const char *want2,
                         const char *file, int line) {
    Gguf *src = open_m4();
    if (!src) return;
    char prefix[512], part[600];
    split_prefix(prefix, sizeof prefix, name);
    if (write_split(src, prefix, o)) {
        snprintf(part, sizeof part, "%s-%05d-of-%05d.gguf", prefix, open_part, o->n_parts);
        Err err = {{0}};
        Gguf *g = gguf_open(part, &err);
        test_check(!g && one_line(err.msg) && strstr(err.msg, want) && (!want2 || strstr(err.msg, want2)), file, line,
                   "split set refused", "want '%s', got '%s'", want, g ? "success" : err.msg);
        test_note("refused: %s", err.msg);
        gguf_close(g);
    }
    gguf_close(src);
}
#define SPLIT_FAILS(name, o, open_part, want, want2) split_fails_(name, o, open_part, want, want2, __FILE__, __LINE__)

TEST(gguf, split_set_errors) {
    SplitOpts o = split_defaults(3);
    o.count[0] = 2;
    SPLIT_FAILS("s-count0", &o, 1, "split.count says 2 parts, the file name says 3", "s-count0-00001-of-00003.gguf");
    o = split_defaults(3);
    o.count[2] = 4;
    SPLIT_FAILS("s-count2", &o, 1, "split.count says 4 parts, the file name says 3", "-00003-of-00003.gguf");
    o = split_defaults(3);
    o.count[0] = -1;
    SPLIT_FAILS("s-nocount", &o, 2, "named as one of 3 parts but has no split.count key", NULL);
    o = split_defaults(3);
    o.no[1] = 5;
    SPLIT_FAILS("s-no1", &o, 3, "split.no is 5 but the file name says part 2 of 3", "-00002-of-00003.gguf");
    o = split_defaults(3);
    o.no[0] = 1;
    SPLIT_FAILS("s-no0", &o, 1, "split.no is 1 but the file name says part 1 of 3", NULL);
    o = split_defaults(3);
    o.no[2] = -1;
    SPLIT_FAILS("s-nono", &o, 1, "split part 3 of 3 has no split.no key", NULL);
    o = split_defaults(3);
    o.tensors_count = 5;
    SPLIT_FAILS("s-tc", &o, 2, "split.tensors.count says 5 tensors, the 3 parts hold", NULL);
    o = split_defaults(3);
    o.duplicate = true; /* split.tensors.count includes the repeat, so only the duplicate is wrong */
    SPLIT_FAILS("s-dup", &o, 1, "duplicate tensor name", "in split parts 2 and 3");
    /* a missing part */
    Gguf *src = open_m4();
    REQUIRE(src);
    char prefix[512], part[600];
    split_prefix(prefix, sizeof prefix, "s-missing");
    o = split_defaults(3);
    if (write_split(src, prefix, &o)) {
        snprintf(part, sizeof part, "%s-00003-of-00003.gguf", prefix);
        CHECK(remove(part) == 0);
        snprintf(part, sizeof part, "%s-00001-of-00003.gguf", prefix);
        Err err = {{0}};
        Gguf *g = gguf_open(part, &err);
        CHECK_MSG(!g && contains(err.msg, "split part 3 of 3") && contains(err.msg, "cannot open") &&
                      contains(err.msg, "s-missing-00003-of-00003.gguf"),
                  "%s", err.msg);
        test_note("refused: %s", err.msg);
        gguf_close(g);
        /* a part number outside the set */
        snprintf(part, sizeof part, "%s-00004-of-00003.gguf", prefix);
        err = (Err){{0}};
        CHECK(gguf_open(part, &err) == NULL && contains(err.msg, "part 4 of 3 does not exist"));
        test_note("refused: %s", err.msg);
        snprintf(part, sizeof part, "%s-00000-of-00000.gguf", prefix);
        err = (Err){{0}};
        CHECK(gguf_open(part, &err) == NULL && contains(err.msg, "a split set of 0 parts"));
        test_note("refused: %s", err.msg);
        /* a part renamed to a lone file */
        snprintf(part, sizeof part, "%s-00001-of-00003.gguf", prefix);
        char lone[600];
        snprintf(lone, sizeof lone, "%s/lone.gguf", test_tmpdir());
        CHECK(rename(part, lone) == 0);
        err = (Err){{0}};
        CHECK(gguf_open(lone, &err) == NULL);
        CHECK_MSG(contains(err.msg, "split.count says this is one of 3 parts"), "%s", err.msg);
        test_note("refused: %s", err.msg);
    }
    gguf_close(src);
}

/* ---- deltallm inspect ------------------------------------------------------------------------------------ */

typedef struct Run {
    int status;
    char *out, *err;
} Run;

/* Runs `$DELTALLM_BIN inspect ARGS`, capturing stdout and stderr. false (with a note) without a binary. */
static bool run_inspect(const char *args, Run *r) {
    const char *bin = getenv("DELTALLM_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        test_skip("skipped: DELTALLM_BIN is not set to the deltallm binary (make test sets it)");
        return false;
    }
    char errpath[512], cmd[2048];
    snprintf(errpath, sizeof errpath, "%s/inspect.stderr", test_tmpdir());
    snprintf(cmd, sizeof cmd, "'%s' inspect %s 2>'%s'", bin, args, errpath);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    size_t len = 0, cap = 1 << 16;
    r->out = malloc(cap);
    for (size_t k; r->out && (k = fread(r->out + len, 1, cap - len - 1, p)) > 0;) {
        len += k;
        if (cap - len < 4096) r->out = realloc(r->out, cap *= 2);
    }
    if (r->out) r->out[len] = '\0';
    int st = pclose(p);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r->err = test_read_file(errpath, NULL);
    return r->out && r->err;
}
static void run_free(Run *r) {
    free(r->out);
    free(r->err);
}
static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

TEST(gguf, inspect_test_model) {
    Run r = {0};
    char args[600];
    snprintf(args, sizeof args, "'%s'", test_data("models/m4-qwen35moe-q8_0.gguf"));
    if (!run_inspect(args, &r)) return;
    CHECK_MSG(r.status == 0 && r.err[0] == '\0', "status %d, stderr '%s'", r.status, r.err);
    const char *want[] = {
        "== file ==", "GGUF version         3", "tensors              76", "== metadata ==",
        "general.architecture                         str = \"qwen35moe\"",
        "tokenizer.ggml.tokens                        arr[str,1003] [", ", ...]", /* arrays summarized */
        "== hyperparameters (qwen35moe) ==", "n_vocab              1003", "n_embd               64",
        "layer kinds          3 delta-net, 1 full attention",
        "attention            4 query heads, 2 kv heads, head dim 32, rope dims 8",
        "delta-net            d_conv 4, d_inner 64, d_state 16, 4 value heads (dt_rank), 2 key groups,",
        "conv channels 128, Q 32, K 32, V 64, value head dim 16",
        "ffn                  MoE: 8 experts, 2 used, expert ff 32, shared expert ff 64",
        "== memory ==", "weights (mapped)", "recurrent state", "KV cache (F32)",
        /* the state table: K + V of 2 heads x 32 values in 1 attention layer, per token */
        "one session's state (seqstate_bytes)", "f32              512 B", "f16              256 B",
        "q8_0             136 B", "q4_0              72 B",
        "== tensors ==", "name", "type", "shape", "offset", "bytes",
        "token_embd.weight", "{64, 1003}", "blk.0.ffn_gate_exps.weight", "{64, 32, 8}",
        "== totals per type ==", "q8_0", "f32", "total        76 tensors"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) CHECK_MSG(contains(r.out, want[i]), "missing '%s'", want[i]);
    run_free(&r);
    /* --no-tensors drops the table only */
    snprintf(args, sizeof args, "--no-tensors '%s'", test_data("models/m2-qwen3next-new-mixed.gguf"));
    if (!run_inspect(args, &r)) return;
    CHECK(r.status == 0 && !contains(r.out, "== tensors ==") && contains(r.out, "== totals per type ==") &&
          contains(r.out, "key->value head j / r (grouped)") && contains(r.out, "q4_K"));
    run_free(&r);
    /* a vocab-only file of another arch is not an error */
    snprintf(args, sizeof args, "'%s'", test_data("vocab/ggml-vocab-qwen2.gguf"));
    if (!run_inspect(args, &r)) return;
    CHECK_MSG(r.status == 0 && contains(r.out, "unknown architecture 'qwen2'"), "status %d", r.status);
    run_free(&r);
}

/* Every test model and vocab file inspects cleanly; the delta-net lines carry the sidecar's numbers. */
TEST(gguf, inspect_all_test_files) {
    int n_models = list_models();
    const char *models[MAX_MODELS];
    for (int m = 0; m < n_models; m++) models[m] = model_names[m];
    for (int m = 0; m < n_models; m++) {
        char rel[256], args[600];
        snprintf(rel, sizeof rel, "models/%s.gguf.json", models[m]);
        char *txt = test_read_file(test_data(rel), NULL);
        cJSON *j = txt ? cJSON_Parse(txt) : NULL;
        free(txt);
        if (!j) {
            CHECK_MSG(false, "sidecar %s", rel);
            continue;
        }
        const cJSON *cf = cJSON_GetObjectItemCaseSensitive(j, "config");
        int ds = jint(cf, "ssm_d_state"), nk = jint(cf, "ssm_n_group"), nv = jint(cf, "ssm_dt_rank");
        int di = jint(cf, "d_inner"), kc = jint(cf, "ssm_d_conv");
        char l1[200], l2[200];
        snprintf(l1, sizeof l1, "delta-net            d_conv %d, d_inner %d, d_state %d, %d value heads (dt_rank), %d key groups,",
                 kc, di, ds, nv, nk);
        snprintf(l2, sizeof l2, "conv channels %d, Q %d, K %d, V %d, value head dim %d", 2 * nk * ds + di, nk * ds, nk * ds,
                 di, di / nv);
        snprintf(args, sizeof args, "'%s/models/%s.gguf'", test_data(""), models[m]);
        Run r = {0};
        if (!run_inspect(args, &r)) {
            cJSON_Delete(j);
            return;
        }
        CHECK_MSG(r.status == 0 && r.err[0] == '\0', "%s: status %d, '%s'", models[m], r.status, r.err);
        const char *sections[] = {"== file ==", "== metadata ==", "== hyperparameters (", "== memory ==", "== tensors ==",
                                  "== totals per type =="};
        for (int i = 0; i < 6; i++) CHECK_MSG(contains(r.out, sections[i]), "%s: no '%s'", models[m], sections[i]);
        CHECK_MSG(contains(r.out, l1) && contains(r.out, l2), "%s: want '%s' / '%s'", models[m], l1, l2);
        run_free(&r);
        cJSON_Delete(j);
    }
    const char *vocab[] = {"vocab/ggml-vocab-qwen2.gguf", "vocab/ggml-vocab-qwen35.gguf"};
    for (int i = 0; i < 2; i++) {
        char args[600];
        snprintf(args, sizeof args, "'%s'", test_data(vocab[i]));
        Run r = {0};
        if (!run_inspect(args, &r)) return;
        CHECK_MSG(r.status == 0 && contains(r.out, "tokenizer.ggml.merges") && contains(r.out, "tensors              0"),
                  "%s: status %d", vocab[i], r.status);
        run_free(&r);
    }
}

TEST(gguf, inspect_corrupt_file) {
    Buf b = {0};
    small_valid(&b);
    memcpy(b.p, "GGUX", 4);
    char path[512], args[600];
    snprintf(path, sizeof path, "%s/corrupt.gguf", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fwrite(b.p, 1, b.len, f);
    fclose(f);
    b_free(&b);
    Run r = {0};
    snprintf(args, sizeof args, "'%s'", path);
    if (!run_inspect(args, &r)) return;
    CHECK_MSG(r.status == 1, "status %d", r.status);
    CHECK_MSG(r.out[0] == '\0', "stdout '%s'", r.out);
    CHECK_MSG(count_lines(r.err) == 1 && strncmp(r.err, "deltallm inspect: ", 18) == 0 && contains(r.err, "bad magic") &&
                  contains(r.err, "corrupt.gguf"),
              "stderr '%s'", r.err);
    run_free(&r);
    /* truncated tensor data */
    Buf t = {0};
    small_valid(&t);
    f = fopen(path, "wb");
    REQUIRE(f);
    fwrite(t.p, 1, t.len - 1, f);
    fclose(f);
    b_free(&t);
    if (!run_inspect(args, &r)) return;
    CHECK_MSG(r.status == 1 && r.out[0] == '\0' && count_lines(r.err) == 1 && contains(r.err, "tensor 't.b'") &&
                  contains(r.err, "outside the file"),
              "status %d, stderr '%s'", r.status, r.err);
    run_free(&r);
    /* a missing file */
    snprintf(args, sizeof args, "'%s/nope.gguf'", test_tmpdir());
    if (!run_inspect(args, &r)) return;
    CHECK(r.status == 1 && count_lines(r.err) == 1 && contains(r.err, "cannot open"));
    run_free(&r);
    /* a model file of an arch deltallm does not run: the listing, then exit 1 with the reason */
    GgufWriter *w = gguf_writer_new(0);
    gguf_w_str(w, "general.architecture", "llama");
    float x[32] = {0};
    Err err = {{0}};
    gguf_w_tensor(w, "token_embd.weight", FMT_F32, 2, (const int64_t[]){8, 4}, x, NULL, NULL, &err);
    CHECK(gguf_writer_write_file(w, path, &err) == 0);
    gguf_writer_free(w);
    snprintf(args, sizeof args, "'%s'", path);
    if (!run_inspect(args, &r)) return;
    CHECK_MSG(r.status == 1 && count_lines(r.err) == 1 && contains(r.err, "unknown architecture 'llama'") &&
                  contains(r.out, "== tensors =="),
              "status %d, stderr '%s'", r.status, r.err);
    run_free(&r);
}

/* The canonical metadata of Qwen3-Next-80B-A3B (mkmodel.py --preset qwen3-next-80b-a3b), without tensors:
 * enough for inspect's hyperparameter section, which must show the delta-net numbers. */
TEST(gguf, inspect_qwen3next_80b_geometry) {
    GgufWriter *w = gguf_writer_new(0);
    gguf_w_str(w, "general.architecture", "qwen3next");
    gguf_w_str(w, "general.name", "qwen3-next-80b-a3b (metadata only)");
    const struct {
        const char *k;
        uint32_t v;
    } keys[] = {{"context_length", 262144}, {"embedding_length", 2048}, {"block_count", 48},
                {"feed_forward_length", 5120}, {"attention.head_count", 16}, {"attention.head_count_kv", 2},
                {"attention.key_length", 256}, {"attention.value_length", 256}, {"rope.dimension_count", 64},
                {"ssm.conv_kernel", 4}, {"ssm.inner_size", 4096}, {"ssm.state_size", 128}, {"ssm.time_step_rank", 32},
                {"ssm.group_count", 16}, {"full_attention_interval", 4}, {"expert_count", 512},
                {"expert_used_count", 10}, {"expert_feed_forward_length", 512},
                {"expert_shared_feed_forward_length", 512}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char k[128];
        snprintf(k, sizeof k, "qwen3next.%s", keys[i].k);
        gguf_w_u32(w, k, keys[i].v);
    }
    gguf_w_f32(w, "qwen3next.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_w_f32(w, "qwen3next.rope.freq_base", 1e7f);
    char path[512], args[600];
    snprintf(path, sizeof path, "%s/q3n-80b-meta.gguf", test_tmpdir());
    Err err = {{0}};
    CHECK_MSG(gguf_writer_write_file(w, path, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    Gguf *g = gguf_open(path, &err);
    REQUIRE_MSG(g, "%s", err.msg);
    ModelConfig c;
    CHECK_MSG(model_config_read(&c, g, &err) == 0, "%s", err.msg);
    CHECK(c.ssm_d_conv == 4 && c.ssm_d_inner == 4096 && c.ssm_d_state == 128 && c.ssm_n_v_head == 32 &&
          c.ssm_n_k_head == 16 && c.ssm_conv_dim == 8192 && c.ssm_key_dim == 2048 && c.ssm_head_v_dim == 128);
    CHECK(c.n_layer == 48 && c.n_recurrent == 36 && c.n_attention == 12);
    gguf_close(g);
    Run r = {0};
    snprintf(args, sizeof args, "'%s'", path);
    if (!run_inspect(args, &r)) return;
    CHECK_MSG(r.status == 0, "status %d: %s", r.status, r.err);
    CHECK(contains(r.out, "delta-net            d_conv 4, d_inner 4096, d_state 128, 32 value heads (dt_rank), 16 key groups,"));
    CHECK(contains(r.out, "conv channels 8192, Q 2048, K 2048, V 4096, value head dim 128"));
    CHECK(contains(r.out, "layer kinds          36 delta-net, 12 full attention (every 4th layer is attention)"));
    run_free(&r);
}

TEST(gguf, inspect_split_set) {
    Gguf *src = open_m4();
    REQUIRE(src);
    char prefix[512], args[700];
    split_prefix(prefix, sizeof prefix, "inspect-split");
    SplitOpts o = split_defaults(3);
    bool ok = write_split(src, prefix, &o);
    gguf_close(src);
    if (!ok) return;
    Run r = {0};
    snprintf(args, sizeof args, "'%s-00002-of-00003.gguf'", prefix);
    if (!run_inspect(args, &r)) return;
    CHECK_MSG(r.status == 0, "%s", r.err);
    CHECK(contains(r.out, "parts                3") && contains(r.out, "tensors              76") &&
          contains(r.out, "== hyperparameters (qwen35moe) ==") && contains(r.out, "split.count") &&
          contains(r.out, "bytes  part\n"));
    run_free(&r);
}

/* ---- fuzz seeds ------------------------------------------------------------------------------------------ */

/* The seed corpus of tests/fuzz/fuzz_gguf.c, built here so it can be regenerated:
 *   DELTALLM_WRITE_SEEDS=tests/fuzz/seeds/fuzz_gguf build/tests gguf/fuzz_seeds
 * Without the variable the test only checks that the seeds it would write parse as expected, and that the
 * committed seeds go through the reader without incident. */
static void seed_model_meta(Buf *out, const char *m, int n_tensors) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", m);
    Err err = {{0}};
    Gguf *src = gguf_open(test_data(rel), &err);
    if (!src) return;
    GgufWriter *w = gguf_writer_new(0);
    const char *skip[] = {"tokenizer."};
    gguf_w_copy_kv(w, src, skip, 1);
    /* a token_embd small enough for a seed: the config reads n_vocab from it */
    static float emb[256 * 4];
    int64_t ne[2] = {gguf_find_tensor(src, "token_embd.weight")->ne[0], 4};
    if (ne[0] <= 256) gguf_w_tensor(w, "token_embd.weight", FMT_F32, 2, ne, emb, NULL, NULL, &err);
    for (int i = 0; i < n_tensors; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", i);
        gguf_w_tensor(w, name, i % 2 ? FMT_F16 : FMT_F32, 1, (const int64_t[]){8}, emb, NULL, NULL, &err);
    }
    uint8_t *img;
    size_t n;
    if (gguf_writer_write_mem(w, &img, &n, &err) == 0) {
        b_put(out, img, n);
        free(img);
    }
    gguf_writer_free(w);
    gguf_close(src);
}

TEST(gguf, fuzz_seeds) {
    struct {
        const char *name;
        Buf b;
        bool valid;
    } seeds[10] = {{"small-valid", {0}, true}, {"all-types", {0}, true}, {"nested-8", {0}, true},
                   {"qwen3next-meta", {0}, true}, {"qwen35-meta", {0}, true}, {"qwen35moe-meta", {0}, true},
                   {"split-part", {0}, true}, {"align-64", {0}, true}, {"bad-tensor-type", {0}, false},
                   {"truncated", {0}, false}};
    small_valid(&seeds[0].b);
    all_types(&seeds[1].b);
    nested(&seeds[2].b, 8);
    seed_model_meta(&seeds[3].b, "m2-qwen3next-new-mixed", 2);
    seed_model_meta(&seeds[4].b, "m5-qwen35-7layer-int3-f16", 1);
    seed_model_meta(&seeds[5].b, "m4-qwen35moe-q8_0", 3);
    Buf *b = &seeds[6].b;
    hdr(b, 3, 1, 3);
    kv_key(b, "split.no", GGUF_TYPE_U16), b_put(b, &(uint16_t){1}, 2);
    kv_key(b, "split.count", GGUF_TYPE_U16), b_put(b, &(uint16_t){3}, 2);
    kv_key(b, "split.tensors.count", GGUF_TYPE_I32), b_u32(b, 3);
    tinfo(b, "blk.1.ffn_down.weight", 2, (const uint64_t[]){32, 2}, FMT_Q8_0, 0);
    data(b, 32, 68);
    b = &seeds[7].b;
    hdr(b, 3, 2, 1);
    kv_u32(b, "general.alignment", 64);
    tinfo(b, "a", 1, (const uint64_t[]){256}, FMT_Q4_K, 0);
    tinfo(b, "b", 3, (const uint64_t[]){32, 1, 2}, FMT_BF16, 192);
    data(b, 64, 320);
    one_tensor(&seeds[8].b, "w", 1, (const uint64_t[]){256}, 31, 0, 64);
    small_valid(&seeds[9].b);
    seeds[9].b.len -= 40;
    const char *dir = getenv("DELTALLM_WRITE_SEEDS");
    size_t total = 0;
    for (int i = 0; i < 10; i++) {
        Err err = {{0}};
        Gguf *g = gguf_open_memory(seeds[i].b.p, seeds[i].b.len, &err);
        CHECK_MSG((g != NULL) == seeds[i].valid, "seed %s: %s", seeds[i].name, err.msg);
        if (g && strstr(seeds[i].name, "-meta")) {
            ModelConfig c;
            CHECK_MSG(model_config_read(&c, g, &err) == 0 && c.n_vocab == 4, "seed %s: %s", seeds[i].name, err.msg);
        }
        gguf_close(g);
        total += seeds[i].b.len;
        if (dir && *dir) {
            char path[700];
            snprintf(path, sizeof path, "%s/%s.gguf", dir, seeds[i].name);
            FILE *f = fopen(path, "wb");
            CHECK_MSG(f && fwrite(seeds[i].b.p, 1, seeds[i].b.len, f) == seeds[i].b.len, "%s", path);
            if (f) fclose(f);
        }
        b_free(&seeds[i].b);
    }
    CHECK_MSG(total < 64 * 1024, "seeds total %zu bytes", total);
    test_note("%d seeds, %zu bytes%s%s", 10, total, dir && *dir ? ", written to " : "", dir && *dir ? dir : "");
    /* the committed corpus */
    DIR *d = opendir("tests/fuzz/seeds/fuzz_gguf");
    if (!d) return;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[700];
        snprintf(path, sizeof path, "tests/fuzz/seeds/fuzz_gguf/%s", e->d_name);
        size_t size = 0;
        void *p = test_read_file(path, &size);
        if (!p) continue;
        Err err = {{0}};
        Gguf *g = gguf_open_memory(p, size, &err);
        CHECK_MSG(g || one_line(err.msg), "%s", path);
        if (g) {
            ModelConfig c;
            model_config_read(&c, g, &err);
        }
        gguf_close(g);
        free(p);
        n++;
    }
    closedir(d);
    test_note("%d committed seeds read", n);
}

/* A short file that does not start with the magic is "not a GGUF file", not a truncated one (issue 14). */
TEST(gguf, short_file_without_magic) {
    const char *cases[][2] = {{"abc\n", "not a GGUF file"}, {"", "not a GGUF file"}, {"GGUF\3\0\0\0", "truncated"}};
    for (int i = 0; i < 3; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/short%d.gguf", test_tmpdir(), i);
        FILE *f = fopen(path, "wb");
        REQUIRE(f);
        fwrite(cases[i][0], 1, i == 2 ? 8 : strlen(cases[i][0]), f);
        fclose(f);
        Err err = {{0}};
        CHECK_MSG(gguf_open(path, &err) == NULL && strstr(err.msg, cases[i][1]), "case %d: %s", i, err.msg);
    }
}
