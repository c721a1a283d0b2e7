/* test_server_schema.c — constrained output (group `server`): JSON schemas as OpenAI's structured outputs
 * support them, sampled 100 times each through the real scheduler (m1, temperature 1.3, random budgets)
 * and every output checked by an independent validator (schema_check.c); unsupported constructs refused
 * with their name; forced tool calls and JSON answers that respect max_tokens (closed in budget when the
 * shortest answer fits, cut otherwise) with a true token count. */
#include "test.h"
#include "test_http.h"
#include "schema_check.h"

#include "chat/chat.h"
#include "deltallm.h"
#include "server/constrain.h"
#include "server/scheduler.h"
#include "server/server.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL "models/m1-qwen3next-legacy-f32.gguf"

static const char *const SCHEMAS[] = {
    /* the issue's: a top-level array of integers (came back as 8) */
    "{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}",
    /* a required array property (came back null, 0, strings) */
    "{\"type\": \"object\", \"properties\": {\"tags\": {\"type\": \"array\"}}, \"required\": [\"tags\"], "
    "\"additionalProperties\": false}",
    /* $ref to $defs and anyOf [integer, null] (came back as unconstrained numbers) */
    "{\"$defs\": {\"A\": {\"type\": \"object\", \"properties\": {\"n\": {\"anyOf\": [{\"type\": \"integer\"}, "
    "{\"type\": \"null\"}]}}, \"required\": [\"n\"], \"additionalProperties\": false}}, \"$ref\": \"#/$defs/A\"}",
    /* nullable types, enum of mixed values, const, boolean, number */
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": [\"string\", \"null\"]}, \"kind\": {\"enum\": "
    "[\"a\", \"b\", 3, null]}, \"ver\": {\"const\": 2}, \"ok\": {\"type\": \"boolean\"}, \"x\": {\"type\": "
    "\"number\"}}, \"required\": [\"name\", \"kind\", \"ver\", \"ok\", \"x\"], \"additionalProperties\": false}",
    /* minItems / maxItems */
    "{\"type\": \"array\", \"items\": {\"type\": \"string\", \"enum\": [\"x\", \"y\"]}, \"minItems\": 2, \"maxItems\": 4}",
    /* recursion through "#": ends with an empty children list */
    "{\"type\": \"object\", \"properties\": {\"value\": {\"type\": \"integer\"}, \"children\": {\"type\": \"array\", "
    "\"items\": {\"$ref\": \"#\"}}}, \"required\": [\"value\", \"children\"], \"additionalProperties\": false}",
    /* only optional properties (was: any object) */
    "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}, \"b\": {\"type\": \"string\"}, \"c\": "
    "{\"type\": \"boolean\"}}, \"additionalProperties\": false}",
    /* anyOf at the top */
    "{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"array\", \"items\": {\"type\": \"number\"}, \"maxItems\": 3}]}",
    /* objects in arrays, nested arrays, a recursive $defs list */
    "{\"type\": \"array\", \"minItems\": 1, \"items\": {\"type\": \"object\", \"properties\": {\"id\": {\"type\": "
    "\"integer\"}, \"labels\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 2}, \"next\": "
    "{\"$ref\": \"#/$defs/node\"}}, \"required\": [\"id\", \"labels\", \"next\"], \"additionalProperties\": false}, "
    "\"$defs\": {\"node\": {\"anyOf\": [{\"type\": \"null\"}, {\"type\": \"object\", \"properties\": {\"v\": "
    "{\"type\": \"integer\"}, \"next\": {\"$ref\": \"#/$defs/node\"}}, \"required\": [\"v\", \"next\"], "
    "\"additionalProperties\": false}]}}}",
    /* no type at all: any JSON value, numbers finite */
    "{\"description\": \"anything\"}",
};
enum { N_SCHEMAS = sizeof SCHEMAS / sizeof *SCHEMAS, SAMPLES = 100, SLOTS = 4 };

static Job *constrained_job(Constraint *c, int max_tokens, uint64_t seed) {
    static const int32_t prompt[] = {12, 400, 77, 901, 33, 5, 250};
    Job *j = job_new();
    j->n_prompt = sizeof prompt / sizeof *prompt;
    j->prompt = malloc(sizeof prompt);
    memcpy(j->prompt, prompt, sizeof prompt);
    dl_sampling_params_init(&j->sp);
    j->sp.temperature = 1.3f;
    j->sp.top_k = 0;
    j->sp.top_p = 1;
    j->sp.min_p = 0;
    j->sp.seed = seed;
    j->max_tokens = max_tokens;
    j->use_cache = false;
    j->constraint = c;
    stop_init(&j->stop, NULL, 0);
    return j;
}

