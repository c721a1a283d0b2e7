/* test_formats.c — the weight-format layer against vectors made by ggml itself (tests/data/formats/,
 * see shared/testdata/README.md §7): table rows, bit-identical dequantization and activation rounding,
 * reference dot products, and our weight quantizers (bit-identity where promised, round-trip error
 * everywhere, odd block counts). */
#include "test.h"

#include "base/fp16.h"
#include "gguf/format.h"
#include "gguf/quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { ROW_LEN = 1024, W_ROWS = 8, A_ROWS = 4 };

typedef struct VecType {
    char name[16], vdt[16];
    int id, block, bytes;
} VecType;

/* The types listed in index.json into out[]; returns their count (0 after a failed check). */
static int load_index(VecType *out, int cap) {
    char *txt = test_read_file(test_data("formats/index.json"), NULL);
    if (!CHECK_MSG(txt != NULL, "formats/index.json missing")) return 0;
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    if (!CHECK(root != NULL)) return 0;
    CHECK(cJSON_GetObjectItem(root, "row_len")->valueint == ROW_LEN);
    int n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(root, "types")) {
        if (n == cap) break;
        VecType *v = &out[n++];
        snprintf(v->name, sizeof v->name, "%s", cJSON_GetObjectItem(t, "type")->valuestring);
        snprintf(v->vdt, sizeof v->vdt, "%s", cJSON_GetObjectItem(t, "vec_dot_type")->valuestring);
        v->id = cJSON_GetObjectItem(t, "ggml_type_id")->valueint;
        v->block = cJSON_GetObjectItem(t, "block_size")->valueint;
        v->bytes = cJSON_GetObjectItem(t, "type_size")->valueint;
    }
    cJSON_Delete(root);
    return n;
}

/* Reads formats/<name><suffix> and checks its size. */
static void *load(const char *name, const char *suffix, size_t want) {
    char rel[128];
    snprintf(rel, sizeof rel, "formats/%s%s", name, suffix);
    size_t size = 0;
    void *p = test_read_file(test_data(rel), &size);
    if (!CHECK_MSG(p != NULL, "missing %s", rel)) return NULL;
    if (!CHECK_MSG(size == want, "%s: %zu bytes, expected %zu", rel, size, want)) {
        free(p);
        return NULL;
    }
    return p;
}

static const Format *format_by_name(const char *name) {
    for (uint32_t id = 0; id < FMT_COUNT; id++) {
        const Format *f = format_get(id);
        if (f && strcmp(f->name, name) == 0) return f;
    }
    return NULL;
}

static bool is_float_format(FormatId id) { return id == FMT_F32 || id == FMT_F16 || id == FMT_BF16; }

/* The dot product of a weight row and an activation row (len elements) in double from their dequantized
 * values; *mag gets Σ|w·a|, the scale that summation-order errors are measured against. Q8_1 partners
 * (Q4_1, Q5_1) use the block's stored s = fp16(d·Σq) for the min term, as the format defines. */
static double ref_dot(const Format *f, const Format *a, const uint8_t *w, const uint8_t *act, int len, double *mag) {
    static float wd[ROW_LEN * 8], ad[ROW_LEN * 8];
    f->to_float(w, wd, len);
    a->to_float(act, ad, len);
    double sum = 0, m = 0;
    for (int i = 0; i < len; i++) {
        sum += (double)wd[i] * ad[i];
        m += fabs((double)wd[i] * ad[i]);
    }
    if (a->id == FMT_Q8_1) {
        for (int b = 0; b < len / 32; b++) {
            uint16_t wm, as;
            memcpy(&wm, w + b * f->bytes + 2, 2); /* Q4_1 / Q5_1: d, m, ... */
            memcpy(&as, act + b * a->bytes + 2, 2); /* Q8_1: d, s, ... */
            double sa = 0;
            for (int i = 32 * b; i < 32 * b + 32; i++) sa += ad[i];
            sum += fp16_to_fp32(wm) * ((double)fp16_to_fp32(as) - sa);
        }
    }
    *mag = m;
    return sum;
}

