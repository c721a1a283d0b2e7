/* test_vision.c — the vision path (src/vision/): the mmproj reader's validation (good file, every missing or
 * misshapen key and tensor refused in one line), the synthetic mmproj writer, and the encoder against the
 * float64 numpy reference tools/vision_ref.py (exact mode within 1e-4·std) on a tiny synthetic tower. */
#include "test.h"

#include "gguf/format.h"
#include "gguf/gguf_writer.h"
#include "vision/encoder.h"
#include "vision/mmproj.h"
#include "vision/mmproj_synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint8_t *tiny_file(int n_deepstack, size_t *size) {
    MmprojSpec sp;
    Err err = {{0}};
    if (mmproj_synth_preset(&sp, "tiny", &err)) return NULL;
    sp.n_deepstack = n_deepstack;
    sp.deepstack[0] = 0;
    uint8_t *buf = NULL;
    if (mmproj_synth_write_mem(&sp, &buf, size, &err)) {
        test_note("synth: %s", err.msg);
        return NULL;
    }
    return buf;
}

static Mmproj *open_mem(const uint8_t *buf, size_t size, Err *err) {
    Gguf *g = gguf_open_memory(buf, size, err);
    return g ? mmproj_from_gguf(g, err) : NULL;
}

TEST(vision, mmproj_reads_synthetic) {
    size_t size;
    uint8_t *buf = tiny_file(1, &size);
    REQUIRE(buf);
    Err err = {{0}};
    Mmproj *m = open_mem(buf, size, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    CHECK(m->n_embd == 32 && m->n_layer == 2 && m->n_head == 2 && m->d_head == 16 && m->n_ff == 64);
    CHECK(m->proj_dim == 64 && m->patch_size == 4 && m->n_merge == 2 && m->n_pos_side == 4);
    CHECK(m->n_deepstack == 1 && m->layers[0].deepstack && !m->layers[1].deepstack);
    CHECK(mmproj_out_width(m) == 128);
    CHECK(m->min_pixels == 8 * 64 && m->max_pixels == 4096 * 64);
    CHECK(fabsf(m->mean[1] - 0.5f) < 1e-7f && fabsf(m->std[2] - 0.5f) < 1e-7f);
    CHECK(m->patch0.cols == 48 && m->patch0.rows == 32 && m->mm0.cols == 128 && m->mm2.rows == 64);
    mmproj_close(m);
    free(buf);
}

/* a copy of the good file with one key dropped or replaced, or one tensor dropped or reshaped */
typedef struct Mut {
    const char *drop_key;
    const char *set_key; /* replaced by u32 set_val, or a string when set_str */
    uint32_t set_val;
    const char *set_str;
    const char *drop_tensor;
    const char *shape_tensor; /* its ne[0] doubled (data repeated from the start: only the shape matters) */
    const char *expect;       /* a substring of the error */
} Mut;

static uint8_t *mutate(const uint8_t *src, size_t n, const Mut *mu, size_t *size) {
    Err err = {{0}};
    Gguf *g = gguf_open_memory(src, n, &err);
    if (!g) return NULL;
    GgufWriter *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    const char *skip[2] = {mu->drop_key ? mu->drop_key : "\x01", mu->set_key ? mu->set_key : "\x01"};
    gguf_w_copy_kv(w, g, skip, 2);
    if (mu->set_key && mu->set_str) gguf_w_str(w, mu->set_key, mu->set_str);
    else if (mu->set_key) gguf_w_u32(w, mu->set_key, mu->set_val);
    void *big = calloc(1, 1 << 20);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        if (mu->drop_tensor && !strcmp(t->name, mu->drop_tensor)) continue;
        if (mu->shape_tensor && !strcmp(t->name, mu->shape_tensor)) {
            int64_t ne[4];
            memcpy(ne, t->ne, sizeof ne);
            ne[0] *= 2;
            gguf_w_tensor(w, t->name, t->type, t->n_dims, ne, big, NULL, NULL, &err);
            continue;
        }
        gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL, &err);
    }
    uint8_t *out = NULL;
    if (gguf_writer_write_mem(w, &out, size, &err)) out = NULL;
    gguf_writer_free(w);
    free(big);
    gguf_close(g);
    return out;
}

