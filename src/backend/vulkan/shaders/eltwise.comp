// eltwise.comp — the elementwise row ops (vk_ops.c: EltOp), over rows × heads vectors of n with strides:
// element i of vector (r, h) of operand a is at a + r·a_row + h·a_head + i (b likewise). Grid: x covers n
// (256 per group), y rows, z heads; each loops when the grid is capped at 65535 groups.
#version 450
#include "common.glsl"

#define OP_ADD 0u         // a += b
#define OP_COPY 1u        // a = b
#define OP_SIGMOID 2u     // a = σ(a)
#define OP_SILU 3u        // a = silu(b)
#define OP_SWIGLU 4u      // a = silu(b) · c
#define OP_ADD_SCALED 5u  // a[r] += b[r] · c[r]
#define OP_MUL_SIGMOID 6u // a *= σ(b)
#define OP_GATHER 7u      // a[r] = b[c[r]]
#define OP_SCATTER 8u     // a[c[r]] = b[r]
#define OP_COMBINE 9u     // a[r] = Σ_s b[r·k + s] · c[r·k + s], in slot order
#define OP_BIAS_ACT 10u   // a = act(a + b[i]) (b optional: address 0), act k: 0 none, 1 GELU (tanh form)

layout(push_constant) uniform Push {
    uint64_t a, b, c;
    uint n, rows, heads, op, k;
    uint a_row, a_head, b_row, b_head;
} p;
layout(local_size_x = 256) in;

void main() {
    F32 A = F32(p.a), B = F32(p.b), C = F32(p.c);
    I32 IX = I32(p.c);
    for (uint h = gl_WorkGroupID.z; h < p.heads; h += gl_NumWorkGroups.z)
        for (uint r = gl_WorkGroupID.y; r < p.rows; r += gl_NumWorkGroups.y)
            for (uint i = gl_GlobalInvocationID.x; i < p.n; i += gl_NumWorkGroups.x * 256u) {
                const uint ai = r * p.a_row + h * p.a_head + i, bi = r * p.b_row + h * p.b_head + i;
                switch (p.op) {
                case OP_ADD: A.v[ai] += B.v[bi]; break;
                case OP_COPY: A.v[ai] = B.v[bi]; break;
                case OP_SIGMOID: A.v[ai] = sigmoid_f(A.v[ai]); break;
                case OP_SILU: A.v[ai] = silu_f(B.v[bi]); break;
                case OP_SWIGLU: A.v[ai] = silu_f(B.v[bi]) * C.v[bi]; break;
                case OP_ADD_SCALED: A.v[ai] += B.v[bi] * C.v[r]; break;
                case OP_MUL_SIGMOID: A.v[ai] *= sigmoid_f(B.v[bi]); break;
                case OP_GATHER: A.v[ai] = B.v[uint(IX.v[r]) * p.b_row + i]; break;
                case OP_SCATTER: A.v[uint(IX.v[r]) * p.a_row + i] = B.v[bi]; break;
                case OP_BIAS_ACT: {
                    float x = A.v[ai];
                    if (p.b != 0ul) x += B.v[i];
                    A.v[ai] = p.k == 1u ? gelu_f(x) : x;
                    break;
                }
                case OP_COMBINE: {
                    float s = B.v[(r * p.k) * p.n + i] * C.v[r * p.k];
                    for (uint q = 1u; q < p.k; q++) s += B.v[(r * p.k + q) * p.n + i] * C.v[r * p.k + q];
                    A.v[ai] = s;
                    break;
                }
                }
            }
}
