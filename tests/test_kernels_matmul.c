/* test_kernels_matmul.c — the fast matrix multiply (kernels/cpu/matmul_*) against the scalar reference,
 * bit for bit: for every ISA level this CPU supports and every weight format with a fast kernel there,
 * odd shapes (rows 1, 3, 7, 8, 33, 64, 257; 1-5 blocks and 4096 columns; 1, 2, 3, 5, 17 and 64 tokens;
 * plain and expert matrices), NaN-poisoned outputs, 1 and 2 threads. Also the SIMD activation
 * quantizers against the format table's from_float (ggml's vectors and random rows). */
#include "test.h"
#include "test_rand.h"

#include "base/fp16.h"
#include "base/pool.h"
#include "gguf/format.h"
#include "backend/cpu/host_backend.h"
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/matmul_cpu.h"
#include "kernels/ops.h"
#include "model/model.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------------------ */

static void *xaligned(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) abort();
    return p;
}

/* ---- activation quantizers ----------------------------------------------------------------------------- */

static const uint32_t act_types[] = {FMT_Q8_0, FMT_Q8_1, FMT_Q8_K, FMT_F16, FMT_BF16};

TEST(kernels, act_quantizers_random_rows) {
    for (int isa = ISA_AVX2; isa < ISA_COUNT; isa++) {
        if (!isa_supported((Isa)isa)) continue;
        for (size_t k = 0; k < sizeof act_types / sizeof act_types[0]; k++) {
            const Format *af = format_get(act_types[k]);
            const FormatFromFloat fast = mm_quantize_act(isa, act_types[k]);
            REQUIRE_MSG(fast != NULL, "%s: no fast quantizer at %s", af->name, isa_name((Isa)isa));
            const int blk = af->block == 1 ? 1 : af->block;
            int bad = 0, cases = 0;
            const int64_t sizes[] = {1, 2, 3, 5, 7, 9, 13, 31, 33, 64, 65};
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                const int64_t n = sizes[s] * (blk == 1 ? 1 : blk);
                float *x = malloc((size_t)n * sizeof(float));
                const size_t bytes = format_row_bytes(af, n);
                uint8_t *a = malloc(bytes), *b = malloc(bytes);
                for (int rep = 0; rep < 8; rep++) {
                    for (int64_t i = 0; i < n; i++) x[i] = trand_act();
                    if (rep == 1) /* a block with ties of magnitude: the first one decides Q8_K's sign */
                        for (int64_t i = 0; i < n; i += 7) x[i] = (i & 8) ? 9.f : -9.f;
                    if (rep == 2) memset(x, 0, (size_t)n * sizeof(float));
                    if (rep == 3)
                        for (int64_t i = 0; i < n; i++) x[i] = (float)((int)(trand_f() * 300)) * 0.5f; /* exact halves */
                    if (rep == 4)
                        for (int64_t i = 0; i < n; i++) x[i] *= 1e-30f;
                    memset(a, 0x5a, bytes);
                    memset(b, 0xa5, bytes);
                    af->from_float(x, a, n);
                    fast(x, b, n);
                    cases++;
                    if (memcmp(a, b, bytes) != 0 && bad++ == 0)
                        CHECK_MSG(0, "%s %s n=%lld rep %d differs", isa_name((Isa)isa), af->name, (long long)n, rep);
                }
                free(x), free(a), free(b);
            }
            CHECK(bad == 0);
            test_note("%-6s %-5s %d rows bit-identical: %s", isa_name((Isa)isa), af->name, cases, bad ? "NO" : "yes");
        }
    }
}

