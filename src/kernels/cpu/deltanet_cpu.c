/* deltanet_cpu.c — picks the delta-net scan implementations for an ISA level. */
#include "kernels/cpu/kernels_cpu.h"

DeltaNetFn deltanet_recurrent_cpu_select(Isa isa) {
    (void)isa;
    return deltanet_recurrent_ref;
}

DeltaNetFn deltanet_chunked_cpu_select(Isa isa) {
    (void)isa;
    return deltanet_chunked_ref;
}
