/* test_vk_stream.c — the Vulkan command stream built for speed (group `vk_stream`, docs/VULKAN.md "The
 * decode pass"): barriers only where data flows (a read after an unsynchronised write, a write after an
 * unsynchronised read or write get one; independent commands none), the fused ops (the RMSNorm folded into
 * the products, residual add in their epilogue, two products of one input — in one format or two —, gate + up +
 * SwiGLU, dn_prep, attn_prep, the attention's gate, the gated norm in ssm_out's load) giving the unfused ops' bits
 * on whole models and op by op, the command counts per decoded token that --profile and `bench --json` report,
 * the decode pass recorded once and replayed
 * (forward_graph.c: the same bits as recording every pass, nothing recorded after the first step, one
 * recording per sequence and context bucket), and decode's attention split over the keys (flash-decoding)
 * against the scalar reference. Each test skips with one line when no Vulkan device exists. */
#include "test.h"
#include "test_rand.h"

#include "deltallm.h"
#include "kernels/cpu/isa.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Backend *vk_new(const char *tune) {
    Err err = {{0}};
    Backend *be = backend_create(&(BackendOptions){.name = "vulkan", .tune = tune}, &err);
    if (!be) test_skip("no Vulkan device (%s)", err.msg);
    return be;
}

static uint64_t barriers(Backend *be) {
    BackendStats st;
    backend_stats(be, &st);
    return st.barriers;
}

/* add() on ranges of one buffer: independent ranges share a barrier interval, a dependency gets a barrier */
TEST(vk_stream, barriers_only_where_data_flows) {
    Backend *be = vk_new(NULL);
    if (!be) return;
    Err err = {{0}};
    enum { N = 1024 };
    BBuf *buf = be->vt->alloc(be, sizeof(float) * 8 * N, &err);
    REQUIRE_MSG(buf, "%s", err.msg);
    float h[8 * N];
    for (int i = 0; i < 8 * N; i++) h[i] = (float)(i % 97) * 0.25f;
    be->vt->upload(be, (BView){buf, 0}, h, sizeof h);
    const BView v[8] = {bv_f32((BView){buf, 0}, 0),     bv_f32((BView){buf, 0}, N),     bv_f32((BView){buf, 0}, 2 * N),
                        bv_f32((BView){buf, 0}, 3 * N), bv_f32((BView){buf, 0}, 4 * N), bv_f32((BView){buf, 0}, 5 * N),
                        bv_f32((BView){buf, 0}, 6 * N), bv_f32((BView){buf, 0}, 7 * N)};
    be->vt->begin(be);
    const uint64_t b0 = barriers(be);
    be->vt->add(be, v[0], v[1], N); /* v0 += v1 */
    be->vt->add(be, v[2], v[3], N); /* independent: no barrier */
    be->vt->add(be, v[4], v[5], N); /* independent */
    const uint64_t b1 = barriers(be);
    be->vt->add(be, v[6], v[0], N); /* reads v0, written above: a barrier (RAW) */
    const uint64_t b2 = barriers(be);
    be->vt->add(be, v[7], v[1], N); /* reads v1 (only read so far): none */
    const uint64_t b3 = barriers(be);
    be->vt->add(be, v[1], v[5], N); /* writes v1, read by the last one: a barrier (WAR) */
    const uint64_t b4 = barriers(be);
    be->vt->add(be, v[1], v[2], N); /* writes v1 again, written by the last one: a barrier (WAW) */
    const uint64_t b5 = barriers(be);
    CHECK(be->vt->submit(be, &err) == 0 && be->vt->wait(be, &err) == 0);
    test_note("barriers: independent %llu, RAW %llu, read-read %llu, WAR %llu, WAW %llu", (unsigned long long)(b1 - b0),
              (unsigned long long)(b2 - b1), (unsigned long long)(b3 - b2), (unsigned long long)(b4 - b3),
              (unsigned long long)(b5 - b4));
    CHECK(b1 - b0 == 0);
    CHECK(b2 - b1 == 1);
    CHECK(b3 - b2 == 0);
    CHECK(b4 - b3 == 1);
    CHECK(b5 - b4 == 1);
    float out[8 * N];
    be->vt->download(be, out, (BView){buf, 0}, sizeof out);
    bool ok = true;
    for (int i = 0; i < N; i++) {
        float e[8];
        for (int k = 0; k < 8; k++) e[k] = h[k * N + i];
        e[0] += e[1], e[2] += e[3], e[4] += e[5], e[6] += e[0], e[7] += e[1], e[1] += e[5], e[1] += e[2];
        for (int k = 0; k < 8; k++) ok = ok && out[k * N + i] == e[k];
    }
    CHECK_MSG(ok, "results of the reordered stream differ from the sequential ones");
    be->vt->free(be, buf);
    backend_destroy(be);
}

/* logits of T tokens decoded one per pass (step 1) or in one batch (step 0) */
static float *run(const Model *m, const char *tune, const int32_t *ids, int T, int step, DevCounts *cnt) {
    Err err = {{0}};
    if (step <= 0) step = T;
    const ForwardOptions fo = {.max_batch = step, .max_ctx = T + 8, .backend = {.name = "vulkan", .tune = tune}};
    Forward *f = forward_new(m, &fo, &err);
    SeqState *s = f ? seqstate_new(m, forward_backend(f), T + 8, 0, 0, &err) : NULL;
    const int V = m->cfg.n_vocab;
    float *out = malloc(sizeof(float) * (size_t)T * V);
    bool ok = s && out;
    for (int p = 0; ok && p < T; p += step) {
        const int n = T - p < step ? T - p : step;
        if (p == step) forward_device_counts(f, cnt, true); /* from the second pass: steady state */
        ok = forward_run(f, s, ids + p, n, out + (size_t)p * V, n, &err) == 0;
    }
    if (ok) forward_device_counts(f, cnt, false);
    if (!ok) {
        test_check(false, __FILE__, __LINE__, "run", "%s (%s): %s", m->cfg.name, tune ? tune : "default", err.msg);
        free(out);
        out = NULL;
    }
    seqstate_free(s);
    forward_free(f);
    return out;
}

/* the fused ops and the dependency-tracked stream against the unfused ops with a barrier before every
 * command: the same bits, on a dense model (decode, 3 tokens per pass and prefill), a wide quantized one, an MoE one
 * and an MoE one in b5's K-quant mix (its pairs in two formats); the MoE ones' decode sums the experts in the down
 * product and adds the shared expert and the residual in its down's epilogue */
