/* encoder.h — the qwen3vl_merger vision tower on the CPU: pre-processed pixels in, one embedding per merged
 * 2×2 patch group out, as llama.cpp's clip graph for this projector computes it (docs/VISION.md):
 *   patch embedding (the two temporal conv kernels as matmuls over the same image, summed) → patch bias →
 *   learned positions (bilinear-resized to the patch grid) → blocks [LayerNorm → qkv → 2-D rotary (rows on
 *   the first quarter-pairs, columns on the second) → full attention → out; LayerNorm → up → GELU → down] →
 *   post LayerNorm → 2×2 merge → mm.0 → GELU → mm.2 (→ deepstack features appended where the file has them).
 * Patches are kept in merge order from the start (each 2×2 group's four patches adjacent), as llama.cpp does.
 * Matmuls go through an Ops table (MATMUL_EXACT: F32 activations, weights widened — the exact mode the
 * float64 reference tools/vision_ref.py checks; MATMUL_FAST: the fast GEMM kernels, activations rounded as
 * ggml rounds them, plus the fast attention (vattn.h) and GELU table). */
#ifndef DL_VISION_ENCODER_H
#define DL_VISION_ENCODER_H

#include "base/err.h"
#include "base/pool.h"
#include "kernels/cpu/isa.h"
#include "kernels/ops.h"
#include "vision/mmproj.h"

/* Seconds spent per stage, added to by vision_encode when VisionRun.prof is set. */
typedef struct VisionProfile {
    double matmul, attention, other;
} VisionProfile;

typedef struct VisionRun {
    const Ops *ops; /* NULL: ops_ref */
    MatMode mode;   /* MATMUL_EXACT unless told; any other mode also takes the fast attention and GELU */
    Pool *pool;     /* NULL: the caller's thread */
    Isa isa;        /* the fast attention's ISA level (ISA_REF, the zero value: the scalar attention) */
    VisionProfile *prof; /* NULL, or where the stage times are added */
} VisionRun;

/* Tokens an nx × ny pre-processed image gives (nx, ny multiples of 2·patch): (nx/2p)·(ny/2p). */
int vision_n_tokens(const Mmproj *m, int nx, int ny);
/* pix: [3][ny][nx] normalised pixels (planar RGB). out: [vision_n_tokens][mmproj_out_width] floats, tokens in
 * raster order of the merged grid. 0, or -1 with one line in err (sizes that do not fit, out of memory). */
int vision_encode(const Mmproj *m, const float *pix, int nx, int ny, const VisionRun *run, float *out, Err *err);

/* The GELU the tower uses (ggml_gelu's tanh form, in float): exact mode. */
float vision_gelu(float x);
/* The fast mode's GELU, as ggml-cpu computes ggml_gelu (GGML_GELU_FP16): 0 at x ≤ −10, x at x ≥ 10, otherwise
 * vision_gelu of x rounded to F16, read from a 65,536-entry table (filled once). Unlike ggml, the result is
 * not rounded to F16 again. */
float vision_gelu_fast(float x);

/* The pieces of vision_encode the device path (vision_dev.h) shares, so both feed the tower the same inputs:
 * the patches of an nx × ny image in merge order into h [T][3·p·p] (each [3][p][p], ggml's im2col order), and
 * the learned position table bilinearly resized (aligned corners) to the px × py patch grid, in merge order,
 * into pos [T][E]. */
void vision_patches(const Mmproj *m, const float *pix, int nx, int ny, float *h);
void vision_positions(const Mmproj *m, int px, int py, float *pos);

#endif
