/* endpoints.c — the routes that do not generate: /health, /v1/models, /props, /slots, /metrics (Prometheus
 * text), GET /v1/responses/{id}, and the utilities llama.cpp's server has: /tokenize, /detokenize,
 * /apply-template. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/http_internal.h"
#include "server/json_io.h"

#define BAD(param, ...) api_error(&e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)

/* ------------------------------------------------------------------------------------------ GET */

static char *health_json(Server *s) {
    SchedStats st;
    sched_stats(s->sched, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", "ok");
    cJSON_AddStringToObject(o, "model", s->model_id);
    cJSON *sl = cJSON_AddObjectToObject(o, "slots");
    cJSON_AddNumberToObject(sl, "total", st.n_slots);
    cJSON_AddNumberToObject(sl, "busy", st.busy);
    cJSON_AddNumberToObject(sl, "idle", st.n_slots - st.busy);
    cJSON *q = cJSON_AddObjectToObject(o, "queue");
    cJSON_AddNumberToObject(q, "waiting", st.queued);
    cJSON_AddNumberToObject(q, "max", st.queue_max);
    cJSON *t = cJSON_AddObjectToObject(o, "totals");
    cJSON_AddNumberToObject(t, "requests", (double)st.jobs_done);
    cJSON_AddNumberToObject(t, "prompt_tokens", (double)st.tokens_prompt);
    cJSON_AddNumberToObject(t, "cached_tokens", (double)st.tokens_cached);
    cJSON_AddNumberToObject(t, "generated_tokens", (double)st.tokens_generated);
    if (s->vision) {
        uint64_t enc, hits;
        sv_stats(s->vision, &enc, &hits);
        cJSON *im = cJSON_AddObjectToObject(o, "images");
        cJSON_AddNumberToObject(im, "encoded", (double)enc);
        cJSON_AddNumberToObject(im, "cache_hits", (double)hits);
    }
    if (s->cache) {
        PcacheStats ps;
        pcache_stats(s->cache, &ps);
        cJSON *c = cJSON_AddObjectToObject(o, "prefix_cache");
        cJSON_AddNumberToObject(c, "ram_entries", (double)ps.ram_entries);
        cJSON_AddNumberToObject(c, "ram_bytes", (double)ps.ram_bytes);
        cJSON_AddNumberToObject(c, "disk_entries", (double)ps.disk_entries);
        cJSON_AddNumberToObject(c, "disk_bytes", (double)ps.disk_bytes);
        cJSON_AddNumberToObject(c, "hits_ram", (double)ps.hits_ram);
        cJSON_AddNumberToObject(c, "hits_disk", (double)ps.hits_disk);
        cJSON_AddNumberToObject(c, "misses", (double)ps.misses);
        cJSON_AddNumberToObject(c, "stores", (double)ps.stores);
        cJSON_AddNumberToObject(c, "evictions", (double)ps.evictions);
        cJSON_AddNumberToObject(c, "ignored_files", (double)ps.ignored_files);
        cJSON_AddNumberToObject(c, "orphans_removed", (double)ps.orphans_removed);
    }
    char *json = json_print(o);
    cJSON_Delete(o);
    return json;
}

static cJSON *model_object(Server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)(long)s->started);
    cJSON_AddStringToObject(m, "owned_by", "deltallm");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", s->info->arch);
    cJSON_AddNumberToObject(meta, "n_ctx", s->info->n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx_train", s->info->n_ctx_train);
    cJSON_AddNumberToObject(meta, "n_vocab", s->info->n_vocab);
    cJSON_AddNumberToObject(meta, "slots", s->cfg.parallel);
    if (s->have_template) cJSON_AddStringToObject(meta, "chat_format", chat_format_name(s->tmpl.format));
    /* llama-server lists "multimodal" among a model's capabilities when it has a projector */
    cJSON *cap = cJSON_AddArrayToObject(m, "capabilities");
    cJSON_AddItemToArray(cap, cJSON_CreateString("completion"));
    if (s->vision) cJSON_AddItemToArray(cap, cJSON_CreateString("multimodal"));
    return m;
}

static char *print_free(cJSON *o) {
    char *json = json_print(o);
    cJSON_Delete(o);
    return json;
}

static char *models_json(Server *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_object(s));
    return print_free(o);
}

/* A float as the shortest decimal that reads back as it (0.8f shows as 0.8, not 0.800000011920929). */
static double short_float(float x) {
    char b[32];
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, (double)x);
        if ((float)strtod(b, NULL) == x) break;
    }
    return strtod(b, NULL);
}

