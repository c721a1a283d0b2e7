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

int cli_image_encode_on(const DlEngine *e, const char *mmproj, const char *image, int n_threads, const char *device,
                        CliImage *out, DlError *err) {
    memset(out, 0, sizeof *out);
    Err er = {{0}};
    Mmproj *m = mmproj_open(mmproj, &er);
    if (!m) return fail(err, &er);
    int rc = -1;
    ImageRGB img = {0};
    Pool *pool = NULL;
    VisionDev *vd = NULL;
    if (mm_projector_check(m, mmproj, dl_engine_info(e)->n_embd, &er) || image_load(image, &img, &er)) goto done;
    if (device) { /* the tower on that backend, in F32 (the exact arithmetic on a host backend) */
        const BackendOptions bo = {.name = device, .n_threads = n_threads, .mode = MATMUL_EXACT, .cpu.isa = -1};
        if (!(vd = vision_dev_open(m, &bo, &er)) || mm_image_encode_dev(m, vd, img.rgb, img.w, img.h, out, &er)) goto done;
    } else {
        pool = pool_create(n_threads > 0 ? n_threads : pool_default_threads(), &er);
        if (!pool || mm_image_encode(m, img.rgb, img.w, img.h, pool, out, &er)) goto done;
    }
    rc = 0;
done:
    if (rc) fail(err, &er);
    vision_dev_close(vd);
    pool_destroy(pool);
    image_free(&img);
    mmproj_close(m);
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
