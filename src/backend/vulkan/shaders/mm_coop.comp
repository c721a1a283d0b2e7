// mm_coop.comp — the tiled GEMM on tensor cores (VK_NV_cooperative_matrix): a workgroup of four 32-lane
// subgroups computes 64 weight rows × 64 tokens of one work item. Per step of 32 columns, half the threads
// dequantize the weight tile (one 32-element item per row) and the other half load the tokens, both into
// shared memory as f16; each subgroup then multiplies its 32 × 32 quarter as 2 × 2 blocks of 16 × 16 × 16
// with f32 accumulators. The result goes through shared memory so the stores to y are coalesced. Used only
// where the device reports 16×16×16 f16 → f32 matrices on 32-lane subgroups (vk_device.c: coopmat); the
// plain mm_mat.comp computes the same products everywhere else.
#version 450
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"
#include "dequant.glsl"
#include "mm_common.glsl"

#define BM 64u
#define BN 64u
#define BK 32u
#define SA (BK + 8u)  // f16 row strides: 80 bytes keeps every fragment 16-byte aligned
#define SC (BM + 4u)  // f32 stride of the output staging
layout(local_size_x = 128) in;

shared float16_t As[BM * SA]; // [row][k]
shared float16_t Bs[BN * SA]; // [token][k]: B = xᵀ is column-major
shared float Cs[BN * SC];     // [token][row]

void main() {
    g_tab = p.tab;
    const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
    uint e, p0, nt;
    item_of(gl_WorkGroupID.y, BN, e, p0, nt);
    const uint64_t wbase = p.w + uint64_t(e) * p.estride;
    const uint n_items = (p.cols + 31u) / 32u;
    const uint row0 = gl_WorkGroupID.x * BM;
    // loaders: threads 0..63 take weight row tid, threads 64..127 token (tid − 64)
    const uint lr = tid & 63u;
    const bool weights = tid < 64u;
    const uint64_t rowa = wbase + uint64_t(min(row0 + lr, p.rows - 1u)) * uint64_t(p.row_bytes);
    const uint64_t xa = p.x + uint64_t(xrow_of(p0 + min(lr, nt - 1u))) * uint64_t(p.ldx) * 4ul;
    // this subgroup's quarter: rows mq … mq + 31, tokens nq … nq + 31
    const uint mq = (sg & 1u) * 32u, nq = (sg >> 1) * 32u;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][2];
    for (uint i = 0u; i < 2u; i++)
        for (uint j = 0u; j < 2u; j++) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    for (uint item = 0u; item < n_items; item++) {
        if (weights) {
            float v[32];
            const bool ok = row0 + lr < p.rows;
            if (ok) dq32(rowa + uint64_t(item / FMT_SUBS) * uint64_t(FMT_BYTES), item % FMT_SUBS, v);
            const uint nv = min(32u, p.cols - 32u * item);
            for (uint j = 0u; j < 32u; j++) As[lr * SA + j] = float16_t(ok && j < nv ? v[j] : 0.0);
        } else {
            const bool ok = lr < nt;
            for (uint j = 0u; j < 32u; j++) {
                const uint k = 32u * item + j;
                Bs[lr * SA + j] = float16_t(ok && k < p.cols ? F32(xa).v[k] : 0.0);
            }
        }
        barrier();
        for (uint kk = 0u; kk < BK; kk += 16u) {
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2], b[2];
            for (uint i = 0u; i < 2u; i++) coopMatLoadNV(a[i], As, (mq + 16u * i) * SA + kk, SA, false);
            for (uint j = 0u; j < 2u; j++) coopMatLoadNV(b[j], Bs, (nq + 16u * j) * SA + kk, SA, true);
            for (uint i = 0u; i < 2u; i++)
                for (uint j = 0u; j < 2u; j++) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
        }
        barrier();
    }
    for (uint i = 0u; i < 2u; i++)
        for (uint j = 0u; j < 2u; j++) coopMatStoreNV(acc[i][j], Cs, (nq + 16u * j) * SC + mq + 16u * i, SC, true);
    barrier();
    for (uint q = tid; q < BM * BN; q += 128u) {
        const uint n = q / BM, m = q % BM;
        if (n < nt && row0 + m < p.rows) {
            const uint yi = yrow_of(p0 + n) * p.ldy + row0 + m;
            F32(p.y).v[yi] = (p.flags & MM_ACC) != 0u ? F32(p.y).v[yi] + Cs[n * SC + m] : Cs[n * SC + m];
        }
    }
}
