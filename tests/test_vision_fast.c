/* test_vision_fast.c — the vision encoder's fast paths against their references: vattn (the GEMM + vector exp
 * attention of src/vision/vattn_simd.h, at every ISA level the machine has) against a float64 attention, the
 * GELU table against libm's GELU of the F16-rounded input, and the whole fast encoder against the exact one. */
#include "test.h"

#include "base/fp16.h"
#include "base/pool.h"
#include "gguf/format.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernels_cpu.h"
#include "vision/encoder.h"
#include "vision/mmproj.h"
#include "vision/mmproj_synth.h"
#include "vision/vattn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float frand(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 16777216.0f * 2.0f - 1.0f;
}

/* one head, T keys, head size d, q/k/v in rows of stride ld (as in the qkv buffer) */
static void check_vattn(Isa isa, int T, int d) {
    VattnRowsFn fn = vattn_select(isa);
    if (!fn) return;
    const int tp = (T + 15) & ~15, dp = (d + 15) & ~15, ld = 3 * d + 5;
    uint32_t s = (uint32_t)(T * 31 + d);
    float *qkv = malloc(sizeof(float) * (size_t)T * ld), *kt = calloc((size_t)d * tp, sizeof(float));
    float *v = calloc((size_t)tp * dp, sizeof(float)), *out = malloc(sizeof(float) * (size_t)T * d);
    float *inv = malloc(sizeof(float) * (size_t)T), *work = malloc(sizeof(float) * 64 * (size_t)(tp + dp));
    for (int i = 0; i < T * ld; i++) qkv[i] = 2.5f * frand(&s);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < d; i++) kt[(size_t)i * tp + t] = qkv[(size_t)t * ld + d + i], v[(size_t)t * dp + i] = qkv[(size_t)t * ld + 2 * d + i];
    const float scale = 1.0f / sqrtf((float)d);
    VattnArgs a = {T, tp, d, dp, scale, qkv, ld, kt, v, out, d, inv};
    for (int q0 = 0; q0 < T; q0 += 64) fn(&a, q0, T - q0 < 64 ? T - q0 : 64, work, work + (size_t)64 * tp);
    double worst = 0;
    double *p = malloc(sizeof(double) * (size_t)T);
    for (int t = 0; t < T; t++) {
        double mx = -INFINITY, sum = 0;
        for (int u = 0; u < T; u++) {
            double dot = 0;
            for (int i = 0; i < d; i++) dot += (double)qkv[(size_t)t * ld + i] * qkv[(size_t)u * ld + d + i];
            p[u] = dot * scale;
            mx = fmax(mx, p[u]);
        }
        for (int u = 0; u < T; u++) sum += p[u] = exp(p[u] - mx);
        for (int i = 0; i < d; i++) {
            double o = 0;
            for (int u = 0; u < T; u++) o += p[u] / sum * qkv[(size_t)u * ld + 2 * d + i];
            worst = fmax(worst, fabs(o - out[(size_t)t * d + i]));
        }
    }
    test_note("vattn %s T %d d %d: max |Δ| %.2g vs float64", isa_name(isa), T, d, worst);
    CHECK_MSG(worst < 2e-5, "vattn %s T %d d %d: max |Δ| %.3g", isa_name(isa), T, d, worst);
    free(p), free(qkv), free(kt), free(v), free(out), free(inv), free(work);
}

TEST(vision, fast_attention_matches_float64) {
    int levels = 0;
    for (Isa isa = ISA_AVX2; isa <= ISA_AVX512; isa++) {
        if (!isa_supported(isa)) continue;
        levels++;
        check_vattn(isa, 37, 24);  /* keys and head size off the 16 grid */
        check_vattn(isa, 130, 64); /* three row blocks */
        check_vattn(isa, 16, 72);  /* the large tower's head size */
    }
    if (!levels) test_skip("no AVX2 on this machine");
}

TEST(vision, gelu_table_is_gelu_of_f16) {
    int bad = 0;
    double worst = 0;
    for (float x = -12.0f; x <= 12.0f; x += 0.00731f) {
        const float f = vision_gelu_fast(x);
        const float want = x <= -10.0f ? 0.0f : x >= 10.0f ? x : vision_gelu(fp16_to_fp32(fp32_to_fp16(x)));
        bad += f != want;
        worst = fmax(worst, fabs((double)f - vision_gelu(x)));
    }
    test_note("GELU table: max |Δ| %.2g from libm GELU on [-12, 12]", worst);
    CHECK_MSG(bad == 0, "%d values are not GELU of the F16 input", bad);
    CHECK(worst < 1e-2);
}

/* The whole fast encoder against the exact one, F16 weights (the presets' type), threads 1 and 2 giving
 * the same bits. */
TEST(vision, fast_encoder_near_exact) {
    MmprojSpec sp;
    Err err = {{0}};
    REQUIRE(mmproj_synth_preset(&sp, "tiny", &err) == 0);
    sp.wtype = FMT_F16, sp.n_embd = 64, sp.n_head = 2, sp.n_ff = 128, sp.seed = 5;
    uint8_t *buf = NULL;
    size_t size;
    REQUIRE(mmproj_synth_write_mem(&sp, &buf, &size, &err) == 0);
    Gguf *g = gguf_open_memory(buf, size, &err);
    REQUIRE(g);
    Mmproj *m = mmproj_from_gguf(g, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const int nx = 40, ny = 24, T = vision_n_tokens(m, nx, ny), W = mmproj_out_width(m);
    float *pix = malloc(sizeof(float) * 3 * nx * ny), *ex = malloc(sizeof(float) * (size_t)T * W);
    float *f1 = malloc(sizeof(float) * (size_t)T * W), *f2 = malloc(sizeof(float) * (size_t)T * W);
    uint32_t s = 9;
    for (int i = 0; i < 3 * nx * ny; i++) pix[i] = frand(&s);
    Pool *p2 = pool_create(2, &err);
    const VisionRun rex = {ops_cpu(isa_best()), MATMUL_EXACT, NULL, ISA_REF, NULL};
    const VisionRun r1 = {ops_cpu(isa_best()), MATMUL_FAST, NULL, isa_best(), NULL};
    const VisionRun r2 = {ops_cpu(isa_best()), MATMUL_FAST, p2, isa_best(), NULL};
    REQUIRE(vision_encode(m, pix, nx, ny, &rex, ex, &err) == 0);
    REQUIRE(vision_encode(m, pix, nx, ny, &r1, f1, &err) == 0);
    REQUIRE(vision_encode(m, pix, nx, ny, &r2, f2, &err) == 0);
    double sm = 0, s2 = 0, worst = 0;
    for (int i = 0; i < T * W; i++) sm += ex[i], s2 += (double)ex[i] * ex[i];
    const double sd = sqrt(s2 / (T * W) - (sm / (T * W)) * (sm / (T * W)));
    for (int i = 0; i < T * W; i++) worst = fmax(worst, fabs((double)f1[i] - ex[i]));
    test_note("fast vs exact encoder (F16 weights, %d tokens): max |Δ| %.2g·std", T, worst / sd);
    CHECK_MSG(worst <= 2e-2 * sd, "max |Δ| %.3g·std", worst / sd);
    CHECK_MSG(worst > 0 || isa_best() == ISA_REF, "the fast path gave the exact bits: is it taken?");
    CHECK_MSG(!memcmp(f1, f2, sizeof(float) * (size_t)T * W), "1 and 2 threads differ");
    pool_destroy(p2);
    free(pix), free(ex), free(f1), free(f2);
    mmproj_close(m);
    free(buf);
}
