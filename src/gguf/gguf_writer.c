/* gguf_writer.c — see gguf_writer.h. The image is produced by one routine that emits bytes through a
 * sink, so the file and memory outputs cannot drift apart. */
#include "gguf/gguf_writer.h"

#include "gguf/format.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One metadata entry. Keys and strings are kept as bytes with a length, so entries copied from a file
 * (gguf_w_copy_kv) survive byte for byte, NULs included. */
typedef struct WKV {
    char *key; /* key_len bytes (+ a NUL) */
    size_t key_len;
    GgufValueType type;
    GgufValueType elem; /* arrays */
    uint64_t n;         /* arrays: element count */
    uint8_t *bytes;     /* scalar value, string bytes, or an array's elements exactly as GGUF stores them */
    size_t nbytes;
} WKV;

typedef struct WTensor {
    char name[GGUF_MAX_NAME];
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
    const void *data;
    GgufFillFn fill;
    void *fill_ctx;
} WTensor;

struct GgufWriter {
    uint32_t alignment;
    WKV *kv;
    size_t n_kv, cap_kv;
    WTensor *t;
    size_t n_t, cap_t;
    uint64_t data_size;
};

GgufWriter *gguf_writer_new(uint32_t alignment) {
    GgufWriter *w = calloc(1, sizeof *w);
    if (w) w->alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(GgufWriter *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].bytes);
    }
    free(w->kv);
    free(w->t);
    free(w);
}

static WKV *add_kv_n(GgufWriter *w, const char *key, size_t key_len, GgufValueType type) {
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        WKV *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) return NULL;
        w->kv = kv;
        w->cap_kv = cap;
    }
    WKV *e = &w->kv[w->n_kv];
    memset(e, 0, sizeof *e);
    e->key = malloc(key_len + 1);
    if (!e->key) return NULL;
    memcpy(e->key, key, key_len);
    e->key[key_len] = '\0';
    e->key_len = key_len;
    e->type = type;
    w->n_kv++;
    return e;
}

/* An entry whose value is the n bytes at v (v may be NULL when n is 0: an empty array). */
static int add_bytes_n(GgufWriter *w, const char *key, size_t key_len, GgufValueType t, const void *v, size_t n) {
    WKV *e = add_kv_n(w, key, key_len, t);
    if (!e || !(e->bytes = malloc(n ? n : 1))) return -1;
    if (n) memcpy(e->bytes, v, n);
    e->nbytes = n;
    return 0;
}
static int add_scalar(GgufWriter *w, const char *key, GgufValueType t, const void *v, size_t n) {
    return add_bytes_n(w, key, strlen(key), t, v, n);
}

int gguf_w_u32(GgufWriter *w, const char *key, uint32_t v) { return add_scalar(w, key, GGUF_TYPE_U32, &v, 4); }
int gguf_w_i32(GgufWriter *w, const char *key, int32_t v) { return add_scalar(w, key, GGUF_TYPE_I32, &v, 4); }
int gguf_w_u64(GgufWriter *w, const char *key, uint64_t v) { return add_scalar(w, key, GGUF_TYPE_U64, &v, 8); }
int gguf_w_f32(GgufWriter *w, const char *key, float v) { return add_scalar(w, key, GGUF_TYPE_F32, &v, 4); }
int gguf_w_bool(GgufWriter *w, const char *key, int v) {
    uint8_t b = v != 0;
    return add_scalar(w, key, GGUF_TYPE_BOOL, &b, 1);
}
int gguf_w_str(GgufWriter *w, const char *key, const char *v) {
    return add_scalar(w, key, GGUF_TYPE_STRING, v, strlen(v));
}

int gguf_w_arr(GgufWriter *w, const char *key, GgufValueType elem_type, const void *data, uint64_t n) {
    size_t es = gguf_value_type_size(elem_type);
    if (!es) return -1;
    if (add_scalar(w, key, GGUF_TYPE_ARRAY, data, (size_t)n * es)) return -1;
    w->kv[w->n_kv - 1].elem = elem_type;
    w->kv[w->n_kv - 1].n = n;
    return 0;
}

/* A growing byte buffer, for serializing string arrays and arrays of arrays. */
typedef struct Bytes {
    uint8_t *p;
    size_t len, cap;
} Bytes;

static int bytes_put(Bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

/* Appends the elements of a exactly as GGUF stores them (without a's own type and count). */
static int bytes_elems(Bytes *b, const GgufArray *a) {
    if (a->type == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < a->n; i++) {
            uint64_t l = a->strs[i].len;
            if (bytes_put(b, &l, 8) || bytes_put(b, a->strs[i].ptr, (size_t)l)) return -1;
        }
        return 0;
    }
    if (a->type == GGUF_TYPE_ARRAY) {
        for (uint64_t i = 0; i < a->n; i++) {
            const GgufArray *x = &a->items[i].arr;
            uint32_t t = x->type;
            if (bytes_put(b, &t, 4) || bytes_put(b, &x->n, 8) || bytes_elems(b, x)) return -1;
        }
        return 0;
    }
    return bytes_put(b, a->raw, (size_t)a->n * gguf_value_type_size(a->type));
}

