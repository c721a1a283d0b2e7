/* image.c — PNG and JPEG decoding to RGB (image.h). libpng through its simplified API (png_image: no
 * setjmp here, errors come back in the struct); libjpeg through the classic API with an error manager that
 * longjmps back and keeps libjpeg's messages off stderr. Sizes are checked from the header, before any pixel
 * memory is allocated. */
#include "image/image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DL_PNG
#define DL_PNG 0
#endif
#ifndef DL_JPEG
#define DL_JPEG 0
#endif

#if DL_PNG
#include <png.h>
#endif
#if DL_JPEG
#include <jpeglib.h>
#include <setjmp.h>
#endif

const char *image_formats(void) {
    return DL_PNG && DL_JPEG ? "png, jpeg" : DL_PNG ? "png" : DL_JPEG ? "jpeg" : "none";
}

static __attribute__((unused)) int check_size(long long w, long long h, const char *what, Err *err) {
    if (w < 1 || h < 1) return err_set(err, "image: %s has no pixels (%lld×%lld)", what, w, h);
    if (w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE || w * h > IMAGE_MAX_PIXELS)
        return err_set(err, "image: %s is %lld×%lld pixels; the limit is %d per side and %lld in all", what, w, h,
                       IMAGE_MAX_SIDE, IMAGE_MAX_PIXELS);
    return 0;
}

#if DL_PNG
static int decode_png(const uint8_t *data, size_t size, ImageRGB *out, Err *err) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, data, size)) {
        err_set(err, "image: not a readable PNG (%s)", im.message);
        png_image_free(&im);
        return -1;
    }
    if (check_size(im.width, im.height, "the PNG", err)) {
        png_image_free(&im);
        return -1;
    }
    im.format = PNG_FORMAT_RGB; /* alpha composited on black, grey and palette expanded, 16 bits scaled down */
    const size_t n = PNG_IMAGE_SIZE(im);
    uint8_t *buf = malloc(n);
    if (!buf) {
        png_image_free(&im);
        return err_set(err, "image: out of memory for a %u×%u PNG", im.width, im.height);
    }
    if (!png_image_finish_read(&im, NULL, buf, 0, NULL)) {
        err_set(err, "image: corrupt PNG (%s)", im.message);
        free(buf);
        png_image_free(&im);
        return -1;
    }
    out->w = (int)im.width, out->h = (int)im.height, out->rgb = buf;
    png_image_free(&im);
    return 0;
}
#endif

#if DL_JPEG
typedef struct JErr {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} JErr;

static void jpeg_fail(j_common_ptr c) {
    JErr *e = (JErr *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}
static void jpeg_quiet(j_common_ptr c, int level) { (void)c, (void)level; } /* warnings: not printed */

static int decode_jpeg(const uint8_t *data, size_t size, ImageRGB *out, Err *err) {
    struct jpeg_decompress_struct d;
    JErr je;
    uint8_t *volatile buf = NULL;
    memset(&d, 0, sizeof d);
    d.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_fail;
    je.mgr.emit_message = jpeg_quiet;
    je.msg[0] = '\0';
    if (setjmp(je.jump)) {
        err_set(err, "image: corrupt JPEG (%s)", je.msg);
        free(buf);
        jpeg_destroy_decompress(&d);
        return -1;
    }
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, data, (unsigned long)size);
    jpeg_read_header(&d, TRUE);
    if (check_size(d.image_width, d.image_height, "the JPEG", err)) {
        jpeg_destroy_decompress(&d);
        return -1;
    }
    d.out_color_space = JCS_RGB; /* grey and YCbCr converted; CMYK refused by libjpeg itself */
    jpeg_start_decompress(&d);
    if (d.output_components != 3) {
        jpeg_destroy_decompress(&d);
        return err_set(err, "image: JPEG with %d colour components is not supported", d.output_components);
    }
    const size_t stride = (size_t)d.output_width * 3;
    buf = malloc(stride * d.output_height);
    if (!buf) {
        jpeg_destroy_decompress(&d);
        return err_set(err, "image: out of memory for a %u×%u JPEG", d.output_width, d.output_height);
    }
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = buf + stride * d.output_scanline;
        jpeg_read_scanlines(&d, &row, 1);
    }
    jpeg_finish_decompress(&d);
    out->w = (int)d.output_width, out->h = (int)d.output_height, out->rgb = buf;
    jpeg_destroy_decompress(&d);
    return 0;
}
#endif

int image_decode(const uint8_t *data, size_t size, ImageRGB *out, Err *err) {
    memset(out, 0, sizeof *out);
    if (size > IMAGE_MAX_BYTES) return err_set(err, "image: %zu bytes is over the %u MiB limit", size, IMAGE_MAX_BYTES >> 20);
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 8 && !memcmp(data, png_sig, 8)) {
#if DL_PNG
        return decode_png(data, size, out, err);
#else
        return err_set(err, "image: PNG support is not built in (libpng-dev was missing at build time)");
#endif
    }
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
#if DL_JPEG
        return decode_jpeg(data, size, out, err);
#else
        return err_set(err, "image: JPEG support is not built in (libjpeg-dev was missing at build time)");
#endif
    }
    if (size >= 12 && !memcmp(data, "RIFF", 4) && !memcmp(data + 8, "WEBP", 4))
        return err_set(err, "image: WebP is not supported (this build reads %s)", image_formats());
    return err_set(err, "image: not a PNG or JPEG file");
}

int image_load(const char *path, ImageRGB *out, Err *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, "image: cannot open '%s'", path);
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap > IMAGE_MAX_BYTES) break; /* one byte over the limit is enough to refuse */
            cap = cap ? 2 * cap : 1 << 16;
            if (cap > IMAGE_MAX_BYTES + (size_t)1) cap = IMAGE_MAX_BYTES + (size_t)1;
            uint8_t *p = realloc(buf, cap);
            if (!p) {
                free(buf), fclose(f);
                return err_set(err, "image: out of memory reading '%s'", path);
            }
            buf = p;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return err_set(err, "image: cannot read '%s'", path);
    }
    int rc = image_decode(buf, n, out, err);
    free(buf);
    if (rc) err_prefix(err, "%s", path);
    return rc;
}

void image_free(ImageRGB *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL, img->w = img->h = 0;
}
