/* gguf.c — the GGUF v3 reader: a bounds-checked cursor over a read-only mapping, the metadata tree, the
 * tensor directory and split sets. Every count and length read from the file is checked against the
 * bytes that remain before anything is allocated for it, so a hostile file costs at most O(file size)
 * memory and time. */
#include "gguf/gguf.h"

#include "base/checked.h"
#include "gguf/format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "deltallm reads GGUF (little-endian) in place and needs a little-endian machine"
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_MAX_SPLITS 1024
#define GGUF_MAX_DEPTH 8 /* nested arrays deeper than this are refused */

typedef struct Split {
    const uint8_t *base;
    size_t size;
    bool mapped;    /* munmap on close */
    bool in_memory; /* read into anonymous memory (GgufOpenOptions.read), not a mapping of the file */
    char *path;     /* owned; NULL for gguf_open_memory */
} Split;

struct Gguf {
    uint32_t version;
    uint32_t alignment;
    GgufKV *kv;
    int64_t n_kv;
    GgufTensor *tensors;
    int64_t n_tensors;
    int64_t cap_tensors;
    uint32_t *hash; /* open-addressing index into tensors (i+1; 0 = empty) */
    uint64_t hash_cap;
    Split *splits;
    int n_splits;
    /* every allocation made for nested arrays and string tables, freed at close */
    void **allocs;
    size_t n_allocs, cap_allocs;
};

/* ---- the cursor ------------------------------------------------------------------------------------ */

typedef struct Cursor {
    const uint8_t *p;
    size_t size, pos;
    Err *err;
    const char *what; /* what is being read, for messages */
} Cursor;

static int cur_fail(Cursor *c, const char *fmt, const char *detail) {
    char buf[300];
    snprintf(buf, sizeof buf, fmt, detail);
    return err_set(c->err, "%s at byte offset %zu", buf, c->pos);
}

static int cur_need(Cursor *c, uint64_t n) {
    if (n > c->size - c->pos) {
        char buf[128];
        snprintf(buf, sizeof buf, "file truncated: %s needs %llu bytes, %zu remain", c->what,
                 (unsigned long long)n, c->size - c->pos);
        return err_set(c->err, "%s at byte offset %zu", buf, c->pos);
    }
    return 0;
}

static int cur_read(Cursor *c, void *dst, size_t n) {
    if (cur_need(c, n)) return -1;
    memcpy(dst, c->p + c->pos, n);
    c->pos += n;
    return 0;
}

static int cur_u32(Cursor *c, uint32_t *v) { return cur_read(c, v, 4); }
static int cur_u64(Cursor *c, uint64_t *v) { return cur_read(c, v, 8); }

