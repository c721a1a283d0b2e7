/* chat_text.c — Python-compatible string helpers for the chat templates (see chat_text.h).
 *
 * Numbers: cJSON keeps only a double, so an integral value prints as an int ("5") and anything else
 * as Python's float repr ("0.5", "1e-05", "1e+16"). A JSON literal written "2.0" therefore prints "2"
 * where Python would print "2.0", and integers beyond 2^53 lose precision — documented limits. */
#include "chat/chat_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/unicode.h"

/* ------------------------------------------------------------------------------------------ buffer */

void sb_put(StrBuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->n + n + 1 > cap) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sb_puts(StrBuf *b, const char *s) { sb_put(b, s, strlen(s)); }
void sb_putc(StrBuf *b, char c) { sb_put(b, &c, 1); }

void sb_free(StrBuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

char *sb_take(StrBuf *b, size_t *len) {
    sb_put(b, "", 0);
    char *p = b->oom ? NULL : b->p;
    if (b->oom) free(b->p);
    if (len) *len = p ? b->n : 0;
    memset(b, 0, sizeof *b);
    return p;
}

/* ------------------------------------------------------------------------------------------ slices */

bool str_starts(Str s, const char *prefix) {
    size_t n = strlen(prefix);
    return s.n >= n && memcmp(s.p, prefix, n) == 0;
}

bool str_ends(Str s, const char *suffix) {
    size_t n = strlen(suffix);
    return s.n >= n && memcmp(s.p + s.n - n, suffix, n) == 0;
}

long str_find(Str s, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return 0;
    const char *hit = memmem(s.p, s.n, needle, n);
    return hit ? (long)(hit - s.p) : -1;
}

/* Python's str.isspace() code points. */
static bool py_isspace(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* Length of the (valid or not) UTF-8 character ending at s[n-1]. */
static size_t last_char_len(const char *s, size_t n) {
    size_t k = 1;
    while (k < n && k < 4 && ((unsigned char)s[n - k] & 0xC0) == 0x80) k++;
    return k;
}

Str py_strip(Str s) {
    while (s.n) {
        size_t used;
        uint32_t cp = unicode_decode_lenient((const unsigned char *)s.p, s.n, &used);
        if (!py_isspace(cp)) break;
        s.p += used;
        s.n -= used;
    }
    while (s.n) {
        size_t k = last_char_len(s.p, s.n), used;
        uint32_t cp = unicode_decode_lenient((const unsigned char *)s.p + s.n - k, k, &used);
        if (used != k || !py_isspace(cp)) break;
        s.n -= k;
    }
    return s;
}

Str py_lstrip_chars(Str s, const char *chars) {
    while (s.n && s.p[0] && strchr(chars, s.p[0])) s.p++, s.n--;
    return s;
}

Str py_rstrip_chars(Str s, const char *chars) {
    while (s.n && s.p[s.n - 1] && strchr(chars, s.p[s.n - 1])) s.n--;
    return s;
}

Str py_strip_chars(Str s, const char *chars) { return py_rstrip_chars(py_lstrip_chars(s, chars), chars); }

/* ------------------------------------------------------------------------------------------ numbers */

/* Python's repr of a float: the shortest digits that read back to the same double; positional notation
 * for decimal exponents -4..15, scientific ("1e+16", "1.5e-05") otherwise; ".0" on integral values. */
static void py_float_repr(StrBuf *b, double x) {
    if (isnan(x)) return sb_puts(b, "NaN");
    if (isinf(x)) return sb_puts(b, x < 0 ? "-Infinity" : "Infinity"); /* json.dumps spelling */
    char e[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e = [-]D[.DDD]e[+-]XX */
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[20];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp10 = atoi(p + 1);
    if (neg) sb_putc(b, '-');
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            sb_puts(b, "0.");
            for (int i = -1; i > exp10; i--) sb_putc(b, '0');
            sb_put(b, digits, (size_t)nd);
        } else {
            for (int i = 0; i <= exp10; i++) sb_putc(b, i < nd ? digits[i] : '0');
            sb_putc(b, '.');
            if (nd > exp10 + 1) sb_put(b, digits + exp10 + 1, (size_t)(nd - exp10 - 1));
            else sb_putc(b, '0');
        }
    } else {
        sb_putc(b, digits[0]);
        if (nd > 1) {
            sb_putc(b, '.');
            sb_put(b, digits + 1, (size_t)nd - 1);
        }
        char ex[16];
        snprintf(ex, sizeof ex, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        sb_puts(b, ex);
    }
}

static void py_number(StrBuf *b, double x) {
    if (isfinite(x) && x == floor(x) && fabs(x) < 1e16) {
        char s[32];
        snprintf(s, sizeof s, "%.0f", x);
        sb_puts(b, strcmp(s, "-0") == 0 ? "0" : s);
    } else {
        py_float_repr(b, x);
    }
}

/* A number kept as its JSON text (a cJSON_Raw node, see chat_json_parse): integers exactly as written (a
 * Python int has no size limit), other numbers as Python prints the double they read as; a value no double
 * holds (1e400) stays as written, which is still valid JSON. */
static void py_raw_number(StrBuf *b, const char *text) {
    const char *p = text + (*text == '-');
    bool integer = *p != 0;
    for (const char *q = p; *q; q++) integer &= *q >= '0' && *q <= '9';
    if (integer) {
        bool zero = true;
        for (const char *q = p; *q; q++) zero &= *q == '0';
        return sb_puts(b, zero ? "0" : text);
    }
    const double x = strtod(text, NULL);
    if (!isfinite(x)) return sb_puts(b, text);
    py_float_repr(b, x);
}

/* --------------------------------------------------------------------------------------------- json */

/* What cJSON skips between tokens: every byte up to the space, NUL and control bytes included (the walk
 * below must see the text as cJSON saw it). */
static const char *json_skip_ws(const char *s, const char *end) {
    while (s < end && (unsigned char)*s <= ' ') s++;
    return s;
}

static const char *json_skip_string(const char *s, const char *end) {
    for (s++; s < end && *s != '"'; s++)
        if (*s == '\\') s++;
    return s < end ? s + 1 : end;
}

/* Walks the source text of a value that cJSON has already parsed (so the text is valid JSON and its values
 * come in the tree's order) and turns every number node into a raw node holding the number's text. */
static const char *keep_numbers(cJSON *v, const char *s, const char *end, bool *ok) {
    s = json_skip_ws(s, end);
    if (s >= end || !v) return *ok = false, end;
    if (*s == '{' || *s == '[') {
        const bool obj = *s == '{';
        s++;
        for (cJSON *c = v->child; c && *ok; c = c->next) {
            s = json_skip_ws(s, end);
            if (s < end && *s == ',') s = json_skip_ws(s + 1, end);
            if (obj) {
                s = json_skip_ws(json_skip_string(s, end), end); /* the key, then ':' */
                if (s < end && *s == ':') s++;
            }
            s = keep_numbers(c, s, end, ok);
        }
        s = json_skip_ws(s, end);
        return s < end ? s + 1 : end; /* the closing bracket */
    }
    if (*s == '"') return json_skip_string(s, end);
    const char *t = s;
    while (t < end && ((*t && strchr("+-.eE", *t)) || (*t >= '0' && *t <= '9') || (*t >= 'a' && *t <= 'z'))) t++;
    if (cJSON_IsNumber(v)) {
        char *text = malloc((size_t)(t - s) + 1);
        if (!text) return *ok = false, end;
        memcpy(text, s, (size_t)(t - s));
        text[t - s] = 0;
        v->type = cJSON_Raw;
        v->valuestring = text;
    }
    return t;
}

cJSON *chat_json_parse(const char *text, size_t len, const char **end) {
    const char *stop = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, len, &stop, false);
    if (end) *end = stop;
    if (!v) return NULL;
    bool ok = true;
    keep_numbers(v, text, stop ? stop : text + len, &ok);
    if (!ok) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

static void json_string(StrBuf *b, const char *s) {
    sb_putc(b, '"');
    const char *run = s;
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (esc) {
            sb_put(b, run, (size_t)(p - run));
            sb_puts(b, esc);
            run = p + 1;
        }
    }
    sb_puts(b, run);
    sb_putc(b, '"');
}

void py_tojson(StrBuf *b, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return sb_puts(b, "null");
    if (cJSON_IsTrue(v)) return sb_puts(b, "true");
    if (cJSON_IsFalse(v)) return sb_puts(b, "false");
    if (cJSON_IsNumber(v)) return py_number(b, v->valuedouble);
    if (cJSON_IsRaw(v)) return py_raw_number(b, v->valuestring ? v->valuestring : "0");
    if (cJSON_IsString(v)) return json_string(b, v->valuestring ? v->valuestring : "");
    bool obj = cJSON_IsObject(v);
    sb_putc(b, obj ? '{' : '[');
    for (const cJSON *c = v->child; c; c = c->next) {
        if (c != v->child) sb_puts(b, ", ");
        if (obj) {
            json_string(b, c->string ? c->string : "");
            sb_puts(b, ": ");
        }
        py_tojson(b, c);
    }
    sb_putc(b, obj ? '}' : ']');
}

/* ------------------------------------------------------------------------------------------ str/repr */

static void py_repr_string(StrBuf *b, const char *s) {
    bool has_single = strchr(s, '\'') != NULL, has_double = strchr(s, '"') != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    sb_putc(b, q);
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        if (c == '\\' || c == (unsigned char)q) {
            esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
            sb_puts(b, esc);
            i++;
        } else if (c == '\n' || c == '\r' || c == '\t') {
            sb_puts(b, c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t");
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            sb_puts(b, esc);
            i++;
        } else if (c < 0x80) {
            sb_putc(b, (char)c);
            i++;
        } else {
            size_t used;
            uint32_t cp = unicode_decode_lenient((const unsigned char *)s + i, n - i, &used);
            uint16_t f = unicode_flags(cp);
            /* str.isprintable: not Cc/Cf/Cs/Co/Cn and not a separator other than the space */
            if (f & (UNICODE_CONTROL | UNICODE_UNDEFINED | UNICODE_SEPARATOR)) {
                if (cp <= 0xFF) snprintf(esc, sizeof esc, "\\x%02x", cp);
                else if (cp <= 0xFFFF) snprintf(esc, sizeof esc, "\\u%04x", cp);
                else snprintf(esc, sizeof esc, "\\U%08x", cp);
                sb_puts(b, esc);
            } else {
                sb_put(b, s + i, used);
            }
            i += used;
        }
    }
    sb_putc(b, q);
}

static void py_repr(StrBuf *b, const cJSON *v) {
    if (cJSON_IsString(v)) return py_repr_string(b, v->valuestring ? v->valuestring : "");
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v);
        sb_putc(b, obj ? '{' : '[');
        for (const cJSON *c = v->child; c; c = c->next) {
            if (c != v->child) sb_puts(b, ", ");
            if (obj) {
                py_repr_string(b, c->string ? c->string : "");
                sb_puts(b, ": ");
            }
            py_repr(b, c);
        }
        sb_putc(b, obj ? '}' : ']');
        return;
    }
    py_str(b, v);
}

void py_str(StrBuf *b, const cJSON *v) {
    if (!v || cJSON_IsNull(v)) return sb_puts(b, "None");
    if (cJSON_IsTrue(v)) return sb_puts(b, "True");
    if (cJSON_IsFalse(v)) return sb_puts(b, "False");
    if (cJSON_IsNumber(v)) return py_number(b, v->valuedouble);
    if (cJSON_IsRaw(v)) return py_raw_number(b, v->valuestring ? v->valuestring : "0");
    if (cJSON_IsString(v)) return sb_puts(b, v->valuestring ? v->valuestring : "");
    py_repr(b, v);
}

bool py_truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return false;
    if (cJSON_IsTrue(v)) return true;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsRaw(v)) return v->valuestring && strtod(v->valuestring, NULL) != 0;
    if (cJSON_IsString(v)) return v->valuestring && v->valuestring[0];
    return v->child != NULL;
}
