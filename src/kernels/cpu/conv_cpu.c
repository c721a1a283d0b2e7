/* conv_cpu.c — picks the causal conv + SiLU implementations (one sequence, many) for an ISA level (conv_simd.h). */
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/seq_kernels.h"

ConvSiluFn conv_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX512: return conv_silu_avx512;
    case ISA_AVX2: return conv_silu_avx2;
    default: return conv_silu_ref;
    }
}

ConvSiluSeqsFn conv_seqs_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX512: return conv_silu_seqs_avx512;
    case ISA_AVX2: return conv_silu_seqs_avx2;
    default: return conv_silu_seqs_ref;
    }
}