TEST(vk_stream, fused_stream_bitwise_equal_to_unfused) {
    Backend *probe = vk_new(NULL);
    if (!probe) return;
    backend_destroy(probe);
    /* m6: qwen3.5 MoE in b5's K-quant mix (attn_qkv Q5_K + attn_gate Q4_K, attn_k Q4_K + attn_v Q6_K: the pairs
     * in two formats), IQ2_XXS experts; m2: qwen3-next (ssm_ba, the gate in attn_q) in the same mix */
    static const char *const names[] = {"m3-qwen35-dense-bf16", "m7-qwen35-wide-q8_0", "m4-qwen35moe-q8_0",
                                        "m6-qwen35moe-iq2xxs", "m2-qwen3next-new-mixed"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "models/%s.gguf", names[i]);
        Err err = {{0}};
        Model *m = model_load(test_data(path), &err);
        REQUIRE_MSG(m, "%s", err.msg);
        enum { T = 12 };
        int32_t ids[T];
        for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 37 + 11) % m->cfg.n_vocab);
        const size_t bytes = sizeof(float) * (size_t)T * (size_t)m->cfg.n_vocab;
        /* one token per pass, 3 per pass (a decode batch: the MoE layers' fused down + combine over 3 rows), all 12 */
        static const int steps[] = {1, 3, 0};
        for (size_t si = 0; si < 3; si++) {
            const int step = steps[si];
            DevCounts a = {0}, b = {0};
            float *x = run(m, NULL, ids, T, step, &a), *y = run(m, "fuse=0,dep=0", ids, T, step, &b);
            if (x && y) {
                CHECK_MSG(memcmp(x, y, bytes) == 0, "%s, %s: fused logits differ from the unfused ones", names[i],
                          step == 1 ? "decode" : step ? "3 per pass" : "prefill");
                if (step == 1) {
                    const double ls = a.layer_steps ? (double)a.layer_steps : 1, lu = b.layer_steps ? (double)b.layer_steps : 1;
                    test_note("%s decode, per layer per token: %.2f dispatches / %.2f barriers (unfused, a barrier "
                              "each: %.2f / %.2f)",
                              names[i], (double)a.layer_dispatches / ls, (double)a.layer_barriers / ls,
                              (double)b.layer_dispatches / lu, (double)b.layer_barriers / lu);
                    CHECK(a.layer_dispatches < b.layer_dispatches);
                    CHECK(a.layer_barriers < b.layer_barriers);
                    CHECK(a.layer_barriers < a.layer_dispatches);
                    if (i < 2) { /* dense: the target is ≤ 8 per layer per decoded token; 7 with the gated norm
                                    folded (8 delta-net, 7 attention before); barriers 5 per delta-net layer with dn_prep
                                    in the recurrence, 6 per attention layer: 0.75 × dispatches here */
                        CHECK_MSG(a.layer_dispatches <= 7 * a.layer_steps, "%s: %.2f dispatches per layer", names[i],
                                  (double)a.layer_dispatches / ls);
                        CHECK_MSG(4 * a.layer_barriers <= 3 * a.layer_dispatches, "%s: %.2f barriers per layer", names[i],
                                  (double)a.layer_barriers / ls);
                    }
                    if (i >= 2) { /* MoE (every layer): 18 per layer with the down + combine and the shared expert's
                                     down + gate + residual unmerged (moefuse=0: the same bits), 4 fewer merged */
                        DevCounts c = {0};
                        float *z = run(m, "moefuse=0", ids, T, step, &c);
                        CHECK_MSG(z && memcmp(x, z, bytes) == 0, "%s: moefuse=0 logits differ", names[i]);
                        const bool four = c.layer_dispatches == a.layer_dispatches + 4 * a.layer_steps;
                        CHECK_MSG(a.layer_dispatches <= 14 * a.layer_steps && four,
                                  "%s: %.2f dispatches per layer (moefuse=0: %.2f)", names[i], (double)a.layer_dispatches / ls,
                                  (double)c.layer_dispatches / ls);
                        free(z);
                    }
                    CHECK(b.passes == T - 1 && a.passes == T - 1);
                    /* without attn_prep the cache row comes from the host (kv_append): never replayed */
                    CHECK(b.replays == 0 && b.recorded == b.dispatches);
                }
            }
            free(x);
            free(y);
        }
        model_free(m);
    }
}

/* ---- two products in two formats in one dispatch (mm_vec's two-format variants) ------------------------------ */

/* one random matrix of a format: a registry entry with the given id */
static Weight mixed_mat(int id, uint32_t type, int64_t cols, int64_t rows, void **mem) {
    const Format *f = format_get(type);
    const size_t rb = format_row_bytes(f, cols);
    uint8_t *d = malloc(rb * (size_t)rows + 64);
    for (int64_t r = 0; r < rows; r++) trand_row(f, d + (size_t)r * rb, cols);
    *mem = d;
    return (Weight){.id = id, .name = "w", .type = type, .cols = cols, .rows = rows, .row_bytes = rb,
                    .bytes = rb * (size_t)rows, .host = d, .gemv = false};
}

/* The pair (MM_PAIR) and gate + up + SwiGLU (MM_SWIGLU) of two matrices in different formats — the K-quant mixes
 * of a Q4_K_M-like file (b5: attn_qkv Q5_K with attn_gate Q4_K, attn_k Q4_K with attn_v Q6_K) — in one dispatch,
 * bit for bit the two products (and the swiglu) run alone; every ordered pair of the formats with a two-format
 * variant, odd rows, 1 and 3 tokens, with and without the RMSNorm folded in. */