/* ggml's own activation vectors (tests/data/formats/<type>.act.*) through the fast quantizers */
TEST(kernels, act_quantizers_ggml_vectors) {
    static const struct {
        const char *type, *suffix;
        uint32_t act;
    } v[] = {{"q8_0", ".act.q8_0.bin", FMT_Q8_0}, {"q4_1", ".act.q8_1.bin", FMT_Q8_1}, {"q4_K", ".act.q8_K.bin", FMT_Q8_K},
             {"f16", ".act.f16.bin", FMT_F16},    {"bf16", ".act.bf16.bin", FMT_BF16}};
    enum { LEN = 1024, ROWS = 4 };
    for (int isa = ISA_AVX2; isa < ISA_COUNT; isa++) {
        if (!isa_supported((Isa)isa)) continue;
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
            const Format *af = format_get(v[k].act);
            char rel[96];
            snprintf(rel, sizeof rel, "formats/%s.act.f32", v[k].type);
            size_t nx = 0, nq = 0;
            float *x = test_read_file(test_data(rel), &nx);
            snprintf(rel, sizeof rel, "formats/%s%s", v[k].type, v[k].suffix);
            uint8_t *q = test_read_file(test_data(rel), &nq);
            const size_t row = format_row_bytes(af, LEN);
            if (CHECK_MSG(x && q && nx == ROWS * LEN * sizeof(float) && nq == ROWS * row, "%s vectors", v[k].type)) {
                uint8_t *mine = malloc(ROWS * row);
                for (int r = 0; r < ROWS; r++) mm_quantize_act(isa, v[k].act)(x + r * LEN, mine + r * row, LEN);
                CHECK_MSG(memcmp(mine, q, ROWS * row) == 0, "%s %s differs from ggml's", isa_name((Isa)isa), af->name);
                free(mine);
            }
            free(x), free(q);
        }
    }
}

/* ---- matmul vs reference ------------------------------------------------------------------------------- */

typedef struct Case {
    int64_t rows, cols, T;
    bool gemv;
} Case;

/* the arithmetic the cases run in (MATMUL_GGML: llama.cpp's orders; MATMUL_FAST) */
static MatMode cur_mode = MATMUL_GGML;

/* Runs one product through fn with a given pool; y is NaN-poisoned first. */
static void run_mm(MatmulFn fn, Pool *pool, const MatW *w, const float *x, int64_t T, float *y) {
    const int nt = pool_size(pool);
    const size_t sb = ops_scratch_bytes(T, w->cols, nt);
    void *scratch = xaligned(sb);
    memset(scratch, 0xcd, sb);
    const OpCtx c = {cur_mode, pool, scratch, sb};
    for (int64_t i = 0; i < T * w->rows; i++) y[i] = NAN;
    fn(&c, w, x, T, y);
    free(scratch);
}

