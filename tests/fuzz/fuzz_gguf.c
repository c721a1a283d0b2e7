/* fuzz_gguf.c — libFuzzer target over the GGUF reader (`make fuzz`; seeds in tests/fuzz/seeds/fuzz_gguf/,
 * written by the test gguf/fuzz_seeds).
 *
 * Each input is parsed with gguf_open_memory. A refused input must come back with a one-line message. An
 * accepted one is walked completely (every key, value, nested array element and tensor byte range, under
 * ASan), checked against the promises gguf.h makes (after a successful open every pointer and size may be
 * trusted), read through the typed getters and model_config_read, and copied through the writer and read
 * back, which must give the same metadata. Any broken promise traps. */
#include "gguf/format.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(x)                                                                                          \
    do {                                                                                                   \
        if (!(x)) __builtin_trap();                                                                        \
    } while (0)

static volatile uint64_t sink;

static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint64_t s = 0;
    for (uint64_t i = 0; i < n; i++) s += b[i];
    sink += s;
}

static void expect_one_line(const Err *err) {
    EXPECT(err->msg[0] != '\0');
    EXPECT(memchr(err->msg, '\0', sizeof err->msg) != NULL);
    EXPECT(strchr(err->msg, '\n') == NULL);
}

static void walk_value(const GgufValue *v, int depth);

static void walk_array(const GgufArray *a, int depth) {
    EXPECT((unsigned)a->type < GGUF_TYPE_COUNT);
    if (a->type == GGUF_TYPE_STRING) {
        EXPECT(a->n == 0 || a->strs);
        for (uint64_t i = 0; i < a->n; i++) touch(a->strs[i].ptr, a->strs[i].len);
    } else if (a->type == GGUF_TYPE_ARRAY) {
        EXPECT(a->n == 0 || a->items);
        for (uint64_t i = 0; i < a->n; i++) {
            EXPECT(a->items[i].type == GGUF_TYPE_ARRAY);
            walk_value(&a->items[i], depth + 1);
        }
    } else {
        EXPECT(a->n == 0 || a->raw);
        for (uint64_t i = 0; i < a->n; i++) {
            double d = gguf_arr_f64(a, i);
            sink += (uint64_t)gguf_arr_i64(a, i) + (d == d);
        }
    }
}

static void walk_value(const GgufValue *v, int depth) {
    EXPECT(depth <= 8); /* gguf.c's GGUF_MAX_DEPTH */
    EXPECT((unsigned)v->type < GGUF_TYPE_COUNT);
    if (v->type == GGUF_TYPE_STRING) touch(v->s.ptr, v->s.len);
    else if (v->type == GGUF_TYPE_ARRAY) walk_array(&v->arr, depth);
    else sink += v->u;
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
    if (a->type == GGUF_TYPE_STRING) return a->s.len == b->s.len && memcmp(a->s.ptr, b->s.ptr, a->s.len) == 0;
    if (a->type == GGUF_TYPE_ARRAY) return array_eq(&a->arr, &b->arr);
    return memcmp(&a->u, &b->u, sizeof a->u) == 0; /* bit patterns: NaN == NaN here */
}

/* Every KV copied through the writer must read back identical, byte for byte (keys and strings may hold
 * any bytes, NULs included). */
