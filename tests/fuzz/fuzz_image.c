/* fuzz_image.c — libFuzzer target over the image decoders' wrapper (src/image/image.c; `make fuzz`, seeds in
 * tests/fuzz/seeds/fuzz_image/: a small PNG and JPEG). A refused input must come back with a one-line
 * message; an accepted one must have a size within the limits and every pixel byte readable (under ASan). */
#include "image/image.h"

#include <stdint.h>
#include <string.h>

#define EXPECT(x)                                                                                          \
    do {                                                                                                   \
        if (!(x)) __builtin_trap();                                                                        \
    } while (0)

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Err err = {{0}};
    ImageRGB img;
    if (image_decode(data, size, &img, &err) != 0) {
        EXPECT(err.msg[0] != '\0' && strchr(err.msg, '\n') == NULL);
        EXPECT(img.rgb == NULL);
        return 0;
    }
    EXPECT(img.w >= 1 && img.h >= 1 && img.w <= IMAGE_MAX_SIDE && img.h <= IMAGE_MAX_SIDE);
    EXPECT((long long)img.w * img.h <= IMAGE_MAX_PIXELS);
    uint64_t s = 0;
    for (size_t i = 0; i < (size_t)img.w * (size_t)img.h * 3; i++) s += img.rgb[i];
    sink += s;
    image_free(&img);
    return 0;
}
