/* cli_image.h — images in the CLI (`run` / `chat` `--mmproj FILE --image FILE`): the picture decoded,
 * pre-processed and encoded by the vision tower (src/vision/), and a prompt whose <|image_pad|> token becomes
 * the image's rows between <|vision_start|> and <|vision_end|>, evaluated with their IMROPE positions. */
#ifndef DL_CLI_CLI_IMAGE_H
#define DL_CLI_CLI_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "deltallm.h"

/* What the chat template writes for one image; put it into the user's text where the image goes. */
#define CLI_IMAGE_MARKER "<|vision_start|><|image_pad|><|vision_end|>"

typedef struct CliImage {
    float *embd;  /* [n_tokens][width] */
    int n_tokens, gw, gh, width;
} CliImage;

/* Encodes the image file with the projector (checked against the engine's embedding width). n_threads ≤ 0: the
 * default. 0, or -1 with one line in err. */
int cli_image_encode(const DlEngine *e, const char *mmproj, const char *image, int n_threads, CliImage *out,
                     DlError *err);
void cli_image_free(CliImage *img);
/* Evaluates ids (holding exactly one <|image_pad|>) with the image in its place, from the session's position
 * on. *n_eval receives the positions evaluated (context rows used). */
int cli_image_eval(const DlEngine *e, DlSession *s, const int32_t *ids, size_t n, const CliImage *img, size_t *n_eval,
                   DlError *err);

#endif