static int cur_str(Cursor *c, GgufStr *s) {
    uint64_t len;
    size_t at = c->pos;
    if (cur_u64(c, &len)) return -1;
    if (len > c->size - c->pos) {
        c->pos = at;
        char buf[160];
        snprintf(buf, sizeof buf, "%s: string length %llu runs past the end of the file (%zu bytes remain)", c->what,
                 (unsigned long long)len, c->size - (at + 8));
        return err_set(c->err, "%s at byte offset %zu", buf, at);
    }
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* ---- helpers --------------------------------------------------------------------------------------- */

static void *track(Gguf *g, void *p) {
    if (!p) return NULL;
    if (g->n_allocs == g->cap_allocs) {
        size_t cap = g->cap_allocs ? g->cap_allocs * 2 : 16;
        void **a = realloc(g->allocs, cap * sizeof *a);
        if (!a) {
            free(p);
            return NULL;
        }
        g->allocs = a;
        g->cap_allocs = cap;
    }
    g->allocs[g->n_allocs++] = p;
    return p;
}

bool gguf_str_eq(GgufStr s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

char *gguf_str_copy(GgufStr s, char *buf, size_t cap) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = '\0';
    return buf;
}

size_t gguf_value_type_size(GgufValueType t) {
    switch (t) {
    case GGUF_TYPE_U8: case GGUF_TYPE_I8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_U16: case GGUF_TYPE_I16: return 2;
    case GGUF_TYPE_U32: case GGUF_TYPE_I32: case GGUF_TYPE_F32: return 4;
    case GGUF_TYPE_U64: case GGUF_TYPE_I64: case GGUF_TYPE_F64: return 8;
    default: return 0;
    }
}

const char *gguf_value_type_name(GgufValueType t) {
    static const char *const names[GGUF_TYPE_COUNT] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                                       "bool", "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "?";
}

bool gguf_type_is_int(GgufValueType t) {
    return t == GGUF_TYPE_U8 || t == GGUF_TYPE_I8 || t == GGUF_TYPE_U16 || t == GGUF_TYPE_I16 ||
           t == GGUF_TYPE_U32 || t == GGUF_TYPE_I32 || t == GGUF_TYPE_U64 || t == GGUF_TYPE_I64;
}

/* Reads one scalar of type t from raw bytes into the value union. */
static void scalar_from_raw(GgufValueType t, const uint8_t *raw, GgufValue *v) {
    v->type = t;
    switch (t) {
    case GGUF_TYPE_U8: v->u = raw[0]; break;
    case GGUF_TYPE_BOOL: v->u = raw[0] != 0; break;
    case GGUF_TYPE_I8: v->i = (int8_t)raw[0]; break;
    case GGUF_TYPE_U16: { uint16_t x; memcpy(&x, raw, 2); v->u = x; break; }
    case GGUF_TYPE_I16: { int16_t x; memcpy(&x, raw, 2); v->i = x; break; }
    case GGUF_TYPE_U32: { uint32_t x; memcpy(&x, raw, 4); v->u = x; break; }
    case GGUF_TYPE_I32: { int32_t x; memcpy(&x, raw, 4); v->i = x; break; }
    case GGUF_TYPE_F32: { float x; memcpy(&x, raw, 4); v->f = x; break; }
    case GGUF_TYPE_U64: { uint64_t x; memcpy(&x, raw, 8); v->u = x; break; }
    case GGUF_TYPE_I64: { int64_t x; memcpy(&x, raw, 8); v->i = x; break; }
    case GGUF_TYPE_F64: { double x; memcpy(&x, raw, 8); v->f = x; break; }
    default: break;
    }
}

/* ---- metadata values ------------------------------------------------------------------------------- */

static int read_value(Gguf *g, Cursor *c, GgufValueType t, GgufValue *v, int depth);

static int read_array(Gguf *g, Cursor *c, GgufValue *v, int depth) {
    uint32_t et;
    uint64_t n;
    size_t at = c->pos;
    if (depth >= GGUF_MAX_DEPTH) return cur_fail(c, "%s: arrays nested too deeply", c->what);
    if (cur_u32(c, &et)) return -1;
    if (et >= GGUF_TYPE_COUNT) {
        c->pos = at;
        char b[64];
        snprintf(b, sizeof b, "%u", et);
        return err_set(c->err, "%s: unknown array element type %s at byte offset %zu", c->what, b, at);
    }
    if (cur_u64(c, &n)) return -1;
    v->type = GGUF_TYPE_ARRAY;
    v->arr.type = (GgufValueType)et;
    v->arr.n = n;
    v->arr.raw = NULL;
    v->arr.strs = NULL;
    v->arr.items = NULL;
    size_t remain = c->size - c->pos;
    size_t esz = gguf_value_type_size((GgufValueType)et);
    if (esz) {
        uint64_t bytes;
        if (!ck_mul_u64(n, esz, &bytes) || bytes > remain) {
            c->pos = at;
            return err_set(c->err, "%s: array of %llu %s elements runs past the end of the file at byte offset %zu",
                           c->what, (unsigned long long)n, gguf_value_type_name((GgufValueType)et), at);
        }
        v->arr.raw = c->p + c->pos;
        c->pos += (size_t)bytes;
        return 0;
    }
    /* strings need >= 8 bytes each, nested arrays >= 12: bound n before allocating */
    size_t min_elem = et == GGUF_TYPE_STRING ? 8 : 12;
    if (n > remain / min_elem) {
        c->pos = at;
        return err_set(c->err, "%s: array count %llu is impossible with %zu bytes left, at byte offset %zu", c->what,
                       (unsigned long long)n, remain, at);
    }
    if (n == 0) return 0;
    if (et == GGUF_TYPE_STRING) {
        v->arr.strs = track(g, malloc((size_t)n * sizeof(GgufStr)));
        if (!v->arr.strs) return err_set(c->err, "out of memory reading %s", c->what);
        for (uint64_t i = 0; i < n; i++)
            if (cur_str(c, &v->arr.strs[i])) return -1;
        return 0;
    }
    v->arr.items = track(g, calloc((size_t)n, sizeof(GgufValue)));
    if (!v->arr.items) return err_set(c->err, "out of memory reading %s", c->what);
    for (uint64_t i = 0; i < n; i++)
        if (read_value(g, c, GGUF_TYPE_ARRAY, &v->arr.items[i], depth + 1)) return -1;
    return 0;
}

static int read_value(Gguf *g, Cursor *c, GgufValueType t, GgufValue *v, int depth) {
    if (t == GGUF_TYPE_STRING) {
        v->type = t;
        return cur_str(c, &v->s);
    }
    if (t == GGUF_TYPE_ARRAY) return read_array(g, c, v, depth);
    size_t sz = gguf_value_type_size(t);
    if (cur_need(c, sz)) return -1;
    scalar_from_raw(t, c->p + c->pos, v);
    c->pos += sz;
    return 0;
}

/* ---- tensor name index ------------------------------------------------------------------------------ */

static uint64_t bytes_hash(const char *s, uint64_t n);
static uint64_t name_hash(const char *s) { return bytes_hash(s, strlen(s)); }

static int build_index(Gguf *g, Err *err) {
    if (g->n_tensors >= (int64_t)UINT32_MAX) /* the index stores i + 1 in 32 bits */
        return err_set(err, "absurd tensor count %lld", (long long)g->n_tensors);
    uint64_t cap = 16;
    while (cap < (uint64_t)g->n_tensors * 2) cap *= 2;
    g->hash = calloc(cap, sizeof *g->hash);
    if (!g->hash) return err_set(err, "out of memory indexing %lld tensors", (long long)g->n_tensors);
    g->hash_cap = cap;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        const char *name = g->tensors[i].name;
        uint64_t h = name_hash(name) & (cap - 1);
        while (g->hash[h]) {
            const GgufTensor *o = &g->tensors[g->hash[h] - 1];
            if (strcmp(o->name, name) == 0) {
                if (g->n_splits > 1)
                    return err_set(err, "duplicate tensor name '%s' (tensors %u and %lld, in split parts %d and %d)",
                                   name, g->hash[h] - 1, (long long)i, o->split + 1, g->tensors[i].split + 1);
                return err_set(err, "duplicate tensor name '%s' (tensors %u and %lld)", name, g->hash[h] - 1,
                               (long long)i);
            }
            h = (h + 1) & (cap - 1);
        }
        g->hash[h] = (uint32_t)(i + 1);
    }
    return 0;
}

