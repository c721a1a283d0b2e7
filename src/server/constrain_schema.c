/* constrain_schema.c — JSON schemas and tool calls compiled into constraint programs (constrain_internal.h).
 *
 * The schema subset is OpenAI's structured outputs: objects (properties, required, additionalProperties),
 * arrays (items, minItems, maxItems), enum, const, anyOf, $ref to $defs / definitions (and "#"), nullable
 * types (a type list with "null"), string, number, integer, boolean, null; annotations (title, description,
 * default, examples, $schema, $id, $comment, deprecated, readOnly, writeOnly) are ignored.
 *
 * Strict (response_format): anything else is refused, naming the keyword and where it is. Lenient (tool
 * parameters, whose schemas are also shown to the model and were never checked): unknown keywords are
 * ignored, unknown types become any JSON value.
 *
 * Objects are written with their properties in schema order, each optional one present or not, then
 * required names the properties do not declare (any value); no other keys (valid also when additional
 * properties are allowed). Recursive $refs are expanded REF_DEPTH deep; a branch deeper than that is a
 * dead end, so recursion ends through the schema's own way out (null, an empty array, an optional
 * property) — and a schema without one is refused. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/constrain_internal.h"

enum { REF_DEPTH = 3, MAX_DEPTH = 24, MAX_UNROLL = 64 };

typedef struct Compiler {
    Constraint *c;
    const cJSON *root; /* what "#" refers to */
    bool strict;
    Err *err;
    bool failed;
    char path[320]; /* JSON pointer of the schema being compiled */
    const char *refs[MAX_DEPTH]; /* the $refs being expanded on the current path */
    int n_refs;
    int depth;
} Compiler;

static void fail(Compiler *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(Compiler *k, const char *fmt, ...) {
    if (k->failed) return;
    k->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(k->err, "%s (at %s)", msg, k->path);
}

static const cJSON *member(const cJSON *v, const char *key) {
    return cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, key) : NULL;
}

/* Enters a sub-schema for messages: path += "/" part (and "/" index when index >= 0). */
static size_t path_push(Compiler *k, const char *part, int index) {
    size_t n = strlen(k->path);
    if (index >= 0) snprintf(k->path + n, sizeof k->path - n, "/%s/%d", part, index);
    else snprintf(k->path + n, sizeof k->path - n, "/%s", part);
    return n;
}

static char *json_quote(const char *s) {
    cJSON *str = cJSON_CreateString(s);
    char *out = str ? cJSON_PrintUnformatted(str) : NULL;
    cJSON_Delete(str);
    return out;
}

/* ------------------------------------------------------------------------------------------ keywords */

static bool in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return true;
    return false;
}

static const char *const ANNOTATIONS[] = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                          "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
static const char *const KEYWORDS[] = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                       "maxItems", "enum", "const", "anyOf", "$ref", NULL};

/* Strict: every keyword known; with $ref or anyOf, nothing but annotations next to it. */
static void check_keywords(Compiler *k, const cJSON *schema) {
    if (!k->strict) return;
    const char *alone = member(schema, "$ref") ? "$ref" : member(schema, "anyOf") ? "anyOf" : NULL;
    for (const cJSON *m = schema->child; m && !k->failed; m = m->next) {
        const char *key = m->string ? m->string : "";
        if (in_list(key, ANNOTATIONS)) continue;
        if (!in_list(key, KEYWORDS))
            fail(k, "the JSON schema keyword '%.80s' is not supported (supported: type, properties, required, "
                    "additionalProperties, items, minItems, maxItems, enum, const, anyOf, $ref, $defs)", key);
        else if (alone && strcmp(key, alone) != 0)
            fail(k, "'%s' cannot be combined with '%.80s' in one schema (only annotations may stand beside it)", alone,
                 key);
    }
}

/* ------------------------------------------------------------------------------------------ emitting */

static void value(Compiler *k, const cJSON *schema);

