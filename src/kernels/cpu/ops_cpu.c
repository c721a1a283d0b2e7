/* ops_cpu.c — assembles the op table of each ISA level from the kernel families' selectors. */
#include "kernels/cpu/kernels_cpu.h"

#include <pthread.h>

static Ops tables[ISA_COUNT];
static pthread_once_t built = PTHREAD_ONCE_INIT;

/* every ISA's table at once, on the first call (pthread_once: a plain flag would be a data race under C11) */
static void build_tables(void) {
    for (int i = 0; i < ISA_COUNT; i++) {
        const Isa isa = (Isa)i;
        tables[isa] = (Ops){
            .name = isa_name(isa),
            .matmul = matmul_cpu_select(isa),
            .matmul_swiglu = matmul_swiglu_cpu_select(isa),
            .conv_silu = conv_cpu_select(isa),
            .deltanet_recurrent = deltanet_recurrent_cpu_select(isa),
            .deltanet_chunked = deltanet_chunked_cpu_select(isa),
            .deltanet_fused = deltanet_fused_cpu_select(isa),
            .conv_silu_seqs = conv_seqs_cpu_select(isa),
            .deltanet_seqs = deltanet_seqs_cpu_select(isa),
            .attention = attention_cpu_select(isa),
            .norm_rows = norm_rows_cpu_select(isa),
            .mul_sigmoid = mul_sigmoid_cpu_select(isa),
        };
        rowops_cpu_select(isa, &tables[isa].silu_rows, &tables[isa].swiglu_rows);
    }
}

const Ops *ops_cpu(Isa isa) {
    if ((unsigned)isa >= ISA_COUNT) isa = ISA_REF;
    pthread_once(&built, build_tables);
    return &tables[isa];
}
