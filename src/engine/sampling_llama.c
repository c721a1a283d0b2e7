/* sampling_llama.c — llama.cpp's further samplers (DlSamplerExtra of include/deltallm.h): DRY, top-n-sigma,
 * locally typical, XTC, Mirostat v1 / v2, min_tokens, and the order of the chain (llama.cpp's --samplers).
 *
 * Only samplers made with one of these on come here (sampling.c's default chain is untouched). The chain runs
 * over an array of candidates (id, logit, p): each stage drops candidates or changes logits; the candidates
 * are sorted (logit, then lower id) only by the stages that need an order. Everything is allocated when the
 * sampler is made; sampling allocates nothing.
 *
 * Definitions (as llama.cpp's src/llama-sampling.cpp has them, written here from the papers and its docs):
 *   DRY: for a candidate t, L = the longest n such that the last n tokens of the history also occur just
 *     before an earlier t (a repeat of that sequence would continue with t); matches do not cross a sequence
 *     breaker. L ≥ allowed_length: logit −= multiplier · base^(L − allowed_length).
 *   top-n-sigma: keep the logits ≥ max − n·σ (σ: the standard deviation of the candidates' logits).
 *   typical: H = −Σ p log p; keep, by |−log p − H| ascending, the fewest tokens holding typical_p of the mass.
 *   XTC: with chance xtc_probability, when two or more tokens have p ≥ threshold, remove all of them but the
 *     least likely.
 *   Mirostat v2: keep the tokens of surprise −log2 p ≤ mu, draw, then mu −= eta·(surprise − tau) where the
 *     surprise is the drawn token's on the kept set. v1 sets a top-k from mu and the Zipf exponent s estimated
 *     on the 100 best tokens: k = (ε·2^mu / (1 − V^−ε))^(1/s), ε = s − 1.
 *   The mu update is made when the drawn token is accepted (dl_sampler_accept): a draw the caller rejects
 *   (the server's constraints draw again) does not move it. */
#include "engine/engine_internal.h"
#include "engine/sampling_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_PENALTIES, ST_DRY, ST_TOP_N_SIGMA, ST_TOP_K, ST_TYPICAL, ST_TOP_P, ST_MIN_P, ST_XTC, ST_TEMP, ST_N };
enum { ORDER_MAX = 32, DRY_WINDOW_DEFAULT = 4096 };

struct SamplerLlama {
    DlSamplerExtra x;
    int order[ORDER_MAX], n_order;
    /* history of accepted tokens for DRY, a ring of dry_window */
    int32_t *hist;
    int hist_cap, hist_n, hist_pos;
    int32_t *lin;     /* [hist_cap] the history in order, breakers replaced by unique negative values */
    int32_t *z;       /* [hist_cap] Z-array scratch */
    int32_t *dry_len; /* [n_vocab] longest repeat each token would continue (kept zero between calls) */
    int32_t *touched; /* [hist_cap] ids set in dry_len */
    uint8_t *breaker; /* [n_vocab] 1: a sequence breaker (NULL: none known) */
    uint8_t *eog;     /* [n_vocab] end-of-generation tokens (NULL: none known) */
    float mu;
    int32_t pending;  /* the last drawn token, whose mu update waits for its acceptance (-1: none) */
    float pending_mu;
    int n_accepted;   /* drawn tokens accepted since the reset (min_tokens) */
};

static const struct {
    const char *name;
    char letter;
    int stage;
} names[] = {
    {"penalties", 'e', ST_PENALTIES}, {"dry", 'd', ST_DRY},         {"top_n_sigma", 's', ST_TOP_N_SIGMA},
    {"top_k", 'k', ST_TOP_K},         {"typ_p", 'y', ST_TYPICAL},   {"typical_p", 0, ST_TYPICAL},
    {"typical", 0, ST_TYPICAL},       {"top_p", 'p', ST_TOP_P},     {"nucleus", 0, ST_TOP_P},
    {"min_p", 'm', ST_MIN_P},         {"xtc", 'x', ST_XTC},         {"temperature", 't', ST_TEMP},
    {"temp", 0, ST_TEMP},
};

