/* cli_image.c — the CLI's image input (cli_image.h), on vision/mm_prompt.h (shared with the server). */
#include "cli/cli_image.h"

#include "base/pool.h"
#include "image/image.h"
#include "vision/mmproj.h"

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
    Pool *pool = NULL;
    if (mm_projector_check(m, mmproj, dl_engine_info(e)->n_embd, &er) || image_load(image, &img, &er)) goto done;
    pool = pool_create(n_threads > 0 ? n_threads : pool_default_threads(), &er);
    if (!pool || mm_image_encode(m, img.rgb, img.w, img.h, pool, out, &er)) goto done;
    rc = 0;
done:
    if (rc) fail(err, &er);
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