TEST(formats, table_matches_index) {
    VecType types[64];
    int n = load_index(types, 64);
    REQUIRE(n == 22);
    for (int i = 0; i < n; i++) {
        const VecType *v = &types[i];
        const Format *f = format_get((uint32_t)v->id);
        if (!CHECK_MSG(f != NULL, "%s (id %d) not in the table", v->name, v->id)) continue;
        CHECK_MSG(strcmp(f->name, v->name) == 0, "id %d: %s vs %s", v->id, f->name, v->name);
        CHECK_MSG(f->block == v->block && f->bytes == v->bytes, "%s: block %d/%d bytes %d/%d", v->name, f->block,
                  v->block, f->bytes, v->bytes);
        CHECK_MSG(f->weight, "%s", v->name);
        CHECK_MSG(f->to_float && f->vec_dot, "%s: to_float / vec_dot missing", v->name);
        const Format *a = format_get(f->vec_dot_type);
        CHECK_MSG(a && strcmp(a->name, v->vdt) == 0, "%s: vec_dot_type %s, expected %s", v->name, a ? a->name : "?",
                  v->vdt);
        CHECK_MSG(a && a->from_float, "%s: activation partner without from_float", v->name);
    }
    /* the activation-only rows */
    const Format *q81 = format_get(FMT_Q8_1), *q8k = format_get(FMT_Q8_K);
    REQUIRE(q81 && q8k);
    CHECK(!q81->weight && q81->block == 32 && q81->bytes == 36 && q81->from_float && !q81->vec_dot);
    CHECK(!q8k->weight && q8k->block == 256 && q8k->bytes == 292 && q8k->from_float && !q8k->vec_dot);
    const Format *f32 = format_get(FMT_F32);
    REQUIRE(f32);
    CHECK(f32->to_float && f32->from_float && f32->vec_dot && f32->quantize);
    CHECK(format_get(4) == NULL && format_get(FMT_COUNT) == NULL && format_get(FMT_TQ1_0) == NULL);
}

/* Per type: dequantization bit-identical, activation rounding bit-identical, dot products close. One
 * summary line per type. */