static void round_trip(const Gguf *g) {
    GgufWriter *w = gguf_writer_new(0);
    EXPECT(w && gguf_w_copy_kv(w, g, NULL, 0) == 0);
    uint8_t *img = NULL;
    size_t n = 0;
    Err err = {{0}};
    EXPECT(gguf_writer_write_mem(w, &img, &n, &err) == 0);
    gguf_writer_free(w);
    Gguf *g2 = gguf_open_memory(img, n, &err);
    EXPECT(g2 != NULL);
    /* same KVs in the same order, less general.alignment (the writer owns it; 32 here, so not written) */
    int64_t j = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const GgufKV *a = gguf_kv(g, i);
        if (gguf_str_eq(a->key, "general.alignment")) continue;
        const GgufKV *b = gguf_kv(g2, j++);
        EXPECT(b && a->key.len == b->key.len && memcmp(a->key.ptr, b->key.ptr, a->key.len) == 0);
        EXPECT(value_eq(&a->val, &b->val));
    }
    EXPECT(j == gguf_n_kv(g2));
    gguf_close(g2);
    free(img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Err err = {{0}};
    Gguf *g = gguf_open_memory(data, size, &err);
    if (!g) {
        expect_one_line(&err);
        return 0;
    }
    EXPECT(gguf_version(g) == 3 && gguf_n_splits(g) == 1 && gguf_file_size(g) == size);
    uint32_t align = gguf_alignment(g);
    EXPECT(align >= 1 && align <= 65536 && (align & (align - 1)) == 0);

    /* metadata: every value reachable, keys unique and found by name */
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const GgufKV *kv = gguf_kv(g, i);
        EXPECT(kv && kv->key.len > 0);
        touch(kv->key.ptr, kv->key.len);
        walk_value(&kv->val, 0);
        char key[256];
        if (kv->key.len < sizeof key && !memchr(kv->key.ptr, 0, kv->key.len)) {
            gguf_str_copy(kv->key, key, sizeof key);
            EXPECT(gguf_get(g, key) == &kv->val);
            uint32_t u;
            int64_t x;
            float f;
            bool b;
            GgufStr s;
            const GgufArray *a;
            Err e = {{0}};
            if (gguf_get_u32(g, key, &u, true, &e) < 0) expect_one_line(&e), e = (Err){{0}};
            if (gguf_get_i64(g, key, &x, true, &e) < 0) expect_one_line(&e), e = (Err){{0}};
            if (gguf_get_f32(g, key, &f, true, &e) < 0) expect_one_line(&e), e = (Err){{0}};
            if (gguf_get_bool(g, key, &b, true, &e) < 0) expect_one_line(&e), e = (Err){{0}};
            if (gguf_get_str(g, key, &s, true, &e) < 0) expect_one_line(&e), e = (Err){{0}};
            if (gguf_get_arr(g, key, &a, true, &e) < 0) expect_one_line(&e), e = (Err){{0}};
        }
    }
    EXPECT(gguf_kv(g, gguf_n_kv(g)) == NULL);

    /* tensors: names, shapes, sizes and data exactly as promised, data inside the input */
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        EXPECT(t && t->split == 0);
        size_t nl = strnlen(t->name, GGUF_MAX_NAME);
        EXPECT(nl > 0 && nl < GGUF_MAX_NAME);
        EXPECT(gguf_find_tensor(g, t->name) == t);
        EXPECT(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
        uint64_t n_el = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            EXPECT(t->ne[d] >= 1 && (d < t->n_dims || t->ne[d] == 1));
            n_el *= (uint64_t)t->ne[d];
        }
        EXPECT(n_el == t->n_elements && n_el <= (uint64_t)INT64_MAX);
        const Format *f = format_get(t->type);
        EXPECT(f && t->ne[0] % f->block == 0);
        EXPECT(t->nbytes == n_el / (uint64_t)f->block * (uint64_t)f->bytes);
        EXPECT(t->offset % align == 0 && t->file_off % align == 0);
        EXPECT(t->file_off <= size && t->nbytes <= size - t->file_off);
        EXPECT((const uint8_t *)t->data == data + t->file_off);
        if (t->nbytes) touch(t->data, 1), touch((const uint8_t *)t->data + t->nbytes - 1, 1);
    }
    EXPECT(gguf_tensor(g, gguf_n_tensors(g)) == NULL);

    ModelConfig c;
    if (model_config_read(&c, g, &err) == 0) {
        EXPECT(c.n_layer >= 1 && c.n_layer <= c.n_layer_all && c.n_layer_all <= MODEL_MAX_LAYERS);
        EXPECT(c.n_recurrent + c.n_attention == c.n_layer);
        EXPECT(c.ssm_conv_dim == 2 * c.ssm_key_dim + c.ssm_d_inner && c.ssm_head_v_dim == c.ssm_d_state);
        EXPECT(c.n_head % c.n_head_kv == 0);
    } else {
        expect_one_line(&err);
    }
    round_trip(g);
    gguf_close(g);
    return 0;
}
