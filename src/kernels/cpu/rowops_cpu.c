/* rowops_cpu.c — picks the SiLU / SwiGLU row and the norm implementations for an ISA level. */
#include "kernels/cpu/kernels_cpu.h"

void silu_rows_avx512(const OpCtx *c, const float *x, float *y, int rows, int n);
void swiglu_rows_avx512(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n);
void silu_rows_avx2(const OpCtx *c, const float *x, float *y, int rows, int n);
void swiglu_rows_avx2(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n);

void norm_rows_avx512(const NormRows *a);
void mul_sigmoid_avx512(float *o, const float *g, int n);
bool sigmoid_fast_ok(void); /* norm_avx512.c: its expf gives the running libm's bits */

void rowops_cpu_select(Isa isa, SiluRowsFn *silu, SwigluRowsFn *swiglu) {
    switch (isa) {
    case ISA_AVX512: *silu = silu_rows_avx512, *swiglu = swiglu_rows_avx512; break;
    case ISA_AVX2: *silu = silu_rows_avx2, *swiglu = swiglu_rows_avx2; break;
    default: *silu = silu_rows_ref, *swiglu = swiglu_rows_ref; break;
    }
}

NormRowsFn norm_rows_cpu_select(Isa isa) { return isa == ISA_AVX512 ? norm_rows_avx512 : norm_rows_ref; }

/* the AVX-512 sigmoid gate only on AVX-512 machines whose libm it reproduces (every table is built on any CPU) */
MulSigmoidFn mul_sigmoid_cpu_select(Isa isa) {
    return isa == ISA_AVX512 && isa_supported(ISA_AVX512) && sigmoid_fast_ok() ? mul_sigmoid_avx512 : mul_sigmoid_ref;
}
