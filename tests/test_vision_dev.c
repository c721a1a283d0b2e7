/* test_vision_dev.c — the vision tower through the backend interface (vision/vision_dev.h): on the host backends
 * in the exact arithmetic it must give vision_encode's exact embeddings bit for bit (group `vision`: the graph,
 * the weights' registry and the inputs are the CPU encoder's), and on every registered device backend (group
 * `device`: lavapipe here) the same embeddings within the device's F32 arithmetic — max |Δ| ≤ 1e-3·std of the
 * exact embeddings and NMSE ≤ 1e-8, the text model's device bound in the first and the backend-ops row ops' scale in
 * the second. Tiny synthetic towers (the `tiny` preset: 2 blocks of 32, 2 heads of 16, patch 4; and one of 2 heads of
 * 72 on 80 patches), F32 and F16 weights, with and without a deepstack merger. Also (group `device`) an image
 * prompt's text side with the text model on each device, all of it or one stage of two (RopeArgs.thw), against the
 * CPU's exact mode, through the library and `run --device`. */
#include "test.h"
#include "test_devices.h"

#include "backend/backend.h"
#include "gguf/format.h"
#include "vision/encoder.h"
#include "vision/mmproj.h"
#include "vision/mmproj_synth.h"
#include "vision/vision_dev.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* a tiny tower in memory: weights of wtype, a deepstack merger after block 1 when ds, heads of 72 (the real
 * towers' head size: two output dimensions per invocation in attn_full.comp, 18 rotary pairs per section) when
 * wide */
static Mmproj *tiny(uint32_t wtype, bool ds, bool wide, uint8_t **buf) {
    MmprojSpec sp;
    Err err = {{0}};
    if (mmproj_synth_preset(&sp, "tiny", &err)) return NULL;
    sp.wtype = wtype, sp.n_deepstack = ds, sp.deepstack[0] = 1;
    if (wide) sp.n_embd = 144, sp.n_head = 2;
    size_t size = 0;
    if (mmproj_synth_write_mem(&sp, buf, &size, &err)) return test_check(false, __FILE__, __LINE__, "synth", "%s", err.msg), NULL;
    Gguf *g = gguf_open_memory(*buf, size, &err);
    Mmproj *m = g ? mmproj_from_gguf(g, &err) : NULL;
    if (!m) test_check(false, __FILE__, __LINE__, "open", "%s", err.msg);
    return m;
}

/* normalised pixels with structure along both axes, a few past ±1 */
static float *pixels(int nx, int ny, unsigned seed) {
    float *pix = malloc(sizeof(float) * 3 * (size_t)nx * ny);
    uint32_t s = seed * 2654435761u + 1;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < ny; y++)
            for (int x = 0; x < nx; x++) {
                s = s * 1664525u + 1013904223u;
                pix[((size_t)c * ny + y) * nx + x] = sinf(0.37f * x + c) * cosf(0.23f * y) + 0.7f * ((float)(s >> 8) / 16777216.0f - 0.5f);
            }
    return pix;
}

/* vision_encode's exact embeddings, or NULL */
static float *encode_exact(const Mmproj *m, const float *pix, int nx, int ny) {
    const size_t n = (size_t)vision_n_tokens(m, nx, ny) * mmproj_out_width(m);
    float *out = malloc(sizeof(float) * n);
    Err err = {{0}};
    const VisionRun run = {.mode = MATMUL_EXACT};
    if (vision_encode(m, pix, nx, ny, &run, out, &err)) {
        test_check(false, __FILE__, __LINE__, "vision_encode", "%s", err.msg);
        free(out);
        return NULL;
    }
    return out;
}

/* the embeddings through vision_dev on backend o, or NULL (a failure recorded) */
static float *encode_dev(const Mmproj *m, const BackendOptions *o, const float *pix, int nx, int ny) {
    const size_t n = (size_t)vision_n_tokens(m, nx, ny) * mmproj_out_width(m);
    Err err = {{0}};
    VisionDev *vd = vision_dev_open(m, o, &err);
    float *out = vd ? malloc(sizeof(float) * n) : NULL;
    for (size_t i = 0; out && i < n; i++) out[i] = NAN;
    if (!vd || vision_dev_encode(vd, pix, nx, ny, out, &err)) {
        test_check(false, __FILE__, __LINE__, "vision_dev", "%s: %s", o->name, err.msg);
        free(out);
        out = NULL;
    }
    vision_dev_close(vd);
    return out;
}

