// attn_combine.comp — the second half of attention split over the keys (flash-decoding, attention.comp with
// S > 1): one workgroup per (query token, head) merges the S partials [T][H][S][2 + D] (running maximum m_s,
// sum l_s, unnormalised output o_s): M = max m_s, w_s = exp(m_s − M), out = Σ w_s·o_s / Σ w_s·l_s, then the
// sigmoid output gate when it is fused (as attention.comp's epilogue). An empty split (l_s = 0) weighs nothing.
#version 450
#include "common.glsl"

#define MAX_S 128u
layout(push_constant) uniform Push {
    uint64_t part, out_, gate;
    uint T, H, D, S;
    uint g_row, g_head;
} p;
layout(local_size_x = 128) in;
shared float w[MAX_S];
shared float inv_l;

void main() {
    const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
    const uint D = p.D, S = p.S, base = (t * p.H + h) * S * (2u + D);
    F32 P = F32(p.part), O = F32(p.out_);
    if (tid == 0u) {
        float M = -1.0 / 0.0;
        for (uint s = 0u; s < S; s++)
            if (P.v[base + s * (2u + D) + 1u] > 0.0) M = max(M, P.v[base + s * (2u + D)]);
        float L = 0.0;
        for (uint s = 0u; s < S; s++) {
            const float l = P.v[base + s * (2u + D) + 1u];
            const float ws = l > 0.0 ? exp(P.v[base + s * (2u + D)] - M) : 0.0;
            w[s] = ws;
            L += ws * l;
        }
        inv_l = 1.0 / L;
    }
    barrier();
    for (uint d = tid; d < D; d += 128u) {
        float o = 0.0;
        for (uint s = 0u; s < S; s++) o += w[s] * P.v[base + s * (2u + D) + 2u + d];
        o *= inv_l;
        if (p.gate != 0ul) o *= sigmoid_f(F32(p.gate).v[t * p.g_row + h * p.g_head + d]);
        O.v[(t * p.H + h) * D + d] = o;
    }
}