/* Compares the fast path of `isa` with the reference on one case; returns 1 if any output differs. */
static int check_case(Isa isa, const Format *f, const Case *cs, Pool *pool2, int *skipped) {
    const int64_t rows = cs->rows, cols = cs->cols, T = cs->T;
    MatW w = {0};
    w.type = f->id;
    w.cols = cols;
    w.rows = rows;
    w.row_bytes = format_row_bytes(f, cols);
    w.gemv = cs->gemv;
    if (!mm_has_kernel(isa, cur_mode, &w, T)) {
        (*skipped)++;
        return 0;
    }
    uint8_t *wd = xaligned(w.row_bytes * (size_t)rows + 64);
    for (int64_t r = 0; r < rows; r++) trand_row(f, wd + r * w.row_bytes, cols);
    w.data = wd;
    float *x = xaligned((size_t)(T * cols) * sizeof(float));
    for (int64_t i = 0; i < T * cols; i++) x[i] = trand_act();
    if (T > 2) memset(x + cols, 0, (size_t)cols * sizeof(float)); /* an all-zero row */
    if (T > 3) /* a row of denormals (BF16's VDPBF16PS reads them as zero) */
        for (int64_t i = 0; i < cols; i++) x[2 * cols + i] *= 1e-39f;
    float *yr = xaligned((size_t)(T * rows) * sizeof(float));
    float *y1 = xaligned((size_t)(T * rows) * sizeof(float));
    float *y2 = xaligned((size_t)(T * rows) * sizeof(float));
    run_mm(matmul_ref, NULL, &w, x, T, yr);
    const MatmulFn fast = matmul_cpu_select(isa);
    run_mm(fast, NULL, &w, x, T, y1);
    run_mm(fast, pool2, &w, x, T, y2);
    int bad = 0;
    for (int64_t i = 0; i < T * rows; i++)
        if (fp32_to_bits(y1[i]) != fp32_to_bits(yr[i]) && bad++ < 3)
            CHECK_MSG(0, "%s %s rows %lld cols %lld T %lld%s: y[%lld][%lld] = %.9g, reference %.9g", isa_name(isa), f->name,
                      (long long)rows, (long long)cols, (long long)T, cs->gemv ? " expert" : "", (long long)(i / rows),
                      (long long)(i % rows), y1[i], yr[i]);
    if (memcmp(y1, y2, (size_t)(T * rows) * sizeof(float)) != 0) {
        bad++;
        CHECK_MSG(0, "%s %s rows %lld cols %lld T %lld: 1 and 2 threads differ", isa_name(isa), f->name, (long long)rows,
                  (long long)cols, (long long)T);
    }
    if (cur_mode == MATMUL_FAST && T > 1) { /* batch invariance: each row as if it were alone */
        for (int64_t t = 0; t < T && bad == 0; t++) {
            run_mm(fast, NULL, &w, x + t * cols, 1, y2);
            if (memcmp(y2, y1 + t * rows, (size_t)rows * sizeof(float)) != 0) {
                bad++;
                CHECK_MSG(0, "%s %s rows %lld cols %lld T %lld: row %lld alone differs from the batch", isa_name(isa), f->name,
                          (long long)rows, (long long)cols, (long long)T, (long long)t);
            }
        }
    }
    if (cur_mode == MATMUL_FAST && pack_p16_format(&w) && !cs->gemv) { /* the P16 panels (pack.c) */
        uint8_t *pk = xaligned(pack_p16_bytes(&w) * (size_t)(rows / 16) + 64);
        pack_p16(pk, &w);
        MatW wp = w;
        wp.pack = pk;
        wp.pack_kind = PACK_P16;
        for (int th = 1; th <= 2; th++) { /* one thread: items of 32+ rows from 128 rows (the 2-panel tiles) */
            run_mm(fast, th == 2 ? pool2 : NULL, &wp, x, T, y2);
            if (memcmp(yr, y2, (size_t)(T * rows) * sizeof(float)) != 0) {
                bad++;
                CHECK_MSG(0, "%s %s rows %lld cols %lld T %lld %d thread(s): the P16 panels differ", isa_name(isa), f->name,
                          (long long)rows, (long long)cols, (long long)T, th);
            }
        }
        /* pack_p16_block gives back every block of the file (what reads a packed matrix's rows: host_ops) */
        uint8_t blk[512];
        const int64_t nbl = cols / f->block;
        for (int64_t r = 0; r < rows && bad == 0; r++)
            for (int64_t i = 0; i < nbl; i++) {
                pack_p16_block(pk, &w, r, i, blk);
                if (memcmp(blk, (const uint8_t *)w.data + (size_t)r * w.row_bytes + (size_t)i * (size_t)f->bytes, (size_t)f->bytes)) {
                    bad++;
                    CHECK_MSG(0, "%s rows %lld cols %lld: pack_p16_block(row %lld, block %lld) is not the file's block",
                              f->name, (long long)rows, (long long)cols, (long long)r, (long long)i);
                    break;
                }
            }
        free(pk);
    }
    if (cur_mode == MATMUL_GGML && f->id == FMT_Q8_0 && rows % 8 == 0 && !cs->gemv) { /* the packed layout (model/pack.c) */
        uint8_t *pk = xaligned(w.row_bytes * (size_t)rows + 64);
        pack_rows8(pk, wd, rows, w.row_bytes, 34);
        MatW wp = w;
        wp.pack = pk;
        wp.pack_kind = PACK_R8;
        run_mm(fast, pool2, &wp, x, T, y2);
        if (memcmp(yr, y2, (size_t)(T * rows) * sizeof(float)) != 0) {
            bad++;
            CHECK_MSG(0, "%s %s rows %lld cols %lld T %lld: the packed layout differs", isa_name(isa), f->name,
                      (long long)rows, (long long)cols, (long long)T);
        }
        free(pk);
    }
    free(wd), free(x), free(yr), free(y1), free(y2);
    return bad != 0;
}

static void check_format_pass(const Format *f, Pool *pool2, Isa isa, const char *label);

static void check_format(const Format *f, Pool *pool2) {
    for (int isa = ISA_AVX2; isa < ISA_COUNT; isa++) {
        if (!isa_supported((Isa)isa)) continue;
        if (isa == ISA_AVX512 && isa_has_avx512_vbmi() && (f->id == FMT_IQ2_XXS || f->id == FMT_IQ2_XS || f->id == FMT_IQ2_S || f->id == FMT_IQ3_XXS || f->id == FMT_IQ3_S ||
                                                           f->id == FMT_IQ4_XS)) {
            /* the CPU has VBMI: its variant, then the plain one (mm_set_vbmi) */
            check_format_pass(f, pool2, (Isa)isa, "avx512+vbmi");
            mm_set_vbmi(false);
            check_format_pass(f, pool2, (Isa)isa, "avx512");
            mm_set_vbmi(true);
        } else
            check_format_pass(f, pool2, (Isa)isa, isa_name((Isa)isa));
    }
}

