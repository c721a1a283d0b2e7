/* sampling.c — the sampler of include/deltallm.h. The chain is llama.cpp's default order:
 *   penalties (repeat, frequency, presence over the last N tokens) → top-k → top-p → min-p → temperature →
 *   draw from the distribution.
 * top-p and min-p look at the probabilities before temperature, as llama.cpp's chain does. Temperature
 * ≤ 0 is greedy: argmax, the lowest id on ties. All buffers are allocated once; sampling allocates
 * nothing. */
#include "deltallm.h"
#include "base/splitmix.h"

#include "engine/engine_internal.h"
#include "engine/sampling_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


void dl_sampling_params_init(DlSamplingParams *p) {
    *p = (DlSamplingParams){.temperature = 0.8f,
                            .top_k = 40,
                            .top_p = 0.95f,
                            .min_p = 0.05f,
                            .repeat_penalty = 1.0f,
                            .presence_penalty = 0.0f,
                            .frequency_penalty = 0.0f,
                            .penalty_last_n = 64,
                            .seed = 0x5eed};
}

DlSampler *dl_sampler_new(const DlEngine *e, const DlSamplingParams *p, DlError *err) {
    return dl_sampler_new_extra(e, p, NULL, err);
}

DlSampler *dl_sampler_new_extra(const DlEngine *e, const DlSamplingParams *p, const DlSamplerExtra *x, DlError *err) {
    DlSampler *s = calloc(1, sizeof *s);
    const int V = e->info.n_vocab;
    if (s) {
        s->p = *p;
        if (s->p.penalty_last_n < 0) s->p.penalty_last_n = 0;
        s->n_vocab = V;
        s->cand = malloc(sizeof *s->cand * (size_t)V);
        s->work = malloc(sizeof *s->work * (size_t)V);
        s->count = calloc((size_t)V, sizeof *s->count);
        s->history = malloc(sizeof *s->history * (size_t)(s->p.penalty_last_n + 1));
    }
    if (!s || !s->cand || !s->work || !s->count || !s->history) {
        dl_sampler_free(s);
        if (err) snprintf(err->msg, sizeof err->msg, "out of memory for the sampler");
        return NULL;
    }
    if (x) {
        DlError le = {{0}};
        s->llama = sampler_llama_new(e, x, &s->p, &le);
        if (!s->llama && le.msg[0]) {
            dl_sampler_free(s);
            if (err) *err = le;
            return NULL;
        }
    }
    dl_sampler_reset(s);
    return s;
}

void dl_sampler_free(DlSampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->work);
    free(s->count);
    free(s->history);
    sampler_llama_free(s->llama);
    free(s);
}

void dl_sampler_reset(DlSampler *s) {
    s->hist_n = s->hist_pos = 0;
    s->rng = s->p.seed ^ 0x9E3779B97F4A7C15ull;
    if (s->llama) sampler_llama_reset(s);
}

void dl_sampler_accept(DlSampler *s, int32_t token) {
    if (s->llama) sampler_llama_accept(s, token);
    if (s->p.penalty_last_n == 0) return;
    s->history[s->hist_pos] = token;
    s->hist_pos = (s->hist_pos + 1) % s->p.penalty_last_n;
    if (s->hist_n < s->p.penalty_last_n) s->hist_n++;
}

double sampler_uniform(DlSampler *s) { /* splitmix64 → [0, 1) */
    uint64_t z = splitmix_next(&s->rng);
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static void apply_penalties(DlSampler *s) {
    const DlSamplingParams *p = &s->p;
    if (s->hist_n == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f))
        return;
    for (int i = 0; i < s->hist_n; i++) {
        int32_t t = s->history[i];
        if (t >= 0 && t < s->n_vocab) s->count[t]++;
    }
    for (int i = 0; i < s->hist_n; i++) {
        int32_t t = s->history[i];
        if (t < 0 || t >= s->n_vocab || s->count[t] == 0) continue;
        float *l = &s->work[t];
        if (p->repeat_penalty != 1.0f) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
        s->count[t] = 0; /* each token once; leaves count zeroed */
    }
}

static int cmp_cand(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Keeps the k best candidates (by logit, ties to the lower id) sorted at the front; returns k. */
static int select_top(Cand *c, int n, int k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof *c, cmp_cand);
        return n;
    }
    /* a bounded insertion pass: fine for the usual k ≤ a few hundred */
    if (k <= 256) {
        Cand best[256];
        int m = 0;
        for (int i = 0; i < n; i++) {
            if (m == k && cmp_cand(&c[i], &best[m - 1]) >= 0) continue;
            int j = m < k ? m++ : k - 1;
            while (j > 0 && cmp_cand(&c[i], &best[j - 1]) < 0) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = c[i];
        }
        memcpy(c, best, sizeof *c * (size_t)m);
        return m;
    }
    qsort(c, (size_t)n, sizeof *c, cmp_cand);
    return k;
}