/* llama.cpp's /props: the defaults a request gets, the slots, the model, the chat template. */
static char *props_json(Server *s) {
    cJSON *o = cJSON_CreateObject(), *dg = cJSON_AddObjectToObject(o, "default_generation_settings");
    cJSON_AddNumberToObject(dg, "n_ctx", s->info->n_ctx);
    cJSON *p = cJSON_AddObjectToObject(dg, "params");
    const DlSamplingParams *sp = &s->defaults.sampling;
    cJSON_AddNumberToObject(p, "temperature", short_float(sp->temperature));
    cJSON_AddNumberToObject(p, "top_k", sp->top_k);
    cJSON_AddNumberToObject(p, "top_p", short_float(sp->top_p));
    cJSON_AddNumberToObject(p, "min_p", short_float(sp->min_p));
    cJSON_AddNumberToObject(p, "n_predict", s->defaults.chat_max_tokens);
    cJSON_AddNumberToObject(o, "total_slots", s->cfg.parallel);
    cJSON_AddStringToObject(o, "model_path", s->cfg.model_path);
    cJSON_AddStringToObject(o, "model_alias", s->model_id);
    cJSON_AddStringToObject(o, "arch", s->info->arch);
    cJSON_AddNumberToObject(o, "n_ctx", s->info->n_ctx);
    cJSON_AddNumberToObject(o, "n_ctx_train", s->info->n_ctx_train);
    cJSON_AddNumberToObject(o, "n_vocab", s->info->n_vocab);
    cJSON *eng = cJSON_AddObjectToObject(o, "engine"); /* how the model computes (--arith, -ctk, -ctv, ...) */
    cJSON_AddStringToObject(eng, "arith", s->info->arith);
    cJSON_AddStringToObject(eng, "cache_type_k", s->info->kv_type_k);
    cJSON_AddStringToObject(eng, "cache_type_v", s->info->kv_type_v);
    cJSON_AddStringToObject(eng, "kernels", s->info->ops);
    cJSON_AddNumberToObject(eng, "threads", s->info->n_threads);
    const char *tmpl = dl_chat_template(s->engine);
    if (tmpl) json_add_string_n(o, "chat_template", tmpl, strlen(tmpl));
    else cJSON_AddNullToObject(o, "chat_template");
    if (s->have_template) cJSON_AddStringToObject(o, "chat_format", chat_format_name(s->tmpl.format));
    else cJSON_AddNullToObject(o, "chat_format");
    /* whether a chat request that does not set enable_thinking gets a reasoning block (the page's default) */
    cJSON_AddBoolToObject(o, "thinking_by_default",
                          s->have_template && !s->tmpl.thinking_opt_in &&
                              (s->tmpl.format == CHAT_FORMAT_QWEN3 || s->tmpl.format == CHAT_FORMAT_QWEN35));
    cJSON *mod = cJSON_AddObjectToObject(o, "modalities"); /* llama-server's: what a prompt may hold */
    cJSON_AddBoolToObject(mod, "vision", s->vision != NULL);
    cJSON_AddBoolToObject(mod, "audio", false);
    cJSON_AddStringToObject(o, "build_info", "deltallm");
    cJSON *lim = cJSON_AddObjectToObject(o, "limits");
    cJSON_AddNumberToObject(lim, "max_body_bytes", (double)s->cfg.max_body_bytes);
    cJSON_AddNumberToObject(lim, "queue", s->cfg.queue_max);
    cJSON_AddNumberToObject(lim, "max_connections", s->cfg.max_connections);
    cJSON_AddNumberToObject(lim, "max_connections_per_ip", s->cfg.max_connections_per_ip);
    cJSON_AddNumberToObject(lim, "read_timeout_s", s->cfg.read_timeout_s);
    cJSON_AddNumberToObject(lim, "idle_timeout_s", s->cfg.timeout_s);
    return print_free(o);
}

static char *slots_json(Server *s) {
    SlotInfo info[256];
    int n = sched_slots(s->sched, info, 256);
    static const char *const states[] = {"idle", "prompt", "generating"};
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const SlotInfo *in = &info[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", in->id);
        cJSON_AddNumberToObject(o, "n_ctx", in->n_ctx);
        cJSON_AddBoolToObject(o, "is_processing", in->state != 0);
        cJSON_AddStringToObject(o, "state", states[in->state]);
        if (in->state) {
            cJSON_AddNumberToObject(o, "id_task", (double)in->job_id);
            cJSON_AddNumberToObject(o, "n_prompt_tokens", in->n_prompt);
            cJSON_AddNumberToObject(o, "n_cached", in->n_cached);
            cJSON_AddNumberToObject(o, "n_decoded", in->n_gen);
            cJSON_AddNumberToObject(o, "n_past", in->n_past);
            cJSON_AddNumberToObject(o, "max_tokens", in->max_tokens);
            cJSON_AddNumberToObject(o, "seconds", in->seconds);
        }
        cJSON_AddItemToArray(arr, o);
    }
    return print_free(arr);
}

