/* test_sampling_llama.c — llama.cpp's further samplers (src/engine/sampling_llama.c), each on its definition:
 * DRY's penalty on a repeated sequence (its size, the allowed length, breakers), Mirostat's surprise tracking
 * (mu after an accepted draw, and not after a rejected one), XTC removing the top choices above the threshold,
 * the typical set, top-n-sigma's cutoff, the dynamic temperature, min_tokens, the order of the chain, and that a sampler with all of
 * them off is the default sampler bit for bit. Greedy (temperature 0, last in the chain) turns "which
 * candidates are left, with which logits" into which token comes out. */
#include "test.h"

#include "deltallm.h"
#include "engine/engine_internal.h"
#include "engine/sampling_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static DlEngine fake_engine(int V) {
    DlEngine e;
    memset(&e, 0, sizeof e);
    e.info.n_vocab = V;
    return e;
}

static DlSampler *make(const DlEngine *e, float temp, const DlSamplerExtra *x) {
    DlSamplingParams p;
    dl_sampling_params_init(&p);
    p.temperature = temp;
    p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f;
    DlError err = {{0}};
    DlSampler *s = dl_sampler_new_extra(e, &p, x, &err);
    if (!s) test_note("sampler: %s", err.msg);
    return s;
}

TEST(sampling_llama, all_off_is_the_default_sampler) {
    const int V = 5000;
    DlEngine e = fake_engine(V);
    DlSamplingParams p;
    dl_sampling_params_init(&p);
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    DlError err = {{0}};
    DlSampler *a = dl_sampler_new(&e, &p, &err), *b = dl_sampler_new_extra(&e, &p, &x, &err);
    REQUIRE(a && b);
    CHECK(isnan(sampler_llama_mu(b))); /* no chain made */
    float *lg = malloc(sizeof(float) * V);
    REQUIRE(lg);
    uint64_t r = 99;
    int same = 0;
    for (int d = 0; d < 200; d++) {
        for (int i = 0; i < V; i++) r = r * 6364136223846793005ull + 1, lg[i] = (float)(r >> 40) / 1048576.0f;
        const int32_t ta = dl_sampler_sample(a, lg), tb = dl_sampler_sample(b, lg);
        same += ta == tb;
        dl_sampler_accept(a, ta), dl_sampler_accept(b, tb);
    }
    CHECK_MSG(same == 200, "%d of 200 draws the same", same);
    free(lg);
    dl_sampler_free(a), dl_sampler_free(b);
}

/* history 1 2 3 4 1 2 3: continuing with 4 repeats "1 2 3 4", a match of length 3 → penalty mult·base^(3−allowed) */
static int32_t dry_pick(float lead, int allowed, int32_t breaker) {
    const int V = 16;
    DlEngine e = fake_engine(V);
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.dry_multiplier = 1.0f, x.dry_base = 2.0f, x.dry_allowed_length = allowed;
    DlSampler *s = make(&e, 0.0f, &x);
    if (!s) return -2;
    if (breaker >= 0) sampler_llama_mark(s, breaker, true, false);
    const int32_t hist[] = {1, 2, 3, 4, 1, 2, 3};
    for (size_t i = 0; i < sizeof hist / sizeof *hist; i++) dl_sampler_accept(s, hist[i]);
    float lg[16] = {0};
    lg[4] = lead; /* 4 leads 5 (and everything else) by `lead` before the penalty */
    const int32_t t = dl_sampler_sample(s, lg);
    dl_sampler_free(s);
    return t;
}

TEST(sampling_llama, dry_penalty_on_a_repeated_sequence) {
    CHECK_MSG(dry_pick(2.01f, 2, -1) == 4, "penalty 2 must leave 4 ahead by 0.01");
    CHECK_MSG(dry_pick(1.99f, 2, -1) == 0, "penalty 2 (=1·2^(3-2)) must put 4 behind by 0.01");
    CHECK_MSG(dry_pick(1.01f, 3, -1) == 4, "allowed 3: penalty 1·2^0 = 1");
    CHECK_MSG(dry_pick(0.99f, 3, -1) == 0, "allowed 3: penalty 1");
    CHECK_MSG(dry_pick(0.01f, 4, -1) == 4, "a repeat of 3 within allowed 4 is free");
    /* 2 a breaker: the match "3" alone (length 1 < 2) → no penalty */
    CHECK_MSG(dry_pick(0.01f, 2, 2) == 4, "no match crosses a breaker");
    CHECK_MSG(dry_pick(1.99f, 2, 7) == 0, "a breaker outside the match changes nothing");
}

