/* safetensors.c — the validating safetensors reader (see safetensors.h for what is checked). */
#include "convert/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/checked.h"

struct StFile {
    void *map;
    size_t map_size;
    StTensor *tensors;
    int n;
    char *names; /* arena of decoded names */
};

static const struct {
    const char *name;
    size_t size;
} DTYPES[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},       [ST_I8] = {"I8", 1},   [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},     [ST_BF16] = {"BF16", 2}, [ST_I32] = {"I32", 4},
    [ST_U32] = {"U32", 4},   [ST_F32] = {"F32", 4},     [ST_F64] = {"F64", 8}, [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},   [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *st_dtype_name(StDtype t) { return t < ST_DTYPE_COUNT ? DTYPES[t].name : "?"; }
size_t st_dtype_size(StDtype t) { return t < ST_DTYPE_COUNT ? DTYPES[t].size : 0; }

/* ---- a strict JSON cursor over the header ---------------------------------------------------------- */

typedef struct Cur {
    const char *p, *end, *start;
    Err *err;
} Cur;

static int fail(Cur *c, const char *what) {
    return err_set(c->err, "safetensors header: %s at byte %zu of the header", what, (size_t)(c->p - c->start));
}

static void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static int expect(Cur *c, char ch) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != ch) {
        char msg[32];
        snprintf(msg, sizeof msg, "expected '%c'", ch);
        return fail(c, msg);
    }
    c->p++;
    return 0;
}

/* true (and consumes it) when the next character is ch */
static int peek_take(Cur *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) return c->p++, 1;
    return 0;
}

static int hex4(Cur *c, uint32_t *v) {
    if (c->end - c->p < 4) return fail(c, "truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char h = c->p[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return fail(c, "bad \\u escape");
        *v = *v << 4 | (uint32_t)d;
    }
    c->p += 4;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (1-4), 0 if invalid. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned b = p[0];
    int n = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || end - p < n) return 0;
    uint32_t cp = n == 1 ? b : n == 2 ? b & 0x1F : n == 3 ? b & 0x0F : b & 0x07;
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static void put_utf8(char **o, uint32_t cp) {
    unsigned char *u = (unsigned char *)*o;
    if (cp < 0x80) *u++ = (unsigned char)cp;
    else if (cp < 0x800) *u++ = (unsigned char)(0xC0 | cp >> 6), *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    else if (cp < 0x10000)
        *u++ = (unsigned char)(0xE0 | cp >> 12), *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)),
        *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    else
        *u++ = (unsigned char)(0xF0 | cp >> 18), *u++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)),
        *u++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)), *u++ = (unsigned char)(0x80 | (cp & 0x3F));
    *o = (char *)u;
}

/* Decodes a JSON string into *out (arena space: the decoded form is never longer than the source);
 * out == NULL only validates. */
static int parse_string(Cur *c, char **out) {
    if (expect(c, '"')) return -1;
    char *o = out ? *out : NULL;
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p;
        if (ch < 0x20) return fail(c, "control character in a string");
        if (ch == '\\') {
            if (++c->p >= c->end) return fail(c, "truncated escape");
            char e = *c->p++;
            uint32_t cp;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (hex4(c, &cp)) return -1;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u') return fail(c, "unpaired surrogate");
                    c->p += 2;
                    if (hex4(c, &lo)) return -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return fail(c, "unpaired surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return fail(c, "unpaired surrogate");
                }
                if (cp == 0) return fail(c, "NUL in a string");
                break;
            default: c->p--; return fail(c, "bad escape");
            }
            if (o) put_utf8(&o, cp);
            continue;
        }
        int n = utf8_len((const unsigned char *)c->p, (const unsigned char *)c->end);
        if (!n) return fail(c, "invalid UTF-8");
        if (o) memcpy(o, c->p, (size_t)n), o += n;
        c->p += n;
    }
    if (c->p >= c->end) return fail(c, "unterminated string");
    c->p++;
    if (o) *o++ = '\0', *out = o;
    return 0;
}

/* A non-negative integer without sign, fraction or exponent, < 2^63. */
static int parse_uint(Cur *c, uint64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return fail(c, "expected a non-negative integer");
    if (*c->p == '0' && c->end - c->p > 1 && c->p[1] >= '0' && c->p[1] <= '9') return fail(c, "leading zero");
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (x > (INT64_MAX - 9) / 10) return fail(c, "integer too large");
        x = x * 10 + (uint64_t)(*c->p++ - '0');
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E')) return fail(c, "expected an integer");
    *v = x;
    return 0;
}

static bool key_is(const char *k, size_t len, const char *want) { return strlen(want) == len && !memcmp(k, want, len); }

