// dn_gates.comp — the delta-net gates: β = sigmoid(b), g = softplus(a + dt_bias)·ssm_a for R rows of Hv
// heads (backend.h GateArgs: grouped [b (group) | a (group)] per key head, or separate b and a).
#version 450
#include "common.glsl"

layout(push_constant) uniform Push {
    uint64_t b, a, beta, g, dt, sa;
    uint R, Hv, group, ld_in;
} p;
layout(local_size_x = 64) in;

void main() {
    const uint i = gl_GlobalInvocationID.x;
    if (i >= p.R * p.Hv) return;
    const uint t = i / p.Hv, j = i % p.Hv;
    uint off = t * p.ld_in + j;
    if (p.group != 0u) off = t * p.ld_in + (j / p.group) * 2u * p.group + j % p.group;
    const float bj = F32(p.b).v[off], aj = F32(p.a).v[off];
    F32(p.beta).v[i] = sigmoid_f(bj);
    F32(p.g).v[i] = softplus_f(aj + F32(p.dt).v[j]) * F32(p.sa).v[j];
}
