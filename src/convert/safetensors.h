/* safetensors.h — read-only, validated access to a .safetensors file (the Hugging Face weight format):
 * 8 bytes little-endian header length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets"},
 * "__metadata__": {string: string}}, then the data buffer the offsets index.
 *
 * Hardened like the GGUF reader: everything is checked once, at open, before any pointer is handed out —
 * the header length against the file, the JSON by a strict parser of exactly this grammar (no recursion
 * beyond the two levels the format has, string escapes and UTF-8 checked), every dtype and dimension,
 * element counts and byte sizes for overflow, offsets inside the data, byte size = elements × dtype size,
 * no overlaps, no gaps and no trailing bytes (what the safetensors library itself refuses), no duplicate
 * names. Every refusal is one line naming the tensor or the byte offset. */
#ifndef DL_CONVERT_SAFETENSORS_H
#define DL_CONVERT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20) /* the safetensors library's own limit on the JSON header */

typedef enum StDtype { ST_BOOL, ST_U8, ST_I8, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32, ST_F32, ST_F64,
                       ST_I64, ST_U64, ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT } StDtype;

typedef struct StTensor {
    const char *name; /* NUL-terminated (decoded JSON string) */
    StDtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS]; /* PyTorch order: shape[n_dims-1] is contiguous */
    uint64_t n_elements;
    uint64_t nbytes;
    const void *data; /* inside the mapping (or the memory image) */
} StTensor;

typedef struct StFile StFile;

StFile *st_open(const char *path, Err *err);
/* Parses an image held in memory (not copied; must outlive the StFile): tests and the fuzzer. */
StFile *st_open_memory(const void *data, size_t size, Err *err);
void st_close(StFile *f);

int st_n_tensors(const StFile *f);
const StTensor *st_tensor(const StFile *f, int i); /* in name order (strcmp), as llama.cpp's converter reads them */
const StTensor *st_find(const StFile *f, const char *name);
const char *st_dtype_name(StDtype t);
size_t st_dtype_size(StDtype t);

#endif