/* The job's text once done (malloc'd). */
static char *finish_job(Job *j) {
    SBuf all = {0};
    for (int i = 0; i < 120000; i++) {
        pthread_mutex_lock(&j->mu);
        if (j->text.n) sbuf_put(&all, j->text.p, j->text.n), j->text.n = 0;
        bool done = j->done;
        pthread_mutex_unlock(&j->mu);
        if (done) break;
        usleep(1000);
    }
    if (!all.p) sbuf_put(&all, "", 0);
    return all.p;
}

static size_t n_tokens(DlEngine *en, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    DlError e;
    if (dl_tokenize(en, text, strlen(text), false, &ids, &n, &e)) n = 0;
    free(ids);
    return n;
}

/* The tokens of the shortest answer a fresh constraint admits. */
static size_t shortest_answer(DlEngine *en, Constraint *c) {
    SBuf s = {0};
    constraint_completion(c, &s);
    size_t n = s.p ? n_tokens(en, s.p) : 0;
    sbuf_free(&s);
    return n;
}

static DlEngine *engine(int slots) {
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = test_data(MODEL);
    p.n_ctx = 1024;
    p.n_batch = 64;
    p.n_seq_max = slots;
    p.n_threads = 1; /* m1 is tiny: one thread avoids the pool's hand-offs */
    DlError e = {{0}};
    DlEngine *en = dl_engine_open(&p, &e);
    CHECK_MSG(en, "%s", e.msg);
    return en;
}