/* An array entry taking ownership of its serialized elements (freed here on failure). */
static int add_array(GgufWriter *w, const char *key, size_t key_len, GgufValueType elem, uint64_t n, Bytes *b) {
    WKV *e = add_kv_n(w, key, key_len, GGUF_TYPE_ARRAY);
    if (!e) {
        free(b->p);
        return -1;
    }
    e->elem = elem;
    e->n = n;
    e->bytes = b->p; /* NULL for no bytes: emit writes none */
    e->nbytes = b->len;
    return 0;
}

int gguf_w_arr_str(GgufWriter *w, const char *key, const char *const *strs, uint64_t n) {
    Bytes b = {NULL, 0, 0};
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = strlen(strs[i]);
        if (bytes_put(&b, &l, 8) || bytes_put(&b, strs[i], (size_t)l)) {
            free(b.p);
            return -1;
        }
    }
    return add_array(w, key, strlen(key), GGUF_TYPE_STRING, n, &b);
}

int gguf_w_copy_kv(GgufWriter *w, const Gguf *g, const char *const *skip, int n_skip) {
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const GgufKV *kv = gguf_kv(g, i);
        const char *key = kv->key.ptr;
        size_t kl = (size_t)kv->key.len;
        /* the writer owns the alignment (see emit) */
        bool drop = gguf_str_eq(kv->key, "general.alignment");
        for (int s = 0; s < n_skip; s++) drop |= kl >= strlen(skip[s]) && memcmp(key, skip[s], strlen(skip[s])) == 0;
        if (drop) continue;
        const GgufValue *v = &kv->val;
        int rc = 0;
        switch (v->type) {
        case GGUF_TYPE_STRING: rc = add_bytes_n(w, key, kl, GGUF_TYPE_STRING, v->s.ptr, (size_t)v->s.len); break;
        case GGUF_TYPE_ARRAY: {
            /* kept as the bytes of its elements; emit writes them verbatim */
            Bytes b = {NULL, 0, 0};
            if (bytes_elems(&b, &v->arr)) {
                free(b.p);
                return -1;
            }
            rc = add_array(w, key, kl, v->arr.type, v->arr.n, &b);
            break;
        }
        default: {
            uint8_t raw[8];
            size_t n = gguf_value_type_size(v->type);
            switch (v->type) {
            case GGUF_TYPE_F32: { float f = (float)v->f; memcpy(raw, &f, 4); break; }
            case GGUF_TYPE_F64: memcpy(raw, &v->f, 8); break;
            case GGUF_TYPE_I8: case GGUF_TYPE_I16: case GGUF_TYPE_I32: case GGUF_TYPE_I64: memcpy(raw, &v->i, n); break;
            default: memcpy(raw, &v->u, n); break;
            }
            rc = add_bytes_n(w, key, kl, v->type, raw, n);
        }
        }
        if (rc) return -1;
    }
    return 0;
}

int gguf_w_tensor(GgufWriter *w, const char *name, uint32_t type, int n_dims, const int64_t *ne, const void *data,
                  GgufFillFn fill, void *fill_ctx, Err *err) {
    const Format *f = format_get(type);
    if (!f) return err_set(err, "writer: unknown tensor type %u for '%s'", type, name);
    if (strlen(name) >= GGUF_MAX_NAME) return err_set(err, "writer: tensor name too long: '%s'", name);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return err_set(err, "writer: '%s' has %d dims", name, n_dims);
    if (ne[0] % f->block) return err_set(err, "writer: '%s' row %lld not a multiple of %d", name, (long long)ne[0], f->block);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        WTensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return err_set(err, "out of memory");
        w->t = t;
        w->cap_t = cap;
    }
    WTensor *t = &w->t[w->n_t++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    uint64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        nel *= (uint64_t)t->ne[d];
    }
    t->nbytes = nel / (uint64_t)f->block * (uint64_t)f->bytes;
    t->offset = w->data_size;
    w->data_size += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    t->data = data;
    t->fill = fill;
    t->fill_ctx = fill_ctx;
    return 0;
}

/* ---- emitting -------------------------------------------------------------------------------------- */

typedef struct Sink {
    FILE *f;
    uint8_t *buf;
    size_t len, cap;
    Err *err;
} Sink;

