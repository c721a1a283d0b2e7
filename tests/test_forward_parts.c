/* test_forward_parts.c — the forward pass in parts and what rests on them: a layer range run as pipeline
 * stages with the hidden rows handed over (bit-identical to the whole pass), the head on a vocabulary range,
 * the expert-provider hook, tentative batches cut back to k tokens (exactly the state of evaluating those k
 * tokens alone, in exact mode; the batch's own state in the default mode), and the allocation guard: no
 * allocation in a forward pass or a decode step after warm-up, on every backend. */
#include "alloc_guard.h"
#include "test_models.h"
#include "test.h"
#include "test_forward.h"

#include "cli/tokens_file.h"
#include "deltallm.h"
#include "kernels/cpu/isa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_MODELS N_TEST_MODELS


/* ---- layer ranges: two stages with the hidden rows handed over on the host ------------------------------ */

TEST(forward, layer_ranges_as_pipeline_stages) {
    for (int mi = 0; mi < N_MODELS; mi++) {
        Model *m = tf_model(test_model(mi));
        if (!m) continue;
        int T;
        int32_t *ids = tf_seq(test_model(mi), 65, &T);
        if (m->cfg.n_embd >= 1024) T = 33; /* the wide models: three micro-batches are enough */
        const int V = m->cfg.n_vocab, E = m->cfg.n_embd, L = m->cfg.n_layer, cut = L / 2;
        float *whole = tf_eval(m, ids, T, 0, MATMUL_GGML, DELTANET_AUTO, 2, true);
        Err err = {{0}};
        /* stage A: embed + layers [0, cut); stage B: layers [cut, L) + head, each with its own state */
        Forward *fa = tf_forward(m, T, T, MATMUL_GGML, DELTANET_AUTO, 2, true, &err);
        Forward *fb = tf_forward(m, T, T, MATMUL_GGML, DELTANET_AUTO, 2, true, &err);
        SeqState *sa = fa ? seqstate_new(m, forward_backend(fa), T, 0, cut, &err) : NULL;
        SeqState *sb = fb ? seqstate_new(m, forward_backend(fb), T, cut, L, &err) : NULL;
        float *hidden = malloc(sizeof(float) * (size_t)T * E), *logits = malloc(sizeof(float) * (size_t)T * V);
        REQUIRE_MSG(sa && sb && whole, "%s", err.msg);
        for (int p = 0; p < T; p += 16) { /* micro-batches of 16, as a pipeline would send them */
            const int n = T - p < 16 ? T - p : 16;
            BatchSeq qa = {sa, ids + p, n, 0, NULL, false}, qb = {sb, NULL, n, n, logits + (size_t)p * V, false};
            REQUIRE_MSG(forward_begin(fa, &qa, 1, &err) == 0, "%s", err.msg);
            forward_embed(fa);
            forward_layers(fa, 0, cut);
            forward_hidden_read(fa, hidden);
            REQUIRE_MSG(forward_end(fa, &err) == 0, "%s", err.msg);
            REQUIRE_MSG(forward_begin(fb, &qb, 1, &err) == 0, "%s", err.msg);
            forward_hidden_write(fb, hidden);
            forward_layers(fb, cut, L);
            forward_head(fb);
            REQUIRE_MSG(forward_end(fb, &err) == 0, "%s", err.msg);
        }
        float *chunked = tf_eval(m, ids, T, 16, MATMUL_GGML, DELTANET_AUTO, 2, true);
        CHECK_MSG(chunked && memcmp(chunked, logits, sizeof(float) * (size_t)T * V) == 0,
                  "%s: two stages [0, %d) + [%d, %d) differ from one process", test_model(mi), cut, cut, L);
        /* a state must cover the layers it is run on */
        CHECK(sa->l1 == cut && sb->l0 == cut && sa->n_segs + sb->n_segs == 2 * L);
        free(whole), free(chunked), free(hidden), free(logits), free(ids);
        seqstate_free(sa), seqstate_free(sb);
        forward_free(fa), forward_free(fb);
        model_free(m);
    }
}

/* ---- the head on a vocabulary range ----------------------------------------------------------------------- */