TEST(formats, ggml_vectors) {
    VecType types[64];
    int n = load_index(types, 64);
    REQUIRE(n > 0);
    for (int t = 0; t < n; t++) {
        const VecType *v = &types[t];
        const Format *f = format_get((uint32_t)v->id);
        const Format *a = f ? format_get(f->vec_dot_type) : NULL;
        if (!CHECK_MSG(f && a && f->to_float && a->from_float && f->vec_dot, "%s: incomplete row", v->name)) continue;
        const size_t wrow = format_row_bytes(f, ROW_LEN), arow = format_row_bytes(a, ROW_LEN);
        char act_suffix[32];
        snprintf(act_suffix, sizeof act_suffix, ".act.%s.bin", a->name);
        uint8_t *w = load(v->name, ".weights.bin", W_ROWS * wrow);
        float *deq = load(v->name, ".weights.dequant.f32", W_ROWS * ROW_LEN * sizeof(float));
        float *act = load(v->name, ".act.f32", A_ROWS * ROW_LEN * sizeof(float));
        uint8_t *actq = load(v->name, act_suffix, A_ROWS * arow);
        float *dot = load(v->name, ".dot.f32", W_ROWS * A_ROWS * sizeof(float));
        float *out = malloc(W_ROWS * ROW_LEN * sizeof(float));
        uint8_t *mine = malloc(A_ROWS * arow);
        if (w && deq && act && actq && dot && out && mine) {
            /* dequantization, compared as bit patterns */
            memset(out, 0xff, W_ROWS * ROW_LEN * sizeof(float)); /* NaN poison */
            for (int r = 0; r < W_ROWS; r++) f->to_float(w + r * wrow, out + r * ROW_LEN, ROW_LEN);
            int bad_deq = 0, first = -1;
            for (int i = 0; i < W_ROWS * ROW_LEN; i++)
                if (fp32_to_bits(out[i]) != fp32_to_bits(deq[i])) {
                    if (first < 0) first = i;
                    bad_deq++;
                }
            CHECK_MSG(bad_deq == 0, "%s dequant: %d of %d differ, first at %d: %.9g vs ggml %.9g", v->name, bad_deq,
                      W_ROWS * ROW_LEN, first, first >= 0 ? out[first] : 0., first >= 0 ? deq[first] : 0.);

            /* activation rounding, byte for byte */
            memset(mine, 0xa5, A_ROWS * arow);
            for (int r = 0; r < A_ROWS; r++) a->from_float(act + r * ROW_LEN, mine + r * arow, ROW_LEN);
            int bad_act = 0;
            size_t first_b = 0;
            for (size_t i = 0; i < A_ROWS * arow; i++)
                if (mine[i] != actq[i] && bad_act++ == 0) first_b = i;
            CHECK_MSG(bad_act == 0, "%s act %s: %d bytes differ, first at byte %zu", v->name, a->name, bad_act,
                      first_b);

            /* dot products with ggml's activation bytes: error relative to ggml's value (reported) and
             * to Σ|w·a| (checked: the result itself may be small after cancellation) */
            double max_rel = 0, max_norm = 0;
            for (int r = 0; r < W_ROWS; r++)
                for (int c = 0; c < A_ROWS; c++) {
                    const float got = f->vec_dot(ROW_LEN, w + r * wrow, actq + c * arow);
                    const float want = dot[r * A_ROWS + c];
                    double mag;
                    ref_dot(f, a, w + r * wrow, actq + c * arow, ROW_LEN, &mag);
                    const double err = fabs((double)got - want);
                    max_rel = fmax(max_rel, err / fmax(fabs((double)want), 1e-30));
                    max_norm = fmax(max_norm, err / fmax(mag, 1e-30));
                }
            /* float formats: summation order only; integer formats: exact integer sums, then ≤ 32 float
             * scalings per row whose order differs from ggml's SIMD kernels */
            const double tol = is_float_format(f->id) ? 1e-7 : 5e-7;
            CHECK_MSG(max_norm <= tol, "%s dot: max error %.3g of sum|w*a| > %.1g", v->name, max_norm, tol);
            test_note("%-8s dequant bit-identical %-3s  act(%s) bit-identical %-3s  dot vs ggml: max rel err %.2e "
                      "(%.2e of sum|w*a|)",
                      v->name, bad_deq == 0 ? "yes" : "NO", a->name, bad_act == 0 ? "yes" : "NO", max_rel, max_norm);
        }
        free(w), free(deq), free(act), free(actq), free(dot), free(out), free(mine);
    }
}

/* The F32 row: plain float dot product, exact conversions. */
TEST(formats, f32_row) {
    const Format *f = format_get(FMT_F32);
    REQUIRE(f && f->vec_dot);
    float x[7] = {1, -2, 0.5f, 3, 1e-3f, -7, 2}, y[7] = {4, 1, -2, 0.25f, 1000, 1, 0.5f};
    float z[7];
    f->to_float(x, z, 7);
    CHECK(memcmp(x, z, sizeof x) == 0);
    CHECK(f->vec_dot(7, x, y) == 4 - 2 - 1 + 0.75f + 1 - 7 + 1);
}

/* Weight quantizers that must match ggml bit for bit (Q8_0 reference, F16, BF16), and a report for the
 * others (those are valid but not required to match). */
