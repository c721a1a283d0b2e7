// dequant.glsl — one weight format's dequantization on the device, selected by FMT_<name> (the Makefile
// compiles each per-format kernel once per format). It gives
//   FMT_BLOCK   elements per block (the float formats count 32 elements as a block)
//   FMT_BYTES   bytes per block
//   FMT_FLOAT   1 for f32 / f16 / bf16 (rows of any length: the last block of a row may be partial)
//   dq32(blk, sub, v)  v[j] = element 32·sub + j of the block at address blk (sub < FMT_BLOCK / 32)
// Each follows its to_float in src/gguf/quant_*.c (the layouts are ggml's, src/gguf/quant_blocks.h); the
// i-quant grids and the IQ4 / MXFP4 levels come from the device's table buffer (vk_tables.h) at g_tab.
// A kernel of two formats (mm_vec's mixed pairs) includes it a second time through dequant_b.glsl: the
// helpers below are defined once.
#ifndef DEQUANT_HELPERS
#define DEQUANT_HELPERS
#include "../vk_tables.h"

uint64_t g_tab;
uint tab(uint i) { return U32(g_tab).v[i]; }
uint ksign(uint i) { return (tab(VKT_KSIGNS + (i >> 2)) >> ((i & 3u) * 8u)) & 0xffu; }
float sgn(uint signs, uint j) { return ((signs >> j) & 1u) != 0u ? -1.0 : 1.0; }
// byte j of a 64-bit grid entry at word offset base + 2·idx
uint grid8(uint base, uint idx, uint j) { return (tab(base + 2u * idx + (j >> 2)) >> ((j & 3u) * 8u)) & 0xffu; }
#endif

#if defined(FMT_f32)
#define FMT_BLOCK 32
#define FMT_BYTES 128
#define FMT_FLOAT 1
void dq32(uint64_t blk, uint sub, out float v[32]) {
    for (uint j = 0u; j < 32u; j++) v[j] = uintBitsToFloat(ld32(blk + 4u * j));
}
#elif defined(FMT_f16) || defined(FMT_bf16)
#define FMT_BLOCK 32
#define FMT_BYTES 64
#define FMT_FLOAT 1
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint w[16];
    LD_WORDS(w, blk, 16u);
    for (uint j = 0u; j < 16u; j++) {
#if defined(FMT_f16)
        v[2u * j] = h2f(w[j] & 0xffffu);
        v[2u * j + 1u] = h2f(w[j] >> 16);
#else
        v[2u * j] = bf2f(w[j] & 0xffffu);
        v[2u * j + 1u] = bf2f(w[j] >> 16);
#endif
    }
}
#elif defined(FMT_q4_0) || defined(FMT_iq4_nl)
#define FMT_BLOCK 32
#define FMT_BYTES 18
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint w[5];
    LD_WORDS(w, blk, 5u); // d (2 bytes) + 16 bytes of nibbles
    const float d = h2f(w[0] & 0xffffu);
    for (uint j = 0u; j < 16u; j++) {
        const uint q = BYTE(w, j + 2u);
#if defined(FMT_q4_0)
        v[j] = float(int(q & 15u) - 8) * d;
        v[j + 16u] = float(int(q >> 4) - 8) * d;
#else
        v[j] = d * float(int(tab(VKT_KV_IQ4NL + (q & 15u))));
        v[j + 16u] = d * float(int(tab(VKT_KV_IQ4NL + (q >> 4))));
#endif
    }
}
#elif defined(FMT_q4_1)
#define FMT_BLOCK 32
#define FMT_BYTES 20
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint w[5];
    LD_WORDS(w, blk, 5u);
    const float d = h2f(w[0] & 0xffffu), m = h2f(w[0] >> 16);
    for (uint j = 0u; j < 16u; j++) {
        const uint q = BYTE(w, j + 4u);
        v[j] = float(q & 15u) * d + m;
        v[j + 16u] = float(q >> 4) * d + m;
    }
}
#elif defined(FMT_q5_0) || defined(FMT_q5_1)
#define FMT_BLOCK 32
#if defined(FMT_q5_0)
#define FMT_BYTES 22
#define Q5_QH 2u
#else
#define FMT_BYTES 24
#define Q5_QH 4u
#endif
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint w[6];
    LD_WORDS(w, blk, 6u);
    const float d = h2f(w[0] & 0xffffu);