static const struct {
    uint32_t wtype;
    bool ds, wide;
    int nx, ny;
} cases[] = {
    {FMT_F32, false, false, 16, 24}, /* 4×6 patches: the position grid resized in one axis */
    {FMT_F32, true, false, 24, 8},   /* 6×2: both axes; a deepstack merger after block 1 */
    {FMT_F16, false, false, 24, 16}, /* F16 matrices */
    {FMT_F16, false, true, 40, 32},  /* 10×8 = 80 patches: attention across two 64-key blocks; heads of 72 */
};

TEST(vision, backend_encoder_equals_exact) {
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        uint8_t *buf = NULL;
        Mmproj *m = tiny(cases[ci].wtype, cases[ci].ds, cases[ci].wide, &buf);
        if (!m) {
            free(buf);
            continue;
        }
        const int nx = cases[ci].nx, ny = cases[ci].ny;
        const size_t n = (size_t)vision_n_tokens(m, nx, ny) * mmproj_out_width(m);
        float *pix = pixels(nx, ny, (unsigned)ci + 1), *ref = encode_exact(m, pix, nx, ny);
        const BackendOptions hosts[] = {{.name = "ref", .n_threads = 1, .mode = MATMUL_EXACT, .cpu.isa = -1},
                                        {.name = "cpu", .n_threads = 2, .mode = MATMUL_EXACT, .cpu.isa = -1}};
        for (int b = 0; ref && b < 2; b++) {
            float *got = encode_dev(m, &hosts[b], pix, nx, ny);
            size_t diff = 0;
            for (size_t i = 0; got && i < n; i++) diff += memcmp(&got[i], &ref[i], 4) != 0;
            CHECK_MSG(got && diff == 0, "%s, %s%s, E %d, %dx%d: %zu of %zu values differ from vision_encode's exact mode",
                      hosts[b].name, format_get(cases[ci].wtype)->name, cases[ci].ds ? " + deepstack" : "", m->n_embd, nx, ny, diff, n);
            free(got);
        }
        free(pix), free(ref);
        mmproj_close(m);
        free(buf);
    }
    /* one VisionDev over images of three sizes (its activation buffer kept, then grown): each = a fresh exact encode */
    {
        uint8_t *buf = NULL;
        Mmproj *m = tiny(FMT_F32, true, false, &buf);
        REQUIRE(m);
        Err err = {{0}};
        VisionDev *vd = vision_dev_open(m, &(BackendOptions){.name = "ref", .n_threads = 1, .mode = MATMUL_EXACT}, &err);
        REQUIRE_MSG(vd, "%s", err.msg);
        static const int sizes[][2] = {{8, 8}, {24, 16}, {8, 8}, {16, 32}};
        for (int i = 0; i < 4; i++) {
            const int nx = sizes[i][0], ny = sizes[i][1];
            const size_t n = (size_t)vision_n_tokens(m, nx, ny) * mmproj_out_width(m);
            float *pix = pixels(nx, ny, 11u + (unsigned)i), *ref = encode_exact(m, pix, nx, ny), *got = malloc(sizeof(float) * n);
            CHECK_MSG(vision_dev_encode(vd, pix, nx, ny, got, &err) == 0, "%s", err.msg);
            CHECK_MSG(ref && memcmp(got, ref, sizeof(float) * n) == 0, "image %d (%dx%d) after the others: not the exact bits", i, nx, ny);
            free(pix), free(ref), free(got);
        }
        float px[3 * 12 * 8] = {0}, o[64];
        CHECK(vision_dev_encode(vd, px, 12, 8, o, &err) == -1 && strstr(err.msg, "multiple of 8"));
        vision_dev_close(vd);
        mmproj_close(m);
        free(buf);
    }
    /* a backend that is not there: one line naming it */
    uint8_t *buf = NULL;
    Mmproj *m = tiny(FMT_F32, false, false, &buf);
    REQUIRE(m);
    Err err = {{0}};
    CHECK(vision_dev_open(m, &(BackendOptions){.name = "nosuch"}, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "nosuch") && !strchr(err.msg, '\n'), "got: %s", err.msg);
    mmproj_close(m);
    free(buf);
}

