/* logit_compare.c — see logit_compare.h. Statistics are accumulated in double. */
#include "cli/logit_compare.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static double ref_std(const float *x, int64_t n) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    const double mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) s2 += (x[i] - mean) * (x[i] - mean);
    const double sd = sqrt(s2 / (double)n);
    return sd > 0 ? sd : 1.0;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double log_sum_exp(const float *x, int n) {
    double m = x[0];
    for (int i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0;
    for (int i = 0; i < n; i++) s += exp(x[i] - m);
    return m + log(s);
}

LogitMetrics logits_compare(const float *ref, const float *test, int rows, int cols, double tie_eps) {
    LogitMetrics r = {0};
    r.rows = rows;
    r.cols = cols;
    const int64_t n = (int64_t)rows * cols;
    r.ref_std = ref_std(ref, n);
    double sum_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(test[i]) || !isfinite(ref[i])) r.nonfinite++;
        const double d = fabs((double)test[i] - (double)ref[i]);
        sum_abs += d;
        if (d > r.max_abs) r.max_abs = d;
    }
    r.max_rel = r.max_abs / r.ref_std;
    r.mean_abs = sum_abs / (double)n;
    int agree = 0, decisive = 0, agree_dec = 0;
    double kl_sum = 0;
    for (int t = 0; t < rows; t++) {
        const float *a = ref + (int64_t)t * cols, *b = test + (int64_t)t * cols;
        const int ia = argmax(a, cols), ib = argmax(b, cols);
        const bool ok = ia == ib;
        agree += ok;
        const bool dec = ok || ((double)a[ia] - (double)a[ib] > tie_eps * r.ref_std);
        decisive += dec;
        agree_dec += ok && dec;
        const double la = log_sum_exp(a, cols), lb = log_sum_exp(b, cols);
        double kl = 0;
        for (int i = 0; i < cols; i++) {
            const double pa = a[i] - la, pb = b[i] - lb;
            kl += exp(pa) * (pa - pb);
        }
        kl_sum += kl;
        if (kl > r.kl_max) r.kl_max = kl;
    }
    r.top1 = rows ? (double)agree / rows : 1.0;
    r.near_ties = rows - decisive;
    r.top1_decisive = decisive ? (double)agree_dec / decisive : 1.0;
    r.kl_mean = rows ? kl_sum / rows : 0.0;
    return r;
}

void tensor_compare(const float *ref, const float *test, int64_t n, double *max_abs, double *max_rel) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)test[i] - (double)ref[i]);
        if (d > m || d != d) m = d != d ? INFINITY : d;
    }
    *max_abs = m;
    *max_rel = m / ref_std(ref, n);
}

int64_t read_f32_file(const char *path, float **data) {
    *data = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (sz <= 0 || sz % 4) {
        fclose(f);
        return 0;
    }
    float *p = malloc((size_t)sz);
    if (!p || fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        free(p);
        fclose(f);
        return 0;
    }
    fclose(f);
    *data = p;
    return sz / 4;
}