static void check_format_pass(const Format *f, Pool *pool2, Isa isa, const char *label) {
    static const int64_t rows_list[] = {1, 3, 7, 8, 33, 48, 64, 128, 257};
    static const int64_t T_list[] = {1, 2, 3, 4, 5, 7, 8, 13, 17, 64}; /* 2-8: the small-batch tiles (16 × T, Q8_0's 32 × T); 13: Q8_0's 16-row tiles up to 16 tokens */
    {
        int cases = 0, bad = 0, skipped = 0;
        const int blk = f->block == 1 ? 16 : f->block; /* float formats: 16-element steps, plus odd widths */
        for (int nbk = 0; nbk <= 5; nbk++) {
            const int64_t cols = nbk == 5 ? 4096 : (nbk + 1) * blk + (f->block == 1 && nbk == 2 ? 3 : 0);
            for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++)
                for (size_t ti = 0; ti < sizeof T_list / sizeof T_list[0]; ti++)
                    for (int g = 0; g < 2; g++) {
                        const Case cs = {rows_list[ri], cols, T_list[ti], g == 1};
                        if (cs.rows * cs.cols * cs.T > (1 << 22)) continue; /* keep the reference's time sane */
                        cases++;
                        bad += check_case(isa, f, &cs, pool2, &skipped);
                    }
        }
        CHECK_MSG(bad == 0, "%s %s: %d of %d cases differ", label, f->name, bad, cases);
        /* (bad counts cases: check_case returns 0 or 1) */
        if (skipped < cases)
            test_note("%-6s %-8s %3d cases bit-identical to the reference%s%s (%d on the reference path)",
                      label, f->name, cases - skipped, cur_mode == MATMUL_FAST ? " and batch-invariant" : "",
                      bad ? ": NO" : "", skipped);
    }
}

static void all_formats(MatMode mode) {
    Err err = {0};
    Pool *pool2 = pool_create(2, &err);
    REQUIRE(pool2 != NULL);
    cur_mode = mode;
    for (uint32_t id = 0; id < FMT_COUNT; id++) {
        const Format *f = format_get(id);
        if (!f || !f->weight || !f->vec_dot) continue;
        check_format(f, pool2);
    }
    cur_mode = MATMUL_GGML;
    pool_destroy(pool2);
}

TEST(kernels, matmul_bitwise_all_formats) { all_formats(MATMUL_GGML); }

/* The fast arithmetic (DOT_FAST): the kernels give the reference's bits, and every row of a batch the bits
 * it has alone (the decode GEMV and the prefill GEMM sum in one order). */
TEST(kernels, matmul_fast_bitwise_batch_invariant) { all_formats(MATMUL_FAST); }

/* The fast arithmetic's error against exact mode, per weight format: one product of 64 tokens with a
 * 512 × 2048 matrix of random blocks; NMSE = Σ(y − y_exact)² / Σ y_exact² must stay under ggml's own bound for
 * a matmul in test-backend-ops (5e-4). The same numbers for llama.cpp's orders are printed beside them. */
TEST(kernels, matmul_fast_nmse_per_format) {
    enum { ROWS = 512, COLS = 2048, T = 64 };
    float *x = xaligned(sizeof(float) * T * COLS), *ye = xaligned(sizeof(float) * T * ROWS);
    float *yf = xaligned(sizeof(float) * T * ROWS), *yl = xaligned(sizeof(float) * T * ROWS);
    for (int i = 0; i < T * COLS; i++) x[i] = trand_act();
    const size_t sb = ops_scratch_bytes(T, COLS, 1);
    void *scratch = xaligned(sb);
    const MatmulFn fast = matmul_cpu_select(isa_best());
    for (uint32_t id = 0; id < FMT_COUNT; id++) {
        const Format *f = format_get(id);
        if (!f || !f->weight || !f->vec_dot) continue;
        MatW w = {0};
        w.type = id, w.cols = COLS, w.rows = ROWS, w.row_bytes = format_row_bytes(f, COLS);
        uint8_t *wd = xaligned(w.row_bytes * ROWS);
        for (int r = 0; r < ROWS; r++) trand_row(f, wd + r * w.row_bytes, COLS);
        w.data = wd;
        OpCtx c = {MATMUL_EXACT, NULL, scratch, sb};
        matmul_ref(&c, &w, x, T, ye);
        c.mode = MATMUL_FAST;
        fast(&c, &w, x, T, yf);
        c.mode = MATMUL_GGML;
        fast(&c, &w, x, T, yl);
        double num_f = 0, num_l = 0, den = 0;
        for (int i = 0; i < T * ROWS; i++) {
            num_f += ((double)yf[i] - ye[i]) * ((double)yf[i] - ye[i]);
            num_l += ((double)yl[i] - ye[i]) * ((double)yl[i] - ye[i]);
            den += (double)ye[i] * ye[i];
        }
        const double nf = den > 0 ? num_f / den : 0, nl = den > 0 ? num_l / den : 0;
        CHECK_MSG(nf <= 5e-4 && isfinite(nf), "%s: NMSE %.3g", f->name, nf);
        test_note("%-8s NMSE against exact: fast %.3e, llama.cpp's orders %.3e", f->name, nf, nl);
        free(wd);
    }
    free(x), free(ye), free(yf), free(yl), free(scratch);
}

