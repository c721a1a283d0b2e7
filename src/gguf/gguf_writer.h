/* gguf_writer.h — writes GGUF v3 files: metadata of every value type, tensors from memory or from a
 * fill callback (so multi-GB synthetic models stream to disk without being held in RAM). Used by
 * `deltallm synth` and by the tests that craft valid and corrupt files. */
#ifndef DL_GGUF_GGUF_WRITER_H
#define DL_GGUF_GGUF_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

typedef struct GgufWriter GgufWriter;

/* Fills nbytes of tensor data at dst (called once per tensor, in order, while writing). */
typedef int (*GgufFillFn)(void *ctx, const char *name, void *dst, size_t nbytes, Err *err);

GgufWriter *gguf_writer_new(uint32_t alignment);
void gguf_writer_free(GgufWriter *w);

/* Metadata, kept in insertion order. Strings and arrays are copied. Return 0 or -1 (out of memory). */
int gguf_w_u32(GgufWriter *w, const char *key, uint32_t v);
int gguf_w_i32(GgufWriter *w, const char *key, int32_t v);
int gguf_w_u64(GgufWriter *w, const char *key, uint64_t v);
int gguf_w_f32(GgufWriter *w, const char *key, float v);
int gguf_w_bool(GgufWriter *w, const char *key, int v);
int gguf_w_str(GgufWriter *w, const char *key, const char *v);
/* A scalar array (elem_type not STRING/ARRAY); data holds n packed elements. */
int gguf_w_arr(GgufWriter *w, const char *key, GgufValueType elem_type, const void *data, uint64_t n);
int gguf_w_arr_str(GgufWriter *w, const char *key, const char *const *strs, uint64_t n);
/* Copies every metadata entry of g except those whose key starts with one of the skip prefixes. */
int gguf_w_copy_kv(GgufWriter *w, const Gguf *g, const char *const *skip_prefixes, int n_skip);

/* A tensor of ggml type `type` and shape ne[0..n_dims). data is referenced (not copied) and must live
 * until the write; or pass data = NULL and a fill callback. */
int gguf_w_tensor(GgufWriter *w, const char *name, uint32_t type, int n_dims, const int64_t *ne, const void *data,
                  GgufFillFn fill, void *fill_ctx, Err *err);

int gguf_writer_write_file(GgufWriter *w, const char *path, Err *err);
/* Writes the whole image into a malloc'ed buffer (small files: tests). */
int gguf_writer_write_mem(GgufWriter *w, uint8_t **out, size_t *size, Err *err);

#endif