/* Moves the k best of c[0..n) (cmp_cand order) to c[0..k), in no particular order (quickselect). */
static void select_best(Cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const Cand pv = c[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (cmp_cand(&c[i], &pv) < 0) i++;
            while (cmp_cand(&c[j], &pv) > 0) j--;
            if (i <= j) {
                const Cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

/* c[0..have) holds the `have` best of c[0..n), sorted; extends that to the `want` best (at least twice
 * as many, to keep the number of rounds logarithmic). Returns the new count. */
static int grow_sorted(Cand *c, int n, int have, int want) {
    if (want < 2 * have) want = 2 * have;
    if (want > n) want = n;
    if (want <= have) return have;
    select_best(c + have, n - have, want - have);
    qsort(c + have, (size_t)(want - have), sizeof *c, cmp_cand);
    return want;
}

/* Top-p and min-p walk the candidates best first (logit, then lower id), as if all were sorted; only the
 * prefix they need is sorted. When nothing is cut (no top-k, top-p 1, min-p 0: OpenAI's defaults) the
 * draw walks the vocabulary in id order and nothing is sorted. Sorting all 248,320 candidates per token
 * cost ~20 ms and made the server's default sampling 3-4x slower than decoding a 0.8B model. */
int32_t dl_sampler_sample(DlSampler *s, const float *logits) {
    const DlSamplingParams *p = &s->p;
    const int V = s->n_vocab;
    if (s->llama) return sampler_llama_sample(s, logits);
    memcpy(s->work, logits, sizeof(float) * (size_t)V);
    apply_penalties(s);
    if (p->temperature <= 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < V; i++)
            if (s->work[i] > s->work[best]) best = i;
        return best;
    }
    if ((p->top_k <= 0 || p->top_k >= V) && p->top_p >= 1.0f && p->min_p <= 0.0f) { /* nothing cut */
        float mx = s->work[0];
        for (int32_t i = 1; i < V; i++) mx = s->work[i] > mx ? s->work[i] : mx;
        float *w = (float *)(void *)s->cand; /* [V] weights (the candidates are not needed here) */
        double sum = 0, acc = 0;
        for (int32_t i = 0; i < V; i++) {
            const double e = exp(((double)s->work[i] - mx) / p->temperature);
            sum += e;
            w[i] = (float)e;
        }
        const double r = sampler_uniform(s) * sum;
        for (int32_t i = 0; i < V; i++) {
            acc += w[i];
            if (r < acc) return i;
        }
        return V - 1;
    }
    Cand *c = s->cand;
    for (int32_t i = 0; i < V; i++) c[i] = (Cand){i, s->work[i], 0};
    int n = p->top_k > 0 && p->top_k < V ? p->top_k : V, have;
    if (n <= 256) {
        n = have = select_top(c, V, n);
    } else {
        if (n < V) select_best(c, V, n);
        have = grow_sorted(c, n, 0, 64);
    }
    const double top = c[0].logit;
    /* probabilities at temperature 1 for top-p / min-p: the sum over all n candidates (in id order when
     * that is all of them, so it does not depend on how much was sorted) */
    double sum = 0;
    if (n == V)
        for (int32_t i = 0; i < V; i++) sum += exp((double)s->work[i] - top);
    else
        for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - top);
#define PROB(i) ((float)(exp((double)c[i].logit - top) / sum))
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            if (i == have) have = grow_sorted(c, n, have, have + 1);
            cum += PROB(i);
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        const float floor = p->min_p * PROB(0);
        int keep = 1;
        for (;;) {
            if (keep < n && keep == have) have = grow_sorted(c, n, have, have + 1);
            if (!(keep < n && PROB(keep) >= floor)) break;
            keep++;
        }
        n = keep;
    }
#undef PROB
    /* temperature, then draw */
    sum = 0;
    if (n == V)
        for (int32_t i = 0; i < V; i++) sum += exp(((double)s->work[i] - top) / p->temperature);
    else
        for (int i = 0; i < n; i++) sum += exp(((double)c[i].logit - top) / p->temperature);
    double r = sampler_uniform(s) * sum, acc = 0;
    if (n == V) { /* nothing cut: the draw walks the vocabulary in id order (the same distribution) */
        for (int32_t i = 0; i < V; i++) {
            acc += (float)exp(((double)s->work[i] - top) / p->temperature);
            if (r < acc) return i;
        }
        return V - 1;
    }
    for (int i = 0; i < n; i++) {
        if (i == have) have = grow_sorted(c, n, have, have + 1);
        acc += (float)exp(((double)c[i].logit - top) / p->temperature);
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}