TEST(device, vision_encoder_matches_cpu_exact) {
    int nr, nd = 0;
    const BackendReg *reg = backend_registry(&nr);
    for (int r = 0; r < nr; r++) {
        if (reg[r].host) continue;
        Err err = {{0}};
        if (!backend_available(&reg[r], &err)) {
            test_skip("%s: %s", reg[r].name, err.msg);
            continue;
        }
        nd++;
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            uint8_t *buf = NULL;
            Mmproj *m = tiny(cases[ci].wtype, cases[ci].ds, cases[ci].wide, &buf);
            if (!m) {
                free(buf);
                continue;
            }
            const int nx = cases[ci].nx, ny = cases[ci].ny;
            const size_t n = (size_t)vision_n_tokens(m, nx, ny) * mmproj_out_width(m);
            float *pix = pixels(nx, ny, (unsigned)ci + 1), *ref = encode_exact(m, pix, nx, ny);
            const BackendOptions o = {.name = reg[r].name, .mode = MATMUL_EXACT};
            float *got = ref ? encode_dev(m, &o, pix, nx, ny) : NULL;
            if (got) {
                double s = 0, s2 = 0, maxd = 0, num = 0;
                for (size_t i = 0; i < n; i++) s += ref[i], s2 += (double)ref[i] * ref[i];
                const double sd = sqrt(s2 / n - (s / n) * (s / n));
                for (size_t i = 0; i < n; i++) {
                    const double dlt = (double)got[i] - ref[i];
                    maxd = isnan(dlt) ? INFINITY : fmax(maxd, fabs(dlt)), num += dlt * dlt;
                }
                const double nmse = num / s2;
                test_note("%s, %s%s, E %d, %dx%d (%zu values): max |Δ| %.3g·std, NMSE %.3g", reg[r].name,
                          format_get(cases[ci].wtype)->name, cases[ci].ds ? " + deepstack" : "", m->n_embd, nx, ny, n, maxd / sd, nmse);
                CHECK_MSG(sd > 0.05 && maxd <= 1e-3 * sd && nmse <= 1e-8, "%s: max |Δ| %.3g·std (limit 1e-3), NMSE %.3g (limit 1e-8)",
                          reg[r].name, maxd / sd, nmse);
            }
            free(got), free(pix), free(ref);
            mmproj_close(m);
            free(buf);
        }
    }
    /* heads of 264: past attn_full.comp's 256, refused by name at the encode */
    for (int r = 0; r < nr; r++) {
        Err err = {{0}};
        if (reg[r].host || !backend_available(&reg[r], &err)) continue;
        MmprojSpec sp;
        uint8_t *buf = NULL;
        size_t size = 0;
        REQUIRE(mmproj_synth_preset(&sp, "tiny", &err) == 0);
        sp.n_embd = 528, sp.n_head = 2, sp.n_layer = 1;
        REQUIRE_MSG(mmproj_synth_write_mem(&sp, &buf, &size, &err) == 0, "%s", err.msg);
        Gguf *g = gguf_open_memory(buf, size, &err);
        Mmproj *m = g ? mmproj_from_gguf(g, &err) : NULL;
        REQUIRE_MSG(m, "%s", err.msg);
        VisionDev *vd = vision_dev_open(m, &(BackendOptions){.name = reg[r].name, .mode = MATMUL_EXACT}, &err);
        CHECK_MSG(vd, "%s", err.msg);
        float *pix = pixels(8, 8, 3), out[64];
        const int rc = vd ? vision_dev_encode(vd, pix, 8, 8, out, &err) : -1;
        CHECK_MSG(vd && rc == -1 && strstr(err.msg, "at most 256") && !strchr(err.msg, '\n'), "%s: rc %d: %s", reg[r].name, rc, err.msg);
        test_note("%s, heads of 264: %s", reg[r].name, err.msg);
        free(pix);
        vision_dev_close(vd);
        mmproj_close(m);
        free(buf);
    }
    if (!nd) test_skip("no device backend can run here");
}

/* ---- the CLI: run --image --vision-device NAME ---------------------------------------------------------------- */

