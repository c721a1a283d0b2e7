// moe_route.comp — MoE routing of one row per workgroup: probabilities = softmax(logits) in place, the
// top k by probability (ties to the lower expert id), their weights renormalised to sum 1 (the sum floored
// at 6.1035e-5), as host_ops.c h_moe_route. Grid: y rows (looping past 65535).
#version 450
#include "common.glsl"

#define MAX_EXPERTS 1024u
layout(push_constant) uniform Push {
    uint64_t logits, sel, w;
    uint R, nE, k;
} p;
layout(local_size_x = 64) in;
shared float sv[64];
shared uint si[64];
shared uint taken[MAX_EXPERTS];
shared uint chosen[64];

// the (value, index) pair that wins: higher value, then lower index
bool better(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

void main() {
    const uint tid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.y; r < p.R; r += gl_NumWorkGroups.y) {
        F32 L = F32(p.logits + uint64_t(r) * uint64_t(p.nE) * 4ul);
        float m = -1.0 / 0.0;
        for (uint e = tid; e < p.nE; e += 64u) m = max(m, L.v[e]);
        sv[tid] = m;
        barrier();
        for (uint s = 32u; s > 0u; s >>= 1) {
            if (tid < s) sv[tid] = max(sv[tid], sv[tid + s]);
            barrier();
        }
        m = sv[0];
        barrier();
        float sum = 0.0;
        for (uint e = tid; e < p.nE; e += 64u) {
            const float x = exp(L.v[e] - m);
            L.v[e] = x;
            sum += x;
        }
        sv[tid] = sum;
        barrier();
        for (uint s = 32u; s > 0u; s >>= 1) {
            if (tid < s) sv[tid] += sv[tid + s];
            barrier();
        }
        const float inv = 1.0 / sv[0];
        barrier();
        for (uint e = tid; e < p.nE; e += 64u) {
            L.v[e] *= inv;
            taken[e] = 0u;
        }
        memoryBarrierBuffer();
        barrier();
        for (uint q = 0u; q < p.k; q++) {
            float bv = -1.0;
            uint bi = 0xffffffffu;
            for (uint e = tid; e < p.nE; e += 64u)
                if (taken[e] == 0u && better(L.v[e], e, bv, bi)) bv = L.v[e], bi = e;
            sv[tid] = bv;
            si[tid] = bi;
            barrier();
            for (uint s = 32u; s > 0u; s >>= 1) {
                if (tid < s && better(sv[tid + s], si[tid + s], sv[tid], si[tid])) sv[tid] = sv[tid + s], si[tid] = si[tid + s];
                barrier();
            }
            if (tid == 0u) {
                chosen[q] = si[0];
                taken[si[0]] = 1u;
            }
            barrier();
        }
        if (tid == 0u) {
            float tot = 0.0;
            for (uint q = 0u; q < p.k; q++) tot += L.v[chosen[q]];
            tot = max(tot, 6.103515625e-5);
            for (uint q = 0u; q < p.k; q++) {
                I32(p.sel).v[r * p.k + q] = int(chosen[q]);
                F32(p.w).v[r * p.k + q] = L.v[chosen[q]] / tot;
            }
        }
        barrier();
    }
}