/* Alternatives of literal texts. */
static void choice(Compiler *k, char **texts, int n) {
    Constraint *c = k->c;
    int f = cop_fork(c, n);
    int *jumps = calloc((size_t)n, sizeof(int));
    if (!jumps) {
        c->oom = true;
        return;
    }
    for (int i = 0; i < n; i++) {
        cop_target(c, f, i, c->n_ops);
        cop_lits(c, texts[i]);
        jumps[i] = cop_jmp(c);
    }
    for (int i = 0; i < n; i++) cop_target(c, jumps[i], 0, c->n_ops);
    free(jumps);
}

/* enum / const as texts: JSON, or (raw) the strings as they are — XML parameter values. */
static void literals(Compiler *k, const cJSON *schema, bool raw) {
    const cJSON *en = member(schema, "enum"), *cn = member(schema, "const");
    int n = en ? cJSON_GetArraySize(en) : 1;
    if (en && (!cJSON_IsArray(en) || n == 0 || n > 1024)) {
        if (k->strict) fail(k, "'enum' must be an array of 1 to 1024 values");
        else cop_emit(k->c, OP_JANY);
        return;
    }
    char **texts = calloc((size_t)n, sizeof *texts);
    if (!texts) {
        k->c->oom = true;
        return;
    }
    int i = 0;
    for (const cJSON *e = en ? en->child : cn; e && i < n; e = e->next, i++)
        texts[i] = raw && cJSON_IsString(e) ? strdup(e->valuestring) : cJSON_PrintUnformatted(e);
    bool ok = true;
    for (i = 0; i < n; i++) ok = ok && texts[i] && texts[i][0];
    if (ok) choice(k, texts, n);
    else if (k->strict) fail(k, "an empty string cannot be an enum value here");
    else cop_emit(k->c, OP_XTEXT);
    for (i = 0; i < n; i++) free(texts[i]);
    free(texts);
}

/* "key": value, with a leading ", " when comma. */
static void property(Compiler *k, const char *name, const cJSON *schema, bool comma) {
    char *q = json_quote(name);
    if (!q) {
        k->c->oom = true;
        return;
    }
    if (comma) cop_lits(k->c, ", ");
    cop_lits(k->c, q);
    cop_lits(k->c, ": ");
    free(q);
    size_t mark = path_push(k, "properties", -1);
    size_t n = strlen(k->path);
    snprintf(k->path + n, sizeof k->path - n, "/%s", name);
    if (schema) value(k, schema);
    else cop_emit(k->c, OP_JANY); /* required but not declared: any value */
    k->path[mark] = 0;
}

typedef struct Prop {
    const char *name;
    const cJSON *schema; /* NULL: not declared */
    bool required;
} Prop;

/* {props in order}: two chains — A while nothing is written yet (no comma), B after the first property. */
static void object_props(Compiler *k, const Prop *p, int n) {
    Constraint *c = k->c;
    int first_req = 0;
    while (first_req < n && !p[first_req].required) first_req++;
    int *to_b = calloc((size_t)n + 2, sizeof(int)), *b_at = calloc((size_t)n + 2, sizeof(int));
    if (!to_b || !b_at) {
        free(to_b), free(b_at);
        c->oom = true;
        return;
    }
    cop_lits(c, "{");
    /* chain A: optional properties before the first required one, each may be the first written */
    for (int i = 0; i < first_req; i++) {
        int f = cop_fork(c, 2);
        cop_target(c, f, 0, c->n_ops);
        property(k, p[i].name, p[i].schema, false);
        to_b[i] = cop_jmp(c); /* continues in chain B after property i */
        cop_target(c, f, 1, c->n_ops);
    }
    int to_close = -1;
    if (first_req < n) {
        property(k, p[first_req].name, p[first_req].schema, false);
        to_b[first_req] = cop_jmp(c);
    } else {
        to_close = cop_jmp(c); /* nothing at all: "{}" */
    }
    /* chain B: every later property, with a comma */
    for (int j = 1; j < n; j++) {
        b_at[j] = c->n_ops;
        if (p[j].required) {
            property(k, p[j].name, p[j].schema, true);
            continue;
        }
        int f = cop_fork(c, 2);
        cop_target(c, f, 0, c->n_ops);
        property(k, p[j].name, p[j].schema, true);
        cop_target(c, f, 1, c->n_ops);
    }
    b_at[n] = c->n_ops;
    cop_lits(c, "}");
    for (int i = 0; i <= first_req && i < n; i++) cop_target(c, to_b[i], 0, b_at[i + 1]);
    cop_target(c, to_close, 0, b_at[n]);
    free(to_b);
    free(b_at);
}

