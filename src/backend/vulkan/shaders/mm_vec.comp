// mm_vec.comp — the dequantizing GEMV (decode, and batches of a few tokens): y[t][row] = W[row]·x[t] for up
// to VEC_TOKENS tokens of one work item. One subgroup per output row at a time, its lanes over the row's
// 32-element items (lane l takes items l, l + subgroup size, …: neighbouring lanes read neighbouring
// bytes), each item dequantized once and dotted with every token; a workgroup covers VEC_ROWS rows, the
// subgroups taking turns, so any subgroup size works. Grid: x = row groups, y = work items. The fused forms
// (mm_common.glsl flags) keep the same dot products, so their results are the unfused ops' bits: with
// MM_SWIGLU a second accumulator runs over w2's row (expert e's: w2 + e·estride, as for w; MoE decode's gate + up +
// SwiGLU over all selected experts in one dispatch), with MM_ACC the sum is added to y. Compiled with
// -DFMT_TWO it takes w2 in a second format (FMTB_<b>, dequant_b.glsl: the mixed pairs, w2's rows row_bytes2
// apart): each matrix is dequantized by its own format's dq32, so the sums are those of the one-format kernels.
// With MM_COMBINE (MoE decode's down + combine) a workgroup takes one token's k slots as its "tokens", each slot
// dotted with its own expert's row (the same per-item dot products as the down dispatch over the experts' work
// items), then sums them with the routing weights in moe_combine's order and expression; with MM_SIGADD the
// shared expert's σ-gated add (and the residual) follow the product in the epilogue, add_scaled's expression.
#version 450
#include "common.glsl"
#include "dequant.glsl"
#if defined(FMT_TWO)
#include "dequant_b.glsl"
#endif
#include "mm_common.glsl"

#define VEC_ROWS 16u
#define VEC_TOKENS 8u
#define GN_HEADS 64u // MM_GNORM: at most this many heads per row (vk_matmul.c)
layout(local_size_x = 128) in;
shared float part[128];
shared float gsc[VEC_TOKENS * GN_HEADS]; // MM_GNORM: each token's per-head RMS scales

// MM_GNORM: element k of a row of x (at xrow) as norm.comp's MODE_GATED writes it: ((x·scale)·w)·silu(z)
float gated(float x, uint64_t xrow, uint q, uint k) {
    const float g = silu_f(F32(p.w2 + (xrow - p.x)).v[k]);
    return ((x * gsc[q * GN_HEADS + k / p.rows2]) * F32(p.estride).v[k % p.rows2]) * g;
}