TEST(forward, head_range_same_bits) {
    Model *m = tf_model("m4-qwen35moe-q8_0");
    REQUIRE(m);
    int T;
    int32_t *ids = tf_seq("m4-qwen35moe-q8_0", 5, &T);
    const int V = m->cfg.n_vocab;
    REQUIRE(V >= 512);
    Err err = {{0}};
    Forward *f = tf_forward(m, T, T, MATMUL_GGML, DELTANET_AUTO, 2, true, &err);
    SeqState *s = tf_state(m, f, T, &err);
    REQUIRE(s);
    float *full = malloc(sizeof(float) * (size_t)T * V), *part = malloc(sizeof(float) * (size_t)T * V);
    REQUIRE(forward_run(f, s, ids, T, full, T, &err) == 0);
    const int v0 = 256, v1 = 512;
    CHECK(forward_set_head_range(f, 3, 40, &err) == -1); /* not a multiple of 8 */
    REQUIRE_MSG(forward_set_head_range(f, v0, v1, &err) == 0, "%s", err.msg);
    seqstate_reset(s);
    REQUIRE(forward_run(f, s, ids, T, part, T, &err) == 0);
    for (int t = 0; t < T; t++)
        CHECK_MSG(memcmp(part + (size_t)t * (v1 - v0), full + (size_t)t * V + v0, sizeof(float) * (v1 - v0)) == 0,
                  "row %d: columns [%d, %d) differ from the whole head's", t, v0, v1);
    free(full), free(part), free(ids);
    seqstate_free(s);
    forward_free(f);
    model_free(m);
}

/* ---- the expert provider ------------------------------------------------------------------------------------ */

typedef struct Prov {
    const Model *m;
    uint8_t *copy; /* every expert stack copied elsewhere: the provider hands these bytes out */
    size_t *off;   /* per weight id: where its stack starts in copy */
    long acquired, experts, released;
    int fail_layer;
} Prov;

static int prov_acquire(void *ctx, int layer, const int32_t *experts, int n, const void *(*data)[3], Err *err) {
    Prov *p = ctx;
    if (layer == p->fail_layer) return err_set(err, "expert store unreachable");
    const LayerW *l = &p->m->layers[layer];
    const Weight *w[3] = {l->gate_exps, l->up_exps, l->down_exps};
    for (int i = 0; i < n; i++) {
        if (i > 0 && experts[i] <= experts[i - 1]) return err_set(err, "experts not ascending");
        for (int k = 0; k < 3; k++) data[i][k] = p->copy + p->off[w[k]->id] + (size_t)experts[i] * w[k]->expert_stride;
    }
    p->acquired++;
    p->experts += n;
    return 0;
}

static void prov_release(void *ctx, int layer) {
    (void)layer;
    ((Prov *)ctx)->released++;
}

TEST(forward, expert_provider_hook) {
    Model *m = tf_model("m6-qwen35moe-iq2xxs");
    REQUIRE(m);
    int T;
    int32_t *ids = tf_seq("m6-qwen35moe-iq2xxs", 65, &T);
    const int V = m->cfg.n_vocab;
    Prov p = {m, NULL, calloc((size_t)m->n_weights, sizeof(size_t)), 0, 0, 0, -1};
    size_t total = 0;
    for (int i = 0; i < m->n_weights; i++)
        if (m->weights[i].n_expert) p.off[i] = total, total += m->weights[i].expert_stride * (size_t)m->weights[i].n_expert;
    p.copy = malloc(total);
    for (int i = 0; i < m->n_weights; i++)
        if (m->weights[i].n_expert)
            memcpy(p.copy + p.off[i], m->weights[i].host, m->weights[i].expert_stride * (size_t)m->weights[i].n_expert);
    float *plain = tf_eval(m, ids, T, 0, MATMUL_GGML, DELTANET_AUTO, 2, true);
    Err err = {{0}};
    Forward *f = tf_forward(m, T, T, MATMUL_GGML, DELTANET_AUTO, 2, true, &err);
    SeqState *s = tf_state(m, f, T, &err);
    REQUIRE(s && plain);
    const ExpertProvider ep = {&p, prov_acquire, prov_release, NULL, 0, false};
    forward_set_expert_provider(f, &ep);
    float *lg = malloc(sizeof(float) * (size_t)T * V);
    REQUIRE_MSG(forward_run(f, s, ids, T, lg, T, &err) == 0, "%s", err.msg);
    CHECK_MSG(memcmp(lg, plain, sizeof(float) * (size_t)T * V) == 0, "logits differ with the experts from the provider");
    CHECK(p.acquired == m->cfg.n_layer && p.released == p.acquired && p.experts > p.acquired);
    test_note("provider: %ld layer calls, %ld experts handed out for %d tokens", p.acquired, p.experts, T);
    /* a provider that fails: the pass reports it and the state does not advance */
    p.fail_layer = 1;
    seqstate_reset(s);
    CHECK(forward_run(f, s, ids, 3, lg, 1, &err) == -1);
    CHECK_MSG(strstr(err.msg, "layer 1 experts: expert store unreachable"), "got: %s", err.msg);
    CHECK(s->n_past == 0);
    free(lg), free(plain), free(ids), free(p.copy), free(p.off);
    seqstate_free(s);
    forward_free(f);
    model_free(m);
}