/* Mirostat 2: the kept set is {−log2 p ≤ mu}, renormalized; after the draw is accepted, mu −= eta·(surprise − tau). */
TEST(sampling_llama, mirostat_tracks_surprise) {
    const int V = 6;
    DlEngine e = fake_engine(V);
    const float lg[6] = {2.0f, 1.5f, 1.0f, 0.0f, -1.0f, -3.0f};
    for (int version = 1; version <= 2; version++) {
        DlSamplerExtra x;
        dl_sampler_extra_init(&x);
        x.mirostat = version, x.mirostat_tau = 1.5f, x.mirostat_eta = 0.25f;
        DlSampler *s = make(&e, 1.0f, &x);
        REQUIRE(s);
        CHECK(fabsf(sampler_llama_mu(s) - 3.0f) < 1e-6f); /* starts at 2·tau */
        int moved = 0;
        for (int d = 0; d < 40; d++) {
            const double mu = sampler_llama_mu(s);
            /* the reference: probabilities, the kept set, the drawn token's surprise */
            double p[6], z = 0;
            for (int i = 0; i < V; i++) z += exp(lg[i]);
            for (int i = 0; i < V; i++) p[i] = exp(lg[i]) / z;
            int keep = 0;
            if (version == 2) {
                while (keep < V && -log2(p[keep]) <= mu) keep++;
                if (!keep) keep = 1;
            } else {
                double tb = 0, tt = 0;
                for (int i = 0; i < V - 1; i++) {
                    double t = log((i + 2.0) / (i + 1.0)), b = log(p[i] / p[i + 1]);
                    tb += t * b, tt += t * t;
                }
                double sh = tb / tt, eps = sh - 1, k = pow(eps * pow(2, mu) / (1 - pow(V, -eps)), 1 / sh);
                keep = k >= 1 ? (k < V ? (int)k : V) : 1;
            }
            double zk = 0;
            for (int i = 0; i < keep; i++) zk += p[i];
            const int32_t t = dl_sampler_sample(s, lg);
            CHECK_MSG(t >= 0 && t < keep, "v%d draw %d: token %d outside the kept set of %d (mu %.3f)", version, d, t, keep, mu);
            if (t < 0 || t >= keep) break;
            const double want = mu - 0.25 * (-log2(p[t] / zk) - 1.5);
            if (d % 5 == 4) { /* a rejected draw: another token accepted, mu stays */
                dl_sampler_accept(s, (t + 1) % V);
                CHECK_MSG(fabs(sampler_llama_mu(s) - mu) < 1e-6, "v%d: mu moved on a rejected draw", version);
                continue;
            }
            dl_sampler_accept(s, t);
            CHECK_MSG(fabs(sampler_llama_mu(s) - want) < 1e-4, "v%d draw %d: mu %.5f, want %.5f", version, d,
                      sampler_llama_mu(s), want);
            moved += fabs(want - mu) > 1e-6;
        }
        CHECK(moved > 10);
        dl_sampler_free(s);
    }
}

/* probabilities ~ 0.40, 0.30, 0.20, 0.05, 0.05 (threshold 0.1: three at or above it) */
static int32_t xtc_pick(float prob, float threshold, const char *order, int top_k) {
    DlEngine e = fake_engine(5);
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.xtc_probability = prob, x.xtc_threshold = threshold, x.samplers = order;
    DlSamplingParams p;
    dl_sampling_params_init(&p);
    p.temperature = 0.0f, p.top_k = top_k, p.top_p = 1.0f, p.min_p = 0.0f;
    DlError err = {{0}};
    DlSampler *s = dl_sampler_new_extra(&e, &p, &x, &err);
    if (!s) return -2;
    const float lg[5] = {logf(0.40f), logf(0.30f), logf(0.20f), logf(0.05f), logf(0.05f)};
    const int32_t t = dl_sampler_sample(s, lg);
    dl_sampler_free(s);
    return t;
}

TEST(sampling_llama, xtc_removes_the_top_choices) {
    CHECK_MSG(xtc_pick(1.0f, 0.1f, NULL, 0) == 2, "all above 0.1 but the least likely (2) removed");
    CHECK_MSG(xtc_pick(1.0f, 0.25f, NULL, 0) == 1, "threshold 0.25: 0 removed, 1 kept");
    CHECK_MSG(xtc_pick(1.0f, 0.35f, NULL, 0) == 0, "one token above the threshold: nothing removed");
    CHECK_MSG(xtc_pick(0.0f, 0.1f, "xtc;temperature", 0) == 0, "probability 0: off");
    CHECK_MSG(xtc_pick(1.0f, 0.6f, NULL, 0) == 0, "threshold > 0.5: off");
    /* the order: top_k 1 first leaves one candidate (XTC needs two); XTC first leaves 2 for top_k */
    CHECK(xtc_pick(1.0f, 0.1f, "top_k;xtc;temperature", 1) == 0);
    CHECK(xtc_pick(1.0f, 0.1f, "xtc;top_k;temperature", 1) == 2);
    CHECK(xtc_pick(1.0f, 0.1f, "xkt", 1) == 2); /* llama.cpp's letters */
    CHECK(xtc_pick(1.0f, 0.1f, "xtc;bogus", 1) == -2);
}