/* Exact mode stays on the reference: identical bits through the fast table. */
TEST(kernels, matmul_exact_mode_is_reference) {
    const Format *f = format_get(FMT_Q8_0);
    MatW w = {0};
    w.type = FMT_Q8_0;
    w.cols = 256;
    w.rows = 24;
    w.row_bytes = format_row_bytes(f, 256);
    uint8_t *wd = xaligned(w.row_bytes * 24);
    for (int r = 0; r < 24; r++) trand_row(f, wd + r * w.row_bytes, 256);
    w.data = wd;
    float x[3 * 256], yr[3 * 24], yf[3 * 24];
    for (int i = 0; i < 3 * 256; i++) x[i] = trand_act();
    const size_t sb = ops_scratch_bytes(3, 256, 1);
    void *scratch = xaligned(sb);
    OpCtx c = {MATMUL_EXACT, NULL, scratch, sb};
    matmul_ref(&c, &w, x, 3, yr);
    for (int isa = ISA_AVX2; isa < ISA_COUNT; isa++) {
        if (!isa_supported((Isa)isa)) continue;
        matmul_cpu_select((Isa)isa)(&c, &w, x, 3, yf);
        CHECK(memcmp(yr, yf, sizeof yr) == 0);
    }
    free(wd), free(scratch);
}

/* ---- gate, up and SwiGLU in one pass ----------------------------------------------------------------- */

/* A random matrix of format f (rows × cols), P16-packed when pack (the fast arithmetic's panels) */
static MatW sw_mat(const Format *f, int64_t rows, int64_t cols, bool pack, uint8_t **keep) {
    MatW w = {0};
    w.type = f->id, w.cols = cols, w.rows = rows, w.row_bytes = format_row_bytes(f, cols);
    uint8_t *wd = xaligned(w.row_bytes * (size_t)rows + 64);
    for (int64_t r = 0; r < rows; r++) trand_row(f, wd + r * w.row_bytes, cols);
    w.data = wd, keep[0] = wd, keep[1] = NULL;
    if (pack && rows % 16 == 0 && pack_p16_format(&w)) {
        keep[1] = xaligned(pack_p16_bytes(&w) * (size_t)(rows / 16) + 64);
        pack_p16(keep[1], &w);
        w.pack = keep[1], w.pack_kind = PACK_P16;
    }
    return w;
}

/* Ops.matmul_swiglu against matmul, matmul, swiglu_rows of the same table: bit for bit at 1 and 2 threads.
 * Returns 1 if the case differs. */
