/* llama_params.h — llama.cpp's / vLLM's sampling fields of a request body (typical_p, mirostat*, dry_*, xtc_*,
 * top_n_sigma, repetition_penalty, repeat_last_n, min_tokens, samplers, n_probs) → the engine's DlSamplerExtra
 * and DlSamplingParams. The endpoints that take them list LLAMA_SAMPLING_KEYS among their accepted fields.
 * The server's defaults (serve --typical, --mirostat, ...) apply where a request leaves a sampler out. */
#ifndef DL_SERVER_LLAMA_PARAMS_H
#define DL_SERVER_LLAMA_PARAMS_H

#include <cjson/cJSON.h>

#include "deltallm.h"

typedef struct ApiError ApiError;

/* The extra samplers with their strings owned (a request's are copied into its jobs). */
typedef struct SamplerSpec {
    DlSamplerExtra x; /* x.dry_breakers / x.samplers point into the strings below */
    char **breakers;
    int n_breakers;
    char *samplers;
} SamplerSpec;

#define LLAMA_SAMPLING_KEYS                                                                                       \
    "typical_p", "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base", "dry_allowed_length",    \
        "dry_penalty_last_n", "dry_sequence_breakers", "xtc_probability", "xtc_threshold", "top_n_sigma",          \
        "repetition_penalty", "repeat_last_n", "min_tokens", "samplers", "n_probs", "dynatemp_range",                \
        "dynatemp_exponent", "typ_p"

/* Reads the fields from root: *spec (malloc'd) when any extra sampler is asked for, else NULL; repetition_penalty
 * and repeat_last_n go to *sp; n_probs (≥ 0) to *n_probs (-1 when absent). 0, or -1 with *e set (400). */
int llama_params_parse(const cJSON *root, const DlSamplerExtra *defaults, DlSamplingParams *sp, SamplerSpec **spec,
                       int *n_probs, ApiError *e);
/* grammar (a GBNF string, checked by compiling it) and json_schema (llama.cpp's top-level schema object; both
 * refused together) → *grammar / *schema (NULL when absent). */
int llama_output_parse(const cJSON *root, const char **grammar, const cJSON **schema, ApiError *e);
SamplerSpec *sampler_spec_copy(const SamplerSpec *s); /* NULL for NULL or out of memory */
void sampler_spec_free(SamplerSpec *s);

#endif