#include "cli_proc.h"
#include "model/synth.h"

uint8_t *test_png_encode(const uint8_t *rgb, int w, int h, size_t *size); /* test_vision.c */

/* a width-64 qwen35 with Qwen3.5's vocabulary (its vision tokens), as test_vision.c's, and a tiny projector on it */
static bool vl_files(char *model, char *mmproj, char *png, size_t cap) {
    SynthSpec sp;
    Err err = {{0}};
    if (synth_preset(&sp, "qwen3.5-0.8b", &err)) return false;
    sp.n_embd = 64, sp.n_layer = 2, sp.full_attn_interval = 2, sp.n_head = 2, sp.n_head_kv = 1, sp.head_dim = 64;
    sp.n_rot = 64, sp.n_ff = 128, sp.ssm_d_state = 16, sp.ssm_n_group = 2, sp.ssm_dt_rank = 4, sp.ctx = 4096, sp.seed = 7;
    snprintf(model, cap, "%s/vdev-model.gguf", test_tmpdir());
    snprintf(mmproj, cap, "%s/vdev-mmproj.gguf", test_tmpdir());
    snprintf(png, cap, "%s/vdev.png", test_tmpdir());
    MmprojSpec mp;
    if (synth_write(&sp, "tests/data/vocab/ggml-vocab-qwen35.gguf", model, &err) || mmproj_synth_preset(&mp, "tiny", &err) ||
        mmproj_synth_write(&mp, mmproj, &err)) /* proj_dim 64 = the model's width */
        return test_check(false, __FILE__, __LINE__, "synth", "%s", err.msg);
    const int w = 40, h = 28;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(x * 255 / (w - 1)), p[1] = (uint8_t)(y * 255 / (h - 1)), p[2] = (uint8_t)((x * 7 + y * 13) & 0xff);
        }
    size_t n = 0;
    uint8_t *bytes = test_png_encode(rgb, w, h, &n);
    FILE *f = fopen(png, "wb");
    const bool ok = bytes && f && fwrite(bytes, 1, n, f) == n;
    if (f) fclose(f);
    free(bytes), free(rgb);
    return test_check(ok, __FILE__, __LINE__, "png", "cannot write %s", png);
}

/* the greedy continuation of an image prompt with the encoder on each device = with it on the CPU backend (the
 * exact arithmetic), in `run` and in `chat` (two pictures, one encoder); with the text model on each device
 * (`--device`, and `-ngl 1`) = the CPU's exact path (`--exact`); a device that is not there, or the option without
 * an image, refused in one line */
