// mm_mat.comp — the tiled GEMM (prefill): a workgroup computes 64 weight rows × 32 tokens of one work
// item. Per step of 64 columns it dequantizes the weight tile once into shared memory (each of 128
// threads one 32-element item) and loads the 32 tokens' activations beside it, then every thread
// accumulates a 4 × 4 register tile: each weight tile is read once per tile of tokens. Grid: x = blocks of
// 64 rows, y = work items (tiles of 32 tokens).
#version 450
#include "common.glsl"
#include "dequant.glsl"
#include "mm_common.glsl"

#define BM 64u
#define BN 32u
#define BK 64u
layout(local_size_x = 128) in;

shared float As[BK][BM + 4u];
shared float Bs[BK][BN + 4u];

void main() {
    g_tab = p.tab;
    const uint tid = gl_LocalInvocationID.x;
    uint e, p0, nt;
    item_of(gl_WorkGroupID.y, BN, e, p0, nt);
    const uint64_t wbase = p.w + uint64_t(e) * p.estride;
    const uint n_items = (p.cols + 31u) / 32u;
    // what this thread loads: weight row am (item ai of each step) and token bn's columns bk .. bk + 15
    const uint am = tid & 63u, ai = tid >> 6, bn = tid >> 2, bk = (tid & 3u) * 16u;
    const uint arow = gl_WorkGroupID.x * BM + am;
    const uint64_t rowa = wbase + uint64_t(min(arow, p.rows - 1u)) * uint64_t(p.row_bytes);
    const uint64_t xa = p.x + uint64_t(xrow_of(p0 + min(bn, nt - 1u))) * uint64_t(p.ldx) * 4ul;
    // what it computes: rows 4·tm … 4·tm + 3, tokens 4·tn … 4·tn + 3
    const uint tm = tid & 15u, tn = tid >> 4;
    float acc[4][4];
    for (uint i = 0u; i < 4u; i++)
        for (uint j = 0u; j < 4u; j++) acc[i][j] = 0.0;
    for (uint k0 = 0u; k0 < p.cols; k0 += BK) {
        const uint item = k0 / 32u + ai;
        if (arow < p.rows && item < n_items) {
            float v[32];
            dq32(rowa + uint64_t(item / FMT_SUBS) * uint64_t(FMT_BYTES), item % FMT_SUBS, v);
            const uint nv = min(32u, p.cols - 32u * item);
            for (uint j = 0u; j < 32u; j++) As[32u * ai + j][am] = j < nv ? v[j] : 0.0;
        } else {
            for (uint j = 0u; j < 32u; j++) As[32u * ai + j][am] = 0.0;
        }
        for (uint j = 0u; j < 16u; j++) {
            const uint k = k0 + bk + j;
            Bs[bk + j][bn] = bn < nt && k < p.cols ? F32(xa).v[k] : 0.0;
        }
        barrier();
        for (uint k = 0u; k < BK; k++) {
            const vec4 a = vec4(As[k][4u * tm], As[k][4u * tm + 1u], As[k][4u * tm + 2u], As[k][4u * tm + 3u]);
            const vec4 b = vec4(Bs[k][4u * tn], Bs[k][4u * tn + 1u], Bs[k][4u * tn + 2u], Bs[k][4u * tn + 3u]);
            for (uint i = 0u; i < 4u; i++) {
                acc[i][0] += a[i] * b.x;
                acc[i][1] += a[i] * b.y;
                acc[i][2] += a[i] * b.z;
                acc[i][3] += a[i] * b.w;
            }
        }
        barrier();
    }
    for (uint j = 0u; j < 4u; j++) {
        const uint t = 4u * tn + j;
        if (t >= nt) break;
        const uint yr = yrow_of(p0 + t);
        for (uint i = 0u; i < 4u; i++) {
            const uint row = gl_WorkGroupID.x * BM + 4u * tm + i;
            if (row < p.rows) {
                const uint yi = yr * p.ldy + row;
                F32(p.y).v[yi] = (p.flags & MM_ACC) != 0u ? F32(p.y).v[yi] + acc[i][j] : acc[i][j];
            }
        }
    }
}