TEST(vk_stream, mixed_format_pairs_bitwise_equal_to_single_products) {
    Backend *be = vk_new(NULL);
    if (!be) return;
    static const uint32_t fmts[] = {FMT_Q2_K, FMT_Q3_K, FMT_Q4_K, FMT_Q5_K, FMT_Q6_K, FMT_Q8_0};
    enum { NF = sizeof fmts / sizeof fmts[0], E = 512, RA = 67, RC = 40, TMAX = 3 };
    Weight w[2 * NF + 1];
    void *mem[2 * NF];
    for (int i = 0; i < NF; i++) { /* per format: a 67-row and a 40-row matrix */
        w[2 * i] = mixed_mat(2 * i, fmts[i], E, RA, &mem[2 * i]);
        w[2 * i + 1] = mixed_mat(2 * i + 1, fmts[i], E, RC, &mem[2 * i + 1]);
    }
    float nw[E];
    for (int i = 0; i < E; i++) nw[i] = 1.0f + 0.25f * trand_f();
    w[2 * NF] = (Weight){.id = 2 * NF, .name = "norm", .type = FMT_F32, .cols = E, .rows = 1, .row_bytes = 4 * E,
                         .bytes = 4 * E, .host = nw};
    Err err = {{0}};
    REQUIRE_MSG(be->vt->bind(be, w, 2 * NF + 1, &err) == 0, "%s", err.msg);
    const size_t nx = (size_t)TMAX * E, ny = (size_t)TMAX * RA;
    BBuf *buf = be->vt->alloc(be, 4 * (nx + 6 * ny) + 4096, &err);
    REQUIRE_MSG(buf, "%s", err.msg);
    const BView x = {buf, 0}, y[6] = {{buf, 4 * nx}, {buf, 4 * (nx + ny)}, {buf, 4 * (nx + 2 * ny)},
                                      {buf, 4 * (nx + 3 * ny)}, {buf, 4 * (nx + 4 * ny)}, {buf, 4 * (nx + 5 * ny)}};
    float hx[TMAX * E];
    for (size_t i = 0; i < nx; i++) hx[i] = trand_act();
    be->vt->upload(be, x, hx, sizeof hx);
    int cases = 0, same = 0, one_dispatch = 0;
    for (int a = 0; a < NF; a++)
        for (int c = 0; c < NF; c++) {
            if (a == c) continue;
            for (int T = 1; T <= TMAX; T += 2)
                for (int nrm = 0; nrm < 2; nrm++) {
                    const Weight *xn = nrm ? &w[2 * NF] : NULL;
                    const float eps = 1e-6f;
                    /* the pair: a's 67 rows and c's 40 rows; alone: the same two products */
                    const MatArgs pa = {&w[2 * a], -1, NULL, 0, 0, x, y[0], T, xn, eps};
                    const MatArgs pc = {&w[2 * c + 1], -1, NULL, 0, 0, x, y[1], T, xn, eps};
                    MatArgs sa = pa, sc = pc;
                    sa.y = y[2], sc.y = y[3];
                    /* gate (a) + up (c, 67 rows) + SwiGLU; alone: the two products and swiglu */
                    const MatArgs g = {&w[2 * a], -1, NULL, 0, 0, x, y[4], T, xn, eps};
                    const MatArgs u = {&w[2 * c], -1, NULL, 0, 0, x, y[5], T, xn, eps};
                    MatArgs g1 = g, u1 = u;
                    g1.y = y[2], u1.y = y[3];
                    BackendStats s0, s1, s2;
                    backend_stats(be, &s0);
                    be->vt->matmul_pair(be, &pa, &pc);
                    backend_stats(be, &s1);
                    be->vt->matmul_swiglu(be, &g, &u);
                    backend_stats(be, &s2);
                    one_dispatch += s1.dispatches - s0.dispatches == 1 && s2.dispatches - s1.dispatches == 1;
                    float fa[TMAX * RA], fc[TMAX * RA], ga[TMAX * RA], ra[TMAX * RA], rc[TMAX * RA], rg[TMAX * RA];
                    be->vt->matmul(be, &sa);
                    be->vt->matmul(be, &sc);
                    be->vt->download(be, fa, y[0], 4 * (size_t)T * RA);
                    be->vt->download(be, fc, y[1], 4 * (size_t)T * RC);
                    be->vt->download(be, ga, y[4], 4 * (size_t)T * RA);
                    be->vt->download(be, ra, y[2], 4 * (size_t)T * RA);
                    be->vt->download(be, rc, y[3], 4 * (size_t)T * RC);
                    be->vt->matmul(be, &g1);
                    be->vt->matmul(be, &u1);
                    be->vt->swiglu(be, y[2], y[3], y[2], T, RA);
                    be->vt->download(be, rg, y[2], 4 * (size_t)T * RA);
                    const size_t na = 4 * (size_t)T * RA, nc = 4 * (size_t)T * RC;
                    const bool ok = !memcmp(fa, ra, na) && !memcmp(fc, rc, nc) && !memcmp(ga, rg, na);
                    CHECK_MSG(ok, "%s + %s, T=%d%s: the fused products differ from the single ones",
                              format_name(fmts[a]), format_name(fmts[c]), T, nrm ? ", norm folded" : "");
                    same += ok;
                    cases++;
                }
        }
    test_note("%d of %d format pair × tokens × norm cases bit for bit; %d took one dispatch for the pair and one for "
              "gate + up + SwiGLU", same, cases, one_dispatch);
    CHECK(one_dispatch == cases);
    be->vt->free(be, buf);
    backend_destroy(be);
    for (int i = 0; i < 2 * NF; i++) free(mem[i]);
}

/* The delta-net's gated RMSNorm in the output product's activation load (matmul_add_gated, mm_vec's MM_GNORM): bit
 * for bit gated_norm into a temporary then matmul_add, on heads of odd sizes (40, 96, 128) in a float, a 32-block and
 * a K-quant format, 1, 3 and 8 tokens, one dispatch and z left as it was; past the vector kernel's tokens it declines
 * and records nothing. */
