// common.glsl — what every kernel of the Vulkan backend shares: buffers as device addresses (push constants
// carry 64-bit addresses, see vk_internal.h), byte loads at any alignment, and the activations' math.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer U32 { uint v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer V4 { vec4 v[]; };

// the 4 bytes at any address a (reads the aligned words around it; buffers have slack after their end)
uint ld32(uint64_t a) {
    const uint64_t b = a & ~uint64_t(3);
    const uint sh = uint(a & uint64_t(3)) * 8u;
    const uint lo = U32(b).v[0];
    if (sh == 0u) return lo;
    return (lo >> sh) | (U32(b).v[1] << (32u - sh));
}
uint ld16(uint64_t a) { return ld32(a) & 0xffffu; }
uint ld8(uint64_t a) { return (U32(a & ~uint64_t(3)).v[0] >> (uint(a & uint64_t(3)) * 8u)) & 0xffu; }

// n consecutive words of bytes from any address (n ≤ 16)
#define LD_WORDS(dst, a, n)                                                                     \
    {                                                                                           \
        const uint64_t b_ = (a) & ~uint64_t(3);                                                 \
        const uint sh_ = uint((a) & uint64_t(3)) * 8u;                                          \
        uint prev_ = U32(b_).v[0];                                                              \
        for (uint i_ = 0u; i_ < (n); i_++) {                                                    \
            const uint next_ = U32(b_).v[i_ + 1u];                                              \
            dst[i_] = sh_ == 0u ? prev_ : (prev_ >> sh_) | (next_ << (32u - sh_));              \
            prev_ = next_;                                                                      \
        }                                                                                       \
    }

// byte i of a word array, unsigned and signed
#define BYTE(w, i) ((w[(i) >> 2] >> (((i) & 3u) * 8u)) & 0xffu)
#define SBYTE(w, i) (int(w[(i) >> 2] << (24u - ((i) & 3u) * 8u)) >> 24)

float h2f(uint h) { return unpackHalf2x16(h).x; }
float bf2f(uint h) { return uintBitsToFloat(h << 16); }
float sigmoid_f(float x) { return 1.0 / (1.0 + exp(-x)); }
float silu_f(float x) { return x / (1.0 + exp(-x)); }
float softplus_f(float x) { return x > 20.0 ? x : log(1.0 + exp(x)); }
// ggml_gelu's tanh form; tanh(z) as 1 − 2/(e^{2z} + 1), which saturates to ±1 where e^{2z} overflows or vanishes
float gelu_f(float x) {
    const float z = 0.79788456080286535588 * x * (1.0 + 0.044715 * x * x);
    return 0.5 * x * (2.0 - 2.0 / (exp(2.0 * z) + 1.0));
}

// rows beyond a grid's 65535 groups in y: kernels loop over gl_WorkGroupID.y + k·gl_NumWorkGroups.y