TEST(device, vision_cli_run_on_the_device) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set");
#if DL_PNG
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    char model[512], mp[512], png[512], args[2048];
    REQUIRE(vl_files(model, mp, png, sizeof model));
    const char *fmt = "run -m %s --mmproj %s --image %s --vision-device %s -p 'Describe it.' -n 8 --temp 0 -t 1";
    char *cpu_out = NULL, *er = NULL;
    snprintf(args, sizeof args, fmt, model, mp, png, "cpu");
    int rc = cli_run(args, NULL, &cpu_out, &er);
    REQUIRE_MSG(rc == 0 && cpu_out && strstr(cpu_out, "Describe it."), "cpu: rc %d: %s", rc, er ? er : "");
    free(er);
    for (int d = 0; d < nd; d++) {
        char *out = NULL;
        er = NULL;
        snprintf(args, sizeof args, fmt, model, mp, png, dv[d]);
        rc = cli_run(args, NULL, &out, &er);
        CHECK_MSG(rc == 0 && out && !strcmp(out, cpu_out), "%s: rc %d, '%s' against the CPU's '%s' (%s)", dv[d], rc, out ? out : "",
                  cpu_out, er ? er : "");
        if (out) test_note("%s: %s", dv[d], out);
        free(out), free(er);
    }
    /* the text model on the device (the encoder on the CPU's fast path in both): the CPU's exact path's text */
    {
        const char *tfmt = "run -m %s --mmproj %s --image %s %s -p 'Describe it.' -n 8 --temp 0 -t 1";
        char *exact_out = NULL, dev[64];
        er = NULL;
        snprintf(args, sizeof args, tfmt, model, mp, png, "--exact");
        rc = cli_run(args, NULL, &exact_out, &er);
        CHECK_MSG(rc == 0 && exact_out && strstr(exact_out, "Describe it."), "--exact: rc %d: %s", rc, er ? er : "");
        free(er);
        for (int d = 0; exact_out && d < nd; d++)
            for (int k = 0; k < 2; k++) {
                char *out = NULL;
                er = NULL;
                snprintf(dev, sizeof dev, "--device %s%s", dv[d], k ? " -ngl 1" : "");
                snprintf(args, sizeof args, tfmt, model, mp, png, dev);
                rc = cli_run(args, NULL, &out, &er);
                CHECK_MSG(rc == 0 && out && !strcmp(out, exact_out), "%s: rc %d, '%s' against the CPU exact path's '%s' (%s)", dev, rc,
                          out ? out : "", exact_out, er ? er : "");
                if (out) test_note("text model %s: %s", dev, out);
                free(out), free(er);
            }
        free(exact_out);
    }
    /* chat: two pictures through one kept encoder (cli_vision_open at the first /image) */
    char in[1200], *chat_cpu = NULL;
    snprintf(in, sizeof in, "/image %s\nDescribe it.\n/image %s\nAnd now?\n/exit\n", png, png);
    const char *cfmt = "chat -m %s --mmproj %s --vision-device %s -n 4 --temp 0 -t 1 --no-think";
    snprintf(args, sizeof args, cfmt, model, mp, "cpu");
    er = NULL;
    rc = cli_run(args, in, &chat_cpu, &er);
    CHECK_MSG(rc == 0 && chat_cpu && er && strstr(er, "[image ") && !strstr(er, "deltallm chat:"), "chat on cpu: rc %d: %s", rc,
              er ? er : "");
    free(er);
    for (int d = 0; chat_cpu && d < nd; d++) {
        char *out = NULL;
        er = NULL;
        snprintf(args, sizeof args, cfmt, model, mp, dv[d]);
        rc = cli_run(args, in, &out, &er);
        CHECK_MSG(rc == 0 && out && !strcmp(out, chat_cpu), "chat on %s: rc %d, '%s' against the CPU's '%s' (%s)", dv[d], rc,
                  out ? out : "", chat_cpu, er ? er : "");
        free(out), free(er);
    }
    free(chat_cpu);
    snprintf(args, sizeof args, cfmt, model, mp, "nosuch");
    char *out = NULL;
    er = NULL;
    rc = cli_run(args, in, &out, &er);
    CHECK_MSG(er && strstr(er, "unknown backend 'nosuch'"), "chat --vision-device nosuch: rc %d, stderr '%s'", rc, er ? er : "");
    free(out), free(er);
    const struct {
        const char *args, *expect;
    } bad[] = {{"run -m %s --mmproj %s --image %s --vision-device nosuch -p x -n 1", "unknown backend 'nosuch'"},
               {"run -m %s --vision-device cpu -p x -n 1%s%s", "--vision-device needs --mmproj and --image"}};
    for (int i = 0; i < 2; i++) {
        char *out = NULL;
        er = NULL;
        if (i == 0) snprintf(args, sizeof args, bad[i].args, model, mp, png);
        else snprintf(args, sizeof args, bad[i].args, model, "", "");
        rc = cli_run(args, NULL, &out, &er);
        CHECK_MSG(rc != 0 && er && strstr(er, bad[i].expect), "case %d: rc %d, stderr '%s'", i, rc, er ? er : "");
        free(out), free(er);
    }
    free(cpu_out);
    if (!nd) test_skip("no device backend can run here");
#else
    test_skip("PNG support not built");
#endif
}

/* ---- attention_full past llvmpipe's loop limit ------------------------------------------------------------------ */

/* 7744 patches of heads of 256: on llvmpipe (65535 loop steps per invocation, vk_internal.h) one workgroup's walk
 * over the keys is past the limit — measured there: 7680 keys right, 7872 wrong by 1.1e-3 without the guard — so
 * the op must be refused by name; a device without the limit must compute it (4 query rows against a double
 * reference). */