static void object(Compiler *k, const cJSON *schema) {
    const cJSON *props = member(schema, "properties"), *required = member(schema, "required"),
                *extra = member(schema, "additionalProperties");
    if (k->strict) {
        if (props && !cJSON_IsObject(props)) return fail(k, "'properties' must be an object");
        if (required && !cJSON_IsArray(required)) return fail(k, "'required' must be an array of property names");
        for (const cJSON *r = required ? required->child : NULL; r; r = r->next)
            if (!cJSON_IsString(r)) return fail(k, "'required' must hold strings");
        if (extra && !cJSON_IsBool(extra) && !cJSON_IsObject(extra))
            return fail(k, "'additionalProperties' must be a boolean or a schema");
    }
    int n = 0;
    for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p; p = p->next) n++;
    for (const cJSON *r = cJSON_IsArray(required) ? required->child : NULL; r; r = r->next) n++;
    if (n == 0) {
        if (cJSON_IsFalse(extra)) cop_lits(k->c, "{}");
        else cop_emit(k->c, OP_JOBJ);
        return;
    }
    Prop *list = calloc((size_t)n, sizeof *list);
    if (!list) {
        k->c->oom = true;
        return;
    }
    int m = 0;
    for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p; p = p->next) {
        bool req = false;
        for (const cJSON *r = cJSON_IsArray(required) ? required->child : NULL; r && !req; r = r->next)
            req = cJSON_IsString(r) && p->string && !strcmp(r->valuestring, p->string);
        list[m++] = (Prop){p->string ? p->string : "", p, req};
    }
    for (const cJSON *r = cJSON_IsArray(required) ? required->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r) || cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) continue;
        bool dup = false;
        for (int i = 0; i < m && !dup; i++) dup = !strcmp(list[i].name, r->valuestring);
        if (dup) continue;
        if (k->strict && cJSON_IsFalse(extra)) {
            fail(k, "required property '%.80s' is not in 'properties' and additionalProperties is false",
                 r->valuestring);
            break;
        }
        list[m++] = (Prop){r->valuestring, NULL, true};
    }
    if (!k->failed) object_props(k, list, m);
    free(list);
}

static bool int_member(Compiler *k, const cJSON *schema, const char *key, int *out) {
    const cJSON *v = member(schema, key);
    if (!v) return false;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != (double)(long long)v->valuedouble) {
        if (k->strict) fail(k, "'%s' must be a non-negative integer", key);
        return false;
    }
    *out = v->valuedouble > 1e9 ? 1000000000 : (int)v->valuedouble;
    return true;
}

