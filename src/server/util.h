/* util.h — small pieces the server's files share: a growable byte buffer, a 64-bit hash (token-prefix
 * keys and file checksums), clocks, random ids and the log.
 *
 * The log writes one line per call to stderr: "2026-01-02 03:04:05.678 I message". Levels: E (error),
 * W (warning), I (info), D (debug, only with srv_log_verbose). Thread-safe. Messages carry client text
 * (paths, field names, roles): every control character and every byte that is not part of valid UTF-8 is
 * written escaped (\n, \r, \t, \xNN), so a client can neither start a forged line nor send terminal
 * escape sequences to whoever reads the log. */
#ifndef DL_SERVER_UTIL_H
#define DL_SERVER_UTIL_H

#include "base/clock.h" /* now_s: monotonic seconds */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

double wall_s(void);  /* seconds since the epoch */
/* Fills out[0..n) with random letters and digits and NUL-terminates it (out holds n + 1 bytes). */
void random_alnum(char *out, size_t n);
uint64_t random_u64(void);

/* ------------------------------------------------------------------------------------------ log */

enum { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };
void srv_log_verbose(bool on);
void srv_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Where the log goes (NULL: stderr). For tests. */
void srv_log_stream(FILE *f);
/* text[0..n) with control characters and invalid UTF-8 escaped as in the log, appended to out. */
void log_escape(SBuf *out, const char *text, size_t n);

/* ------------------------------------------------------------------------------------------ UTF-8 */

/* Length of the valid UTF-8 sequence at p[0..n) (1-4; shortest form, no surrogates, ≤ U+10FFFF), or 0. */
size_t utf8_seq_len(const unsigned char *p, size_t n);
/* Offset of the first byte that is not valid UTF-8, or n when all of it is. */
size_t utf8_invalid_at(const char *p, size_t n);
/* Appends text to out with every invalid byte replaced by U+FFFD. */
void utf8_sanitize(SBuf *out, const char *text, size_t n);

/* The value of a hexadecimal digit, or -1. */
int hex_digit(int c);

/* Constant-time comparison of two byte strings (time depends only on the lengths). */
bool const_time_equal(const char *a, size_t na, const char *b, size_t nb);

#endif
