/* ops_small.c — the scalar small ops of the catalog (ops.h): norms, activations, softmax, RoPE. They
 * follow ggml-cpu's arithmetic (float products summed in double for the norms, libm expf for sigmoid and
 * softplus, the iterative RoPE angle) so that stage dumps line up with llama.cpp's. */
#include "kernels/ops.h"

#include <math.h>

void op_rmsnorm(const float *x, const float *w, int n, float eps, float *y) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

void op_l2norm(const float *x, int n, float eps, float *y) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

float op_silu(float x) { return x / (1.0f + expf(-x)); }
float op_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
float op_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

void op_softmax(float *x, int n) {
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = fmaxf(max, x[i]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
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
        x[i] = x0 * c - x1 * s;
        x[i + half] = x0 * s + x1 * c;
        theta_p *= theta_scale;
        theta_e *= theta_scale;
    }
}