static int sw_case(Isa isa, const Format *fg, const Format *fu, int64_t rows, int64_t cols, int64_t T, Pool *pool2) {
    const Ops *ops = ops_cpu(isa);
    uint8_t *kg[2], *ku[2];
    const MatW wg = sw_mat(fg, rows, cols, cur_mode == MATMUL_FAST, kg), wu = sw_mat(fu, rows, cols, cur_mode == MATMUL_FAST, ku);
    float *x = xaligned((size_t)(T * cols) * sizeof(float));
    for (int64_t i = 0; i < T * cols; i++) x[i] = trand_act();
    const size_t n = (size_t)(T * rows);
    float *y0 = xaligned(n * 4), *u0 = xaligned(n * 4), *y1 = xaligned(n * 4), *u1 = xaligned(n * 4);
    const size_t sb = ops_scratch_bytes(T, cols, 2);
    void *scratch = xaligned(sb);
    OpCtx c = {cur_mode, NULL, scratch, sb};
    ops->matmul(&c, &wg, x, T, y0);
    ops->matmul(&c, &wu, x, T, u0);
    ops->swiglu_rows(&c, y0, u0, y0, (int)T, (int)rows);
    int bad = 0;
    for (int th = 1; th <= 2 && !bad; th++) {
        c.pool = th == 2 ? pool2 : NULL;
        for (size_t i = 0; i < n; i++) y1[i] = u1[i] = NAN;
        ops->matmul_swiglu(&c, &wg, &wu, x, T, y1, u1);
        if (memcmp(y0, y1, n * 4) != 0) {
            bad = 1;
            CHECK_MSG(0, "%s %s/%s rows %lld cols %lld T %lld, %d thread(s): gate+up+swiglu in one pass differs", isa_name(isa),
                      fg->name, fu->name, (long long)rows, (long long)cols, (long long)T, th);
        }
    }
    free(kg[0]), free(kg[1]), free(ku[0]), free(ku[1]), free(x), free(y0), free(u0), free(y1), free(u1), free(scratch);
    return bad;
}

/* Every weight format with a fast kernel, both arithmetics: odd row counts (the one-pass grid's row chunks are
 * multiples of 16, so that a block's elements take the branch of the row op they take in a whole row: 16-wide
 * chunks from the row's start, the tail through libm), decode and prefill sizes, P16 panels in the fast one; and
 * gate and up of formats whose activation layouts differ (the three calls). */
TEST(kernels, matmul_swiglu_one_pass_bitwise) {
    Err err = {0};
    Pool *pool2 = pool_create(2, &err);
    REQUIRE(pool2 != NULL);
    static const int64_t rows_list[] = {8, 40, 96, 257};
    static const int64_t T_list[] = {1, 3, 9, 37};
    int cases = 0, bad = 0;
    for (int mode = 0; mode < 2; mode++) {
        cur_mode = mode ? MATMUL_FAST : MATMUL_GGML;
        for (int isa = ISA_AVX2; isa < ISA_COUNT; isa++) {
            if (!isa_supported((Isa)isa)) continue;
            for (uint32_t id = 0; id < FMT_COUNT; id++) {
                const Format *f = format_get(id);
                if (!f || !f->weight || !f->vec_dot) continue;
                const int64_t cols = f->block >= 32 ? 2 * f->block : 80;
                for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++)
                    for (size_t ti = 0; ti < sizeof T_list / sizeof T_list[0]; ti++, cases++)
                        bad += sw_case((Isa)isa, f, f, rows_list[ri], cols, T_list[ti], pool2);
            }
            for (size_t ti = 0; ti < sizeof T_list / sizeof T_list[0]; ti++, cases++)
                bad += sw_case((Isa)isa, format_get(FMT_Q8_0), format_get(FMT_Q4_K), 48, 512, T_list[ti], pool2);
        }
    }
    cur_mode = MATMUL_GGML;
    CHECK_MSG(bad == 0, "%d of %d cases differ", bad, cases);
    test_note("%d cases: gate+up+swiglu in one pass = matmul, matmul, swiglu_rows bit for bit", cases);
    pool_destroy(pool2);
}

/* ---- row norms ------------------------------------------------------------------------------------------ */

/* Ops.norm_rows of every ISA level against norm_rows_ref (op_rmsnorm / op_l2norm row by row), bit for bit:
 * 1-8 rows, odd lengths (tails of the 8-column transposes and the 16-wide scaling), RMS with and without a
 * weight, L2, the gate's z, in place and not, values spread over many binades so the double sums round. */
