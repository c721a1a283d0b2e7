/* llama_params.c — see llama_params.h. Ranges follow llama-server's (values it would clamp are refused here
 * with the range, as every other field of the OpenAI endpoints is). */
#include "server/llama_params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/constrain.h"
#include "server/json_io.h"
#include "server/openai.h"

#define BAD(param, ...) api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

enum { BREAKERS_MAX = 32, BREAKER_LEN_MAX = 64 };

static const cJSON *get(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* 1 when given (in range), 0 when absent, -1 on a bad value. */
static int num(const cJSON *root, const char *key, double lo, double hi, bool integer, double *out, ApiError *e) {
    const cJSON *v = get(root, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return BAD(key, "'%s' must be %s, not %s", key, integer ? "an integer" : "a number", api_type_name(v));
    const double x = v->valuedouble;
    if (integer && x != floor(x)) return BAD(key, "'%s' must be an integer, not %g", key, x);
    if (x < lo || x > hi) return BAD(key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = x;
    return 1;
}

void sampler_spec_free(SamplerSpec *s) {
    if (!s) return;
    for (int i = 0; i < s->n_breakers; i++) free(s->breakers[i]);
    free(s->breakers);
    free(s->samplers);
    free(s);
}

static SamplerSpec *spec_new(void) {
    SamplerSpec *s = calloc(1, sizeof *s);
    if (s) dl_sampler_extra_init(&s->x);
    return s;
}

static void spec_link(SamplerSpec *s) {
    s->x.dry_breakers = s->breakers ? (const char *const *)s->breakers : NULL;
    s->x.n_dry_breakers = s->n_breakers;
    s->x.samplers = s->samplers;
}

SamplerSpec *sampler_spec_copy(const SamplerSpec *s) {
    if (!s) return NULL;
    SamplerSpec *c = spec_new();
    if (!c) return NULL;
    c->x = s->x;
    bool ok = true;
    if (s->breakers) {
        ok = (c->breakers = calloc((size_t)s->n_breakers + 1, sizeof *c->breakers)) != NULL;
        for (int i = 0; ok && i < s->n_breakers; i++, c->n_breakers++) ok = (c->breakers[i] = strdup(s->breakers[i])) != NULL;
    }
    if (ok && s->samplers) ok = (c->samplers = strdup(s->samplers)) != NULL;
    if (!ok) {
        sampler_spec_free(c);
        return NULL;
    }
    spec_link(c);
    return c;
}

static int parse_breakers(const cJSON *v, SamplerSpec *s, ApiError *e) {
    const char *key = "dry_sequence_breakers";
    if (!cJSON_IsArray(v)) return BAD(key, "'%s' must be an array of strings, not %s", key, api_type_name(v));
    const int n = cJSON_GetArraySize(v);
    if (n > BREAKERS_MAX) return BAD(key, "at most %d dry_sequence_breakers are supported", BREAKERS_MAX);
    if (!(s->breakers = calloc((size_t)n + 1, sizeof *s->breakers)))
        return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    for (const cJSON *b = v->child; b; b = b->next) {
        if (!cJSON_IsString(b) || !b->valuestring[0] || strlen(b->valuestring) > BREAKER_LEN_MAX ||
            strstr(b->valuestring, JSON_NUL))
            return BAD(key, "dry_sequence_breakers must be non-empty strings of at most %d bytes", BREAKER_LEN_MAX);
        if (!(s->breakers[s->n_breakers] = strdup(b->valuestring)))
            return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
        s->n_breakers++;
    }
    return 0;
}

/* samplers: ["top_k", "top_p", ...] or "kpt" (llama-server takes both); checked by the engine's names. */
static int parse_samplers(const cJSON *v, SamplerSpec *s, ApiError *e) {
    const char *key = "samplers";
    size_t cap = 1;
    if (cJSON_IsString(v)) cap += strlen(v->valuestring);
    else if (cJSON_IsArray(v))
        for (const cJSON *n = v->child; n; n = n->next) cap += cJSON_IsString(n) ? strlen(n->valuestring) + 1 : 0;
    else return BAD(key, "'samplers' must be an array of sampler names or a string of their letters, not %s", api_type_name(v));
    if (cap > 1024) return BAD(key, "'samplers' is too long");
    if (!(s->samplers = calloc(cap, 1))) return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    if (cJSON_IsString(v)) {
        if (strpbrk(v->valuestring, ";, ")) return BAD(key, "'samplers' as a string holds letters (\"kpt\"); give names as an array");
        memcpy(s->samplers, v->valuestring, cap - 1);
    }
    for (const cJSON *n = cJSON_IsArray(v) ? v->child : NULL; n; n = n->next) {
        if (!cJSON_IsString(n) || !n->valuestring[0] || strpbrk(n->valuestring, ";, "))
            return BAD(key, "'samplers' must hold sampler names (top_k, top_p, min_p, ...)");
        if (n != v->child) strcat(s->samplers, ";");
        strcat(s->samplers, n->valuestring);
    }
    if (cJSON_IsArray(v) && !v->child) strcpy(s->samplers, ";"); /* an empty list: the draw alone */
    /* the engine knows the names: check them now, with a sampler of nothing */
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.samplers = s->samplers;
    static const char *const names[] = {"penalties", "dry", "top_n_sigma", "top_k", "typ_p", "typical_p", "typical",
                                        "top_p", "nucleus", "min_p", "xtc", "temperature", "temp", NULL};
    if (cJSON_IsString(v)) {
        for (const char *c = s->samplers; *c; c++)
            if (!strchr("edskypmxt", *c))
                return BAD(key, "unknown sampler letter '%c' in 'samplers' (e d s k y p m x t)", *c);
    } else {
        for (const cJSON *n = v->child; n; n = n->next) {
            bool known = false;
            for (int i = 0; names[i] && !known; i++) known = !strcmp(names[i], n->valuestring);
            if (!known)
                return BAD(key, "unknown sampler '%s' in 'samplers' (penalties, dry, top_n_sigma, top_k, typ_p, top_p, "
                                "min_p, xtc, temperature)",
                           n->valuestring);
        }
    }
    return 0;
}

/* The samplers the server's defaults turn on (only those: a default left off changes nothing). */
static bool apply_defaults(SamplerSpec *s, const DlSamplerExtra *d) {
    DlSamplerExtra *q = &s->x;
    bool any = false;
    if (d->typical_p > 0.0f && d->typical_p < 1.0f) q->typical_p = d->typical_p, any = true;
    if (d->mirostat == 1 || d->mirostat == 2)
        q->mirostat = d->mirostat, q->mirostat_tau = d->mirostat_tau, q->mirostat_eta = d->mirostat_eta, any = true;
    if (d->dry_multiplier > 0.0f && d->dry_base >= 1.0f) {
        q->dry_multiplier = d->dry_multiplier, q->dry_base = d->dry_base;
        q->dry_allowed_length = d->dry_allowed_length, q->dry_penalty_last_n = d->dry_penalty_last_n;
        any = true;
    }
    if (d->xtc_probability > 0.0f) q->xtc_probability = d->xtc_probability, q->xtc_threshold = d->xtc_threshold, any = true;
    if (d->top_n_sigma > 0.0f) q->top_n_sigma = d->top_n_sigma, any = true;
    if (d->dynatemp_range > 0.0f) q->dynatemp_range = d->dynatemp_range, q->dynatemp_exponent = d->dynatemp_exponent, any = true;
    if (d->min_tokens > 0) q->min_tokens = d->min_tokens, any = true;
    if (d->samplers && (s->samplers = strdup(d->samplers))) any = true;
    return any;
}

int llama_params_parse(const cJSON *root, const DlSamplerExtra *defaults, DlSamplingParams *sp, SamplerSpec **spec,
                       int *n_probs, ApiError *e) {
    *spec = NULL;
    *n_probs = -1;
    double x;
    int rc;
    if ((rc = num(root, "repetition_penalty", 0.01, 10, false, &x, e)) < 0) return -1;
    if (rc) sp->repeat_penalty = (float)x;
    if ((rc = num(root, "repeat_last_n", -1, 1 << 20, true, &x, e)) < 0) return -1;
    if (rc && x >= 0) sp->penalty_last_n = (int)x; /* -1: the context (the default window) */
    if ((rc = num(root, "n_probs", 0, 20, true, &x, e)) < 0) return -1;
    if (rc) *n_probs = (int)x;
    SamplerSpec *s = spec_new();
    if (!s) return api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    DlSamplerExtra *q = &s->x;
    struct {
        const char *key;
        double lo, hi;
        bool integer;
        float *f;
        int *i;
    } fields[] = {
        {"typical_p", 0, 1, false, &q->typical_p, NULL},
        {"typ_p", 0, 1, false, &q->typical_p, NULL}, /* llama.cpp's web UI's name for it */
        {"dynatemp_range", 0, 100, false, &q->dynatemp_range, NULL},
        {"dynatemp_exponent", 0, 100, false, &q->dynatemp_exponent, NULL},
        {"mirostat", 0, 2, true, NULL, &q->mirostat},
        {"mirostat_tau", 0, 100, false, &q->mirostat_tau, NULL},
        {"mirostat_eta", 0, 1, false, &q->mirostat_eta, NULL},
        {"dry_multiplier", 0, 100, false, &q->dry_multiplier, NULL},
        {"dry_base", 1, 100, false, &q->dry_base, NULL},
        {"dry_allowed_length", 0, 1 << 20, true, NULL, &q->dry_allowed_length},
        {"dry_penalty_last_n", -1, 1 << 20, true, NULL, &q->dry_penalty_last_n},
        {"xtc_probability", 0, 1, false, &q->xtc_probability, NULL},
        {"xtc_threshold", 0, 1, false, &q->xtc_threshold, NULL},
        {"top_n_sigma", -1, 1000, false, &q->top_n_sigma, NULL},
        {"min_tokens", 0, 1 << 30, true, NULL, &q->min_tokens},
    };
    bool any = defaults && apply_defaults(s, defaults);
    for (size_t k = 0; k < sizeof fields / sizeof *fields; k++) {
        if ((rc = num(root, fields[k].key, fields[k].lo, fields[k].hi, fields[k].integer, &x, e)) < 0) goto fail;
        if (!rc) continue;
        if (fields[k].f) *fields[k].f = (float)x;
        else *fields[k].i = (int)x;
        any = true;
    }
    if (q->typical_p <= 0.0f) q->typical_p = 1.0f; /* llama-server: typical_p 0 is off too */
    const cJSON *v;
    if ((v = get(root, "dry_sequence_breakers")) && parse_breakers(v, s, e)) goto fail;
    if ((v = get(root, "samplers"))) {
        free(s->samplers);
        s->samplers = NULL;
        if (parse_samplers(v, s, e)) goto fail;
    }
    if (!any && !s->samplers) { /* breakers alone change nothing */
        sampler_spec_free(s);
        return 0;
    }
    spec_link(s);
    *spec = s;
    return 0;
fail:
    sampler_spec_free(s);
    return -1;
}

int llama_output_parse(const cJSON *root, const char **grammar, const cJSON **schema, ApiError *e) {
    *grammar = NULL;
    *schema = NULL;
    const cJSON *g = get(root, "grammar"), *js = get(root, "json_schema");
    if (g && !cJSON_IsString(g)) return BAD("grammar", "'grammar' must be a string (GBNF), not %s", api_type_name(g));
    if (js && !cJSON_IsObject(js)) return BAD("json_schema", "'json_schema' must be an object, not %s", api_type_name(js));
    if (g && js) return BAD("grammar", "give either 'grammar' or 'json_schema', not both");
    if (g && g->valuestring[0]) {
        if (strstr(g->valuestring, JSON_NUL)) return BAD("grammar", "a grammar may not contain NUL characters");
        Err err = {{0}};
        Constraint *c = constraint_grammar(g->valuestring, strlen(g->valuestring), &err);
        if (!c) return BAD("grammar", "%s", err.msg);
        constraint_free(c);
        *grammar = g->valuestring;
    }
    *schema = js;
    return 0;
}
