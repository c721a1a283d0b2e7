/* dump.h — named intermediate tensors of a forward pass, written in llref's dump format so they compare
 * directly with llama.cpp's (tests/data/dumps/): one raw float32 file per tensor plus index.json with
 * name ("<stage>-<layer>"), occurrence, ubatch, pos0, n_tokens and ggml shape ne[4].
 *
 * Names are llama.cpp's graph names (docs/PARITY.md maps each to its stage). A Dump can also keep the
 * tensors in memory (for `deltallm parity` and tests) instead of writing files. */
#ifndef DL_MODEL_DUMP_H
#define DL_MODEL_DUMP_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef struct DumpTensor {
    char name[96];
    int occurrence, ubatch, pos0, n_tokens;
    int64_t ne[4];
    float *data; /* in-memory dumps only */
    char file[160];
} DumpTensor;

typedef struct Dump Dump;

/* dir != NULL: write files there (created if missing). dir == NULL: keep tensors in memory. layers: a
 * bitmask filter of layers to dump (-1 = all), tensors without a layer are always kept. */
Dump *dump_new(const char *dir, uint64_t layers, Err *err);
/* Finishes index.json (file dumps) and frees. */
int dump_close(Dump *d, Err *err);
void dump_free(Dump *d);

/* Marks the start of a forward call (ubatch index advances by one per call). */
void dump_begin_ubatch(Dump *d, int pos0, int n_tokens);
/* Records data (ne0·ne1·ne2·ne3 floats, ggml order) as "<name>-<layer>" (layer < 0: just "<name>"). */
void dump_tensor(Dump *d, const char *name, int layer, const float *data, int64_t ne0, int64_t ne1, int64_t ne2,
                 int64_t ne3);
bool dump_wants_layer(const Dump *d, int layer);

int dump_count(const Dump *d);
const DumpTensor *dump_get(const Dump *d, int i);

/* Adds a tensor with the given metadata; takes ownership of data (malloc'ed). Used by readers of
 * reference dumps (cli/dump_load.c). */
int dump_add(Dump *d, const DumpTensor *meta, float *data, Err *err);
/* Finds a tensor by full name, occurrence and ubatch; NULL when absent. */
const DumpTensor *dump_find(const Dump *d, const char *name, int occurrence, int ubatch);

#endif
