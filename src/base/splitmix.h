/* splitmix64: the one small seeded generator the engine uses where reproducible draws matter (the sampler, the
 * draft oracle, synthetic weights, hashing), so every stream steps the same way. Header-only. */
#ifndef DL_BASE_SPLITMIX_H
#define DL_BASE_SPLITMIX_H

#include <stdint.h>

/* the finaliser alone: a well-mixed 64-bit hash of z */
static inline uint64_t splitmix_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* the next value of the stream whose state is *s */
static inline uint64_t splitmix_next(uint64_t *s) { return splitmix_mix(*s += 0x9E3779B97F4A7C15ull); }

/* approximately normal (Irwin–Hall of 4 uniforms, variance matched): plenty for random weights, and fast */
static inline float splitmix_gauss(uint64_t *s) {
    uint64_t r = splitmix_next(s);
    float sum = 0;
    for (int i = 0; i < 4; i++) sum += (float)((r >> (16 * i)) & 0xffff) * (1.0f / 65536.0f);
    return (sum - 2.0f) * 1.7320508f;
}

#endif