/* "[" items "]" with minItems copies written out, then up to maxItems more (a loop when unbounded). */
static void array(Compiler *k, const cJSON *schema) {
    Constraint *c = k->c;
    const cJSON *items = member(schema, "items");
    if (items && !cJSON_IsObject(items) && !cJSON_IsBool(items)) {
        if (k->strict) return fail(k, "'items' must be a schema (tuples are not supported)");
        items = NULL;
    }
    int lo = 0, hi = -1;
    int_member(k, schema, "minItems", &lo);
    if (!int_member(k, schema, "maxItems", &hi)) hi = -1;
    if (k->failed) return;
    if (hi >= 0 && hi < lo) return fail(k, "maxItems (%d) is smaller than minItems (%d)", hi, lo);
    if (lo > MAX_UNROLL || (hi >= 0 && hi - lo > MAX_UNROLL)) {
        if (k->strict) return fail(k, "minItems and maxItems - minItems above %d are not supported", MAX_UNROLL);
        if (lo > MAX_UNROLL) lo = MAX_UNROLL;
        hi = -1;
    }
    size_t mark = path_push(k, "items", -1);
    cop_lits(c, "[");
    int *exits = calloc((size_t)(hi >= 0 ? hi : lo) + 3, sizeof(int));
    int n_exits = 0;
    if (!exits) {
        c->oom = true;
        return;
    }
    int count = 0;
    if (lo == 0 && hi != 0) { /* the empty array, or a first item */
        int f = cop_fork(c, 2);
        exits[n_exits++] = f; /* target 1: "]" */
        cop_target(c, f, 0, c->n_ops);
        if (items) value(k, items);
        else cop_emit(c, OP_JANY);
        count = 1;
    }
    for (; count < lo; count++) {
        if (count) cop_lits(c, ", ");
        if (items) value(k, items);
        else cop_emit(c, OP_JANY);
    }
    if (hi < 0 && count > 0) { /* loop: (", " item)* */
        int loop = cop_fork(c, 2);
        cop_target(c, loop, 0, c->n_ops);
        cop_lits(c, ", ");
        if (items) value(k, items);
        else cop_emit(c, OP_JANY);
        cop_target(c, cop_jmp(c), 0, loop);
        exits[n_exits++] = loop;
    }
    for (; hi >= 0 && count < hi && count > 0; count++) {
        int f = cop_fork(c, 2);
        exits[n_exits++] = f;
        cop_target(c, f, 0, c->n_ops);
        cop_lits(c, ", ");
        if (items) value(k, items);
        else cop_emit(c, OP_JANY);
    }
    int close = c->n_ops;
    cop_lits(c, "]");
    for (int i = 0; i < n_exits; i++) cop_target(c, exits[i], 1, close);
    free(exits);
    k->path[mark] = 0;
}

/* $ref: "#", "#/$defs/NAME" or "#/definitions/NAME". */
static void reference(Compiler *k, const cJSON *ref) {
    if (!cJSON_IsString(ref)) return fail(k, "'$ref' must be a string");
    const char *r = ref->valuestring;
    const cJSON *target = NULL;
    if (!strcmp(r, "#")) target = k->root;
    else if (!strncmp(r, "#/$defs/", 8)) target = member(member(k->root, "$defs"), r + 8);
    else if (!strncmp(r, "#/definitions/", 14)) target = member(member(k->root, "definitions"), r + 14);
    if (!target) {
        if (k->strict) return fail(k, "'$ref' '%.100s' does not name a schema in $defs", r);
        cop_emit(k->c, OP_JANY);
        return;
    }
    int active = 0;
    for (int i = 0; i < k->n_refs; i++) active += !strcmp(k->refs[i], r);
    if (active >= REF_DEPTH || k->n_refs >= MAX_DEPTH) { /* recursion: this branch ends here */
        cop_emit(k->c, OP_FAIL);
        return;
    }
    char saved[sizeof k->path];
    memcpy(saved, k->path, sizeof saved);
    snprintf(k->path, sizeof k->path, "%s", r);
    k->refs[k->n_refs++] = r;
    value(k, target);
    k->n_refs--;
    memcpy(k->path, saved, sizeof saved);
}

static void any_of(Compiler *k, const cJSON *alts) {
    Constraint *c = k->c;
    int n = cJSON_GetArraySize(alts);
    if (!cJSON_IsArray(alts) || n == 0) return fail(k, "'anyOf' must be a non-empty array of schemas");
    int f = cop_fork(c, n);
    int *jumps = calloc((size_t)n, sizeof(int));
    if (!jumps) {
        c->oom = true;
        return;
    }
    int i = 0;
    for (const cJSON *a = alts->child; a; a = a->next, i++) {
        cop_target(c, f, i, c->n_ops);
        size_t mark = path_push(k, "anyOf", i);
        value(k, a);
        k->path[mark] = 0;
        jumps[i] = cop_jmp(c);
    }
    for (i = 0; i < n; i++) cop_target(c, jumps[i], 0, c->n_ops);
    free(jumps);
}