TEST(vision, mmproj_refuses_bad_files) {
    size_t size;
    uint8_t *buf = tiny_file(1, &size);
    REQUIRE(buf);
    const Mut muts[] = {
        {.drop_key = "clip.projector_type", .expect = "no clip.projector_type"},
        {.set_key = "clip.projector_type", .set_str = "mlp", .expect = "'mlp' is not supported"},
        {.set_key = "general.architecture", .set_str = "qwen35", .expect = "not 'clip'"},
        {.drop_key = "clip.vision.embedding_length", .expect = "clip.vision.embedding_length"},
        {.drop_key = "clip.vision.block_count", .expect = "clip.vision.block_count"},
        {.drop_key = "clip.vision.attention.layer_norm_epsilon", .expect = "layer_norm_epsilon"},
        {.drop_key = "clip.vision.image_mean", .expect = "image_mean"},
        {.drop_key = "clip.use_gelu", .expect = "use_gelu"},
        {.set_key = "clip.vision.attention.head_count", .set_val = 3, .expect = "not a multiple of head_count"},
        {.set_key = "clip.vision.attention.head_count", .set_val = 16, .expect = "multiple of 4"},
        {.set_key = "clip.vision.spatial_merge_size", .set_val = 3, .expect = "merges 2"},
        {.set_key = "clip.vision.patch_size", .set_val = 0, .expect = "out of range"},
        {.set_key = "clip.vision.block_count", .set_val = 3, .expect = "v.blk.2.attn_qkv.weight' is missing"},
        {.drop_tensor = "v.patch_embd.weight.1", .expect = "'v.patch_embd.weight.1' is missing"},
        {.drop_tensor = "mm.2.bias", .expect = "'mm.2.bias' is missing"},
        {.drop_tensor = "v.blk.1.ln2.bias", .expect = "'v.blk.1.ln2.bias' is missing"},
        {.drop_tensor = "v.deepstack.0.fc2.bias", .expect = "5 of its 6"},
        {.shape_tensor = "v.blk.0.attn_qkv.weight", .expect = "'v.blk.0.attn_qkv.weight' has shape"},
        {.shape_tensor = "mm.0.bias", .expect = "'mm.0.bias' has shape"},
        {.shape_tensor = "v.position_embd.weight", .expect = "v.position_embd.weight"},
        {.drop_key = "clip.vision.is_deepstack_layers", .set_key = NULL, .drop_tensor = NULL, .expect = NULL},
    };
    for (size_t i = 0; i < sizeof muts / sizeof muts[0]; i++) {
        size_t n;
        uint8_t *bad = mutate(buf, size, &muts[i], &n);
        CHECK_MSG(bad != NULL, "mutation %zu", i);
        if (!bad) continue;
        Err err = {{0}};
        Mmproj *m = open_mem(bad, n, &err);
        if (muts[i].expect) {
            CHECK_MSG(!m && strstr(err.msg, muts[i].expect) && !strchr(err.msg, '\n'), "mutation %zu: got '%s'", i,
                      m ? "(accepted)" : err.msg);
        } else {
            CHECK_MSG(m != NULL, "mutation %zu refused: %s", i, err.msg); /* the array is optional */
        }
        mmproj_close(m);
        free(bad);
    }
    free(buf);
}

static float *read_f32(const char *path, size_t n) {
    size_t size = 0;
    float *f = test_read_file(path, &size);
    if (f && size != n * sizeof(float)) {
        free(f);
        return NULL;
    }
    return f;
}

/* pixels with structure in both axes (and a few values past ±1, as normalised photos have) */
static void make_pixels(float *pix, int nx, int ny, unsigned seed) {
    uint32_t s = seed * 2654435761u + 1;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < ny; y++)
            for (int x = 0; x < nx; x++) {
                s = s * 1664525u + 1013904223u;
                const float noise = (float)(s >> 8) / 16777216.0f - 0.5f;
                pix[((size_t)c * ny + y) * nx + x] = sinf(0.3f * (float)x + (float)c) * cosf(0.21f * (float)y) + 0.6f * noise;
            }
}