/* Dynamic temperature on two candidates with logits 1 and 0 (p = 0.731, 0.269): H = 0.5822 nats of ln 2, so
 * 0.8399 normalised. t = 1, range 0.5: the temperature is 0.5 + 1.0 · 0.8399^e — 1.340 (e = 1: p0 = 0.6783) and
 * 1.2054 (e = 2: p0 = 0.6967) — against 0.7311 at t = 1 without it. 40,000 draws each (σ of p0 ≈ 0.0023). */
static double dynatemp_share(float range, float exponent) {
    DlEngine e = fake_engine(2);
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.dynatemp_range = range, x.dynatemp_exponent = exponent;
    DlSamplingParams p;
    dl_sampling_params_init(&p);
    p.temperature = 1.0f, p.top_k = 0, p.top_p = 1.0f, p.min_p = 0.0f, p.seed = 7;
    DlError err = {{0}};
    DlSampler *s = dl_sampler_new_extra(&e, &p, &x, &err);
    if (!s) return -1;
    const float lg[2] = {1.0f, 0.0f};
    int zeros = 0;
    enum { N = 40000 };
    for (int i = 0; i < N; i++) zeros += dl_sampler_sample(s, lg) == 0;
    dl_sampler_free(s);
    return (double)zeros / N;
}

TEST(sampling_llama, dynamic_temperature_follows_the_entropy) {
    const double off = dynatemp_share(0.0f, 1.0f), e1 = dynatemp_share(0.5f, 1.0f), e2 = dynatemp_share(0.5f, 2.0f);
    CHECK_MSG(fabs(off - 0.7311) < 0.01, "range 0: p0 %.4f, want 0.7311", off);
    CHECK_MSG(fabs(e1 - 0.6783) < 0.01, "range 0.5, exponent 1: p0 %.4f, want 0.6783", e1);
    CHECK_MSG(fabs(e2 - 0.6967) < 0.01, "range 0.5, exponent 2: p0 %.4f, want 0.6967", e2);
    DlEngine e = fake_engine(2);
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.dynatemp_range = -1.0f;
    CHECK(make(&e, 1.0f, &x) == NULL);
}

/* p = 0.4, 0.3, 0.1, 0.1, 0.1: H = 1.418 nats; |−ln p − H| = 0.50, 0.21, 0.88, ...: the most typical token is 1 */
TEST(sampling_llama, typical_keeps_the_typical_set) {
    DlEngine e = fake_engine(5);
    const float lg[5] = {logf(0.4f), logf(0.3f), logf(0.1f), logf(0.1f), logf(0.1f)};
    const float tp[] = {0.25f, 0.5f, 1.0f};
    const int32_t want[] = {1, 0, 0};
    for (int k = 0; k < 3; k++) {
        DlSamplerExtra x;
        dl_sampler_extra_init(&x);
        x.typical_p = tp[k];
        if (tp[k] >= 1.0f) x.samplers = "typ_p;temperature";
        DlSampler *s = make(&e, 0.0f, &x);
        REQUIRE(s);
        const int32_t t = dl_sampler_sample(s, lg);
        CHECK_MSG(t == want[k], "typical_p %.2f: token %d, want %d", tp[k], t, want[k]);
        dl_sampler_free(s);
    }
    /* at temperature 1, with typical_p 0.6 the set is {1, 0} (0.3 + 0.4): no draw outside it */
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.typical_p = 0.6f;
    DlSampler *s = make(&e, 1.0f, &x);
    REQUIRE(s);
    int seen[5] = {0};
    for (int d = 0; d < 300; d++) seen[dl_sampler_sample(s, lg)]++;
    CHECK_MSG(seen[0] > 0 && seen[1] > 0 && !seen[2] && !seen[3] && !seen[4], "%d %d %d %d %d", seen[0], seen[1],
              seen[2], seen[3], seen[4]);
    dl_sampler_free(s);
}