TEST(formats, quantize_vs_ggml) {
    VecType types[64];
    int n = load_index(types, 64);
    REQUIRE(n > 0);
    for (int t = 0; t < n; t++) {
        const VecType *v = &types[t];
        const Format *f = format_get((uint32_t)v->id);
        if (!f || !f->quantize) continue;
        const size_t wrow = format_row_bytes(f, ROW_LEN);
        float *src = load(v->name, ".weights.src.f32", W_ROWS * ROW_LEN * sizeof(float));
        uint8_t *want = load(v->name, ".weights.bin", W_ROWS * wrow);
        uint8_t *got = malloc(W_ROWS * wrow);
        if (src && want && got) {
            f->quantize(src, got, W_ROWS * ROW_LEN);
            int bad_blocks = 0;
            for (int b = 0; b < W_ROWS * ROW_LEN / f->block; b++)
                bad_blocks += memcmp(got + b * f->bytes, want + b * f->bytes, (size_t)f->bytes) != 0;
            const bool must = f->id == FMT_Q8_0 || f->id == FMT_F16 || f->id == FMT_BF16;
            if (must) CHECK_MSG(bad_blocks == 0, "%s quantize: %d blocks differ from ggml", v->name, bad_blocks);
            /* quality on the same data: ggml's dequantized rows vs ours */
            float *deq = load(v->name, ".weights.dequant.f32", W_ROWS * ROW_LEN * sizeof(float));
            float *mine = malloc(W_ROWS * ROW_LEN * sizeof(float));
            double se_g = 0, se_m = 0, sx = 0;
            if (deq && mine) {
                f->to_float(got, mine, W_ROWS * ROW_LEN);
                for (int i = 0; i < W_ROWS * ROW_LEN; i++) {
                    se_g += ((double)src[i] - deq[i]) * ((double)src[i] - deq[i]);
                    se_m += ((double)src[i] - mine[i]) * ((double)src[i] - mine[i]);
                    sx += (double)src[i] * src[i];
                }
            }
            free(deq), free(mine);
            test_note("%-8s quantize vs ggml: %-13s (%3d of %4d blocks differ); rel rms error ours %.4f, ggml %.4f",
                      v->name, bad_blocks == 0 ? "bit-identical" : "differs", bad_blocks, W_ROWS * ROW_LEN / f->block,
                      sqrt(se_m / sx), sqrt(se_g / sx));
        }
        free(src), free(want), free(got);
    }
}

/* Deterministic test data: a mix of gaussian-ish values with occasional outliers, plus shaped blocks. */
static uint64_t rng_state;
static float rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / 16777216.f;
}
static void fill(float *x, int n, int kind) {
    for (int i = 0; i < n; i++) {
        float g = (rnd() + rnd() + rnd() + rnd() - 2.f) * 1.7f; /* ~N(0,1) */
        switch (kind) {
        case 0: x[i] = g * 0.02f; break;                               /* typical weights */
        case 1: x[i] = g + (rnd() < 0.01f ? 8 * g : 0); break;         /* outliers */
        case 2: x[i] = 0.5f + 0.1f * g; break;                         /* all positive, offset */
        default: x[i] = (i / 16) % 3 == 0 ? 0 : g * (float)(1 + i % 7); /* zero sub-blocks, mixed scales */
        }
    }
}

/* Round trip dequant(quantize(x)) on odd block counts: relative RMS error within a bound for the bit
 * width, finite output, zeros stay zeros; and the reference dot agrees with the dequantized dot. */
TEST(formats, quantize_round_trip) {
    static const struct {
        FormatId id;
        double max_rel_rms; /* per data kind, generous for the bit width */
    } cases[] = {
        {FMT_F16, 1e-3},  {FMT_BF16, 5e-3},   {FMT_Q8_0, 0.02},  {FMT_Q4_0, 0.25},   {FMT_Q4_1, 0.17},
        {FMT_Q5_0, 0.12}, {FMT_Q5_1, 0.10},   {FMT_Q2_K, 0.65},  {FMT_Q3_K, 0.30},   {FMT_Q4_K, 0.16},
        {FMT_Q5_K, 0.08}, {FMT_Q6_K, 0.045},  {FMT_IQ4_NL, 0.17}, {FMT_IQ4_XS, 0.17},
    };
    static const int nblocks[] = {1, 2, 3, 5, 7};
    enum { MAXN = 7 * 256 };
    static float x[MAXN], y[MAXN], act[MAXN];
    static uint8_t q[MAXN * 4], aq[MAXN * 2];
    rng_state = 12345;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const Format *f = format_get(cases[c].id);
        if (!CHECK(f && f->quantize && f->to_float && f->vec_dot)) continue;
        const Format *a = format_get(f->vec_dot_type);
        double worst[4] = {0}, worst_dot = 0;
        for (size_t s = 0; s < sizeof nblocks / sizeof nblocks[0]; s++) {
            const int n = nblocks[s] * f->block * (f->block == 1 ? 32 : 1);
            for (int kind = 0; kind < 4; kind++) {
                fill(x, n, kind);
                memset(q, 0xcd, sizeof q);
                f->quantize(x, q, n);
                for (int i = 0; i < n; i++) y[i] = NAN;
                f->to_float(q, y, n);
                double se = 0, sx = 0;
                bool finite = true;
                for (int i = 0; i < n; i++) {
                    finite &= isfinite(y[i]);
                    se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
                    sx += (double)x[i] * x[i];
                }
                const double rel = sqrt(se / sx);
                if (rel > worst[kind]) worst[kind] = rel;
                CHECK_MSG(finite, "%s n=%d kind %d: non-finite output", f->name, n, kind);
                CHECK_MSG(rel <= cases[c].max_rel_rms, "%s n=%d kind %d: rel rms error %.4f > %.3f", f->name, n, kind,
                          rel, cases[c].max_rel_rms);

                /* vec_dot(quantized, act) vs the dequantized float dot */
                fill(act, n, 0);
                a->from_float(act, aq, n);
                double mag;
                const double ref = ref_dot(f, a, q, aq, n, &mag);
                const float got = f->vec_dot(n, q, aq);
                const double err = fabs(got - ref) / fmax(mag, 1e-30);
                if (err > worst_dot) worst_dot = err;
                CHECK_MSG(err < 1e-6, "%s n=%d kind %d: vec_dot %.9g vs dequantized dot %.9g", f->name, n, kind, got,
                          ref);
            }
        }
        test_note("%-8s round trip rel rms: weights %.4f  outliers %.4f  offset %.4f  mixed %.4f; dot vs deq %.1e",
                  f->name, worst[0], worst[1], worst[2], worst[3], worst_dot);
    }
}

