/* cli_image.c — the CLI's image input (cli_image.h). Positions, as llama.cpp's mtmd gives them to Qwen3.5: text
 * rows p, p, p; the image's token (y, x) of a gw × gh grid starting at p0: (p0, p0 + y, p0 + x); the text after
 * the image continues at p0 + max(gw, gh). */
#include "cli/cli_image.h"

#include "base/pool.h"
#include "image/image.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels_cpu.h"
#include "vision/encoder.h"
#include "vision/mmproj.h"
#include "vision/preprocess.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(DlError *err, const Err *e) {
    snprintf(err->msg, sizeof err->msg, "%s", e->msg);
    return -1;
}

int cli_image_encode(const DlEngine *e, const char *mmproj, const char *image, int n_threads, CliImage *out,
                     DlError *err) {
    memset(out, 0, sizeof *out);
    Err er = {{0}};
    Mmproj *m = mmproj_open(mmproj, &er);
    if (!m) return fail(err, &er);
    int rc = -1;
    ImageRGB img = {0};
    float *pix = NULL;
    Pool *pool = NULL;
    const DlModelInfo *info = dl_engine_info(e);
    if (m->proj_dim != info->n_embd || m->n_deepstack) {
        if (m->n_deepstack)
            err_set(&er, "%s has %d deepstack layers (Qwen3-VL); deltallm's text models take Qwen3.5's projector", mmproj,
                    m->n_deepstack);
        else
            err_set(&er, "%s projects to width %d but the model's embedding width is %d (a projector of another model?)",
                    mmproj, m->proj_dim, info->n_embd);
        goto done;
    }
    if (image_load(image, &img, &er)) goto done;
    int nx, ny;
    if (vision_preprocess(m, img.rgb, img.w, img.h, &pix, &nx, &ny, &er)) goto done;
    out->n_tokens = vision_n_tokens(m, nx, ny);
    out->gw = nx / (2 * m->patch_size), out->gh = ny / (2 * m->patch_size), out->width = m->proj_dim;
    out->embd = malloc(sizeof(float) * (size_t)out->n_tokens * (size_t)out->width);
    if (!out->embd) {
        err_set(&er, "out of memory for %d image embeddings", out->n_tokens);
        goto done;
    }
    pool = pool_create(n_threads > 0 ? n_threads : pool_default_threads(), &er);
    if (!pool) goto done;
    /* the fast arithmetic (GEMM kernels, vattn, the GELU table): within llama.cpp's own distance (docs/VISION.md) */
    const VisionRun run = {ops_cpu(isa_best()), MATMUL_FAST, pool, isa_best(), NULL};
    if (vision_encode(m, pix, nx, ny, &run, out->embd, &er)) goto done;
    rc = 0;
done:
    if (rc) {
        fail(err, &er);
        cli_image_free(out);
    }
    pool_destroy(pool);
    free(pix);
    image_free(&img);
    mmproj_close(m);
    return rc;
}

void cli_image_free(CliImage *img) {
    free(img->embd);
    img->embd = NULL;
}

int cli_image_eval(const DlEngine *e, DlSession *s, const int32_t *ids, size_t n, const CliImage *img, size_t *n_eval,
                   DlError *err) {
    const int32_t pad = dl_token_id(e, "<|image_pad|>");
    size_t at = n;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == pad) {
            if (at != n) return snprintf(err->msg, sizeof err->msg, "one image per prompt: the prompt has two <|image_pad|>"), -1;
            at = i;
        }
    if (pad < 0 || at == n)
        return snprintf(err->msg, sizeof err->msg, "the prompt has no <|image_pad|> token to put the image at"), -1;
    const size_t N = n - 1 + (size_t)img->n_tokens, W = (size_t)img->width;
    int32_t *tok = malloc(sizeof(int32_t) * N), *pos = malloc(sizeof(int32_t) * 3 * N);
    float *embd = calloc(N, sizeof(float) * W);
    uint8_t *is = calloc(N, 1);
    int rc = -1;
    if (!tok || !pos || !embd || !is) {
        snprintf(err->msg, sizeof err->msg, "out of memory for an image prompt of %zu positions", N);
        goto done;
    }
    int p = dl_session_next_pos(s);
    size_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (i != at) {
            tok[r] = ids[i], pos[3 * r] = pos[3 * r + 1] = pos[3 * r + 2] = p++;
            r++;
            continue;
        }
        const int p0 = p;
        for (int y = 0; y < img->gh; y++)
            for (int x = 0; x < img->gw; x++, r++) {
                tok[r] = pad, is[r] = 1;
                pos[3 * r] = p0, pos[3 * r + 1] = p0 + y, pos[3 * r + 2] = p0 + x;
                memcpy(embd + r * W, img->embd + ((size_t)y * img->gw + x) * W, sizeof(float) * W);
            }
        p = p0 + (img->gw > img->gh ? img->gw : img->gh);
    }
    if (dl_session_eval_embd(s, tok, embd, is, pos, N, p, err)) goto done;
    *n_eval = N;
    rc = 0;
done:
    free(tok), free(pos), free(embd), free(is);
    return rc;
}
