/* kernels_cpu.h — the fast CPU kernels behind the op table: each family has a selector that returns the
 * implementation for an ISA level (falling back to the scalar reference where it has none). The op table
 * for an ISA is assembled in ops_cpu.c. */
#ifndef DL_KERNELS_CPU_KERNELS_CPU_H
#define DL_KERNELS_CPU_KERNELS_CPU_H

#include "kernels/cpu/isa.h"
#include "kernels/ops.h"

typedef void (*MatmulFn)(const OpCtx *c, const MatW *w, const float *x, int64_t T, float *y);
typedef void (*ConvSiluFn)(const OpCtx *c, const float *x, int T, int C, int K, const float *w, float *state, float *y);
typedef void (*DeltaNetFn)(const OpCtx *c, const DeltaNetArgs *a);
typedef void (*AttentionFn)(const OpCtx *c, const AttnArgs *a);

MatmulFn matmul_cpu_select(Isa isa);          /* kernels/cpu/matmul_cpu.c */
typedef void (*MatmulSwigluFn)(const OpCtx *c, const MatW *wg, const MatW *wu, const float *x, int64_t T, float *y,
                               float *u);
MatmulSwigluFn matmul_swiglu_cpu_select(Isa isa);
ConvSiluFn conv_cpu_select(Isa isa);          /* kernels/cpu/conv_cpu.c */
DeltaNetFn deltanet_recurrent_cpu_select(Isa isa); /* kernels/cpu/deltanet_cpu.c */
DeltaNetFn deltanet_chunked_cpu_select(Isa isa);
DeltaNetFn deltanet_fused_cpu_select(Isa isa);
typedef void (*ConvSiluSeqsFn)(const OpCtx *c, const ConvSeqArgs *s, int n, int C, int K, const float *w);
typedef void (*DeltaNetSeqsFn)(const OpCtx *c, const DeltaNetArgs *a, const DeltaNetForm *form, int n);
ConvSiluSeqsFn conv_seqs_cpu_select(Isa isa);        /* kernels/cpu/conv_cpu.c */
DeltaNetSeqsFn deltanet_seqs_cpu_select(Isa isa);    /* kernels/cpu/deltanet_cpu.c */
AttentionFn attention_cpu_select(Isa isa);    /* kernels/cpu/attention_cpu.c */
typedef void (*SiluRowsFn)(const OpCtx *c, const float *x, float *y, int rows, int n);
typedef void (*SwigluRowsFn)(const OpCtx *c, const float *g, const float *u, float *y, int rows, int n);
void rowops_cpu_select(Isa isa, SiluRowsFn *silu, SwigluRowsFn *swiglu); /* kernels/cpu/rowops_cpu.c */
typedef void (*NormRowsFn)(const NormRows *a);
NormRowsFn norm_rows_cpu_select(Isa isa); /* kernels/cpu/rowops_cpu.c */
typedef void (*MulSigmoidFn)(float *o, const float *g, int n);
MulSigmoidFn mul_sigmoid_cpu_select(Isa isa); /* kernels/cpu/rowops_cpu.c */

/* The op table for an ISA level (static storage). */
const Ops *ops_cpu(Isa isa);

#endif