/* Zero input quantizes to a block that dequantizes to zeros (no NaN from a 0/0 scale). */
TEST(formats, quantize_zeros) {
    static float x[256], y[256];
    static uint8_t q[256 * 4];
    for (uint32_t id = 0; id < FMT_COUNT; id++) {
        const Format *f = format_get(id);
        if (!f || !f->quantize || f->block > 256) continue;
        const int n = f->block == 1 ? 256 : f->block;
        memset(x, 0, sizeof x);
        f->quantize(x, q, n);
        f->to_float(q, y, n);
        bool ok = true;
        for (int i = 0; i < n; i++) ok &= y[i] == 0;
        CHECK_MSG(ok, "%s: zeros do not round-trip", f->name);
    }
    /* activation formats too */
    const FormatId acts[] = {FMT_Q8_0, FMT_Q8_1, FMT_Q8_K};
    for (int k = 0; k < 3; k++) {
        const Format *a = format_get(acts[k]);
        memset(q, 0x5a, sizeof q);
        a->from_float(x, q, a->block);
        a->to_float(q, y, a->block);
        bool ok = true;
        for (int i = 0; i < a->block; i++) ok &= y[i] == 0;
        CHECK_MSG(ok, "%s: zero activations", a->name);
    }
}

/* The dot products of the read-only formats agree with their own dequantization on a prefix of ggml's
 * rows (1, 2, 3 super-blocks; 1, 5, 7 blocks for 32-element formats). */
TEST(formats, vec_dot_matches_dequant) {
    VecType types[64];
    int n = load_index(types, 64);
    REQUIRE(n > 0);
    for (int t = 0; t < n; t++) {
        const Format *f = format_by_name(types[t].name);
        if (!f) continue;
        const Format *a = format_get(f->vec_dot_type);
        const size_t wrow = format_row_bytes(f, ROW_LEN), arow = format_row_bytes(a, ROW_LEN);
        uint8_t *w = load(f->name, ".weights.bin", W_ROWS * wrow);
        char act_suffix[32];
        snprintf(act_suffix, sizeof act_suffix, ".act.%s.bin", a->name);
        uint8_t *aq = load(f->name, act_suffix, A_ROWS * arow);
        double worst = 0;
        if (w && aq) {
            const int counts[] = {1, 2, 3, 5, 7};
            for (int k = 0; k < 5; k++) {
                const int nb = f->block == 256 ? (k % 3) + 1 : counts[k];
                const int len = nb * (f->block == 1 ? 32 : f->block);
                for (int r = 0; r < W_ROWS; r++) {
                    const uint8_t *wr = w + r * wrow, *ar = aq + (r % A_ROWS) * arow;
                    double mag;
                    const double ref = ref_dot(f, a, wr, ar, len, &mag);
                    const double err = fabs(f->vec_dot(len, wr, ar) - ref) / fmax(mag, 1e-30);
                    if (err > worst) worst = err;
                }
            }
            CHECK_MSG(worst < 1e-6, "%s: vec_dot vs dequantized dot, error %.3g of sum|w*a|", f->name, worst);
        }
        free(w), free(aq);
    }
}