TEST(device, vision_attention_past_llvmpipe_loop_limit) {
    int nr, nd = 0;
    const BackendReg *reg = backend_registry(&nr);
    const int T = 7744, d = 256;
    const size_t n = (size_t)T * 3 * d;
    float *x = malloc(n * 4), *o = malloc((size_t)T * d * 4);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    for (int r = 0; r < nr; r++) {
        Err err = {{0}};
        if (reg[r].host) continue;
        if (!backend_available(&reg[r], &err)) {
            test_skip("%s: %s", reg[r].name, err.msg);
            continue;
        }
        nd++;
        Backend *be = backend_create(&(BackendOptions){.name = reg[r].name, .mode = MATMUL_EXACT}, &err);
        REQUIRE_MSG(be, "%s", err.msg);
        BBuf *b = be->vt->alloc(be, (n + (size_t)T * d) * 4, &err);
        REQUIRE_MSG(b, "%s", err.msg);
        const BView xv = {b, 0}, ov = {b, n * 4};
        be->vt->begin(be);
        be->vt->upload(be, xv, x, n * 4);
        const FullAttnArgs a = {T, 1, d, 1.0f / 16.0f, xv, bv_f32(xv, d), bv_f32(xv, 2 * d), ov, 3 * d, 3 * d, 3 * d, d};
        be->vt->attention_full(be, &a);
        be->vt->download(be, o, ov, (size_t)T * d * 4);
        const int rc = be->vt->submit(be, &err) ? -1 : be->vt->wait(be, &err);
        if (rc) {
            test_note("%s: %s", reg[r].name, err.msg);
            CHECK_MSG(strstr(err.msg, "llvmpipe's limit") && !strchr(err.msg, '\n'), "%s: %s", reg[r].name, err.msg);
        } else { /* no limit on this device: the result */
            double worst = 0, *p = malloc(sizeof(double) * T);
            const int rows[] = {0, 1, T / 2, T - 1};
            for (int ri = 0; ri < 4; ri++) {
                const size_t t = (size_t)rows[ri];
                double mx = -1e300, sum = 0;
                for (int u = 0; u < T; u++) {
                    double dot = 0;
                    for (int i = 0; i < d; i++) dot += (double)x[t * 3 * d + i] * x[(size_t)u * 3 * d + d + i];
                    p[u] = dot / 16.0, mx = fmax(mx, p[u]);
                }
                for (int u = 0; u < T; u++) sum += p[u] = exp(p[u] - mx);
                for (int i = 0; i < d; i++) {
                    double v = 0;
                    for (int u = 0; u < T; u++) v += p[u] / sum * x[(size_t)u * 3 * d + 2 * d + i];
                    worst = fmax(worst, fabs(v - o[t * d + i]));
                }
            }
            free(p);
            test_note("%s: computed, max |Δ| %.3g on 4 rows", reg[r].name, worst);
            CHECK_MSG(worst < 1e-5, "%s: max |Δ| %.3g", reg[r].name, worst);
        }
        be->vt->free(be, b);
        backend_destroy(be);
    }
    free(x), free(o);
    if (!nd) test_skip("no device backend can run here");
}

/* ---- the text model on the device for an image prompt ------------------------------------------------------------ */

#include "cli/cli_image.h"
#include "cli/logit_compare.h"
#include "test_vision_oracle.h"

/* The oracle's recorded image prompt (test_vision_oracle.h: the width-64 qwen35, the F32 projector, the up-scaled
 * PNG; the image's embeddings encoded once, on the CPU) with the text model on each of `stages`: the logits after
 * the prompt and after each of 2 tokens decoded after it (the positions past the image; a decode pass recorded, then
 * replayed, on a device) into lg [3][V], those tokens the CPU's greedy ones (want, when given) or this run's (into
 * got). */
