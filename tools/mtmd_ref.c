/* mtmd_ref.c — our oracle harness on llama.cpp v0.4.0's multimodal library (mtmd.h, mtmd-helper.h, llama.h),
 * built by tools/build-mtmd.sh beside the project (never part of deltallm's build). It loads a text model and
 * an mmproj, reads an image file through mtmd's own loader, and writes what deltallm is checked against:
 *   --pix-out F    the pre-processed image as the vision graph receives it (float32 planar [3][ny][nx], read
 *                  from the graph's input tensor "inp_raw" through the scheduler's eval callback)
 *   --embd-out F   the encoder's output embeddings (float32 [n_tokens][n_embd_inp])
 *   --logits-out F the text model's logits for every text token of PROMPT, whose media marker
 *                  (mtmd_default_marker(), "<__media__>") is where the image goes (float32 [n_text][n_vocab])
 *   --json F       sizes, token ids, the image's grid, timings
 *   --bench N      times N encodes of the image (after mtmd's own warm-up) and prints min / mean ms
 * Options: -m MODEL --mmproj F --image F [--rgb WxH (F is raw RGB bytes)] [-p PROMPT] [-t THREADS]
 *          [--flash-attn on|off|auto] [--vocab-only] [--min-tokens N] [--max-tokens N] [--backend-dir D] [-v].
 * Text chunks are decoded with every row's logits kept; the image chunk goes through mtmd_helper_eval_chunk_single
 * (mtmd's own M-RoPE positions). The output is llama.cpp's, byte for byte as it computed it. */
#define _POSIX_C_SOURCE 200809L
#include "ggml-backend.h"
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MTMD_REF_BACKEND_DIR
#define MTMD_REF_BACKEND_DIR ""
#endif

static int g_verbose;

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mtmd_ref: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level >= GGML_LOG_LEVEL_WARN || g_verbose) fputs(text, stderr);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void write_f32(const char *path, const float *v, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(v, sizeof(float), n, f) != n) die("cannot write %s", path);
    fclose(f);
}

/* the eval callback: copies the vision graph's input image (the source named "inp_raw" of any node) */
typedef struct PixGrab {
    float *data;
    int64_t ne[4];
} PixGrab;

static bool grab_cb(struct ggml_tensor *t, bool ask, void *ud) {
    PixGrab *g = ud;
    for (int i = 0; i < GGML_MAX_SRC; i++) {
        struct ggml_tensor *s = t->src[i];
        if (!s || strcmp(s->name, "inp_raw") != 0 || g->data) continue;
        if (ask) return true;
        const size_t n = (size_t)ggml_nelements(s);
        g->data = malloc(sizeof(float) * n);
        if (s->type != GGML_TYPE_F32) die("inp_raw is not F32");
        ggml_backend_tensor_get(s, g->data, 0, sizeof(float) * n);
        memcpy(g->ne, s->ne, sizeof g->ne);
    }
    return ask ? false : true;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *mmproj = NULL, *image = NULL, *prompt = NULL, *pix_out = NULL, *embd_out = NULL;
    const char *logits_out = NULL, *json_out = NULL, *backend_dir = NULL, *fa = "auto";
    int threads = 2, bench = 0, min_tok = -1, max_tok = -1;
    bool vocab_only = false;
    int rgb_w = 0, rgb_h = 0; /* --rgb WxH: the image file is raw RGB bytes */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (die("%s needs a value", a), ""))
        if (!strcmp(a, "-m")) model_path = NEXT();
        else if (!strcmp(a, "--mmproj")) mmproj = NEXT();
        else if (!strcmp(a, "--image")) image = NEXT();
        else if (!strcmp(a, "-p")) prompt = NEXT();
        else if (!strcmp(a, "-t")) threads = atoi(NEXT());
        else if (!strcmp(a, "--pix-out")) pix_out = NEXT();
        else if (!strcmp(a, "--embd-out")) embd_out = NEXT();
        else if (!strcmp(a, "--logits-out")) logits_out = NEXT();
        else if (!strcmp(a, "--json")) json_out = NEXT();
        else if (!strcmp(a, "--bench")) bench = atoi(NEXT());
        else if (!strcmp(a, "--flash-attn")) fa = NEXT();
        else if (!strcmp(a, "--min-tokens")) min_tok = atoi(NEXT());
        else if (!strcmp(a, "--max-tokens")) max_tok = atoi(NEXT());
        else if (!strcmp(a, "--vocab-only")) vocab_only = true;
        else if (!strcmp(a, "--rgb")) {
            if (sscanf(NEXT(), "%dx%d", &rgb_w, &rgb_h) != 2) die("--rgb takes WxH");
        }
        else if (!strcmp(a, "--backend-dir")) backend_dir = NEXT();
        else if (!strcmp(a, "-v")) g_verbose = 1;
        else die("unknown option %s", a);