const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name) {
    if (!g->hash) return NULL;
    uint64_t h = name_hash(name) & (g->hash_cap - 1);
    while (g->hash[h]) {
        const GgufTensor *t = &g->tensors[g->hash[h] - 1];
        if (strcmp(t->name, name) == 0) return t;
        h = (h + 1) & (g->hash_cap - 1);
    }
    return NULL;
}

/* ---- one file ------------------------------------------------------------------------------------------ */

static uint64_t bytes_hash(const char *s, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* Inserts key i into the open-addressing set (indices + 1); true if an equal key is already there. */
static bool key_seen(uint32_t *set, uint64_t cap, const GgufKV *kv, uint64_t i) {
    uint64_t h = bytes_hash(kv[i].key.ptr, kv[i].key.len) & (cap - 1);
    while (set[h]) {
        const GgufStr *k = &kv[set[h] - 1].key;
        if (k->len == kv[i].key.len && memcmp(k->ptr, kv[i].key.ptr, k->len) == 0) return true;
        h = (h + 1) & (cap - 1);
    }
    set[h] = (uint32_t)(i + 1);
    return false;
}

static const GgufValue *find_kv(const GgufKV *kv, int64_t n, const char *key) {
    for (int64_t i = 0; i < n; i++)
        if (gguf_str_eq(kv[i].key, key)) return &kv[i].val;
    return NULL;
}

/* Parses one file image. The first split keeps its metadata in g; later splits' metadata is parsed (to
 * validate it and read the split.* keys and the alignment), handed back through kv_out (it stays allocated
 * until close) and otherwise ignored, as llama.cpp ignores it. */
static int parse_one(Gguf *g, int split, const GgufKV **kv_out, int64_t *n_kv_out, Err *err) {
    const Split *sp = &g->splits[split];
    Cursor c = {sp->base, sp->size, 0, err, "header"};
    char magic[4];
    if (cur_read(&c, magic, 4)) return -1;
    if (memcmp(magic, GGUF_MAGIC, 4) != 0) return err_set(err, "not a GGUF file (bad magic) at byte offset 0");
    uint32_t version;
    if (cur_u32(&c, &version)) return -1;
    if (version != 3)
        return err_set(err, "unsupported GGUF version %u at byte offset 4 (deltallm reads version 3)", version);
    uint64_t n_tensors, n_kv;
    c.what = "tensor count";
    if (cur_u64(&c, &n_tensors)) return -1;
    c.what = "metadata count";
    if (cur_u64(&c, &n_kv)) return -1;
    /* a kv needs >= 8 (key len) + 4 (type) + 1 bytes; a tensor record >= 8 + 4 + 8 + 4 + 8. A count that
     * cannot fit is absurd, or the file is cut short: the message says both. */
    size_t left = c.size - c.pos;
    if (n_kv > left / 13 || n_kv > UINT32_MAX - 1)
        return err_set(err, "absurd metadata count %llu: the %zu bytes after the header hold at most %zu entries "
                            "(file truncated?) at byte offset 16", (unsigned long long)n_kv, left, left / 13);
    if (n_tensors > left / 32 || n_tensors > UINT32_MAX - 1)
        return err_set(err, "absurd tensor count %llu: the %zu bytes after the header hold at most %zu tensor records "
                            "(file truncated?) at byte offset 8", (unsigned long long)n_tensors, left, left / 32);

    GgufKV *kv = NULL;
    uint32_t *keyset = NULL;
    uint64_t keycap = 16;
    while (keycap < n_kv * 2) keycap *= 2;
    if (n_kv) {
        kv = track(g, calloc((size_t)n_kv, sizeof *kv));
        keyset = track(g, calloc(keycap, sizeof *keyset));
        if (!kv || !keyset) return err_set(err, "out of memory for %llu metadata entries", (unsigned long long)n_kv);
    }
    for (uint64_t i = 0; i < n_kv; i++) {
        c.what = "metadata key";
        size_t at = c.pos;
        if (cur_str(&c, &kv[i].key)) return -1;
        if (kv[i].key.len == 0) return err_set(err, "empty metadata key at byte offset %zu", at);
        if (key_seen(keyset, keycap, kv, i))
            return err_set(err, "duplicate metadata key '%.*s' at byte offset %zu",
                           (int)(kv[i].key.len > 200 ? 200 : kv[i].key.len), kv[i].key.ptr, at);
        char what[300];
        snprintf(what, sizeof what, "metadata '%.*s'", (int)(kv[i].key.len > 200 ? 200 : kv[i].key.len),
                 kv[i].key.ptr);
        c.what = what;
        uint32_t t;
        at = c.pos;
        if (cur_u32(&c, &t)) return -1;
        if (t >= GGUF_TYPE_COUNT) return err_set(err, "%s: unknown value type %u at byte offset %zu", what, t, at);
        if (read_value(g, &c, (GgufValueType)t, &kv[i].val, 0)) return -1;
    }

    uint32_t alignment = GGUF_DEFAULT_ALIGNMENT;
    const GgufValue *av = find_kv(kv, (int64_t)n_kv, "general.alignment");
    if (av) {
        if (av->type != GGUF_TYPE_U32) return err_set(err, "general.alignment must be u32, found %s",
                                                      gguf_value_type_name(av->type));
        if (av->u == 0 || (av->u & (av->u - 1)) != 0 || av->u > 65536)
            return err_set(err, "general.alignment %llu is not a power of two in [1, 65536]", (unsigned long long)av->u);
        alignment = (uint32_t)av->u;
    }

    if (split == 0) {
        g->version = version;
        g->alignment = alignment;
        g->kv = kv;
        g->n_kv = (int64_t)n_kv;
    }
    *kv_out = kv;
    *n_kv_out = (int64_t)n_kv;

    /* tensor directory */
    int64_t first = g->n_tensors;
    if ((int64_t)n_tensors > g->cap_tensors - g->n_tensors) {
        int64_t cap = g->n_tensors + (int64_t)n_tensors;
        GgufTensor *t = realloc(g->tensors, (size_t)(cap ? cap : 1) * sizeof *t);
        if (!t) return err_set(err, "out of memory for %llu tensors", (unsigned long long)n_tensors);
        g->tensors = t;
        g->cap_tensors = cap;
    }
    for (uint64_t i = 0; i < n_tensors; i++) {
        GgufTensor *t = &g->tensors[g->n_tensors];
        memset(t, 0, sizeof *t);
        c.what = "tensor name";
        size_t at = c.pos;
        GgufStr name;
        if (cur_str(&c, &name)) return -1;
        if (name.len == 0) return err_set(err, "tensor %llu has an empty name at byte offset %zu", (unsigned long long)i, at);
        if (name.len >= GGUF_MAX_NAME)
            return err_set(err, "tensor name '%.*s...' is %llu bytes long (at most %d) at byte offset %zu", 40, name.ptr,
                           (unsigned long long)name.len, GGUF_MAX_NAME - 1, at);
        if (memchr(name.ptr, 0, name.len))
            return err_set(err, "tensor name with a NUL byte at byte offset %zu", at);
        memcpy(t->name, name.ptr, name.len);
        t->name[name.len] = '\0';
        char what[GGUF_MAX_NAME + 16];
        snprintf(what, sizeof what, "tensor '%s'", t->name);
        c.what = what;
        uint32_t nd;
        at = c.pos;
        if (cur_u32(&c, &nd)) return -1;
        if (nd == 0 || nd > GGUF_MAX_DIMS)
            return err_set(err, "tensor '%s': %u dimensions (1 to %d allowed) at byte offset %zu", t->name, nd,
                           GGUF_MAX_DIMS, at);
        t->n_dims = (int)nd;
        uint64_t n_el = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t ne;
            at = c.pos;
            if (cur_u64(&c, &ne)) return -1;
            if (ne == 0 || ne > (uint64_t)INT64_MAX)
                return err_set(err, "tensor '%s': absurd dimension ne[%u] = %llu at byte offset %zu", t->name, d,
                               (unsigned long long)ne, at);
            t->ne[d] = (int64_t)ne;
            if (!ck_mul_u64(n_el, ne, &n_el) || n_el > (uint64_t)INT64_MAX)
                return err_set(err, "tensor '%s': element count overflows at dimension %u (byte offset %zu)", t->name,
                               d, at);
        }
        t->n_elements = n_el;
        uint32_t type;
        at = c.pos;
        if (cur_u32(&c, &type)) return -1;
        const Format *f = format_get(type);
        if (!f)
            return err_set(err, "tensor '%s': unsupported type id %u (%s) at byte offset %zu", t->name, type,
                           format_name(type), at);
        t->type = type;
        if (t->ne[0] % f->block != 0)
            return err_set(err, "tensor '%s': row length %lld is not a multiple of the %s block size %d", t->name,
                           (long long)t->ne[0], f->name, f->block);
        uint64_t nbytes;
        if (!ck_mul_u64(n_el / (uint64_t)f->block, (uint64_t)f->bytes, &nbytes))
            return err_set(err, "tensor '%s': byte size overflows", t->name);
        t->nbytes = nbytes;
        at = c.pos;
        if (cur_u64(&c, &t->offset)) return -1;
        if (t->offset % alignment != 0)
            return err_set(err, "tensor '%s': data offset %llu is not a multiple of the alignment %u (byte offset %zu)",
                           t->name, (unsigned long long)t->offset, alignment, at);
        t->split = split;
        g->n_tensors++;
    }

    /* data section: starts at the next multiple of the alignment */
    uint64_t data_start;
    if (!ck_align_u64(c.pos, alignment, &data_start) || (n_tensors > 0 && data_start > c.size))
        return err_set(err, "file truncated: tensor data section would start at byte %llu, file has %zu bytes",
                       (unsigned long long)data_start, c.size);
    for (int64_t i = first; i < g->n_tensors; i++) {
        GgufTensor *t = &g->tensors[i];
        uint64_t end;
        if (!ck_add_u64(data_start, t->offset, &t->file_off) || !ck_add_u64(t->file_off, t->nbytes, &end) ||
            end > c.size)
            return err_set(err, "tensor '%s': data (%llu bytes at offset %llu of the data section, which starts at "
                                "byte %llu) lies outside the file (%zu bytes): file truncated?",
                           t->name, (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                           (unsigned long long)data_start, c.size);
        t->data = sp->base + t->file_off;
    }
    return 0;
}

/* ---- open / close ------------------------------------------------------------------------------------- */

/* Reads a whole file into anonymous memory (GgufOpenOptions.read), reporting progress per 16 MiB. */
static void *read_file_into_memory(int fd, const char *path, size_t size, const GgufOpenOptions *o, uint64_t base,
                                   uint64_t total, Err *err) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return err_set(err, "cannot allocate %zu MiB to read '%s' into", size >> 20, path), NULL;
    madvise(p, size, MADV_HUGEPAGE);
    const size_t chunk = (size_t)16 << 20;
    for (size_t off = 0; off < size;) {
        size_t n = size - off < chunk ? size - off : chunk;
        ssize_t r = pread(fd, (uint8_t *)p + off, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = r < 0 ? errno : 0;
            munmap(p, size);
            return err_set(err, "cannot read '%s' at byte %zu: %s", path, off, e ? strerror(e) : "unexpected end of file"),
                   NULL;
        }
        off += (size_t)r;
        if (o->progress) o->progress(o->progress_user, "read", base + off, total);
    }
    mprotect(p, size, PROT_READ);
    return p;
}

