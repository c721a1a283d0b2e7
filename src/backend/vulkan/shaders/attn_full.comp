// attn_full.comp — full (non-causal) attention of the vision tower's patches (kernels/ops.h op_attn_full_row):
// one workgroup per (head, query row), the T keys in blocks of 64 with an online softmax (running max and sum,
// the partial output rescaled when the max grows), one key per invocation for the scores, then each invocation
// accumulates the output dimensions i ≡ tid (mod 64) (d ≤ 256). Rows of q, k, v and out are *_row floats apart,
// heads d apart. Grid: x heads, y query rows (looping past 65535).
#version 450
#include "common.glsl"

layout(push_constant) uniform Push {
    uint64_t q, k, v, o;
    uint T, heads, d, pad;
    uint q_row, k_row, v_row, o_row;
    float scale;
} p;
layout(local_size_x = 64) in;
shared float qs[256];
shared float ps[64];
shared float red[64];

// the workgroup's max or sum of x (tree over shared memory; every invocation gets it)
float wg_reduce(float x, bool is_max) {
    const uint tid = gl_LocalInvocationID.x;
    red[tid] = x;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1u) {
        if (tid < s) red[tid] = is_max ? max(red[tid], red[tid + s]) : red[tid] + red[tid + s];
        barrier();
    }
    const float r = red[0];
    barrier();
    return r;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    F32 Q = F32(p.q), K = F32(p.k), V = F32(p.v), O = F32(p.o);
    const uint h = gl_WorkGroupID.x;
    for (uint t = gl_WorkGroupID.y; t < p.T; t += gl_NumWorkGroups.y) {
        for (uint i = tid; i < p.d; i += 64u) qs[i] = Q.v[t * p.q_row + h * p.d + i];
        barrier();
        float m = -3.0e38, l = 0.0;
        float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
        for (uint k0 = 0u; k0 < p.T; k0 += 64u) {
            const uint u = k0 + tid;
            float s = -3.0e38;
            if (u < p.T) {
                s = 0.0;
                const uint ko = u * p.k_row + h * p.d;
                for (uint i = 0u; i < p.d; i++) s += qs[i] * K.v[ko + i];
                s *= p.scale;
            }
            const float m_new = max(m, wg_reduce(s, true));
            const float e = u < p.T ? exp(s - m_new) : 0.0;
            ps[tid] = e;
            const float corr = exp(m - m_new); // 0 on the first block (m = −3e38)
            l = l * corr + wg_reduce(e, false); // wg_reduce's barriers also publish ps
            m = m_new;
            const uint n = min(64u, p.T - k0);
            for (uint j = 0u; j < 4u; j++) {
                const uint i = tid + 64u * j;
                if (i >= p.d) break;
                float a = acc[j] * corr;
                for (uint w = 0u; w < n; w++) a += ps[w] * V.v[(k0 + w) * p.v_row + h * p.d + i];
                acc[j] = a;
            }
            barrier();
        }
        const float inv = 1.0 / l;
        for (uint j = 0u; j < 4u; j++) {
            const uint i = tid + 64u * j;
            if (i < p.d) O.v[t * p.o_row + h * p.d + i] = acc[j] * inv;
        }
        barrier();
    }
}
