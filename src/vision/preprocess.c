/* preprocess.c — image pre-processing for the qwen3vl_merger tower (preprocess.h), following llama.cpp
 * v0.4.0's mtmd-image.cpp arithmetic (float where it uses float; its Pillow-style fixed-point bicubic), so that
 * the resized pixels match its bytes (checked against recorded mtmd output in vision/mtmd_oracle). */
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

/* The bicubic kernel with a = -0.5 (Pillow's; PyTorch and ggml use -0.75), support 2. */
static double bicubic_w(double x) {
    const double a = -0.5;
    if (x < 0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

enum { FIX_BITS = 22 }; /* fixed-point weights: 32 bits − 8 for the pixel − 2 of headroom */

/* The taps of a 1-D resample from n_in to n_out samples, as Pillow computes them: each output sample's centre
 * (o + 0.5)·scale in input coordinates, the kernel widened by the scale when shrinking (an anti-aliasing
 * filter), the taps normalised to sum 1 and rounded to FIX_BITS fixed point (±0.5, then truncated).
 * first[o], count[o]: the input range; w[o·ksize + k]: its weights. Returns ksize, or -1 (out of memory). */
static int taps(int n_in, int n_out, int *first, int *count, int32_t **w_out) {
    const double scale = (double)n_in / n_out, fscale = scale < 1.0 ? 1.0 : scale;
    const double support = 2.0 * fscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    int32_t *w = malloc(sizeof(int32_t) * (size_t)n_out * (size_t)ksize);
    double *pw = malloc(sizeof(double) * (size_t)ksize);
    if (!w || !pw) {
        free(w), free(pw);
        return -1;
    }
    for (int o = 0; o < n_out; o++) {
        const double centre = (o + 0.5) * scale;
        int lo = (int)(centre - support + 0.5), hi = (int)(centre + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > n_in) hi = n_in;
        const int cnt = hi - lo;
        double sum = 0;
        for (int k = 0; k < cnt; k++) sum += pw[k] = bicubic_w((k + lo - centre + 0.5) / fscale);
        for (int k = 0; k < ksize; k++) {
            const double v = k < cnt ? (sum != 0.0 ? pw[k] / sum : pw[k]) : 0.0;
            const double f = v * (double)(1 << FIX_BITS) + (v < 0 ? -0.5 : 0.5);
            w[(size_t)o * ksize + k] = (int32_t)f;
        }
        first[o] = lo, count[o] = cnt;
    }
    free(pw);
    *w_out = w;
    return ksize;
}

static inline uint8_t clip8(int32_t v) { return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v; }

/* One pass along rows (stride 3 between samples of a row, rows of n_in·3) or along columns. */
static void pass(const uint8_t *src, uint8_t *dst, int n_in, int n_out, int n_other, int horizontal, const int *first,
                 const int *count, const int32_t *w, int ksize) {
    for (int r = 0; r < n_other; r++)
        for (int o = 0; o < n_out; o++) {
            const int32_t *k = w + (size_t)o * ksize;
            for (int c = 0; c < 3; c++) {
                int32_t acc = 1 << (FIX_BITS - 1);
                for (int t = 0; t < count[o]; t++) {
                    const int i = first[o] + t;
                    const uint8_t v = horizontal ? src[((size_t)r * n_in + i) * 3 + c] : src[((size_t)i * n_other + r) * 3 + c];
                    acc += (int32_t)v * k[t];
                }
                const uint8_t v = clip8(acc >> FIX_BITS);
                if (horizontal) dst[((size_t)r * n_out + o) * 3 + c] = v;
                else dst[((size_t)o * n_other + r) * 3 + c] = v;
            }
        }
}

int vision_resize_bicubic(const uint8_t *src, int w, int h, uint8_t *dst, int tw, int th) {
    if (tw == w && th == h) {
        memcpy(dst, src, (size_t)w * h * 3);
        return 0;
    }
    int rc = -1, *fx = malloc(sizeof(int) * 2 * (size_t)tw), *fy = malloc(sizeof(int) * 2 * (size_t)th);
    int32_t *wx = NULL, *wy = NULL;
    uint8_t *tmp = malloc((size_t)tw * h * 3);
    if (!fx || !fy || !tmp) goto done;
    /* horizontal pass first (into tw × h), then vertical; a side that keeps its size is not filtered */
    if (tw != w) {
        const int kx = taps(w, tw, fx, fx + tw, &wx);
        if (kx < 0) goto done;
        pass(src, th != h ? tmp : dst, w, tw, h, 1, fx, fx + tw, wx, kx);
    } else {
        memcpy(tmp, src, (size_t)w * h * 3);
    }
    if (th != h) {
        const int ky = taps(h, th, fy, fy + th, &wy);
        if (ky < 0) goto done;
        pass(tmp, dst, h, th, tw, 0, fy, fy + th, wy, ky);
    }
    rc = 0;
done:
    free(fx), free(fy), free(wx), free(wy), free(tmp);
    return rc;
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
        else if (vision_resize_bicubic(rgb, w, h, fit, fw, fh)) goto oom;
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
