// conv_silu.comp — causal depthwise conv + SiLU over T tokens of C channels with a (K−1)-sample state per
// channel (kernels/ops.h Ops.conv_silu): one thread per channel keeps its window in registers, the state is
// left holding the last K−1 inputs.
#version 450
#include "common.glsl"

#define MAX_TAPS 16u
layout(push_constant) uniform Push {
    uint64_t x, w, state, y;
    uint T, C, K;
} p;
layout(local_size_x = 64) in;

void main() {
    const uint c = gl_GlobalInvocationID.x;
    if (c >= p.C) return;
    const uint K = p.K;
    F32 X = F32(p.x), W = F32(p.w), S = F32(p.state), Y = F32(p.y);
    float win[MAX_TAPS], w[MAX_TAPS];
    for (uint i = 0u; i < K; i++) w[i] = W.v[c * K + i];
    for (uint i = 0u; i + 1u < K; i++) win[i] = S.v[c * (K - 1u) + i];
    for (uint t = 0u; t < p.T; t++) {
        win[K - 1u] = X.v[t * p.C + c];
        float acc = 0.0;
        for (uint i = 0u; i < K; i++) acc = fma(win[i], w[i], acc);
        Y.v[t * p.C + c] = silu_f(acc);
        for (uint i = 0u; i + 1u < K; i++) win[i] = win[i + 1u];
    }
    for (uint i = 0u; i + 1u < K; i++) S.v[c * (K - 1u) + i] = win[i];
}
