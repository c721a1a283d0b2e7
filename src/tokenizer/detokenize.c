/* detokenize.c — token ids back to text: pieces, whole-sequence decoding, and the streaming
 * Detokenizer that only ever hands out valid UTF-8.
 *
 * Pieces are llama.cpp's token_to_piece: control and unknown tokens are hidden unless the caller asks
 * for them; no space cleanup (clean_spaces is off for the Qwen pre-tokenizers). The sanitising rule
 * for bad bytes is Unicode's "maximal subpart" substitution: each maximal ill-formed subsequence becomes
 * one U+FFFD, the same as Python's and browsers' decoders. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

const char *tokenizer_piece(const Tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece_arena + t->piece_off[id];
}

static bool piece_hidden(const Tokenizer *t, int32_t id, unsigned flags) {
    return !(flags & DETOKENIZE_SPECIAL) && (t->attr[id] & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_UNKNOWN));
}

typedef struct Buf {
    char *p;
    size_t n, cap;
} Buf;

static int buf_put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* Appends s[0..n) to out with invalid sequences replaced. A trailing incomplete sequence is replaced
 * too when final, else its length is returned through *held (and it is not written). */
static int put_sanitized(Buf *out, const unsigned char *s, size_t n, bool final, size_t *held) {
    size_t i = 0, run = 0; /* run: start of the pending stretch of valid bytes */
    if (held) *held = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t bad = 0;
        int len = unicode_valid_prefix(s + i, n - i, &bad);
        if (len > 0) {
            i += (size_t)len;
            continue;
        }
        if (buf_put(out, (const char *)s + run, i - run) < 0) return -1;
        if (len == 0 && !final) { /* incomplete at the end: wait for more */
            *held = n - i;
            return 0;
        }
        if (buf_put(out, replacement, 3) < 0) return -1;
        i += len == 0 ? n - i : bad;
        run = i;
    }
    return buf_put(out, (const char *)s + run, n - run);
}

int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **out, size_t *len,
                     Err *err) {
    Buf raw = {0};
    *out = NULL;
    *len = 0;
    if (buf_put(&raw, "", 0) < 0) return err_set(err, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            free(raw.p);
            return err_set(err, "token id %d is out of range (vocabulary of %d)", ids[i], t->n_vocab);
        }
        if (piece_hidden(t, ids[i], flags)) continue;
        size_t pn;
        const char *p = tokenizer_piece(t, ids[i], &pn);
        if (buf_put(&raw, p, pn) < 0) {
            free(raw.p);
            return err_set(err, "out of memory");
        }
    }
    if (flags & DETOKENIZE_RAW) {
        *out = raw.p;
        *len = raw.n;
        return 0;
    }
    Buf clean = {0};
    int rc = buf_put(&clean, "", 0) < 0 ? -1 : put_sanitized(&clean, (const unsigned char *)raw.p, raw.n, true, NULL);
    free(raw.p);
    if (rc < 0) {
        free(clean.p);
        return err_set(err, "out of memory");
    }
    *out = clean.p;
    *len = clean.n;
    return 0;
}

/* ------------------------------------------------------------------------------------------ streaming */

struct Detokenizer {
    const Tokenizer *t;
    unsigned flags;
    unsigned char held[4]; /* bytes of a character not yet complete (at most 3) */
    size_t n_held;
    Buf work; /* held bytes + the new piece */
    Buf out;  /* what the last call returned */
};

Detokenizer *detokenizer_new(const Tokenizer *t, unsigned flags, Err *err) {
    Detokenizer *d = calloc(1, sizeof *d);
    if (!d) {
        err_set(err, "out of memory");
        return NULL;
    }
    d->t = t;
    d->flags = flags & DETOKENIZE_SPECIAL;
    return d;
}

void detokenizer_free(Detokenizer *d) {
    if (!d) return;
    free(d->work.p);
    free(d->out.p);
    free(d);
}

void detokenizer_reset(Detokenizer *d) { d->n_held = 0; }

int detokenizer_push(Detokenizer *d, int32_t id, const char **text, size_t *len, Err *err) {
    const Tokenizer *t = d->t;
    *text = "";
    *len = 0;
    if (id < 0 || id >= t->n_vocab) return err_set(err, "token id %d is out of range (vocabulary of %d)", id, t->n_vocab);
    size_t pn = 0;
    const char *p = piece_hidden(t, id, d->flags) ? "" : tokenizer_piece(t, id, &pn);
    d->work.n = 0;
    d->out.n = 0;
    if (buf_put(&d->work, (const char *)d->held, d->n_held) < 0 || buf_put(&d->work, p, pn) < 0 ||
        buf_put(&d->out, "", 0) < 0)
        return err_set(err, "out of memory");
    size_t held;
    if (put_sanitized(&d->out, (const unsigned char *)d->work.p, d->work.n, false, &held) < 0)
        return err_set(err, "out of memory");
    /* an incomplete sequence is at most 3 bytes: anything longer was already replaced */
    memcpy(d->held, d->work.p + d->work.n - held, held);
    d->n_held = held;
    *text = d->out.p;
    *len = d->out.n;
    return 0;
}

void detokenizer_flush(Detokenizer *d, const char **text, size_t *len) {
    d->out.n = 0;
    *text = "";
    *len = 0;
    if (buf_put(&d->out, "", 0) == 0 && d->n_held > 0 &&
        put_sanitized(&d->out, d->held, d->n_held, true, NULL) == 0) {
        *text = d->out.p;
        *len = d->out.n;
    }
    d->n_held = 0;
}
