// attn_prep.comp — a gated-attention layer's q and k between the projections and the attention, in one
// dispatch (backend.h attn_prep), with the bits of the unfused ops: the RMSNorm of each q head (the first D
// of its [q | gate] block) and k head with their weights (norm.comp's reduction: the same 128 threads and
// order), RoPE on both (rope.comp's angle and rotation), q to qa, k and v straight into their cache rows
// (the kv_append copies). One workgroup per (row, head): heads [0, H) are q's, [H, H + Hkv) k's (with v).
// flags bit 0: IMROPE sections; bit 1: kc and vc are the caches' row 0 and row r goes to cache row
// pos[r + rows_rel] (int32 beside the positions: a recorded pass replayed at later rows).
#version 450
#include "common.glsl"

#define MAX_D 512u
layout(push_constant) uniform Push {
    uint64_t qg, qa, ka, va, kc, vc, qn, kn, pos;
    uint rows, H, Hkv, D, n_rot, flags;
    int s0, s1, s2, s3;
    float theta_scale, freq_scale, eps;
    int rows_rel;
} p;
layout(local_size_x = 128) in;
shared float part[128];
shared float xs[MAX_D];

float reduce_2pi(float t) { // as rope.comp
    precise float k = floor(t * 0.15915494309189535 + 0.5);
    precise float r = fma(-k, 6.28125, t);
    r = fma(-k, 1.9353071693331003e-3, r);
    r = fma(-k, 1.0253376273028358e-11, r);
    return r;
}

void main() {
    const uint tid = gl_LocalInvocationID.x, hh = gl_WorkGroupID.x, D = p.D;
    const bool is_q = hh < p.H;
    const uint h = is_q ? hh : hh - p.H, KVD = p.Hkv * D;
    for (uint r = gl_WorkGroupID.y; r < p.rows; r += gl_NumWorkGroups.y) {
        const uint xo = is_q ? r * 2u * p.H * D + h * 2u * D : r * KVD + h * D;
        F32 X = F32(is_q ? p.qg : p.ka), W = F32(is_q ? p.qn : p.kn);
        float ss = 0.0;
        for (uint i = tid; i < D; i += 128u) ss += X.v[xo + i] * X.v[xo + i];
        ss = subgroupAdd(ss);
        if (subgroupElect()) part[gl_SubgroupID] = ss;
        barrier();
        float sum = 0.0;
        for (uint s = 0u; s < gl_NumSubgroups; s++) sum += part[s];
        barrier();
        const float scale = 1.0 / sqrt(sum / float(D) + p.eps);
        for (uint i = tid; i < D; i += 128u) {
            float v = X.v[xo + i] * scale;
            v *= W.v[i];
            xs[i] = v;
        }
        barrier();
        const uint half_ = p.n_rot / 2u;
        const int pos = I32(p.pos).v[r];
        uint64_t kc = p.kc, vc = p.vc;
        uint co = r * KVD + h * D; // the element of the cache rows' views
        if ((p.flags & 2u) != 0u) {
            const uint row = uint(I32(p.pos + uint64_t(int64_t(p.rows_rel) * 4l)).v[r]);
            kc += uint64_t(row) * uint64_t(KVD) * 4ul;
            vc += uint64_t(row) * uint64_t(KVD) * 4ul;
            co = h * D;
        }
        F32 O = F32(is_q ? p.qa : kc);
        const uint oo = is_q ? r * p.H * D + h * D : co;
        for (uint i = tid; i < half_; i += 128u) {
            float theta = float(pos);
            for (uint j = 0u; j < i; j++) theta *= p.theta_scale;
            if ((p.flags & 1u) != 0u) {
                const int sect = p.s0 + p.s1 + p.s2 + p.s3;
                if (sect > 0) {
                    const int s = int(i) % sect;
                    const bool is_h = s % 3 == 1 && s < 3 * p.s1, is_w = s % 3 == 2 && s < 3 * p.s2, is_t = s % 3 == 0 && s < 3 * p.s0;
                    if (!(is_t || is_h || is_w)) theta = 0.0;
                }
            }
            theta *= p.freq_scale;
            const float t = reduce_2pi(theta);
            const float c = cos(t), s = sin(t);
            const float x0 = xs[i], x1 = xs[i + half_];
            O.v[oo + i] = fma(x0, c, -(x1 * s));
            O.v[oo + i + half_] = fma(x0, s, x1 * c);
        }
        for (uint i = p.n_rot + tid; i < D; i += 128u) O.v[oo + i] = xs[i];
        if (!is_q)
            for (uint i = tid; i < D; i += 128u) F32(vc).v[co + i] = F32(p.va).v[r * KVD + h * D + i];
        barrier();
    }
}
