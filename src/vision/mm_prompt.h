/* mm_prompt.h — images in a text prompt, shared by the CLI (cli/cli_image.c) and the server
 * (server/vision.c): a decoded picture through the projector's pre-processing and tower into one embedding
 * per image token (checked against the text model's width), and the layout of a prompt whose
 * <|image_pad|> tokens (one per image, as the chat template writes <|vision_start|><|image_pad|><|vision_end|>)
 * become the images' rows, with the positions llama.cpp's mtmd gives Qwen3.5: text rows p, p, p; the token
 * (y, x) of a gw × gh image starting at p0 gets (p0, p0 + y, p0 + x); the text after the image continues at
 * p0 + max(gw, gh). */
#ifndef DL_VISION_MM_PROMPT_H
#define DL_VISION_MM_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/pool.h"
#include "deltallm.h"
#include "vision/mmproj.h"

/* What the chat template writes for one image. */
#define MM_IMAGE_MARKER "<|vision_start|><|image_pad|><|vision_end|>"

typedef struct MmImage {
    float *embd; /* [n_tokens][width], raster order of the gw × gh merged grid */
    int n_tokens, gw, gh, width;
} MmImage;

/* Whether the projector fits a text model of embedding width n_embd (one line in err when not). */
int mm_projector_check(const Mmproj *m, const char *name, int n_embd, Err *err);
/* Pre-processes and encodes 8-bit RGB [h][w][3] (exact mode, matmuls on the CPU kernels of this machine,
 * threads from pool, NULL: the caller's). 0, or -1 with one line in err. */
int mm_image_encode(const Mmproj *m, const uint8_t *rgb, int w, int h, Pool *pool, MmImage *out, Err *err);
/* The same with the tower on a backend (vision_dev.h: a device, or a host backend), vd opened on m. */
typedef struct VisionDev VisionDev;
int mm_image_encode_dev(const Mmproj *m, VisionDev *vd, const uint8_t *rgb, int w, int h, MmImage *out, Err *err);
void mm_image_free(MmImage *img);

/* The rows of a prompt with images: ids holds one <|image_pad|> (pad) per image, in order; imgs[k] goes at the
 * k-th. Rows: text tokens as they are; an image's rows carry the pad token. Positions start at p_start. */
typedef struct MmRows {
    size_t n;           /* rows */
    int32_t *tok;       /* [n] token ids (pad on image rows) */
    int32_t *pos;       /* [n][3] (time, height, width) positions */
    const float **row;  /* [n] an image row's embedding (into imgs[k]->embd), NULL for text */
    int next_pos;       /* the position after the last row */
} MmRows;

/* Counts the pads (to check them against the images); -1 when pad < 0. */
int mm_count_pads(const int32_t *ids, size_t n, int32_t pad);
/* Lays out the rows (malloc'd; mm_rows_free). 0, or -1 with one line in err (the pads and images differ in
 * number, out of memory). */
int mm_rows_build(const int32_t *ids, size_t n, int32_t pad, const MmImage *const *imgs, int n_imgs, int p_start,
                  MmRows *out, Err *err);
void mm_rows_free(MmRows *r);
/* Rows [a, b) as the arrays dl_session_eval_embd takes: embd [b − a][width] (zeros on text rows) and is_embd
 * [b − a], into buffers the caller gives (embd: (b − a)·width floats). */
void mm_rows_slice(const MmRows *r, size_t a, size_t b, int width, float *embd, uint8_t *is_embd);
/* Evaluates rows [a, b) in s, which holds rows [0, a) (dl_session_eval_embd; the position after row b − 1 is
 * the next row's time position, or next_pos at the end). 0, or -1 with one line in err. */
int mm_rows_eval(DlSession *s, const MmRows *r, int width, size_t a, size_t b, DlError *err);

#endif
