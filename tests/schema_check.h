/* schema_check.h — an independent JSON schema validator for the subset the server constrains to
 * (type, properties, required, additionalProperties, items, minItems, maxItems, enum, const, anyOf, $ref to
 * "#", $defs and definitions). The tests check constrained outputs with it; it shares no code with
 * src/server/constrain*.c. */
#ifndef DL_TESTS_SCHEMA_CHECK_H
#define DL_TESTS_SCHEMA_CHECK_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether v satisfies schema (root: what "#" refers to). why (may be NULL) gets the first failure. */
bool schema_valid(const cJSON *root, const cJSON *schema, const cJSON *v, char *why, size_t cap);
/* Parses text as exactly one JSON value with finite numbers; NULL otherwise. */
cJSON *schema_parse_strict(const char *text, size_t n);

#endif
