/* cli_image.h — images in the CLI (`run` / `chat` `--mmproj FILE --image FILE`, `/image FILE` in chat): the
 * picture decoded, pre-processed and encoded by the vision tower, and a prompt whose <|image_pad|> tokens
 * become the images' rows between <|vision_start|> and <|vision_end|>, evaluated with their IMROPE positions
 * — both through vision/mm_prompt.h, which the server uses too. */
#ifndef DL_CLI_CLI_IMAGE_H
#define DL_CLI_CLI_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "deltallm.h"
#include "vision/mm_prompt.h"

/* What the chat template writes for one image; put it into the user's text where the image goes. */
#define CLI_IMAGE_MARKER MM_IMAGE_MARKER

typedef MmImage CliImage;

/* Encodes the image file with the projector (checked against the engine's embedding width) on the CPU encoder's
 * fast path. n_threads ≤ 0: the default. 0, or -1 with one line in err. */
int cli_image_encode(const DlEngine *e, const char *mmproj, const char *image, int n_threads, CliImage *out,
                     DlError *err);
/* The same with the tower on a backend when device is not NULL (run --vision-device: "vulkan", "vulkan:N",
 * "cpu", "ref"), through vision/vision_dev.h in F32 (the exact arithmetic on a host backend). */
int cli_image_encode_on(const DlEngine *e, const char *mmproj, const char *image, int n_threads, const char *device,
                        CliImage *out, DlError *err);
/* The projector opened once for several pictures (chat): the same checks and backend as cli_image_encode_on,
 * the weights bound to the device once. NULL with one line in err. */
typedef struct CliVision CliVision;
CliVision *cli_vision_open(const DlEngine *e, const char *mmproj, int n_threads, const char *device, DlError *err);
int cli_vision_encode(CliVision *v, const char *image, CliImage *out, DlError *err);
void cli_vision_close(CliVision *v);
void cli_image_free(CliImage *img);
/* Evaluates ids (one <|image_pad|> per image, imgs in order) with the images in their places, from the
 * session's position on. *n_eval receives the positions evaluated (context rows used). */
int cli_images_eval(const DlEngine *e, DlSession *s, const int32_t *ids, size_t n, const CliImage *const *imgs,
                    int n_imgs, size_t *n_eval, DlError *err);
/* The same with one image. */
int cli_image_eval(const DlEngine *e, DlSession *s, const int32_t *ids, size_t n, const CliImage *img, size_t *n_eval,
                   DlError *err);

#endif
