/* vision.c — images in the server (vision.h): data URLs, the embedding cache by the bytes' hash, a chat
 * prompt's image rows and their evaluation. */
#include "server/vision.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/pool.h"
#include "image/image.h"
#include "server/util.h"
#include "vision/mmproj.h"
#include "vision/vision_dev.h"

enum { SV_CACHE_MAX = 64 };                /* images kept */
#define SV_CACHE_BYTES ((size_t)512 << 20) /* of embeddings kept */

struct ServerVision {
    Mmproj *m;
    char *path;
    Pool *pool;
    VisionDev *vd;          /* the tower on a backend (--vision-device), or NULL: the CPU encoder with pool */
    pthread_mutex_t enc_mu; /* one encode at a time (the pool is one, the backend's stream is one) */
    pthread_mutex_t mu;     /* the cache */
    SvImage *head;
    int n;
    size_t bytes;
    uint64_t encoded, hits;
};

ServerVision *sv_open(const char *mmproj, const DlEngine *e, int n_threads, const char *device, Err *err) {
    if (dl_token_id(e, "<|image_pad|>") < 0 || dl_token_id(e, "<|vision_start|>") < 0)
        return err_set(err, "--mmproj: the model's vocabulary has no <|vision_start|> / <|image_pad|> tokens (not a "
                            "Qwen3.5 vision model)"),
               NULL;
    ServerVision *v = calloc(1, sizeof *v);
    if (!v) return err_set(err, "out of memory"), NULL;
    if (!(v->m = mmproj_open(mmproj, err)) || mm_projector_check(v->m, mmproj, dl_engine_info(e)->n_embd, err) ||
        !(v->pool = pool_create(n_threads > 0 ? n_threads : pool_default_threads(), err)) || !(v->path = strdup(mmproj)) ||
        (device && !(v->vd = vision_dev_open(v->m, &(BackendOptions){.name = device, .n_threads = n_threads, .mode = MATMUL_EXACT,
                                                                     .cpu.isa = -1}, err)))) {
        if (!err->msg[0]) err_set(err, "out of memory");
        if (device && v->m && v->path && !v->vd) err_prefix(err, "--vision-device");
        free(v->path);
        pool_destroy(v->pool);
        mmproj_close(v->m);
        free(v);
        return NULL;
    }
    pthread_mutex_init(&v->enc_mu, NULL);
    pthread_mutex_init(&v->mu, NULL);
    return v;
}

void sv_image_unref(SvImage *im) {
    if (!im || atomic_fetch_sub(&im->refs, 1) != 1) return;
    mm_image_free(&im->img);
    free(im);
}

void sv_close(ServerVision *v) {
    if (!v) return;
    for (SvImage *im = v->head, *next; im; im = next) next = im->next, sv_image_unref(im);
    pthread_mutex_destroy(&v->mu);
    pthread_mutex_destroy(&v->enc_mu);
    vision_dev_close(v->vd);
    pool_destroy(v->pool);
    mmproj_close(v->m);
    free(v->path);
    free(v);
}

void sv_stats(ServerVision *v, uint64_t *encoded, uint64_t *hits) {
    pthread_mutex_lock(&v->mu);
    *encoded = v->encoded, *hits = v->hits;
    pthread_mutex_unlock(&v->mu);
}

/* ------------------------------------------------------------------------------------------ data URLs */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

int sv_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n, Err *err) {
    uint8_t *o = malloc(n / 4 * 3 + 3);
    if (!o) return err_set(err, "out of memory for %zu bytes of base64", n), -1;
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c == '=') {
            pad++;
            continue;
        }
        const int v = b64_value(c);
        if (v < 0 || pad) {
            free(o);
            if (pad) return err_set(err, "bad base64: data after the '=' padding (at byte %zu)", i), -1;
            return err_set(err, "bad base64: character 0x%02x at byte %zu", (unsigned)c, i), -1;
        }
        acc = acc << 6 | (uint32_t)v, bits += 6;
        if (bits >= 8) bits -= 8, o[k++] = (uint8_t)(acc >> bits);
    }
    if (bits >= 6 || pad > 2) { /* 1 symbol left over, or more padding than a group has */
        free(o);
        return err_set(err, "bad base64: the data ends inside a byte (truncated?)"), -1;
    }
    *out = o, *out_n = k;
    return 0;
}

#define BAD(...) api_error(e, 400, "invalid_request_error", where, NULL, __VA_ARGS__)