TEST(sampling_llama, top_n_sigma_cutoff) {
    const int V = 10;
    DlEngine e = fake_engine(V);
    float lg[10] = {10.0f, 9.0f, 0, 0, 0, 0, 0, 0, 0, 0};
    lg[9] = 6.5f;
    double mean = 0, sq = 0;
    for (int i = 0; i < V; i++) mean += lg[i] / V;
    for (int i = 0; i < V; i++) sq += (lg[i] - mean) * (lg[i] - mean) / V;
    const double sigma = sqrt(sq); /* ≈ 4.0: n = 1 keeps {0, 1, 9}? only where logit ≥ 10 − n·σ */
    const float ns[] = {1.0f, 0.3f, 0.05f};
    for (int k = 0; k < 3; k++) {
        DlSamplerExtra x;
        dl_sampler_extra_init(&x);
        x.top_n_sigma = ns[k];
        DlSampler *s = make(&e, 1.0f, &x);
        REQUIRE(s);
        const double cut = 10.0 - ns[k] * sigma;
        int seen[10] = {0}, bad = 0;
        for (int d = 0; d < 400; d++) seen[dl_sampler_sample(s, lg)]++;
        for (int i = 0; i < V; i++) {
            if (lg[i] >= cut) bad += !seen[i]; /* kept: drawn at least once (p ≥ 0.03 in every case here) */
            else bad += seen[i] != 0;
        }
        CHECK_MSG(!bad, "n %.2f cut %.3f: draws %d %d ... %d", ns[k], cut, seen[0], seen[1], seen[9]);
        dl_sampler_free(s);
    }
}

TEST(sampling_llama, min_tokens_holds_back_end_of_generation) {
    DlEngine e = fake_engine(4);
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.min_tokens = 2;
    DlSampler *s = make(&e, 0.0f, &x);
    REQUIRE(s);
    REQUIRE(sampler_llama_mark(s, 3, false, true) == 0);
    const float lg[4] = {0.0f, 1.0f, 0.5f, 9.0f};
    int32_t got[3];
    for (int i = 0; i < 3; i++) dl_sampler_accept(s, got[i] = dl_sampler_sample(s, lg));
    CHECK_MSG(got[0] == 1 && got[1] == 1 && got[2] == 3, "%d %d %d", got[0], got[1], got[2]);
    dl_sampler_free(s);
}

TEST(sampling_llama, bad_values_are_refused) {
    DlEngine e = fake_engine(8);
    DlSamplingParams p;
    dl_sampling_params_init(&p);
    DlSamplerExtra x;
    DlError err = {{0}};
    dl_sampler_extra_init(&x);
    x.mirostat = 3;
    CHECK(!dl_sampler_new_extra(&e, &p, &x, &err) && strstr(err.msg, "mirostat"));
    dl_sampler_extra_init(&x);
    x.dry_base = 0.5f, x.dry_multiplier = 1;
    CHECK(!dl_sampler_new_extra(&e, &p, &x, &err) && strstr(err.msg, "dry_base"));
    dl_sampler_extra_init(&x);
    x.samplers = "top_k;nope";
    CHECK(!dl_sampler_new_extra(&e, &p, &x, &err) && strstr(err.msg, "unknown sampler 'nope'"));
}

/* Not a timing assertion: what the llama.cpp chain costs per draw on a Qwen3.5-size vocabulary, next to the
 * default chain (which sorts only the prefix it needs). */
TEST(sampling_llama, chain_draw_cost) {
    const int V = 248320;
    DlEngine e = fake_engine(V);
    float *lg = malloc(sizeof(float) * V);
    REQUIRE(lg);
    uint64_t r = 5;
    for (int i = 0; i < V; i++) r = r * 6364136223846793005ull + 1, lg[i] = (float)(r >> 40) / 65536.0f;
    const char *names[] = {"default chain (top-k 40, top-p 0.95, min-p 0.05)", "+ typical_p 0.95",
                           "mirostat 2", "+ DRY over 4096 tokens"};
    double ms[4];
    for (int k = 0; k < 4; k++) {
        DlSamplingParams p;
        dl_sampling_params_init(&p);
        DlSamplerExtra x;
        dl_sampler_extra_init(&x);
        if (k == 1) x.typical_p = 0.95f;
        if (k == 2) x.mirostat = 2;
        if (k == 3) x.dry_multiplier = 0.8f;
        DlError err = {{0}};
        DlSampler *s = dl_sampler_new_extra(&e, &p, &x, &err);
        REQUIRE(s);
        for (int i = 0; i < 4096; i++) dl_sampler_accept(s, (int32_t)((i * 7919) % 500));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int d = 0; d < 5; d++) dl_sampler_accept(s, dl_sampler_sample(s, lg));
        clock_gettime(CLOCK_MONOTONIC, &t1);
        ms[k] = ((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6) / 5;
        dl_sampler_free(s);
    }
    for (int k = 0; k < 4; k++) test_note("%-50s %7.2f ms per draw (%.1fx)", names[k], ms[k], ms[k] / ms[0]);
    CHECK(ms[0] > 0);
    free(lg);
}
