/* vision_dev.h — the qwen3vl_merger vision tower through the backend interface (backend/backend.h), so any
 * registered backend runs it: a device (Vulkan) as well as the host backends. The same graph as encoder.h's
 * vision_encode — patch embedding, positions, blocks [layer_norm → qkv + bias → rope_2d → attention_full → out
 * + bias, residual; layer_norm → up + bias → GELU → down + bias, residual], deepstack mergers, post LayerNorm,
 * 2×2 merge → mm.0 → GELU → mm.2 — as matmul / add / copy_rows and the vision ops (layer_norm, bias_act, rope_2d,
 * attention_full). The host prepares only the inputs (patches, the resized position table, each patch's row
 * and column) and reads the embeddings back.
 *
 * A VisionDev owns its own backend, created from BackendOptions as the text model's Forward creates its own
 * (ForwardOptions.backend), with the projector's weights bound (uploaded to a device) once at open. On the
 * "ref" backend in MATMUL_EXACT its embeddings equal vision_encode's exact mode bit for bit (same scalar ops,
 * same order); on a device they are within the device's F32 arithmetic of it (tests/test_device.c). */
#ifndef DL_VISION_VISION_DEV_H
#define DL_VISION_VISION_DEV_H

#include "backend/backend.h"
#include "base/err.h"
#include "vision/mmproj.h"

typedef struct VisionDev VisionDev;

/* Creates the backend o names (NULL or o->name NULL: "cpu") and binds m's weights; m must outlive the
 * VisionDev. NULL with one line in err (unknown backend, no device, a weight format the device lacks). */
VisionDev *vision_dev_open(const Mmproj *m, const BackendOptions *o, Err *err);
void vision_dev_close(VisionDev *vd);
/* The backend's name ("vulkan", "cpu:avx2", ...). */
const char *vision_dev_backend(const VisionDev *vd);
/* vision_encode's contract (encoder.h): pix [3][ny][nx] normalised pixels, out [vision_n_tokens][mmproj_out_width].
 * 0, or -1 with one line in err (sizes, out of device memory, a device failure). */
int vision_dev_encode(VisionDev *vd, const float *pix, int nx, int ny, float *out, Err *err);

#endif