/* ---- llama.cpp's summation orders (Format.dot_path, docs/PARITY.md) ------------------------------ */

/* The dot product in the order of `path` (vec_dot where the row has no dot_path). */
static float path_dot(const Format *f, DotPath path, int64_t n, const uint8_t *w, const uint8_t *act) {
    return f->dot_path ? f->dot_path(path, n, w, act) : f->vec_dot(n, w, act);
}

/* One activation row and mul_mat_id run ggml's vec_dot for every non-repacked matrix: the GEMV and ID
 * orders must give ggml's own vec_dot results (tests/data/formats/T.dot.f32) bit for bit, for every
 * weight format. */
TEST(formats, dot_path_gemv_bit_exact) {
    VecType types[64];
    int n = load_index(types, 64);
    REQUIRE(n == 22);
    for (int t = 0; t < n; t++) {
        const Format *f = format_by_name(types[t].name);
        if (!CHECK_MSG(f != NULL, "%s", types[t].name)) continue;
        const Format *a = format_get(f->vec_dot_type);
        const size_t wrow = format_row_bytes(f, ROW_LEN), arow = format_row_bytes(a, ROW_LEN);
        char act_suffix[32];
        snprintf(act_suffix, sizeof act_suffix, ".act.%s.bin", a->name);
        uint8_t *w = load(f->name, ".weights.bin", W_ROWS * wrow);
        uint8_t *aq = load(f->name, act_suffix, A_ROWS * arow);
        float *dot = load(f->name, ".dot.f32", W_ROWS * A_ROWS * sizeof(float));
        if (w && aq && dot) {
            int same[2] = {0, 0};
            const DotPath paths[2] = {DOT_GEMV, DOT_ID};
            for (int p = 0; p < 2; p++)
                for (int r = 0; r < W_ROWS; r++)
                    for (int c = 0; c < A_ROWS; c++) {
                        const float got = path_dot(f, paths[p], ROW_LEN, w + r * wrow, aq + c * arow);
                        same[p] += memcmp(&got, &dot[r * A_ROWS + c], sizeof got) == 0;
                    }
            CHECK_MSG(same[0] == W_ROWS * A_ROWS && same[1] == W_ROWS * A_ROWS,
                      "%s: %d (GEMV) and %d (ID) of %d dot products bit-identical to ggml's vec_dot", f->name, same[0],
                      same[1], W_ROWS * A_ROWS);
        }
        free(w), free(aq), free(dot);
    }
}

