/* sampling_internal.h — the sampler's struct, shared by sampling.c (the default chain: penalties, top-k,
 * top-p, min-p, temperature) and sampling_llama.c (llama.cpp's further samplers and their order). */
#ifndef DL_ENGINE_SAMPLING_INTERNAL_H
#define DL_ENGINE_SAMPLING_INTERNAL_H

#include "deltallm.h"

#include <stdbool.h>

typedef struct Cand {
    int32_t id;
    float logit;
    float p;
} Cand;

typedef struct SamplerLlama SamplerLlama; /* sampling_llama.c */

struct DlSampler {
    DlSamplingParams p;
    int n_vocab;
    Cand *cand;       /* [n_vocab] */
    float *work;      /* [n_vocab] penalized logits */
    int32_t *count;   /* [n_vocab] occurrences in the window (kept zero between calls) */
    int32_t *history; /* ring of the last penalty_last_n accepted tokens */
    int hist_n, hist_pos;
    uint64_t rng;
    SamplerLlama *llama; /* NULL: the default chain only (dl_sampler_sample's bits are then unchanged) */
};

double sampler_uniform(DlSampler *s); /* the sampler's random stream: [0, 1) */

/* sampling_llama.c: NULL (and no error) when x asks for nothing beyond the default chain. */
SamplerLlama *sampler_llama_new(const DlEngine *e, const DlSamplerExtra *x, const DlSamplingParams *p, DlError *err);
void sampler_llama_free(SamplerLlama *l);
void sampler_llama_reset(DlSampler *s);
void sampler_llama_accept(DlSampler *s, int32_t token);
int32_t sampler_llama_sample(DlSampler *s, const float *logits);
/* For the tests: Mirostat's mu (NaN without the chain); marks a token as a DRY sequence breaker and / or an
 * end-of-generation token on a sampler made without a tokenizer (returns -1 without the chain). */
float sampler_llama_mu(const DlSampler *s);
int sampler_llama_mark(DlSampler *s, int32_t id, bool breaker, bool eog);

#endif