static int stage_of(const char *s, size_t n) {
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i].name) == n && !strncmp(names[i].name, s, n)) return names[i].stage;
    return -1;
}

/* "top_k;top_p;temperature" (also ',' or ' ' between) or letters "kpt"; an empty list: the draw alone. */
static int parse_order(const char *spec, int *order, int *n_order, DlError *err) {
    *n_order = 0;
    bool letters = *spec && !strpbrk(spec, ";, _") && stage_of(spec, strlen(spec)) < 0;
    for (const char *p = spec; *p;) {
        if (*p == ';' || *p == ',' || *p == ' ') {
            p++;
            continue;
        }
        int st = -1;
        size_t n = letters ? 1 : strcspn(p, ";, ");
        if (letters) {
            for (size_t i = 0; i < sizeof names / sizeof *names && st < 0; i++)
                if (names[i].letter == *p) st = names[i].stage;
        } else {
            st = stage_of(p, n);
        }
        if (st < 0) {
            snprintf(err->msg, sizeof err->msg,
                     "unknown sampler '%.*s' (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature, "
                     "or their letters e d s k y p m x t)",
                     (int)(n > 40 ? 40 : n), p);
            return -1;
        }
        if (*n_order == ORDER_MAX) {
            snprintf(err->msg, sizeof err->msg, "at most %d samplers in the order", ORDER_MAX);
            return -1;
        }
        order[(*n_order)++] = st;
        p += n;
    }
    return 0;
}

static bool wants_chain(const DlSamplerExtra *x) {
    return x->typical_p < 1.0f || x->mirostat || x->dry_multiplier > 0.0f || x->xtc_probability > 0.0f ||
           x->top_n_sigma > 0.0f || x->min_tokens > 0 || x->samplers || x->dynatemp_range > 0.0f;
}