/* Which kernel llama.cpp runs (the pick rules of each row, see the quant_order_*.c headers). */
TEST(formats, dot_path_pick_rules) {
    const Format *f32 = format_get(FMT_F32), *f16 = format_get(FMT_F16), *bf16 = format_get(FMT_BF16);
    const Format *q4_0 = format_get(FMT_Q4_0), *q5_0 = format_get(FMT_Q5_0), *iq4nl = format_get(FMT_IQ4_NL);
    const Format *q4k = format_get(FMT_Q4_K), *q2k = format_get(FMT_Q2_K), *q6k = format_get(FMT_Q6_K);
    const Format *iq2 = format_get(FMT_IQ2_XXS), *mx = format_get(FMT_MXFP4);
    REQUIRE(f32 && f16 && bf16 && q4_0 && q5_0 && iq4nl && q4k && q2k && q6k && iq2 && mx);
    /* tinyBLAS: ≥ 2 rows, rows % 4, row length a multiple of the vector width; never for experts */
    CHECK(format_pick_path(f16, 64, 64, 2, false) == DOT_GEMM);
    CHECK(format_pick_path(f16, 64, 64, 1, false) == DOT_GEMV);
    CHECK(format_pick_path(f16, 66, 64, 8, false) == DOT_GEMV);
    CHECK(format_pick_path(f16, 64, 40, 8, false) == DOT_GEMV);
    CHECK(format_pick_path(f16, 64, 64, 8, true) == DOT_ID);
    CHECK(format_pick_path(bf16, 64, 48, 8, false) == DOT_GEMV); /* 32 bf16 per AVX512_BF16 step */
    CHECK(format_pick_path(bf16, 64, 96, 8, false) == DOT_GEMM);
    CHECK(format_pick_path(f32, 64, 48, 8, false) == DOT_GEMM);
    /* repacking (rows % 8 == 0) wins over tinyBLAS and vec_dot, in mul_mat_id too */
    CHECK(format_pick_path(q4_0, 64, 256, 1, false) == DOT_REPACK);
    CHECK(format_pick_path(q4_0, 64, 256, 9, true) == DOT_REPACK);
    CHECK(format_pick_path(q4_0, 60, 256, 9, false) == DOT_GEMM);
    CHECK(format_pick_path(iq4nl, 60, 256, 9, false) == DOT_GEMM && format_pick_path(iq4nl, 60, 256, 1, false) == DOT_GEMV);
    CHECK(format_pick_path(mx, 64, 256, 9, false) == DOT_REPACK && format_pick_path(mx, 4, 256, 9, false) == DOT_GEMM);
    CHECK(format_pick_path(q4k, 64, 256, 3, false) == DOT_REPACK);
    CHECK(format_pick_path(q4k, 64, 256, 4, false) == DOT_REPACK_GEMM);
    CHECK(format_pick_path(q4k, 64, 256, 40, true) == DOT_REPACK);
    CHECK(format_pick_path(q4k, 4, 256, 40, false) == DOT_GEMM);
    CHECK(format_pick_path(q2k, 64, 256, 8, false) == DOT_REPACK_GEMM);
    /* the repacked gemm takes whole groups of 4 rows; the rest go through its gemv */
    CHECK(format_pick_path_row(q4k, 64, 256, 7, false, 3) == DOT_REPACK_GEMM);
    CHECK(format_pick_path_row(q4k, 64, 256, 7, false, 4) == DOT_REPACK);
    CHECK(format_pick_path_row(q4k, 64, 256, 8, false, 7) == DOT_REPACK_GEMM);
    CHECK(format_pick_path_row(f32, 64, 64, 7, false, 6) == DOT_GEMM);
    /* the IQ panel gemm: rows % 8 and ≥ 8 activation rows (per expert for mul_mat_id) */
    CHECK(format_pick_path(iq2, 64, 256, 8, false) == DOT_GEMM);
    CHECK(format_pick_path(iq2, 64, 256, 8, true) == DOT_GEMM);
    CHECK(format_pick_path(iq2, 64, 256, 7, true) == DOT_ID);
    CHECK(format_pick_path(iq2, 60, 256, 64, false) == DOT_GEMV);
    /* one kernel for everything */
    CHECK(q5_0->pick_path == NULL && q6k->pick_path == NULL);
}

/* The batched orders on ggml's rows: orders that llama.cpp's kernels share must agree bit for bit, and
 * every order stays within rounding of the exact dot product. (Their bit-exactness against llama.cpp is
 * checked end to end by the parity tests: m2/m6 run the repacked Q4_K gemv/gemm and the IQ2_XXS panel,
 * m3/m5 tinyBLAS BF16/F16 — and by the models of docs/PARITY.md.) */
