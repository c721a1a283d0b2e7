// dn_prep.comp — a delta-net layer's inputs to the recurrence in one dispatch (backend.h dn_prep), with the
// bits of the unfused ops: the causal conv + SiLU (conv_silu.comp), the L2 norm of each q and k head
// (norm.comp's reduction, the same 128 threads and order) written to q and k, the v channels copied to v, and
// the gates (dn_gates.comp). Workgroups: [0, 2·Hk) one q or k head each (thread i owns channels i, i + 128,
// …), then the v channels 128 per group, then the gates 128 (row, head) pairs per group. q, k, v, β and g
// are addressed from q by float offsets (one buffer); the conv state keeps the last K−1 inputs.
#version 450
#include "common.glsl"

#define MAX_TAPS 16u
#define MAX_PER 4u
layout(push_constant) uniform Push {
    uint64_t x, w, state, q, dt, sa, gb;
    int k_off, v_off, beta_off, g_off, ga_off;
    uint T, C, K, key, Dk, Hv, group, ld_in;
    float eps;
} p;
layout(local_size_x = 128) in;
shared float part[128];

float conv_step(inout float win[MAX_TAPS], const float w[MAX_TAPS], float xin) {
    const uint K = p.K;
    win[K - 1u] = xin;
    float acc = 0.0;
    for (uint i = 0u; i < K; i++) acc = fma(win[i], w[i], acc);
    for (uint i = 0u; i + 1u < K; i++) win[i] = win[i + 1u];
    return silu_f(acc);
}

void load(uint c, out float win[MAX_TAPS], out float w[MAX_TAPS]) {
    const uint K = p.K;
    F32 W = F32(p.w), S = F32(p.state);
    for (uint i = 0u; i < K; i++) w[i] = W.v[c * K + i];
    for (uint i = 0u; i + 1u < K; i++) win[i] = S.v[c * (K - 1u) + i];
}

void store(uint c, const float win[MAX_TAPS]) {
    for (uint i = 0u; i + 1u < p.K; i++) F32(p.state).v[c * (p.K - 1u) + i] = win[i];
}

// the buffer at float offset off from q (offsets may be negative)
F32 at(int off) { return F32(p.q + uint64_t(int64_t(off) * 4l)); }

void main() {
    const uint tid = gl_LocalInvocationID.x, wg = gl_WorkGroupID.x;
    const uint heads = 2u * (p.key / p.Dk), val = p.C - 2u * p.key;
    const uint v_groups = (val + 127u) / 128u;
    F32 X = F32(p.x);
    if (wg < heads) { // one q (wg < Hk) or k head: conv, then the L2 norm per token
        const uint cb = wg * p.Dk;
        F32 O = at(wg < heads / 2u ? 0 : p.k_off);
        const uint ob = wg < heads / 2u ? cb : cb - p.key; // k heads start at channel key
        float win[MAX_PER][MAX_TAPS], w[MAX_PER][MAX_TAPS];
        for (uint m = 0u; m < MAX_PER; m++)
            if (tid + 128u * m < p.Dk) load(cb + tid + 128u * m, win[m], w[m]);
        for (uint t = 0u; t < p.T; t++) {
            float y[MAX_PER];
            float ss = 0.0;
            for (uint m = 0u; m < MAX_PER; m++) {
                const uint i = tid + 128u * m;
                if (i >= p.Dk) break;
                y[m] = conv_step(win[m], w[m], X.v[t * p.C + cb + i]);
                ss += y[m] * y[m];
            }
            ss = subgroupAdd(ss);
            if (subgroupElect()) part[gl_SubgroupID] = ss;
            barrier();
            float sum = 0.0;
            for (uint s = 0u; s < gl_NumSubgroups; s++) sum += part[s];
            barrier();
            const float scale = 1.0 / max(sqrt(sum), p.eps);
            for (uint m = 0u; m < MAX_PER; m++) {
                const uint i = tid + 128u * m;
                if (i >= p.Dk) break;
                O.v[t * p.key + ob + i] = y[m] * scale;
            }
        }
        for (uint m = 0u; m < MAX_PER; m++)
            if (tid + 128u * m < p.Dk) store(cb + tid + 128u * m, win[m]);
    } else if (wg < heads + v_groups) { // v channels: conv + SiLU, copied to v
        const uint i = (wg - heads) * 128u + tid;
        if (i >= val) return;
        const uint c = 2u * p.key + i;
        float win[MAX_TAPS], w[MAX_TAPS];
        load(c, win, w);
        F32 V = at(p.v_off);
        for (uint t = 0u; t < p.T; t++) V.v[t * val + i] = conv_step(win, w, X.v[t * p.C + c]);
        store(c, win);
    } else { // the gates: β = sigmoid(b), g = softplus(a + dt_bias)·ssm_a
        const uint i = (wg - heads - v_groups) * 128u + tid;
        if (i >= p.T * p.Hv) return;
        const uint t = i / p.Hv, j = i % p.Hv;
        uint off = t * p.ld_in + j;
        if (p.group != 0u) off = t * p.ld_in + (j / p.group) * 2u * p.group + j % p.group;
        const float bj = F32(p.gb).v[off], aj = F32(p.gb + uint64_t(int64_t(p.ga_off) * 4l)).v[off];
        at(p.beta_off).v[i] = sigmoid_f(bj);
        at(p.g_off).v[i] = softplus_f(aj + F32(p.dt).v[j]) * F32(p.sa).v[j];
    }
}