/* ------------------------------------------------------------------------------------------ metrics */

static void metric(SBuf *b, const char *name, const char *type, const char *help, double v) {
    sbuf_printf(b, "# HELP deltallm_%s %s\n# TYPE deltallm_%s %s\ndeltallm_%s %.17g\n", name, help, name, type, name, v);
}

/* Prometheus text exposition format 0.0.4. */
static void metrics_text(Server *s, SBuf *b) {
    SchedStats st;
    sched_stats(s->sched, &st);
    sbuf_puts(b, "# HELP deltallm_requests_total HTTP requests received, by endpoint.\n"
                 "# TYPE deltallm_requests_total counter\n");
    for (int r = 1; r < R_COUNT; r++)
        sbuf_printf(b, "deltallm_requests_total{endpoint=\"%s\"} %llu\n", route_name((Route)r),
                    (unsigned long long)atomic_load(&s->counters.requests[r]));
    sbuf_printf(b, "deltallm_requests_total{endpoint=\"unknown\"} %llu\n",
                (unsigned long long)atomic_load(&s->counters.requests[R_NONE]));
    sbuf_puts(b, "# HELP deltallm_responses_errors_total Error responses, by status class.\n"
                 "# TYPE deltallm_responses_errors_total counter\n");
    sbuf_printf(b, "deltallm_responses_errors_total{class=\"4xx\"} %llu\n",
                (unsigned long long)atomic_load(&s->counters.status_4xx));
    sbuf_printf(b, "deltallm_responses_errors_total{class=\"5xx\"} %llu\n",
                (unsigned long long)atomic_load(&s->counters.status_5xx));
    metric(b, "generations_total", "counter", "Generation jobs finished (one per choice).", (double)st.jobs_done);
    metric(b, "prompt_tokens_total", "counter", "Prompt tokens of finished and running jobs.", (double)st.tokens_prompt);
    metric(b, "prompt_tokens_cached_total", "counter", "Prompt tokens restored from prefix checkpoints.",
           (double)st.tokens_cached);
    metric(b, "prompt_seconds_total", "counter", "Time finished jobs spent reading their prompts.", st.prompt_seconds);
    metric(b, "generated_tokens_total", "counter", "Tokens generated by finished jobs.", (double)st.tokens_generated);
    metric(b, "generation_seconds_total", "counter", "Time finished jobs spent generating.", st.gen_seconds);
    uint64_t computed = st.tokens_prompt - st.tokens_cached;
    metric(b, "prompt_tokens_per_second", "gauge", "Prompt throughput over the server's life (computed tokens).",
           st.prompt_seconds > 0 ? (double)computed / st.prompt_seconds : 0);
    metric(b, "generation_tokens_per_second", "gauge", "Generation throughput per job over the server's life.",
           st.gen_seconds > 0 ? (double)st.tokens_generated / st.gen_seconds : 0);
    metric(b, "forward_passes_total", "counter", "Forward passes (prefill segments and batched decode steps).",
           (double)st.forward_passes);
    metric(b, "drafts_total", "counter", "Speculative decoding: drafted tokens verified.", (double)st.drafted);
    metric(b, "drafts_accepted_total", "counter", "Speculative decoding: drafted tokens accepted.", (double)st.accepted);
    if (s->vision) {
        uint64_t enc, hits;
        sv_stats(s->vision, &enc, &hits);
        metric(b, "images_encoded_total", "counter", "Images run through the vision encoder.", (double)enc);
        metric(b, "images_cached_total", "counter", "Images whose embeddings came from the cache.", (double)hits);
    }
    metric(b, "slots", "gauge", "Slots (requests computed at once).", st.n_slots);
    metric(b, "slots_busy", "gauge", "Slots computing a request.", st.busy);
    metric(b, "queue_waiting", "gauge", "Requests waiting for a slot.", st.queued);
    metric(b, "queue_capacity", "gauge", "Places in the queue.", st.queue_max);
    if (s->cache) {
        PcacheStats ps;
        pcache_stats(s->cache, &ps);
        metric(b, "prefix_cache_hits_total", "counter", "Prompts that resumed from a checkpoint (RAM or disk).",
               (double)(ps.hits_ram + ps.hits_disk));
        metric(b, "prefix_cache_hits_disk_total", "counter", "Checkpoints loaded from --state-dir.",
               (double)ps.hits_disk);
        metric(b, "prefix_cache_misses_total", "counter", "Prompts with no usable checkpoint.", (double)ps.misses);
        metric(b, "prefix_cache_stores_total", "counter", "Checkpoints stored.", (double)ps.stores);
        metric(b, "prefix_cache_evictions_total", "counter", "Checkpoints dropped from RAM.", (double)ps.evictions);
        metric(b, "prefix_cache_ram_bytes", "gauge", "RAM held by checkpoints.", (double)ps.ram_bytes);
        metric(b, "prefix_cache_disk_bytes", "gauge", "Disk held by checkpoint files.", (double)ps.disk_bytes);
    }
    metric(b, "read_timeouts_total", "counter", "Connections closed for not sending a request in time.",
           s->guard ? (double)guard_timeouts(s->guard) : 0);
    metric(b, "connection_evictions_total", "counter",
           "Connections closed at --max-connections because they had not sent their headers.",
           s->guard ? (double)guard_evictions(s->guard) : 0);
    metric(b, "stored_responses", "gauge", "Responses kept for previous_response_id.", (double)rstore_count(s->store));
}