TEST(formats, dot_path_batched_orders) {
    VecType types[64];
    int n = load_index(types, 64);
    REQUIRE(n > 0);
    const DotPath all[] = {DOT_GEMV, DOT_GEMM, DOT_ID, DOT_REPACK, DOT_REPACK_GEMM};
    for (int t = 0; t < n; t++) {
        const Format *f = format_by_name(types[t].name);
        if (!f) continue;
        const Format *a = format_get(f->vec_dot_type);
        const size_t wrow = format_row_bytes(f, ROW_LEN), arow = format_row_bytes(a, ROW_LEN);
        char act_suffix[32];
        snprintf(act_suffix, sizeof act_suffix, ".act.%s.bin", a->name);
        uint8_t *w = load(f->name, ".weights.bin", W_ROWS * wrow);
        uint8_t *aq = load(f->name, act_suffix, A_ROWS * arow);
        if (w && aq) {
            double worst = 0;
            int differ[5] = {0};
            for (int r = 0; r < W_ROWS; r++)
                for (int c = 0; c < A_ROWS; c++) {
                    const uint8_t *wr = w + r * wrow, *ar = aq + c * arow;
                    double mag;
                    const double ref = ref_dot(f, a, wr, ar, ROW_LEN, &mag);
                    const float gemv = path_dot(f, DOT_GEMV, ROW_LEN, wr, ar);
                    for (int p = 0; p < 5; p++) {
                        const float v = path_dot(f, all[p], ROW_LEN, wr, ar);
                        worst = fmax(worst, fabs(v - ref) / fmax(mag, 1e-30));
                        differ[p] += memcmp(&v, &gemv, sizeof v) != 0;
                    }
                }
            CHECK_MSG(worst < 1e-6, "%s: a path's dot product is off by %.3g of sum|w*a|", f->name, worst);
            /* tinyBLAS_Q0 sums Q4_0 / Q5_0 / Q8_0 as their vec_dot does; the repacked Q4_0 gemv and gemm
             * share one order; formats without these kernels ignore the path */
            const bool same_gemm = f->id == FMT_Q4_0 || f->id == FMT_Q5_0 || f->id == FMT_Q8_0 || f->id == FMT_Q4_1 ||
                                   f->id == FMT_Q5_1 || f->id == FMT_MXFP4 || f->id == FMT_Q3_K || f->id == FMT_Q5_K ||
                                   f->id == FMT_Q6_K || f->id == FMT_Q2_K || f->id == FMT_Q4_K;
            if (same_gemm) CHECK_MSG(differ[1] == 0, "%s: DOT_GEMM differs from vec_dot", f->name);
            if (f->id == FMT_Q4_0 || f->id == FMT_IQ4_NL || f->id == FMT_MXFP4) {
                float v1 = 0, v2 = 0;
                int same = 0;
                for (int r = 0; r < W_ROWS; r++) {
                    v1 = path_dot(f, DOT_REPACK, ROW_LEN, w + r * wrow, aq);
                    v2 = path_dot(f, DOT_REPACK_GEMM, ROW_LEN, w + r * wrow, aq);
                    same += memcmp(&v1, &v2, sizeof v1) == 0;
                }
                CHECK_MSG(same == W_ROWS, "%s: repacked gemv and gemm orders differ", f->name);
            }
            test_note("%-8s paths differing from vec_dot (of %d): GEMM %2d  ID %2d  REPACK %2d  REPACK_GEMM %2d; worst "
                      "error %.2e of sum|w*a|",
                      f->name, W_ROWS * A_ROWS, differ[1], differ[2], differ[3], differ[4], worst);
        }
        free(w), free(aq);
    }
}

/* ggml_vec_dot_f32's n % 64 leftovers as llama.cpp's build compiled them: products rounded and added in
 * chunks of 16 and 8, the last n % 8 fused (base/fdot.c). One product whose fused and unfused sums
 * differ, placed at element 64 of a row of 65 (fused) and of 72 (a chunk of 8: unfused). */
TEST(formats, f32_leftover_fusion) {
    const Format *f = format_get(FMT_F32);
    REQUIRE(f && f->dot_path);
    static float x[72], y[72];
    x[0] = 1.f / 3.f, y[0] = 1.f; /* the 64-element part sums to 1/3 */
    float a = 1.f, b = 1.f, fused = 0, unfused = 0;
    for (int k = 0; k < 1000 && fused == unfused; k++) { /* some a·b whose rounding matters next to 1/3 */
        a = 1.f + (float)(k + 1) * 0x1p-20f, b = 1.f + (float)(k + 7) * 0x1p-19f;
        volatile float p = a * b; /* rounded on its own, whatever the compiler contracts */
        fused = fmaf(a, b, x[0]), unfused = x[0] + p;
    }
    REQUIRE(fused != unfused);
    x[64] = a, y[64] = b;
    CHECK(f->dot_path(DOT_GEMV, 65, x, y) == fused);
    CHECK(f->dot_path(DOT_GEMV, 72, x, y) == unfused);
}
