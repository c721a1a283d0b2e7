/* isa.h — runtime ISA dispatch. The CPU is probed once (cpuid + the OS's xsave support); each kernel
 * family then picks its variant for the best ISA level the machine has, or the level the caller asks for.
 *
 *   ISA_REF     the scalar reference (kernels/ref/), any x86-64
 *   ISA_AVX2    AVX2 + FMA + F16C                          (Haswell and later, Zen 1 and later)
 *   ISA_AVX512  AVX-512 F/BW/VL/DQ + VNNI (+ BF16 if present) (Ice Lake, Sapphire Rapids, Zen 4, Zen 5)
 * A variant file is compiled with its ISA's flags only (Makefile: *_avx2.c, *_avx512.c) and is never
 * entered unless isa_supported() says so. */
#ifndef DL_KERNELS_CPU_ISA_H
#define DL_KERNELS_CPU_ISA_H

#include <stdbool.h>

#include "base/err.h"

typedef enum Isa { ISA_REF = 0, ISA_AVX2 = 1, ISA_AVX512 = 2, ISA_COUNT } Isa;

bool isa_supported(Isa isa);
bool isa_has_avx512_bf16(void); /* AVX512_BF16 (vdpbf16ps): Zen 4+, Sapphire Rapids+ */
bool isa_has_avx512_vbmi(void); /* AVX512_VBMI (vpermb, vpermi2b, vpmultishiftqb): Ice Lake+, Zen 4+ */
/* The best level this CPU supports. */
Isa isa_best(void);
/* "ref", "avx2", "avx512" (or "auto"/NULL/"": the best) to a level this CPU supports; the one parser of
 * that option (the CLI reads it from --isa or DELTALLM_ISA). */
int isa_parse(const char *name, Isa *out, Err *err);
const char *isa_name(Isa isa);

#endif
