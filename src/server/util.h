/* util.h — small pieces the server's files share: a growable byte buffer, a 64-bit hash (token-prefix
 * keys and file checksums), clocks, random ids and the log.
 *
 * The log writes one line per call to stderr: "2026-01-02 03:04:05.678 I message". Levels: E (error),
 * W (warning), I (info), D (debug, only with srv_log_verbose). Thread-safe. */
#ifndef DL_SERVER_UTIL_H
#define DL_SERVER_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------------ SBuf */

/* A growable byte buffer, always NUL-terminated when p != NULL. Zero-initialise; a failed allocation
 * sets oom and makes later appends no-ops. */
typedef struct SBuf {
    char *p;
    size_t n, cap;
    bool oom;
} SBuf;

void sbuf_put(SBuf *b, const void *data, size_t n);
void sbuf_puts(SBuf *b, const char *s);
void sbuf_printf(SBuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Removes the first n bytes. */
void sbuf_consume(SBuf *b, size_t n);
void sbuf_free(SBuf *b);

/* ------------------------------------------------------------------------------------------ hashing */

/* A 64-bit hash of n bytes, seeded; word-at-a-time multiply/xor-shift mixing. Good dispersion, not
 * cryptographic: keys are always verified against the stored tokens, checksums detect corruption. */
uint64_t hash64(const void *data, size_t n, uint64_t seed);

/* ------------------------------------------------------------------------------------------ time, ids */

double now_s(void);   /* monotonic seconds */
double wall_s(void);  /* seconds since the epoch */
/* Fills out[0..n) with random letters and digits and NUL-terminates it (out holds n + 1 bytes). */
void random_alnum(char *out, size_t n);
uint64_t random_u64(void);

/* ------------------------------------------------------------------------------------------ log */

enum { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };
void srv_log_verbose(bool on);
void srv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Constant-time comparison of two byte strings (time depends only on the lengths). */
bool const_time_equal(const char *a, size_t na, const char *b, size_t nb);

#endif
