/* respond_llama.c — llama.cpp's native POST /completion answer shapes (the request is a /v1/completions
 * request with llama-server's fields, openai.c + openai_llama.c):
 *   whole body: {"index", "content", "tokens": [], "id_slot", "stop": true, "model", "tokens_predicted",
 *                "tokens_evaluated", "tokens_cached", "truncated", "stop_type": "eos"|"word"|"limit",
 *                "stopping_word", "timings"}; a batch of prompts gives an array of them;
 *   streaming:  "data: {"index", "content", "tokens": [], "stop": false, "id_slot": -1}" per piece of text,
 *               then one chunk with "stop": true and the fields of the whole body; no "[DONE]" (llama-server
 *               sends none on this endpoint). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/json_io.h"
#include "server/respond.h"

static const char *stop_type(const JobResult *res) {
    if (res->finish == FINISH_LENGTH) return "limit";
    return res->stop_word ? "word" : "eos";
}

static void final_fields(const Responder *r, cJSON *o, const JobResult *res) {
    cJSON_AddNumberToObject(o, "id_slot", res->slot);
    cJSON_AddBoolToObject(o, "stop", true);
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddNumberToObject(o, "tokens_predicted", res->n_gen);
    cJSON_AddNumberToObject(o, "tokens_evaluated", res->n_prompt);
    cJSON_AddNumberToObject(o, "tokens_cached", res->n_cached);
    cJSON_AddBoolToObject(o, "truncated", false);
    cJSON_AddStringToObject(o, "stop_type", stop_type(res));
    cJSON_AddStringToObject(o, "stopping_word", res->stop_word && res->stopping_word ? res->stopping_word : "");
    cJSON_AddItemToObject(o, "timings", resp_timings_object(res));
}

static cJSON *piece(const Responder *r, const char *text, size_t n) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", r->index);
    json_add_string_n(o, "content", text, n);
    cJSON_AddArrayToObject(o, "tokens");
    return o;
}

int llama_stream_text(Responder *r, const char *text, size_t n, SBuf *out, Err *err) {
    if (!n) return 0;
    cJSON *o = piece(r, text, n);
    cJSON_AddBoolToObject(o, "stop", false);
    cJSON_AddNumberToObject(o, "id_slot", -1);
    if (r->timings_per_token) cJSON_AddItemToObject(o, "timings", resp_timings_object(&r->now));
    resp_sse(out, NULL, o);
    return out->oom ? err_set(err, "out of memory") : 0;
}

int llama_stream_finish(Responder *r, const JobResult *res, SBuf *out, Err *err) {
    cJSON *o = piece(r, "", 0);
    final_fields(r, o, res);
    resp_sse(out, NULL, o);
    return out->oom ? err_set(err, "out of memory") : 0;
}

char *llama_body(Responder *r, int k, const JobResult *res, Err *err) {
    cJSON *all = k > 1 ? cJSON_CreateArray() : NULL, *one = NULL;
    for (int i = 0; i < k; i++) {
        one = piece(&r[i], r[i].text.p ? r[i].text.p : "", r[i].text.n);
        final_fields(&r[i], one, &res[i]);
        if (all) cJSON_AddItemToArray(all, one);
    }
    char *s = json_print(all ? all : one);
    cJSON_Delete(all ? all : one);
    if (!s) err_set(err, "out of memory");
    return s;
}