TEST(server, json_schema_samples_validate) {
    DlEngine *en = engine(SLOTS);
    REQUIRE(en);
    Err err = {{0}};
    SchedConfig sc = {.engine = en, .n_slots = SLOTS, .queue_max = SAMPLES, .chunk = 64, .segment = 64};
    Scheduler *s = sched_new(&sc, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    int total_bad = 0;
    for (int k = 0; k < N_SCHEMAS; k++) {
        cJSON *schema = cJSON_Parse(SCHEMAS[k]);
        REQUIRE(schema);
        Constraint *probe = constraint_json(schema, &err);
        REQUIRE_MSG(probe, "schema %d refused: %s", k, err.msg);
        int floor_tokens = (int)shortest_answer(en, probe);
        constraint_free(probe);
        Job *jobs[SAMPLES];
        for (int i = 0; i < SAMPLES; i++) {
            Constraint *c = constraint_json(schema, &err);
            /* budgets from the shortest answer up: some answers end by themselves, others are closed in budget */
            int budget = floor_tokens + (int)((i * 37 + k * 11) % 48);
            jobs[i] = constrained_job(c, budget, 1000u * (unsigned)k + (unsigned)i);
            REQUIRE(sched_submit(s, jobs[i]) == SUBMIT_OK);
        }
        int bad = 0, closed = 0, natural = 0, n_tok = 0;
        for (int i = 0; i < SAMPLES; i++) {
            char *text = finish_job(jobs[i]);
            cJSON *v = schema_parse_strict(text, strlen(text));
            char why[200] = "not one JSON value with finite numbers";
            bool ok = v && schema_valid(schema, schema, v, why, sizeof why);
            bool in_budget = jobs[i]->n_gen <= jobs[i]->max_tokens;
            if (!ok || !in_budget) {
                if (bad++ < 3)
                    test_note("schema %d sample %d (budget %d, %d generated): %s: %.200s", k, i, jobs[i]->max_tokens,
                              jobs[i]->n_gen, ok ? "over budget" : why, text);
            }
            closed += jobs[i]->finish == FINISH_LENGTH;
            natural += jobs[i]->finish == FINISH_STOP;
            n_tok += jobs[i]->n_gen;
            cJSON_Delete(v);
            free(text);
            job_unref(jobs[i]);
        }
        test_note("schema %d: %d/%d samples valid (%d ended by themselves, %d closed within max_tokens; %d tokens, "
                  "shortest answer %d)",
                  k, SAMPLES - bad, SAMPLES, natural, closed, n_tok, floor_tokens);
        total_bad += bad;
        cJSON_Delete(schema);
    }
    CHECK_MSG(total_bad == 0, "%d of %d constrained outputs invalid", total_bad, N_SCHEMAS * SAMPLES);
    sched_free(s);
    dl_engine_close(en);
}

TEST(server, json_schema_unsupported_refused) {
    static const struct {
        const char *schema, *named;
    } bad[] = {
        {"{\"type\": \"string\", \"pattern\": \"^a+$\"}", "'pattern'"},
        {"{\"type\": \"string\", \"format\": \"date-time\"}", "'format'"},
        {"{\"type\": \"string\", \"minLength\": 3}", "'minLength'"},
        {"{\"type\": \"integer\", \"minimum\": 0}", "'minimum'"},
        {"{\"oneOf\": [{\"type\": \"string\"}]}", "'oneOf'"},
        {"{\"allOf\": [{\"type\": \"string\"}]}", "'allOf'"},
        {"{\"not\": {\"type\": \"string\"}}", "'not'"},
        {"{\"type\": \"array\", \"prefixItems\": [{\"type\": \"string\"}]}", "'prefixItems'"},
        {"{\"type\": \"array\", \"items\": [{\"type\": \"string\"}]}", "tuples"},
        {"{\"type\": \"object\", \"patternProperties\": {}}", "'patternProperties'"},
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"uuid\"}}}", "/properties/a"},
        {"{\"$ref\": \"#/$defs/missing\"}", "missing"},
        {"{\"$ref\": \"#/$defs/A\", \"type\": \"object\", \"$defs\": {\"A\": {}}}", "'$ref' cannot be combined"},
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"$ref\": \"#\"}}, \"required\": [\"a\"]}", "cannot be satisfied"},
        {"{\"type\": \"array\", \"minItems\": 5, \"maxItems\": 2}", "maxItems"},
        {"{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\", \"nullable\": true}}}", "'nullable'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cJSON *schema = cJSON_Parse(bad[i].schema);
        REQUIRE(schema);
        Err err = {{0}};
        Constraint *c = constraint_json(schema, &err);
        CHECK_MSG(!c && strstr(err.msg, bad[i].named), "schema %zu: %s", i, c ? "accepted" : err.msg);
        constraint_free(c);
        cJSON_Delete(schema);
    }
    /* the same schemas in tool parameters are only guidance: accepted, unknown keywords ignored */
    cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
                               "\"object\", \"properties\": {\"d\": {\"type\": \"string\", \"format\": \"date\"}}, "
                               "\"required\": [\"d\"]}}}]");
    Err err = {{0}};
    Constraint *c = constraint_tool_call(false, tools, NULL, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    constraint_free(c);
    cJSON_Delete(tools);
}

/* ------------------------------------------------------------------------------------------ budgets */

