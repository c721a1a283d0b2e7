/* test_vision_oracle.c — deltallm's vision path against llama.cpp v0.4.0's own mtmd, from outputs recorded in
 * tests/data/vision_oracle/ by tools/mtmd_oracle.py (which runs our harness tools/mtmd_ref.c on a build of
 * llama.cpp's libmtmd; CI needs no llama.cpp). The inputs are rebuilt here bit for bit (seeded synthetic files):
 *   - a tiny qwen35 text model with Qwen3.5's vision tokens (width 64), two tiny projectors onto it (F32 and
 *     F16 weights), and two PNG images whose sizes make mtmd up-scale (45×29) and down-scale (70×50);
 *   - checked: the pre-processed pixels (bicubic resize, padding, normalisation) byte for byte; the encoder's
 *     embeddings (exact and fast arithmetic) within the recorded limits; the image prompt's logits (every
 *     text row after the image): top-1 and max |Δ| / std.
 * `DELTALLM_ORACLE_DIR=D build/tests vision/oracle_inputs` writes the inputs into D for the harness. */
#include "test.h"
#include "test_vision_oracle.h"

#include "cli/cli_image.h"
#include "deltallm.h"
#include "base/pool.h"
#include "gguf/format.h"
#include "image/image.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels_cpu.h"
#include "model/synth.h"
#include "vision/encoder.h"
#include "vision/mmproj.h"
#include "vision/mmproj_synth.h"
#include "vision/preprocess.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint8_t *test_png_encode(const uint8_t *rgb, int w, int h, size_t *size); /* test_vision.c */

static const struct {
    const char *name;
    int w, h;
    unsigned seed;
} k_images[] = {{"up", 45, 29, 3}, {"down", 70, 50, 5}};
static const char *k_mmproj[] = {"f32", "f16"};

