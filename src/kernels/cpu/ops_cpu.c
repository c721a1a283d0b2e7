/* ops_cpu.c — assembles the op table of each ISA level from the kernel families' selectors. */
#include "kernels/cpu/kernels_cpu.h"

static Ops tables[ISA_COUNT];
static int built[ISA_COUNT];

const Ops *ops_cpu(Isa isa) {
    if ((unsigned)isa >= ISA_COUNT) isa = ISA_REF;
    if (!built[isa]) { /* idempotent: racing initialisations write the same values */
        tables[isa] = (Ops){
            .name = isa_name(isa),
            .matmul = matmul_cpu_select(isa),
            .matmul_swiglu = matmul_swiglu_cpu_select(isa),
            .conv_silu = conv_cpu_select(isa),
            .deltanet_recurrent = deltanet_recurrent_cpu_select(isa),
            .deltanet_chunked = deltanet_chunked_cpu_select(isa),
            .deltanet_fused = deltanet_fused_cpu_select(isa),
            .attention = attention_cpu_select(isa),
        };
        rowops_cpu_select(isa, &tables[isa].silu_rows, &tables[isa].swiglu_rows);
        built[isa] = 1;
    }
    return &tables[isa];
}