TEST(vk_stream, gated_norm_in_product_bitwise_equal_to_unfused) {
    Backend *be = vk_new(NULL);
    if (!be) return;
    static const struct {
        uint32_t type;
        int n, heads;
    } cs[] = {{FMT_BF16, 40, 3}, {FMT_Q8_0, 96, 3}, {FMT_Q4_K, 128, 4}};
    enum { NC = sizeof cs / sizeof cs[0], ROWS = 67, TMAX = 8 };
    Weight w[2 * NC];
    void *mem[NC];
    float nw[NC][128];
    for (int i = 0; i < NC; i++) {
        w[2 * i] = mixed_mat(2 * i, cs[i].type, (int64_t)cs[i].n * cs[i].heads, ROWS, &mem[i]);
        for (int k = 0; k < cs[i].n; k++) nw[i][k] = 1.0f + 0.25f * trand_f();
        w[2 * i + 1] = (Weight){.id = 2 * i + 1, .name = "ssm_norm", .type = FMT_F32, .cols = cs[i].n, .rows = 1,
                                .row_bytes = 4 * (size_t)cs[i].n, .bytes = 4 * (size_t)cs[i].n, .host = nw[i]};
    }
    Err err = {{0}};
    REQUIRE_MSG(be->vt->bind(be, w, 2 * NC, &err) == 0, "%s", err.msg);
    enum { NX = TMAX * 512, NY = TMAX * ROWS };
    BBuf *buf = be->vt->alloc(be, 4 * (4 * NX + 2 * NY) + 4096, &err);
    REQUIRE_MSG(buf, "%s", err.msg);
    const BView o = {buf, 0}, z = {buf, 4 * NX}, zc = {buf, 8 * NX}, on = {buf, 12 * NX}, y1 = {buf, 16 * NX},
                y2 = {buf, 16 * NX + 4 * NY};
    static float ho[NX], hz[NX], hy[NY], r1[NY], r2[NY], zz[NX];
    for (int i = 0; i < NX; i++) ho[i] = trand_act(), hz[i] = 2.0f * trand_f();
    for (int i = 0; i < NY; i++) hy[i] = trand_f();
    be->vt->upload(be, o, ho, sizeof ho);
    int cases = 0, ok_n = 0;
    for (int i = 0; i < NC; i++)
        for (int T = 1; T <= TMAX; T = T == 1 ? 3 : T + 5) {
            const int cols = cs[i].n * cs[i].heads;
            be->vt->upload(be, z, hz, sizeof hz);
            be->vt->upload(be, zc, hz, sizeof hz);
            be->vt->upload(be, y1, hy, sizeof hy);
            be->vt->upload(be, y2, hy, sizeof hy);
            const MatArgs a = {&w[2 * i], -1, NULL, 0, 0, o, y1, T, NULL, 0};
            BackendStats s0, s1;
            backend_stats(be, &s0);
            const bool done = be->vt->matmul_add_gated(be, &a, z, &w[2 * i + 1], cs[i].n, 1e-6f);
            backend_stats(be, &s1);
            CHECK_MSG(done && s1.dispatches - s0.dispatches == 1, "%s T=%d: declined or %llu dispatches",
                      format_name(cs[i].type), T, (unsigned long long)(s1.dispatches - s0.dispatches));
            be->vt->gated_norm(be, o, zc, &w[2 * i + 1], T * cs[i].heads, cs[i].n, 1e-6f, on);
            const MatArgs u = {&w[2 * i], -1, NULL, 0, 0, on, y2, T, NULL, 0};
            be->vt->matmul_add(be, &u);
            be->vt->download(be, r1, y1, 4 * (size_t)T * ROWS);
            be->vt->download(be, r2, y2, 4 * (size_t)T * ROWS);
            be->vt->download(be, zz, z, 4 * (size_t)T * cols);
            const bool same = memcmp(r1, r2, 4 * (size_t)T * ROWS) == 0;
            CHECK_MSG(same, "%s, heads of %d, T=%d: the folded gated norm differs from the unfused ops",
                      format_name(cs[i].type), cs[i].n, T);
            CHECK_MSG(memcmp(zz, hz, 4 * (size_t)T * cols) == 0, "%s T=%d: z was written", format_name(cs[i].type), T);
            ok_n += same;
            cases++;
        }
    /* a batch for the tiled kernel: declined, nothing recorded */
    const MatArgs big = {&w[0], -1, NULL, 0, 0, o, y1, 64, NULL, 0};
    BackendStats s0, s1;
    backend_stats(be, &s0);
    const bool took = be->vt->matmul_add_gated(be, &big, z, &w[1], cs[0].n, 1e-6f);
    backend_stats(be, &s1);
    CHECK(!took && s1.dispatches == s0.dispatches);
    test_note("%d of %d format × tokens cases bit for bit, one dispatch each; 64 tokens declined", ok_n, cases);
    be->vt->free(be, buf);
    backend_destroy(be);
    for (int i = 0; i < NC; i++) free(mem[i]);
}

/* dn_prep and the recurrence in one op (dn_prep_scan): bit for bit dn_prep then deltanet on random inputs (the output,
 * the new delta-net state and the new conv state), for square heads of 16, 48 and 128, grouped (qwen3-next) and
 * not, 1 to 3 tokens, several passes on the same states */