enum MHD_Result http_get(Server *s, struct MHD_Connection *c, Route route, const char *id, const char *method,
                         const char *url) {
    ApiError e;
    switch (route) {
    case R_HEALTH: return http_send_json(s, c, 200, health_json(s), NULL, NULL);
    case R_MODELS: return http_send_json(s, c, 200, models_json(s), NULL, NULL);
    case R_PROPS: return http_send_json(s, c, 200, props_json(s), NULL, NULL);
    case R_SLOTS: return http_send_json(s, c, 200, slots_json(s), NULL, NULL);
    case R_MODEL_ONE:
        if (strcmp(id, s->model_id) != 0) {
            api_error(&e, 404, "invalid_request_error", "model", "model_not_found", "the model '%.200s' does not exist",
                      id);
            return http_send_error(s, c, &e, method, url);
        }
        return http_send_json(s, c, 200, print_free(model_object(s)), NULL, NULL);
    case R_RESPONSE_ONE: {
        char *json = rstore_get_json(s->store, id);
        if (json) return http_send_json(s, c, 200, json, NULL, NULL);
        api_error(&e, 404, "invalid_request_error", NULL, "not_found",
                  "no response with id '%.100s' (responses are kept in memory, when stored)", id);
        return http_send_error(s, c, &e, method, url);
    }
    case R_METRICS: {
        if (!s->cfg.metrics) {
            api_error(&e, 501, "not_supported_error", NULL, "not_supported",
                      "this server does not serve metrics: start it with --metrics");
            return http_send_error(s, c, &e, method, url);
        }
        SBuf b = {0};
        metrics_text(s, &b);
        enum MHD_Result rc = b.oom ? MHD_NO
                                   : http_send_text(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", b.p, b.n);
        sbuf_free(&b);
        return rc;
    }
    default: break;
    }
    api_error(&e, 404, "invalid_request_error", NULL, "not_found", "unknown endpoint: %s %.300s", method, url);
    return http_send_error(s, c, &e, method, url);
}

/* ------------------------------------------------------------------------------------------ utilities */

/* {"content": TEXT, "parse_special"?: true, "add_special"?: bool, "with_pieces"?: bool} -> {"tokens": [...]}. */
static enum MHD_Result tokenize(Server *s, struct MHD_Connection *c, cJSON *doc, const char *method, const char *url) {
    ApiError e;
    static const char *const keys[] = {"content", "add_special", "parse_special", "with_pieces", NULL};
    if (api_check_keys(doc, keys, "", true, &e)) return http_send_error(s, c, &e, method, url);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(doc, "content");
    if (!cJSON_IsString(content)) {
        BAD("content", "'content' (a string) is required");
        return http_send_error(s, c, &e, method, url);
    }
    bool flags[3] = {false, true, false}; /* add_special (no BOS in these vocabularies), parse_special, with_pieces */
    const char *names[3] = {"add_special", "parse_special", "with_pieces"};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, names[i]);
        if (v && !cJSON_IsBool(v)) {
            BAD(names[i], "'%s' must be a boolean", names[i]);
            return http_send_error(s, c, &e, method, url);
        }
        if (v) flags[i] = cJSON_IsTrue(v);
    }
    char *text = strdup(content->valuestring);
    if (!text) return MHD_NO;
    size_t len = json_nul_decode(text, strlen(text)), n = 0;
    int32_t *ids = NULL;
    DlError de = {{0}};
    int rc = dl_tokenize(s->engine, text, len, flags[1], &ids, &n, &de);
    free(text);
    if (rc) {
        api_error(&e, 500, "server_error", NULL, NULL, "tokenizer: %s", de.msg);
        return http_send_error(s, c, &e, method, url);
    }
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < n; i++) {
        if (!flags[2]) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        size_t pn;
        const char *piece = dl_token_piece(s->engine, ids[i], &pn);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", ids[i]);
        if (piece && utf8_invalid_at(piece, pn) == pn) {
            json_add_string_n(t, "piece", piece, pn);
        } else { /* part of a UTF-8 character: the bytes, as llama.cpp gives them */
            cJSON *b = cJSON_AddArrayToObject(t, "piece");
            for (size_t k = 0; piece && k < pn; k++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)piece[k]));
        }
        cJSON_AddItemToArray(arr, t);
    }
    free(ids);
    return http_send_json(s, c, 200, print_free(o), NULL, NULL);
}