/* Maps (or with o->read, reads) one file; base and total: bytes before it and in all parts (progress). */
static int map_file(const char *path, Split *sp, const GgufOpenOptions *o, uint64_t base, uint64_t total, Err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, "cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, "'%s' is not a regular file", path);
    }
    if (st.st_size < 24) {
        /* a short file is only "truncated" if it starts like a GGUF file */
        char magic[4];
        ssize_t r = pread(fd, magic, 4, 0);
        close(fd);
        if (r < 4 || memcmp(magic, GGUF_MAGIC, 4) != 0)
            return err_set(err, "'%s': not a GGUF file (%lld bytes, no GGUF magic)", path, (long long)st.st_size);
        return err_set(err, "'%s': file truncated: %lld bytes is shorter than a GGUF header (24)", path,
                       (long long)st.st_size);
    }
    void *p;
    int e = 0;
    if (o && o->read) {
        p = read_file_into_memory(fd, path, (size_t)st.st_size, o, base, total, err);
        close(fd);
        if (!p) return -1;
    } else {
        p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        e = errno;
        close(fd);
        if (p == MAP_FAILED) return err_set(err, "cannot map '%s': %s", path, strerror(e));
    }
    sp->base = p;
    sp->size = (size_t)st.st_size;
    sp->mapped = true;
    sp->in_memory = o && o->read;
    return 0;
}

