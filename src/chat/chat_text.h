/* chat_text.h — the string machinery the chat templates need, with Python/Jinja semantics: a growable
 * buffer, str.strip(), str() and repr() of JSON values, and json.dumps(ensure_ascii=False) — which is
 * what Hugging Face's `tojson` filter is. The renderers are only byte-exact if these are.
 *
 * Internal to src/chat/. */
#ifndef DL_CHAT_TEXT_H
#define DL_CHAT_TEXT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct StrBuf {
    char *p; /* NUL-terminated when not NULL */
    size_t n, cap;
    bool oom; /* an append failed; the content is then incomplete */
} StrBuf;

void sb_put(StrBuf *b, const char *s, size_t n);
void sb_puts(StrBuf *b, const char *s);
void sb_putc(StrBuf *b, char c);
void sb_free(StrBuf *b);
/* Hands the buffer to the caller (never NULL unless out of memory) and resets b. */
char *sb_take(StrBuf *b, size_t *len);

/* A borrowed slice of text. */
typedef struct Str {
    const char *p;
    size_t n;
} Str;

static inline Str str_of(const char *s) {
    Str r = {s ? s : "", 0};
    while (r.p[r.n]) r.n++;
    return r;
}
bool str_starts(Str s, const char *prefix);
bool str_ends(Str s, const char *suffix);
/* Position of the first occurrence of needle, or -1. */
long str_find(Str s, const char *needle);

/* Python's str.strip() / lstrip() / rstrip() with no argument (Unicode whitespace, str.isspace). */
Str py_strip(Str s);
/* Python's str.strip(chars) etc. for an ASCII set of characters. */
Str py_strip_chars(Str s, const char *chars);
Str py_lstrip_chars(Str s, const char *chars);
Str py_rstrip_chars(Str s, const char *chars);

/* json.dumps(v, ensure_ascii=False) — separators ", " and ": ", keys in their order. */
void py_tojson(StrBuf *b, const cJSON *v);
/* str(v): strings as they are, numbers as Python prints int/float, True/False/None, containers as repr. */
void py_str(StrBuf *b, const cJSON *v);
/* Jinja truthiness of a value: false for null, false, 0, "", [] and {}. */
bool py_truthy(const cJSON *v);

#endif
