/* matmul_cpu.c — picks the matrix-multiply implementation for an ISA level. */
#include "kernels/cpu/kernels_cpu.h"

MatmulFn matmul_cpu_select(Isa isa) {
    (void)isa;
    return matmul_ref;
}
