/* mm_prompt.c — images in a text prompt (mm_prompt.h): encode a picture for the text model, and lay out the
 * rows and IMROPE positions of a prompt holding images. */
#include "vision/mm_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltallm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels_cpu.h"
#include "vision/encoder.h"
#include "vision/preprocess.h"
#include "vision/vision_dev.h"

int mm_projector_check(const Mmproj *m, const char *name, int n_embd, Err *err) {
    if (m->n_deepstack)
        return err_set(err, "%s has %d deepstack layers (Qwen3-VL); deltallm's text models take Qwen3.5's projector",
                       name, m->n_deepstack),
               -1;
    if (m->proj_dim != n_embd)
        return err_set(err, "%s projects to width %d but the model's embedding width is %d (a projector of another model?)",
                       name, m->proj_dim, n_embd),
               -1;
    return 0;
}

/* pre-processing, then the tower on vd when given, else on the CPU's fast path with pool */
static int encode(const Mmproj *m, VisionDev *vd, const uint8_t *rgb, int w, int h, Pool *pool, MmImage *out, Err *err) {
    memset(out, 0, sizeof *out);
    float *pix = NULL;
    int nx, ny;
    if (vision_preprocess(m, rgb, w, h, &pix, &nx, &ny, err)) return -1;
    out->n_tokens = vision_n_tokens(m, nx, ny);
    out->gw = nx / (2 * m->patch_size), out->gh = ny / (2 * m->patch_size), out->width = m->proj_dim;
    out->embd = malloc(sizeof(float) * (size_t)out->n_tokens * (size_t)out->width);
    int rc = -1;
    if (!out->embd) {
        err_set(err, "out of memory for %d image embeddings", out->n_tokens);
    } else if (vd) {
        rc = vision_dev_encode(vd, pix, nx, ny, out->embd, err);
    } else {
        /* the fast arithmetic (GEMM kernels, vattn, the GELU table): within llama.cpp's own distance (docs/VISION.md) */
        const VisionRun run = {ops_cpu(isa_best()), MATMUL_FAST, pool, isa_best(), NULL};
        rc = vision_encode(m, pix, nx, ny, &run, out->embd, err);
    }
    free(pix);
    if (rc) mm_image_free(out);
    return rc;
}

int mm_image_encode(const Mmproj *m, const uint8_t *rgb, int w, int h, Pool *pool, MmImage *out, Err *err) {
    return encode(m, NULL, rgb, w, h, pool, out, err);
}

int mm_image_encode_dev(const Mmproj *m, VisionDev *vd, const uint8_t *rgb, int w, int h, MmImage *out, Err *err) {
    return encode(m, vd, rgb, w, h, NULL, out, err);
}

void mm_image_free(MmImage *img) {
    free(img->embd);
    img->embd = NULL;
}

int mm_count_pads(const int32_t *ids, size_t n, int32_t pad) {
    if (pad < 0) return -1;
    int k = 0;
    for (size_t i = 0; i < n; i++) k += ids[i] == pad;
    return k;
}

void mm_rows_free(MmRows *r) {
    free(r->tok), free(r->pos), free(r->row);
    memset(r, 0, sizeof *r);
}

int mm_rows_build(const int32_t *ids, size_t n, int32_t pad, const MmImage *const *imgs, int n_imgs, int p_start,
                  MmRows *out, Err *err) {
    memset(out, 0, sizeof *out);
    const int n_pads = mm_count_pads(ids, n, pad);
    if (n_pads < 0) return err_set(err, "the model's vocabulary has no <|image_pad|> token to put an image at"), -1;
    if (n_pads != n_imgs)
        return err_set(err, "the prompt has %d <|image_pad|> token(s) for %d image(s)", n_pads, n_imgs), -1;
    size_t N = n - (size_t)n_imgs;
    for (int k = 0; k < n_imgs; k++) N += (size_t)imgs[k]->n_tokens;
    out->n = N;
    out->tok = malloc(sizeof(int32_t) * N), out->pos = malloc(sizeof(int32_t) * 3 * N);
    out->row = calloc(N, sizeof *out->row);
    if (!out->tok || !out->pos || !out->row) {
        mm_rows_free(out);
        return err_set(err, "out of memory for a prompt of %zu positions", N), -1;
    }
    int p = p_start, k = 0;
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] != pad) {
            out->tok[r] = ids[i], out->pos[3 * r] = out->pos[3 * r + 1] = out->pos[3 * r + 2] = p++;
            r++;
            continue;
        }
        const MmImage *img = imgs[k++];
        const int p0 = p;
        for (int y = 0; y < img->gh; y++)
            for (int x = 0; x < img->gw; x++, r++) {
                out->tok[r] = pad;
                out->pos[3 * r] = p0, out->pos[3 * r + 1] = p0 + y, out->pos[3 * r + 2] = p0 + x;
                out->row[r] = img->embd + ((size_t)y * img->gw + x) * (size_t)img->width;
            }
        p = p0 + (img->gw > img->gh ? img->gw : img->gh);
    }
    out->next_pos = p;
    return 0;
}

void mm_rows_slice(const MmRows *r, size_t a, size_t b, int width, float *embd, uint8_t *is_embd) {
    for (size_t i = a; i < b; i++) {
        float *dst = embd + (i - a) * (size_t)width;
        is_embd[i - a] = r->row[i] != NULL;
        if (r->row[i]) memcpy(dst, r->row[i], sizeof(float) * (size_t)width);
        else memset(dst, 0, sizeof(float) * (size_t)width);
    }
}

int mm_rows_eval(DlSession *s, const MmRows *r, int width, size_t a, size_t b, DlError *err) {
    const size_t T = b - a;
    float *embd = malloc(sizeof(float) * T * (size_t)width);
    uint8_t *is = malloc(T);
    int rc = -1;
    if (!embd || !is) {
        snprintf(err->msg, sizeof err->msg, "out of memory for %zu image prompt rows", T);
    } else {
        mm_rows_slice(r, a, b, width, embd, is);
        rc = dl_session_eval_embd(s, r->tok + a, embd, is, r->pos + 3 * a, T, b < r->n ? r->pos[3 * b] : r->next_pos, err);
    }
    free(embd), free(is);
    return rc;
}