void gguf_close(Gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_splits; i++)
        if (g->splits[i].mapped) munmap((void *)g->splits[i].base, g->splits[i].size);
    for (int i = 0; g->splits && i < g->n_splits; i++) free(g->splits[i].path);
    for (size_t i = 0; i < g->n_allocs; i++) free(g->allocs[i]);
    free(g->allocs);
    free(g->splits);
    free(g->tensors);
    free(g->hash);
    free(g);
}

Gguf *gguf_open_memory(const void *data, size_t size, Err *err) {
    Gguf *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, "out of memory"), NULL;
    g->splits = calloc(1, sizeof *g->splits);
    if (!g->splits) return gguf_close(g), err_set(err, "out of memory"), NULL;
    g->splits[0] = (Split){data, size, false, false, NULL};
    g->n_splits = 1;
    const GgufKV *kv;
    int64_t n_kv;
    if (parse_one(g, 0, &kv, &n_kv, err) || build_index(g, err)) {
        gguf_close(g);
        return NULL;
    }
    return g;
}

/* Recognizes PREFIX-0000K-of-0000N.gguf (llama.cpp's "%s-%05d-of-%05d.gguf", K counting from 1); writes the
 * prefix length, K and N. */
static bool split_name(const char *path, size_t *prefix_len, int *no, int *count) {
    size_t n = strlen(path);
    const char *suffix = "-00000-of-00000.gguf";
    size_t sl = strlen(suffix);
    if (n < sl) return false;
    const char *s = path + n - sl;
    for (size_t i = 0; i < sl; i++) {
        if (suffix[i] == '0') {
            if (s[i] < '0' || s[i] > '9') return false;
        } else if (s[i] != suffix[i]) return false;
    }
    *prefix_len = n - sl;
    *no = atoi(s + 1);
    *count = atoi(s + 10);
    return true;
}

