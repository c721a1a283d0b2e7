// moe_group.comp — groups an MoE layer's (row, slot) pairs by expert on the device, so the selection never
// goes back to the host (backend.h MoeArgs). One workgroup: count per expert (shared atomics), starts by a
// prefix sum, work items of at most `tile` tokens per expert (vk_matmul.c runs the expert products over
// them), then every pair placed: x[pos] = its row, s[pos] = row·k + slot. The order inside an expert is
// whatever the atomics give; each row's result does not depend on it. Also writes the indirect dispatch
// arguments of the two product shapes: (groups_a, items, 1) and (groups_b, items, 1).
#version 450
#include "common.glsl"

#define MAX_EXPERTS 1024u
layout(push_constant) uniform Push {
    uint64_t sel, work;
    uint n, k, nE, tile, groups_a, groups_b;
    uint off_s, off_items, off_args;
} p;
layout(local_size_x = 256) in;
shared uint cnt[MAX_EXPERTS], start[MAX_EXPERTS], fillc[MAX_EXPERTS];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    I32 S = I32(p.sel), Wk = I32(p.work);
    for (uint e = tid; e < p.nE; e += 256u) cnt[e] = 0u, fillc[e] = 0u;
    barrier();
    for (uint i = tid; i < p.n; i += 256u) atomicAdd(cnt[min(uint(S.v[i]), p.nE - 1u)], 1u);
    barrier();
    if (tid == 0u) {
        uint at = 0u, items = 0u;
        for (uint e = 0u; e < p.nE; e++) {
            start[e] = at;
            for (uint j = 0u; j < cnt[e]; j += p.tile) {
                Wk.v[p.off_items + 3u * items] = int(e);
                Wk.v[p.off_items + 3u * items + 1u] = int(at + j);
                Wk.v[p.off_items + 3u * items + 2u] = int(min(p.tile, cnt[e] - j));
                items++;
            }
            at += cnt[e];
        }
        Wk.v[p.off_args] = int(p.groups_a);
        Wk.v[p.off_args + 1u] = int(items);
        Wk.v[p.off_args + 2u] = 1;
        Wk.v[p.off_args + 4u] = int(p.groups_b);
        Wk.v[p.off_args + 5u] = int(items);
        Wk.v[p.off_args + 6u] = 1;
    }
    barrier();
    for (uint i = tid; i < p.n; i += 256u) {
        const uint e = min(uint(S.v[i]), p.nE - 1u);
        const uint pos = start[e] + atomicAdd(fillc[e], 1u);
        Wk.v[pos] = int(i / p.k);
        Wk.v[p.off_s + pos] = int(i);
    }
}
