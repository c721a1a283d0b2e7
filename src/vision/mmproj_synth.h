/* mmproj_synth.h — synthetic qwen3vl_merger mmproj files: the keys and tensor names llama.cpp's converter
 * writes, the real Qwen3.5 vision shapes as presets (or any width), seeded random weights. They make the
 * vision path runnable and testable without real weights; what they "see" is meaningless. */
#ifndef DL_VISION_MMPROJ_SYNTH_H
#define DL_VISION_MMPROJ_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define MMPROJ_SYNTH_MAX_DS 8

typedef struct MmprojSpec {
    int n_embd, n_ff, n_layer, n_head, proj_dim;
    int patch_size, n_pos_side; /* learned position grid n_pos_side² */
    int deepstack[MMPROJ_SYNTH_MAX_DS], n_deepstack; /* layers with a deepstack merger (Qwen3-VL; none in Qwen3.5) */
    uint32_t wtype;       /* matrices' FormatId (patch kernels stay F16 unless wtype is F32) */
    uint64_t seed;
    const char *name;
} MmprojSpec;

/* "qwen3.5" (27 blocks of 1152, MLP 4304, 16 heads, patch 16, grid 48², the Qwen3.5 / Qwen3-VL large tower),
 * "qwen3.5-small" (24 blocks of 1024, MLP 4096), "tiny" (2 blocks of 32: tests). proj_dim is the text
 * model's width (set it to the model's embedding_length). -1 for an unknown name. */
int mmproj_synth_preset(MmprojSpec *spec, const char *name, Err *err);
int mmproj_synth_write(const MmprojSpec *spec, const char *path, Err *err);
/* The same file in memory (malloc'ed; tests). */
int mmproj_synth_write_mem(const MmprojSpec *spec, uint8_t **out, size_t *size, Err *err);

#endif