/* The split.* keys of one part, as llama.cpp's gguf-split writes them: every part carries split.no (u16,
 * counting from 0), split.count (u16) and split.tensors.count (i32, the total over all parts); only the
 * first part carries the model's metadata. Any integer type is accepted. Returns 1 if the key is present,
 * 0 if absent, -1 (err set) if it is not an integer. */
static int split_key(const GgufKV *kv, int64_t n_kv, const char *key, int64_t *out, Err *err) {
    const GgufValue *v = find_kv(kv, n_kv, key);
    if (!v) return 0;
    if (!gguf_type_is_int(v->type))
        return err_set(err, "metadata '%s' must be an integer, found %s", key, gguf_value_type_name(v->type));
    bool is_unsigned = v->type == GGUF_TYPE_U8 || v->type == GGUF_TYPE_U16 || v->type == GGUF_TYPE_U32 ||
                       v->type == GGUF_TYPE_U64;
    *out = is_unsigned ? (v->u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v->u) : v->i;
    return 1;
}

/* Checks one part's split.* keys against the file name (part k of count, from 0) and the first part. */
static int check_split_part(const GgufKV *kv, int64_t n_kv, int k, int count, bool named_split, int64_t *tensors_count,
                            Err *err) {
    int64_t no = 0, declared = 1, tc;
    int has_no = split_key(kv, n_kv, "split.no", &no, err);
    int has_count = split_key(kv, n_kv, "split.count", &declared, err);
    int has_tc = split_key(kv, n_kv, "split.tensors.count", &tc, err);
    if (has_no < 0 || has_count < 0 || has_tc < 0) return -1;
    if (!named_split) {
        /* a lone file may carry split.count 0 or 1 (gguf-split --merge writes 0), never more */
        if (has_count && declared > 1)
            return err_set(err, "split.count says this is one of %lld parts, but the file is not named "
                                "PREFIX-00001-of-%05lld.gguf", (long long)declared, (long long)declared);
        return 0;
    }
    if (count > 1 && !has_count) return err_set(err, "named as one of %d parts but has no split.count key", count);
    if (has_count && declared != count)
        return err_set(err, "split.count says %lld parts, the file name says %d", (long long)declared, count);
    if (k > 0 && !has_no) return err_set(err, "split part %d of %d has no split.no key", k + 1, count);
    if (has_no && no != k)
        return err_set(err, "split.no is %lld but the file name says part %d of %d (split.no %d)", (long long)no, k + 1,
                       count, k);
    if (has_tc) {
        if (tc < 0) return err_set(err, "split.tensors.count is negative (%lld)", (long long)tc);
        if (*tensors_count >= 0 && tc != *tensors_count)
            return err_set(err, "split.tensors.count says %lld, the first part says %lld", (long long)tc,
                           (long long)*tensors_count);
        *tensors_count = tc;
    }
    return 0;
}

