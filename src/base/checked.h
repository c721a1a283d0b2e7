/* checked.h — overflow-checked size arithmetic for everything computed from untrusted input (file
 * headers, request bodies). Each returns false on overflow and leaves *out unspecified. */
#ifndef DL_BASE_CHECKED_H
#define DL_BASE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline bool ck_add_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool ck_mul_u64(uint64_t a, uint64_t b, uint64_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool ck_add_size(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }
static inline bool ck_mul_size(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }

/* Rounds x up to a multiple of align (align > 0). */
static inline bool ck_align_u64(uint64_t x, uint64_t align, uint64_t *out) {
    uint64_t r = x % align;
    return r == 0 ? (*out = x, true) : ck_add_u64(x, align - r, out);
}

#endif
