// dn_recurrent.comp — the delta rule token by token (the fused sequential form; decode). The state is
// TRANSPOSED, [Hv][Dv][Dk]: row c of head j is column c of S, so every product is a row dot. One subgroup
// owns one row at a time, its lanes over the row's columns (lane l holds columns l, l + subgroup, …, so a
// warp reads contiguous floats), and keeps the row in registers across all T tokens:
//   row ← exp(g)·row;  δ = (v[c] − row·k)·β;  row += δ·k;  o[c] = (row·q)/√Dv
// q and k arrive L2-normed (no renormalisation here). Written for any subgroup size: a workgroup covers
// rows_per_wg rows, its subgroups taking turns. steps (optional) receives the state after every token.
#version 450
#include "common.glsl"

#define MAX_PER_LANE 32u
layout(push_constant) uniform Push {
    uint64_t q, k, v, g, beta, s_in, s_out, out_, steps;
    uint T, Hk, Hv, dk, dv, grouped, rows_per_wg, has_steps;
} p;
layout(local_size_x = 64) in;

void main() {
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupSize;
    const uint per = (p.dk + sg - 1u) / sg;
    const float scale = 1.0 / sqrt(float(p.dv));
    F32 Q = F32(p.q), Kx = F32(p.k), V = F32(p.v), G = F32(p.g), B = F32(p.beta);
    F32 SI = F32(p.s_in), SO = F32(p.s_out), O = F32(p.out_), ST = F32(p.steps);
    for (uint rl = gl_SubgroupID; rl < p.rows_per_wg; rl += gl_NumSubgroups) {
        const uint gr = gl_WorkGroupID.x * p.rows_per_wg + rl; // j·dv + c
        if (gr >= p.Hv * p.dv) break;
        const uint j = gr / p.dv, c = gr % p.dv;
        const uint kh = p.grouped != 0u ? j / (p.Hv / p.Hk) : j % p.Hk;
        float row[MAX_PER_LANE];
        for (uint m = 0u; m < per; m++) {
            const uint i = lane + m * sg;
            row[m] = i < p.dk ? SI.v[gr * p.dk + i] : 0.0;
        }
        for (uint t = 0u; t < p.T; t++) {
            const uint qk = (t * p.Hk + kh) * p.dk;
            const float decay = exp(G.v[t * p.Hv + j]), beta = B.v[t * p.Hv + j];
            float kd = 0.0;
            for (uint m = 0u; m < per; m++) {
                const uint i = lane + m * sg;
                row[m] *= decay;
                if (i < p.dk) kd += row[m] * Kx.v[qk + i];
            }
            kd = subgroupAdd(kd);
            const float delta = (V.v[(t * p.Hv + j) * p.dv + c] - kd) * beta;
            float o = 0.0;
            for (uint m = 0u; m < per; m++) {
                const uint i = lane + m * sg;
                if (i < p.dk) {
                    row[m] += delta * Kx.v[qk + i];
                    o += row[m] * Q.v[qk + i];
                }
            }
            o = subgroupAdd(o);
            if (lane == 0u) O.v[(t * p.Hv + j) * p.dv + c] = o * scale;
            if (p.has_steps != 0u)
                for (uint m = 0u; m < per; m++) {
                    const uint i = lane + m * sg;
                    if (i < p.dk) ST.v[(t * p.Hv * p.dv + gr) * p.dk + i] = row[m];
                }
        }
        for (uint m = 0u; m < per; m++) {
            const uint i = lane + m * sg;
            if (i < p.dk) SO.v[gr * p.dk + i] = row[m];
        }
    }
}
