/* err.c — formatting of Err messages and the always-on assertion handler. */
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int err_setv(Err *err, const char *fmt, va_list ap) {
    if (err && err->msg[0] == '\0') {
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        /* one line: fold any newline a caller passed in */
        for (char *p = err->msg; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return -1;
}

int err_set(Err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_setv(err, fmt, ap);
    va_end(ap);
    return -1;
}

void err_prefix(Err *err, const char *fmt, ...) {
    if (!err) return;
    char pre[256], old[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t n = strlen(pre);
    if (n + 2 >= sizeof err->msg) n = sizeof err->msg - 3;
    memcpy(err->msg, pre, n);
    memcpy(err->msg + n, ": ", 2);
    size_t room = sizeof err->msg - n - 3;
    size_t ol = strlen(old);
    if (ol > room) ol = room;
    memcpy(err->msg + n + 2, old, ol);
    err->msg[n + 2 + ol] = '\0';
}

void err_clear(Err *err) {
    if (err) err->msg[0] = '\0';
}

void assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "deltallm: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}
