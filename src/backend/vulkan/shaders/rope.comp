// rope.comp — NeoX rotation of the first n_rot dims of each head (pairs i, i + n_rot/2) at the row's
// position, with IMROPE's sections when flags bit 1 is set (kernels/ref/ops_small.c op_rope is the spec: the
// angle is built by the same repeated float products; theta_scale = powf(base, −2/n_rot) comes from the
// host). With flags bit 2 the positions are int32 [rows][3], each row's (time, height, width), and a pair
// starts from its section's axis (op_rope_thw: h, w, t by the same tests, the 4th section at 0; NEOX: t); a
// row with t = h = w = p takes the same products as the one-position form, so the same bits. Angles are
// reduced modulo 2π in three parts before sin / cos, so long contexts keep their accuracy. One thread per
// pair; grid: x pairs · heads, y rows.
#version 450
#include "common.glsl"

layout(push_constant) uniform Push {
    uint64_t x, pos;
    uint rows, heads, d, n_rot, row_stride, flags;
    float theta_scale, freq_scale;
    int s0, s1, s2, s3;
} p;
layout(local_size_x = 64) in;

float reduce_2pi(float t) {
    // t − k·2π with 2π = C1 + C2 + C3 (C1 and C2 exact in few bits), fused so no step rounds early
    precise float k = floor(t * 0.15915494309189535 + 0.5);
    precise float r = fma(-k, 6.28125, t);
    r = fma(-k, 1.9353071693331003e-3, r);
    r = fma(-k, 1.0253376273028358e-11, r);
    return r;
}

void main() {
    const uint half_ = p.n_rot / 2u;
    const uint gi = gl_GlobalInvocationID.x;
    const uint i = gi % half_, h = gi / half_;
    if (h >= p.heads) return;
    for (uint r = gl_WorkGroupID.y; r < p.rows; r += gl_NumWorkGroups.y) {
        const bool thw = (p.flags & 2u) != 0u;
        // the axis of pair i: 0 t, 1 h, 2 w, 3 the 4th section (angle 0)
        uint axis = 0u;
        if ((p.flags & 1u) != 0u) {
            const int sect = p.s0 + p.s1 + p.s2 + p.s3;
            if (sect > 0) {
                const int s = int(i) % sect;
                if (s % 3 == 1 && s < 3 * p.s1) axis = 1u;
                else if (s % 3 == 2 && s < 3 * p.s2) axis = 2u;
                else if (s % 3 == 0 && s < 3 * p.s0) axis = 0u;
                else axis = 3u;
            }
        }
        const int pos = thw ? (axis < 3u ? I32(p.pos).v[3u * r + axis] : 0) : I32(p.pos).v[r];
        float theta = float(pos);
        for (uint j = 0u; j < i; j++) theta *= p.theta_scale;
        if (axis == 3u) theta = 0.0;
        theta *= p.freq_scale;
        const float t = reduce_2pi(theta);
        const float c = cos(t), s = sin(t);
        F32 X = F32(p.x);
        const uint o = r * p.row_stride + h * p.d + i;
        const float x0 = X.v[o], x1 = X.v[o + half_];
        X.v[o] = fma(x0, c, -(x1 * s));
        X.v[o + half_] = fma(x0, s, x1 * c);
    }
}
