/* vision.h — images in the server (`serve --mmproj FILE`): the projector loaded once, images from data URLs
 * (the server fetches nothing: a remote URL is refused) decoded and encoded on the HTTP thread, the
 * embeddings kept by a 128-bit hash of the image's bytes (a conversation re-sending its picture every turn
 * encodes it once), and a chat job's prompt laid out with vision/mm_prompt.h as the CLI does.
 *
 * A job's prompt with images: each image row's token is a negative key drawn from the image's hash and the
 * row's index, so the prefix cache, the reply checkpoints and the slots (which compare token arrays) match a
 * prefix only when it holds the same images; JobMM keeps the rows' real tokens, embeddings and (time,
 * height, width) positions, and the scheduler evaluates such a prompt with sv_eval. */
#ifndef DL_SERVER_VISION_H
#define DL_SERVER_VISION_H

#include <cjson/cJSON.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "deltallm.h"
#include "server/openai.h"
#include "vision/mm_prompt.h"

typedef struct SvImage {
    MmImage img;
    uint64_t h[2]; /* hash of the image file's bytes */
    size_t bytes;  /* of the embeddings */
    atomic_int refs;
    struct SvImage *next; /* the cache's list, most recent first */
} SvImage;

typedef struct ServerVision ServerVision;

/* Opens the projector and checks it against the text model. n_threads ≤ 0: the default. device NULL: images are
 * encoded on the CPU encoder's fast path; else the tower runs on that backend (serve --vision-device: "vulkan",
 * "vulkan:N", "cpu", "ref"; vision/vision_dev.h, F32), its weights bound here once. */
ServerVision *sv_open(const char *mmproj, const DlEngine *e, int n_threads, const char *device, Err *err);
void sv_close(ServerVision *v);
/* Images encoded (not taken from the cache) and taken from the cache, since the start. */
void sv_stats(ServerVision *v, uint64_t *encoded, uint64_t *hits);

/* The image of a data URL (data:image/png;base64,...), from the cache or decoded and encoded; where names the
 * request field for the error (a 400 on anything wrong with the URL or the image). *out holds a reference. */
int sv_image_from_url(ServerVision *v, const char *url, const char *where, SvImage **out, ApiError *e);
void sv_image_unref(SvImage *im);

/* A chat job's images: the rows of its prompt. */
typedef struct JobMM {
    MmRows rows;
    SvImage **imgs;
    int n_imgs;
    int width;
} JobMM;

/* The images of a chat request's messages (image_url parts, in order), laid out in the prompt ids[0, n) that
 * the template rendered (one <|image_pad|> per image): *ids becomes the rows' keys (image rows negative) and
 * *n their number, *mm the rows. A request without images: *mm = NULL and ids untouched. 0, or -1 with the
 * 4xx in e. */
int sv_prepare(ServerVision *v, const DlEngine *en, const cJSON *messages, int32_t **ids, size_t *n, JobMM **mm,
               ApiError *e);
void job_mm_free(JobMM *mm);
/* Evaluates the prompt rows [a, b) in s (which holds rows [0, a) of it). */
int sv_eval(DlSession *s, const JobMM *mm, size_t a, size_t b, DlError *err);

/* Base64 (standard or URL-safe alphabet, padding optional, whitespace skipped) to bytes (malloc'd). 0, or -1
 * with the reason in err. */
int sv_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n, Err *err);

#endif
