// dn_prep_scan.comp — dn_prep.comp and dn_recurrent.comp in one dispatch for short batches (decode; backend.h
// dn_prep_scan), with the bits of the two: a workgroup takes value head j's state rows [r0, r0 + ROWS). Its 128
// threads first compute what the recurrence of those rows reads — the key head's q and k for every token (dn_prep's
// code: thread i owns channels i, i + 128, …, conv + SiLU, the same 128-thread L2 reduction) into shared memory,
// its rows' v channels and head j's gates (dn_gates' arithmetic) — then its subgroups take the rows as
// dn_recurrent does (lanes over the row's columns, the row in registers across the tokens). The q/k channels are
// recomputed by every workgroup of a key head, so the conv state is only read here: mode 1, a second dispatch
// over the channels, writes each one's new window (the last K−1 inputs) once every reader is done.
#version 450
#include "common.glsl"

#define MAX_TAPS 16u
#define MAX_PER 4u       // Dk ≤ 512
#define QK_MAX 1024u     // T·Dk (vk_seq.c)
#define ROWS 16u         // state rows per workgroup (vk_seq.c)
#define MAX_T 8u
#define MAX_PER_LANE 32u // Dk ≤ 32 × the subgroup size, as dn_recurrent
layout(push_constant) uniform Push {
    uint64_t x, w, state, gb, dt, sa, s, out_;
    int ga_off;
    uint T, C, K, key, Dk, Hk, Hv, group, ld_in, grouped, mode;
    float eps;
} p;
layout(local_size_x = 128) in;
shared float part[128];
shared float sqk[2u * QK_MAX]; // [q | k][t][Dk]
shared float sv[MAX_T * ROWS], sb[MAX_T], sg[MAX_T];

float conv_step(inout float win[MAX_TAPS], const float w[MAX_TAPS], float xin) {
    const uint K = p.K;
    win[K - 1u] = xin;
    float acc = 0.0;
    for (uint i = 0u; i < K; i++) acc = fma(win[i], w[i], acc);
    for (uint i = 0u; i + 1u < K; i++) win[i] = win[i + 1u];
    return silu_f(acc);
}

void load(uint c, out float win[MAX_TAPS], out float w[MAX_TAPS]) {
    const uint K = p.K;
    F32 W = F32(p.w), S = F32(p.state);
    for (uint i = 0u; i < K; i++) w[i] = W.v[c * K + i];
    for (uint i = 0u; i + 1u < K; i++) win[i] = S.v[c * (K - 1u) + i];
}

