/* test_sampling.c — the sampler (src/engine/sampling.c) against a plain reference that sorts every
 * candidate: the same chain (top-k, top-p, min-p, temperature) and the same random stream must pick the
 * same tokens, whatever part of the vocabulary the sampler actually sorts. */
#include "test.h"

#include "deltallm.h"
#include "engine/engine_internal.h"
#include "base/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct RefCand {
    int32_t id;
    float logit, p;
} RefCand;

static int ref_cmp(const void *a, const void *b) {
    const RefCand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static double ref_uniform(uint64_t *rng) { /* sampling.c's splitmix64 */
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* The textbook chain: sort all, cut, draw walking the sorted list — or, when nothing was cut, the
 * vocabulary in id order; sums over the whole vocabulary run in id order. */
static int32_t ref_sample(const DlSamplingParams *p, const float *lg, int V, RefCand *c, uint64_t *rng) {
    for (int i = 0; i < V; i++) c[i] = (RefCand){i, lg[i], 0};
    qsort(c, (size_t)V, sizeof *c, ref_cmp);
    int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    const double top = c[0].logit;
    double sum = 0;
    if (n == V)
        for (int i = 0; i < V; i++) sum += exp((double)lg[i] - top);
    else
        for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - top);
    for (int i = 0; i < n; i++) c[i].p = (float)(exp((double)c[i].logit - top) / sum);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += c[i].p;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        const float floor = p->min_p * c[0].p;
        int keep = 1;
        while (keep < n && c[keep].p >= floor) keep++;
        n = keep;
    }
    sum = 0;
    if (n == V)
        for (int i = 0; i < V; i++) sum += exp(((double)lg[i] - top) / p->temperature);
    else
        for (int i = 0; i < n; i++) sum += exp(((double)c[i].logit - top) / p->temperature);
    const double r = ref_uniform(rng) * sum;
    double acc = 0;
    if (n == V) { /* nothing cut: walk in id order */
        for (int i = 0; i < V; i++) {
            acc += (float)exp(((double)lg[i] - top) / p->temperature);
            if (r < acc) return i;
        }
        return V - 1;
    }
    for (int i = 0; i < n; i++) {
        acc += (float)exp(((double)c[i].logit - top) / p->temperature);
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}

static uint64_t lcg = 12345;
static float rnd_logit(void) {
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t u = (uint32_t)(lcg >> 40);
    return (float)(u % 4096) / 256.0f - 8.0f; /* a coarse grid: many exact ties */
}

TEST(sampling, matches_full_sort_reference) {
    static const DlSamplingParams sets[] = {
        {1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 0, 64, 7},       /* OpenAI defaults: the whole vocabulary */
        {0.8f, 40, 0.95f, 0.05f, 1.0f, 0, 0, 64, 8},    /* deltallm's defaults */
        {1.0f, 0, 0.9f, 0.0f, 1.0f, 0, 0, 64, 9},       /* nucleus only */
        {0.7f, 0, 1.0f, 0.1f, 1.0f, 0, 0, 64, 10},      /* min-p only */
        {1.3f, 1000, 0.99f, 0.0f, 1.0f, 0, 0, 64, 11},  /* a large top-k */
        {1.0f, 300, 1.0f, 0.0f, 1.0f, 0, 0, 64, 12},    /* top-k just past the insertion pass */
        {2.0f, 0, 0.999f, 0.001f, 1.0f, 0, 0, 64, 13},  /* flat: deep into the list */
    };
    static const int vocabs[] = {7, 1000, 151936};
    for (size_t vi = 0; vi < sizeof vocabs / sizeof *vocabs; vi++) {
        const int V = vocabs[vi];
        DlEngine e;
        memset(&e, 0, sizeof e);
        e.info.n_vocab = V;
        float *lg = malloc(sizeof(float) * (size_t)V);
        RefCand *rc = malloc(sizeof *rc * (size_t)V);
        REQUIRE(lg && rc);
        int draws = 0, same = 0;
        for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
            DlError err = {{0}};
            DlSampler *s = dl_sampler_new(&e, &sets[si], &err);
            REQUIRE_MSG(s, "%s", err.msg);
            uint64_t rng = sets[si].seed ^ 0x9E3779B97F4A7C15ull; /* dl_sampler_reset's */
            const int n_draws = V > 100000 ? 12 : 60;
            for (int d = 0; d < n_draws; d++) {
                for (int i = 0; i < V; i++) lg[i] = rnd_logit();
                if (d % 3 == 0) /* a peaked distribution */
                    for (int i = 0; i < 5 && i < V; i++) lg[(i * 7919) % V] += 12.0f;
                const int32_t a = dl_sampler_sample(s, lg), b = ref_sample(&sets[si], lg, V, rc, &rng);
                draws++;
                same += a == b;
                if (a != b)
                    CHECK_MSG(0, "V %d set %zu draw %d: sampler %d, reference %d", V, si, d, (int)a, (int)b);
            }
            dl_sampler_free(s);
        }
        test_note("vocabulary %6d: %d of %d draws identical to the full-sort reference", V, same, draws);
        free(lg), free(rc);
    }
}

/* Not a timing assertion: the note records what a draw over a Qwen3.5-size vocabulary costs. */
TEST(sampling, whole_vocabulary_draw_cost) {
    const int V = 248320;
    DlEngine e;
    memset(&e, 0, sizeof e);
    e.info.n_vocab = V;
    DlSamplingParams p = {1.0f, 0, 1.0f, 0.0f, 1.0f, 0, 0, 64, 1};
    DlError err = {{0}};
    DlSampler *s = dl_sampler_new(&e, &p, &err);
    float *lg = malloc(sizeof(float) * (size_t)V);
    REQUIRE(s && lg);
    for (int i = 0; i < V; i++) lg[i] = rnd_logit();
    const double t0 = now_s();
    int32_t last = -1;
    for (int d = 0; d < 20; d++) last = dl_sampler_sample(s, lg);
    const double t1 = now_s();
    CHECK(last >= 0 && last < V);
    test_note("temperature 1, no top-k/top-p, vocabulary %d: %.2f ms per draw", V,
              (t1 - t0) * 1e3 / 20);
    dl_sampler_free(s);
    free(lg);
}