static void part_name(char *buf, size_t cap, const char *path, size_t prefix_len, bool is_split, int i, int count) {
    if (is_split) snprintf(buf, cap, "%.*s-%05d-of-%05d.gguf", (int)prefix_len, path, i + 1, count);
    else snprintf(buf, cap, "%s", path);
}

Gguf *gguf_open(const char *path, Err *err) { return gguf_open_opts(path, NULL, err); }

Gguf *gguf_open_opts(const char *path, const GgufOpenOptions *opts, Err *err) {
    Gguf *g = calloc(1, sizeof *g);
    if (!g) return err_set(err, "out of memory"), NULL;
    size_t prefix_len = 0;
    int no = 1, count = 1;
    bool is_split = split_name(path, &prefix_len, &no, &count);
    if (is_split && (count < 1 || count > GGUF_MAX_SPLITS || no < 1 || no > count)) {
        gguf_close(g);
        if (count < 1 || count > GGUF_MAX_SPLITS)
            return err_set(err, "'%s': a split set of %d parts (1 to %d allowed)", path, count, GGUF_MAX_SPLITS), NULL;
        return err_set(err, "'%s': part %d of %d does not exist (parts count from 1)", path, no, count), NULL;
    }
    g->splits = calloc((size_t)count, sizeof *g->splits);
    if (!g->splits) return gguf_close(g), err_set(err, "out of memory"), NULL;
    int64_t tensors_count = -1; /* split.tensors.count, once a part has said it */
    char part[4096];
    uint64_t total = 0; /* for progress: the size of all parts */
    for (int i = 0; opts && opts->read && opts->progress && i < count; i++) {
        struct stat st;
        part_name(part, sizeof part, path, prefix_len, is_split, i, count);
        if (stat(part, &st) == 0) total += (uint64_t)st.st_size;
    }
    for (int i = 0; i < count; i++) {
        part_name(part, sizeof part, path, prefix_len, is_split, i, count);
        if (map_file(part, &g->splits[i], opts, gguf_file_size(g), total, err)) {
            if (is_split) err_prefix(err, "split part %d of %d", i + 1, count);
            goto fail;
        }
        g->n_splits = i + 1;
        if (!(g->splits[i].path = strdup(part))) {
            err_set(err, "out of memory");
            goto fail;
        }
        const GgufKV *kv;
        int64_t n_kv;
        if (parse_one(g, i, &kv, &n_kv, err) || check_split_part(kv, n_kv, i, count, is_split, &tensors_count, err)) {
            err_prefix(err, "%s", part);
            goto fail;
        }
    }
    if (is_split && tensors_count >= 0 && tensors_count != g->n_tensors) {
        err_set(err, "%s: split.tensors.count says %lld tensors, the %d parts hold %lld", path, (long long)tensors_count,
                count, (long long)g->n_tensors);
        goto fail;
    }
    if (build_index(g, err)) {
        err_prefix(err, "%s", path);
        goto fail;
    }
    return g;
fail:
    gguf_close(g);
    return NULL;
}

/* ---- accessors -------------------------------------------------------------------------------------- */

uint32_t gguf_version(const Gguf *g) { return g->version; }
uint32_t gguf_alignment(const Gguf *g) { return g->alignment; }
int gguf_n_splits(const Gguf *g) { return g->n_splits; }

uint64_t gguf_file_size(const Gguf *g) {
    uint64_t s = 0;
    for (int i = 0; i < g->n_splits; i++) s += g->splits[i].size;
    return s;
}

bool gguf_file_mapped(const Gguf *g) {
    for (int i = 0; i < g->n_splits; i++)
        if (!g->splits[i].mapped || g->splits[i].in_memory) return false;
    return g->n_splits > 0;
}

const char *gguf_split_path(const Gguf *g, int split) {
    ASSERT(split >= 0 && split < g->n_splits);
    return g->splits[split].path;
}

void gguf_split_mapping(const Gguf *g, int split, const void **base, size_t *size) {
    ASSERT(split >= 0 && split < g->n_splits);
    *base = g->splits[split].base;
    *size = g->splits[split].size;
}

int64_t gguf_n_kv(const Gguf *g) { return g->n_kv; }
const GgufKV *gguf_kv(const Gguf *g, int64_t i) { return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL; }
const GgufValue *gguf_get(const Gguf *g, const char *key) { return find_kv(g->kv, g->n_kv, key); }
int64_t gguf_n_tensors(const Gguf *g) { return g->n_tensors; }
const GgufTensor *gguf_tensor(const Gguf *g, int64_t i) { return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL; }

static const GgufValue *lookup(const Gguf *g, const char *key, bool required, Err *err, int *rc) {
    const GgufValue *v = gguf_get(g, key);
    *rc = v ? 1 : required ? err_set(err, "missing required metadata key '%s'", key) : 0;
    return v;
}

/* The integer value of v as int64 for a getter that returns `target`: -1 (err names the key) if v is not an
 * integer or (a u64 past INT64_MAX) cannot be one. */