#if defined(FMT_q5_1)
    const float m = h2f(w[0] >> 16);
#endif
    const uint qh = BYTE(w, Q5_QH) | BYTE(w, Q5_QH + 1u) << 8 | BYTE(w, Q5_QH + 2u) << 16 | BYTE(w, Q5_QH + 3u) << 24;
    for (uint j = 0u; j < 16u; j++) {
        const uint q = BYTE(w, Q5_QH + 4u + j);
        const uint lo = (q & 15u) | ((qh >> j) & 1u) << 4, hi = (q >> 4) | ((qh >> (j + 16u)) & 1u) << 4;
#if defined(FMT_q5_0)
        v[j] = float(int(lo) - 16) * d;
        v[j + 16u] = float(int(hi) - 16) * d;
#else
        v[j] = float(lo) * d + m;
        v[j + 16u] = float(hi) * d + m;
#endif
    }
}
#elif defined(FMT_q8_0)
#define FMT_BLOCK 32
#define FMT_BYTES 34
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint w[9];
    LD_WORDS(w, blk, 9u);
    const float d = h2f(w[0] & 0xffffu);
    for (uint j = 0u; j < 32u; j++) v[j] = float(SBYTE(w, j + 2u)) * d;
}
#elif defined(FMT_mxfp4)
#define FMT_BLOCK 32
#define FMT_BYTES 17
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint w[5];
    LD_WORDS(w, blk, 5u);
    const uint e = BYTE(w, 0u);
    const float d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23); // 2^(e-128), as quant_e8m0_half
    for (uint j = 0u; j < 16u; j++) {
        const uint q = BYTE(w, j + 1u);
        v[j] = float(int(tab(VKT_KV_MXFP4 + (q & 15u)))) * d;
        v[j + 16u] = float(int(tab(VKT_KV_MXFP4 + (q >> 4)))) * d;
    }
}
#elif defined(FMT_q2_K)
#define FMT_BLOCK 256
#define FMT_BYTES 84
// | scales[16] (scale | min << 4) | qs[64] | d | dmin |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const uint h = sub >> 2, s = sub & 3u;
    uint q[8];
    LD_WORDS(q, blk + 16u + 32u * h, 8u);
    const uint dd = ld32(blk + 80u);
    const float d = h2f(dd & 0xffffu), dmin = h2f(dd >> 16);
    const uint sc2 = ld16(blk + 2u * sub);
    for (uint half_ = 0u; half_ < 2u; half_++) {
        const uint sc = (sc2 >> (8u * half_)) & 0xffu;
        const float dl = d * float(sc & 15u), ml = dmin * float(sc >> 4);
        for (uint l = 16u * half_; l < 16u * half_ + 16u; l++) v[l] = dl * float((BYTE(q, l) >> (2u * s)) & 3u) - ml;
    }
}
#elif defined(FMT_q3_K)
#define FMT_BLOCK 256
#define FMT_BYTES 110
// | hmask[32] | qs[64] | scales[12] | d |
int q3k_scale(uint j, uint s[3]) {
    const uint lo = j < 8u ? BYTE(s, j) & 15u : BYTE(s, j - 8u) >> 4;
    const uint hi = (BYTE(s, 8u + (j & 3u)) >> (2u * (j >> 2))) & 3u;
    return int(lo | hi << 4) - 32;
}
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const uint h = sub >> 2, s = sub & 3u;
    uint hm[8], q[8], sc[3];
    LD_WORDS(hm, blk, 8u);
    LD_WORDS(q, blk + 32u + 32u * h, 8u);
    LD_WORDS(sc, blk + 96u, 3u);
    const float d = h2f(ld16(blk + 108u));
    for (uint half_ = 0u; half_ < 2u; half_++) {
        const float dl = d * float(q3k_scale(2u * sub + half_, sc));
        for (uint l = 16u * half_; l < 16u * half_ + 16u; l++) {
            const int low = int((BYTE(q, l) >> (2u * s)) & 3u);
            v[l] = dl * float(low - (((BYTE(hm, l) >> (4u * h + s)) & 1u) != 0u ? 0 : 4));
        }
    }
}
#elif defined(FMT_q4_K) || defined(FMT_q5_K)
#define FMT_BLOCK 256
#if defined(FMT_q4_K)
#define FMT_BYTES 144
#define QK_QS 16u
#else
#define FMT_BYTES 176
#define QK_QS 48u
#endif
// | d | dmin | scales[12] | (q5_K: qh[32]) | qs[128] |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint hd[4], q[8];
    LD_WORDS(hd, blk, 4u); // d, dmin, scales
    const float d = h2f(hd[0] & 0xffffu), dmin = h2f(hd[0] >> 16);
    uint sc, m;
    if (sub < 4u) {
        sc = BYTE(hd, 4u + sub) & 63u;
        m = BYTE(hd, 8u + sub) & 63u;
    } else {
        sc = (BYTE(hd, 8u + sub) & 15u) | (BYTE(hd, sub) >> 6) << 4;
        m = (BYTE(hd, 8u + sub) >> 4) | (BYTE(hd, 4u + sub) >> 6) << 4;
    }
    const float d1 = d * float(sc), m1 = dmin * float(m);
    LD_WORDS(q, blk + QK_QS + 32u * (sub >> 1), 8u);
    const uint shift = 4u * (sub & 1u);
