/* cli_image.c — the CLI's image input (cli_image.h), on vision/mm_prompt.h (shared with the server). */
#include "cli/cli_image.h"

#include "base/pool.h"
#include "image/image.h"
#include "vision/mmproj.h"
#include "vision/vision_dev.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(DlError *err, const Err *e) {
    snprintf(err->msg, sizeof err->msg, "%s", e->msg);
    return -1;
}

int cli_image_encode(const DlEngine *e, const char *mmproj, const char *image, int n_threads, CliImage *out,
                     DlError *err) {
    return cli_image_encode_on(e, mmproj, image, n_threads, NULL, out, err);
}

struct CliVision {
    Mmproj *m;
    Pool *pool;    /* the CPU encoder's threads (no device) */
    VisionDev *vd; /* the tower on a backend (device) */
};

CliVision *cli_vision_open(const DlEngine *e, const char *mmproj, int n_threads, const char *device, DlError *err) {
    Err er = {{0}};
    CliVision *v = calloc(1, sizeof *v);
    if (!v) return err_set(&er, "out of memory"), fail(err, &er), NULL;
    if (!(v->m = mmproj_open(mmproj, &er)) || mm_projector_check(v->m, mmproj, dl_engine_info(e)->n_embd, &er)) goto fail;
    if (device) { /* the tower on that backend, in F32 (the exact arithmetic on a host backend) */
        const BackendOptions bo = {.name = device, .n_threads = n_threads, .mode = MATMUL_EXACT, .cpu.isa = -1};
        if (!(v->vd = vision_dev_open(v->m, &bo, &er))) goto fail;
    } else if (!(v->pool = pool_create(n_threads > 0 ? n_threads : pool_default_threads(), &er))) {
        goto fail;
    }
    return v;
fail:
    fail(err, &er);
    cli_vision_close(v);
    return NULL;
}

void cli_vision_close(CliVision *v) {
    if (!v) return;
    vision_dev_close(v->vd);
    pool_destroy(v->pool);
    mmproj_close(v->m);
    free(v);
}

int cli_vision_encode(CliVision *v, const char *image, CliImage *out, DlError *err) {
    memset(out, 0, sizeof *out);
    Err er = {{0}};
    ImageRGB img = {0};
    int rc = image_load(image, &img, &er);
    if (!rc)
        rc = v->vd ? mm_image_encode_dev(v->m, v->vd, img.rgb, img.w, img.h, out, &er)
                   : mm_image_encode(v->m, img.rgb, img.w, img.h, v->pool, out, &er);
    image_free(&img);
    return rc ? fail(err, &er) : 0;
}

int cli_image_encode_on(const DlEngine *e, const char *mmproj, const char *image, int n_threads, const char *device,
                        CliImage *out, DlError *err) {
    memset(out, 0, sizeof *out);
    CliVision *v = cli_vision_open(e, mmproj, n_threads, device, err);
    const int rc = v ? cli_vision_encode(v, image, out, err) : -1;
    cli_vision_close(v);
    return rc;
}

void cli_image_free(CliImage *img) { mm_image_free(img); }

int cli_images_eval(const DlEngine *e, DlSession *s, const int32_t *ids, size_t n, const CliImage *const *imgs,
                    int n_imgs, size_t *n_eval, DlError *err) {
    Err er = {{0}};
    MmRows r;
    if (mm_rows_build(ids, n, dl_token_id(e, "<|image_pad|>"), imgs, n_imgs, dl_session_next_pos(s), &r, &er))
        return fail(err, &er);
    const int rc = mm_rows_eval(s, &r, dl_engine_info(e)->n_embd, 0, r.n, err);
    if (!rc) *n_eval = r.n;
    mm_rows_free(&r);
    return rc;
}

int cli_image_eval(const DlEngine *e, DlSession *s, const int32_t *ids, size_t n, const CliImage *img, size_t *n_eval,
                   DlError *err) {
    return cli_images_eval(e, s, ids, n, &img, 1, n_eval, err);
}
