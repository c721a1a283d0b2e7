/* deltanet_cpu.c — picks the delta-net scan implementations for an ISA level (deltanet_simd.h has the
 * kernels; docs/KERNELS.md the measurements). */
#include "kernels/cpu/kernels_cpu.h"
#include "kernels/cpu/seq_kernels.h"

DeltaNetFn deltanet_recurrent_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX512: return deltanet_recurrent_avx512;
    case ISA_AVX2: return deltanet_recurrent_avx2;
    default: return deltanet_recurrent_ref;
    }
}

DeltaNetFn deltanet_chunked_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX512: return deltanet_chunked_avx512;
    case ISA_AVX2: return deltanet_chunked_avx2;
    default: return deltanet_chunked_ref;
    }
}

DeltaNetFn deltanet_fused_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX512: return deltanet_fused_avx512;
    case ISA_AVX2: return deltanet_fused_avx2;
    default: return deltanet_fused_ref;
    }
}

DeltaNetSeqsFn deltanet_seqs_cpu_select(Isa isa) {
    switch (isa) {
    case ISA_AVX512: return deltanet_seqs_avx512;
    case ISA_AVX2: return deltanet_seqs_avx2;
    default: return deltanet_seqs_ref;
    }
}

size_t deltanet_scratch_bytes(int d_k, int d_v, int n_threads) {
    if (n_threads < 1) n_threads = 1;
    return chunk_ws_floats(d_k, d_v, NULL, NULL) * sizeof(float) * (size_t)n_threads;
}