SamplerLlama *sampler_llama_new(const DlEngine *e, const DlSamplerExtra *x, const DlSamplingParams *p, DlError *err) {
    (void)p;
    err->msg[0] = 0;
#define BAD(...) (snprintf(err->msg, sizeof err->msg, __VA_ARGS__), (SamplerLlama *)NULL)
    if (!(x->typical_p > 0.0f && x->typical_p < 1e6f)) return BAD("typical_p must be in (0, 1] (1: off), got %g", x->typical_p);
    if (x->mirostat < 0 || x->mirostat > 2) return BAD("mirostat must be 0, 1 or 2, got %d", x->mirostat);
    if (!(x->mirostat_tau >= 0.0f && x->mirostat_tau < 1e4f)) return BAD("mirostat_tau must be ≥ 0, got %g", x->mirostat_tau);
    if (!(x->mirostat_eta >= 0.0f && x->mirostat_eta <= 1e3f)) return BAD("mirostat_eta must be ≥ 0, got %g", x->mirostat_eta);
    if (!(x->dry_multiplier >= 0.0f && x->dry_multiplier < 1e6f))
        return BAD("dry_multiplier must be ≥ 0, got %g", x->dry_multiplier);
    if (!(x->dry_base >= 1.0f && x->dry_base < 1e3f)) return BAD("dry_base must be ≥ 1, got %g", x->dry_base);
    if (x->dry_allowed_length < 0) return BAD("dry_allowed_length must be ≥ 0, got %d", x->dry_allowed_length);
    if (x->dry_penalty_last_n < -1 || x->dry_penalty_last_n > (1 << 20))
        return BAD("dry_penalty_last_n must be -1 or in [0, 1048576], got %d", x->dry_penalty_last_n);
    if (!(x->dynatemp_range >= 0.0f && x->dynatemp_range < 1e4f))
        return BAD("dynatemp_range must be ≥ 0, got %g", x->dynatemp_range);
    if (!(x->dynatemp_exponent >= 0.0f && x->dynatemp_exponent < 1e4f))
        return BAD("dynatemp_exponent must be ≥ 0, got %g", x->dynatemp_exponent);
    if (!(x->xtc_probability >= 0.0f && x->xtc_probability <= 1.0f))
        return BAD("xtc_probability must be in [0, 1], got %g", x->xtc_probability);
    if (!(x->xtc_threshold >= 0.0f && x->xtc_threshold <= 1.0f))
        return BAD("xtc_threshold must be in [0, 1], got %g", x->xtc_threshold);
    if (!(x->top_n_sigma < 1e6f)) return BAD("top_n_sigma must be a number, got %g", x->top_n_sigma);
    if (x->min_tokens < 0) return BAD("min_tokens must be ≥ 0, got %d", x->min_tokens);
    if (x->n_dry_breakers < 0 || (x->n_dry_breakers && !x->dry_breakers)) return BAD("bad dry_breakers");
    if (!wants_chain(x)) return NULL;
    SamplerLlama *l = calloc(1, sizeof *l);
    if (!l) return BAD("out of memory for the sampler");
    l->x = *x;
    l->x.dry_breakers = NULL; /* not kept: the caller's strings are read here only */
    static const int dflt[] = {ST_PENALTIES, ST_DRY, ST_TOP_N_SIGMA, ST_TOP_K, ST_TYPICAL, ST_TOP_P, ST_MIN_P, ST_XTC, ST_TEMP};
    if (x->samplers) {
        if (parse_order(x->samplers, l->order, &l->n_order, err)) {
            free(l);
            return NULL;
        }
    } else {
        memcpy(l->order, dflt, sizeof dflt);
        l->n_order = (int)(sizeof dflt / sizeof *dflt);
    }
    const int V = e->info.n_vocab;
    const int win = x->dry_multiplier > 0.0f ? (x->dry_penalty_last_n < 0 ? DRY_WINDOW_DEFAULT : x->dry_penalty_last_n) : 0;
    l->hist_cap = win;
    bool ok = true;
    if (win > 0) {
        l->hist = malloc(sizeof *l->hist * (size_t)win);
        l->lin = malloc(sizeof *l->lin * (size_t)win);
        l->z = malloc(sizeof *l->z * (size_t)win);
        l->touched = malloc(sizeof *l->touched * (size_t)win);
        l->dry_len = calloc((size_t)V, sizeof *l->dry_len);
        ok = l->hist && l->lin && l->z && l->touched && l->dry_len;
        /* breakers: tokens whose text holds a breaker string (llama.cpp also matches breakers spread over
         * several tokens; a token-level test is what a model's tokenizer mostly gives for "\n", ":", ...) */
        static const char *const dflt_br[] = {"\n", ":", "\"", "*"};
        const char *const *br = x->dry_breakers ? x->dry_breakers : dflt_br;
        const int nb = x->dry_breakers ? x->n_dry_breakers : 4;
        if (ok && e->tok && nb > 0) {
            ok = (l->breaker = calloc((size_t)V, 1)) != NULL;
            for (int32_t t = 0; ok && t < V; t++) {
                size_t n;
                const char *piece = dl_token_piece(e, t, &n);
                for (int b = 0; piece && b < nb && !l->breaker[t]; b++) {
                    const size_t bl = strlen(br[b]);
                    for (size_t i = 0; bl && i + bl <= n; i++)
                        if (!memcmp(piece + i, br[b], bl)) {
                            l->breaker[t] = 1;
                            break;
                        }
                }
            }
        }
    }
    if (ok && x->min_tokens > 0 && e->tok) {
        ok = (l->eog = calloc((size_t)V, 1)) != NULL;
        for (int32_t t = 0; ok && t < V; t++) l->eog[t] = dl_token_is_eog(e, t);
    }
    if (!ok) {
        sampler_llama_free(l);
        return BAD("out of memory for the sampler");
    }
#undef BAD
    return l;
}

void sampler_llama_free(SamplerLlama *l) {
    if (!l) return;
    free(l->hist);
    free(l->lin);
    free(l->z);
    free(l->touched);
    free(l->dry_len);
    free(l->breaker);
    free(l->eog);
    free(l);
}

void sampler_llama_reset(DlSampler *s) {
    SamplerLlama *l = s->llama;
    l->hist_n = l->hist_pos = 0;
    l->mu = 2.0f * l->x.mirostat_tau;
    l->pending = -1;
    l->n_accepted = 0;
}