static void check_against_ref(int n_deepstack, int nx, int ny) {
    const char *dir = test_tmpdir();
    char mp[512], pp[512], op[512], cmd[2048];
    snprintf(mp, sizeof mp, "%s/vis-ds%d.gguf", dir, n_deepstack);
    snprintf(pp, sizeof pp, "%s/vis-ds%d-%dx%d.pix", dir, n_deepstack, nx, ny);
    snprintf(op, sizeof op, "%s/vis-ds%d-%dx%d.ref", dir, n_deepstack, nx, ny);
    MmprojSpec sp;
    Err err = {{0}};
    REQUIRE(mmproj_synth_preset(&sp, "tiny", &err) == 0);
    sp.n_deepstack = n_deepstack, sp.deepstack[0] = 1;
    REQUIRE_MSG(mmproj_synth_write(&sp, mp, &err) == 0, "%s", err.msg);
    Mmproj *m = mmproj_open(mp, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    float *pix = malloc(sizeof(float) * 3 * (size_t)nx * ny);
    make_pixels(pix, nx, ny, (unsigned)(nx + 7 * ny));
    FILE *f = fopen(pp, "wb");
    REQUIRE(f && fwrite(pix, sizeof(float), 3 * (size_t)nx * ny, f) == 3 * (size_t)nx * ny);
    fclose(f);
    const int T = vision_n_tokens(m, nx, ny), W = mmproj_out_width(m);
    REQUIRE(T > 0);
    float *out = malloc(sizeof(float) * (size_t)T * W);
    VisionRun run = {.mode = MATMUL_EXACT};
    REQUIRE_MSG(vision_encode(m, pix, nx, ny, &run, out, &err) == 0, "%s", err.msg);
    snprintf(cmd, sizeof cmd, "%s tools/vision_ref.py %s %s %d %d %s", access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3",
             mp, pp, nx, ny, op);
    REQUIRE_MSG(system(cmd) == 0, "%s failed (python3 with numpy needed)", cmd);
    float *ref = read_f32(op, (size_t)T * W);
    REQUIRE(ref);
    double s = 0, s2 = 0, maxd = 0;
    const size_t n = (size_t)T * W;
    for (size_t i = 0; i < n; i++) s += ref[i], s2 += (double)ref[i] * ref[i];
    const double sd = sqrt(s2 / n - (s / n) * (s / n));
    for (size_t i = 0; i < n; i++) maxd = fmax(maxd, fabs((double)out[i] - ref[i]));
    test_note("encoder %dx%d (%d tokens × %d, deepstack %d): max |Δ| %.3g = %.3g·std (std %.3g)", nx, ny, T, W,
              n_deepstack, maxd, maxd / sd, sd);
    CHECK_MSG(sd > 0.05 && maxd <= 1e-4 * sd, "max |Δ| %.3g > 1e-4·std %.3g", maxd, sd);
    free(ref), free(out), free(pix);
    mmproj_close(m);
}

TEST(vision, encoder_matches_float64_reference) {
    check_against_ref(0, 16, 24); /* 4×6 patches: the 4×4 position grid resized in one axis */
    check_against_ref(1, 16, 16); /* the grid as is; a deepstack merger after block 1 */
    check_against_ref(0, 24, 8);  /* 6×2 patches: resized in both axes */
}

TEST(vision, encoder_refuses_odd_sizes) {
    size_t size;
    uint8_t *buf = tiny_file(0, &size);
    REQUIRE(buf);
    Err err = {{0}};
    Mmproj *m = open_mem(buf, size, &err);
    REQUIRE(m);
    float pix[3 * 12 * 8] = {0}, out[64 * 8];
    CHECK(vision_n_tokens(m, 12, 8) == -1);
    CHECK(vision_encode(m, pix, 12, 8, NULL, out, &err) == -1 && strstr(err.msg, "multiple of 8"));
    mmproj_close(m);
    free(buf);
}

/* ---- image files and pre-processing -------------------------------------------------------------------- */

#include "image/image.h"
#include "vision/preprocess.h"

#if DL_JPEG
#include <jpeglib.h>
#endif

static uint32_t crc32_png(const uint8_t *p, size_t n, uint32_t c) {
    c = ~c;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}
static void put32(uint8_t *p, uint32_t v) { p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v; }
static size_t chunk(uint8_t *out, const char *type, const uint8_t *data, uint32_t n) {
    put32(out, n);
    memcpy(out + 4, type, 4);
    if (n) memcpy(out + 8, data, n);
    put32(out + 8 + n, crc32_png(out + 4, 4 + (size_t)n, 0));
    return 12 + (size_t)n;
}

/* An RGB PNG written by hand (zlib stored blocks: no compressor needed), for the tests and the CLI's. */
uint8_t *test_png_encode(const uint8_t *rgb, int w, int h, size_t *size);
uint8_t *test_png_encode(const uint8_t *rgb, int w, int h, size_t *size) {
    const size_t raw_n = (size_t)h * (1 + (size_t)w * 3), nblk = raw_n / 65535 + 1;
    uint8_t *raw = malloc(raw_n), *z = malloc(raw_n + 5 * nblk + 6), *out = malloc(raw_n + 5 * nblk + 6 + 64);
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * (1 + (size_t)w * 3)] = 0;
        memcpy(raw + (size_t)y * (1 + (size_t)w * 3) + 1, rgb + (size_t)y * w * 3, (size_t)w * 3);
    }
    size_t zn = 0;
    z[zn++] = 0x78, z[zn++] = 0x01;
    uint32_t a = 1, b = 0;
    for (size_t off = 0; off < raw_n || off == 0;) {
        const size_t len = raw_n - off > 65535 ? 65535 : raw_n - off;
        z[zn++] = off + len == raw_n ? 1 : 0;
        z[zn++] = (uint8_t)len, z[zn++] = (uint8_t)(len >> 8), z[zn++] = (uint8_t)~len, z[zn++] = (uint8_t)(~len >> 8);
        memcpy(z + zn, raw + off, len);
        zn += len;
        off += len;
        if (!len) break;
    }
    for (size_t i = 0; i < raw_n; i++) a = (a + raw[i]) % 65521, b = (b + a) % 65521;
    put32(z + zn, (b << 16) | a);
    zn += 4;
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    memcpy(out, sig, 8);
    size_t n = 8;
    uint8_t ihdr[13];
    put32(ihdr, (uint32_t)w), put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8, ihdr[9] = 2, ihdr[10] = ihdr[11] = ihdr[12] = 0;
    n += chunk(out + n, "IHDR", ihdr, 13);
    n += chunk(out + n, "IDAT", z, (uint32_t)zn);
    n += chunk(out + n, "IEND", NULL, 0);
    free(raw), free(z);
    *size = n;
    return out;
}

