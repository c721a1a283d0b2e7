/* gguf.h — read-only access to GGUF v3 model files (and split sets of them).
 *
 * A Gguf is a validated view of one model: its metadata and its tensor directory, with every tensor's
 * data pointing into a read-only mmap of the file that holds it. Everything is checked once, at open:
 * lengths and counts against the bytes that remain, element counts and byte sizes for overflow, tensor
 * data for bounds and alignment, names for duplicates, type ids against the format table. After a
 * successful open, callers may trust every pointer and size they get from here.
 *
 * What this file deliberately does not know: what the keys mean (model/config.c), how to compute with
 * the weight formats (gguf/format.h, kernels/). It refuses nothing on grounds of architecture: vocab-only
 * files of other archs are valid GGUF.
 *
 * Byte order: GGUF is little-endian; so is every machine deltallm builds for (checked in gguf.c). */
#ifndef DL_GGUF_GGUF_H
#define DL_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* ggml's GGML_MAX_NAME: a tensor name plus its NUL */
#define GGUF_DEFAULT_ALIGNMENT 32

typedef enum GgufValueType {
    GGUF_TYPE_U8 = 0,
    GGUF_TYPE_I8 = 1,
    GGUF_TYPE_U16 = 2,
    GGUF_TYPE_I16 = 3,
    GGUF_TYPE_U32 = 4,
    GGUF_TYPE_I32 = 5,
    GGUF_TYPE_F32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_U64 = 10,
    GGUF_TYPE_I64 = 11,
    GGUF_TYPE_F64 = 12,
    GGUF_TYPE_COUNT
} GgufValueType;

/* A string inside the mapped file: not NUL-terminated. Print with "%.*s", (int)s.len, s.ptr. */
typedef struct GgufStr {
    const char *ptr;
    uint64_t len;
} GgufStr;

typedef struct GgufValue GgufValue;

typedef struct GgufArray {
    GgufValueType type; /* element type */
    uint64_t n;
    const uint8_t *raw;    /* scalar elements, packed little-endian in the file (may be unaligned) */
    GgufStr *strs;         /* type == STRING: n strings */
    GgufValue *items;      /* type == ARRAY: n nested arrays */
} GgufArray;

struct GgufValue {
    GgufValueType type;
    union {
        uint64_t u; /* U8, U16, U32, U64, BOOL */
        int64_t i;  /* I8, I16, I32, I64 */
        double f;   /* F32, F64 */
        GgufStr s;
        GgufArray arr;
    };
};

typedef struct GgufKV {
    GgufStr key;
    GgufValue val;
} GgufKV;

typedef struct GgufTensor {
    char name[GGUF_MAX_NAME];
    uint32_t type; /* ggml type id, known to the format table */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] fastest; unused dims are 1 */
    uint64_t n_elements;
    uint64_t nbytes;
    uint64_t offset;   /* from the start of its file's data section */
    uint64_t file_off; /* absolute offset in its file */
    int split;         /* which file of a split set (0 for a single file) */
    const void *data;  /* into the read-only mapping */
} GgufTensor;

typedef struct Gguf Gguf;

/* Opens and validates a GGUF file. A name of the form PREFIX-0000K-of-0000N.gguf opens all N parts as one
 * model (any K may be given). Returns NULL with a one-line message in err. */
Gguf *gguf_open(const char *path, Err *err);
typedef struct GgufOpenOptions {
    bool read; /* read the file(s) into anonymous memory instead of mapping them (--no-mmap) */
    /* with read: called as the parts are read, progress(user, "read", bytes read, bytes of all parts) */
    void (*progress)(void *user, const char *phase, uint64_t done, uint64_t total);
    void *progress_user;
} GgufOpenOptions;
Gguf *gguf_open_opts(const char *path, const GgufOpenOptions *opts, Err *err); /* opts may be NULL */
/* Parses a GGUF image held in memory (not copied; must outlive the Gguf). For tests and the fuzzer. */
Gguf *gguf_open_memory(const void *data, size_t size, Err *err);
void gguf_close(Gguf *g);

uint32_t gguf_version(const Gguf *g);
uint32_t gguf_alignment(const Gguf *g);
int gguf_n_splits(const Gguf *g);
uint64_t gguf_file_size(const Gguf *g); /* all parts together */
/* Whether every part is a read-only file mapping (gguf_open), whose pages can be dropped from memory and
 * are read back from the file (not gguf_open_memory's caller memory, not GgufOpenOptions.read's copy). */
bool gguf_file_mapped(const Gguf *g);
/* The start and size of every split's mapping (for prefetch / mlock). */
void gguf_split_mapping(const Gguf *g, int split, const void **base, size_t *size);
/* The path of a split's file as it was opened (NULL for gguf_open_memory). */
const char *gguf_split_path(const Gguf *g, int split);

/* Metadata. Keys are unique (duplicates are refused at open). */
int64_t gguf_n_kv(const Gguf *g);
const GgufKV *gguf_kv(const Gguf *g, int64_t i);
const GgufValue *gguf_get(const Gguf *g, const char *key); /* NULL when absent */
bool gguf_str_eq(GgufStr s, const char *cstr);
/* Copies s into buf as a NUL-terminated string (truncating); returns buf. */
char *gguf_str_copy(GgufStr s, char *buf, size_t cap);

/* Typed getters with numeric coercion: any integer type converts if the value fits, F32/F64 to float.
 * Return 1 when found, 0 when absent and !required (*out untouched, so set the default first), -1 on
 * absence when required or on a type/range mismatch (err names the key). */
int gguf_get_u32(const Gguf *g, const char *key, uint32_t *out, bool required, Err *err);
int gguf_get_i64(const Gguf *g, const char *key, int64_t *out, bool required, Err *err);
int gguf_get_f32(const Gguf *g, const char *key, float *out, bool required, Err *err);
int gguf_get_bool(const Gguf *g, const char *key, bool *out, bool required, Err *err);
int gguf_get_str(const Gguf *g, const char *key, GgufStr *out, bool required, Err *err);
int gguf_get_arr(const Gguf *g, const char *key, const GgufArray **out, bool required, Err *err);

/* Array elements as numbers (any integer or float element type). Index must be < n. */
int64_t gguf_arr_i64(const GgufArray *a, uint64_t i);
double gguf_arr_f64(const GgufArray *a, uint64_t i);
bool gguf_type_is_int(GgufValueType t);
const char *gguf_value_type_name(GgufValueType t);
size_t gguf_value_type_size(GgufValueType t); /* scalar types only; 0 otherwise */

/* Tensors, in file order (split parts concatenated). */
int64_t gguf_n_tensors(const Gguf *g);
const GgufTensor *gguf_tensor(const Gguf *g, int64_t i);
const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name); /* NULL when absent */

#endif
