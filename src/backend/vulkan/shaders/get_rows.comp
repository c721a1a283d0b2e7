// get_rows.comp — embedding lookup: out[i] = row ids[i] of the matrix, dequantized to F32. One thread per
// 32-element item; grid: x = items of a row / 64, y = rows looked up.
#version 450
#include "common.glsl"
#include "dequant.glsl"

layout(push_constant) uniform Push {
    uint64_t w, ids, out_, tab;
    uint row_bytes, cols, n;
} p;
layout(local_size_x = 64) in;

void main() {
    g_tab = p.tab;
    const uint it = gl_GlobalInvocationID.x, i = gl_WorkGroupID.y;
    if (32u * it >= p.cols || i >= p.n) return;
    const uint row = uint(I32(p.ids).v[i]);
    float v[32];
    dq32(p.w + uint64_t(row) * uint64_t(p.row_bytes) + uint64_t(it / FMT_SUBS) * uint64_t(FMT_BYTES), it % FMT_SUBS, v);
    const uint nv = min(32u, p.cols - 32u * it);
    for (uint j = 0u; j < nv; j++) F32(p.out_).v[i * p.cols + 32u * it + j] = v[j];
}