TEST(vk_stream, dn_prep_scan_bitwise_equal_to_unfused) {
    Backend *be = vk_new(NULL);
    if (!be) return;
    static const struct {
        int Hk, Hv, D, group;
        bool grouped;
    } cs[] = {{2, 4, 16, 0, false}, {1, 3, 48, 0, false}, {2, 4, 128, 2, true}};
    enum { K = 4, TMAX = 3, NC = sizeof cs / sizeof cs[0] };
    Err err = {{0}};
    int ok_n = 0, cases = 0;
    for (int ci = 0; ci < NC; ci++) {
        const int Hk = cs[ci].Hk, Hv = cs[ci].Hv, D = cs[ci].D, key = Hk * D, val = Hv * D, C = 2 * key + val;
        Backend *e = vk_new(NULL);
        float *cw = malloc(sizeof(float) * (size_t)C * K), dtb[8], sa[8];
        for (int i = 0; i < C * K; i++) cw[i] = 0.5f * trand_f();
        for (int i = 0; i < Hv; i++) dtb[i] = 0.5f * trand_f(), sa[i] = -1.0f - trand_f();
        Weight w[3] = {{.id = 0, .name = "conv1d", .type = FMT_F32, .cols = K, .rows = C, .row_bytes = 4 * K,
                        .bytes = 4 * (size_t)K * C, .host = cw},
                       {.id = 1, .name = "dt_bias", .type = FMT_F32, .cols = Hv, .rows = 1, .row_bytes = 4 * (size_t)Hv,
                        .bytes = 4 * (size_t)Hv, .host = dtb},
                       {.id = 2, .name = "ssm_a", .type = FMT_F32, .cols = Hv, .rows = 1, .row_bytes = 4 * (size_t)Hv,
                        .bytes = 4 * (size_t)Hv, .host = sa}};
        REQUIRE_MSG(e->vt->bind(e, w, 3, &err) == 0, "%s", err.msg);
        const size_t nx = (size_t)TMAX * C, ncs = (size_t)C * (K - 1), nss = (size_t)Hv * D * D, ng = (size_t)TMAX * 2 * Hv;
        const size_t at_q = 0, at_k = at_q + (size_t)TMAX * key, at_v = at_k + (size_t)TMAX * key;
        const size_t at_b = at_v + (size_t)TMAX * val, at_g = at_b + (size_t)TMAX * Hv, per = at_g + (size_t)TMAX * Hv;
        /* x, gate inputs, then per path: conv state, ssm state, out, q | k | v | β | g */
        BBuf *buf = e->vt->alloc(e, 4 * (nx + ng + 2 * (ncs + nss + (size_t)TMAX * val + per)) + 4096, &err);
        REQUIRE_MSG(buf, "%s", err.msg);
        size_t at = 0;
        const BView x = {buf, at};
        at += 4 * nx;
        const BView gin = {buf, at};
        at += 4 * ng;
        BView cst[2], sst[2], out[2], qb[2];
        for (int pth = 0; pth < 2; pth++) {
            cst[pth] = (BView){buf, at}, at += 4 * ncs;
            sst[pth] = (BView){buf, at}, at += 4 * nss;
            out[pth] = (BView){buf, at}, at += 4 * (size_t)TMAX * val;
            qb[pth] = (BView){buf, at}, at += 4 * per;
            e->vt->fill(e, cst[pth], 0, 4 * ncs);
            e->vt->fill(e, sst[pth], 0, 4 * nss);
        }
        bool same = true;
        for (int pass = 0; pass < 3; pass++) {
            const int T = 1 + pass % TMAX;
            float *hx = malloc(4 * nx), *hg = malloc(4 * ng);
            for (size_t i = 0; i < nx; i++) hx[i] = trand_act();
            for (size_t i = 0; i < ng; i++) hg[i] = trand_f();
            e->vt->upload(e, x, hx, 4 * nx);
            e->vt->upload(e, gin, hg, 4 * ng);
            for (int pth = 0; pth < 2; pth++) {
                const BView q = bv_f32(qb[pth], (int64_t)at_q), k = bv_f32(qb[pth], (int64_t)at_k);
                const BView v = bv_f32(qb[pth], (int64_t)at_v);
                const BView bb = bv_f32(qb[pth], (int64_t)at_b), gg = bv_f32(qb[pth], (int64_t)at_g);
                /* qwen3.5: b and a separate [T][Hv]; grouped (qwen3-next): [b (group) | a (group)] per key head */
                const int grp = cs[ci].group;
                const GateArgs ga = grp ? (GateArgs){T, Hv, grp, 2 * Hv, gin, bv_f32(gin, grp), bb, gg, &w[1], &w[2]}
                                        : (GateArgs){T, Hv, 0, Hv, gin, bv_f32(gin, (int64_t)TMAX * Hv), bb, gg, &w[1], &w[2]};
                const DnPrepArgs pa = {T, C, K, key, D, 1e-6f, &w[0], x, cst[pth], q, k, v, ga};
                const DeltaArgs d = {T, Hk, Hv, D, D, cs[ci].grouped, false, q, k, v, gg, bb, sst[pth], sst[pth],
                                     out[pth], {0}, false};
                if (pth == 0) {
                    CHECK(e->vt->dn_prep(e, &pa));
                    e->vt->deltanet(e, &d);
                } else {
                    BackendStats s0, s1;
                    backend_stats(e, &s0);
                    CHECK_MSG(e->vt->dn_prep_scan(e, &pa, &d), "D=%d T=%d: declined", D, T);
                    backend_stats(e, &s1);
                    CHECK(s1.dispatches - s0.dispatches == 2);
                }
            }
            float *a0 = malloc(4 * (nss + ncs + (size_t)T * val)), *a1 = malloc(4 * (nss + ncs + (size_t)T * val));
            for (int pth = 0; pth < 2; pth++) {
                float *h = pth ? a1 : a0;
                e->vt->download(e, h, out[pth], 4 * (size_t)T * val);
                e->vt->download(e, h + (size_t)T * val, sst[pth], 4 * nss);
                e->vt->download(e, h + (size_t)T * val + nss, cst[pth], 4 * ncs);
            }
            const size_t no = (size_t)T * val;
            const bool o_ok = !memcmp(a0, a1, 4 * no), s_ok = !memcmp(a0 + no, a1 + no, 4 * nss);
            const bool c_ok = !memcmp(a0 + no + nss, a1 + no + nss, 4 * ncs);
            CHECK_MSG(o_ok && s_ok && c_ok, "D=%d T=%d pass %d: output %s, state %s, conv state %s (out[0] %g vs %g)", D, T,
                      pass, o_ok ? "same" : "differs", s_ok ? "same" : "differs", c_ok ? "same" : "differs", a0[0], a1[0]);
            same = same && o_ok && s_ok && c_ok;
            cases++;
            free(a0), free(a1), free(hx), free(hg);
        }
        ok_n += same;
        e->vt->free(e, buf);
        backend_destroy(e);
        free(cw);
    }
    test_note("%d of %d head shapes bit for bit over %d passes", ok_n, NC, cases);
    backend_destroy(be);
}

/* A decode pass recorded once and replayed (docs/VULKAN.md): the logits of every decode step bit for bit those
 * of recording every pass (graph=0), on a dense bf16, a wide q8_0 and an MoE model; from the second step on
 * nothing is recorded (every step a replay) and the same commands and barriers are counted; map=0 takes a
 * discrete GPU's path (the inputs uploaded by copies submitted ahead of the graph, the logits copied out). */
TEST(vk_stream, replay_bitwise_equal_to_recording) {
    Backend *probe = vk_new(NULL);
    if (!probe) return;
    backend_destroy(probe);
    static const char *const names[] = {"m3-qwen35-dense-bf16", "m7-qwen35-wide-q8_0", "m4-qwen35moe-q8_0"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "models/%s.gguf", names[i]);
        Err err = {{0}};
        Model *m = model_load(test_data(path), &err);
        REQUIRE_MSG(m, "%s", err.msg);
        enum { T = 10 };
        int32_t ids[T];
        for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 53 + 7) % m->cfg.n_vocab);
        const size_t bytes = sizeof(float) * (size_t)T * (size_t)m->cfg.n_vocab;
        DevCounts a = {0}, b = {0}, c = {0};
        float *x = run(m, NULL, ids, T, 1, &a), *y = run(m, "graph=0", ids, T, 1, &b);
        float *z = i == 0 ? run(m, "map=0", ids, T, 1, &c) : NULL;
        if (x && y) {
            CHECK_MSG(memcmp(x, y, bytes) == 0, "%s: replayed logits differ from the recorded ones", names[i]);
            test_note("%s: steps 2..%d: %llu replays, %llu commands recorded (recording every pass: %llu); %.1f "
                      "dispatches, %.1f barriers per token both ways",
                      names[i], T, (unsigned long long)a.replays, (unsigned long long)a.recorded,
                      (unsigned long long)b.recorded, (double)a.dispatches / (double)(T - 1),
                      (double)a.barriers / (double)(T - 1));
            CHECK(a.replays == T - 1 && a.recorded == 0);
            CHECK(b.replays == 0 && b.recorded == b.dispatches && b.recorded > 0);
            CHECK(a.dispatches == b.dispatches && a.barriers == b.barriers);
            CHECK(a.layer_steps == b.layer_steps && a.layer_dispatches == b.layer_dispatches &&
                  a.layer_barriers == b.layer_barriers);
        }
        if (z && y) {
            CHECK_MSG(memcmp(z, y, bytes) == 0, "%s, map=0: replayed logits differ from the recorded ones", names[i]);
            /* per step only the inputs' copies (ids, positions, cache rows) and the logits' copy are recorded */
            CHECK(c.replays == T - 1 && c.recorded == 4 * (T - 1));
        }
        free(x), free(y), free(z);
        model_free(m);
    }
}

