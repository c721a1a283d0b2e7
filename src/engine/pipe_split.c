/* pipe_split.c — how the layers are cut over the ranks of a pipeline (pipe.h): per-layer weight bytes, the
 * balanced cut (least bytes per token on the busiest rank, rank 0's head included) or the cut a user asked
 * for (--split), the registry part each rank binds, and the model fingerprint the ranks compare. */
#include "engine/pipe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t weight_bytes(const Weight *w) { return (uint64_t)w->bytes * (uint64_t)(w->n_expert ? w->n_expert : 1); }

uint64_t pipe_layer_bytes(const Model *m, int il) {
    uint64_t n = 0;
    for (int i = 0; i < m->n_weights; i++)
        if (m->weights[i].layer == il) n += weight_bytes(&m->weights[i]);
    return n;
}

int pipe_parse_split(const char *s, int n, double *out, Err *err) {
    int k = 0;
    for (const char *p = s; *p;) {
        char *end;
        const double v = strtod(p, &end);
        if (end == p || !(v > 0) || !isfinite(v) || k == n)
            return err_set(err, "--split wants %d positive numbers separated by commas (one per rank), not '%s'", n, s);
        out[k++] = v;
        if (*end == ',') end++;
        else if (*end) return err_set(err, "--split wants numbers separated by commas, not '%s'", s);
        p = end;
    }
    if (k != n) return err_set(err, "--split has %d numbers for %d ranks", k, n);
    return 0;
}

/* The cut that minimises the busiest rank's cost (cost of rank 0: extra0 + its layers), each rank ≥ 1 layer:
 * best[r][l] is the least possible maximum for layers [0, l) on ranks 0..r. */
static void split_balanced(const uint64_t *cum, int L, int n, uint64_t extra0, int *end) {
    double *best = malloc(sizeof *best * (size_t)n * (size_t)(L + 1));
    int *from = malloc(sizeof *from * (size_t)n * (size_t)(L + 1));
    ASSERT(best && from);
#define B(r, l) best[(size_t)(r) * (size_t)(L + 1) + (size_t)(l)]
#define F(r, l) from[(size_t)(r) * (size_t)(L + 1) + (size_t)(l)]
    for (int l = 0; l <= L; l++) B(0, l) = l >= 1 ? (double)(extra0 + cum[l]) : INFINITY;
    for (int r = 1; r < n; r++)
        for (int l = 0; l <= L; l++) {
            B(r, l) = INFINITY;
            F(r, l) = -1;
            for (int k = r; k < l; k++) { /* rank r takes [k, l) */
                const double c = fmax(B(r - 1, k), (double)(cum[l] - cum[k]));
                if (c < B(r, l)) B(r, l) = c, F(r, l) = k;
            }
        }
    end[n - 1] = L;
    for (int r = n - 1; r > 0; r--) end[r - 1] = F(r, end[r]);
#undef B
#undef F
    free(best);
    free(from);
}

int pipe_split(const Model *m, int n, const double *fractions, int *l0, int *l1, Err *err) {
    const int L = m->cfg.n_layer;
    if (n < 1 || n > PIPE_MAX_RANKS) return err_set(err, "%d ranks (at most %d)", n, PIPE_MAX_RANKS);
    if (n > L) return err_set(err, "%d ranks for a model of %d layers (each rank needs at least one)", n, L);
    uint64_t *cum = calloc((size_t)L + 1, sizeof *cum);
    int *end = calloc((size_t)n, sizeof *end);
    if (!cum || !end) return free(cum), free(end), err_set(err, "out of memory");
    for (int il = 0; il < L; il++) cum[il + 1] = cum[il] + pipe_layer_bytes(m, il);
    if (!fractions) {
        split_balanced(cum, L, n, weight_bytes(m->output), end);
    } else {
        double total = 0, acc = 0;
        for (int r = 0; r < n; r++) total += fractions[r];
        int prev = 0;
        for (int r = 0; r < n - 1; r++) { /* the boundary nearest the cumulative share, leaving a layer per rank */
            acc += fractions[r] / total;
            const double target = acc * (double)cum[L];
            int b = prev + 1;
            for (int k = prev + 1; k <= L - (n - 1 - r); k++)
                if (fabs((double)cum[k] - target) < fabs((double)cum[b] - target)) b = k;
            end[r] = prev = b;
        }
        end[n - 1] = L;
    }
    for (int r = 0; r < n; r++) {
        l0[r] = r ? end[r - 1] : 0;
        l1[r] = end[r];
        ASSERT(l0[r] < l1[r]);
    }
    free(cum);
    free(end);
    return 0;
}

Weight *pipe_weights(const Model *m, int l0, int l1, bool globals, int *n, uint64_t *bytes, Err *err) {
    Weight *w = malloc(sizeof *w * (size_t)(m->n_weights > 0 ? m->n_weights : 1));
    if (!w) return err_set(err, "out of memory"), NULL;
    *n = 0;
    *bytes = 0;
    for (int i = 0; i < m->n_weights; i++) {
        const Weight *x = &m->weights[i];
        if (x->layer < 0 ? globals : x->layer >= l0 && x->layer < l1) {
            w[(*n)++] = *x;
            *bytes += weight_bytes(x);
        }
    }
    return w;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t pipe_fingerprint(const Model *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    const int32_t dims[4] = {m->cfg.n_layer, m->cfg.n_embd, m->cfg.n_vocab, m->n_weights};
    h = fnv(h, dims, sizeof dims);
    for (int i = 0; i < m->n_weights; i++) {
        const Weight *w = &m->weights[i];
        const int64_t shape[5] = {w->layer, (int64_t)w->type, w->cols, w->rows, w->n_expert};
        h = fnv(h, w->name, strlen(w->name));
        h = fnv(h, shape, sizeof shape);
    }
    return h;
}

void pipe_rss(uint64_t *rss, uint64_t *peak) {
    *rss = *peak = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return;
    char line[256];
    unsigned long long kb;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) *rss = (uint64_t)kb << 10;
        else if (sscanf(line, "VmHWM: %llu kB", &kb) == 1) *peak = (uint64_t)kb << 10;
    }
    fclose(f);
}
