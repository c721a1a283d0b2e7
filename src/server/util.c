/* util.c — see util.h: byte buffer, hash, clocks, random ids, log, constant-time compare. */
#include "server/util.h"
#include "base/splitmix.h"

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

static inline uint64_t mix64(uint64_t z) { return splitmix_mix(z); }

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
static FILE *log_file;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

void srv_log_verbose(bool on) { log_verbose = on; }

void srv_log_stream(FILE *f) {
    pthread_mutex_lock(&log_mu);
    log_file = f;
    pthread_mutex_unlock(&log_mu);
}

void log_escape(SBuf *out, const char *text, size_t n) {
    const unsigned char *p = (const unsigned char *)text;
    size_t run = 0; /* start of bytes copied as they are */
    for (size_t i = 0; i < n;) {
        size_t k = p[i] >= 0x20 && p[i] < 0x7f ? 1 : p[i] >= 0x80 ? utf8_seq_len(p + i, n - i) : 0;
        if (k == 2 && p[i] == 0xC2 && p[i + 1] < 0xA0) k = 0; /* C1 controls (U+0080-U+009F: CSI, ...) */
        if (k) {
            i += k;
            continue;
        }
        sbuf_put(out, text + run, i - run);
        if (p[i] == '\n') sbuf_puts(out, "\\n");
        else if (p[i] == '\r') sbuf_puts(out, "\\r");
        else if (p[i] == '\t') sbuf_puts(out, "\\t");
        else sbuf_printf(out, "\\x%02x", p[i]);
        run = ++i;
    }
    sbuf_put(out, text + run, n - run);
}

void srv_log(int level, const char *fmt, ...) {
    if (level == LOG_DEBUG && !log_verbose) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    char head[64], msg[2048];
    size_t h = strftime(head, sizeof head, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(head + h, sizeof head - h, ".%03ld %c ", ts.tv_nsec / 1000000, "EWID"[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m < 0) m = 0;
    if (m >= (int)sizeof msg) m = (int)sizeof msg - 1;
    SBuf line = {0};
    sbuf_puts(&line, head);
    log_escape(&line, msg, (size_t)m);
    sbuf_put(&line, "\n", 1);
    pthread_mutex_lock(&log_mu);
    FILE *f = log_file ? log_file : stderr;
    if (line.p) fwrite(line.p, 1, line.n, f);
    fflush(f);
    pthread_mutex_unlock(&log_mu);
    sbuf_free(&line);
}

/* ------------------------------------------------------------------------------------------ UTF-8 */

size_t utf8_seq_len(const unsigned char *p, size_t n) {
    if (!n) return 0;
    unsigned c = p[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) k = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) k = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 0;
    if (n < k || p[1] < lo || p[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return k;
}

size_t utf8_invalid_at(const char *text, size_t n) {
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = utf8_seq_len(p + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

void utf8_sanitize(SBuf *out, const char *text, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t bad = i + utf8_invalid_at(text + i, n - i);
        sbuf_put(out, text + i, bad - i);
        if (bad >= n) break;
        sbuf_puts(out, "\xef\xbf\xbd");
        i = bad + 1;
    }
}

int hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
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