TEST(kernels, norm_rows_bitwise) {
    static const int n_list[] = {1, 5, 8, 15, 16, 17, 33, 128, 256, 1027};
    int cases = 0, bad = 0;
    for (int isa = ISA_REF; isa < ISA_COUNT; isa++) {
        if (!isa_supported((Isa)isa)) continue;
        const Ops *ops = ops_cpu((Isa)isa);
        for (size_t ni = 0; ni < sizeof n_list / sizeof n_list[0]; ni++) {
            const int n = n_list[ni];
            float *x = xaligned(sizeof(float) * 8 * (size_t)n + 64), *w = xaligned(sizeof(float) * (size_t)n);
            float *z = xaligned(sizeof(float) * 8 * (size_t)n), *y0 = xaligned(sizeof(float) * 8 * (size_t)n);
            float *y1 = xaligned(sizeof(float) * 8 * (size_t)n + 64);
            for (int i = 0; i < n; i++) w[i] = trand_act();
            for (int i = 0; i < 8 * n; i++) z[i] = trand_act();
            for (int m = 1; m <= NORM_ROWS_MAX; m++)
                for (int v = 0; v < 8; v++, cases++) {
                    const bool l2 = v & 1, z_on = (v >> 1) & 1, in_place = (v >> 2) & 1;
                    for (int i = 0; i < 8 * n; i++) x[i] = trand_act() * ldexpf(1.0f, (i * 7) % 23 - 11);
                    NormRows a = {.w = (v & 2) && !l2 ? NULL : w, .m = m, .n = n, .eps = 1e-6f, .l2 = l2, .z_on = z_on};
                    for (int k = 0; k < m; k++) a.x[k] = x + (size_t)k * n, a.y[k] = y0 + (size_t)k * n, a.z[k] = z + (size_t)k * n;
                    norm_rows_ref(&a);
                    /* the fast one on rows at odd offsets (unaligned), in place or into NaN */
                    float *xs = y1 + 3;
                    for (int i = 0; i < m * n; i++) xs[i] = in_place ? x[i] : NAN;
                    NormRows b = a;
                    for (int k = 0; k < m; k++) b.x[k] = in_place ? xs + (size_t)k * n : a.x[k], b.y[k] = xs + (size_t)k * n;
                    ops->norm_rows(&b);
                    if (memcmp(y0, xs, sizeof(float) * (size_t)(m * n)) != 0) {
                        bad++;
                        CHECK_MSG(0, "%s n %d m %d l2 %d z %d in place %d w %d: norm rows differ", isa_name((Isa)isa), n, m, l2, z_on,
                                  in_place, a.w != NULL);
                    }
                }
            free(x), free(w), free(z), free(y0), free(y1);
        }
    }
    CHECK_MSG(bad == 0, "%d of %d cases differ", bad, cases);
    test_note("%d cases: norm_rows = op_rmsnorm / op_l2norm row by row, bit for bit", cases);
}

/* Ops.mul_sigmoid of every ISA level against mul_sigmoid_ref (libm's expf), bit for bit: every 97th float of
 * [-104, 104] (both signs, all binades down to the subnormals), odd lengths (the 16-wide body and the tail).
 * Where the AVX-512 form does not match this libm the table keeps the reference (the note says which). */
TEST(kernels, mul_sigmoid_bitwise) {
    enum { N = 1 << 16 };
    float *g = xaligned(sizeof(float) * N), *o0 = xaligned(sizeof(float) * N), *o1 = xaligned(sizeof(float) * N);
    int cases = 0, bad = 0;
    for (int isa = ISA_REF; isa < ISA_COUNT; isa++) {
        if (!isa_supported((Isa)isa)) continue;
        const Ops *ops = ops_cpu((Isa)isa);
        if (isa == ISA_AVX512) test_note("AVX-512 sigmoid gate: %s", ops->mul_sigmoid == mul_sigmoid_ref ? "reference (libm differs)" : "fast");
        uint32_t u = 0;
        while (u < 0x42d00000u) { /* up to 104.0f */
            int n = 0;
            for (; n < N && u < 0x42d00000u; n++, u += 97u * 64u) {
                float f;
                memcpy(&f, &u, 4);
                g[n] = (n & 1) ? -f : f;
            }
            for (int k = 0; k < n; k++) o0[k] = o1[k] = 1.0f + (float)(k % 1000) * 0x1p-10f;
            for (int len = n; len > 0; len -= len > 1000 ? 31 * 1000 : len) { /* n, then shorter odd prefixes */
                mul_sigmoid_ref(o0, g, len);
                ops->mul_sigmoid(o1, g, len);
                cases++;
                if (memcmp(o0, o1, sizeof(float) * (size_t)len) != 0) {
                    bad++;
                    CHECK_MSG(0, "%s: sigmoid gate differs (len %d)", isa_name((Isa)isa), len);
                    break;
                }
            }
        }
    }
    CHECK_MSG(bad == 0, "%d of %d cases differ", bad, cases);
    test_note("%d cases: mul_sigmoid = o · op_sigmoid(g), bit for bit", cases);
    free(g), free(o0), free(o1);
}