/* ---- tentative batches and keep ------------------------------------------------------------------------------ */

/* An engine on a test model: context 128, batch 64, 3 sessions per batch, 2 threads, optionally in stages. */
static DlEngine *open_engine_stages(const char *name, bool exact, const DlStage *stages, int n_stages) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = test_data(rel);
    p.n_ctx = 128;
    p.n_batch = 64;
    p.n_seq_max = 3;
    p.n_threads = 2;
    p.exact = exact;
    p.isa = getenv("DELTALLM_ISA");
    p.stages = stages;
    p.n_stages = n_stages;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    CHECK_MSG(e, "%s", err.msg);
    return e;
}

static DlEngine *open_engine(const char *name, bool exact) { return open_engine_stages(name, exact, NULL, 0); }

static void *snap(DlSession *s, size_t *n) {
    DlError err = {{0}};
    *n = dl_session_snapshot_size(s);
    void *b = malloc(*n);
    if (dl_session_snapshot(s, b, *n, &err)) CHECK_MSG(false, "%s", err.msg);
    return b;
}

/* After a prompt, a tentative batch of n tokens cut back to each k in 0..n; in exact mode the session must be
 * bit for bit the one that evaluated the k tokens alone (state, KV rows in use, position, last logits). */
static void keep_case(const char *name, bool exact) {
    DlEngine *e = open_engine(name, exact);
    if (!e) return;
    DlError err = {{0}};
    const int V = dl_engine_info(e)->n_vocab, n = 6;
    int32_t prompt[11], draft[6];
    for (int i = 0; i < 11; i++) prompt[i] = (i * 37 + 5) % V;
    for (int i = 0; i < n; i++) draft[i] = (i * 53 + 11) % V;
    DlSession *t = dl_session_new(e, &err), *r = dl_session_new(e, &err);
    REQUIRE(t && r);
    REQUIRE(dl_session_set_rollback(t, 8, &err) == 0);
    int worst_k = -1;
    double worst = 0;
    for (int k = 0; k <= n; k++) {
        dl_session_reset(t);
        dl_session_reset(r);
        REQUIRE(dl_session_eval(t, prompt, 11, &err) == 0 && dl_session_eval(r, prompt, 11, &err) == 0);
        REQUIRE_MSG(dl_session_eval_tentative(t, draft, n, &err) == 0, "%s", err.msg);
        CHECK(dl_session_tentative_logits(t) != NULL && dl_session_n_past(t) == 11 + n);
        REQUIRE_MSG(dl_session_keep(t, (size_t)k, &err) == 0, "%s", err.msg);
        CHECK(dl_session_n_past(t) == 11 + k);
        CHECK(dl_session_keep(t, 0, &err) == -1); /* once */
        if (k) REQUIRE(dl_session_eval(r, draft, (size_t)k, &err) == 0);
        size_t na, nb;
        void *a = snap(t, &na), *b = snap(r, &nb);
        const bool eq = na == nb && memcmp(a, b, na) == 0;
        if (exact || k == 0) CHECK_MSG(eq, "%s %s: keep(%d) of %d differs from evaluating the %d tokens alone", name,
                                       exact ? "exact" : "default", k, n, k);
        /* continuing from there: one more token on both */
        int32_t next = 7;
        REQUIRE(dl_session_eval(t, &next, 1, &err) == 0 && dl_session_eval(r, &next, 1, &err) == 0);
        const float *la = dl_session_logits(t), *lb = dl_session_logits(r);
        double d = 0, mx = 0;
        for (int v = 0; v < V; v++) d = fmax(d, fabs((double)la[v] - lb[v])), mx = fmax(mx, fabs(lb[v]));
        if (exact) CHECK_MSG(d == 0, "%s exact: after keep(%d), the next token's logits differ by %.3g", name, k, d);
        else CHECK_MSG(d <= 1e-3 * mx, "%s default: after keep(%d) the next logits differ by %.3g (max %.3g)", name, k, d, mx);
        if (d / (mx + 1e-30) > worst) worst = d / (mx + 1e-30), worst_k = k;
        free(a), free(b);
    }
    if (!exact) test_note("%s default mode: worst max|d|/max|logit| after keep vs the k tokens alone %.2e (k=%d)", name, worst, worst_k);
    dl_session_free(t), dl_session_free(r);
    dl_engine_close(e);
}

