/* test_chat.c — group `chat`: prompt rendering against the models' own templates, and parsing of the
 * generated text.
 *
 *   - every golden rendering in tests/data/chat/ (made by Jinja2 with Hugging Face's settings from the
 *     real templates) reproduced byte for byte, and every case the template refuses refused;
 *   - template detection, ChatML, our documented deviations, Python-compatible formatting helpers;
 *   - the output parser on complete text, byte by byte, and token by token through the real tokenizer
 *     and the streaming detokenizer; parse -> render round trips;
 *   - the `chat-format` command. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "chat/chat.h"
#include "chat/chat_text.h"
#include "gguf/gguf.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static const char *const templates[] = {"Qwen3.5-4B", "Qwen-Qwen3-0.6B", "Qwen3-Coder"};
static const ChatFormat template_formats[] = {CHAT_FORMAT_QWEN35, CHAT_FORMAT_QWEN3, CHAT_FORMAT_QWEN3_CODER};

static char *read_data(const char *rel) {
    size_t n;
    return test_read_file(test_data(rel), &n);
}

static char *render_json(const ChatTemplate *t, const char *json, Err *err) {
    cJSON *req = cJSON_Parse(json);
    if (!req) {
        err_set(err, "bad test JSON");
        return NULL;
    }
    char *out = NULL;
    size_t len;
    chat_render_request(t, req, NULL, &out, &len, err);
    cJSON_Delete(req);
    return out;
}

/* ------------------------------------------------------------------------------------------ goldens */

TEST(chat, detect_formats) {
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "chat/%s.jinja", templates[i]);
        char *text = read_data(rel);
        REQUIRE(text);
        ChatFormat f;
        bool def;
        Err err = {{0}};
        CHECK_MSG(chat_format_detect(text, &f, &def, &err) == 0 && f == template_formats[i], "%s: %s", templates[i], err.msg);
        free(text);
    }
    /* the test vocabularies carry Qwen1.5's plain ChatML template with a default system prompt */
    Err err = {{0}};
    Gguf *g = gguf_open(test_data("vocab/ggml-vocab-qwen2.gguf"), &err);
    REQUIRE(g);
    GgufStr s;
    REQUIRE(gguf_get_str(g, "tokenizer.chat_template", &s, true, &err) == 1);
    char *tmpl = strndup(s.ptr, s.len);
    gguf_close(g);
    ChatFormat f;
    bool def = false;
    CHECK(chat_format_detect(tmpl, &f, &def, &err) == 0 && f == CHAT_FORMAT_CHATML && def);
    ChatTemplate ct;
    CHECK(chat_template_init(&ct, tmpl, &err) == 0 && ct.format == CHAT_FORMAT_CHATML && ct.default_system);
    CHECK(chat_template_init(&ct, NULL, &err) == -1 && strstr(err.msg, "no chat template"));
    err_clear(&err);
    free(tmpl);
    CHECK(chat_format_detect("{{ messages }}", &f, &def, &err) == -1 && strstr(err.msg, "unsupported chat template"));
    err_clear(&err);
    CHECK(chat_format_detect("<|im_start|>{% if tools %}<tool_call>{% endif %}", &f, &def, &err) == -1);
    CHECK(strstr(err.msg, "Qwen2.5"));
    err_clear(&err);
    CHECK(chat_format_detect("", &f, &def, &err) == -1);
    CHECK(chat_format_from_name("qwen3-coder", &f) == 0 && f == CHAT_FORMAT_QWEN3_CODER);
    CHECK(chat_format_from_name("llama3", &f) == -1);
    CHECK(strcmp(chat_format_name(CHAT_FORMAT_QWEN35), "qwen35") == 0);
}