static bool image_prompt_logits(const char *model, const CliImage *img, const char *backend, bool exact, const DlStage *stages,
                                int n_stages, float *lg, const int32_t *want, int32_t *got) {
    int n1, n2;
    const int32_t *c2, *c1 = test_vision_oracle_prompt(&n1, &c2, &n2);
    if (!c1) return test_check(false, __FILE__, __LINE__, "oracle", "the recorded prompt is missing");
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.backend = backend, p.exact = exact, p.n_threads = 2, p.n_ctx = 256, p.n_batch = 64;
    p.stages = stages, p.n_stages = n_stages;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    if (!e) return test_check(false, __FILE__, __LINE__, "engine", "%s: %s", backend ? backend : stages[0].backend, err.msg);
    DlSession *s = dl_session_new(e, &err);
    const int V = dl_engine_info(e)->n_vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n1 + 1 + n2));
    memcpy(ids, c1, sizeof(int32_t) * (size_t)n1);
    ids[n1] = dl_token_id(e, "<|image_pad|>");
    memcpy(ids + n1 + 1, c2, sizeof(int32_t) * (size_t)n2);
    size_t n_eval = 0;
    bool ok = s && cli_image_eval(e, s, ids, (size_t)(n1 + 1 + n2), img, &n_eval, &err) == 0;
    for (int k = 0; ok && k < 3; k++) {
        const float *l = dl_session_logits(s);
        memcpy(lg + (size_t)k * V, l, sizeof(float) * (size_t)V);
        int32_t best = 0;
        for (int i = 1; i < V; i++) best = l[i] > l[best] ? i : best;
        got[k] = best;
        if (k < 2) ok = dl_session_eval(s, want ? &want[k] : &best, 1, &err) == 0;
    }
    if (!ok) test_check(false, __FILE__, __LINE__, "image prompt", "%s: %s", backend ? backend : stages[0].backend, err.msg);
    free(ids);
    dl_session_free(s);
    dl_engine_close(e);
    return ok;
}

/* An image prompt with the text model on each device (the IMROPE rows' (time, height, width) positions through the
 * backend's rope, RopeArgs.thw) against the CPU's exact mode: the logits of the prompt's last row and of 2 decoded
 * tokens after it within 1e-3·std (the device suite's bound) and the same greedy tokens; also split in two stages
 * both ways (the device first, as -ngl 1 puts it: the image rows embedded there; and the CPU first: the attention
 * layer, the model's second, on the device). */
TEST(device, vision_text_model_on_the_device) {
#if DL_PNG
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    const char *model, *mmproj, *png;
    REQUIRE(test_vision_oracle_files(&model, &mmproj, &png));
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.n_threads = 2, p.n_ctx = 256;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    CliImage img = {0};
    REQUIRE_MSG(cli_image_encode(e, mmproj, png, 2, &img, &err) == 0, "%s", err.msg);
    const int V = dl_engine_info(e)->n_vocab;
    dl_engine_close(e);
    float *ref = malloc(sizeof(float) * 3 * (size_t)V), *got = malloc(sizeof(float) * 3 * (size_t)V);
    int32_t t_ref[3], t_got[3];
    REQUIRE(image_prompt_logits(model, &img, "cpu", true, NULL, 0, ref, NULL, t_ref));
    for (int d = 0; d < nd; d++) {
        const DlStage first[2] = {{dv[d], 1}, {"cpu", 0}}, second[2] = {{"cpu", 1}, {dv[d], 0}};
        static const char *const how[3] = {"all on the device", "-ngl 1 (layer 0 on the device)", "layer 1 (attention) on the device"};
        for (int k = 0; k < 3; k++) {
            const bool ok = k == 0 ? image_prompt_logits(model, &img, dv[d], false, NULL, 0, got, t_ref, t_got)
                                   : image_prompt_logits(model, &img, NULL, true, k == 1 ? first : second, 2, got, t_ref, t_got);
            if (!ok) continue;
            const LogitMetrics m = logits_compare(ref, got, 3, V, 1e-3);
            test_note("%s, %s: 3 rows of %d logits, max |Δ| %.3g·std, greedy tokens %s", dv[d], how[k], V, m.max_rel,
                      memcmp(t_ref, t_got, sizeof t_ref) ? "differ" : "identical");
            CHECK_MSG(m.max_rel <= 1e-3 && m.nonfinite == 0, "%s, %s: max |Δ| %.3g·std (limit 1e-3)", dv[d], how[k], m.max_rel);
            CHECK_MSG(!memcmp(t_ref, t_got, sizeof t_ref), "%s, %s: greedy tokens differ", dv[d], how[k]);
        }
    }
    free(ref), free(got);
    cli_image_free(&img);
    if (!nd) test_skip("no device backend can run here");
#else
    test_skip("PNG support not built");
#endif
}
