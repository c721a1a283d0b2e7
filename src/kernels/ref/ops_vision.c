/* ops_vision.c — the scalar ops of the vision tower (ops.h, "vision"): LayerNorm with bias, the tanh GELU, the
 * 2-D rotary of the patches and one query row of full (non-causal) attention. They are the spec the backends'
 * vision ops are tested against (tests/test_backend_ops.c) and the arithmetic of the CPU encoder's exact mode
 * (src/vision/encoder.c): mean and variance summed in double as ggml_norm does, libm tanhf / expf, the rotary
 * angle built by repeated products as ggml's rope does. */
#include "kernels/ops.h"

#include <math.h>
#include <string.h>

void op_layernorm(const float *x, const float *w, const float *b, int n, float eps, float *y) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    const float mean = (float)(s / n);
    double s2 = 0;
    for (int i = 0; i < n; i++) {
        const float v = x[i] - mean;
        y[i] = v;
        s2 += (double)v * v;
    }
    const float scale = 1.0f / sqrtf((float)(s2 / n) + eps);
    for (int i = 0; i < n; i++) {
        float v = y[i] * scale;
        if (w) v *= w[i];
        if (b) v += b[i];
        y[i] = v;
    }
}

float op_gelu(float x) {
    const float k = 0.79788456080286535588f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

void op_rope_2d(float *x, int d, int row, int col, float theta_scale) {
    const int half = d / 2, quarter = d / 4;
    float th_r = (float)row, th_c = (float)col;
    for (int k = 0; k < half; k++) {
        float theta;
        if (k < quarter) theta = th_r, th_r *= theta_scale;
        else theta = th_c, th_c *= theta_scale;
        const float c = cosf(theta), s = sinf(theta);
        const float x0 = x[k], x1 = x[k + half];
        x[k] = x0 * c - x1 * s;
        x[k + half] = x0 * s + x1 * c;
    }
}

void op_attn_full_row(const float *q, const float *k, int64_t k_row, const float *v, int64_t v_row, int T, int d,
                      float scale, float *scores, float *out) {
    float mx = -INFINITY;
    for (int u = 0; u < T; u++) {
        const float *ku = k + (int64_t)u * k_row;
        float s = 0;
        for (int i = 0; i < d; i++) s += q[i] * ku[i];
        scores[u] = s * scale;
        if (scores[u] > mx) mx = scores[u];
    }
    double sum = 0;
    for (int u = 0; u < T; u++) sum += scores[u] = expf(scores[u] - mx);
    const float inv = (float)(1.0 / sum);
    memset(out, 0, sizeof(float) * (size_t)d);
    for (int u = 0; u < T; u++) {
        const float *vu = v + (int64_t)u * v_row;
        const float p = scores[u] * inv;
        for (int i = 0; i < d; i++) out[i] += p * vu[i];
    }
}
