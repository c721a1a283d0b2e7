// rope_2d.comp — the vision tower's 2-D rotary in place (kernels/ops.h op_rope_2d): per row (a patch), head and
// NeoX pair k of d/2, pair (k, k + d/2) turns by row·s^k for k < d/4 and by col·s^(k − d/4) above (the angle
// built by repeated products as the reference does); pos is int32 [rows][2] (row, column). Grid: x covers
// heads × d/2 pairs (64 per group), y rows (looping past 65535).
#version 450
#include "common.glsl"

layout(push_constant) uniform Push {
    uint64_t x, pos;
    uint rows, heads, d, row_stride;
    float theta_scale;
} p;
layout(local_size_x = 64) in;

void main() {
    F32 X = F32(p.x);
    I32 P = I32(p.pos);
    const uint half_d = p.d / 2u, quarter = p.d / 4u;
    const uint id = gl_GlobalInvocationID.x;
    if (id >= p.heads * half_d) return;
    const uint h = id / half_d, k = id % half_d;
    for (uint r = gl_WorkGroupID.y; r < p.rows; r += gl_NumWorkGroups.y) {
        const bool is_row = k < quarter;
        float theta = float(P.v[2u * r + (is_row ? 0u : 1u)]);
        const uint steps = is_row ? k : k - quarter;
        for (uint i = 0u; i < steps; i++) theta *= p.theta_scale;
        const float c = cos(theta), s = sin(theta);
        const uint o = r * p.row_stride + h * p.d + k;
        const float x0 = X.v[o], x1 = X.v[o + half_d];
        X.v[o] = x0 * c - x1 * s;
        X.v[o + half_d] = x0 * s + x1 * c;
    }
}