/* One type of a schema. */
static void typed(Compiler *k, const cJSON *schema, const char *t) {
    Constraint *c = k->c;
    if (!strcmp(t, "object")) object(k, schema);
    else if (!strcmp(t, "array")) array(k, schema);
    else if (!strcmp(t, "string")) cop_emit(c, OP_JSTR);
    else if (!strcmp(t, "integer")) cop_emit(c, OP_INT);
    else if (!strcmp(t, "number")) cop_emit(c, OP_NUM);
    else if (!strcmp(t, "null")) cop_lits(c, "null");
    else if (!strcmp(t, "boolean")) {
        char *tf[2] = {"true", "false"};
        choice(k, tf, 2);
    } else if (k->strict) {
        fail(k, "unknown type '%.40s'", t);
    } else {
        cop_emit(c, OP_JANY);
    }
}

static void value(Compiler *k, const cJSON *schema) {
    Constraint *c = k->c;
    if (k->failed || c->oom) return;
    if (cJSON_IsTrue(schema)) return (void)cop_emit(c, OP_JANY);
    if (cJSON_IsFalse(schema)) return (void)cop_emit(c, OP_FAIL);
    if (!cJSON_IsObject(schema)) {
        if (k->strict) fail(k, "a schema must be an object or a boolean");
        else cop_emit(c, OP_JANY);
        return;
    }
    if (k->depth >= MAX_DEPTH) {
        if (k->strict) fail(k, "the schema is nested deeper than %d levels", MAX_DEPTH);
        else cop_emit(c, OP_JANY);
        return;
    }
    check_keywords(k, schema);
    if (k->failed) return;
    k->depth++;
    const cJSON *t = member(schema, "type");
    if (member(schema, "$ref")) {
        reference(k, member(schema, "$ref"));
    } else if (member(schema, "anyOf")) {
        any_of(k, member(schema, "anyOf"));
    } else if (member(schema, "enum") || member(schema, "const")) {
        literals(k, schema, false);
    } else if (cJSON_IsString(t)) {
        typed(k, schema, t->valuestring);
    } else if (cJSON_IsArray(t) && t->child) {
        int n = cJSON_GetArraySize(t), i = 0;
        int f = n > 1 ? cop_fork(c, n) : -1;
        int *jumps = calloc((size_t)n, sizeof(int));
        if (!jumps) c->oom = true;
        for (const cJSON *e = t->child; e && jumps && !k->failed; e = e->next, i++) {
            if (!cJSON_IsString(e)) {
                if (k->strict) fail(k, "'type' must be a type name or a list of them");
                break;
            }
            cop_target(c, f, i, c->n_ops);
            typed(k, schema, e->valuestring);
            jumps[i] = n > 1 ? cop_jmp(c) : -1;
        }
        for (i = 0; jumps && i < n; i++) cop_target(c, jumps[i], 0, c->n_ops);
        free(jumps);
    } else if (t) {
        if (k->strict) fail(k, "'type' must be a type name or a list of them");
        else cop_emit(c, OP_JANY);
    } else if (member(schema, "properties") || member(schema, "required")) {
        object(k, schema);
    } else if (member(schema, "items")) {
        array(k, schema);
    } else {
        cop_emit(c, OP_JANY);
    }
    k->depth--;
}

/* ------------------------------------------------------------------------------------------ entry */

static Constraint *finish(Compiler *k, Err *err, const char *what) {
    Constraint *c = k->c;
    cop_emit(c, OP_END);
    if (k->failed) {
        constraint_free(c);
        return NULL;
    }
    if (c->oom) {
        constraint_free(c);
        return err_set(err, "%s is too large to constrain (more than %d program steps)", what, MAX_OPS), NULL;
    }
    if (constraint_finish(c, err)) {
        constraint_free(c);
        return NULL;
    }
    return c;
}

Constraint *constraint_json(const cJSON *schema, Err *err) {
    Constraint *c = calloc(1, sizeof *c);
    if (!c) return err_set(err, "out of memory"), NULL;
    Compiler k = {.c = c, .root = schema, .strict = true, .err = err, .path = "#"};
    if (schema) value(&k, schema);
    else cop_emit(c, OP_JOBJ);
    return finish(&k, err, "the JSON schema");
}

