/* err.h — the one error type every fallible library call reports through.
 *
 * Library code never prints and never exits: a call that fails writes one line into an Err and returns
 * -1 (or NULL). The CLI and server decide what to do with the line. Invariants that can only break by a
 * bug in deltallm use ASSERT, which is always on. */
#ifndef DL_BASE_ERR_H
#define DL_BASE_ERR_H

#include <stdarg.h>

typedef struct Err {
    char msg[512];
} Err;

/* Formats the message (first writer wins: a later err_set does not overwrite an earlier one unless the
 * message is empty) and returns -1 so callers can write `return err_set(err, "...")`. err may be NULL. */
int err_set(Err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int err_setv(Err *err, const char *fmt, va_list ap);
/* Prepends "prefix: " to an existing message (for adding context such as a file name). */
void err_prefix(Err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(Err *err);

void assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define ASSERT(x) ((x) ? (void)0 : assert_fail(#x, __FILE__, __LINE__))

#endif