TEST(chat, golden_renderings) {
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "chat/%s.cases.json", templates[i]);
        char *text = read_data(rel);
        REQUIRE(text);
        cJSON *cases = cJSON_Parse(text);
        free(text);
        REQUIRE(cJSON_IsArray(cases));
        ChatTemplate t = {template_formats[i], false, false};
        int n = 0, pass = 0, refusals = 0;
        const cJSON *c;
        cJSON_ArrayForEach(c, cases) {
            const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
            const cJSON *input = cJSON_GetObjectItem(c, "input"), *expected = cJSON_GetObjectItem(c, "expected");
            char *out = NULL;
            size_t len = 0;
            Err err = {{0}};
            int rc = chat_render_request(&t, input, NULL, &out, &len, &err);
            n++;
            if (expected) {
                bool ok = rc == 0 && len == strlen(expected->valuestring) && memcmp(out, expected->valuestring, len) == 0;
                if (!ok && rc == 0) {
                    size_t k = 0;
                    while (k < len && out[k] == expected->valuestring[k]) k++;
                    CHECK_MSG(false, "%s/%s differs at byte %zu: got '%.60s'", templates[i], name, k, out + k);
                } else {
                    CHECK_MSG(ok, "%s/%s: %s", templates[i], name, err.msg);
                }
                pass += ok;
            } else { /* the template refuses this input: so must we */
                CHECK_MSG(rc == -1 && err.msg[0], "%s/%s should fail", templates[i], name);
                pass += rc == -1;
                refusals += rc == -1;
            }
            free(out);
        }
        test_note("%s: %d/%d golden cases (%d of them refusals)", templates[i], pass, n, refusals);
        CHECK(n == 13);
        cJSON_Delete(cases);
    }
}

/* ------------------------------------------------------------------------------------- other renders */

