/* vattn.h — the vision tower's fast attention (vattn_simd.h, per ISA): one head, a block of query rows, all
 * T keys (no mask). The encoder prepares K transposed and V padded per head, and hands out blocks of rows. */
#ifndef DL_VISION_VATTN_H
#define DL_VISION_VATTN_H

#include <math.h>
#include <stdint.h>

#include "kernels/cpu/isa.h"

typedef struct VattnArgs {
    int T, tp, d, dp; /* keys; keys padded to a multiple of 16; head size; head size padded to 16 */
    float scale;
    const float *q;   /* [T] rows of stride ldq, this head's d values first */
    int64_t ldq;
    const float *kt;  /* [d][tp]: K transposed, columns ≥ T zero */
    const float *v;   /* [tp][dp]: V, rows ≥ T and columns ≥ d zero */
    float *out;       /* [T] rows of stride ldo, this head's d values written */
    int64_t ldo;
    float *inv;       /* [T] work: 1 / each row's softmax sum */
} VattnArgs;

/* Rows [q0, q0 + m) of one head; s: [m][tp] and o: [m][dp] work. */
typedef void (*VattnRowsFn)(const VattnArgs *a, int q0, int m, float *s, float *o);
void vattn_rows_avx512(const VattnArgs *a, int q0, int m, float *s, float *o);
void vattn_rows_avx2(const VattnArgs *a, int q0, int m, float *s, float *o);

/* The kernel for an ISA level; NULL for ISA_REF (the encoder's scalar attention). */
static inline VattnRowsFn vattn_select(Isa isa) {
    return isa == ISA_AVX512 && isa_supported(ISA_AVX512) ? vattn_rows_avx512
           : isa >= ISA_AVX2 && isa_supported(ISA_AVX2)   ? vattn_rows_avx2
                                                           : NULL;
}

#endif
