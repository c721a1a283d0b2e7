// dn_chunked.comp — the delta rule in its chunked (WY / UT) form, kernels/ref/deltanet_ref.c's
// deltanet_chunked_ref step for step: one workgroup per value head walks the chunks of 64 tokens in order.
// Per chunk, with G the cumulative log-decay:
//   A[r][c] = β_r (k_r·k_c) e^{G_r−G_c}  (c < r, shared memory)
//   U = (I + A)⁻¹ diag(β) V,  W = (I + A)⁻¹ diag(β e^G) K   (the triangular solve: thread x substitutes
//                                                            column x of U and of W down the chunk)
//   Vnew = U − W Sᵀ;  o_r = (e^{G_r} S q_r + Σ_{c≤r} e^{G_r−G_c}(q_r·k_c) Vnew_c) / √dk
//   S ← e^{G_last} S + Σ_c e^{G_last−G_c} Vnew_c k_cᵀ
// Thread x owns row x of the transposed state (value dim x), so the state needs no synchronisation; U and
// W live in a per-head scratch (device memory), A and then the masked Q·Kᵀ in shared memory.
#version 450
#include "common.glsl"

layout(buffer_reference, std430, buffer_reference_align = 4) coherent buffer CF32 { float v[]; };

#define CS 64u
layout(push_constant) uniform Push {
    uint64_t q, k, v, g, beta, s_in, s_out, out_, scratch;
    uint T, Hk, Hv, dk, dv, grouped;
} p;
layout(local_size_x = 128) in;

shared float A[CS][CS + 1u];
shared float G[CS], Bt[CS];

void main() {
    const uint tid = gl_LocalInvocationID.x, j = gl_WorkGroupID.x;
    const uint dk = p.dk, dv = p.dv, H = p.Hv;
    const uint kh = p.grouped != 0u ? j / (H / p.Hk) : j % p.Hk;
    const float scale = 1.0 / sqrt(float(dk));
    F32 Q = F32(p.q), K = F32(p.k), V = F32(p.v), Gin = F32(p.g), Bin = F32(p.beta), O = F32(p.out_);
    F32 SI = F32(p.s_in), S = F32(p.s_out);
    CF32 U = CF32(p.scratch + uint64_t(j) * uint64_t(CS * (dk + dv)) * 4ul);
    CF32 W = CF32(p.scratch + (uint64_t(j) * uint64_t(CS * (dk + dv)) + uint64_t(CS * dv)) * 4ul);
    const uint x = tid; // the state row / value column of this thread
    const uint srow = (j * dv + x) * dk;
    if (x < dv && p.s_in != p.s_out)
        for (uint i = 0u; i < dk; i++) S.v[srow + i] = SI.v[srow + i];
#define QR(t) ((((t) * p.Hk) + kh) * dk)
#define VR(t) ((((t) * H) + j) * dv)
    for (uint t0 = 0u; t0 < p.T; t0 += CS) {
        const uint C = min(CS, p.T - t0);
        if (tid < C) Bt[tid] = Bin.v[(t0 + tid) * H + j], G[tid] = Gin.v[(t0 + tid) * H + j];
        barrier();
        if (tid == 0u) {
            float gsum = 0.0;
            for (uint r = 0u; r < C; r++) gsum += G[r], G[r] = gsum;
        }
        barrier();
        // A, strictly lower
        for (uint e = tid; e < C * C; e += 128u) {
            const uint r = e / C, c = e % C;
            if (c < r) {
                float s = 0.0;
                for (uint i = 0u; i < dk; i++) s += K.v[QR(t0 + r) + i] * K.v[QR(t0 + c) + i];
                A[r][c] = Bt[r] * s * exp(G[r] - G[c]);
            }
        }
        barrier();
        // forward substitution: column x of U (x < dv) and of W (x < dk)
        for (uint r = 0u; r < C; r++) {
            if (x < dv) {
                float u = Bt[r] * V.v[VR(t0 + r) + x];
                for (uint c = 0u; c < r; c++) u -= A[r][c] * U.v[c * dv + x];
                U.v[r * dv + x] = u;
            }
            if (x < dk) {
                float w = Bt[r] * exp(G[r]) * K.v[QR(t0 + r) + x];
                for (uint c = 0u; c < r; c++) w -= A[r][c] * W.v[c * dk + x];
                W.v[r * dk + x] = w;
            }
        }
        memoryBarrierBuffer();
        barrier();
        // Vnew = U − W·S[x] (into U), against the chunk's starting state
        if (x < dv)
            for (uint r = 0u; r < C; r++) {
                float s = 0.0;
                for (uint i = 0u; i < dk; i++) s += S.v[srow + i] * W.v[r * dk + i];
                U.v[r * dv + x] -= s;
            }
        barrier(); // A is free: the masked, decayed Q·Kᵀ goes there
        for (uint e = tid; e < C * C; e += 128u) {
            const uint r = e / C, c = e % C;
            if (c <= r) {
                float s = 0.0;
                for (uint i = 0u; i < dk; i++) s += Q.v[QR(t0 + r) + i] * K.v[QR(t0 + c) + i];
                A[r][c] = s * exp(G[r] - G[c]);
            }
        }
        barrier();
        if (x < dv) {
            for (uint r = 0u; r < C; r++) {
                float s = 0.0;
                for (uint i = 0u; i < dk; i++) s += S.v[srow + i] * Q.v[QR(t0 + r) + i];
                float o = exp(G[r]) * s;
                for (uint c = 0u; c <= r; c++) o += A[r][c] * U.v[c * dv + x];
                O.v[VR(t0 + r) + x] = o * scale;
            }
            // state: S[x] ← e^{G_last} S[x] + Σ_c (e^{G_last − G_c} Vnew_c[x]) k_c, the factors kept in U's column x
            const float glast = G[C - 1u], el = exp(glast);
            for (uint c = 0u; c < C; c++) U.v[c * dv + x] *= exp(glast - G[c]);
            for (uint i = 0u; i < dk; i++) {
                float s = S.v[srow + i] * el;
                for (uint c = 0u; c < C; c++) s += U.v[c * dv + x] * K.v[QR(t0 + c) + i];
                S.v[srow + i] = s;
            }
        }
        memoryBarrierBuffer();
        barrier();
    }
}
