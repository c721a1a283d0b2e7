/* util.c — see util.h: byte buffer, hash, clocks, random ids, log, constant-time compare. */
#include "server/util.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ SBuf */

static bool sbuf_reserve(SBuf *b, size_t extra) {
    if (b->oom) return false;
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra + 1) {
        if (cap > SIZE_MAX / 2) {
            b->oom = true;
            return false;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void sbuf_put(SBuf *b, const void *data, size_t n) {
    if (!sbuf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sbuf_puts(SBuf *b, const char *s) { sbuf_put(b, s, strlen(s)); }

void sbuf_printf(SBuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[512];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        sbuf_put(b, tmp, (size_t)n);
        return;
    }
    if (!sbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

void sbuf_consume(SBuf *b, size_t n) {
    if (n >= b->n) {
        b->n = 0;
    } else {
        memmove(b->p, b->p + n, b->n - n);
        b->n -= n;
    }
    if (b->p) b->p[b->n] = 0;
}

void sbuf_free(SBuf *b) {
    free(b->p);
    *b = (SBuf){0};
}

/* ------------------------------------------------------------------------------------------ hashing */

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t hash64(const void *data, size_t n, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t h1 = seed ^ 0x9E3779B97F4A7C15ull ^ (uint64_t)n, h2 = mix64(seed + 0x632BE59BD9B4E019ull);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t a, b;
        memcpy(&a, p + i, 8);
        memcpy(&b, p + i + 8, 8);
        h1 = (h1 ^ mix64(a + 0x9E3779B97F4A7C15ull)) * 0xFF51AFD7ED558CCDull;
        h2 = (h2 ^ mix64(b + 0xC4CEB9FE1A85EC53ull)) * 0xC4CEB9FE1A85EC53ull;
        h1 = (h1 << 31) | (h1 >> 33);
        h2 = (h2 << 29) | (h2 >> 35);
    }
    uint64_t tail[2] = {0, 0};
    memcpy(tail, p + i, n - i);
    h1 ^= mix64(tail[0] ^ 0x2545F4914F6CDD1Dull);
    h2 ^= mix64(tail[1] ^ 0x5851F42D4C957F2Dull);
    return mix64(h1 ^ mix64(h2 + h1));
}

/* ------------------------------------------------------------------------------------------ time, ids */

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static pthread_mutex_t rng_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t rng_state;

uint64_t random_u64(void) {
    pthread_mutex_lock(&rng_mu);
    if (!rng_state) {
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
            seed = (uint64_t)(wall_s() * 1e9) ^ ((uint64_t)getpid() << 32);
        rng_state = seed | 1;
    }
    uint64_t r = mix64(rng_state += 0x9E3779B97F4A7C15ull);
    pthread_mutex_unlock(&rng_mu);
    return r;
}

void random_alnum(char *out, size_t n) {
    static const char set[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t r = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0) r = random_u64();
        out[i] = set[(r & 0xff) % 62];
        r >>= 8;
    }
    out[n] = 0;
}

/* ------------------------------------------------------------------------------------------ log */

static bool log_verbose;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

void srv_log_verbose(bool on) { log_verbose = on; }

void srv_log(int level, const char *fmt, ...) {
    if (level == LOG_DEBUG && !log_verbose) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    char line[2048];
    int n = (int)strftime(line, sizeof line, "%Y-%m-%d %H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03ld %c ", ts.tv_nsec / 1000000, "EWID"[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    n += m;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    pthread_mutex_lock(&log_mu);
    fwrite(line, 1, (size_t)n, stderr);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}

bool const_time_equal(const char *a, size_t na, const char *b, size_t nb) {
    /* the loop runs over the expected value b: its length is not secret-dependent on the input */
    volatile unsigned char diff = (unsigned char)((na != nb) | (nb == 0));
    for (size_t i = 0; i < nb; i++) {
        unsigned char x = na ? (unsigned char)a[i % na] : 0;
        diff |= (unsigned char)(x ^ (unsigned char)b[i]);
    }
    return diff == 0;
}