/* structure in both axes and noise: what makes a resize's rounding show */
static uint8_t *oracle_image(int w, int h, unsigned seed) {
    uint8_t *p = malloc((size_t)w * h * 3);
    uint32_t s = seed * 2654435761u + 7;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                s = s * 1664525u + 1013904223u;
                const float v = 128.0f + 90.0f * sinf(0.31f * (float)x + 1.7f * (float)c) * cosf(0.23f * (float)y) +
                                (float)(s >> 26) - 32.0f;
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

static int write_file(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const int ok = fwrite(buf, 1, n, f) == n;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* model.gguf, mmproj-f32.gguf, mmproj-f16.gguf, up.png, down.png in dir */
static int oracle_inputs(const char *dir, Err *err) {
    char path[600];
    SynthSpec sp;
    if (synth_preset(&sp, "qwen3.5-0.8b", err)) return -1;
    sp.n_embd = 64, sp.n_layer = 2, sp.full_attn_interval = 2, sp.n_head = 2, sp.n_head_kv = 1, sp.head_dim = 64;
    sp.n_rot = 64, sp.n_ff = 128, sp.ssm_d_state = 16, sp.ssm_n_group = 2, sp.ssm_dt_rank = 4, sp.ctx = 4096;
    sp.seed = 31;
    snprintf(path, sizeof path, "%s/model.gguf", dir);
    if (synth_write(&sp, test_data("vocab/ggml-vocab-qwen35.gguf"), path, err)) return -1;
    for (int i = 0; i < 2; i++) {
        MmprojSpec mp;
        if (mmproj_synth_preset(&mp, "tiny", err)) return -1;
        mp.seed = 11 + (uint64_t)i;
        if (i == 1) mp.wtype = FMT_F16;
        snprintf(path, sizeof path, "%s/mmproj-%s.gguf", dir, k_mmproj[i]);
        if (mmproj_synth_write(&mp, path, err)) return -1;
    }
    for (size_t i = 0; i < sizeof k_images / sizeof k_images[0]; i++) {
        uint8_t *rgb = oracle_image(k_images[i].w, k_images[i].h, k_images[i].seed);
        size_t n;
        uint8_t *png = test_png_encode(rgb, k_images[i].w, k_images[i].h, &n);
        snprintf(path, sizeof path, "%s/%s.png", dir, k_images[i].name);
        const int rc = write_file(path, png, n);
        free(png), free(rgb);
        if (rc) return err_set(err, "cannot write %s", path);
    }
    return 0;
}

static const char *inputs_dir(void) {
    static char dir[512];
    if (dir[0]) return dir;
    snprintf(dir, sizeof dir, "%s/oracle", test_tmpdir());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    Err err = {{0}};
    if (system(cmd) != 0 || oracle_inputs(dir, &err)) {
        test_note("oracle inputs: %s", err.msg);
        dir[0] = '\0';
        return NULL;
    }
    return dir;
}

TEST(vision, oracle_inputs) {
    const char *out = getenv("DELTALLM_ORACLE_DIR");
    Err err = {{0}};
    if (out) {
        REQUIRE_MSG(oracle_inputs(out, &err) == 0, "%s", err.msg);
        test_note("oracle inputs written to %s", out);
        return;
    }
    const char *dir = inputs_dir();
    REQUIRE(dir);
    /* same seeds, same bytes: the recorded outputs stay the oracle's for these files */
    char again[600], cmd[700], a[700], b[700];
    snprintf(again, sizeof again, "%s/again", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", again);
    REQUIRE(system(cmd) == 0 && oracle_inputs(again, &err) == 0);
    const char *files[] = {"model.gguf", "mmproj-f32.gguf", "mmproj-f16.gguf", "up.png", "down.png"};
    for (int i = 0; i < 5; i++) {
        snprintf(a, sizeof a, "%s/%s", dir, files[i]);
        snprintf(b, sizeof b, "%s/%s", again, files[i]);
        size_t n1 = 0, n2 = 0;
        uint8_t *x = test_read_file(a, &n1), *y = test_read_file(b, &n2);
        CHECK_MSG(x && y && n1 == n2 && !memcmp(x, y, n1), "%s differs between two writes", files[i]);
        free(x), free(y);
    }
}

static void *read_exact(const char *path, size_t n) {
    size_t size = 0;
    void *f = test_read_file(path, &size);
    if (f && size != n) {
        test_note("%s: %zu bytes, expected %zu", path, size, n);
        free(f);
        return NULL;
    }
    return f;
}

static double stddev(const float *v, size_t n) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) s += v[i], s2 += (double)v[i] * v[i];
    return sqrt(fmax(s2 / n - (s / n) * (s / n), 0));
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* Pre-processing byte for byte; then, on mtmd's own pixels (so that the encoders alone are compared), against
 * the recorded float64 reference (tools/vision_ref.py): exact mode within 1e-4·std; the fast arithmetic no
 * farther from it than llama.cpp's mtmd is ("within llama.cpp's own distance"), and close to mtmd itself. */
TEST(vision, mtmd_oracle_embeddings) {
#if DL_PNG
    const char *dir = inputs_dir();
    REQUIRE(dir);
    for (int mi = 0; mi < 2; mi++) {
        char path[700];
        Err err = {{0}};
        snprintf(path, sizeof path, "%s/mmproj-%s.gguf", dir, k_mmproj[mi]);
        Mmproj *m = mmproj_open(path, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        for (size_t ii = 0; ii < sizeof k_images / sizeof k_images[0]; ii++) {
            const char *im = k_images[ii].name, *mp = k_mmproj[mi];
            snprintf(path, sizeof path, "%s/%s.png", dir, im);
            ImageRGB img;
            REQUIRE_MSG(image_load(path, &img, &err) == 0, "%s", err.msg);
            float *pix = NULL;
            int nx, ny;
            REQUIRE(vision_preprocess(m, img.rgb, img.w, img.h, &pix, &nx, &ny, &err) == 0);
            const size_t np = 3 * (size_t)nx * ny;
            snprintf(path, sizeof path, "%s/%s-%s.pix.f32", test_data("vision_oracle"), im, mp);
            float *mpix = read_exact(path, np * sizeof(float));
            REQUIRE_MSG(mpix, "%s: missing or not %d×%d (deltallm's size)", path, nx, ny);
            size_t diff = 0;
            for (size_t i = 0; i < np; i++) diff += pix[i] != mpix[i];
            CHECK_MSG(diff == 0, "%s %s: %zu of %zu pre-processed values differ from mtmd's", im, mp, diff, np);
            const int T = vision_n_tokens(m, nx, ny), W = mmproj_out_width(m);
            const size_t n = (size_t)T * W;
            snprintf(path, sizeof path, "%s/%s-%s.embd.f32", test_data("vision_oracle"), im, mp);
            float *mt = read_exact(path, n * sizeof(float));
            snprintf(path, sizeof path, "%s/%s-%s.ref.f32", test_data("vision_oracle"), im, mp);
            float *ref = read_exact(path, n * sizeof(float));
            REQUIRE(mt && ref);
            const double sd = stddev(ref, n), d_mtmd = max_abs_diff(mt, ref, n) / sd;
            float *ex = malloc(sizeof(float) * n), *fa = malloc(sizeof(float) * n);
            Pool *pool = pool_create(2, &err);
            const VisionRun rex = {ops_cpu(isa_best()), MATMUL_EXACT, pool, ISA_REF, NULL};
            const VisionRun rfa = {ops_cpu(isa_best()), MATMUL_FAST, pool, isa_best(), NULL};
            REQUIRE(vision_encode(m, mpix, nx, ny, &rex, ex, &err) == 0 && vision_encode(m, mpix, nx, ny, &rfa, fa, &err) == 0);
            const double d_ex = max_abs_diff(ex, ref, n) / sd, d_fa = max_abs_diff(fa, ref, n) / sd;
            const double d_fm = max_abs_diff(fa, mt, n) / sd;
            test_note("%s %s (%d×%d, %d tokens), max |Δ| to float64 in std: mtmd %.2g, exact %.2g, fast %.2g; fast to mtmd %.2g",
                      im, mp, nx, ny, T, d_mtmd, d_ex, d_fa, d_fm);
            CHECK_MSG(d_ex <= 1e-4, "%s %s: exact mode %.3g·std from the float64 reference", im, mp, d_ex);
            CHECK_MSG(d_fa <= d_mtmd, "%s %s: fast mode %.3g·std from float64, farther than mtmd (%.3g·std)", im, mp, d_fa,
                      d_mtmd);
            CHECK_MSG(d_fm <= 2 * d_mtmd, "%s %s: fast mode %.3g·std from mtmd", im, mp, d_fm);
            pool_destroy(pool);
            free(ex), free(fa), free(mt), free(ref), free(mpix), free(pix);
            image_free(&img);
        }
        mmproj_close(m);
    }
#else
    test_skip("PNG support not built (libpng-dev missing)");
#endif
}

/* The recorded logits (tools/mtmd_oracle.py): "DLVO", then int32 n1, n2, n_sample, n_vocab; int32 chunk1[n1]
 * (the text before the image, ending in <|vision_start|>), chunk2[n2] (from <|vision_end|> on), sample[n_sample]
 * (the vocabulary ids kept); int32 argmax[n2]; float std[n2]; float logits[n2][n_sample] (every row of chunk2). */
typedef struct OracleLogits {
    int32_t n1, n2, ns, nv;
    int32_t *c1, *c2, *ids, *top;
    float *sd, *lg;
    void *buf;
} OracleLogits;

static int read_logits(const char *path, OracleLogits *o) {
    size_t size;
    int32_t *b = test_read_file(path, &size);
    if (!b || size < 20 || memcmp(b, "DLVO", 4)) return free(b), -1;
    o->buf = b, o->n1 = b[1], o->n2 = b[2], o->ns = b[3], o->nv = b[4];
    const size_t need = 4 * (5 + (size_t)o->n1 + 3 * (size_t)o->n2 + o->ns + (size_t)o->n2 * o->ns);
    if (o->n1 < 1 || o->n2 < 1 || o->ns < 1 || size != need) return free(b), -1;
    o->c1 = b + 5, o->c2 = o->c1 + o->n1, o->ids = o->c2 + o->n2, o->top = o->ids + o->ns;
    o->sd = (float *)(o->top + o->n2), o->lg = o->sd + o->n2;
    return 0;
}

/* One run of the image prompt: chunk1, the image, chunk2's first token in one go, then chunk2 a token at a
 * time; the logits of every chunk2 row on the recorded ids into lg [n2][ns]; the argmax of each into am. */
static void prompt_logits(const OracleLogits *o, const char *model, const char *arith, const CliImage *img, float *lg,
                          int32_t *am) {
    DlError err = {{0}};
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.n_threads = 2, p.n_ctx = 512, p.n_batch = 64, p.arith = arith;
    DlEngine *e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    REQUIRE(dl_engine_info(e)->n_vocab == o->nv);
    DlSession *s = dl_session_new(e, &err);
    REQUIRE(s);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(o->n1 + 2));
    memcpy(ids, o->c1, sizeof(int32_t) * (size_t)o->n1);
    ids[o->n1] = dl_token_id(e, "<|image_pad|>"), ids[o->n1 + 1] = o->c2[0];
    size_t n_eval;
    REQUIRE_MSG(cli_image_eval(e, s, ids, (size_t)o->n1 + 2, img, &n_eval, &err) == 0, "%s", err.msg);
    for (int r = 0; r < o->n2; r++) {
        if (r) REQUIRE(dl_session_eval(s, &o->c2[r], 1, &err) == 0);
        const float *l = dl_session_logits(s);
        am[r] = 0;
        for (int i = 1; i < o->nv; i++)
            if (l[i] > l[am[r]]) am[r] = i;
        for (int i = 0; i < o->ns; i++) lg[(size_t)r * o->ns + i] = l[o->ids[i]];
    }
    free(ids);
    dl_session_free(s);
    dl_engine_close(e);
}

/* max over rows of max |a − b| / std(that row of the oracle) */
static double rows_dist(const OracleLogits *o, const float *a, const float *b) {
    double w = 0;
    for (int r = 0; r < o->n2; r++)
        for (int i = 0; i < o->ns; i++)
            w = fmax(w, fabs((double)a[(size_t)r * o->ns + i] - b[(size_t)r * o->ns + i]) / o->sd[r]);
    return w;
}

static int top1_agree(const OracleLogits *o, const int32_t *am) {
    int k = 0;
    for (int r = 0; r < o->n2; r++) k += am[r] == o->top[r];
    return k;
}

/* The image prompt's logits against llama.cpp's (F32 projector, the up-scaled image, a width-64 qwen35):
 *   - the text side alone: mtmd's own recorded embeddings through deltallm's image path in the llama
 *     arithmetic give llama.cpp's logits (measured: bit for bit);
 *   - the whole path as `run --image` takes it (deltallm's pre-processing and fast encoder, the default
 *     arithmetic): the same argmax on every row, and no farther from the exact arithmetic (deltallm's exact
 *     encoder and exact text model) than llama.cpp's own logits are. */
TEST(vision, mtmd_oracle_logits) {
#if DL_PNG
    const char *dir = inputs_dir();
    REQUIRE(dir);
    OracleLogits o = {0};
    char path[700], model[700], mmproj[700];
    snprintf(path, sizeof path, "%s/prompt-f32.bin", test_data("vision_oracle"));
    REQUIRE_MSG(read_logits(path, &o) == 0, "%s: missing or malformed", path);
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    snprintf(mmproj, sizeof mmproj, "%s/mmproj-f32.gguf", dir);
    snprintf(path, sizeof path, "%s/up.png", dir);
    const size_t nl = (size_t)o.n2 * o.ns;
    float *l_llama = malloc(sizeof(float) * nl), *l_ex = malloc(sizeof(float) * nl), *l_fa = malloc(sizeof(float) * nl);
    int32_t *am = malloc(sizeof(int32_t) * (size_t)o.n2), *am_ex = malloc(sizeof(int32_t) * (size_t)o.n2);
    CliImage img = {0};
    DlError err = {{0}};
    {   /* an engine only to size the image for cli_image_encode */
        DlEngineParams p;
        dl_engine_params_init(&p);
        p.model_path = model, p.n_threads = 1, p.n_ctx = 256;
        DlEngine *e = dl_engine_open(&p, &err);
        REQUIRE_MSG(e, "%s", err.msg);
        REQUIRE_MSG(cli_image_encode(e, mmproj, path, 2, &img, &err) == 0, "%s", err.msg);
        dl_engine_close(e);
    }
    const size_t ne = (size_t)img.n_tokens * img.width;
    float *own = malloc(sizeof(float) * ne);
    memcpy(own, img.embd, sizeof(float) * ne);
    /* 1. the text side: mtmd's embeddings, the llama arithmetic */
    snprintf(path, sizeof path, "%s/up-f32.embd.f32", test_data("vision_oracle"));
    float *mt = read_exact(path, ne * sizeof(float));
    REQUIRE(mt);
    memcpy(img.embd, mt, sizeof(float) * ne);
    prompt_logits(&o, model, "llama", &img, l_llama, am);
    const double d_text = rows_dist(&o, l_llama, o.lg);
    test_note("text side (mtmd's embeddings, llama arithmetic): top-1 %d/%d, max |Δ| %.2g·std", top1_agree(&o, am), o.n2, d_text);
    CHECK_MSG(top1_agree(&o, am) == o.n2 && d_text <= 1e-5, "text side: max |Δ| %.3g·std", d_text);
    /* 2. deltallm's exact encoder and exact text model: the yardstick */
    {
        Err e2 = {{0}};
        Mmproj *m = mmproj_open(mmproj, &e2);
        REQUIRE(m);
        ImageRGB rgb;
        snprintf(path, sizeof path, "%s/up.png", dir);
        REQUIRE(image_load(path, &rgb, &e2) == 0);
        float *pix;
        int nx, ny;
        REQUIRE(vision_preprocess(m, rgb.rgb, rgb.w, rgb.h, &pix, &nx, &ny, &e2) == 0);
        const VisionRun rex = {ops_cpu(isa_best()), MATMUL_EXACT, NULL, ISA_REF, NULL};
        REQUIRE(vision_encode(m, pix, nx, ny, &rex, img.embd, &e2) == 0);
        free(pix);
        image_free(&rgb);
        mmproj_close(m);
    }
    prompt_logits(&o, model, "exact", &img, l_ex, am_ex);
    /* 3. the whole default path */
    memcpy(img.embd, own, sizeof(float) * ne);
    prompt_logits(&o, model, NULL, &img, l_fa, am);
    const double d_llama = rows_dist(&o, o.lg, l_ex), d_fast = rows_dist(&o, l_fa, l_ex), d_fm = rows_dist(&o, l_fa, o.lg);
    test_note("max |Δ| to the exact path in std: llama.cpp %.2g, deltallm default %.2g; deltallm default to llama.cpp %.2g; "
              "top-1 vs llama.cpp: default %d/%d, exact %d/%d",
              d_llama, d_fast, d_fm, top1_agree(&o, am), o.n2, top1_agree(&o, am_ex), o.n2);
    CHECK_MSG(top1_agree(&o, am) == o.n2, "default path: top-1 %d/%d", top1_agree(&o, am), o.n2);
    /* measured 0.13 vs 0.14 (the text model's default arithmetic makes most of it); 20% of margin */
    CHECK_MSG(d_fast <= 1.2 * d_llama, "default path %.3g·std from exact, farther than llama.cpp (%.3g·std)", d_fast, d_llama);
    free(l_llama), free(l_ex), free(l_fa), free(am), free(am_ex), free(own), free(mt), free(o.buf);
    cli_image_free(&img);
#else
    test_skip("PNG support not built (libpng-dev missing)");
#endif
}

/* ---------------------------------------------------------------- the oracle for the entry points' tests
 * The recorded prompt, `<|im_start|>user\n<image>Describe the picture.<|im_end|>\n<|im_start|>assistant\n`, is
 * what ChatML renders (Qwen2-VL's template: an image part becomes the vision markers) for one user message
 * [image, "Describe the picture."]; its last row predicts an entry point's first generated token. So each entry
 * point (`run --chat --chat-format chatml --image`, chat's /image, the server's image_url, input_image and
 * Anthropic image block) is checked directly against llama.cpp's recorded logits of that row:
 *   - greedy: the first generated token is llama.cpp's argmax (the limit vision/mtmd_oracle_logits uses: top-1);
 *   - where the entry point gives log-probabilities (the OpenAI server's top_logprobs), the gaps to the top
 *     token, lp[k] − lp[0], against llama.cpp's l[k] − l[0], in units of that row's std, within
 *     VISION_ORACLE_GAP_LIMIT (0.2: twice the 0.087·std per logit measured above, with margin). */
bool test_vision_oracle_files(const char **model, const char **mmproj, const char **png) {
    static char m[700], p[700], i[700];
    const char *dir = inputs_dir();
    if (!dir) return false;
    snprintf(m, sizeof m, "%s/model.gguf", dir);
    snprintf(p, sizeof p, "%s/mmproj-f32.gguf", dir);
    snprintf(i, sizeof i, "%s/up.png", dir);
    *model = m, *mmproj = p, *png = i;
    return true;
}

static const OracleLogits *last_row(void) {
    static OracleLogits o;
    static int state; /* 0 not read, 1 read, -1 missing */
    if (!state) {
        char path[700];
        snprintf(path, sizeof path, "%s/prompt-f32.bin", test_data("vision_oracle"));
        state = read_logits(path, &o) == 0 ? 1 : -1;
    }
    return state > 0 ? &o : NULL;
}

int32_t test_vision_oracle_top1(void) {
    const OracleLogits *o = last_row();
    return o ? o->top[o->n2 - 1] : -1;
}

const int32_t *test_vision_oracle_prompt(int *n1, const int32_t **c2, int *n2) {
    const OracleLogits *o = last_row();
    if (!o) return NULL;
    *n1 = o->n1, *c2 = o->c2, *n2 = o->n2;
    return o->c1;
}

double test_vision_oracle_gap_dist(const int32_t *ids, const double *lp, int n, int *n_cmp) {
    const OracleLogits *o = last_row();
    *n_cmp = 0;
    if (!o || n < 2) return NAN;
    const float *l = o->lg + (size_t)(o->n2 - 1) * o->ns;
    int at0 = -1;
    for (int i = 0; i < o->ns; i++) at0 = o->ids[i] == ids[0] ? i : at0;
    if (at0 < 0) return NAN;
    double worst = 0;
    for (int k = 1; k < n; k++)
        for (int i = 0; i < o->ns; i++)
            if (o->ids[i] == ids[k]) {
                const double want = (double)l[i] - l[at0], have = lp[k] - lp[0];
                worst = fmax(worst, fabs(have - want) / o->sd[o->n2 - 1]);
                ++*n_cmp;
            }
    return worst;
}
