/* schema_check.c — see schema_check.h. */
#include "schema_check.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool no(char *why, size_t cap, const char *fmt, ...) {
    if (why && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool finite_numbers(const cJSON *v) {
    if (cJSON_IsNumber(v)) return isfinite(v->valuedouble);
    for (const cJSON *c = v->child; c; c = c->next)
        if (!finite_numbers(c)) return false;
    return true;
}

cJSON *schema_parse_strict(const char *text, size_t n) {
    const char *end = NULL;
    cJSON *v = cJSON_ParseWithLengthOpts(text, n, &end, false);
    if (!v) return NULL;
    if (end != text + n || !finite_numbers(v)) {
        cJSON_Delete(v);
        return NULL;
    }
    return v;
}

static bool has_type(const cJSON *v, const char *t) {
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble);
    if (!strcmp(t, "object")) return cJSON_IsObject(v);
    if (!strcmp(t, "array")) return cJSON_IsArray(v);
    return false;
}

static const cJSON *get(const cJSON *o, const char *k) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

bool schema_valid(const cJSON *root, const cJSON *schema, const cJSON *v, char *why, size_t cap) {
    if (cJSON_IsTrue(schema)) return true;
    if (!cJSON_IsObject(schema)) return no(why, cap, "not a schema");
    const cJSON *ref = get(schema, "$ref");
    if (cJSON_IsString(ref)) {
        const char *r = ref->valuestring;
        const cJSON *t = !strcmp(r, "#") ? root
                         : !strncmp(r, "#/$defs/", 8) ? get(get(root, "$defs"), r + 8)
                         : !strncmp(r, "#/definitions/", 14) ? get(get(root, "definitions"), r + 14)
                                                              : NULL;
        if (!t) return no(why, cap, "unresolved $ref %s", r);
        if (!schema_valid(root, t, v, why, cap)) return false;
    }
    const cJSON *any = get(schema, "anyOf");
    if (cJSON_IsArray(any)) {
        bool one = false;
        for (const cJSON *a = any->child; a && !one; a = a->next) one = schema_valid(root, a, v, NULL, 0);
        if (!one) return no(why, cap, "no anyOf alternative matches");
    }
    const cJSON *type = get(schema, "type");
    if (cJSON_IsString(type) && !has_type(v, type->valuestring)) return no(why, cap, "not of type %s", type->valuestring);
    if (cJSON_IsArray(type)) {
        bool one = false;
        for (const cJSON *t = type->child; t && !one; t = t->next) one = cJSON_IsString(t) && has_type(v, t->valuestring);
        if (!one) return no(why, cap, "none of the types in the list");
    }
    const cJSON *en = get(schema, "enum");
    if (cJSON_IsArray(en)) {
        bool one = false;
        for (const cJSON *e = en->child; e && !one; e = e->next) one = cJSON_Compare(e, v, true);
        if (!one) return no(why, cap, "not one of the enum values");
    }
    const cJSON *cn = get(schema, "const");
    if (cn && !cJSON_Compare(cn, v, true)) return no(why, cap, "not the const value");
    if (cJSON_IsObject(v)) {
        const cJSON *props = get(schema, "properties"), *req = get(schema, "required"), *extra = get(schema, "additionalProperties");
        for (const cJSON *r = cJSON_IsArray(req) ? req->child : NULL; r; r = r->next)
            if (cJSON_IsString(r) && !get(v, r->valuestring)) return no(why, cap, "required '%s' missing", r->valuestring);
        for (const cJSON *m = v->child; m; m = m->next) {
            const cJSON *ps = get(props, m->string);
            if (ps) {
                if (!schema_valid(root, ps, m, why, cap)) return false;
            } else if (cJSON_IsFalse(extra)) {
                return no(why, cap, "additional property '%s'", m->string);
            } else if (cJSON_IsObject(extra) && !schema_valid(root, extra, m, why, cap)) {
                return false;
            }
        }
    }
    if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON *lo = get(schema, "minItems"), *hi = get(schema, "maxItems"), *items = get(schema, "items");
        if (cJSON_IsNumber(lo) && n < lo->valuedouble) return no(why, cap, "%d items, fewer than minItems", n);
        if (cJSON_IsNumber(hi) && n > hi->valuedouble) return no(why, cap, "%d items, more than maxItems", n);
        for (const cJSON *e = items ? v->child : NULL; e; e = e->next)
            if (!schema_valid(root, items, e, why, cap)) return false;
    }
    return true;
}
