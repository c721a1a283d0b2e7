// attention.comp — causal attention with online softmax: one workgroup per (query token, head). Keys go
// by blocks of 128: each thread scores one key (q held in shared memory), the block's maximum and sum
// update the running ones, and the output dims (threads over dims) accumulate the block's weighted V rows.
// GQA maps head h to KV head h / (H / Hkv). The sigmoid output gate optionally in the epilogue. Query t is at
// cache row pos0 + t, or rows_at[t] when rows_at is set (a recorded pass replayed at later rows: the value comes
// from the device, the dispatch does not change).
// Split over the keys (flash-decoding, p.S > 1): workgroup z = s of S takes the keys [s·c, (s+1)·c) of its query,
// c = ceil(n_keys / S) rounded up to a block (from the query's key count, read as above, so a pass replayed at a
// later row still covers every key), and writes its running maximum, sum and unnormalised output to part
// [T][H][S][2 + D]; attn_combine.comp merges them. With S = 1 the loop is the one over all keys, as before.
// Loops: lavapipe (llvmpipe's gallivm) ends every loop of an invocation once 65535 iterations of all its loops
// together have run (LP_MAX_TGSI_LOOP_ITERATIONS, a guard against endless loops), silently: walking 16k keys at
// d = 256 with a loop step per product term (2·D per block) crossed it and gave NMSE 5e-2. The dot products and
// the weighted V sums go 8 terms per step in the same order (same bits), so one workgroup walks ~8× more keys
// there; VK_ATTN_LOOP_ITERS (vk_internal.h) is what the host checks it against.
#version 450
#include "common.glsl"

#define BLOCK 128u
#define MAX_D 512u
layout(push_constant) uniform Push {
    uint64_t q, k, v, out_;
    uint T, pos0, H, Hkv, D;
    float scale;
    uint64_t gate; // 0, or the sigmoid output gate fused (mul_sigmoid's bits): out *= σ(gate[t·g_row + h·g_head + d])
    uint g_row, g_head;
    uint64_t rows_at; // 0, or int32 [T] on the device: each query's cache row (instead of pos0 + t)
    uint64_t part;    // S > 1: the partials, [T][H][S][2 + D] floats (m, l, then the D sums)
    uint S;
} p;
layout(local_size_x = 128) in;
shared float qs[MAX_D];
shared float pr[BLOCK];
shared float red[BLOCK];

void main() {
    const uint tid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, sp = gl_WorkGroupID.z;
    const uint D = p.D, kvs = p.Hkv * D, hk = h / (p.H / p.Hkv);
    F32 Q = F32(p.q), K = F32(p.k), V = F32(p.v), O = F32(p.out_);
    const uint qo = (t * p.H + h) * D;
    for (uint d = tid; d < D; d += BLOCK) qs[d] = Q.v[qo + d];
    barrier();
    const uint n_keys = (p.rows_at != 0ul ? uint(I32(p.rows_at).v[t]) : p.pos0 + t) + 1u;
    const uint chunk = p.S == 1u ? n_keys : ((n_keys + p.S - 1u) / p.S + BLOCK - 1u) / BLOCK * BLOCK;
    const uint k_beg = min(sp * chunk, n_keys), k_end = min(k_beg + chunk, n_keys);
    float m = -1.0 / 0.0, l = 0.0;
    float acc[MAX_D / BLOCK];
    for (uint i = 0u; i < MAX_D / BLOCK; i++) acc[i] = 0.0;
    for (uint k0 = k_beg; k0 < k_end; k0 += BLOCK) {
        const uint key = k0 + tid;
        float s = -1.0 / 0.0;
        if (key < k_end) {
            s = 0.0;
            const uint ko = key * kvs + hk * D;
            uint d = 0u;
            for (; d + 8u <= D; d += 8u) { // 8 at a time, in order (the same sum): see the note on loops above
                s += qs[d] * K.v[ko + d];
                s += qs[d + 1u] * K.v[ko + d + 1u];
                s += qs[d + 2u] * K.v[ko + d + 2u];
                s += qs[d + 3u] * K.v[ko + d + 3u];
                s += qs[d + 4u] * K.v[ko + d + 4u];
                s += qs[d + 5u] * K.v[ko + d + 5u];
                s += qs[d + 6u] * K.v[ko + d + 6u];
                s += qs[d + 7u] * K.v[ko + d + 7u];
            }
            for (; d < D; d++) s += qs[d] * K.v[ko + d];
            s *= p.scale;
        }
        red[tid] = s;
        barrier();
        for (uint st = BLOCK / 2u; st > 0u; st >>= 1) {
            if (tid < st) red[tid] = max(red[tid], red[tid + st]);
            barrier();
        }
        const float mn = max(m, red[0]);
        barrier();
        const float e = key < k_end ? exp(s - mn) : 0.0;
        pr[tid] = e;
        red[tid] = e;
        barrier();
        for (uint st = BLOCK / 2u; st > 0u; st >>= 1) {
            if (tid < st) red[tid] += red[tid + st];
            barrier();
        }
        const float corr = exp(m - mn);
        l = l * corr + red[0];
        m = mn;
        const uint nb = min(BLOCK, k_end - k0);
        for (uint i = 0u; i < MAX_D / BLOCK; i++) {
            const uint d = tid + i * BLOCK;
            if (d >= D) break;
            float a = acc[i] * corr;
            const uint vo = k0 * kvs + hk * D + d;
            uint j = 0u;
            for (; j + 8u <= nb; j += 8u) {
                a += pr[j] * V.v[vo + j * kvs];
                a += pr[j + 1u] * V.v[vo + (j + 1u) * kvs];
                a += pr[j + 2u] * V.v[vo + (j + 2u) * kvs];
                a += pr[j + 3u] * V.v[vo + (j + 3u) * kvs];
                a += pr[j + 4u] * V.v[vo + (j + 4u) * kvs];
                a += pr[j + 5u] * V.v[vo + (j + 5u) * kvs];
                a += pr[j + 6u] * V.v[vo + (j + 6u) * kvs];
                a += pr[j + 7u] * V.v[vo + (j + 7u) * kvs];
            }
            for (; j < nb; j++) a += pr[j] * V.v[vo + j * kvs];
            acc[i] = a;
        }
        barrier();
    }
    if (p.S > 1u) { // a partial: an empty split (k_beg = n_keys) writes m = -inf, l = 0, zeros
        F32 P = F32(p.part);
        const uint po = ((t * p.H + h) * p.S + sp) * (2u + D);
        if (tid == 0u) {
            P.v[po] = m;
            P.v[po + 1u] = l;
        }
        for (uint i = 0u; i < MAX_D / BLOCK; i++) {
            const uint d = tid + i * BLOCK;
            if (d < D) P.v[po + 2u + d] = acc[i];
        }
        return;
    }
    for (uint i = 0u; i < MAX_D / BLOCK; i++) {
        const uint d = tid + i * BLOCK;
        if (d >= D) continue;
        float o = acc[i] / l;
        if (p.gate != 0ul) o *= sigmoid_f(F32(p.gate).v[t * p.g_row + h * p.g_head + d]);
        O.v[qo + d] = o;
    }
}