TEST(forward, keep_exact_mode_bitwise) {
    keep_case("m1-qwen3next-legacy-f32", true);
    keep_case("m4-qwen35moe-q8_0", true);
    keep_case("m5-qwen35-7layer-int3-f16", true);
    keep_case("m8-qwen3next-wide-mixed", true);
}

TEST(forward, keep_default_mode) {
    keep_case("m2-qwen3next-new-mixed", false);
    keep_case("m7-qwen35-wide-q8_0", false);
}

/* keep(n) replays nothing: the session is the one a plain evaluation of the same batch leaves; the calls
 * that make no sense are refused with the session unchanged. */
TEST(forward, keep_all_and_bad_calls) {
    DlEngine *e = open_engine("m6-qwen35moe-iq2xxs", false);
    REQUIRE(e);
    DlError err = {{0}};
    DlSession *t = dl_session_new(e, &err), *r = dl_session_new(e, &err);
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 3 + 17 * i;
    CHECK(dl_session_keep(t, 0, &err) == -1 && strstr(err.msg, "no tentative batch"));
    REQUIRE(dl_session_eval(t, toks, 5, &err) == 0 && dl_session_eval(r, toks, 5, &err) == 0);
    REQUIRE(dl_session_eval_tentative(t, toks + 5, 7, &err) == 0); /* room made on first use (16) */
    CHECK(dl_session_keep(t, 8, &err) == -1 && strstr(err.msg, "keeping 8 tokens of a tentative batch of 7"));
    REQUIRE(dl_session_keep(t, 7, &err) == 0);
    /* a plain eval of the same 7 tokens as a batch: the same bits (keep(n) replays nothing) */
    REQUIRE(dl_session_eval(r, toks + 5, 7, &err) == 0);
    size_t na, nb;
    void *a = snap(t, &na), *b = snap(r, &nb);
    CHECK(na == nb && memcmp(a, b, na) == 0);
    free(a), free(b);
    CHECK(dl_session_eval_tentative(t, toks, 17, &err) == -1); /* more than the room */
    CHECK(dl_session_n_past(t) == 12);
    dl_session_free(t), dl_session_free(r);
    dl_engine_close(e);
}

/* ---- the allocation guard --------------------------------------------------------------------------------- */