static int put(Sink *s, const void *p, size_t n) {
    if (s->f) {
        if (n && fwrite(p, 1, n, s->f) != n) return err_set(s->err, "write failed: %s", strerror(errno));
        return 0;
    }
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n) cap *= 2;
        uint8_t *b = realloc(s->buf, cap);
        if (!b) return err_set(s->err, "out of memory");
        s->buf = b;
        s->cap = cap;
    }
    if (n) memcpy(s->buf + s->len, p, n); /* p may be NULL when n is 0 (an empty array's elements) */
    s->len += n;
    return 0;
}
static int put_u32(Sink *s, uint32_t v) { return put(s, &v, 4); }
static int put_u64(Sink *s, uint64_t v) { return put(s, &v, 8); }
static int put_str(Sink *s, const char *p, size_t n) { return put_u64(s, n) || put(s, p, n); }
static int pad_to(Sink *s, uint64_t pos, uint32_t align) {
    static const uint8_t zeros[256];
    uint64_t r = pos % align;
    for (uint64_t n = r ? align - r : 0; n;) {
        size_t k = n > sizeof zeros ? sizeof zeros : (size_t)n;
        if (put(s, zeros, k)) return -1;
        n -= k;
    }
    return 0;
}

static int emit(GgufWriter *w, Sink *s) {
    uint64_t pos = 0;
    /* Readers compute the data offset from general.alignment (32 when absent), so a writer with another
     * alignment must say so; a general.alignment the caller set must agree with the writer's. */
    bool add_align = w->alignment != GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        const WKV *e = &w->kv[i];
        if (e->key_len != 17 || memcmp(e->key, "general.alignment", 17) != 0) continue;
        uint32_t a = 0;
        if (e->type == GGUF_TYPE_U32) memcpy(&a, e->bytes, 4);
        if (a != w->alignment)
            return err_set(s->err, "writer: general.alignment must be the u32 %u the writer aligns to", w->alignment);
        add_align = false;
    }
    if (put(s, "GGUF", 4) || put_u32(s, 3) || put_u64(s, w->n_t) || put_u64(s, w->n_kv + add_align)) return -1;
    pos += 24;
    if (add_align) {
        const char *k = "general.alignment";
        if (put_str(s, k, strlen(k)) || put_u32(s, GGUF_TYPE_U32) || put_u32(s, w->alignment)) return -1;
        pos += 8 + strlen(k) + 4 + 4;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        const WKV *e = &w->kv[i];
        size_t kl = e->key_len;
        if (put_str(s, e->key, kl) || put_u32(s, e->type)) return -1;
        pos += 8 + kl + 4;
        if (e->type == GGUF_TYPE_STRING) {
            if (put_str(s, (const char *)e->bytes, e->nbytes)) return -1;
            pos += 8 + e->nbytes;
        } else if (e->type == GGUF_TYPE_ARRAY) {
            if (put_u32(s, e->elem) || put_u64(s, e->n) || put(s, e->bytes, e->nbytes)) return -1;
            pos += 12 + e->nbytes;
        } else {
            if (put(s, e->bytes, e->nbytes)) return -1;
            pos += e->nbytes;
        }
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const WTensor *t = &w->t[i];
        size_t nl = strlen(t->name);
        if (put_str(s, t->name, nl) || put_u32(s, (uint32_t)t->n_dims)) return -1;
        for (int d = 0; d < t->n_dims; d++)
            if (put_u64(s, (uint64_t)t->ne[d])) return -1;
        if (put_u32(s, t->type) || put_u64(s, t->offset)) return -1;
        pos += 8 + nl + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    if (w->n_t && pad_to(s, pos, w->alignment)) return -1;
    pos = 0;
    uint8_t *tmp = NULL;
    size_t tmp_cap = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const WTensor *t = &w->t[i];
        if (t->data) {
            if (put(s, t->data, t->nbytes)) goto fail;
        } else {
            if (t->nbytes > tmp_cap) {
                free(tmp);
                tmp_cap = t->nbytes;
                tmp = malloc(tmp_cap);
                if (!tmp) return err_set(s->err, "out of memory for tensor '%s'", t->name);
            }
            if (!t->fill || t->fill(t->fill_ctx, t->name, tmp, t->nbytes, s->err) || put(s, tmp, t->nbytes)) goto fail;
        }
        pos += t->nbytes;
        if (pad_to(s, pos, w->alignment)) goto fail;
        pos = (pos + w->alignment - 1) / w->alignment * w->alignment;
    }
    free(tmp);
    return 0;
fail:
    free(tmp);
    return -1;
}

int gguf_writer_write_file(GgufWriter *w, const char *path, Err *err) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return err_set(err, "cannot create '%s': %s", tmp, strerror(errno));
    Sink s = {f, NULL, 0, 0, err};
    int rc = emit(w, &s);
    if (fclose(f) != 0 && rc == 0) rc = err_set(err, "cannot write '%s': %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = err_set(err, "cannot rename to '%s': %s", path, strerror(errno));
    if (rc) remove(tmp);
    return rc;
}

int gguf_writer_write_mem(GgufWriter *w, uint8_t **out, size_t *size, Err *err) {
    Sink s = {NULL, NULL, 0, 0, err};
    if (emit(w, &s)) {
        free(s.buf);
        return -1;
    }
    *out = s.buf;
    *size = s.len;
    return 0;
}
