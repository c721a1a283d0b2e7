/* sampling_defaults.c — the defaults of DlSamplerExtra (llama.cpp's), alone in a file that needs nothing
 * else: the server's request parser (and its fuzz target) sets them without the engine. */
#include "deltallm.h"

void dl_sampler_extra_init(DlSamplerExtra *x) {
    *x = (DlSamplerExtra){.typical_p = 1.0f,
                          .mirostat_tau = 5.0f,
                          .mirostat_eta = 0.1f,
                          .dry_base = 1.75f,
                          .dry_allowed_length = 2,
                          .dry_penalty_last_n = -1,
                          .n_dry_breakers = 0,
                          .xtc_threshold = 0.1f,
                          .top_n_sigma = -1.0f,
                          .dynatemp_exponent = 1.0f};
}