#undef NEXT
    }
    if (!model_path || !mmproj || !image) die("usage: mtmd_ref -m MODEL --mmproj F --image F [options] (see the file's head)");
    if (logits_out && vocab_only) die("--logits-out needs the model's weights (drop --vocab-only)");
    llama_log_set(log_cb, NULL);
    mtmd_helper_log_set(log_cb, NULL);
    if (ggml_backend_dev_count() == 0) {
        const char *dir = backend_dir ? backend_dir : MTMD_REF_BACKEND_DIR;
        if (dir[0]) ggml_backend_load_all_from_path(dir);
        if (ggml_backend_dev_count() == 0) ggml_backend_load_all();
    }
    llama_backend_init();

    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.vocab_only = vocab_only;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) die("cannot load %s", model_path);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);

    PixGrab grab = {0};
    struct mtmd_context_params cp = mtmd_context_params_default();
    cp.use_gpu = false;
    cp.n_threads = threads;
    cp.print_timings = g_verbose > 0;
    cp.flash_attn_type = !strcmp(fa, "on") ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                         : !strcmp(fa, "off") ? LLAMA_FLASH_ATTN_TYPE_DISABLED : LLAMA_FLASH_ATTN_TYPE_AUTO;
    if (min_tok > 0) cp.image_min_tokens = min_tok;
    if (max_tok > 0) cp.image_max_tokens = max_tok;
    /* cp.warmup stays true, as in llama.cpp's tools: it only reserves the graph's buffers, and it is where
     * "flash attention auto" is resolved (enabled on the CPU); without it the non-flash path would run */
    if (pix_out) cp.cb_eval = grab_cb, cp.cb_eval_user_data = &grab;
    mtmd_context *ctx = mtmd_init_from_file(mmproj, model, cp);
    if (!ctx) die("cannot load the projector %s", mmproj);

    struct mtmd_helper_bitmap_wrapper bw = {0};
    if (rgb_w > 0) {
        const size_t n = (size_t)rgb_w * rgb_h * 3;
        unsigned char *raw = malloc(n);
        FILE *f = fopen(image, "rb");
        if (!raw || !f || fread(raw, 1, n, f) != n) die("cannot read %zu bytes of RGB from %s", n, image);
        fclose(f);
        bw.bitmap = mtmd_bitmap_init((uint32_t)rgb_w, (uint32_t)rgb_h, raw);
        free(raw);
    } else {
        bw = mtmd_helper_bitmap_init_from_file(ctx, image, false, mtmd_helper_init_opt_default());
    }
    if (!bw.bitmap) die("cannot read the image %s", image);
    char text[4096];
    snprintf(text, sizeof text, "%s", prompt ? prompt : mtmd_default_marker());
    mtmd_input_text in = {text, strlen(text), false, true};
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    const mtmd_bitmap *bms[1] = {bw.bitmap};
    if (mtmd_tokenize(ctx, chunks, &in, bms, 1) != 0) die("mtmd_tokenize failed");
    const mtmd_input_chunk *img_chunk = NULL;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++)
        if (mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks, i)) == MTMD_INPUT_CHUNK_TYPE_IMAGE)
            img_chunk = mtmd_input_chunks_get(chunks, i);
    if (!img_chunk) die("no image chunk");
    const mtmd_image_tokens *it = mtmd_input_chunk_get_tokens_image(img_chunk);
    const size_t n_img = mtmd_image_tokens_get_n_tokens(it);
    const int n_embd = llama_model_n_embd_inp(model);
    struct mtmd_decoder_pos last = mtmd_image_tokens_get_decoder_pos(it, 0, n_img - 1);
    const int gw = (int)last.x + 1, gh = (int)last.y + 1;

    double t0 = now_ms();
    if (mtmd_encode_chunk(ctx, img_chunk) != 0) die("mtmd_encode_chunk failed");
    const double t_first = now_ms() - t0;
    const float *embd = mtmd_get_output_embd(ctx);
    if (embd_out) write_f32(embd_out, embd, n_img * (size_t)n_embd);
    if (pix_out) {
        if (!grab.data) die("the vision graph had no inp_raw input");
        write_f32(pix_out, grab.data, (size_t)(grab.ne[0] * grab.ne[1] * grab.ne[2] * grab.ne[3]));
    }
    double b_min = 0, b_sum = 0;
    for (int r = 0; r < bench; r++) {
        t0 = now_ms();
        if (mtmd_encode_chunk(ctx, img_chunk) != 0) die("mtmd_encode_chunk failed");
        const double dt = now_ms() - t0;
        b_sum += dt;
        if (r == 0 || dt < b_min) b_min = dt;
    }
    if (bench) printf("mtmd encode: %zu tokens (%d×%d merged), %d threads: min %.1f ms, mean %.1f ms over %d\n", n_img, gw, gh,
                      threads, b_min, b_sum / bench, bench);

    /* the text model on the prompt: text rows with logits, the image through mtmd's helper */
    int n_text = 0, n_vocab = llama_vocab_n_tokens(vocab), chunk_n[16], n_chunks = 0;
    int32_t *toks = NULL;
    float *logits = NULL;
    llama_pos n_past = 0;
    if (logits_out) {
        struct llama_context_params lp = llama_context_default_params();
        lp.n_ctx = 4096, lp.n_batch = 2048, lp.n_ubatch = 2048, lp.n_threads = lp.n_threads_batch = threads;
        lp.type_k = lp.type_v = GGML_TYPE_F32;
        lp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
        lp.n_seq_max = 1;
        struct llama_context *lc = llama_init_from_model(model, lp);
        if (!lc) die("cannot make a llama context");
        size_t total = 0;
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
            const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
            if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
                size_t n;
                mtmd_input_chunk_get_tokens_text(c, &n);
                total += n;
            }
        }
        toks = malloc(sizeof(int32_t) * (total ? total : 1));
        logits = malloc(sizeof(float) * (total ? total : 1) * (size_t)n_vocab);
        for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
            const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
            if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_TEXT) {
                llama_pos np;
                if (mtmd_helper_eval_chunk_single(ctx, lc, c, n_past, 0, 2048, false, &np)) die("image decode failed");
                n_past = np;
                continue;
            }
            size_t n;
            const llama_token *tk = mtmd_input_chunk_get_tokens_text(c, &n);
            if (n_chunks < 16) chunk_n[n_chunks++] = (int)n;
            if (!n) continue;
            struct llama_batch b = llama_batch_init((int32_t)n, 0, 1);
            for (size_t k = 0; k < n; k++) {
                b.token[k] = tk[k], b.pos[k] = n_past + (llama_pos)k, b.n_seq_id[k] = 1, b.seq_id[k][0] = 0, b.logits[k] = 1;
                toks[n_text + k] = tk[k];
            }
            b.n_tokens = (int32_t)n;
            if (llama_decode(lc, b)) die("llama_decode failed");
            for (size_t k = 0; k < n; k++)
                memcpy(logits + (size_t)(n_text + k) * n_vocab, llama_get_logits_ith(lc, (int32_t)k), sizeof(float) * (size_t)n_vocab);
            llama_batch_free(b);
            n_text += (int)n, n_past += (llama_pos)n;
        }
        write_f32(logits_out, logits, (size_t)n_text * n_vocab);
        llama_free(lc);
    }
    if (json_out) {
        FILE *f = fopen(json_out, "w");
        if (!f) die("cannot write %s", json_out);
        fprintf(f, "{\"n_img_tokens\": %zu, \"grid_w\": %d, \"grid_h\": %d, \"n_embd\": %d, \"pix_ne\": [%lld, %lld, %lld],\n",
                n_img, gw, gh, n_embd, (long long)grab.ne[0], (long long)grab.ne[1], (long long)grab.ne[2]);
        fprintf(f, " \"threads\": %d, \"first_encode_ms\": %.2f, \"bench_min_ms\": %.2f, \"bench_mean_ms\": %.2f, \"bench_reps\": %d,\n",
                threads, t_first, b_min, bench ? b_sum / bench : 0.0, bench);
        fprintf(f, " \"n_vocab\": %d, \"n_past\": %d, \"text_tokens\": [", n_vocab, (int)n_past);
        for (int i = 0; i < n_text; i++) fprintf(f, "%s%d", i ? ", " : "", toks[i]);
        fprintf(f, "], \"text_chunks\": [");
        for (int i = 0; i < n_chunks; i++) fprintf(f, "%s%d", i ? ", " : "", chunk_n[i]);
        fprintf(f, "]}\n");
        fclose(f);
    }
    free(toks), free(logits), free(grab.data);
    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bw.bitmap);
    mtmd_free(ctx);
    llama_model_free(model);
    return 0;
}