/* One tensor entry {"dtype": s, "shape": [..], "data_offsets": [b, e]}; keys in any order, each once. */
static int parse_entry(Cur *c, StTensor *t, uint64_t *begin, uint64_t *end, char **arena) {
    if (expect(c, '{')) return -1;
    bool have_dtype = false, have_shape = false, have_off = false;
    if (!peek_take(c, '}')) {
        do {
            char kbuf[32], *kp = kbuf;
            const char *kstart = c->p;
            Cur probe = *c;
            if (parse_string(&probe, NULL)) return -1;
            if ((size_t)(probe.p - kstart) > sizeof kbuf) return fail(c, "unknown key in a tensor entry");
            if (parse_string(c, &kp)) return -1;
            size_t klen = (size_t)(kp - kbuf - 1);
            if (expect(c, ':')) return -1;
            if (key_is(kbuf, klen, "dtype")) {
                if (have_dtype) return fail(c, "duplicate \"dtype\"");
                char dbuf[64], *dp = dbuf;
                const char *dstart = c->p;
                probe = *c;
                if (parse_string(&probe, NULL)) return -1;
                if ((size_t)(probe.p - dstart) > sizeof dbuf) return fail(c, "unknown dtype");
                if (parse_string(c, &dp)) return -1;
                int found = -1;
                for (int i = 0; i < ST_DTYPE_COUNT; i++)
                    if (!strcmp(dbuf, DTYPES[i].name)) found = i;
                if (found < 0) return err_set(c->err, "tensor %s: unknown dtype \"%.40s\"", t->name, dbuf);
                t->dtype = (StDtype)found;
                have_dtype = true;
            } else if (key_is(kbuf, klen, "shape")) {
                if (have_shape) return fail(c, "duplicate \"shape\"");
                if (expect(c, '[')) return -1;
                t->n_dims = 0;
                if (!peek_take(c, ']')) {
                    do {
                        uint64_t d;
                        if (t->n_dims == ST_MAX_DIMS)
                            return err_set(c->err, "tensor %s: more than %d dimensions", t->name, ST_MAX_DIMS);
                        if (parse_uint(c, &d)) return -1;
                        t->shape[t->n_dims++] = (int64_t)d;
                    } while (peek_take(c, ','));
                    if (expect(c, ']')) return -1;
                }
                have_shape = true;
            } else if (key_is(kbuf, klen, "data_offsets")) {
                if (have_off) return fail(c, "duplicate \"data_offsets\"");
                if (expect(c, '[') || parse_uint(c, begin) || expect(c, ',') || parse_uint(c, end) || expect(c, ']'))
                    return -1;
                have_off = true;
            } else {
                return fail(c, "unknown key in a tensor entry");
            }
        } while (peek_take(c, ','));
        if (expect(c, '}')) return -1;
    }
    if (!have_dtype || !have_shape || !have_off)
        return err_set(c->err, "tensor %s: missing %s", t->name, !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
    (void)arena;
    return 0;
}

/* "__metadata__": {string: string, ...} — validated, not kept */
static int parse_metadata(Cur *c) {
    if (expect(c, '{')) return -1;
    if (peek_take(c, '}')) return 0;
    do {
        if (parse_string(c, NULL) || expect(c, ':')) return -1;
        skip_ws(c);
        if (parse_string(c, NULL)) return -1;
    } while (peek_take(c, ','));
    return expect(c, '}');
}

static int cmp_name(const void *a, const void *b) { return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name); }

