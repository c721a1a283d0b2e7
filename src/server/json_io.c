/* json_io.c — see json_io.h: strict request parsing (UTF-8, duplicates, NUL escapes) and response printing. */
#include "server/json_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"

/* ------------------------------------------------------------------------------------------ NUL */

/* body with each \u0000 escape inside a string replaced by JSON_NUL (never longer than body). */
static char *rewrite_nul_escapes(const char *body, size_t len, size_t *out_len) {
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t o = 0;
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        char ch = body[i];
        if (!in_str) {
            in_str = ch == '"';
            out[o++] = ch;
            continue;
        }
        if (ch == '"') {
            in_str = false;
            out[o++] = ch;
        } else if (ch == '\\' && i + 5 < len && !memcmp(body + i + 1, "u0000", 5)) {
            memcpy(out + o, JSON_NUL, 2);
            o += 2;
            i += 5;
        } else if (ch == '\\' && i + 1 < len) {
            out[o++] = ch;
            out[o++] = body[++i];
        } else {
            out[o++] = ch;
        }
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

size_t json_nul_decode(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 1 < n && (unsigned char)s[i] == 0xC0 && (unsigned char)s[i + 1] == 0x80) {
            s[o++] = 0;
            i++;
        } else {
            s[o++] = s[i];
        }
    }
    if (o < n) s[o] = 0;
    return o;
}

void json_nul_encode(SBuf *out, const char *s, size_t n) {
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i]) continue;
        sbuf_put(out, s + run, i - run);
        sbuf_puts(out, JSON_NUL);
        run = i + 1;
    }
    sbuf_put(out, s + run, n - run);
    if (!out->p) sbuf_put(out, "", 0);
}

cJSON *json_string_n(const char *s, size_t n) {
    SBuf b = {0};
    const unsigned char *p = (const unsigned char *)s;
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        size_t k = p[i] == 0xC0 && i + 1 < n && p[i + 1] == 0x80 ? 2 : p[i] ? utf8_seq_len(p + i, n - i) : 0;
        if (k) { /* valid UTF-8, or JSON_NUL (text that came from a request) */
            i += k;
            continue;
        }
        sbuf_put(&b, s + run, i - run);
        sbuf_puts(&b, p[i] ? "\xef\xbf\xbd" : JSON_NUL);
        run = ++i;
    }
    sbuf_put(&b, s + run, n - run);
    cJSON *v = b.oom ? NULL : cJSON_CreateString(b.p);
    sbuf_free(&b);
    return v;
}

cJSON *json_add_string_n(cJSON *obj, const char *key, const char *s, size_t n) {
    cJSON *v = json_string_n(s, n);
    if (v && !cJSON_AddItemToObject(obj, key, v)) {
        cJSON_Delete(v);
        v = NULL;
    }
    return v;
}

