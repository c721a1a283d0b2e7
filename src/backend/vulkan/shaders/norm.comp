// norm.comp — the per-vector norms (one workgroup per vector): RMSNorm with an optional weight, L2 norm,
// and the gated RMSNorm of the delta-net output (z ← silu(z); out = rmsnorm(x)·w·z). Vector (r, h) of x
// starts at r·x_row + h·x_head floats, of y likewise. Grid: x heads, y rows (looping past 65535).
#version 450
#include "common.glsl"

#define MODE_RMS 0u
#define MODE_L2 1u
#define MODE_GATED 2u

layout(push_constant) uniform Push {
    uint64_t x, y, w, z;
    uint n, rows, heads, mode;
    uint x_row, x_head, y_row, y_head;
    float eps;
} p;
layout(local_size_x = 128) in;
shared float part[128];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    F32 X = F32(p.x), Y = F32(p.y), W = F32(p.w), Z = F32(p.z);
    const uint h = gl_WorkGroupID.x;
    for (uint r = gl_WorkGroupID.y; r < p.rows; r += gl_NumWorkGroups.y) {
        const uint xo = r * p.x_row + h * p.x_head, yo = r * p.y_row + h * p.y_head;
        float ss = 0.0;
        for (uint i = tid; i < p.n; i += 128u) ss += X.v[xo + i] * X.v[xo + i];
        ss = subgroupAdd(ss);
        if (subgroupElect()) part[gl_SubgroupID] = ss;
        barrier();
        float sum = 0.0;
        for (uint s = 0u; s < gl_NumSubgroups; s++) sum += part[s];
        barrier();
        const float scale = p.mode == MODE_L2 ? 1.0 / max(sqrt(sum), p.eps) : 1.0 / sqrt(sum / float(p.n) + p.eps);
        for (uint i = tid; i < p.n; i += 128u) {
            float v = X.v[xo + i] * scale;
            if (p.w != 0ul) v *= W.v[i];
            if (p.mode == MODE_GATED) {
                const float g = silu_f(Z.v[xo + i]);
                Z.v[xo + i] = g;
                v *= g;
            }
            Y.v[yo + i] = v;
        }
    }
}
