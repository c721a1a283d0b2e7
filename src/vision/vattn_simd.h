/* vattn_simd.h — the vision tower's full (non-causal) attention for a block of query rows of one head, written
 * once against simd16.h / gemm_simd.h and compiled by vattn_avx512.c and vattn_avx2.c (VATTN_FN adds the
 * suffix). Scores S = Q·Kᵀ through gemm_nn (K given transposed, zero-padded to tp columns), ×scale, a
 * softmax over the T real keys (the vector exp polynomial of simd16.h, max-subtracted, per-lane float sums),
 * then O = P·V through gemm_nn and each row divided by its sum. The scalar reference is attn_heads in
 * encoder.c; tests/test_vision_fast.c checks this one against a float64 attention. */
#include "kernels/cpu/gemm_simd.h"
#include "vision/vattn.h"

void VATTN_FN(vattn_rows)(const VattnArgs *a, int q0, int m, float *s, float *o) {
    const int T = a->T, tp = a->tp, dp = a->dp, d = a->d;
    gemm_nn(m, tp, d, a->q + (int64_t)q0 * a->ldq, a->ldq, a->kt, tp, s, tp, INIT_ZERO, NULL, 0, 1.0f, -1, -1);
    const V16 vs = v16_set1(a->scale);
    for (int r = 0; r < m; r++) {
        float *row = s + (int64_t)r * tp;
        V16 vm = v16_set1(-INFINITY);
        int i = 0;
        for (; i + 16 <= T; i += 16) {
            const V16 x = v16_mul(v16_load(row + i), vs);
            v16_store(row + i, x);
            vm = v16_max(vm, x);
        }
        float mx = v16_hmax(vm);
        for (; i < T; i++) {
            row[i] *= a->scale;
            if (row[i] > mx) mx = row[i];
        }
        const V16 vmx = v16_set1(mx);
        V16 acc = v16_zero();
        for (i = 0; i + 16 <= T; i += 16) {
            const V16 e = v16_exp(v16_sub(v16_load(row + i), vmx));
            v16_store(row + i, e);
            acc = v16_add(acc, e);
        }
        float sum = v16_hsum(acc);
        for (; i < T; i++) sum += row[i] = expf(row[i] - mx);
        for (; i < tp; i++) row[i] = 0.0f;
        a->inv[q0 + r] = 1.0f / sum;
    }
    gemm_nn(m, dp, T, s, tp, a->v, dp, o, dp, INIT_ZERO, NULL, 0, 1.0f, -1, -1);
    for (int r = 0; r < m; r++) {
        const float inv = a->inv[q0 + r];
        float *dst = a->out + (int64_t)(q0 + r) * a->ldo;
        for (int j = 0; j < d; j++) dst[j] = o[(int64_t)r * dp + j] * inv;
    }
}