/* decode steps of n_seq sequences in turn after a prefill of pre tokens each (a different prompt per
 * sequence), with a buffer allocated and freed on the backend before step `alloc_at`; the passes that recorded
 * something are counted into *recorded_passes */
static float *run_turns(const Model *m, const char *tune, int pre, int dec, int n_seq, int alloc_at, DevCounts *cnt,
                        int *recorded_passes) {
    Err err = {{0}};
    const int V = m->cfg.n_vocab;
    const ForwardOptions fo = {.max_batch = pre, .max_ctx = pre + dec + 8, .backend = {.name = "vulkan", .tune = tune}};
    Forward *f = forward_new(m, &fo, &err);
    SeqState *st[2] = {0};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(pre + dec));
    float *out = malloc(sizeof(float) * (size_t)dec * (size_t)n_seq * (size_t)V);
    bool ok = f && ids && out;
    for (int s = 0; ok && s < n_seq; s++) {
        ok = (st[s] = seqstate_new(m, forward_backend(f), pre + dec + 8, 0, 0, &err)) != NULL;
        for (int t = 0; ok && t < pre + dec; t++) ids[t] = (int32_t)((t * 29 + 5 + 101 * s) % V);
        ok = ok && forward_run(f, st[s], ids, pre, NULL, 0, &err) == 0;
    }
    DevCounts c0, c1;
    if (ok) forward_device_counts(f, &c0, true);
    *recorded_passes = 0;
    for (int d = 0; ok && d < dec; d++)
        for (int s = 0; ok && s < n_seq; s++) {
            if (d == alloc_at && s == 0) {
                Backend *be = forward_backend(f);
                BBuf *tmp = be->vt->alloc(be, 4096, &err);
                ok = tmp != NULL;
                be->vt->free(be, tmp);
            }
            forward_device_counts(f, &c0, false);
            const int32_t tok = (int32_t)((d * 31 + 3 + 7 * s) % V);
            ok = forward_run(f, st[s], &tok, 1, out + ((size_t)d * n_seq + s) * V, 1, &err) == 0;
            forward_device_counts(f, &c1, false);
            *recorded_passes += c1.recorded > c0.recorded;
        }
    if (ok) forward_device_counts(f, cnt, false);
    if (!ok) {
        test_check(false, __FILE__, __LINE__, "run_turns", "%s (%s): %s", m->cfg.name, tune ? tune : "default", err.msg);
        free(out);
        out = NULL;
    }
    for (int s = 0; s < 2; s++) seqstate_free(st[s]);
    forward_free(f);
    free(ids);
    return out;
}

/* What decides that a replay is valid: each sequence (state) has its own recorded pass, crossing a context
 * bucket (256 cache rows) records once more, and so does an allocation on the backend (the recorded addresses
 * may be stale); the bits stay those of recording every pass. */
TEST(vk_stream, replay_per_state_and_context_bucket) {
    Backend *probe = vk_new(NULL);
    if (!probe) return;
    backend_destroy(probe);
    Err err = {{0}};
    Model *m = model_load(test_data("models/m3-qwen35-dense-bf16.gguf"), &err);
    REQUIRE_MSG(m, "%s", err.msg);
    enum { PRE = 250, DEC = 10, ALLOC = 3 }; /* the decode steps cross 256 cache rows at the 7th */
    const size_t bytes = sizeof(float) * (size_t)DEC * 2 * (size_t)m->cfg.n_vocab;
    DevCounts a = {0}, b = {0};
    int rec_a = 0, rec_b = 0;
    float *x = run_turns(m, NULL, PRE, DEC, 2, ALLOC, &a, &rec_a), *y = run_turns(m, "graph=0", PRE, DEC, 2, ALLOC, &b, &rec_b);
    if (x && y) {
        CHECK_MSG(memcmp(x, y, bytes) == 0, "replayed logits differ from the recorded ones");
        test_note("2 sequences x %d steps across 256 rows, an allocation before step %d: %d passes recorded, %llu "
                  "replayed (recording every pass: %d)",
                  DEC, ALLOC + 1, rec_a, (unsigned long long)a.replays, rec_b);
        /* per sequence: the first step, the first after the allocation, the first past 256 */
        CHECK(rec_a == 6 && a.replays == 2 * DEC - 6);
        CHECK(rec_b == 2 * DEC && b.replays == 0);
    }
    free(x), free(y);
    model_free(m);
}

/* ---- attention split over the keys (flash-decoding: attention.comp with S > 1, then attn_combine.comp) ---- */

typedef struct AttnCase {
    int T, pos0, H, Hkv, d;
    int rec; /* > 0: on the device, a pass recorded at pos0 = rec replayed at pos0 (the rows read from rows_at) */
} AttnCase;

/* out [T][H][d] of attention (gated when gate is set: attention_gated, the gate rows [T][H·d]) on be; the
 * commands it recorded in *disp and *barr */
