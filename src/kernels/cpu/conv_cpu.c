/* conv_cpu.c — picks the causal conv + SiLU implementation for an ISA level. */
#include "kernels/cpu/kernels_cpu.h"

ConvSiluFn conv_cpu_select(Isa isa) {
    (void)isa;
    return conv_silu_ref;
}
