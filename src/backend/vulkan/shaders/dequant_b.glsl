// dequant_b.glsl — the second weight format of a kernel of two (mm_vec's mixed pairs, compiled with -DFMT_<a>
// -DFMTB_<b> -DFMT_TWO): dequant.glsl included again for format b, its dq32 named dq32_b and its block
// geometry FMTB_SUBS / FMTB_BYTES; FMT_SUBS / FMT_BYTES / FMT_BLOCK / FMT_FLOAT keep format a's values.
// Include it after dequant.glsl.
const uint FMTA_SUBS_ = FMT_SUBS, FMTA_BYTES_ = FMT_BYTES, FMTA_FLOAT_ = FMT_FLOAT;
#undef FMT_BLOCK
#undef FMT_BYTES
#undef FMT_FLOAT
#undef FMT_SUBS
#undef QK_QS
#undef Q5_QH
#undef FMT_f32
#undef FMT_f16
#undef FMT_bf16
#undef FMT_q4_0
#undef FMT_q4_1
#undef FMT_q5_0
#undef FMT_q5_1
#undef FMT_q8_0
#undef FMT_iq4_nl
#undef FMT_mxfp4
#undef FMT_q2_K
#undef FMT_q3_K
#undef FMT_q4_K
#undef FMT_q5_K
#undef FMT_q6_K
#undef FMT_iq2_xxs
#undef FMT_iq2_xs
#undef FMT_iq2_s
#undef FMT_iq3_xxs
#undef FMT_iq3_s
#undef FMT_iq4_xs
#undef FMT_iq1_s
#undef FMT_iq1_m
#if defined(FMTB_f32)
#define FMT_f32
#elif defined(FMTB_f16)
#define FMT_f16
#elif defined(FMTB_bf16)
#define FMT_bf16
#elif defined(FMTB_q4_0)
#define FMT_q4_0
#elif defined(FMTB_q4_1)
#define FMT_q4_1
#elif defined(FMTB_q5_0)
#define FMT_q5_0
#elif defined(FMTB_q5_1)
#define FMT_q5_1
#elif defined(FMTB_q8_0)
#define FMT_q8_0
#elif defined(FMTB_iq4_nl)
#define FMT_iq4_nl
#elif defined(FMTB_mxfp4)
#define FMT_mxfp4
#elif defined(FMTB_q2_K)
#define FMT_q2_K
#elif defined(FMTB_q3_K)
#define FMT_q3_K
#elif defined(FMTB_q4_K)
#define FMT_q4_K
#elif defined(FMTB_q5_K)
#define FMT_q5_K
#elif defined(FMTB_q6_K)
#define FMT_q6_K
#elif defined(FMTB_iq2_xxs)
#define FMT_iq2_xxs
#elif defined(FMTB_iq2_xs)
#define FMT_iq2_xs
#elif defined(FMTB_iq2_s)
#define FMT_iq2_s
#elif defined(FMTB_iq3_xxs)
#define FMT_iq3_xxs
#elif defined(FMTB_iq3_s)
#define FMT_iq3_s
#elif defined(FMTB_iq4_xs)
#define FMT_iq4_xs
#elif defined(FMTB_iq1_s)
#define FMT_iq1_s
#elif defined(FMTB_iq1_m)
#define FMT_iq1_m
#else
#error "dequant_b.glsl: no FMTB_ defined"
#endif
#define dq32 dq32_b
#include "dequant.glsl"
#undef dq32
const uint FMTB_SUBS = FMT_SUBS, FMTB_BYTES = FMT_BYTES;
#undef FMT_BLOCK
#undef FMT_BYTES
#undef FMT_FLOAT
#undef FMT_SUBS
#define FMT_SUBS FMTA_SUBS_
#define FMT_BYTES FMTA_BYTES_
#define FMT_BLOCK (32u * FMTA_SUBS_)
#define FMT_FLOAT FMTA_FLOAT_