TEST(forward, no_allocation_after_warmup) {
    REQUIRE_MSG(alloc_guard_works(), "the allocation guard sees no allocations in this build");
    int checked = 0;
    for (int mi = 0; mi < N_MODELS; mi++) {
        Model *m = tf_model(test_model(mi));
        if (!m) continue;
        int T;
        int32_t *ids = tf_seq(test_model(mi), 65, &T);
        const int V = m->cfg.n_vocab;
        float *lg = malloc(sizeof(float) * (size_t)T * V);
        const char *names[] = {"ref", "cpu"};
        const bool wide = m->cfg.n_embd >= 1024; /* the scalar reference is slow there: the CPU backend only */
        for (int bi = wide ? 1 : 0; bi < 2; bi++)
            for (int mode = 0; mode < 2; mode++) {
                Err err = {{0}};
                ForwardOptions fo = {.max_batch = 32, .max_ctx = 128, .backend = tf_backend((MatMode)mode, 2, true)};
                fo.backend.name = names[bi];
                Forward *f = forward_new(m, &fo, &err);
                SeqState *s = tf_state(m, f, 128, &err);
                REQUIRE_MSG(s, "%s", err.msg);
                REQUIRE_MSG(seqstate_enable_rollback(s, m, 8, &err) == 0, "%s", err.msg);
                /* warm-up: every path once */
                BatchSeq tent = {s, ids + 40, 5, 5, lg, true};
                REQUIRE(forward_run(f, s, ids, 32, lg, 32, &err) == 0 && forward_run(f, s, ids + 32, 1, lg, 1, &err) == 0);
                REQUIRE(forward_batch(f, &tent, 1, &err) == 0 && forward_keep(f, s, 2, &err) == 0);
                alloc_guard_arm();
                int rc = forward_run(f, s, ids + 33, 7, lg, 7, &err);          /* prefill */
                rc |= forward_run(f, s, ids + 40, 1, lg, 1, &err);             /* decode */
                rc |= forward_batch(f, &tent, 1, &err) | forward_keep(f, s, 3, &err); /* verify + rollback */
                const long n = alloc_guard_disarm();
                CHECK_MSG(rc == 0, "%s", err.msg);
                CHECK_MSG(n == 0, "%s on %s, %s mode: %ld allocations in forward passes after warm-up", test_model(mi),
                          forward_ops_name(f), mode ? "exact" : "default", n);
                checked++;
                seqstate_free(s);
                forward_free(f);
            }
        free(lg), free(ids);
        model_free(m);
    }
    /* the engine: prefill, a sampled decode step, batched decode of several sessions, tentative + keep */
    DlEngine *e = open_engine("m4-qwen35moe-q8_0", false);
    REQUIRE(e);
    DlError err = {{0}};
    DlSession *s[3];
    for (int i = 0; i < 3; i++) s[i] = dl_session_new(e, &err);
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    DlSampler *smp = dl_sampler_new(e, &sp, &err);
    REQUIRE(s[0] && s[1] && s[2] && smp && dl_session_set_rollback(s[0], 8, &err) == 0);
    int32_t toks[16] = {5, 9, 100, 7, 42, 8, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    for (int round = 0; round < 2; round++) { /* the first round warms up */
        if (round) alloc_guard_arm();
        for (int i = 0; i < 3; i++) dl_session_eval(s[i], toks, 9, &err);
        int32_t next[3];
        for (int i = 0; i < 3; i++) next[i] = dl_sampler_sample(smp, dl_session_logits(s[i])), dl_sampler_accept(smp, next[i]);
        dl_decode_batch(s, next, 3, &err);
        dl_session_eval_tentative(s[0], toks + 9, 4, &err);
        dl_session_keep(s[0], 2, &err);
        for (int i = 0; i < 3; i++) dl_session_reset(s[i]);
        if (round) {
            const long n = alloc_guard_disarm();
            CHECK_MSG(n == 0, "engine: %ld allocations in evaluation, sampling, batched decode and keep", n);
        }
    }
    test_note("%d model × backend × mode forward loops and the engine's decode loop allocate nothing after warm-up", checked);
    dl_sampler_free(smp);
    for (int i = 0; i < 3; i++) dl_session_free(s[i]);
    dl_engine_close(e);
}

/* ---- an engine cut into stages ---------------------------------------------------------------------------- */

/* The same prompt, a batched decode of two sessions and a tentative batch cut back, on one stage and on three
 * (CPU, reference, CPU): the same logits and the same snapshot bytes. */
TEST(forward, engine_stages_same_bits) {
    const char *names[] = {"m2-qwen3next-new-mixed", "m5-qwen35-7layer-int3-f16"};
    for (int mi = 0; mi < 2; mi++) {
        const DlStage three[3] = {{"cpu", 1}, {"ref", 2}, {"cpu", 0}};
        DlEngine *e[2] = {open_engine(names[mi], false), open_engine_stages(names[mi], false, three, 3)};
        REQUIRE(e[0] && e[1]);
        DlError err = {{0}};
        const int V = dl_engine_info(e[0])->n_vocab;
        int32_t prompt[40];
        for (int i = 0; i < 40; i++) prompt[i] = (i * 31 + 7) % V;
        DlSession *s[2][2];
        for (int k = 0; k < 2; k++) {
            for (int j = 0; j < 2; j++) {
                s[k][j] = dl_session_new(e[k], &err);
                REQUIRE(s[k][j] && dl_session_eval(s[k][j], prompt + 3 * j, 37, &err) == 0);
            }
            int32_t next[2] = {11, 12};
            REQUIRE(dl_decode_batch(s[k], next, 2, &err) == 0);
            REQUIRE(dl_session_eval_tentative(s[k][0], prompt, 5, &err) == 0 && dl_session_keep(s[k][0], 3, &err) == 0);
        }
        for (int j = 0; j < 2; j++) {
            CHECK_MSG(memcmp(dl_session_logits(s[0][j]), dl_session_logits(s[1][j]), sizeof(float) * (size_t)V) == 0,
                      "%s session %d: three stages give other logits than one", names[mi], j);
            size_t na, nb;
            void *a = snap(s[0][j], &na), *b = snap(s[1][j], &nb);
            CHECK_MSG(na == nb && memcmp(a, b, na) == 0, "%s session %d: the snapshots differ", names[mi], j);
            /* a snapshot of the three-stage session restores into the one-stage engine */
            CHECK(dl_session_restore(s[0][j], b, nb, &err) == 0);
            free(a), free(b);
        }
        for (int k = 0; k < 2; k++) {
            for (int j = 0; j < 2; j++) dl_session_free(s[k][j]);
            dl_engine_close(e[k]);
        }
    }
    /* stages that do not cut the model */
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = test_data("models/m4-qwen35moe-q8_0.gguf");
    const DlStage bad[2] = {{"cpu", 3}, {"cpu", 3}};
    p.stages = bad, p.n_stages = 2;
    DlError err = {{0}};
    CHECK(!dl_engine_open(&p, &err));
    CHECK_MSG(strstr(err.msg, "do not cut the model"), "got: %s", err.msg);
}