static float *attn_run(Backend *be, const AttnCase *c, const float *q, const float *kv, const float *gate, uint64_t *disp,
                       uint64_t *barr, bool device) {
    Err err = {{0}};
    const int n = c->pos0 + c->T;
    const size_t nq = (size_t)c->T * c->H * c->d, nkv = (size_t)n * c->Hkv * c->d;
    BBuf *buf = be->vt->alloc(be, 4 * (3 * nq + 2 * nkv) + 4096, &err);
    if (!buf) {
        test_check(false, __FILE__, __LINE__, "alloc", "%s", err.msg);
        return NULL;
    }
    const BView bq = {buf, 0}, bk = {buf, 4 * nq}, bvv = {buf, 4 * (nq + nkv)}, bo = {buf, 4 * (nq + 2 * nkv)},
                bg = {buf, 4 * (2 * nq + 2 * nkv)};
    be->vt->upload(be, bq, q, 4 * nq);
    be->vt->upload(be, bk, kv, 4 * nkv);
    be->vt->upload(be, bvv, kv + nkv, 4 * nkv);
    if (gate) be->vt->upload(be, bg, gate, 4 * nq);
    AttentionArgs a = {c->T, c->pos0, c->H, c->Hkv, c->d, 1.0f / sqrtf((float)c->d), bq, bk, bvv, bo, {0}, 0};
    if (device && c->rec > 0) { /* as forward_graph.c replays: the dispatch sized at rec, the rows from the device */
        int32_t rows[8];
        for (int t = 0; t < c->T; t++) rows[t] = c->pos0 + t;
        a.rows_at = (BView){buf, 4 * (3 * nq + 2 * nkv)};
        be->vt->upload(be, a.rows_at, rows, 4 * (size_t)c->T);
        a.pos0 = c->rec;
    }
    be->vt->begin(be);
    BackendStats s0, s1;
    backend_stats(be, &s0);
    if (gate) be->vt->attention_gated(be, &a, bg, (int64_t)c->H * c->d, c->d);
    else be->vt->attention(be, &a);
    backend_stats(be, &s1);
    *disp = s1.dispatches - s0.dispatches, *barr = s1.barriers - s0.barriers;
    CHECK(be->vt->submit(be, &err) == 0 && be->vt->wait(be, &err) == 0);
    float *out = malloc(4 * nq);
    be->vt->download(be, out, bo, 4 * nq);
    be->vt->free(be, buf);
    return out;
}

static double nmse(const float *ref, const float *x, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]), den += (double)ref[i] * ref[i];
    return den > 0 ? num / den : num;
}

/* Split over the keys against the scalar reference backend (NMSE ≤ 1e-10, attention's device bound): contexts
 * shorter than, equal to and longer than a 128-key block and than a split, GQA, odd head dims, a few queries,
 * the gate in the combine's epilogue; `split=1` forces the split at any length (S ≥ 2, some splits empty), the
 * default splits from 513 keys on. Dispatches: 1 unsplit, 2 split with one barrier between them. */
TEST(vk_stream, attention_split_over_keys) {
    Backend *dflt = vk_new(NULL);
    if (!dflt) return;
    Err err = {{0}};
    Backend *forced = backend_create(&(BackendOptions){.name = "vulkan", .tune = "split=1"}, &err);
    Backend *never = backend_create(&(BackendOptions){.name = "vulkan", .tune = "split=0"}, &err);
    Backend *ref = backend_create(&(BackendOptions){.name = "ref", .cpu.isa = ISA_REF, .n_threads = 1, .mode = MATMUL_EXACT}, &err);
    REQUIRE_MSG(forced && never && ref, "%s", err.msg);
    const BackendSizes sz = {.max_rows = 8, .max_cols = 4096, .max_ctx = 2048, .head_dim = 512, .gqa_group = 4, .d_k = 64, .d_v = 64};
    Backend *all[4] = {dflt, forced, never, ref};
    for (int i = 0; i < 4; i++) REQUIRE_MSG(all[i]->vt->reserve(all[i], &sz, &err) == 0, "%s", err.msg);
    static const AttnCase cases[] = {
        {1, 49, 4, 2, 64, 0},   /* 50 keys: shorter than a block (the second split empty) */
        {1, 127, 6, 3, 72, 0},  /* 128 keys: one block, odd head dim */
        {1, 128, 6, 3, 72, 0},  /* 129: a block and one key */
        {3, 600, 8, 2, 128, 0}, /* 601..603 keys, 3 queries, GQA 4 */
        {1, 511, 2, 2, 40, 0},  /* 512: the default does not split */
        {1, 512, 2, 2, 40, 0},  /* 513: the default splits */
        {2, 1499, 2, 1, 256, 0}, {1, 700, 2, 2, 512, 0}, /* 6 splits; the widest head */
        {5, 700, 4, 2, 32, 0},  /* 5 queries: never split (VK_ATTN_SPLIT_T) */
        {1, 1200, 4, 2, 64, 600}, {2, 900, 8, 2, 128, 513}, /* replayed later: S sized at 601 / 515 keys */
    };
    double worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const AttnCase *c = &cases[i];
        const int n = c->pos0 + c->T;
        const size_t nq = (size_t)c->T * c->H * c->d, nkv = (size_t)n * c->Hkv * c->d;
        float *q = malloc(4 * nq), *kv = malloc(4 * 2 * nkv), *gate = malloc(4 * nq);
        for (size_t j = 0; j < nq; j++) q[j] = 2.0f * trand_f(), gate[j] = 3.0f * trand_f();
        for (size_t j = 0; j < 2 * nkv; j++) kv[j] = trand_f();
        uint64_t dr, br, df, bf, dd, bd, dn, bn, dg, bgt; /* dispatches, barriers */
        float *r = attn_run(ref, c, q, kv, NULL, &dr, &br, false), *f = attn_run(forced, c, q, kv, NULL, &df, &bf, true);
        float *dfl = attn_run(dflt, c, q, kv, NULL, &dd, &bd, true), *nv = attn_run(never, c, q, kv, NULL, &dn, &bn, true);
        float *g = attn_run(forced, c, q, kv, gate, &dg, &bgt, true);
        if (r && f && dfl && nv && g) {
            const double ef = nmse(r, f, nq), ed = nmse(r, dfl, nq), en = nmse(r, nv, nq);
            for (size_t j = 0; j < nq; j++) r[j] *= 1.0f / (1.0f + expf(-gate[j]));
            const double eg = nmse(r, g, nq);
            const bool split_f = c->T <= 4, split_d = c->T <= 4 && (c->rec > 0 ? c->rec + c->T : n) > 512;
            test_note("T=%d keys=%d%s H=%d Hkv=%d d=%d: NMSE forced split %.1e (%llu dispatches), gated %.1e, default %.1e "
                      "(%llu), unsplit %.1e",
                      c->T, n, c->rec > 0 ? " (replayed)" : "", c->H, c->Hkv, c->d, ef, (unsigned long long)df, eg, ed, (unsigned long long)dd, en);
            CHECK_MSG(ef <= 1e-10 && eg <= 1e-10 && ed <= 1e-10 && en <= 1e-10, "case %zu: NMSE %.2e %.2e %.2e %.2e", i, ef,
                      eg, ed, en);
            worst = fmax(worst, fmax(fmax(ef, eg), fmax(ed, en)));
            CHECK_MSG(df == (split_f ? 2u : 1u) && dg == df && dd == (split_d ? 2u : 1u) && dn == 1, "case %zu: dispatches %llu %llu %llu %llu",
                      i, (unsigned long long)df, (unsigned long long)dg, (unsigned long long)dd, (unsigned long long)dn);
            CHECK_MSG(bf == bn + (split_f ? 1u : 0u) && bd == bn + (split_d ? 1u : 0u), "case %zu: barriers %llu %llu, unsplit %llu",
                      i, (unsigned long long)bf, (unsigned long long)bd, (unsigned long long)bn);
        }
        free(q), free(kv), free(gate), free(r), free(f), free(dfl), free(nv), free(g);
    }
    test_note("attention split over the keys: worst NMSE %.1e against the reference", worst);
    backend_destroy(ref);
    backend_destroy(never);
    backend_destroy(forced);
    backend_destroy(dflt);
}