const cJSON *json_member(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

char *json_print(const cJSON *v) {
    char *s = cJSON_PrintUnformatted(v);
    if (!s || !strstr(s, JSON_NUL)) return s;
    SBuf b = {0};
    for (const char *p = s, *hit; *p; p = hit + 2) {
        hit = strstr(p, JSON_NUL);
        if (!hit) {
            sbuf_puts(&b, p);
            break;
        }
        sbuf_put(&b, p, (size_t)(hit - p));
        sbuf_puts(&b, "\\u0000");
    }
    free(s);
    if (b.oom) {
        sbuf_free(&b);
        return NULL;
    }
    return b.p;
}

/* ------------------------------------------------------------------------------------------ duplicates */

static int cmp_keys(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Appends ".key" or "[i]" to a path (truncated quietly when long). */
static void path_push(char *path, size_t cap, const cJSON *parent, const cJSON *child, int index) {
    size_t n = strlen(path);
    if (cJSON_IsObject(parent)) snprintf(path + n, cap - n, "%s%s", n ? "." : "", child->string ? child->string : "");
    else snprintf(path + n, cap - n, "[%d]", index);
}

/* The first key that occurs twice in one object, or NULL; path receives its place ("messages[0].role"). */
static const char *find_duplicate(const cJSON *v, char *path, size_t cap) {
    if (cJSON_IsObject(v)) {
        int n = 0;
        for (const cJSON *c = v->child; c; c = c->next) n++;
        if (n > 1) {
            const cJSON **keys = malloc(sizeof *keys * (size_t)n);
            if (!keys) return NULL;
            int k = 0;
            for (const cJSON *c = v->child; c; c = c->next) keys[k++] = c;
            qsort(keys, (size_t)n, sizeof *keys, cmp_keys);
            const char *dup = NULL;
            for (int i = 1; i < n && !dup; i++)
                if (!strcmp(keys[i - 1]->string, keys[i]->string)) dup = keys[i]->string;
            free(keys);
            if (dup) {
                size_t m = strlen(path);
                snprintf(path + m, cap - m, "%s%s", m ? "." : "", dup);
                return dup;
            }
        }
    }
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) return NULL;
    size_t mark = strlen(path);
    int i = 0;
    for (const cJSON *c = v->child; c; c = c->next, i++) {
        path_push(path, cap, v, c, i);
        const char *dup = find_duplicate(c, path, cap);
        if (dup) return dup;
        path[mark] = 0;
    }
    return NULL;
}

/* ------------------------------------------------------------------------------------------ parsing */

/* The first \uXXXX escape that is half a surrogate pair without its other half (*at: its offset). */
static bool lone_surrogate(const char *b, size_t n, size_t *at) {
    for (size_t i = 0; i + 6 <= n; i++) {
        if (b[i] != '\\') continue;
        if (b[i + 1] != 'u') {
            i++; /* an escaped character, \\ included */
            continue;
        }
        unsigned v = 0;
        bool hex = true;
        for (int k = 2; k < 6; k++) {
            int d = hex_digit(b[i + k]);
            hex &= d >= 0;
            v = v * 16 + (unsigned)(d < 0 ? 0 : d);
        }
        if (!hex) continue;
        if (v >= 0xD800 && v <= 0xDBFF) {
            unsigned w = 0;
            bool pair = i + 12 <= n && b[i + 6] == '\\' && b[i + 7] == 'u';
            for (int k = 8; pair && k < 12; k++) {
                int d = hex_digit(b[i + k]);
                pair &= d >= 0;
                w = w * 16 + (unsigned)(d < 0 ? 0 : d);
            }
            if (!pair || w < 0xDC00 || w > 0xDFFF) return *at = i, true;
            i += 11;
        } else if (v >= 0xDC00 && v <= 0xDFFF) {
            return *at = i, true;
        } else {
            i += 5;
        }
    }
    return false;
}

cJSON *json_parse_body(const char *body, size_t len, bool exact_numbers, char *msg, size_t msg_cap, char *where,
                       size_t where_cap) {
    where[0] = 0;
    size_t bad = utf8_invalid_at(body, len);
    if (bad < len) {
        snprintf(msg, msg_cap, "the request body is not valid UTF-8 (byte %zu)", bad);
        return NULL;
    }
    /* JSON has no raw control characters (cJSON would take them, NUL included, for whitespace); tab, line
     * feed and carriage return are let through where clients put them */
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)body[i];
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
            snprintf(msg, msg_cap, "the request body has a raw control character (0x%02x) at byte %zu: JSON writes "
                                   "them escaped", ch, i);
            return NULL;
        }
    }
    size_t n = 0;
    char *text = rewrite_nul_escapes(body, len, &n);
    if (!text) {
        snprintf(msg, msg_cap, "out of memory");
        return NULL;
    }
    const char *end = NULL;
    cJSON *doc = exact_numbers ? chat_json_parse(text, n, &end) : cJSON_ParseWithLengthOpts(text, n, &end, false);
    if (!doc) {
        /* the offset in the body the client sent: rewritten escapes are 4 bytes shorter each */
        size_t off = end && end >= text ? (size_t)(end - text) : 0, shift = 0;
        for (size_t i = 0; i + 1 < off; i++)
            if ((unsigned char)text[i] == 0xC0 && (unsigned char)text[i + 1] == 0x80) shift += 4;
        size_t at = 0;
        if (lone_surrogate(body, len, &at))
            snprintf(msg, msg_cap, "the request body is not valid JSON: a lone UTF-16 surrogate escape (\\u%.4s) "
                                   "at byte %zu; a surrogate must come in a \\uD800-\\uDBFF + \\uDC00-\\uDFFF "
                                   "pair", body + at + 2, at);
        else snprintf(msg, msg_cap, "the request body is not valid JSON (error near byte %zu)", off + shift);
        free(text);
        return NULL;
    }
    for (const char *p = end; p && p < text + n; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            snprintf(msg, msg_cap, "the request body has data after the JSON value");
            cJSON_Delete(doc);
            free(text);
            return NULL;
        }
    free(text);
    const char *dup = find_duplicate(doc, where, where_cap);
    if (dup) {
        SBuf shown = {0};
        utf8_sanitize(&shown, dup, strlen(dup));
        snprintf(msg, msg_cap, "duplicate key '%.200s' in the request body (at %.200s): duplicate keys are ambiguous "
                               "(parsers disagree on which one counts)", shown.p ? shown.p : "", where);
        sbuf_free(&shown);
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

void json_flush_text_part(cJSON *parts, const SBuf *out, size_t *mark) {
    if (out->n == *mark) return;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "type", "text");
    json_add_string_n(t, "text", out->p + *mark, out->n - *mark);
    cJSON_AddItemToArray(parts, t);
    *mark = out->n;
}
