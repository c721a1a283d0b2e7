/* preprocess.c — image pre-processing for the qwen3vl_merger tower (preprocess.h), following llama.cpp's
 * mtmd-image.cpp arithmetic (float where it uses float, double where its constants promote to double), so that
 * the resized pixels can match its bytes. */
#include "vision/preprocess.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void vision_target_size(int w, int h, int align, long min_pixels, long max_pixels, int *tw, int *th) {
    const float f = (float)align;
#define ROUND_BY(x) ((int)roundf((x) / f) * align)
#define CEIL_BY(x) ((int)ceilf((x) / f) * align)
#define FLOOR_BY(x) ((int)floorf((x) / f) * align)
    int hb = ROUND_BY((float)h), wb = ROUND_BY((float)w);
    if (hb < align) hb = align;
    if (wb < align) wb = align;
    if ((long)hb * wb > max_pixels) {
        const float beta = sqrtf((float)((long)h * w) / (float)max_pixels);
        hb = FLOOR_BY((float)h / beta), wb = FLOOR_BY((float)w / beta);
        if (hb < align) hb = align;
        if (wb < align) wb = align;
    } else if ((long)hb * wb < min_pixels) {
        const float beta = sqrtf((float)min_pixels / (float)((long)h * w));
        hb = CEIL_BY((float)h * beta), wb = CEIL_BY((float)w * beta);
    }
#undef ROUND_BY
#undef CEIL_BY
#undef FLOOR_BY
    *tw = wb, *th = hb;
}

static inline int clampi(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* one cubic step through four samples at offset t in [0, 1) from p1 */
static float cubic(float p0, float p1, float p2, float p3, float t) {
    const float d0 = p0 - p1, d2 = p2 - p1, d3 = p3 - p1;
    const float a1 = (float)(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
    const float a2 = (float)(1.0 / 2 * d0 + 1.0 / 2 * d2);
    const float a3 = (float)(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
    return p1 + a1 * t + a2 * t * t + a3 * t * t * t;
}

void vision_resize_bicubic(const uint8_t *src, int w, int h, uint8_t *dst, int tw, int th) {
    const float sx = (float)w / (float)tw, sy = (float)h / (float)th;
    for (int i = 0; i < th; i++)
        for (int j = 0; j < tw; j++) {
            const int x = (int)(sx * (float)j), y = (int)(sy * (float)i);
            const float dx = sx * (float)j - (float)x, dy = sy * (float)i - (float)y;
            for (int k = 0; k < 3; k++) {
                float col[4];
                for (int r = 0; r < 4; r++) {
                    const uint8_t *row = src + (size_t)clampi(y - 1 + r, 0, h - 1) * w * 3;
                    col[r] = cubic(row[clampi(x - 1, 0, w - 1) * 3 + k], row[clampi(x, 0, w - 1) * 3 + k],
                                   row[clampi(x + 1, 0, w - 1) * 3 + k], row[clampi(x + 2, 0, w - 1) * 3 + k], dx);
                }
                float v = roundf(cubic(col[0], col[1], col[2], col[3], dy));
                v = v < 0 ? 0 : v > 255 ? 255 : v;
                dst[((size_t)i * tw + j) * 3 + k] = (uint8_t)v;
            }
        }
}

int vision_preprocess(const Mmproj *m, const uint8_t *rgb, int w, int h, float **pix, int *nx, int *ny, Err *err) {
    *pix = NULL;
    if (w < 1 || h < 1) return err_set(err, "vision: empty image");
    int tw, th;
    vision_target_size(w, h, m->patch_size * m->n_merge, m->min_pixels, m->max_pixels, &tw, &th);
    uint8_t *canvas = calloc((size_t)tw * th, 3); /* the pad colour: black */
    uint8_t *fit = NULL;
    float *out = malloc(sizeof(float) * 3 * (size_t)tw * th);
    if (!canvas || !out) goto oom;
    if (tw == w && th == h) {
        memcpy(canvas, rgb, (size_t)w * h * 3);
    } else {
        /* fit inside, keeping the aspect (the sides' ceil, clamped), centred */
        const float s = fminf((float)tw / (float)w, (float)th / (float)h);
        int fw = (int)ceilf((float)w * s), fh = (int)ceilf((float)h * s);
        fw = fw > tw ? tw : fw < 1 ? 1 : fw;
        fh = fh > th ? th : fh < 1 ? 1 : fh;
        fit = malloc((size_t)fw * fh * 3);
        if (!fit) goto oom;
        if (fw == w && fh == h) memcpy(fit, rgb, (size_t)w * h * 3);
        else vision_resize_bicubic(rgb, w, h, fit, fw, fh);
        const int ox = (tw - fw) / 2, oy = (th - fh) / 2;
        for (int y = 0; y < fh; y++) memcpy(canvas + ((size_t)(y + oy) * tw + ox) * 3, fit + (size_t)y * fw * 3, (size_t)fw * 3);
    }
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < (size_t)tw * th; i++)
            out[(size_t)c * tw * th + i] = ((float)canvas[i * 3 + c] / 255.0f - m->mean[c]) / m->std[c];
    free(canvas), free(fit);
    *pix = out, *nx = tw, *ny = th;
    return 0;
oom:
    free(canvas), free(fit), free(out);
    return err_set(err, "vision: out of memory pre-processing a %d×%d image", w, h);
}
