// probe_copy.comp — the bandwidth probe of `deltallm bench --device`: dst = src in vec4s (bytes read and
// written count), the device copy a decode's share of bandwidth is judged against.
#version 450
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 16) buffer W4 { vec4 v[]; };
layout(push_constant) uniform Push {
    uint64_t src, dst;
    uint n4;
} p;
layout(local_size_x = 256) in;

void main() {
    for (uint i = gl_GlobalInvocationID.x; i < p.n4; i += gl_NumWorkGroups.x * 256u) W4(p.dst).v[i] = V4(p.src).v[i];
}