static uint8_t *gradient(int w, int h) {
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 255 / (w > 1 ? w - 1 : 1)), p[1] = (uint8_t)(y * 255 / (h > 1 ? h - 1 : 1));
            p[2] = (uint8_t)((x * 7 + y * 13) & 0xff);
        }
    return rgb;
}

TEST(vision, png_decodes_and_refuses) {
    Err err = {{0}};
    ImageRGB img;
#if DL_PNG
    uint8_t *rgb = gradient(37, 23);
    size_t n;
    uint8_t *png = test_png_encode(rgb, 37, 23, &n);
    REQUIRE_MSG(image_decode(png, n, &img, &err) == 0, "%s", err.msg);
    CHECK(img.w == 37 && img.h == 23 && !memcmp(img.rgb, rgb, 37 * 23 * 3));
    image_free(&img);
    /* corrupt: truncated at several places, a flipped byte in the data (bad CRC / zlib) */
    for (size_t cut = 8; cut < n; cut += n / 7) {
        err_clear(&err);
        CHECK_MSG(image_decode(png, cut, &img, &err) == -1 && err.msg[0] && !strchr(err.msg, '\n'), "cut %zu: %s", cut, err.msg);
    }
    png[60] ^= 0x55;
    err_clear(&err);
    CHECK(image_decode(png, n, &img, &err) == -1 && strstr(err.msg, "PNG"));
    free(png);
    /* huge: a header claiming 20000 × 20000 is refused before any pixel memory */
    uint8_t *big = test_png_encode(rgb, 1, 1, &n);
    put32(big + 16, 20000), put32(big + 20, 20000);
    put32(big + 29, crc32_png(big + 12, 17, 0));
    err_clear(&err);
    CHECK_MSG(image_decode(big, n, &img, &err) == -1 && strstr(err.msg, "limit"), "%s", err.msg);
    free(big), free(rgb);
#else
    test_skip("PNG support not built (only its refusal was checked)");
    static const uint8_t sig[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    CHECK(image_decode(sig, sizeof sig, &img, &err) == -1 && strstr(err.msg, "not built"));
#endif
    err_clear(&err);
    CHECK(image_decode((const uint8_t *)"GIF89a......", 12, &img, &err) == -1 && strstr(err.msg, "not a PNG or JPEG"));
    err_clear(&err);
    CHECK(image_load("/nonexistent/x.png", &img, &err) == -1 && strstr(err.msg, "cannot open"));
}

TEST(vision, jpeg_decodes_and_refuses) {
#if DL_JPEG
    const int w = 40, h = 24;
    uint8_t *rgb = gradient(w, h);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    unsigned char *jbuf = NULL;
    unsigned long jn = 0;
    jpeg_mem_dest(&c, &jbuf, &jn);
    c.image_width = w, c.image_height = h, c.input_components = 3, c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 98, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = rgb + (size_t)c.next_scanline * w * 3;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    Err err = {{0}};
    ImageRGB img;
    REQUIRE_MSG(image_decode(jbuf, jn, &img, &err) == 0, "%s", err.msg);
    double mad = 0;
    for (int i = 0; i < w * h * 3; i++) mad += abs((int)img.rgb[i] - (int)rgb[i]);
    mad /= w * h * 3;
    test_note("JPEG q98 %dx%d: mean |Δ| %.2f levels", w, h, mad);
    CHECK(img.w == w && img.h == h && mad < 8); /* lossy, chroma subsampled: a channel swap or shift gives ~100 */
    image_free(&img);
    for (unsigned long cut = 3; cut < jn; cut += jn / 9) {
        err_clear(&err);
        const int rc = image_decode(jbuf, cut, &img, &err);
        /* libjpeg fills a truncated scan with grey (a warning), so a cut image may decode; a cut header must not */
        CHECK_MSG(rc == -1 ? err.msg[0] && !strchr(err.msg, '\n') : img.w == w, "cut %lu", cut);
        image_free(&img);
    }
    free(jbuf), free(rgb);
#else
    test_skip("JPEG support not built (only its refusal was checked)");
    Err err = {{0}};
    ImageRGB img;
    static const uint8_t soi[8] = {0xff, 0xd8, 0xff, 0xe0};
    CHECK(image_decode(soi, sizeof soi, &img, &err) == -1 && strstr(err.msg, "not built"));
#endif
}

TEST(vision, preprocess_sizes_and_pixels) {
    int tw, th;
    /* align 32 (patch 16, merge 2), 8 to 4096 tokens: the rules of docs/VISION.md */
    const long mn = 8L * 1024, mx = 4096L * 1024;
    vision_target_size(448, 448, 32, mn, mx, &tw, &th);
    CHECK(tw == 448 && th == 448);
    vision_target_size(640, 480, 32, mn, mx, &tw, &th);
    CHECK(tw == 640 && th == 480);
    vision_target_size(500, 333, 32, mn, mx, &tw, &th);
    CHECK(tw == 512 && th == 320);
    vision_target_size(4000, 3000, 32, mn, mx, &tw, &th); /* over the budget: floor after scaling */
    CHECK_MSG(tw == 2336 && th == 1760 && (long)tw * th <= mx, "%d×%d", tw, th);
    vision_target_size(20, 10, 32, mn, mx, &tw, &th); /* under: ceil after scaling */
    CHECK_MSG(tw == 128 && th == 64, "%d×%d", tw, th);
    /* bicubic at the same size is a copy; a constant image stays constant at any size */
    uint8_t *rgb = gradient(13, 9), out[13 * 9 * 3], big[31 * 17 * 3];
    vision_resize_bicubic(rgb, 13, 9, out, 13, 9);
    CHECK(!memcmp(out, rgb, sizeof out));
    memset(rgb, 77, 13 * 9 * 3);
    vision_resize_bicubic(rgb, 13, 9, big, 31, 17);
    bool flat = true;
    for (size_t i = 0; i < sizeof big; i++) flat &= big[i] == 77;
    CHECK(flat);
    free(rgb);
    /* the whole pre-processing on the tiny tower (align 8): a 20×12 image → 24×16 (multiples of 8), normalised */
    size_t size;
    uint8_t *buf = tiny_file(0, &size);
    Err err = {{0}};
    Mmproj *m = open_mem(buf, size, &err);
    REQUIRE(m);
    uint8_t *g = gradient(20, 12);
    float *pix = NULL;
    int nx, ny;
    REQUIRE_MSG(vision_preprocess(m, g, 20, 12, &pix, &nx, &ny, &err) == 0, "%s", err.msg);
    vision_target_size(20, 12, 8, m->min_pixels, m->max_pixels, &tw, &th);
    CHECK_MSG(nx == tw && ny == th && nx % 8 == 0 && ny % 8 == 0, "%d×%d", nx, ny);
    float lo = 1e9f, hi = -1e9f;
    for (int i = 0; i < 3 * nx * ny; i++) lo = fminf(lo, pix[i]), hi = fmaxf(hi, pix[i]);
    CHECK(lo >= -1.0f && hi <= 1.0f && hi - lo > 1.5f);
    free(pix), free(g);
    mmproj_close(m);
    free(buf);
}

/* A PNG file all the way to image embeddings: decode → pre-process → encode. */
TEST(vision, png_to_embeddings) {
#if DL_PNG
    size_t size;
    uint8_t *buf = tiny_file(0, &size);
    Err err = {{0}};
    Mmproj *m = open_mem(buf, size, &err);
    REQUIRE(m);
    uint8_t *g = gradient(30, 18);
    size_t n;
    uint8_t *png = test_png_encode(g, 30, 18, &n);
    char path[512];
    snprintf(path, sizeof path, "%s/vis.png", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f && fwrite(png, 1, n, f) == n);
    fclose(f);
    ImageRGB img;
    REQUIRE_MSG(image_load(path, &img, &err) == 0, "%s", err.msg);
    float *pix;
    int nx, ny;
    REQUIRE(vision_preprocess(m, img.rgb, img.w, img.h, &pix, &nx, &ny, &err) == 0);
    const int T = vision_n_tokens(m, nx, ny);
    float *out = malloc(sizeof(float) * (size_t)T * mmproj_out_width(m));
    CHECK(T == (nx / 8) * (ny / 8) && vision_encode(m, pix, nx, ny, NULL, out, &err) == 0);
    bool finite = true;
    for (int i = 0; i < T * mmproj_out_width(m); i++) finite &= isfinite(out[i]) != 0;
    CHECK(finite);
    test_note("30×18 PNG → %d×%d → %d image tokens", nx, ny, T);
    free(out), free(pix), free(png), free(g);
    image_free(&img);
    mmproj_close(m);
    free(buf);
#else
    test_skip("PNG support not built (libpng-dev missing)");
#endif
}

/* ---- the text side: IMROPE positions, embedding rows, the CLI ------------------------------------------- */

#include "cli/cli_image.h"
#include "cli_proc.h"
#include "test_vision_oracle.h"
#include "deltallm.h"
#include "model/synth.h"

TEST(vision, rope_thw_is_rope_for_text) {
    const int sec[4] = {11, 11, 10, 0};
    float a[64], b[64], c[64];
    for (int p = 0; p < 300; p += 37) {
        for (int i = 0; i < 64; i++) a[i] = b[i] = c[i] = sinf((float)(i * 3 + p));
        op_rope(a, 64, p, 1e7f, 1.0f, sec);
        op_rope_thw(b, 64, p, p, p, 1e7f, 1.0f, sec);
        CHECK_MSG(!memcmp(a, b, sizeof a), "p %d", p);
        op_rope_thw(c, 64, p, p + 3, p + 5, 1e7f, 1.0f, sec); /* an image token: the h and w pairs turn differently */
        int same_t = 0, diff_hw = 0;
        for (int i = 0; i < 32; i++) {
            const bool same = a[i] == c[i] && a[i + 32] == c[i + 32];
            if (i % 3 == 0 && i < 33) same_t += same; /* t sectors: 0, 3, …, 30 */
            else diff_hw += !same;
        }
        CHECK_MSG(same_t == 11 && (p == 0 ? true : diff_hw == 21), "p %d: %d t pairs equal, %d h/w pairs moved", p, same_t, diff_hw);
    }
}

/* A tiny qwen35 model with the real Qwen3.5 vocabulary (the vision tokens), width 64, one delta-net and one
 * attention block, and a tiny projector onto its width. */
static const char *tiny_vl_model(void) {
    static char path[512];
    if (path[0]) return path;
    SynthSpec sp;
    Err err = {{0}};
    if (synth_preset(&sp, "qwen3.5-0.8b", &err)) return NULL;
    sp.n_embd = 64, sp.n_layer = 2, sp.full_attn_interval = 2, sp.n_head = 2, sp.n_head_kv = 1, sp.head_dim = 64;
    sp.n_rot = 64, sp.n_ff = 128, sp.ssm_d_state = 16, sp.ssm_n_group = 2, sp.ssm_dt_rank = 4, sp.ctx = 4096;
    sp.seed = 7;
    snprintf(path, sizeof path, "%s/vl-model.gguf", test_tmpdir());
    if (synth_write(&sp, "tests/data/vocab/ggml-vocab-qwen35.gguf", path, &err)) {
        test_note("synth: %s", err.msg);
        path[0] = '\0';
        return NULL;
    }
    return path;
}

static DlEngine *open_engine(const char *model, DlError *err) {
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.n_threads = 1, p.n_ctx = 512, p.n_batch = 64;
    return dl_engine_open(&p, err);
}

TEST(vision, session_positions_and_rows) {
    const char *model = tiny_vl_model();
    REQUIRE(model);
    DlError err = {{0}};
    DlEngine *e = open_engine(model, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    const int V = dl_engine_info(e)->n_vocab, E = dl_engine_info(e)->n_embd;
    int32_t *ids = NULL;
    size_t n = 0;
    REQUIRE(dl_tokenize(e, "<|im_start|>user\nwhat is this? a picture of", 40, true, &ids, &n, &err) == 0 && n > 4);
    DlSession *a = dl_session_new(e, &err), *b = dl_session_new(e, &err);
    REQUIRE(a && b);
    /* text through the image path (host rope with p, p, p; no rows replaced) = the plain path, bit for bit */
    int32_t *pos = malloc(sizeof(int32_t) * 3 * n);
    for (size_t i = 0; i < 3 * n; i++) pos[i] = (int32_t)(i / 3);
    REQUIRE(dl_session_eval(a, ids, n, &err) == 0);
    REQUIRE_MSG(dl_session_eval_embd(b, ids, NULL, NULL, pos, n, (int)n, &err) == 0, "%s", err.msg);
    CHECK(!memcmp(dl_session_logits(a), dl_session_logits(b), sizeof(float) * (size_t)V));
    CHECK(dl_session_next_pos(b) == (int)n && dl_session_n_past(b) == (int)n);
    /* an image's rows: the embeddings change the logits; the positions after it follow max(gw, gh) */
    CliImage img = {NULL, 6, 3, 2, E};
    img.embd = malloc(sizeof(float) * 6 * (size_t)E);
    for (int i = 0; i < 6 * E; i++) img.embd[i] = 0.05f * sinf(0.37f * (float)i);
    int32_t *ids2 = NULL;
    size_t n2 = 0, n_eval = 0;
    REQUIRE(dl_tokenize(e, CLI_IMAGE_MARKER "describe", strlen(CLI_IMAGE_MARKER "describe"), true, &ids2, &n2, &err) == 0);
    dl_session_reset(a), dl_session_reset(b);
    REQUIRE_MSG(cli_image_eval(e, a, ids2, n2, &img, &n_eval, &err) == 0, "%s", err.msg);
    CHECK(n_eval == n2 - 1 + 6 && dl_session_n_past(a) == (int)n_eval);
    /* <|vision_start|> at 0, the image at p0 = 1 (3 wide, 2 high: positions advance by 3), then the text */
    CHECK_MSG(dl_session_next_pos(a) == 1 + 3 + (int)(n2 - 2), "next pos %d", dl_session_next_pos(a));
    float *la = malloc(sizeof(float) * (size_t)V);
    memcpy(la, dl_session_logits(a), sizeof(float) * (size_t)V);
    for (int i = 0; i < 6 * E; i++) img.embd[i] *= -1.0f;
    REQUIRE(cli_image_eval(e, b, ids2, n2, &img, &n_eval, &err) == 0);
    double d = 0;
    for (int i = 0; i < V; i++) d = fmax(d, fabs((double)la[i] - dl_session_logits(b)[i]));
    CHECK_MSG(d > 1e-4, "the image's rows did not reach the logits (max |Δ| %.3g)", d);
    /* the same rows at sequential positions (no 2-D positions) give other logits: the positions are used */
    dl_session_reset(b);
    for (int i = 0; i < 6 * E; i++) img.embd[i] *= -1.0f;
    {
        const size_t N = n_eval;
        int32_t *tok = malloc(sizeof(int32_t) * N), *seq = malloc(sizeof(int32_t) * 3 * N);
        float *rows = calloc(N, sizeof(float) * (size_t)E);
        uint8_t *is = calloc(N, 1);
        const int32_t pad = dl_token_id(e, "<|image_pad|>");
        size_t r = 0;
        for (size_t i = 0; i < n2; i++) {
            if (ids2[i] != pad) {
                tok[r++] = ids2[i];
                continue;
            }
            for (int k = 0; k < 6; k++, r++) tok[r] = pad, is[r] = 1, memcpy(rows + r * E, img.embd + (size_t)k * E, sizeof(float) * (size_t)E);
        }
        for (size_t i = 0; i < 3 * N; i++) seq[i] = (int32_t)(i / 3);
        REQUIRE(dl_session_eval_embd(b, tok, rows, is, seq, N, (int)N, &err) == 0);
        d = 0;
        for (int i = 0; i < V; i++) d = fmax(d, fabs((double)la[i] - dl_session_logits(b)[i]));
        CHECK_MSG(d > 1e-5, "sequential and 2-D positions gave the same logits (max |Δ| %.3g)", d);
        free(tok), free(seq), free(rows), free(is);
    }
    free(la), free(img.embd), free(ids), free(ids2), free(pos);
    dl_session_free(a), dl_session_free(b);
    dl_engine_close(e);
}

TEST(vision, cli_run_with_image) {
    if (!cli_bin()) return test_note("DELTALLM_BIN not set: skipped");
#if DL_PNG
    const char *model = tiny_vl_model();
    REQUIRE(model);
    char mp[512], mp_bad[512], png_path[512], args[2048];
    MmprojSpec sp;
    Err err = {{0}};
    REQUIRE(mmproj_synth_preset(&sp, "tiny", &err) == 0);
    snprintf(mp, sizeof mp, "%s/vl-mmproj.gguf", test_tmpdir());
    snprintf(mp_bad, sizeof mp_bad, "%s/vl-mmproj-96.gguf", test_tmpdir());
    REQUIRE(mmproj_synth_write(&sp, mp, &err) == 0); /* proj_dim 64 = the model's width */
    sp.proj_dim = 96;
    REQUIRE(mmproj_synth_write(&sp, mp_bad, &err) == 0);
    uint8_t *g = gradient(40, 28);
    size_t n;
    uint8_t *png = test_png_encode(g, 40, 28, &n);
    snprintf(png_path, sizeof png_path, "%s/vl.png", test_tmpdir());
    FILE *f = fopen(png_path, "wb");
    REQUIRE(f && fwrite(png, 1, n, f) == n);
    fclose(f);
    free(png), free(g);
    char *out = NULL, *er = NULL;
    snprintf(args, sizeof args, "run -m %s --mmproj %s --image %s -p 'Describe it.' -n 6 --temp 0 -t 1", model, mp, png_path);
    int rc = cli_run(args, NULL, &out, &er);
    CHECK_MSG(rc == 0 && out && strstr(out, "Describe it."), "rc %d: %s", rc, er ? er : "");
    char *out_chat = NULL;
    snprintf(args, sizeof args, "run --chat -m %s --mmproj %s --image %s -p 'Describe it.' -n 6 --temp 0 -t 1", model, mp, png_path);
    CHECK_MSG(cli_run(args, NULL, &out_chat, NULL) == 0, "--chat with an image");
    free(out_chat), free(out), free(er);
    /* refusals, one line each */
    const struct {
        const char *fmt, *expect;
    } bad[] = {
        {"run -m %s --mmproj %s --image %s -p x -n 1", "projects to width 96"},
        {"run -m %s --mmproj %s --image %s.none -p x -n 1", "cannot open"},
        {"run -m %s --mmproj %s --image %s -p x -n 1", "not a PNG or JPEG"},
        {"run -m %s --image %s%s -p x -n 1", "--image needs --mmproj"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *a2 = i == 0 ? mp_bad : mp, *a3 = i == 2 ? model : png_path;
        if (i == 3) snprintf(args, sizeof args, bad[i].fmt, model, png_path, "");
        else snprintf(args, sizeof args, bad[i].fmt, model, a2, a3);
        out = er = NULL;
        rc = cli_run(args, NULL, &out, &er);
        CHECK_MSG(rc != 0 && er && strstr(er, bad[i].expect), "case %zu: rc %d, stderr '%s'", i, rc, er ? er : "");
        free(out), free(er);
    }
#else
    test_note("PNG support not built: skipped");
#endif
}

/* `run --image` against llama.cpp's recorded logits (test_vision_oracle.h): with --chat --chat-format chatml the
 * prompt is the recorded one (ChatML's rendering of [image, "Describe the picture."]); `run` shows only text, so
 * the greedy first token's text is checked: llama.cpp's argmax. */
TEST(vision, cli_run_image_matches_the_mtmd_oracle) {
    if (!cli_bin()) return test_note("DELTALLM_BIN not set: skipped");
#if DL_PNG
    const char *model, *mmproj, *png;
    REQUIRE(test_vision_oracle_files(&model, &mmproj, &png));
    const int32_t top1 = test_vision_oracle_top1();
    REQUIRE_MSG(top1 >= 0, "the recorded oracle is missing");
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.n_threads = 1, p.n_ctx = 64;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    size_t pl;
    const char *piece = dl_token_piece(e, top1, &pl);
    char want[64], args[2048], *out = NULL, *er = NULL;
    snprintf(want, sizeof want, "%.*s", (int)(pl < 63 ? pl : 63), piece ? piece : "");
    dl_engine_close(e);
    snprintf(args, sizeof args, "run --chat --chat-format chatml -m %s --mmproj %s --image %s -p 'Describe the picture.' "
             "-n 1 --temp 0 -t 1", model, mmproj, png);
    const int rc = cli_run(args, NULL, &out, &er);
    CHECK_MSG(rc == 0 && out && strstr(out, want), "rc %d: reply '%s', llama.cpp's argmax %d '%s'; %s", rc, out ? out : "",
              top1, want, er ? er : "");
    test_note("reply '%s' = llama.cpp's argmax (%d)", want, top1);
    free(out), free(er);
#else
    test_skip("PNG support not built (libpng-dev missing)");
#endif
}
