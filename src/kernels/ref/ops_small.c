/* ops_small.c — the scalar small ops of the catalog (ops.h): norms, activations, softmax, RoPE. They
 * follow ggml-cpu's arithmetic (float products summed in double for the norms, libm expf for sigmoid and
 * softplus, the iterative RoPE angle) so that stage dumps line up with llama.cpp's. */
#include "kernels/ops.h"

#include "base/fdot.h"

#include <math.h>

float op_norm_scale(double sumsq, int n, float eps, bool l2) {
    if (l2) return 1.0f / fmaxf(sqrtf((float)sumsq), eps);
    const float mean = (float)(sumsq / n);
    return 1.0f / sqrtf(mean + eps);
}

void op_rmsnorm(const float *x, const float *w, int n, float eps, float *y) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = op_norm_scale(sum, n, eps, false);
    if (w)
        for (int i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void op_l2norm(const float *x, int n, float eps, float *y) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = op_norm_scale(sum, n, eps, true);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void norm_rows_ref(const NormRows *a) {
    for (int k = 0; k < a->m; k++) {
        if (a->l2) op_l2norm(a->x[k], a->n, a->eps, a->y[k]);
        else op_rmsnorm(a->x[k], a->w, a->n, a->eps, a->y[k]);
        if (a->z_on)
            for (int i = 0; i < a->n; i++) a->y[k][i] *= a->z[k][i];
    }
}

void mul_sigmoid_ref(float *o, const float *g, int n) {
    for (int i = 0; i < n; i++) o[i] *= op_sigmoid(g[i]);
}

float op_silu(float x) { return x / (1.0f + expf(-x)); }

/* ggml's vector exp: n = round(x·log2 e), b = x − n·ln2 (two-part constant, fused), a degree-5 polynomial in
 * b, scaled by 2^n; |n| > 192 saturates to 0 or +inf. Every step is one IEEE operation (fmaf where ggml
 * fuses), so the bits match the SIMD lanes. */
float op_expf_poly(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

#define SIMD_W 16 /* float lanes of ggml's AVX-512 loops */

void op_silu_row(const float *x, float *y, int n) {
    int i = 0;
    for (; i + SIMD_W - 1 < n; i += SIMD_W)
        for (int k = i; k < i + SIMD_W; k++) y[k] = x[k] / (1.0f + op_expf_poly(0.0f - x[k]));
    for (; i < n; i++) y[i] = op_silu(x[i]);
}


void op_swiglu_row(const float *g, const float *u, float *y, int n) {
    int i = 0;
    for (; i + SIMD_W - 1 < n; i += SIMD_W)
        for (int k = i; k < i + SIMD_W; k++) y[k] = (g[k] / (1.0f + op_expf_poly(0.0f - g[k]))) * u[k];
    for (; i < n; i++) y[i] = op_silu(g[i]) * u[i];
}
float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float op_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

void op_softmax(float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = fmaxf(max, x[i]);
    double sum = 0.0;
    int i = 0;
    for (; i + SIMD_W - 1 < n; i += SIMD_W) {
        for (int k = i; k < i + SIMD_W; k++) x[k] = op_expf_poly(x[k] - max);
        sum += (double)fdot_reduce16(x + i);
    }
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int k = 0; k < n; k++) x[k] *= inv;
}

void op_rope(float *x, int n_rot, int pos, float base, float freq_scale, const int *sections) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    int sect_dims = 0;
    if (sections) sect_dims = sections[0] + sections[1] + sections[2] + sections[3];
    /* IMROPE keeps one running angle per section (t, h, w, e); for text t = h = w = pos and e = 0 */
    float theta_p = (float)pos, theta_e = 0.0f;
    for (int i = 0; i < half; i++) {
        float theta = theta_p;
        if (sections && sect_dims > 0) {
            const int s = i % sect_dims;
            const bool is_h = s % 3 == 1 && s < 3 * sections[1];
            const bool is_w = s % 3 == 2 && s < 3 * sections[2];
            const bool is_t = s % 3 == 0 && s < 3 * sections[0];
            theta = (is_t || is_h || is_w) ? theta_p : theta_e;
        }
        theta *= freq_scale;
        const float c = cosf(theta), s = sinf(theta);
        const float x0 = x[i], x1 = x[i + half];
        /* llama.cpp's build fuses the first product of each (checked against its dumps) */
        x[i] = fmaf(x0, c, -(x1 * s));
        x[i + half] = fmaf(x0, s, x1 * c);
        theta_p *= theta_scale;
        theta_e *= theta_scale;
    }
}

void op_rope_thw(float *x, int n_rot, int pt, int ph, int pw, float base, float freq_scale, const int *sections) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const int half = n_rot / 2;
    int sect_dims = 0;
    if (sections) sect_dims = sections[0] + sections[1] + sections[2] + sections[3];
    /* one running angle per axis, each advanced every pair, as ggml's IMROPE cache does */
    float th_t = (float)pt, th_h = (float)ph, th_w = (float)pw, th_e = 0.0f;
    for (int i = 0; i < half; i++) {
        float theta = th_t;
        if (sections && sect_dims > 0) {
            const int s = i % sect_dims;
            if (s % 3 == 1 && s < 3 * sections[1]) theta = th_h;
            else if (s % 3 == 2 && s < 3 * sections[2]) theta = th_w;
            else if (s % 3 == 0 && s < 3 * sections[0]) theta = th_t;
            else theta = th_e;
        }
        theta *= freq_scale;
        const float c = cosf(theta), s = sinf(theta);
        const float x0 = x[i], x1 = x[i + half];
        x[i] = fmaf(x0, c, -(x1 * s));
        x[i + half] = fmaf(x0, s, x1 * c);
        th_t *= theta_scale, th_h *= theta_scale, th_w *= theta_scale, th_e *= theta_scale;
    }
}

void silu_rows_ref(const OpCtx *c, const float *x, float *y, int rows, int n) {
    (void)c;
    for (int64_t r = 0; r < rows; r++) op_silu_row(x + r * n, y + r * n, n);
}

void matmul_swiglu_ref(const OpCtx *c, const MatW *wg, const MatW *wu, const float *x, int64_t T, float *y, float *u) {
    matmul_ref(c, wg, x, T, y);
    matmul_ref(c, wu, x, T, u);
    swiglu_rows_ref(c, y, u, y, (int)T, (int)wg->rows);
}

void swiglu_rows_ref(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n) {
    (void)c;
    for (int64_t r = 0; r < rows; r++) op_swiglu_row(g + r * n, u + r * n, y + r * n, n);
}
