/* http_parse.c — see http_parse.h. */
#include "server/http_parse.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "server/util.h"

static const char *const route_names[R_COUNT] = {"none",     "health",     "models",         "model",
                                                 "chat",     "completions", "responses",     "response",
                                                 "tokenize", "detokenize", "apply_template", "props",
                                                 "slots",    "metrics",    "completion",     "slot_action",
                                                 "messages"};

const char *route_name(Route r) { return (unsigned)r < R_COUNT ? route_names[r] : "?"; }

Route http_route(const char *url, char *id, size_t cap) {
    const char *p = url;
    if (!strncmp(p, "/v1/", 4)) p += 3;
    static const struct {
        const char *path;
        Route route;
    } exact[] = {{"/health", R_HEALTH},       {"/models", R_MODELS},           {"/chat/completions", R_CHAT},
                 {"/completions", R_COMPLETIONS}, {"/responses", R_RESPONSES}, {"/tokenize", R_TOKENIZE},
                 {"/detokenize", R_DETOKENIZE}, {"/apply-template", R_APPLY_TEMPLATE}, {"/props", R_PROPS},
                 {"/slots", R_SLOTS},         {"/metrics", R_METRICS},         {"/completion", R_LLAMA_COMPLETION},
                 {"/messages", R_MESSAGES}};
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
        if (!strcmp(p, exact[i].path)) return exact[i].route;
    static const struct {
        const char *prefix;
        Route route;
    } with_id[] = {{"/models/", R_MODEL_ONE}, {"/responses/", R_RESPONSE_ONE}, {"/slots/", R_SLOT_ACTION}};
    for (size_t i = 0; i < sizeof with_id / sizeof *with_id; i++) {
        size_t n = strlen(with_id[i].prefix);
        if (!strncmp(p, with_id[i].prefix, n) && p[n] && strlen(p + n) < cap &&
            (with_id[i].route == R_MODEL_ONE || !strchr(p + n, '/')) &&
            (with_id[i].route != R_SLOT_ACTION || strspn(p + n, "0123456789") == strlen(p + n))) {
            snprintf(id, cap, "%s", p + n);
            return with_id[i].route;
        }
    }
    return R_NONE;
}

bool http_wants_post(Route r) {
    return r == R_CHAT || r == R_COMPLETIONS || r == R_RESPONSES || r == R_TOKENIZE || r == R_DETOKENIZE ||
           r == R_APPLY_TEMPLATE || r == R_LLAMA_COMPLETION || r == R_SLOT_ACTION || r == R_MESSAGES;
}

size_t http_unescape(char *s) {
    char *w = s;
    for (const char *r = s; *r; r++) {
        int hi, lo;
        if (r[0] == '%' && (hi = hex_digit(r[1])) >= 0 && (lo = hex_digit(r[2])) >= 0 && (hi | lo)) {
            *w++ = (char)(hi * 16 + lo);
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
    return (size_t)(w - s);
}

bool http_bearer_matches(const char *h, const char *key, size_t key_len) {
    if (!h) return false;
    while (*h == ' ') h++;
    if (strncasecmp(h, "Bearer", 6) != 0 || (h[6] != ' ' && h[6] != '\t')) return false;
    h += 6;
    while (*h == ' ' || *h == '\t') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    return const_time_equal(h, n, key, key_len);
}

bool http_bearer_matches_any(const char *h, const char *keys) {
    bool ok = false;
    for (const char *k = keys; k && *k;) {
        size_t n = strcspn(k, ",");
        const char *a = k;
        size_t m = n;
        while (m && (*a == ' ' || *a == '\t')) a++, m--;
        while (m && (a[m - 1] == ' ' || a[m - 1] == '\t')) m--;
        if (m) ok |= http_bearer_matches(h, a, m);
        k += n + (k[n] == ',');
    }
    return ok;
}

bool http_origin_allowed(const char *cfg, const char *origin) {
    if (!cfg || !origin) return false;
    if (!strcmp(cfg, "*")) return true;
    size_t n = strlen(origin);
    for (const char *p = cfg; *p;) {
        while (*p == ' ' || *p == ',') p++;
        size_t k = strcspn(p, ",");
        size_t t = k;
        while (t && p[t - 1] == ' ') t--;
        if (t && t == n && !strncmp(p, origin, n)) return true;
        p += k;
    }
    return false;
}
