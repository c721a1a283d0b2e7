/* rowops_cpu.c — picks the SiLU / SwiGLU row and the norm implementations for an ISA level. */
#include "kernels/cpu/kernels_cpu.h"

void silu_rows_avx512(const OpCtx *c, const float *x, float *y, int rows, int n);
void swiglu_rows_avx512(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n);
void silu_rows_avx2(const OpCtx *c, const float *x, float *y, int rows, int n);
void swiglu_rows_avx2(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n);

void norm_rows_avx512(const NormRows *a);

void rowops_cpu_select(Isa isa, SiluRowsFn *silu, SwigluRowsFn *swiglu) {
    switch (isa) {
    case ISA_AVX512: *silu = silu_rows_avx512, *swiglu = swiglu_rows_avx512; break;
    case ISA_AVX2: *silu = silu_rows_avx2, *swiglu = swiglu_rows_avx2; break;
    default: *silu = silu_rows_ref, *swiglu = swiglu_rows_ref; break;
    }
}

NormRowsFn norm_rows_cpu_select(Isa isa) { return isa == ISA_AVX512 ? norm_rows_avx512 : norm_rows_ref; }
