/* attention_cpu.c — picks the attention implementation for an ISA level. */
#include "kernels/cpu/kernels_cpu.h"

AttentionFn attention_cpu_select(Isa isa) {
    (void)isa;
    return attention_ref;
}
