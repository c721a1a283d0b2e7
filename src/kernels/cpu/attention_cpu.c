/* attention_cpu.c — picks the attention implementation for an ISA level: the fast kernels of
 * attention_simd.h choose by context length between the llama.cpp-mirroring kernel (bit-identical to
 * attention_ref) and the tiled online-softmax one (docs/KERNELS.md). */
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/seq_kernels.h"

AttentionFn attention_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX512: return attention_avx512;
    case ISA_AVX2: return attention_avx2;
    default: return attention_ref;
    }
}

size_t attention_fast_scratch_bytes(int n_ctx, int head_dim, int gqa_group, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    if (gqa_group < 1) gqa_group = 1;
    const size_t n_pad = (size_t)(n_ctx + 255) / 256 * 256;
    size_t per = attn_tiled_floats(head_dim); /* tiled kernel */
    /* mirror: the probabilities of all heads of a group and the 64 stream partials of one V product */
    if (per < (size_t)gqa_group * n_pad + 64 * (size_t)head_dim) per = (size_t)gqa_group * n_pad + 64 * (size_t)head_dim;
    return per * sizeof(float) * (size_t)n_threads;
}