void sampler_llama_accept(DlSampler *s, int32_t token) {
    SamplerLlama *l = s->llama;
    if (l->pending >= 0 && token == l->pending) {
        l->mu = l->pending_mu;
        l->n_accepted++;
    }
    l->pending = -1;
    if (l->hist_cap > 0) {
        l->hist[l->hist_pos] = token;
        l->hist_pos = (l->hist_pos + 1) % l->hist_cap;
        if (l->hist_n < l->hist_cap) l->hist_n++;
    }
}

/* Test hooks (tests/test_sampling_llama.c): mu, and marking breaker / end-of-generation tokens on a sampler
 * made without a tokenizer. */
float sampler_llama_mu(const DlSampler *s) { return s->llama ? s->llama->mu : NAN; }
int sampler_llama_mark(DlSampler *s, int32_t id, bool breaker, bool eog) {
    SamplerLlama *l = s->llama;
    if (!l || id < 0 || id >= s->n_vocab) return -1;
    if (breaker && !l->breaker && !(l->breaker = calloc((size_t)s->n_vocab, 1))) return -1;
    if (eog && !l->eog && !(l->eog = calloc((size_t)s->n_vocab, 1))) return -1;
    if (breaker) l->breaker[id] = 1;
    if (eog) l->eog[id] = 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------ helpers */

static int cmp_cand(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

typedef struct Chain {
    Cand *c;
    int n;
    bool sorted;
} Chain;

/* Moves the k best candidates (cmp_cand order) to the front, sorted; the rest follow in no order. Sorting all
 * 248,320 candidates of a Qwen3.5 vocabulary per token is what the default chain avoids (sampling.c). */
static void best_k(Chain *ch, int k) {
    Cand *c = ch->c;
    if (k >= ch->n) {
        qsort(c, (size_t)ch->n, sizeof *c, cmp_cand);
        ch->sorted = true;
        return;
    }
    int lo = 0, hi = ch->n - 1;
    while (lo < hi) { /* quickselect: c[0..k) the best k */
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
    qsort(c, (size_t)k, sizeof *c, cmp_cand);
}

static void sort_chain(Chain *ch) {
    if (!ch->sorted) qsort(ch->c, (size_t)ch->n, sizeof *ch->c, cmp_cand);
    ch->sorted = true;
}

/* p = softmax of the candidates' logits; returns the largest logit. */
static float softmax(Chain *ch) {
    float mx = -INFINITY;
    for (int i = 0; i < ch->n; i++) mx = ch->c[i].logit > mx ? ch->c[i].logit : mx;
    double sum = 0;
    for (int i = 0; i < ch->n; i++) sum += exp((double)ch->c[i].logit - mx);
    for (int i = 0; i < ch->n; i++) ch->c[i].p = (float)(exp((double)ch->c[i].logit - mx) / sum);
    return mx;
}

/* Draws one candidate by p (softmax first); returns its index. */
static int draw(DlSampler *s, Chain *ch) {
    softmax(ch);
    double r = sampler_uniform(s), acc = 0;
    for (int i = 0; i < ch->n; i++) {
        acc += ch->c[i].p;
        if (r < acc) return i;
    }
    return ch->n - 1;
}

/* ------------------------------------------------------------------------------------------ stages */

static void st_penalties(DlSampler *s, Chain *ch) {
    const DlSamplingParams *p = &s->p;
    if (s->hist_n == 0 || (p->repeat_penalty == 1.0f && p->frequency_penalty == 0.0f && p->presence_penalty == 0.0f))
        return;
    for (int i = 0; i < s->hist_n; i++) {
        const int32_t t = s->history[i];
        if (t >= 0 && t < s->n_vocab) s->count[t]++;
    }
    for (int i = 0; i < ch->n; i++) { /* sampling.c's formula, on the candidates left */
        const int32_t c = s->count[ch->c[i].id];
        if (!c) continue;
        float *lg = &ch->c[i].logit;
        if (p->repeat_penalty != 1.0f) *lg = *lg > 0 ? *lg / p->repeat_penalty : *lg * p->repeat_penalty;
        *lg -= (float)c * p->frequency_penalty + p->presence_penalty;
    }
    for (int i = 0; i < s->hist_n; i++) {
        const int32_t t = s->history[i];
        if (t >= 0 && t < s->n_vocab) s->count[t] = 0;
    }
    ch->sorted = false;
}

/* Z-algorithm over the reversed history r (r[0] = the last token): z[j] = the length of the common prefix of r
 * and r[j..], i.e. how far the sequence ending at position n−1−j matches the one ending now. A breaker is a
 * unique negative value, so no match crosses one. */
static void st_dry(DlSampler *s, Chain *ch) {
    SamplerLlama *l = s->llama;
    const DlSamplerExtra *x = &l->x;
    const int n = l->hist_n;
    if (x->dry_multiplier <= 0.0f || n < 2) return;
    int32_t *r = l->lin, *z = l->z;
    for (int j = 0; j < n; j++) { /* r[j] = the token j places before the last */
        int at = (l->hist_pos - 1 - j) % l->hist_cap;
        if (at < 0) at += l->hist_cap;
        const int32_t t = l->hist[at];
        r[j] = (l->breaker && t >= 0 && t < s->n_vocab && l->breaker[t]) ? -1 - j : t;
    }
    if (r[0] < 0) return; /* the last token is a breaker: nothing is being repeated */
    z[0] = n;
    for (int j = 1, lo = 0, hi = 0; j < n; j++) {
        int k = 0;
        if (j < hi) k = z[j - lo] < hi - j ? z[j - lo] : hi - j;
        while (j + k < n && r[k] == r[j + k]) k++;
        z[j] = k;
        if (j + k > hi) lo = j, hi = j + k;
    }
    int n_touched = 0;
    for (int j = 1; j < n; j++) { /* the sequence ending at n−1−j was followed by r[j−1] */
        const int32_t follow = r[j - 1];
        if (z[j] <= 0 || follow < 0 || follow >= s->n_vocab) continue;
        if (!l->dry_len[follow]) l->touched[n_touched++] = follow;
        if (z[j] > l->dry_len[follow]) l->dry_len[follow] = z[j];
    }
    /* base^(L − allowed) overflows a float near L − allowed = log(FLT_MAX / multiplier) / log(base) */
    const double max_exp = x->dry_base > 1.000001f ? log(3.0e38 / x->dry_multiplier) / log((double)x->dry_base) : 1e9;
    for (int i = 0; i < ch->n; i++) {
        const int L = l->dry_len[ch->c[i].id];
        if (L < x->dry_allowed_length || L == 0) continue;
        double ex = (double)(L - x->dry_allowed_length);
        if (ex > max_exp) ex = max_exp;
        ch->c[i].logit -= (float)(x->dry_multiplier * pow((double)x->dry_base, ex));
        ch->sorted = false;
    }
    for (int i = 0; i < n_touched; i++) l->dry_len[l->touched[i]] = 0;
}

static void st_top_n_sigma(DlSampler *s, Chain *ch) {
    const float nsig = s->llama->x.top_n_sigma;
    if (nsig <= 0.0f || ch->n <= 1) return;
    double mx = -INFINITY, sum = 0, sq = 0;
    int m = 0;
    for (int i = 0; i < ch->n; i++) {
        const double v = ch->c[i].logit;
        if (!isfinite(v)) continue;
        mx = v > mx ? v : mx;
        sum += v;
        m++;
    }
    if (!m) return;
    const double mean = sum / m;
    for (int i = 0; i < ch->n; i++)
        if (isfinite(ch->c[i].logit)) sq += ((double)ch->c[i].logit - mean) * ((double)ch->c[i].logit - mean);
    const double cut = mx - nsig * sqrt(sq / m);
    int k = 0;
    for (int i = 0; i < ch->n; i++)
        if ((double)ch->c[i].logit >= cut) ch->c[k++] = ch->c[i];
    ch->n = k; /* order kept */
}

static void st_top_k(DlSampler *s, Chain *ch) {
    const int k = s->p.top_k;
    if (k <= 0 || k >= ch->n) return;
    if (ch->sorted) {
        ch->n = k;
        return;
    }
    best_k(ch, k);
    ch->n = k;
    ch->sorted = true;
}

static int cmp_score(const void *a, const void *b) { /* Cand.p holds |−log p − H| here */
    const Cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void st_typical(DlSampler *s, Chain *ch) {
    const float tp = s->llama->x.typical_p;
    if (tp >= 1.0f || ch->n <= 1) return;
    const float mx = softmax(ch);
    double H = 0, sum = 0;
    for (int i = 0; i < ch->n; i++) {
        if (ch->c[i].p > 0) H -= (double)ch->c[i].p * log((double)ch->c[i].p);
        sum += exp((double)ch->c[i].logit - mx);
    }
    for (int i = 0; i < ch->n; i++) { /* p now holds the score; the probability is recomputed from the logit */
        const double p = ch->c[i].p;
        ch->c[i].p = p > 0 ? (float)fabs(-log(p) - H) : INFINITY;
    }
    qsort(ch->c, (size_t)ch->n, sizeof *ch->c, cmp_score);
    double cum = 0;
    for (int i = 0; i < ch->n; i++) {
        cum += exp((double)ch->c[i].logit - mx) / sum;
        if (cum >= tp) {
            ch->n = i + 1;
            break;
        }
    }
    ch->sorted = false;
}

static void st_top_p(DlSampler *s, Chain *ch) {
    const float tp = s->p.top_p;
    if (tp >= 1.0f) return;
    sort_chain(ch);
    softmax(ch);
    double cum = 0;
    for (int i = 0; i < ch->n; i++) {
        cum += ch->c[i].p;
        if (cum >= tp) {
            ch->n = i + 1;
            return;
        }
    }
}

static void st_min_p(DlSampler *s, Chain *ch) {
    const float mp = s->p.min_p;
    if (mp <= 0.0f || ch->n <= 1) return;
    const float mx = softmax(ch);
    const double floor = log((double)mp) + mx; /* p ≥ min_p · p_max ⇔ logit ≥ max + log(min_p) */
    int k = 0;
    for (int i = 0; i < ch->n; i++)
        if ((double)ch->c[i].logit >= floor) ch->c[k++] = ch->c[i];
    ch->n = k ? k : 1;
}

static void st_xtc(DlSampler *s, Chain *ch) {
    const DlSamplerExtra *x = &s->llama->x;
    if (x->xtc_probability <= 0.0f || x->xtc_threshold > 0.5f || ch->n < 2) return;
    if (sampler_uniform(s) > x->xtc_probability) return;
    sort_chain(ch);
    softmax(ch);
    int last = -1; /* the least likely token at or above the threshold */
    for (int i = 0; i < ch->n && ch->c[i].p >= x->xtc_threshold; i++) last = i;
    if (last < 1) return;
    memmove(ch->c, ch->c + last, sizeof *ch->c * (size_t)(ch->n - last));
    ch->n -= last;
}

/* Dynamic temperature (llama.cpp's dynatemp_range / dynatemp_exponent): the candidates' entropy H over its
 * maximum log n sets the temperature between max(0, t − range) and t + range, as (H / log n)^exponent; a flat
 * distribution gets the hottest, a peaked one the coldest. */
static float dynamic_temperature(DlSampler *s, Chain *ch, float t) {
    const DlSamplerExtra *x = &s->llama->x;
    if (!(x->dynatemp_range > 0.0f) || ch->n <= 1) return t;
    softmax(ch);
    double h = 0;
    for (int i = 0; i < ch->n; i++)
        if (ch->c[i].p > 0.0f) h -= (double)ch->c[i].p * log((double)ch->c[i].p);
    const double lo = t - x->dynatemp_range > 0.0f ? (double)(t - x->dynatemp_range) : 0.0, hi = (double)t + x->dynatemp_range;
    return (float)(lo + (hi - lo) * pow(h / log((double)ch->n), (double)x->dynatemp_exponent));
}

static void st_temp(DlSampler *s, Chain *ch) {
    float t = s->p.temperature;
    if (t > 0.0f) t = dynamic_temperature(s, ch, t);
    if (t <= 0.0f) { /* greedy: the best candidate alone */
        int b = 0;
        for (int i = 1; i < ch->n; i++)
            if (cmp_cand(&ch->c[i], &ch->c[b]) < 0) b = i;
        ch->c[0] = ch->c[b];
        ch->n = 1;
        return;
    }
    for (int i = 0; i < ch->n; i++) ch->c[i].logit /= t;
}

static int32_t mirostat(DlSampler *s, Chain *ch) {
    SamplerLlama *l = s->llama;
    const DlSamplerExtra *x = &l->x;
    st_temp(s, ch);
    if (x->mirostat == 1) {
        enum { M = 100 };
        best_k(ch, M); /* the estimate reads the 100 best; the cut then keeps the k best */
        const float mx = ch->c[0].logit;
        double z = 0;
        for (int i = 0; i < ch->n; i++) z += exp((double)ch->c[i].logit - mx);
        for (int i = 0; i < M && i < ch->n; i++) ch->c[i].p = (float)(exp((double)ch->c[i].logit - mx) / z);
        double sum_tb = 0, sum_tt = 0;
        for (int i = 0; i < M - 1 && i < ch->n - 1; i++) {
            const double t = log((double)(i + 2) / (double)(i + 1));
            const double b = log((double)ch->c[i].p / (double)ch->c[i + 1].p);
            sum_tb += t * b;
            sum_tt += t * t;
        }
        const double sh = sum_tt > 0 ? sum_tb / sum_tt : 1.0, eps = sh - 1;
        double k = pow((eps * pow(2.0, (double)l->mu)) / (1 - pow((double)s->n_vocab, -eps)), 1 / sh);
        if (!(k >= 1)) k = 1; /* also NaN (a flat head) */
        if (k < ch->n) {
            if ((int)k > M) best_k(ch, (int)k);
            ch->n = (int)k;
        }
    } else { /* surprise −log2 p ≤ mu ⇔ p ≥ 2^−mu: a cut on the logits, no order needed */
        const float mx = softmax(ch);
        double z = 0;
        for (int i = 0; i < ch->n; i++) z += exp((double)ch->c[i].logit - mx);
        const double floor = mx + log(z) - (double)l->mu * log(2.0); /* logit of p = 2^−mu */
        int k = 0, best = 0;
        for (int i = 0; i < ch->n; i++) {
            if (cmp_cand(&ch->c[i], &ch->c[best]) < 0) best = i;
            if ((double)ch->c[i].logit >= floor && -log2((double)ch->c[i].p) <= (double)l->mu) ch->c[k++] = ch->c[i];
        }
        if (!k) ch->c[k++] = ch->c[best]; /* none: the most likely alone */
        ch->n = k;
    }
    const int i = draw(s, ch);
    const double surprise = -log2((double)ch->c[i].p);
    l->pending = ch->c[i].id;
    l->pending_mu = (float)((double)l->mu - (double)x->mirostat_eta * (surprise - (double)x->mirostat_tau));
    return ch->c[i].id;
}

int32_t sampler_llama_sample(DlSampler *s, const float *logits) {
    SamplerLlama *l = s->llama;
    Chain ch = {s->cand, 0, false};
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (l->eog && l->n_accepted < l->x.min_tokens && l->eog[i]) continue;
        ch.c[ch.n++] = (Cand){i, logits[i], 0};
    }
    if (!ch.n) ch.c[ch.n++] = (Cand){0, logits[0], 0}; /* only end-of-generation tokens: cannot happen on a model */
    l->pending = -1;
    if (l->x.mirostat) return mirostat(s, &ch);
    for (int k = 0; k < l->n_order && ch.n > 1; k++) {
        switch (l->order[k]) {
        case ST_PENALTIES: st_penalties(s, &ch); break;
        case ST_DRY: st_dry(s, &ch); break;
        case ST_TOP_N_SIGMA: st_top_n_sigma(s, &ch); break;
        case ST_TOP_K: st_top_k(s, &ch); break;
        case ST_TYPICAL: st_typical(s, &ch); break;
        case ST_TOP_P: st_top_p(s, &ch); break;
        case ST_MIN_P: st_min_p(s, &ch); break;
        case ST_XTC: st_xtc(s, &ch); break;
        case ST_TEMP: st_temp(s, &ch); break;
        }
    }
    const int32_t id = ch.c[draw(s, &ch)].id;
    l->pending = id; /* min_tokens counts it once accepted */
    l->pending_mu = l->mu;
    return id;
}
