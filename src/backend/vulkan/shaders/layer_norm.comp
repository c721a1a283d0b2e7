// layer_norm.comp — the vision tower's LayerNorm (one workgroup per vector): y = (x − mean)/sqrt(var + eps)·w + b,
// w and b optional (address 0), mean and variance in two passes over the vector (kernels/ops.h op_layernorm;
// float sums here, double there). Vector (r, h) of x starts at r·x_row + h·x_head floats, of y likewise.
// Grid: x heads, y rows (looping past 65535).
#version 450
#include "common.glsl"

layout(push_constant) uniform Push {
    uint64_t x, y, w, b;
    uint n, rows, heads, pad;
    uint x_row, x_head, y_row, y_head;
    float eps;
} p;
layout(local_size_x = 128) in;
shared float part[128];

// the workgroup's sum of v (every invocation gets it)
float wg_sum(float v) {
    v = subgroupAdd(v);
    if (subgroupElect()) part[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0u; i < gl_NumSubgroups; i++) s += part[i];
    barrier();
    return s;
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    F32 X = F32(p.x), Y = F32(p.y), W = F32(p.w), B = F32(p.b);
    const uint h = gl_WorkGroupID.x;
    for (uint r = gl_WorkGroupID.y; r < p.rows; r += gl_NumWorkGroups.y) {
        const uint xo = r * p.x_row + h * p.x_head, yo = r * p.y_row + h * p.y_head;
        float s = 0.0;
        for (uint i = tid; i < p.n; i += 128u) s += X.v[xo + i];
        const float mean = wg_sum(s) / float(p.n);
        float s2 = 0.0;
        for (uint i = tid; i < p.n; i += 128u) {
            const float v = X.v[xo + i] - mean;
            s2 += v * v;
        }
        const float scale = 1.0 / sqrt(wg_sum(s2) / float(p.n) + p.eps);
        for (uint i = tid; i < p.n; i += 128u) {
            float v = (X.v[xo + i] - mean) * scale;
            if (p.w != 0ul) v *= W.v[i];
            if (p.b != 0ul) v += B.v[i];
            Y.v[yo + i] = v;
        }
    }
}