typedef struct Span {
    uint64_t begin, end;
    int idx;
} Span;
static int cmp_span(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

void st_close(StFile *f);
static StFile *parse(StFile *f, const uint8_t *img, size_t size, Err *err) {
    if (size < 8) return err_set(err, "not a safetensors file: %zu bytes, shorter than the 8-byte header length", size), st_close(f), NULL;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | img[i];
    if (hlen > size - 8)
        return err_set(err, "header length %llu past the end of the file (%zu bytes)", (unsigned long long)hlen, size), st_close(f), NULL;
    if (hlen > ST_MAX_HEADER) return err_set(err, "header length %llu over the 100 MiB limit", (unsigned long long)hlen), st_close(f), NULL;
    if (hlen < 2 || img[8] != '{') return err_set(err, "safetensors header does not start with '{'"), st_close(f), NULL;
    const uint8_t *data = img + 8 + hlen;
    const uint64_t data_size = size - 8 - hlen;

    /* every tensor entry takes at least 40 header bytes, so this bounds the count before allocating */
    size_t cap = hlen / 40 + 1;
    f->tensors = calloc(cap, sizeof *f->tensors);
    f->names = malloc(hlen + 1);
    uint64_t *begins = calloc(cap, sizeof *begins), *ends = calloc(cap, sizeof *ends);
    Span *spans = calloc(cap, sizeof *spans);
    if (!f->tensors || !f->names || !begins || !ends || !spans) {
        err_set(err, "out of memory reading a safetensors header of %llu bytes", (unsigned long long)hlen);
        goto bad;
    }
    Cur c = {(const char *)img + 8, (const char *)img + 8 + hlen, (const char *)img + 8, err};
    char *arena = f->names;
    bool seen_meta = false;
    if (expect(&c, '{')) goto bad;
    if (!peek_take(&c, '}')) {
        do {
            skip_ws(&c);
            char *name = arena;
            if (parse_string(&c, &arena) || expect(&c, ':')) goto bad;
            if (!strcmp(name, "__metadata__")) {
                if (seen_meta) {
                    err_set(err, "duplicate __metadata__");
                    goto bad;
                }
                seen_meta = true;
                arena = name;
                if (parse_metadata(&c)) goto bad;
                continue;
            }
            if ((size_t)f->n == cap) {
                fail(&c, "too many tensor entries for the header size");
                goto bad;
            }
            StTensor *t = &f->tensors[f->n];
            t->name = name;
            if (!name[0]) {
                err_set(err, "a tensor with an empty name");
                goto bad;
            }
            if (parse_entry(&c, t, &begins[f->n], &ends[f->n], &arena)) goto bad;
            f->n++;
        } while (peek_take(&c, ','));
        if (expect(&c, '}')) goto bad;
    }
    skip_ws(&c);
    if (c.p != c.end) {
        fail(&c, "trailing bytes after the JSON object");
        goto bad;
    }
    /* sizes and bounds */
    for (int i = 0; i < f->n; i++) {
        StTensor *t = &f->tensors[i];
        uint64_t ne = 1;
        for (int d = 0; d < t->n_dims; d++)
            if (!ck_mul_u64(ne, (uint64_t)t->shape[d], &ne) || ne > (UINT64_C(1) << 50)) {
                err_set(err, "tensor %s: absurd shape (element count overflows)", t->name);
                goto bad;
            }
        t->n_elements = ne;
        if (!ck_mul_u64(ne, DTYPES[t->dtype].size, &t->nbytes)) {
            err_set(err, "tensor %s: byte size overflows", t->name);
            goto bad;
        }
        if (begins[i] > ends[i] || ends[i] > data_size) {
            err_set(err, "tensor %s: data_offsets [%llu, %llu) outside the %llu data bytes", t->name,
                    (unsigned long long)begins[i], (unsigned long long)ends[i], (unsigned long long)data_size);
            goto bad;
        }
        if (ends[i] - begins[i] != t->nbytes) {
            err_set(err, "tensor %s: %llu data bytes, but %llu elements of %s need %llu", t->name,
                    (unsigned long long)(ends[i] - begins[i]), (unsigned long long)ne, DTYPES[t->dtype].name,
                    (unsigned long long)t->nbytes);
            goto bad;
        }
        t->data = data + begins[i];
        spans[i] = (Span){begins[i], ends[i], i};
    }
    /* overlaps, gaps, trailing bytes */
    qsort(spans, (size_t)f->n, sizeof *spans, cmp_span);
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        if (spans[i].begin < at) {
            err_set(err, "tensor %s: data_offsets [%llu, %llu) overlap tensor %s", f->tensors[spans[i].idx].name,
                    (unsigned long long)spans[i].begin, (unsigned long long)spans[i].end, f->tensors[spans[i - 1].idx].name);
            goto bad;
        }
        if (spans[i].begin > at) {
            err_set(err, "tensor %s: %llu unindexed bytes before its data", f->tensors[spans[i].idx].name,
                    (unsigned long long)(spans[i].begin - at));
            goto bad;
        }
        at = spans[i].end;
    }
    if (at != data_size) {
        err_set(err, "%llu bytes after the last tensor's data", (unsigned long long)(data_size - at));
        goto bad;
    }
    qsort(f->tensors, (size_t)f->n, sizeof *f->tensors, cmp_name);
    for (int i = 1; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name)) {
            err_set(err, "duplicate tensor name %s", f->tensors[i].name);
            goto bad;
        }
    free(begins), free(ends), free(spans);
    return f;
bad:
    free(begins), free(ends), free(spans);
    st_close(f);
    return NULL;
}

StFile *st_open_memory(const void *data, size_t size, Err *err) {
    StFile *f = calloc(1, sizeof *f);
    if (!f) return err_set(err, "out of memory"), NULL;
    return parse(f, data, size, err);
}

StFile *st_open(const char *path, Err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(err, "%s: %s", path, strerror(errno)), NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(err, "%s: not a regular file", path), NULL;
    }
    StFile *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return err_set(err, "out of memory"), NULL;
    }
    f->map_size = (size_t)st.st_size;
    if (f->map_size) {
        f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (f->map == MAP_FAILED) {
            f->map = NULL;
            close(fd);
            free(f);
            return err_set(err, "%s: mmap: %s", path, strerror(errno)), NULL;
        }
    }
    close(fd);
    if (!parse(f, f->map, f->map_size, err)) {
        err_prefix(err, "%s", path);
        return NULL;
    }
    return f;
}

void st_close(StFile *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_size);
    free(f->tensors);
    free(f->names);
    free(f);
}

int st_n_tensors(const StFile *f) { return f->n; }
const StTensor *st_tensor(const StFile *f, int i) { return i >= 0 && i < f->n ? &f->tensors[i] : NULL; }

const StTensor *st_find(const StFile *f, const char *name) {
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->tensors[mid].name, name);
        if (!c) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}