/* A parameter value in the XML format: strings (and enums of strings) as raw text, the rest as JSON. */
static void xml_value(Compiler *k, const cJSON *schema) {
    const cJSON *t = member(schema, "type"), *en = member(schema, "enum");
    if (en || member(schema, "const")) return literals(k, schema, true);
    if (!t || (cJSON_IsString(t) && !strcmp(t->valuestring, "string"))) {
        cop_emit(k->c, OP_XTEXT);
        return;
    }
    value(k, schema);
}

static void xml_param(Compiler *k, const char *name, const cJSON *schema) {
    cop_lits(k->c, "<parameter=");
    cop_lits(k->c, name);
    cop_lits(k->c, ">\n");
    xml_value(k, schema);
    cop_lits(k->c, "\n</parameter>\n");
}

static bool in_required(const cJSON *required, const char *name) {
    for (const cJSON *r = cJSON_IsArray(required) ? required->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && strcmp(r->valuestring, name) == 0) return true;
    return false;
}

/* The required parameters in their listed order, then each optional one or not, in schema order. */
static void xml_body(Compiler *k, const cJSON *params) {
    Constraint *c = k->c;
    const cJSON *props = member(params, "properties"), *required = member(params, "required");
    for (const cJSON *r = cJSON_IsArray(required) ? required->child : NULL; r; r = r->next)
        if (cJSON_IsString(r)) xml_param(k, r->valuestring, cJSON_GetObjectItemCaseSensitive(props, r->valuestring));
    for (const cJSON *p = cJSON_IsObject(props) ? props->child : NULL; p; p = p->next) {
        if (!p->string || in_required(required, p->string)) continue;
        int f = cop_fork(c, 2);
        cop_target(c, f, 0, c->n_ops);
        xml_param(k, p->string, p);
        cop_target(c, f, 1, c->n_ops);
    }
    cop_lits(c, "</function>\n</tool_call>");
}

static const cJSON *tool_function(const cJSON *tool) {
    const cJSON *f = member(tool, "function");
    return f ? f : tool;
}

Constraint *constraint_tool_call(bool xml, const cJSON *tools, const char *only, Err *err) {
    int n = 0;
    for (const cJSON *t = cJSON_IsArray(tools) ? tools->child : NULL; t; t = t->next) {
        const cJSON *name = member(tool_function(t), "name");
        if (cJSON_IsString(name) && (!only || !strcmp(only, name->valuestring))) n++;
    }
    if (!n) return err_set(err, only ? "tool_choice names a function that is not in tools" : "no tools to call"), NULL;
    Constraint *c = calloc(1, sizeof *c);
    int *jumps = calloc((size_t)n, sizeof(int));
    if (!c || !jumps) {
        free(c), free(jumps);
        return err_set(err, "out of memory"), NULL;
    }
    Compiler k = {.c = c, .strict = false, .err = err, .path = "#"};
    cop_lits(c, xml ? "<tool_call>\n<function=" : "<tool_call>\n{\"name\": \"");
    int f = cop_fork(c, n), i = 0;
    for (const cJSON *t = cJSON_IsArray(tools) ? tools->child : NULL; t; t = t->next) {
        const cJSON *fn = tool_function(t), *name = member(fn, "name");
        if (!cJSON_IsString(name) || (only && strcmp(only, name->valuestring) != 0)) continue;
        cop_target(c, f, i, c->n_ops);
        cop_lits(c, name->valuestring);
        const cJSON *params = member(fn, "parameters");
        k.root = params;
        if (xml) {
            cop_lits(c, ">\n");
            xml_body(&k, params);
        } else {
            cop_lits(c, "\", \"arguments\": ");
            const cJSON *type = member(params, "type");
            bool obj = member(params, "properties") || (cJSON_IsString(type) && !strcmp(type->valuestring, "object"));
            if (obj) value(&k, params); /* arguments are an object whatever else the schema says */
            else cop_emit(c, OP_JOBJ);
            cop_lits(c, "}\n</tool_call>");
        }
        jumps[i++] = cop_jmp(c);
    }
    int end = c->n_ops;
    for (int j = 0; j < i; j++) cop_target(c, jumps[j], 0, end);
    free(jumps);
    return finish(&k, err, "the tool schema");
}