/* {"tokens": [ids]} -> {"content": TEXT} (control tokens written out). */
static enum MHD_Result detokenize(Server *s, struct MHD_Connection *c, cJSON *doc, const char *method, const char *url) {
    ApiError e;
    static const char *const keys[] = {"tokens", NULL};
    if (api_check_keys(doc, keys, "", true, &e)) return http_send_error(s, c, &e, method, url);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(doc, "tokens");
    if (!cJSON_IsArray(tokens)) {
        BAD("tokens", "'tokens' (an array of token ids) is required");
        return http_send_error(s, c, &e, method, url);
    }
    for (const cJSON *t = tokens->child; t; t = t->next)
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= s->info->n_vocab) {
            BAD("tokens", "'tokens' must hold token ids in [0, %d)", s->info->n_vocab);
            return http_send_error(s, c, &e, method, url);
        }
    DlError de = {{0}};
    DlDetok *d = dl_detok_new(s->engine, true, &de);
    if (!d) {
        api_error(&e, 500, "server_error", NULL, NULL, "%s", de.msg);
        return http_send_error(s, c, &e, method, url);
    }
    SBuf text = {0};
    const char *piece;
    size_t n;
    for (const cJSON *t = tokens->child; t; t = t->next) {
        if (dl_detok_push(d, (int32_t)t->valuedouble, &piece, &n, &de) == 0) sbuf_put(&text, piece, n);
    }
    dl_detok_flush(d, &piece, &n);
    sbuf_put(&text, piece, n);
    dl_detok_free(d);
    cJSON *o = cJSON_CreateObject();
    json_add_string_n(o, "content", text.p ? text.p : "", text.n);
    sbuf_free(&text);
    return http_send_json(s, c, 200, print_free(o), NULL, NULL);
}

/* A chat completion request -> {"prompt": the text the model would read}. */
static enum MHD_Result apply_template(Server *s, struct MHD_Connection *c, const char *body, size_t len,
                                      const char *method, const char *url) {
    ApiRequest req;
    ApiError e;
    if (api_parse(true, body, len, &s->defaults, &req, &e)) return http_send_error(s, c, &e, method, url);
    char *text = NULL;
    size_t n = 0;
    bool forced;
    int rc = render_chat(s, &req, &text, &n, &forced, &e);
    api_request_free(&req);
    if (rc) return http_send_error(s, c, &e, method, url);
    cJSON *o = cJSON_CreateObject();
    json_add_string_n(o, "prompt", text, n);
    free(text);
    return http_send_json(s, c, 200, print_free(o), NULL, NULL);
}

enum MHD_Result http_utility(Server *s, struct MHD_Connection *c, Route route, const char *body, size_t len,
                             const char *method, const char *url) {
    if (route == R_APPLY_TEMPLATE) return apply_template(s, c, body, len, method, url);
    ApiError e;
    char msg[300], where[96];
    cJSON *doc = len ? json_parse_body(body, len, false, msg, sizeof msg, where, sizeof where) : NULL;
    if (!len) snprintf(msg, sizeof msg, "the request body is empty: a JSON object is expected"), where[0] = 0;
    if (doc && !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        doc = NULL;
        snprintf(msg, sizeof msg, "the request body must be a JSON object");
    }
    if (!doc) {
        BAD(where[0] ? where : NULL, "%s", msg);
        return http_send_error(s, c, &e, method, url);
    }
    enum MHD_Result rc = route == R_TOKENIZE ? tokenize(s, c, doc, method, url) : detokenize(s, c, doc, method, url);
    cJSON_Delete(doc);
    return rc;
}