TEST(server, constrained_answers_respect_max_tokens) {
    DlEngine *en = engine(2);
    REQUIRE(en);
    Err err = {{0}};
    SchedConfig sc = {.engine = en, .n_slots = 2, .queue_max = 64, .chunk = 64, .segment = 64};
    Scheduler *s = sched_new(&sc, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    /* enum values only: the answer is ASCII the tokenizer writes back in at most as many tokens, so the count of
     * the text checks the count the server reports (the closing text was once added uncounted) */
    cJSON *tools = cJSON_Parse("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                               "{\"type\": \"object\", \"properties\": {\"city\": {\"enum\": [\"Paris\", \"Tokyo\", "
                               "\"Lima\"]}, \"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]}}, \"required\": [\"city\"]}}}]");
    REQUIRE(tools);
    for (int xml = 0; xml < 2; xml++) {
        Constraint *probe = constraint_tool_call(xml, tools, "get_weather", &err);
        REQUIRE(probe);
        int floor_tokens = (int)shortest_answer(en, probe);
        constraint_free(probe);
        const int budgets[] = {6, floor_tokens, floor_tokens + 3, floor_tokens + 20, 400};
        for (size_t b = 0; b < sizeof budgets / sizeof *budgets; b++) {
            int ok_calls = 0, over = 0;
            for (int seed = 0; seed < 6; seed++) {
                Job *j = constrained_job(constraint_tool_call(xml, tools, "get_weather", &err), budgets[b],
                                         (uint64_t)(seed + 100 * b));
                REQUIRE(sched_submit(s, j) == SUBMIT_OK);
                char *text = finish_job(j);
                size_t written = n_tokens(en, text);
                over += j->n_gen > budgets[b] || written > (size_t)budgets[b];
                ChatParser *p = chat_parser_new(xml ? CHAT_FORMAT_QWEN35 : CHAT_FORMAT_QWEN3, false, tools, &err);
                ChatDelta d;
                chat_parser_feed(p, text, strlen(text), &d, &err);
                chat_parser_finish(p, &d, &err);
                const ChatToolCall *calls;
                bool call = chat_parser_tool_calls(p, &calls) == 1 && !strcmp(calls[0].name, "get_weather");
                cJSON *args = call ? cJSON_Parse(calls[0].arguments) : NULL;
                ok_calls += call && cJSON_IsString(cJSON_GetObjectItem(args, "city"));
                cJSON_Delete(args);
                chat_parser_free(p);
                if (budgets[b] >= floor_tokens && !call)
                    test_note("%s budget %d: no valid call in %.200s", xml ? "xml" : "json", budgets[b], text);
                CHECK_MSG(j->finish == FINISH_STOP || j->finish == FINISH_LENGTH, "finish %d", (int)j->finish);
                if (budgets[b] < floor_tokens) CHECK(j->finish == FINISH_LENGTH && j->n_gen == budgets[b]);
                free(text);
                job_unref(j);
            }
            test_note("%s tool call, max_tokens %d (shortest call %d tokens): %d/6 valid calls, %d over budget",
                      xml ? "xml" : "json", budgets[b], floor_tokens, ok_calls, over);
            CHECK_MSG(over == 0, "%d answers longer than max_tokens %d", over, budgets[b]);
            if (budgets[b] >= floor_tokens) CHECK_MSG(ok_calls == 6, "%d/6 valid calls with max_tokens %d", ok_calls, budgets[b]);
        }
    }
    cJSON_Delete(tools);
    sched_free(s);
    dl_engine_close(en);
}

/* Over HTTP: the issue's reproductions of items 5 and 8. */
TEST(server, structured_outputs_over_http) {
    ServerConfig c;
    test_server_config(&c);
    Server *srv = test_server_start(&c);
    REQUIRE(srv);
    int port = server_port(srv);
    HttpResp r = http(port, "POST", "/v1/chat/completions", NULL,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"numbers\"}], \"temperature\": 1, \"seed\": 5, "
                      "\"max_tokens\": 60, \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": "
                      "\"n\", \"strict\": true, \"schema\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}}}}}");
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    const char *content = cJSON_GetStringValue(cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "message"), "content"));
    cJSON *v = content ? schema_parse_strict(content, strlen(content)) : NULL;
    CHECK_MSG(r.status == 200 && cJSON_IsArray(v), "array of integers: %d %s", r.status, r.body ? r.body : "");
    for (const cJSON *e = v ? v->child : NULL; e; e = e->next) CHECK(cJSON_IsNumber(e) && e->valuedouble == (long long)e->valuedouble);
    cJSON_Delete(v);
    cJSON_Delete(j);
    http_free(&r);
    r = http(port, "POST", "/v1/chat/completions", NULL,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": \"json_schema\", "
             "\"json_schema\": {\"name\": \"n\", \"schema\": {\"type\": \"object\", \"properties\": {\"zip\": {\"type\": "
             "\"string\", \"pattern\": \"^[0-9]{5}$\"}}}}}}");
    CHECK_MSG(r.status == 400 && strstr(r.body, "'pattern'") && strstr(r.body, "#/properties/zip"), "%d %s", r.status,
              r.body ? r.body : "");
    http_free(&r);
    /* a forced call with max_tokens 6: cut at 6 tokens, finish "length", 6 counted */
    const char *tool = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                       "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
                       "[\"city\"]}}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}";
    char body[1024];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}], \"max_tokens\": 6, %s}",
             tool);
    r = http(port, "POST", "/v1/chat/completions", NULL, body);
    j = r.body ? cJSON_Parse(r.body) : NULL;
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *ct = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "completion_tokens");
    CHECK_MSG(r.status == 200 && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(ch, "finish_reason")), "length") &&
                  cJSON_IsNumber(ct) && ct->valueint == 6,
              "max_tokens 6: %s", r.body ? r.body : "");
    cJSON_Delete(j);
    http_free(&r);
    server_stop(srv);
}