TEST(chat, chatml_and_options) {
    ChatTemplate with_default = {CHAT_FORMAT_CHATML, true, false}, plain = {CHAT_FORMAT_CHATML, false, false};
    Err err = {{0}};
    char *out = render_json(&with_default, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"add_generation_prompt\":true}", &err);
    CHECK(out && strcmp(out, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                             "<|im_start|>assistant\n") == 0);
    free(out);
    out = render_json(&with_default, "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"Hi\"}]", &err);
    CHECK(out && strcmp(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n") == 0);
    free(out);
    out = render_json(&plain, "[{\"role\":\"user\",\"content\":\"Hi\"}]", &err);
    CHECK(out && strcmp(out, "<|im_start|>user\nHi<|im_end|>\n") == 0);
    free(out);
    /* content parts: refused as the template does, or joined when asked */
    const char *parts = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a \"},{\"type\":\"text\",\"text\":\"b\"}]}]}";
    CHECK(render_json(&plain, parts, &err) == NULL && strstr(err.msg, "must be a string"));
    cJSON *req = cJSON_Parse(parts);
    ChatRenderOptions flat = {false, CHAT_THINKING_DEFAULT, true};
    size_t len;
    ChatTemplate q3 = {CHAT_FORMAT_QWEN3, false, false};
    CHECK(chat_render_request(&q3, req, &flat, &out, &len, &err) == 0 && strcmp(out, "<|im_start|>user\na b<|im_end|>\n") == 0);
    free(out);
    cJSON_Delete(req);
    /* bad inputs */
    err_clear(&err);
    CHECK(render_json(&plain, "{\"messages\":[]}", &err) == NULL && strstr(err.msg, "No messages"));
    err_clear(&err);
    CHECK(render_json(&plain, "{\"messages\":[1]}", &err) == NULL && strstr(err.msg, "object"));
    err_clear(&err);
    CHECK(render_json(&plain, "{\"nothing\":1}", &err) == NULL && strstr(err.msg, "messages"));
    err_clear(&err);
    CHECK(render_json(&plain, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}", &err) == NULL);
    err_clear(&err);
    CHECK(render_json(&plain, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"enable_thinking\":\"no\"}", &err) == NULL);
    /* enable_thinking through chat_template_kwargs */
    ChatTemplate q35 = {CHAT_FORMAT_QWEN35, false, false};
    out = render_json(&q35, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":true,"
                            "\"chat_template_kwargs\":{\"enable_thinking\":false}}", &err);
    CHECK(out && strstr(out, "<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    CHECK(out && !chat_prompt_opens_reasoning(out, strlen(out)));
    free(out);
    out = render_json(&q35, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":true}", &err);
    CHECK(out && chat_prompt_opens_reasoning(out, strlen(out)));
    free(out);
}

TEST(chat, api_deviations) {
    /* null content and JSON-string arguments, as OpenAI clients send them */
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":null,"
                      "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                      "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 2}\"}}]},"
                      "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"sunny\"}]}";
    Err err = {{0}};
    ChatTemplate q35 = {CHAT_FORMAT_QWEN35, false, false}, q3 = {CHAT_FORMAT_QWEN3, false, false};
    char *out = render_json(&q35, req, &err);
    CHECK_MSG(out && strstr(out, "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n<function=get_weather>\n"
                                 "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
                                 "</function>\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n"),
              "%s", out ? out : err.msg);
    free(out);
    out = render_json(&q3, req, &err);
    CHECK(out && strstr(out, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n</tool_call>"));
    free(out);
    err_clear(&err);
    CHECK(render_json(&q35, "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
                            "[{\"function\":{\"name\":\"f\",\"arguments\":\"not json\"}}]}]", &err) == NULL);
    CHECK(strstr(err.msg, "JSON object"));
    err_clear(&err);
    CHECK(render_json(&q35, "[{\"role\":\"user\",\"content\":\"x\"},{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]", &err) == NULL);
    CHECK(strstr(err.msg, "name"));
}

TEST(chat, python_formatting) {
    struct { const char *json, *str, *tojson; } cases[] = {
        {"0.5", "0.5", "0.5"}, {"1e-05", "1e-05", "1e-05"}, {"1e16", "1e+16", "1e+16"}, {"1e20", "1e+20", "1e+20"},
        {"123456.789", "123456.789", "123456.789"}, {"-2.25", "-2.25", "-2.25"}, {"0.1", "0.1", "0.1"},
        {"0.3333333333333333", "0.3333333333333333", "0.3333333333333333"}, {"2.5e-5", "2.5e-05", "2.5e-05"},
        {"1000000000000000.5", "1000000000000000.5", "1000000000000000.5"}, {"5", "5", "5"}, {"-0", "0", "0"},
        {"true", "True", "true"}, {"null", "None", "null"}, {"\"a\\\"b\\\\c\\n\\u0001é\"", "a\"b\\c\n\x01é", "\"a\\\"b\\\\c\\n\\u0001é\""},
        {"[1, \"x\", [true, null], {\"k\": 0.5}]", "[1, 'x', [True, None], {'k': 0.5}]", "[1, \"x\", [true, null], {\"k\": 0.5}]"},
        {"[\"it's\", \"\\u00a0\"]", "[\"it's\", '\\xa0']", "[\"it's\", \"\xc2\xa0\"]"},
        {"{}", "{}", "{}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *v = cJSON_Parse(cases[i].json);
        REQUIRE_MSG(v, "%s", cases[i].json);
        StrBuf a = {0}, b = {0};
        py_str(&a, v);
        py_tojson(&b, v);
        sb_put(&a, "", 0);
        sb_put(&b, "", 0);
        CHECK_MSG(strcmp(a.p, cases[i].str) == 0, "str(%s) = %s", cases[i].json, a.p);
        CHECK_MSG(strcmp(b.p, cases[i].tojson) == 0, "tojson(%s) = %s", cases[i].json, b.p);
        sb_free(&a);
        sb_free(&b);
        cJSON_Delete(v);
    }
    Str s = py_strip(str_of("\x1c\xe3\x80\x80 x y\t\xc2\x85"));
    CHECK(s.n == 3 && memcmp(s.p, "x y", 3) == 0);
}

/* ------------------------------------------------------------------------------------------ parsing */

typedef struct Parsed {
    char reasoning[2048], content[2048], calls[2048]; /* calls: "name args;" per call */
    size_t nr, nc, ncall;
    int n_calls;
} Parsed;

static void collect(Parsed *r, const ChatDelta *d) {
    if (r->nr + d->reasoning_len < sizeof r->reasoning) memcpy(r->reasoning + r->nr, d->reasoning, d->reasoning_len), r->nr += d->reasoning_len;
    if (r->nc + d->content_len < sizeof r->content) memcpy(r->content + r->nc, d->content, d->content_len), r->nc += d->content_len;
    for (size_t i = 0; i < d->n_tool_calls; i++) {
        r->ncall += (size_t)snprintf(r->calls + r->ncall, sizeof r->calls - r->ncall, "%s %s;", d->tool_calls[i].name,
                                     d->tool_calls[i].arguments);
        r->n_calls++;
    }
    r->reasoning[r->nr] = r->content[r->nc] = 0;
}

/* Parses text fed in pieces of `step` bytes (0: all at once), checking the running totals too. */
static void parse_in_steps(ChatFormat fmt, bool opens, const cJSON *tools, const char *text, size_t step, Parsed *r) {
    memset(r, 0, sizeof *r);
    Err err = {{0}};
    ChatParser *p = chat_parser_new(fmt, opens, tools, &err);
    if (!p) return;
    size_t n = strlen(text);
    if (!step) step = n ? n : 1;
    ChatDelta d;
    for (size_t i = 0; i < n; i += step) {
        size_t k = n - i < step ? n - i : step;
        if (chat_parser_feed(p, text + i, k, &d, &err) == 0) collect(r, &d);
    }
    if (chat_parser_finish(p, &d, &err) == 0) collect(r, &d);
    size_t len;
    const char *all = chat_parser_content(p, &len);
    CHECK(len == r->nc && memcmp(all, r->content, len) == 0);
    all = chat_parser_reasoning(p, &len);
    CHECK(len == r->nr && memcmp(all, r->reasoning, len) == 0);
    const ChatToolCall *calls;
    CHECK((int)chat_parser_tool_calls(p, &calls) == r->n_calls);
    CHECK(chat_parser_feed(p, "x", 1, &d, &err) == -1);
    chat_parser_free(p);
}

static void expect_parse(ChatFormat fmt, bool opens, const char *tools_json, const char *text, const char *reasoning,
                         const char *content, const char *calls) {
    cJSON *tools = tools_json ? cJSON_Parse(tools_json) : NULL;
    size_t steps[] = {0, 1, 2, 3, 7};
    for (size_t s = 0; s < sizeof steps / sizeof steps[0]; s++) {
        Parsed r;
        parse_in_steps(fmt, opens, tools, text, steps[s], &r);
        CHECK_MSG(strcmp(r.reasoning, reasoning) == 0, "step %zu: reasoning '%s'", steps[s], r.reasoning);
        CHECK_MSG(strcmp(r.content, content) == 0, "step %zu: content '%s'", steps[s], r.content);
        CHECK_MSG(strcmp(r.calls, calls) == 0, "step %zu: calls '%s'", steps[s], r.calls);
    }
    cJSON_Delete(tools);
}

static const char *weather_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"zip\":{\"type\":\"string\"},"
    "\"metric\":{\"type\":\"boolean\"},\"opts\":{\"type\":\"object\"}}}}}]";

TEST(chat, parse_qwen35) {
    const char *out = "Let me think.\nStep 2.\n</think>\n\nI'll check.\n\n<tool_call>\n<function=get_weather>\n"
                      "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n"
                      "75001\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n"
                      "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=other>\n<parameter=x>\n5\n"
                      "</parameter>\n<parameter=y>\nhi there\n</parameter>\n<parameter=z>\n007\n</parameter>\n</function>\n"
                      "</tool_call>";
    expect_parse(CHAT_FORMAT_QWEN35, true, weather_tools, out, "Let me think.\nStep 2.", "I'll check.",
                 "get_weather {\"city\": \"Paris\", \"days\": 3, \"zip\": \"75001\", \"metric\": true, \"opts\": {\"a\": [1, 2]}};"
                 "other {\"x\": 5, \"y\": \"hi there\", \"z\": \"007\"};");
    /* no thinking block, plain answer, multi-line values and text that only looks like a tag */
    expect_parse(CHAT_FORMAT_QWEN35, false, NULL, "a < b <tool x\n\nline 2\n", "", "a < b <tool x\n\nline 2\n", "");
    expect_parse(CHAT_FORMAT_QWEN35, false, NULL, "\n<think>\nr\n</think>\n\nanswer", "r", "answer", "");
    /* generation stopped early */
    expect_parse(CHAT_FORMAT_QWEN35, true, NULL, "still thinking\n\n", "still thinking", "", "");
    expect_parse(CHAT_FORMAT_QWEN35, true, NULL, "r</think>\n\n<tool_call>\n<function=f>\n<parameter=a>\nmulti\nline\n",
                 "r", "", "f {\"a\": \"multi\\nline\"};");
    /* a body that does not parse is content, verbatim */
    expect_parse(CHAT_FORMAT_QWEN35, true, NULL, "</think>\n\nx <tool_call>\nnot a call\n</tool_call> y", "",
                 "x <tool_call>\nnot a call\n</tool_call> y", "");
}

/* Numbers keep their exact text: a double would print 207310705731958600 as 2.073107057319586e+17 and
 * turn 1e400 into Infinity (invalid JSON); floats print as Python's json.dumps prints them. */
TEST(chat, parse_exact_numbers) {
    const char *int_tool = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                           "\"properties\":{\"n\":{\"type\":\"integer\"}}}}}]";
    expect_parse(CHAT_FORMAT_QWEN35, false, int_tool,
                 "<tool_call>\n<function=f>\n<parameter=n>\n207310705731958600\n</parameter>\n</function>\n</tool_call>", "",
                 "", "f {\"n\": 207310705731958600};");
    expect_parse(CHAT_FORMAT_QWEN3, false, NULL,
                 "<tool_call>\n{\"name\": \"g\", \"arguments\": {\"n\": 12345678901234567890, \"x\": 1e400, \"y\": 2.0, "
                 "\"z\": [1E2, -0, 0.1]}}\n</tool_call>",
                 "", "", "g {\"n\": 12345678901234567890, \"x\": 1e400, \"y\": 2.0, \"z\": [100.0, 0, 0.1]};");
    /* rendering a request keeps them too */
    const char *req = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"\","
                      "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": \"g\", \"arguments\": "
                      "{\"n\": 207310705731958600, \"y\": 2.0}}}]}]}";
    cJSON *r = chat_json_parse(req, strlen(req), NULL);
    REQUIRE(r);
    ChatTemplate t = {CHAT_FORMAT_QWEN3, false, false};
    char *out = NULL;
    size_t len;
    Err err = {{0}};
    REQUIRE_MSG(chat_render_request(&t, r, NULL, &out, &len, &err) == 0, "%s", err.msg);
    CHECK_MSG(strstr(out, "{\"name\": \"g\", \"arguments\": {\"n\": 207310705731958600, \"y\": 2.0}}"), "got: %s", out);
    free(out);
    cJSON_Delete(r);
}

TEST(chat, parse_qwen3_and_others) {
    expect_parse(CHAT_FORMAT_QWEN3, false, NULL,
                 "<think>\nhmm\n\nmore\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\", \"n\": 5}}\n"
                 "</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1.5}\"}\n</tool_call>",
                 "hmm\n\nmore", "Sure.", "search {\"query\": \"x\", \"n\": 5};f {\"a\": 1.5};");
    expect_parse(CHAT_FORMAT_QWEN3, false, NULL, "Plain answer.", "", "Plain answer.", "");
    expect_parse(CHAT_FORMAT_QWEN3, false, NULL, "<tool_call>{\"name\": 3}</tool_call>", "", "<tool_call>{\"name\": 3}</tool_call>", "");
    expect_parse(CHAT_FORMAT_QWEN3, false, NULL, "<tool_call>\n{\"name\": \"g\"}\n", "", "", "g {};");
    expect_parse(CHAT_FORMAT_CHATML, false, NULL, "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool_call> after", "",
                 "after", "g {};");
    /* Qwen3-Coder does not reason: a think tag is content */
    expect_parse(CHAT_FORMAT_QWEN3_CODER, false, NULL,
                 "<think>x</think> Done.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -l\n</parameter>\n</function>\n</tool_call>",
                 "", "<think>x</think> Done.", "run {\"cmd\": \"ls -l\"};");
}

TEST(chat, parse_token_by_token) {
    /* the model's text -> ids -> streaming detokenizer -> parser, one token at a time */
    Err err = {{0}};
    Gguf *g = gguf_open(test_data("vocab/ggml-vocab-qwen35.gguf"), &err);
    REQUIRE(g);
    Tokenizer *t = tokenizer_load(g, &err);
    gguf_close(g);
    REQUIRE(t);
    const char *out = "Das Wetter in Zürich? 🤔\n</think>\n\nIch prüfe das.\n\n<tool_call>\n<function=get_weather>\n"
                      "<parameter=city>\nZürich\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";
    TokenIds ids = {0};
    REQUIRE(tokenizer_encode(t, out, strlen(out), 0, &ids, &err) == 0);
    cJSON *tools = cJSON_Parse(weather_tools);
    ChatParser *p = chat_parser_new(CHAT_FORMAT_QWEN35, true, tools, &err);
    Detokenizer *d = detokenizer_new(t, 0, &err);
    REQUIRE(p && d);
    Parsed r;
    memset(&r, 0, sizeof r);
    ChatDelta delta;
    for (size_t i = 0; i < ids.n; i++) {
        const char *piece;
        size_t len;
        CHECK(detokenizer_push(d, ids.ids[i], &piece, &len, &err) == 0);
        CHECK(chat_parser_feed(p, piece, len, &delta, &err) == 0);
        collect(&r, &delta);
    }
    const char *tail;
    size_t tail_len;
    detokenizer_flush(d, &tail, &tail_len);
    CHECK(chat_parser_feed(p, tail, tail_len, &delta, &err) == 0);
    collect(&r, &delta);
    CHECK(chat_parser_finish(p, &delta, &err) == 0);
    collect(&r, &delta);
    CHECK_MSG(strcmp(r.reasoning, "Das Wetter in Zürich? 🤔") == 0, "'%s'", r.reasoning);
    CHECK_MSG(strcmp(r.content, "Ich prüfe das.") == 0, "'%s'", r.content);
    CHECK_MSG(strcmp(r.calls, "get_weather {\"city\": \"Zürich\", \"days\": 2};") == 0, "'%s'", r.calls);
    test_note("%zu tokens streamed through detokenizer and parser", ids.n);
    detokenizer_free(d);
    chat_parser_free(p);
    cJSON_Delete(tools);
    token_ids_free(&ids);
    tokenizer_free(t);
}

TEST(chat, parse_then_render_round_trip) {
    /* what the parser extracts renders back to the text the model wrote (Qwen3.5, last turn) */
    const char *gen = "Think.\n</think>\n\nOn it.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                      "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    cJSON *tools = cJSON_Parse(weather_tools);
    Err err = {{0}};
    ChatParser *p = chat_parser_new(CHAT_FORMAT_QWEN35, true, tools, &err);
    REQUIRE(p);
    ChatDelta d;
    CHECK(chat_parser_feed(p, gen, strlen(gen), &d, &err) == 0);
    CHECK(chat_parser_finish(p, &d, &err) == 0);
    size_t rl, cl;
    const char *reasoning = chat_parser_reasoning(p, &rl), *content = chat_parser_content(p, &cl);
    const ChatToolCall *calls;
    REQUIRE(chat_parser_tool_calls(p, &calls) == 1);
    cJSON *messages = cJSON_CreateArray();
    cJSON *user = cJSON_CreateObject(), *asst = cJSON_CreateObject(), *call = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    cJSON_AddStringToObject(user, "role", "user");
    cJSON_AddStringToObject(user, "content", "Weather?");
    cJSON_AddStringToObject(asst, "role", "assistant");
    cJSON_AddStringToObject(asst, "content", content);
    cJSON_AddStringToObject(asst, "reasoning_content", reasoning);
    cJSON_AddStringToObject(fn, "name", calls[0].name);
    cJSON_AddStringToObject(fn, "arguments", calls[0].arguments);
    cJSON_AddItemToObject(call, "function", fn);
    cJSON *arr = cJSON_AddArrayToObject(asst, "tool_calls");
    cJSON_AddItemToArray(arr, call);
    cJSON_AddItemToArray(messages, user);
    cJSON_AddItemToArray(messages, asst);
    ChatTemplate t = {CHAT_FORMAT_QWEN35, false, false};
    char *out;
    size_t len;
    REQUIRE(chat_render(&t, messages, NULL, NULL, &out, &len, &err) == 0);
    const char *want_tail = "<|im_start|>assistant\n<think>\nThink.\n</think>\n\nOn it.\n\n<tool_call>\n<function=get_weather>\n"
                            "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call><|im_end|>\n";
    CHECK_MSG(len >= strlen(want_tail) && strcmp(out + len - strlen(want_tail), want_tail) == 0, "%s", out);
    free(out);
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    chat_parser_free(p);
}

/* ------------------------------------------------------------------------------------------ the CLI */

static int run_cli(const char *cmdline, char *out, size_t cap) {
    FILE *f = popen(cmdline, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(chat, cli_chat_format) {
    const char *bin = getenv("DELTALLM_BIN");
    if (!bin) {
        test_skip("DELTALLM_BIN not set: skipped");
        return;
    }
    char cmd[4096], out[16384], path[1100];
    /* one golden per template through the command, byte for byte */
    for (int i = 0; i < 3; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "chat/%s.cases.json", templates[i]);
        char *text = read_data(rel);
        REQUIRE(text);
        cJSON *cases = cJSON_Parse(text);
        free(text);
        const cJSON *c = cJSON_GetArrayItem(cases, 10); /* two tool calls and two results */
        char *input = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "input"));
        snprintf(path, sizeof path, "%s/conv%d.json", test_tmpdir(), i);
        FILE *f = fopen(path, "wb");
        REQUIRE(f);
        fputs(input, f);
        fclose(f);
        char tmpl_rel[128];
        snprintf(tmpl_rel, sizeof tmpl_rel, "chat/%s.jinja", templates[i]);
        snprintf(cmd, sizeof cmd, "'%s' chat-format --chat-template '%s' < '%s' 2>&1", bin, test_data(tmpl_rel), path);
        CHECK(run_cli(cmd, out, sizeof out) == 0);
        CHECK_MSG(strcmp(out, cJSON_GetObjectItem(c, "expected")->valuestring) == 0, "%s via CLI", templates[i]);
        free(input);
        cJSON_Delete(cases);
    }
    /* the vocab-only GGUF's own template */
    snprintf(cmd, sizeof cmd, "echo '{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"add_generation_prompt\":true}' | "
                              "'%s' chat-format -m '%s' 2>&1", bin, test_data("vocab/ggml-vocab-qwen35.gguf"));
    CHECK(run_cli(cmd, out, sizeof out) == 0);
    CHECK(strcmp(out, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                      "<|im_start|>assistant\n") == 0);
    snprintf(cmd, sizeof cmd, "echo '[{\"role\":\"user\",\"content\":\"Hi\"}]' | '%s' chat-format --format qwen3 2>&1", bin);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "<|im_start|>user\nHi<|im_end|>\n") == 0);
    /* bad input: one clear line */
    snprintf(path, sizeof path, "%s/bad.jinja", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs("{% for m in messages %}{{ m.content }}{% endfor %}", f);
    fclose(f);
    const char *bad[][2] = {
        {"{\"messages\": [", "--format qwen35"},
        {"{\"messages\": []} trailing", "--format qwen35"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}", "--format qwen35"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "--chat-template BAD"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "--format llama3"},
        {"[{\"role\":\"user\",\"content\":\"x\"}]", "-m /nonexistent.gguf"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1200];
        snprintf(args, sizeof args, "%s", bad[i][1]);
        char *b = strstr(args, "BAD");
        if (b) snprintf(b, sizeof args - (size_t)(b - args), "'%s'", path);
        snprintf(cmd, sizeof cmd, "printf '%%s' '%s' | '%s' chat-format %s 2>&1", bad[i][0], bin, args);
        int rc = run_cli(cmd, out, sizeof out);
        int lines = 0;
        for (const char *s = out; *s; s++) lines += *s == '\n';
        CHECK_MSG((rc == 1 || rc == 2) && lines == 1 && strncmp(out, "deltallm", 8) == 0, "case %zu: %d '%s'", i, rc, out);
    }
}

/* A tool-call body holding a NUL byte (found by fuzz_http): parsed from its bytes, never read past them. */
TEST(chat, parser_tool_call_with_nul) {
    static const char text[] = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\0 tail\n</tool_call>";
    Err err = {{0}};
    ChatParser *p = chat_parser_new(CHAT_FORMAT_QWEN3, false, NULL, &err);
    REQUIRE(p);
    ChatDelta d;
    CHECK(chat_parser_feed(p, text, sizeof text - 1, &d, &err) == 0);
    CHECK(chat_parser_finish(p, &d, &err) == 0);
    const ChatToolCall *calls;
    CHECK(chat_parser_tool_calls(p, &calls) == 0); /* not a clean call: passed through as content */
    size_t n;
    chat_parser_content(p, &n);
    CHECK(n > 0);
    chat_parser_free(p);
}

/* cJSON skips every byte up to the space between tokens (NUL and control bytes too): the exact-number walk
 * must skip the same ones, or it reads a NUL as part of a number (found by fuzz_http). */
TEST(chat, exact_numbers_after_control_bytes) {
    static const char text[] = "\x01[\x02 12345678901234567890,\x1f 7]";
    cJSON *v = chat_json_parse(text, sizeof text - 1, NULL);
    REQUIRE(v);
    const cJSON *a = cJSON_GetArrayItem(v, 0), *b = cJSON_GetArrayItem(v, 1);
    CHECK(cJSON_IsRaw(a) && !strcmp(a->valuestring, "12345678901234567890"));
    CHECK(cJSON_IsRaw(b) && !strcmp(b->valuestring, "7"));
    cJSON_Delete(v);
    static const char nul[] = "\0 9";
    v = chat_json_parse(nul, sizeof nul - 1, NULL);
    CHECK(v && cJSON_IsRaw(v) && !strcmp(v->valuestring, "9"));
    cJSON_Delete(v);
}