static int value_int(const GgufValue *v, const char *key, const char *target, int64_t *out, Err *err) {
    if (!gguf_type_is_int(v->type))
        return err_set(err, "metadata '%s' must be an integer, found %s", key, gguf_value_type_name(v->type));
    bool is_unsigned = v->type == GGUF_TYPE_U8 || v->type == GGUF_TYPE_U16 || v->type == GGUF_TYPE_U32 ||
                       v->type == GGUF_TYPE_U64;
    if (is_unsigned && v->u > (uint64_t)INT64_MAX)
        return err_set(err, "metadata '%s' = %llu is out of range for %s", key, (unsigned long long)v->u, target);
    *out = is_unsigned ? (int64_t)v->u : v->i;
    return 0;
}

int gguf_get_u32(const Gguf *g, const char *key, uint32_t *out, bool required, Err *err) {
    int rc;
    const GgufValue *v = lookup(g, key, required, err, &rc);
    if (rc != 1) return rc;
    int64_t x;
    if (value_int(v, key, "u32", &x, err)) return -1;
    if (x < 0 || x > UINT32_MAX) return err_set(err, "metadata '%s' = %lld is out of range for u32", key, (long long)x);
    *out = (uint32_t)x;
    return 1;
}

int gguf_get_i64(const Gguf *g, const char *key, int64_t *out, bool required, Err *err) {
    int rc;
    const GgufValue *v = lookup(g, key, required, err, &rc);
    if (rc != 1) return rc;
    int64_t x;
    if (value_int(v, key, "i64", &x, err)) return -1;
    *out = x;
    return 1;
}

int gguf_get_f32(const Gguf *g, const char *key, float *out, bool required, Err *err) {
    int rc;
    const GgufValue *v = lookup(g, key, required, err, &rc);
    if (rc != 1) return rc;
    if (v->type != GGUF_TYPE_F32 && v->type != GGUF_TYPE_F64)
        return err_set(err, "metadata '%s' must be a float, found %s", key, gguf_value_type_name(v->type));
    *out = (float)v->f;
    return 1;
}

int gguf_get_bool(const Gguf *g, const char *key, bool *out, bool required, Err *err) {
    int rc;
    const GgufValue *v = lookup(g, key, required, err, &rc);
    if (rc != 1) return rc;
    if (v->type != GGUF_TYPE_BOOL) return err_set(err, "metadata '%s' must be a bool, found %s", key, gguf_value_type_name(v->type));
    *out = v->u != 0;
    return 1;
}

int gguf_get_str(const Gguf *g, const char *key, GgufStr *out, bool required, Err *err) {
    int rc;
    const GgufValue *v = lookup(g, key, required, err, &rc);
    if (rc != 1) return rc;
    if (v->type != GGUF_TYPE_STRING) return err_set(err, "metadata '%s' must be a string, found %s", key, gguf_value_type_name(v->type));
    *out = v->s;
    return 1;
}

int gguf_get_arr(const Gguf *g, const char *key, const GgufArray **out, bool required, Err *err) {
    int rc;
    const GgufValue *v = lookup(g, key, required, err, &rc);
    if (rc != 1) return rc;
    if (v->type != GGUF_TYPE_ARRAY) return err_set(err, "metadata '%s' must be an array, found %s", key, gguf_value_type_name(v->type));
    *out = &v->arr;
    return 1;
}

int64_t gguf_arr_i64(const GgufArray *a, uint64_t i) {
    ASSERT(i < a->n && a->raw);
    GgufValue v;
    scalar_from_raw(a->type, a->raw + i * gguf_value_type_size(a->type), &v);
    switch (a->type) {
    case GGUF_TYPE_F32: case GGUF_TYPE_F64:
        /* converting a NaN or out-of-range float to an integer is undefined behaviour: saturate instead */
        if (v.f != v.f) return 0;
        if (v.f >= 9223372036854775808.0) return INT64_MAX;
        if (v.f < -9223372036854775808.0) return INT64_MIN;
        return (int64_t)v.f;
    case GGUF_TYPE_I8: case GGUF_TYPE_I16: case GGUF_TYPE_I32: case GGUF_TYPE_I64: return v.i;
    default: return v.u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v.u;
    }
}

double gguf_arr_f64(const GgufArray *a, uint64_t i) {
    ASSERT(i < a->n && a->raw);
    GgufValue v;
    scalar_from_raw(a->type, a->raw + i * gguf_value_type_size(a->type), &v);
    switch (a->type) {
    case GGUF_TYPE_F32: case GGUF_TYPE_F64: return v.f;
    case GGUF_TYPE_I8: case GGUF_TYPE_I16: case GGUF_TYPE_I32: case GGUF_TYPE_I64: return (double)v.i;
    default: return (double)v.u;
    }
}