/* The one-workgroup kernel (split=0; prefill's T > VK_ATTN_SPLIT_T always) walking many key blocks, against the
 * reference. lavapipe ends an invocation's loops after 65535 steps of them all (docs/VULKAN.md): 16k keys at
 * d = 256 gave NMSE 5e-2 there before the kernel took 8 terms per loop step; past the kernel's reach the backend
 * must refuse (the submission fails naming llvmpipe) and never return wrong numbers. */
TEST(vk_stream, attention_unsplit_long_context) {
    Backend *never = vk_new("split=0");
    if (!never) return;
    Err err = {{0}};
    Backend *ref = backend_create(&(BackendOptions){.name = "ref", .cpu.isa = ISA_REF, .n_threads = 1, .mode = MATMUL_EXACT}, &err);
    REQUIRE_MSG(ref, "%s", err.msg);
    static const AttnCase cases[] = {
        {1, 16383, 1, 1, 256, 0}, /* 128 blocks: wrong on lavapipe before */
        {5, 16000, 2, 1, 256, 0}, /* prefill's shape: 5 queries never split */
        {1, 98303, 1, 1, 256, 0}, /* 768 blocks: past lavapipe's loop limit, refused there */
    };
    const BackendSizes sz = {.max_rows = 8, .max_cols = 4096, .max_ctx = 98304, .head_dim = 256, .gqa_group = 2, .d_k = 64, .d_v = 64};
    REQUIRE_MSG(never->vt->reserve(never, &sz, &err) == 0 && ref->vt->reserve(ref, &sz, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const AttnCase *c = &cases[i];
        const int n = c->pos0 + c->T;
        const size_t nq = (size_t)c->T * c->H * c->d, nkv = (size_t)n * c->Hkv * c->d;
        float *q = malloc(4 * nq), *kv = malloc(4 * 2 * nkv), *out = malloc(4 * nq);
        REQUIRE(q && kv && out);
        for (size_t j = 0; j < nq; j++) q[j] = 2.0f * trand_f();
        for (size_t j = 0; j < 2 * nkv; j++) kv[j] = trand_f();
        uint64_t dr, br;
        float *r = attn_run(ref, c, q, kv, NULL, &dr, &br, false);
        BBuf *buf = never->vt->alloc(never, 4 * (2 * nq + 2 * nkv), &err);
        REQUIRE_MSG(r && buf, "%s", err.msg);
        const BView bq = {buf, 0}, bk = {buf, 4 * nq}, bvv = {buf, 4 * (nq + nkv)}, bo = {buf, 4 * (nq + 2 * nkv)};
        never->vt->upload(never, bq, q, 4 * nq);
        never->vt->upload(never, bk, kv, 4 * nkv);
        never->vt->upload(never, bvv, kv + nkv, 4 * nkv);
        const AttentionArgs a = {c->T, c->pos0, c->H, c->Hkv, c->d, 1.0f / sqrtf((float)c->d), bq, bk, bvv, bo, {0}, 0};
        never->vt->begin(never);
        never->vt->attention(never, &a);
        Err e2 = {{0}};
        const bool ran = never->vt->submit(never, &e2) == 0 && never->vt->wait(never, &e2) == 0;
        if (ran) {
            never->vt->download(never, out, bo, 4 * nq);
            const double en = nmse(r, out, nq);
            test_note("T=%d keys=%d H=%d Hkv=%d d=%d, one workgroup per (query, head): NMSE %.1e", c->T, n, c->H, c->Hkv,
                      c->d, en);
            CHECK_MSG(en <= 1e-10, "case %zu: NMSE %.2e", i, en);
        } else {
            test_note("T=%d keys=%d d=%d refused: %s", c->T, n, c->d, e2.msg);
            CHECK_MSG(i == 2 && strstr(e2.msg, "llvmpipe"), "case %zu: %s", i, e2.msg);
        }
        never->vt->free(never, buf);
        free(q), free(kv), free(out), free(r);
    }
    backend_destroy(ref);
    backend_destroy(never);
}

/* The split over the keys (flash-decoding) in a replayed pass: its number of splits comes from the context
 * bucket (AttentionArgs.keys_max) in a replay and a fresh recording alike, so decoding across 768 keys (where
 * the key count alone would take a fourth split) gives the bits of recording every pass. */
TEST(vk_stream, replay_split_attention_bitwise) {
    Backend *probe = vk_new(NULL);
    if (!probe) return;
    backend_destroy(probe);
    Err err = {{0}};
    Model *m = model_load(test_data("models/m3-qwen35-dense-bf16.gguf"), &err);
    REQUIRE_MSG(m, "%s", err.msg);
    enum { PRE = 765, DEC = 6 };
    const size_t bytes = sizeof(float) * (size_t)DEC * (size_t)m->cfg.n_vocab;
    DevCounts a = {0}, b = {0};
    int rec_a = 0, rec_b = 0;
    float *x = run_turns(m, NULL, PRE, DEC, 1, -1, &a, &rec_a), *y = run_turns(m, "graph=0", PRE, DEC, 1, -1, &b, &rec_b);
    if (x && y) {
        CHECK_MSG(memcmp(x, y, bytes) == 0, "replayed logits across 768 keys differ from the recorded ones");
        test_note("%d steps from %d keys: %d recorded, %llu replayed; %.2f dispatches per token (split: 2 for attention)",
                  DEC, PRE + 1, rec_a, (unsigned long long)a.replays, (double)a.dispatches / DEC);
        CHECK(rec_a == 1 && a.replays == DEC - 1);
        CHECK(a.dispatches == b.dispatches);
    }
    free(x), free(y);
    model_free(m);
}