void main() {
    g_tab = p.tab;
    uint e, p0, nt;
    const bool comb = (p.flags & MM_COMBINE) != 0u;
    item_of(gl_WorkGroupID.y, VEC_TOKENS, e, p0, nt);
    if (comb) e = 0u, p0 = gl_WorkGroupID.y * p.k, nt = p.k; // token y's slots: activation rows y·k … y·k + k − 1
    const bool nrm = (p.flags & MM_NORM) != 0u, gn = (p.flags & MM_GNORM) != 0u;
    const uint64_t wbase = p.w + (nrm || gn ? 0ul : uint64_t(e) * p.estride);
    uint64_t xa[VEC_TOKENS], wslot[VEC_TOKENS]; // MM_COMBINE: each slot's expert matrix
    uint yr[VEC_TOKENS];
    for (uint q = 0u; q < VEC_TOKENS; q++) {
        const uint t = p0 + min(q, nt - 1u);
        xa[q] = p.x + uint64_t(comb ? t : xrow_of(t)) * uint64_t(p.ldx) * 4ul;
        yr[q] = comb ? gl_WorkGroupID.y : yrow_of(t);
        wslot[q] = 0ul;
        if (comb) wslot[q] = p.w + uint64_t(min(uint(I32(p.xidx).v[t]), p.n_expert - 1u)) * p.estride;
    }
    float nsc[VEC_TOKENS]; // MM_NORM: each token's RMS scale, as norm.comp computes it
    F32 NW = F32(p.estride);
    for (uint q = 0u; q < VEC_TOKENS; q++) nsc[q] = 1.0;
    if (nrm) {
        const uint tid = gl_LocalInvocationID.x;
        for (uint q = 0u; q < VEC_TOKENS; q++) {
            if (q >= nt) break;
            float ss = 0.0;
            for (uint i = tid; i < p.cols; i += 128u) ss += F32(xa[q]).v[i] * F32(xa[q]).v[i];
            ss = subgroupAdd(ss);
            if (subgroupElect()) part[gl_SubgroupID] = ss;
            barrier();
            float sum = 0.0;
            for (uint s = 0u; s < gl_NumSubgroups; s++) sum += part[s];
            barrier();
            nsc[q] = 1.0 / sqrt(sum / float(p.cols) + p.eps);
        }
    }
    if (gn) { // norm.comp's MODE_GATED reduction per (token, head)
        const uint tid = gl_LocalInvocationID.x, hn = p.rows2;
        for (uint q = 0u; q < VEC_TOKENS; q++) {
            if (q >= nt) break;
            for (uint h = 0u; h < p.cols / hn; h++) {
                const uint xo = h * hn;
                float ss = 0.0;
                for (uint i = tid; i < hn; i += 128u) ss += F32(xa[q]).v[xo + i] * F32(xa[q]).v[xo + i];
                ss = subgroupAdd(ss);
                if (subgroupElect()) part[gl_SubgroupID] = ss;
                barrier();
                float sum = 0.0;
                for (uint s = 0u; s < gl_NumSubgroups; s++) sum += part[s];
                barrier();
                if (tid == 0u) gsc[q * GN_HEADS + h] = 1.0 / sqrt(sum / float(hn) + p.eps);
            }
        }
        barrier();
    }
    const uint n_items = (p.cols + 31u) / 32u;
    const uint lane = gl_SubgroupInvocationID, sg = gl_SubgroupSize;
    for (uint rl = gl_SubgroupID; rl < VEC_ROWS; rl += gl_NumSubgroups) {
        const uint row = gl_WorkGroupID.x * VEC_ROWS + rl;
        const bool pair = (p.flags & MM_PAIR) != 0u;
        if (row >= (pair ? max(p.rows, p.rows2) : p.rows)) break;
        const bool has1 = row < p.rows, two = (p.flags & MM_SWIGLU) != 0u || (pair && row < p.rows2);
        const uint nm = comb ? nt : two ? 2u : 1u; // the matrices per item: w (and w2), or each slot's expert
        const uint64_t rowa = wbase + uint64_t(row) * uint64_t(p.row_bytes);
        const uint64_t rowa2 = p.w2 + (nrm ? 0ul : uint64_t(e) * p.estride) + uint64_t(row) * uint64_t(p.row_bytes2);
        float acc[VEC_TOKENS], acc2[VEC_TOKENS];
        for (uint q = 0u; q < VEC_TOKENS; q++) acc[q] = 0.0, acc2[q] = 0.0;
        for (uint it = lane; it < n_items; it += sg) {
            const uint nv = min(32u, p.cols - 32u * it);
            for (uint m = has1 ? 0u : 1u; m < nm; m++) {
                float v[32];
                const uint64_t ra = comb ? wslot[m] + uint64_t(row) * uint64_t(p.row_bytes) : m == 0u ? rowa : rowa2;
#if defined(FMT_TWO)
                if (m == 0u || comb) dq32(ra + uint64_t(it / FMT_SUBS) * uint64_t(FMT_BYTES), it % FMT_SUBS, v);
                else dq32_b(ra + uint64_t(it / FMTB_SUBS) * uint64_t(FMTB_BYTES), it % FMTB_SUBS, v);
#else
                dq32(ra + uint64_t(it / FMT_SUBS) * uint64_t(FMT_BYTES), it % FMT_SUBS, v);
#endif
                for (uint q = 0u; q < VEC_TOKENS; q++) {
                    if (q >= nt) break;
                    if (comb && q != m) continue; // slot m's row dots slot m's activations only
                    const uint64_t xi = xa[q] + uint64_t(it) * 128ul;
                    float s = 0.0;
                    if ((p.flags & MM_XV4) != 0u && nv == 32u) {
                        for (uint j = 0u; j < 8u; j++) {
                            vec4 xv = V4(xi).v[j];
                            if (nrm) {
                                const uint k = 32u * it + 4u * j;
                                xv = vec4((xv.x * nsc[q]) * NW.v[k], (xv.y * nsc[q]) * NW.v[k + 1u],
                                          (xv.z * nsc[q]) * NW.v[k + 2u], (xv.w * nsc[q]) * NW.v[k + 3u]);
                            } else if (gn) {
                                const uint k = 32u * it + 4u * j;
                                xv = vec4(gated(xv.x, xa[q], q, k), gated(xv.y, xa[q], q, k + 1u),
                                          gated(xv.z, xa[q], q, k + 2u), gated(xv.w, xa[q], q, k + 3u));
                            }
                            s += v[4u * j] * xv.x + v[4u * j + 1u] * xv.y + v[4u * j + 2u] * xv.z + v[4u * j + 3u] * xv.w;
                        }
                    } else {
                        for (uint j = 0u; j < nv; j++)
                            s += v[j] * (nrm  ? (F32(xi).v[j] * nsc[q]) * NW.v[32u * it + j]
                                         : gn ? gated(F32(xi).v[j], xa[q], q, 32u * it + j)
                                              : F32(xi).v[j]);
                    }
                    if (m == 0u || comb) acc[q] += s;
                    else acc2[q] += s;
                }
            }
        }
        if (comb) { // moe_combine: Σ_s eo[t·k + s]·wt[t·k + s] in slot order, eo being the sums lane 0 writes unfused
            F32 WT = F32(p.w2);
            float s = subgroupAdd(acc[0]) * WT.v[p0];
            for (uint q = 1u; q < nt; q++) s += subgroupAdd(acc[q]) * WT.v[p0 + q];
            if (lane == 0u) F32(p.y).v[yr[0] * p.ldy + row] = s;
            continue;
        }
        for (uint q = 0u; q < VEC_TOKENS; q++) {
            if (q >= nt) break;
            float s = subgroupAdd(acc[q]);
            if (pair) {
                const float u = subgroupAdd(acc2[q]);
                if (lane == 0u && has1) F32(p.y).v[yr[q] * p.ldy + row] = s;
                if (lane == 0u && two) F32(p.y2).v[yr[q] * p.rows2 + row] = u;
                continue;
            }
            if (two) {
                const float u = subgroupAdd(acc2[q]);
                s = silu_f(s) * u;
            }
            const uint yi = yr[q] * p.ldy + row;
            if (lane == 0u && (p.flags & MM_SIGADD) != 0u) { // add_scaled(y, the product, sigmoid(g)), then add(y2, y)
                const float sg = sigmoid_f(F32(p.w2).v[yr[q]]);
                float o = F32(p.y).v[yi];
                o += s * sg;
                F32(p.y).v[yi] = o;
                if (p.y2 != 0ul) F32(p.y2).v[yi] += o;
            } else if (lane == 0u) F32(p.y).v[yi] = (p.flags & MM_ACC) != 0u ? F32(p.y).v[yi] + s : s;
        }
    }
}
