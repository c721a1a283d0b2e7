/* openai_llama.c — the request fields llama-server accepts beyond OpenAI's, on /v1/chat/completions,
 * /v1/completions and /completion: n_predict, id_slot, include_stop_str_in_output, skip_special_tokens,
 * reasoning_format, timings_per_token (and return_progress, backend_sampling: accepted, no effect). They are taken out of the request document before the OpenAI fields are checked (so the
 * strict unknown-field check stays as it is), and applied after them. The samplers llama-server has
 * (typical_p, mirostat, dry_*, ...) are parsed with the OpenAI ones in openai.c, not here. */
#include <math.h>
#include <string.h>

#include "server/openai.h"

#define BAD(param, ...) api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* Detaches key from doc and returns it (the caller deletes it); NULL when absent or null. */
static cJSON *take(cJSON *doc, const char *key) {
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(doc, key);
    if (v && cJSON_IsNull(v)) cJSON_Delete(v), v = NULL;
    return v;
}

static int take_int(cJSON *doc, const char *key, double lo, double hi, bool *given, int *out, ApiError *e) {
    cJSON *v = take(doc, key);
    *given = v != NULL;
    if (!v) return 0;
    bool ok = cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
              v->valuedouble >= lo && v->valuedouble <= hi;
    double x = cJSON_IsNumber(v) ? v->valuedouble : 0;
    bool number = cJSON_IsNumber(v);
    const char *type = api_type_name(v);
    cJSON_Delete(v);
    if (!ok)
        return number ? BAD(key, "'%s' must be an integer in [%g, %g], got %g", key, lo, hi, x)
                      : BAD(key, "'%s' must be an integer, not %s", key, type);
    *out = (int)x;
    return 0;
}

static int take_bool(cJSON *doc, const char *key, bool *out, ApiError *e) {
    cJSON *v = take(doc, key);
    if (!v) return 0;
    bool ok = cJSON_IsBool(v), val = cJSON_IsTrue(v);
    const char *type = api_type_name(v);
    cJSON_Delete(v);
    if (!ok) return BAD(key, "'%s' must be a boolean, not %s", key, type);
    *out = val;
    return 0;
}

int api_llama_take(ApiRequest *r, ApiError *e) {
    ApiLlama *l = &r->llama;
    if (take_int(r->doc, "n_predict", -1, 1e9, &l->n_predict_given, &l->n_predict, e)) return -1;
    if (l->n_predict_given && l->n_predict == 0) return BAD("n_predict", "'n_predict' must be -1 (no limit) or ≥ 1");
    if (l->n_predict_given && cJSON_GetObjectItemCaseSensitive(r->doc, "max_tokens"))
        return BAD("n_predict", "give 'max_tokens' or 'n_predict', not both");
    if (take_int(r->doc, "id_slot", -1, 255, &l->id_slot_given, &l->id_slot, e)) return -1;
    if (l->id_slot < 0) l->id_slot_given = false;
    if (take_bool(r->doc, "include_stop_str_in_output", &l->include_stop, e)) return -1;
    bool skip = true;
    if (take_bool(r->doc, "skip_special_tokens", &skip, e)) return -1;
    l->keep_special = !skip;
    if (take_bool(r->doc, "timings_per_token", &l->timings_per_token, e)) return -1;
    /* llama.cpp's web UI sends these two: accepted, and they change nothing here (no prompt-progress events;
     * sampling runs on the CPU whatever the device) */
    bool ignored = false;
    if (take_bool(r->doc, "return_progress", &ignored, e)) return -1;
    if (take_bool(r->doc, "backend_sampling", &ignored, e)) return -1;
    cJSON *rf = take(r->doc, "reasoning_format");
    if (rf) {
        const char *name = cJSON_IsString(rf) ? rf->valuestring : NULL;
        bool none = name && !strcmp(name, "none"), parsed = name && (!strcmp(name, "deepseek") ||
                                                                    !strcmp(name, "auto"));
        cJSON_Delete(rf);
        if (!none && !parsed)
            return BAD("reasoning_format", "'reasoning_format' must be \"none\", \"deepseek\" or \"auto\"");
        l->reasoning_raw = none;
    }
    return 0;
}

int api_llama_apply(ApiRequest *r, ApiError *e) {
    const ApiLlama *l = &r->llama;
    if (l->n_predict_given) {
        r->max_tokens = l->n_predict; /* -1: until the context is full */
        r->max_tokens_given = true;
    }
    if (l->reasoning_raw && r->chat && r->tools)
        return BAD("reasoning_format", "reasoning_format \"none\" returns the text unparsed: it cannot be combined "
                                       "with tools");
    return 0;
}
