/* isa.c — see isa.h. */
#include "kernels/cpu/isa.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

typedef struct Features {
    bool probed, avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avx512vbmi, os_avx, os_avx512;
} Features;

static Features feat;

static unsigned long long xgetbv0(void) {
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}

static void probe(void) {
    if (feat.probed) return;
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        feat.fma = (c >> 12) & 1;
        feat.f16c = (c >> 29) & 1;
        const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
        if (osxsave && avx) {
            unsigned long long x = xgetbv0();
            feat.os_avx = (x & 0x6) == 0x6;         /* XMM and YMM state */
            feat.os_avx512 = (x & 0xe6) == 0xe6;    /* plus opmask and ZMM state */
        }
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        feat.avx2 = (b >> 5) & 1;
        feat.avx512f = (b >> 16) & 1;
        feat.avx512dq = (b >> 17) & 1;
        feat.avx512bw = (b >> 30) & 1;
        feat.avx512vl = (b >> 31) & 1;
        feat.avx512vnni = (c >> 11) & 1;
        feat.avx512vbmi = (c >> 1) & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) feat.avx512bf16 = (a >> 5) & 1;
    feat.probed = true;
}

bool isa_supported(Isa isa) {
    probe();
    switch (isa) {
    case ISA_REF: return true;
    case ISA_AVX2: return feat.os_avx && feat.avx2 && feat.fma && feat.f16c;
    case ISA_AVX512:
        return isa_supported(ISA_AVX2) && feat.os_avx512 && feat.avx512f && feat.avx512bw && feat.avx512vl &&
               feat.avx512dq && feat.avx512vnni;
    default: return false;
    }
}

bool isa_has_avx512_bf16(void) { return isa_supported(ISA_AVX512) && feat.avx512bf16; }
bool isa_has_avx512_vbmi(void) { return isa_supported(ISA_AVX512) && feat.avx512vbmi; }
#else
bool isa_supported(Isa isa) { return isa == ISA_REF; }
bool isa_has_avx512_bf16(void) { return false; }
bool isa_has_avx512_vbmi(void) { return false; }
#endif

const char *isa_name(Isa isa) {
    static const char *const names[ISA_COUNT] = {"ref", "avx2", "avx512"};
    return (unsigned)isa < ISA_COUNT ? names[isa] : "?";
}

Isa isa_best(void) { return isa_supported(ISA_AVX512) ? ISA_AVX512 : isa_supported(ISA_AVX2) ? ISA_AVX2 : ISA_REF; }

int isa_parse(const char *name, Isa *out, Err *err) {
    if (!name || !*name || strcmp(name, "auto") == 0) {
        *out = isa_best();
        return 0;
    }
    for (int i = 0; i < ISA_COUNT; i++)
        if (strcmp(name, isa_name((Isa)i)) == 0) {
            if (!isa_supported((Isa)i)) return err_set(err, "ISA %s: this CPU does not support it", name);
            *out = (Isa)i;
            return 0;
        }
    return err_set(err, "ISA must be auto, ref, avx2 or avx512, not '%s'", name);
}
