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
    VisionRun run = {NULL, MATMUL_EXACT, NULL};
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
