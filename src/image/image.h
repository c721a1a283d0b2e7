/* image.h — image files in: PNG (libpng) and JPEG (libjpeg-turbo), each optional at build time (DL_PNG,
 * DL_JPEG; the Makefile turns them on where the headers are). Decodes from memory (a file read whole, or a
 * data URL's bytes) to 8-bit RGB. Every failure — unknown or corrupt data, a format the build lacks, an image
 * too large — is one line in err; a hostile file is refused, never a crash (tests/fuzz/fuzz_image.c). */
#ifndef DL_IMAGE_IMAGE_H
#define DL_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* Limits: each side ≤ IMAGE_MAX_SIDE pixels and ≤ IMAGE_MAX_PIXELS pixels in all (the vision pre-processing
 * scales every image to at most 4096 tokens anyway); files ≤ IMAGE_MAX_BYTES. */
#define IMAGE_MAX_SIDE 16384
#define IMAGE_MAX_PIXELS (40LL * 1000 * 1000)
#define IMAGE_MAX_BYTES (64u << 20)

typedef struct ImageRGB {
    int w, h;
    uint8_t *rgb; /* [h][w][3], malloc'ed */
} ImageRGB;

/* The formats this build decodes, e.g. "png, jpeg" ("none" without either library). */
const char *image_formats(void);
/* Decodes PNG or JPEG bytes (the format from the signature). 0, or -1 with one line in err. */
int image_decode(const uint8_t *data, size_t size, ImageRGB *out, Err *err);
/* Reads and decodes a file. */
int image_load(const char *path, ImageRGB *out, Err *err);
void image_free(ImageRGB *img);

#endif
