/* json_io.h — JSON at the server's edges: request bodies in (strict: UTF-8, one value, no duplicate keys,
 * NUL characters kept), response bodies out (valid UTF-8, NUL characters escaped).
 *
 * cJSON keeps strings NUL-terminated, so a "\u0000" inside a string would silently cut it (a prompt
 * "a\u0000..." became "a"). Before parsing, every \u0000 escape in a string is rewritten to the two bytes
 * C0 80 (Java's "modified UTF-8"): never valid UTF-8, and a body that is not valid UTF-8 is refused, so
 * inside the server C0 80 stands for exactly one NUL. json_nul_decode turns it back into a real NUL
 * where text becomes tokens; json_print writes it back as \u0000. */
#ifndef DL_SERVER_JSON_IO_H
#define DL_SERVER_JSON_IO_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/util.h"

/* The in-server spelling of a NUL character inside a string. */
#define JSON_NUL "\xc0\x80"

/* Parses a request body. Refused (NULL, a one-line reason in msg, the offending key's place in where —
 * "" when it has none): bytes that are not UTF-8, invalid JSON, data after the value, the same key twice in
 * one object. exact_numbers: numbers kept as their text (chat_json_parse) for rendering. */
cJSON *json_parse_body(const char *body, size_t len, bool exact_numbers, char *msg, size_t msg_cap, char *where,
                       size_t where_cap);

/* Turns every JSON_NUL in s[0..n) into a NUL byte, in place; returns the new length. */
size_t json_nul_decode(char *s, size_t n);
/* Appends s[0..n) to out with every NUL byte written as JSON_NUL (for text that goes into a cJSON string). */
void json_nul_encode(SBuf *out, const char *s, size_t n);
/* A string node holding s[0..n) (NULs kept as JSON_NUL, invalid UTF-8 replaced by U+FFFD). */
cJSON *json_string_n(const char *s, size_t n);
cJSON *json_add_string_n(cJSON *obj, const char *key, const char *s, size_t n);

/* Adds the text of out since *mark to parts as a {"type": "text", "text"} part (none when there is no new
 * text) and moves *mark to the end (the request converters gather text between images this way). */
void json_flush_text_part(cJSON *parts, const SBuf *out, size_t *mark);

/* A member of an object that is present and not null, or NULL. */
const cJSON *json_member(const cJSON *obj, const char *key);

/* cJSON_PrintUnformatted with JSON_NUL written as \u0000 (malloc'd; NULL when out of memory). */
char *json_print(const cJSON *v);

#endif