/* The bytes of a data URL; remote and other URLs are refused. */
static int url_bytes(const char *url, const char *where, uint8_t **bytes, size_t *n, ApiError *e) {
    if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8))
        return BAD("%s: remote image URLs are not fetched by this server: send the image inline as a data URL "
                   "(data:image/png;base64,...)",
                   where);
    if (strncmp(url, "data:", 5))
        return BAD("%s: unsupported image URL '%.24s%s': send the image as a data URL (data:image/png;base64,...)", where,
                   url, strlen(url) > 24 ? "..." : "");
    const char *comma = strchr(url, ',');
    if (!comma) return BAD("%s: a data URL needs a ',' before its data", where);
    const size_t head = (size_t)(comma - url);
    if (head < 12 || memcmp(comma - 7, ";base64", 7))
        return BAD("%s: the image data URL must be base64 (data:image/png;base64,...)", where);
    if (strncmp(url + 5, "image/", 6) && strncmp(url + 5, "application/octet-stream", 24))
        return BAD("%s: the data URL's media type '%.*s' is not an image", where, (int)(head - 12 < 40 ? head - 12 : 40), url + 5);
    Err er = {{0}};
    if (sv_base64_decode(comma + 1, strlen(comma + 1), bytes, n, &er)) return BAD("%s: %s", where, er.msg);
    if (!*n) return free(*bytes), BAD("%s: the image data URL is empty", where);
    return 0;
}

static SvImage *cache_find(ServerVision *v, const uint64_t h[2]) {
    SvImage **pp = &v->head;
    for (SvImage *im = v->head; im; pp = &im->next, im = im->next)
        if (im->h[0] == h[0] && im->h[1] == h[1]) {
            *pp = im->next, im->next = v->head, v->head = im; /* to the front */
            atomic_fetch_add(&im->refs, 1);
            return im;
        }
    return NULL;
}

int sv_image_from_url(ServerVision *v, const char *url, const char *where, SvImage **out, ApiError *e) {
    *out = NULL;
    uint8_t *bytes = NULL;
    size_t n = 0;
    if (url_bytes(url, where, &bytes, &n, e)) return -1;
    const uint64_t h[2] = {hash64(bytes, n, 0x9e3779b97f4a7c15ull), hash64(bytes, n, 0x3c6ef372fe94f82bull) ^ n};
    pthread_mutex_lock(&v->mu);
    SvImage *im = cache_find(v, h);
    if (im) v->hits++;
    pthread_mutex_unlock(&v->mu);
    if (im) {
        free(bytes);
        *out = im;
        return 0;
    }
    Err er = {{0}};
    ImageRGB rgb = {0};
    im = calloc(1, sizeof *im);
    int rc = -1;
    if (!im) {
        api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    } else if (image_decode(bytes, n, &rgb, &er)) {
        BAD("%s: %s", where, er.msg);
    } else {
        pthread_mutex_lock(&v->enc_mu);
        rc = v->vd ? mm_image_encode_dev(v->m, v->vd, rgb.rgb, rgb.w, rgb.h, &im->img, &er)
                   : mm_image_encode(v->m, rgb.rgb, rgb.w, rgb.h, v->pool, &im->img, &er);
        pthread_mutex_unlock(&v->enc_mu);
        if (rc) BAD("%s: %s", where, er.msg);
    }
    image_free(&rgb);
    free(bytes);
    if (rc) return free(im), -1;
    im->h[0] = h[0], im->h[1] = h[1];
    im->bytes = sizeof(float) * (size_t)im->img.n_tokens * (size_t)im->img.width;
    atomic_init(&im->refs, 2); /* the cache's and the caller's */
    pthread_mutex_lock(&v->mu);
    v->encoded++;
    SvImage *dup = cache_find(v, h); /* another request encoded it meanwhile */
    if (dup) {
        pthread_mutex_unlock(&v->mu);
        atomic_store(&im->refs, 1);
        sv_image_unref(im);
        *out = dup;
        return 0;
    }
    im->next = v->head, v->head = im, v->n++, v->bytes += im->bytes;
    while (v->n > 1 && (v->n > SV_CACHE_MAX || v->bytes > SV_CACHE_BYTES)) { /* drop the least recent */
        SvImage **pp = &v->head;
        while ((*pp)->next) pp = &(*pp)->next;
        SvImage *last = *pp;
        *pp = NULL, v->n--, v->bytes -= last->bytes;
        sv_image_unref(last);
    }
    pthread_mutex_unlock(&v->mu);
    srv_log(LOG_DEBUG, "image %016llx: %d×%d tokens encoded", (unsigned long long)h[0], im->img.gw, im->img.gh);
    *out = im;
    return 0;
}

