/* mmproj.h — the multimodal projector file llama.cpp's converter writes beside a Qwen3-VL / Qwen3.5 model
 * (`general.architecture = clip`, `clip.projector_type = qwen3vl_merger`): the vision tower's
 * hyperparameters (clip.* / clip.vision.* keys) and its weights (v.* and mm.* tensors), validated once at open.
 *
 * Matrices stay in the file (any weight format the kernels know), as MatW views; vectors (biases, norms,
 * position table) are widened to F32 copies owned here. Deepstack layers (Qwen3-VL; Qwen3.5 has none) are
 * read when the file has them. What the numbers mean and how they are used: docs/VISION.md. */
#ifndef DL_VISION_MMPROJ_H
#define DL_VISION_MMPROJ_H

#include <stdbool.h>
#include <stdio.h>

#include "base/err.h"
#include "gguf/gguf.h"
#include "kernels/ops.h"

typedef struct VisionLayer {
    MatW qkv, out, up, down;              /* qkv {E, 3E}, out {E, E}, up {E, F}, down {F, E} */
    const float *qkv_b, *out_b, *up_b, *down_b;
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    bool deepstack;                       /* v.deepstack.N.*: a merger of this layer's output */
    const float *ds_norm_w, *ds_norm_b;   /* over 4E */
    MatW ds_fc1, ds_fc2;                  /* {4E, 4E}, {4E, P} */
    const float *ds_fc1_b, *ds_fc2_b;
} VisionLayer;

typedef struct Mmproj {
    Gguf *g;
    char proj_type[32];
    int n_embd, n_ff, n_layer, n_head, d_head, proj_dim; /* E, F, blocks, heads, E / heads, P (text width) */
    int image_size, patch_size, n_merge;                 /* n_merge: spatial merge side (2) */
    float eps;
    float mean[3], std[3];
    bool use_gelu;                                       /* clip.use_gelu (true for qwen3vl_merger) */
    int n_pos_side;                                      /* the learned position grid's side (48 for 2304) */
    long min_pixels, max_pixels;                         /* the pre-processing budget (pixels) */
    int n_deepstack;
    MatW patch0, patch1;                                 /* {3·p·p, E}: the two temporal kernels */
    const float *patch_b;                                /* [E] */
    const float *pos_embd;                               /* [n_pos_side²][E] */
    const float *post_ln_w, *post_ln_b;                  /* the merger's norm, over E */
    MatW mm0, mm2;                                       /* {4E, 4E}, {4E, P} */
    const float *mm0_b, *mm2_b;
    VisionLayer *layers;
    float **owned;                                       /* the widened vectors */
    int n_owned, cap_owned;
} Mmproj;

/* Opens and validates an mmproj file; NULL with one line in err. */
Mmproj *mmproj_open(const char *path, Err *err);
/* The same over a GGUF already open (the Mmproj takes ownership of g, also on failure). */
Mmproj *mmproj_from_gguf(Gguf *g, Err *err);
void mmproj_close(Mmproj *m);
/* Width of one output embedding: P·(1 + deepstack layers). */
int mmproj_out_width(const Mmproj *m);
/* The summary `deltallm inspect` prints. */
void mmproj_print(FILE *f, const Mmproj *m);
/* Whether g looks like an mmproj (general.architecture "clip"). */
bool mmproj_is_clip(const Gguf *g);

#endif