void main() {
    const uint tid = gl_LocalInvocationID.x;
    F32 X = F32(p.x);
    if (p.mode == 1u) { // the conv state: each channel's last K−1 inputs
        const uint c = gl_WorkGroupID.x * 128u + tid;
        if (c >= p.C) return;
        const uint K = p.K;
        F32 S = F32(p.state);
        float win[MAX_TAPS];
        for (uint i = 0u; i + 1u < K; i++) win[i] = S.v[c * (K - 1u) + i];
        for (uint t = 0u; t < p.T; t++) {
            win[K - 1u] = X.v[t * p.C + c];
            for (uint i = 0u; i + 1u < K; i++) win[i] = win[i + 1u];
        }
        for (uint i = 0u; i + 1u < K; i++) S.v[c * (K - 1u) + i] = win[i];
        return;
    }
    const uint Dk = p.Dk, Dv = p.Dk, wph = (Dv + ROWS - 1u) / ROWS;
    const uint j = gl_WorkGroupID.x / wph, r0 = (gl_WorkGroupID.x % wph) * ROWS;
    const uint kh = p.grouped != 0u ? j / (p.Hv / p.Hk) : j % p.Hk;
    for (uint which = 0u; which < 2u; which++) { // q, then k: dn_prep's head code
        const uint cb = which * p.key + kh * Dk;
        float win[MAX_PER][MAX_TAPS], w[MAX_PER][MAX_TAPS];
        for (uint m = 0u; m < MAX_PER; m++)
            if (tid + 128u * m < Dk) load(cb + tid + 128u * m, win[m], w[m]);
        for (uint t = 0u; t < p.T; t++) {
            float y[MAX_PER];
            float ss = 0.0;
            for (uint m = 0u; m < MAX_PER; m++) {
                const uint i = tid + 128u * m;
                if (i >= Dk) break;
                y[m] = conv_step(win[m], w[m], X.v[t * p.C + cb + i]);
                ss += y[m] * y[m];
            }
            ss = subgroupAdd(ss);
            if (subgroupElect()) part[gl_SubgroupID] = ss;
            barrier();
            float sum = 0.0;
            for (uint s = 0u; s < gl_NumSubgroups; s++) sum += part[s];
            barrier();
            const float scale = 1.0 / max(sqrt(sum), p.eps);
            for (uint m = 0u; m < MAX_PER; m++) {
                const uint i = tid + 128u * m;
                if (i >= Dk) break;
                sqk[which * QK_MAX + t * Dk + i] = y[m] * scale;
            }
        }
    }
    if (tid < ROWS && r0 + tid < Dv) { // this workgroup's v channels
        const uint c = 2u * p.key + j * Dv + r0 + tid;
        float win[MAX_TAPS], w[MAX_TAPS];
        load(c, win, w);
        for (uint t = 0u; t < p.T; t++) sv[t * ROWS + tid] = conv_step(win, w, X.v[t * p.C + c]);
    } else if (tid >= ROWS && tid < ROWS + p.T) { // head j's gates: β = sigmoid(b), g = softplus(a + dt_bias)·ssm_a
        const uint t = tid - ROWS;
        uint off = t * p.ld_in + j;
        if (p.group != 0u) off = t * p.ld_in + (j / p.group) * 2u * p.group + j % p.group;
        const float bj = F32(p.gb).v[off], aj = F32(p.gb + uint64_t(int64_t(p.ga_off) * 4l)).v[off];
        sb[t] = sigmoid_f(bj);
        sg[t] = softplus_f(aj + F32(p.dt).v[j]) * F32(p.sa).v[j];
    }
    barrier();
    // the recurrence of rows r0 … (dn_recurrent's code, its inputs from shared memory)
    const uint lane = gl_SubgroupInvocationID, sgs = gl_SubgroupSize;
    const uint per = (Dk + sgs - 1u) / sgs;
    const float rscale = 1.0 / sqrt(float(Dv));
    F32 S = F32(p.s), O = F32(p.out_);
    for (uint rl = gl_SubgroupID; rl < ROWS; rl += gl_NumSubgroups) {
        const uint c = r0 + rl;
        if (c >= Dv) break;
        const uint gr = j * Dv + c;
        float row[MAX_PER_LANE];
        for (uint m = 0u; m < per; m++) {
            const uint i = lane + m * sgs;
            row[m] = i < Dk ? S.v[gr * Dk + i] : 0.0;
        }
        for (uint t = 0u; t < p.T; t++) {
            const uint qk = t * Dk;
            const float decay = exp(sg[t]), beta = sb[t];
            float kd = 0.0;
            for (uint m = 0u; m < per; m++) {
                const uint i = lane + m * sgs;
                row[m] *= decay;
                if (i < Dk) kd += row[m] * sqk[QK_MAX + qk + i];
            }
            kd = subgroupAdd(kd);
            const float delta = (sv[t * ROWS + rl] - kd) * beta;
            float o = 0.0;
            for (uint m = 0u; m < per; m++) {
                const uint i = lane + m * sgs;
                if (i < Dk) {
                    row[m] += delta * sqk[QK_MAX + qk + i];
                    o += row[m] * sqk[qk + i];
                }
            }
            o = subgroupAdd(o);
            if (lane == 0u) O.v[(t * p.Hv + j) * Dv + c] = o * rscale;
        }
        for (uint m = 0u; m < per; m++) {
            const uint i = lane + m * sgs;
            if (i < Dk) S.v[gr * Dk + i] = row[m];
        }
    }
}