/* ------------------------------------------------------------------------------------------ jobs */

void job_mm_free(JobMM *mm) {
    if (!mm) return;
    mm_rows_free(&mm->rows);
    for (int i = 0; i < mm->n_imgs; i++) sv_image_unref(mm->imgs[i]);
    free(mm->imgs);
    free(mm);
}

/* The url of an image_url part (the object form {"url": ...} or a string). */
static const char *part_url(const cJSON *p) {
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(p, "image_url");
    if (cJSON_IsObject(u)) u = cJSON_GetObjectItemCaseSensitive(u, "url");
    return cJSON_IsString(u) ? u->valuestring : NULL;
}

static bool is_image_part(const cJSON *p) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(p, "type");
    return cJSON_IsObject(p) && cJSON_IsString(t) && !strcmp(t->valuestring, "image_url");
}

/* The key standing for row r of an image in token arrays: negative, from the image's hash and the row. */
static int32_t row_key(const SvImage *im, int r) {
    const uint64_t k[3] = {im->h[0], im->h[1], (uint64_t)r};
    return -(int32_t)(1 + (hash64(k, sizeof k, 0x5bd1e995u) & 0x3fffffff));
}

int sv_prepare(ServerVision *v, const DlEngine *en, const cJSON *messages, int32_t **ids, size_t *n, JobMM **out,
               ApiError *e) {
    *out = NULL;
    int n_imgs = 0;
    for (const cJSON *m = messages ? messages->child : NULL; m; m = m->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        for (const cJSON *p = cJSON_IsArray(c) ? c->child : NULL; p; p = p->next) n_imgs += is_image_part(p);
    }
    if (!n_imgs) return 0;
    const char *where = "messages";
    if (!v) return BAD("images need a vision projector: start the server with --mmproj FILE");
    JobMM *mm = calloc(1, sizeof *mm);
    if (!mm || !(mm->imgs = calloc((size_t)n_imgs, sizeof *mm->imgs))) {
        free(mm);
        return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    int i = 0;
    for (const cJSON *m = messages->child; m; m = m->next, i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        int k = 0;
        for (const cJSON *p = cJSON_IsArray(c) ? c->child : NULL; p; p = p->next, k++) {
            if (!is_image_part(p)) continue;
            char w[64];
            snprintf(w, sizeof w, "messages[%d].content[%d]", i, k);
            const char *url = part_url(p);
            if (!url) {
                job_mm_free(mm);
                where = w;
                return BAD("%s: an image_url part needs image_url.url (a string)", w);
            }
            if (sv_image_from_url(v, url, w, &mm->imgs[mm->n_imgs], e)) return job_mm_free(mm), -1;
            mm->n_imgs++;
        }
    }
    Err er = {{0}};
    const MmImage **imgs = malloc(sizeof *imgs * (size_t)n_imgs);
    if (!imgs) return job_mm_free(mm), api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    for (int k = 0; k < n_imgs; k++) imgs[k] = &mm->imgs[k]->img;
    const int32_t pad = dl_token_id(en, "<|image_pad|>");
    int rc = mm_rows_build(*ids, *n, pad, imgs, n_imgs, 0, &mm->rows, &er);
    free(imgs);
    if (rc) {
        job_mm_free(mm);
        return BAD("the chat template did not place the images (%s): images need the qwen35 chat format", er.msg);
    }
    int32_t *keys = malloc(sizeof *keys * mm->rows.n);
    if (!keys) return job_mm_free(mm), api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    int img = -1, r0 = 0;
    for (size_t r = 0; r < mm->rows.n; r++) {
        if (!mm->rows.row[r]) {
            keys[r] = mm->rows.tok[r];
            continue;
        }
        if (r == 0 || !mm->rows.row[r - 1] || r - (size_t)r0 == (size_t)mm->imgs[img]->img.n_tokens) img++, r0 = (int)r;
        keys[r] = row_key(mm->imgs[img], (int)r - r0);
    }
    mm->width = mm->imgs[0]->img.width;
    free(*ids);
    *ids = keys, *n = mm->rows.n;
    *out = mm;
    return 0;
}

int sv_eval(DlSession *s, const JobMM *mm, size_t a, size_t b, DlError *err) {
    return mm_rows_eval(s, &mm->rows, mm->width, a, b, err);
}