#if defined(FMT_q5_K)
    uint qh[8];
    LD_WORDS(qh, blk + 16u, 8u);
#endif
    for (uint l = 0u; l < 32u; l++) {
        uint x = (BYTE(q, l) >> shift) & 15u;
#if defined(FMT_q5_K)
        x |= ((BYTE(qh, l) >> sub) & 1u) << 4;
#endif
        v[l] = d1 * float(x) - m1;
    }
}
#elif defined(FMT_q6_K)
#define FMT_BLOCK 256
#define FMT_BYTES 210
// | ql[128] | qh[64] | scales[16] (int8) | d |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const uint h = sub >> 2, r = sub & 3u;
    uint ql[8], qh[8];
    LD_WORDS(ql, blk + 64u * h + 32u * (r & 1u), 8u);
    LD_WORDS(qh, blk + 128u + 32u * h, 8u);
    const uint sc2 = ld16(blk + 192u + 2u * sub);
    const float d = h2f(ld16(blk + 208u));
    for (uint half_ = 0u; half_ < 2u; half_++) {
        const float dl = d * float(int(sc2 << (24u - 8u * half_)) >> 24);
        for (uint l = 16u * half_; l < 16u * half_ + 16u; l++) {
            const uint low = (BYTE(ql, l) >> (4u * (r >> 1))) & 15u, high = (BYTE(qh, l) >> (2u * r)) & 3u;
            v[l] = dl * float(int(low | high << 4) - 32);
        }
    }
}
#elif defined(FMT_iq2_xxs)
#define FMT_BLOCK 256
#define FMT_BYTES 66
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const float d = h2f(ld16(blk));
    const uint a0 = ld32(blk + 2u + 8u * sub), a1 = ld32(blk + 6u + 8u * sub);
    const float db = d * (0.5 + float(a1 >> 28)) * 0.25;
    for (uint l = 0u; l < 4u; l++) {
        const uint g = (a0 >> (8u * l)) & 255u, signs = ksign((a1 >> (7u * l)) & 127u);
        for (uint j = 0u; j < 8u; j++) v[8u * l + j] = db * float(grid8(VKT_IQ2XXS, g, j)) * sgn(signs, j);
    }
}
#elif defined(FMT_iq2_xs)
#define FMT_BLOCK 256
#define FMT_BYTES 74
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const float d = h2f(ld16(blk));
    const uint sc = ld8(blk + 66u + sub);
    uint qs[2];
    LD_WORDS(qs, blk + 2u + 8u * sub, 2u);
    for (uint l = 0u; l < 4u; l++) {
        const float db = d * (0.5 + float(l < 2u ? sc & 15u : sc >> 4)) * 0.25;
        const uint q = (qs[l >> 1] >> (16u * (l & 1u))) & 0xffffu;
        const uint signs = ksign(q >> 9);
        for (uint j = 0u; j < 8u; j++) v[8u * l + j] = db * float(grid8(VKT_IQ2XS, q & 511u, j)) * sgn(signs, j);
    }
}
#elif defined(FMT_iq2_s)
#define FMT_BLOCK 256
#define FMT_BYTES 82
// | d | qs[32] (grid index low bytes) | signs[32] | qh[8] | scales[8] |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const float d = h2f(ld16(blk));
    const uint sc = ld8(blk + 74u + sub), qh = ld8(blk + 66u + sub);
    const uint qs = ld32(blk + 2u + 4u * sub), sg = ld32(blk + 34u + 4u * sub);
    for (uint l = 0u; l < 4u; l++) {
        const float db = d * (0.5 + float(l < 2u ? sc & 15u : sc >> 4)) * 0.25;
        const uint idx = ((qs >> (8u * l)) & 255u) | ((qh << (8u - 2u * l)) & 0x300u);
        const uint signs = (sg >> (8u * l)) & 255u;
        for (uint j = 0u; j < 8u; j++) v[8u * l + j] = db * float(grid8(VKT_IQ2S, idx, j)) * sgn(signs, j);
    }
}
#elif defined(FMT_iq3_xxs)
#define FMT_BLOCK 256
#define FMT_BYTES 98
// | d | qs[64] (grid indices) | 8 × u32 (signs, scale) |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const float d = h2f(ld16(blk));
    const uint w = ld32(blk + 66u + 4u * sub);
    uint qs[2];
    LD_WORDS(qs, blk + 2u + 8u * sub, 2u);
    const float db = d * (0.5 + float(w >> 28)) * 0.5;
    for (uint l = 0u; l < 4u; l++) {
        const uint signs = ksign((w >> (7u * l)) & 127u);
        const uint g1 = tab(VKT_IQ3XXS + BYTE(qs, 2u * l)), g2 = tab(VKT_IQ3XXS + BYTE(qs, 2u * l + 1u));
        for (uint j = 0u; j < 4u; j++) {
            v[8u * l + j] = db * float((g1 >> (8u * j)) & 255u) * sgn(signs, j);
            v[8u * l + j + 4u] = db * float((g2 >> (8u * j)) & 255u) * sgn(signs, j + 4u);
        }
    }
}
#elif defined(FMT_iq3_s)
#define FMT_BLOCK 256
#define FMT_BYTES 110
// | d | qs[64] | qh[8] | signs[32] | scales[4] |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const float d = h2f(ld16(blk));
    const float db = d * float(1u + 2u * ((ld8(blk + 106u + (sub >> 1)) >> (4u * (sub & 1u))) & 15u));
    uint qs[2];
    LD_WORDS(qs, blk + 2u + 8u * sub, 2u);
    const uint qh = ld8(blk + 66u + sub), sg = ld32(blk + 74u + 4u * sub);
    for (uint l = 0u; l < 4u; l++) {
        const uint g1 = tab(VKT_IQ3S + (BYTE(qs, 2u * l) | ((qh << (8u - 2u * l)) & 256u)));
        const uint g2 = tab(VKT_IQ3S + (BYTE(qs, 2u * l + 1u) | ((qh << (7u - 2u * l)) & 256u)));
        const uint signs = (sg >> (8u * l)) & 255u;
        for (uint j = 0u; j < 4u; j++) {
            v[8u * l + j] = db * float((g1 >> (8u * j)) & 255u) * sgn(signs, j);
            v[8u * l + j + 4u] = db * float((g2 >> (8u * j)) & 255u) * sgn(signs, j + 4u);
        }
    }
}
#elif defined(FMT_iq1_s)
#define FMT_BLOCK 256
#define FMT_BYTES 50
// | d | qs[32] | qh[8] (u16) |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const float d = h2f(ld16(blk));
    const uint qh = ld16(blk + 34u + 2u * sub), qs = ld32(blk + 2u + 4u * sub);
    const float dl = d * float(2u * ((qh >> 12) & 7u) + 1u);
    const float delta = (qh & 0x8000u) != 0u ? -0.125 : 0.125;
    for (uint l = 0u; l < 4u; l++) {
        const uint idx = ((qs >> (8u * l)) & 255u) | (((qh >> (3u * l)) & 7u) << 8);
        for (uint j = 0u; j < 8u; j++) v[8u * l + j] = dl * (float(int(grid8(VKT_IQ1S, idx, j) << 24) >> 24) + delta);
    }
}
#elif defined(FMT_iq1_m)
#define FMT_BLOCK 256
#define FMT_BYTES 56
// | qs[32] | qh[16] | scales[8] (3-bit sub-block scales, the fp16 scale in the top nibbles) |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    uint sc[2];
    LD_WORDS(sc, blk + 48u, 2u);
    const uint s0 = sc[0] & 0xffffu, s1 = sc[0] >> 16, s2 = sc[1] & 0xffffu, s3 = sc[1] >> 16;
    const float d = h2f((s0 >> 12) | ((s1 >> 8) & 0x00f0u) | ((s2 >> 4) & 0x0f00u) | (s3 & 0xf000u));
    const uint s = (sc[(sub >> 1) >> 1] >> (16u * ((sub >> 1) & 1u))) & 0xffffu;
    const float dl0 = d * float(2u * ((s >> (6u * (sub & 1u))) & 7u) + 1u);
    const float dl1 = d * float(2u * ((s >> (6u * (sub & 1u) + 3u)) & 7u) + 1u);
    const uint qs = ld32(blk + 4u * sub), qh = ld16(blk + 32u + 2u * sub);
    for (uint l = 0u; l < 4u; l++) {
        const uint nib = (qh >> (8u * (l >> 1) + 4u * (l & 1u))) & 15u;
        const float delta = (nib & 8u) != 0u ? -0.125 : 0.125;
        const uint idx = ((qs >> (8u * l)) & 255u) | (nib & 7u) << 8;
        const float dl = l < 2u ? dl0 : dl1;
        for (uint j = 0u; j < 8u; j++) v[8u * l + j] = dl * (float(int(grid8(VKT_IQ1S, idx, j) << 24) >> 24) + delta);
    }
}
#elif defined(FMT_iq4_xs)
#define FMT_BLOCK 256
#define FMT_BYTES 136
// | d | scales_h (u16) | scales_l[4] | qs[128] |
void dq32(uint64_t blk, uint sub, out float v[32]) {
    const uint hd = ld32(blk);
    const float d = h2f(hd & 0xffffu);
    const uint sh = hd >> 16;
    const int ls = int(((ld8(blk + 4u + (sub >> 1)) >> (4u * (sub & 1u))) & 15u) | ((sh >> (2u * sub)) & 3u) << 4) - 32;
    const float dl = d * float(ls);
    uint q[4];
    LD_WORDS(q, blk + 8u + 16u * sub, 4u);
    for (uint j = 0u; j < 16u; j++) {
        const uint b = BYTE(q, j);
        v[j] = dl * float(int(tab(VKT_KV_IQ4NL + (b & 15u))));
        v[j + 16u] = dl * float(int(tab(VKT_KV_IQ4NL + (b >> 4))));
    }
}
#else
#error "dequant.glsl: no FMT_ defined"
#endif

#ifndef FMT_FLOAT
#define FMT_FLOAT 0
#endif
#define FMT_SUBS (FMT_BLOCK / 32)
