/* preprocess.h — an RGB image to the tower's input, as llama.cpp's mtmd does for the qwen3vl_merger projector
 * (its "dyn_size" pre-processor): the target size within the pixel budget on the (patch·merge) grid
 * ("smart resize"), a bicubic resize into it that keeps the aspect (the few pixels of rounding padded black,
 * centred), then (v/255 − mean)/std per channel, planar. docs/VISION.md has the rules. */
#ifndef DL_VISION_PREPROCESS_H
#define DL_VISION_PREPROCESS_H

#include <stdint.h>

#include "base/err.h"
#include "vision/mmproj.h"

/* The target size for a w × h image: multiples of align within [min_pixels, max_pixels] (smart resize). */
void vision_target_size(int w, int h, int align, long min_pixels, long max_pixels, int *tw, int *th);
/* llama.cpp v0.4.0's bicubic resize of RGB u8 [h][w][3] to [th][tw][3]: Pillow's separable resampling (kernel
 * a = −0.5 widened by the scale when shrinking, pixel centres at +0.5, taps normalised and rounded to 22-bit
 * fixed point; horizontal pass, then vertical; each rounded and clamped to 0..255). 0, or -1 out of memory. */
int vision_resize_bicubic(const uint8_t *src, int w, int h, uint8_t *dst, int tw, int th);
/* The whole pre-processing: *pix (malloc'ed) receives [3][*ny][*nx] floats. */
int vision_preprocess(const Mmproj *m, const uint8_t *rgb, int w, int h, float **pix, int *nx, int *ny, Err *err);

#endif
