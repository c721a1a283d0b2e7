/* fuzz_http.c — libFuzzer target over the HTTP request path (`make fuzz`; seeds in tests/fuzz/seeds/fuzz_http/):
 * the server's parsing of paths and headers (http_parse.h), request bodies (json_io.h strictness, api_parse for
 * chat and completions, responses_parse for /v1/responses, anthropic_parse for /v1/messages), the chat
 * rendering of every validated chat request in the four formats, the constraints of forced tool calls and JSON schemas, and the chat output parser.
 *
 * The first byte picks the part, the rest is its input. Promises checked (a broken one traps):
 *   - a refused request has a 4xx/5xx, a one-line message, and an error body that is valid UTF-8 JSON;
 *   - rendering either succeeds with text or fails with a one-line message;
 *   - a constraint that accepted a prefix completes it: prefix + completion is accepted and done;
 *   - the chat parser's deltas add up to its totals;
 *   - json_print of a parsed body is valid UTF-8 and parses again;
 *   - a bearer token matches a list of keys exactly when it matches one of them (llama-server's --api-key k1,k2);
 *   - the stop filter (include_stop_str_in_output or not) releases a prefix of the text, ending at the first
 *     stop string, and with include exactly that string more.
 * Bodies with llama-server's fields (n_predict, id_slot, reasoning_format, ...) and POST /completion's go through
 * api_parse like the others (seeds llama-*.bin); /slots/{id} paths through the route parser. */
#include "chat/chat.h"
#include "server/anthropic.h"
#include "server/constrain.h"
#include "server/http_parse.h"
#include "server/json_io.h"
#include "server/openai.h"
#include "server/responses.h"
#include "server/stop.h"
#include "server/util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(x)                                                                                          \
    do {                                                                                                   \
        if (!(x)) __builtin_trap();                                                                        \
    } while (0)

static bool one_line(const char *msg, size_t cap) {
    return msg[0] && memchr(msg, 0, cap) && !strchr(msg, '\n');
}

static void check_error(const ApiError *e) {
    EXPECT(e->status >= 400 && e->status < 600);
    EXPECT(one_line(e->message, sizeof e->message));
    char *json = api_error_json(e);
    EXPECT(json);
    size_t n = strlen(json);
    EXPECT(utf8_invalid_at(json, n) == n);
    cJSON *back = cJSON_Parse(json);
    EXPECT(cJSON_IsObject(cJSON_GetObjectItem(back, "error")));
    cJSON_Delete(back);
    free(json);
}

/* Feeds text to a constraint in pieces; whatever prefix it accepted, its completion must finish it. */
static void drive_constraint(Constraint *c, const uint8_t *text, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = 1 + text[i] % 7;
        if (k > n - i) k = n - i;
        if (!constraint_allows(c, (const char *)text + i, k)) break;
        constraint_advance(c, (const char *)text + i, k);
        i += k;
        if (constraint_done(c)) return;
    }
    SBuf comp = {0};
    constraint_completion(c, &comp);
    if (comp.n) {
        EXPECT(constraint_allows(c, comp.p, comp.n));
        constraint_advance(c, comp.p, comp.n);
    }
    EXPECT(constraint_done(c));
    sbuf_free(&comp);
}

static void render_all(const ApiRequest *r, const uint8_t *tail, size_t n) {
    for (int f = CHAT_FORMAT_CHATML; f <= CHAT_FORMAT_QWEN35; f++) {
        ChatTemplate t = {.format = (ChatFormat)f, .default_system = f == CHAT_FORMAT_CHATML};
        ChatRenderOptions o = {.add_generation_prompt = true, .enable_thinking = r->enable_thinking,
                               .flatten_text_parts = true};
        char *text = NULL;
        size_t len = 0;
        Err err = {{0}};
        if (chat_render(&t, r->messages, r->tools, &o, &text, &len, &err) == 0) EXPECT(text && strlen(text) <= len);
        else EXPECT(one_line(err.msg, sizeof err.msg));
        free(text);
    }
    Err err = {{0}};
    Constraint *c = NULL;
    if (r->tool_choice == TOOL_CHOICE_REQUIRED || r->tool_choice == TOOL_CHOICE_NAMED)
        c = constraint_tool_call(tail[0] & 1, r->tools, r->tool_choice == TOOL_CHOICE_NAMED ? r->tool_name : NULL, &err);
    else if (r->response_format != RF_TEXT)
        c = constraint_json(r->response_format == RF_JSON_SCHEMA ? r->schema : NULL, &err);
    else
        return;
    if (!c) {
        EXPECT(one_line(err.msg, sizeof err.msg));
        return;
    }
    drive_constraint(c, tail, n);
    constraint_free(c);
}

static void chat_parser_check(const uint8_t *d, size_t n) {
    static const char *tools_json = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                                    "{\"type\": \"object\", \"properties\": {\"s\": {\"type\": \"string\"}, \"n\": "
                                    "{\"type\": \"integer\"}}}}}]";
    cJSON *tools = cJSON_Parse(tools_json);
    for (int f = CHAT_FORMAT_CHATML; f <= CHAT_FORMAT_QWEN35; f++) {
        Err err = {{0}};
        ChatParser *p = chat_parser_new((ChatFormat)f, n && (d[0] & 1), tools, &err);
        EXPECT(p);
        size_t reasoning = 0, content = 0, calls = 0;
        ChatDelta dl;
        for (size_t i = 0; i < n;) {
            size_t k = 1 + d[i] % 13;
            if (k > n - i) k = n - i;
            EXPECT(chat_parser_feed(p, (const char *)d + i, k, &dl, &err) == 0);
            reasoning += dl.reasoning_len, content += dl.content_len, calls += dl.n_tool_calls;
            i += k;
        }
        EXPECT(chat_parser_finish(p, &dl, &err) == 0);
        reasoning += dl.reasoning_len, content += dl.content_len, calls += dl.n_tool_calls;
        size_t tr, tc;
        chat_parser_reasoning(p, &tr);
        chat_parser_content(p, &tc);
        const ChatToolCall *tcalls;
        EXPECT(tr == reasoning && tc == content && chat_parser_tool_calls(p, &tcalls) == calls);
        chat_parser_free(p);
    }
    cJSON_Delete(tools);
}

/* path \n allowed-origins \n origin \n authorization */
static void head_check(const uint8_t *d, size_t n) {
    char *buf = malloc(n + 1);
    if (!buf) return;
    memcpy(buf, d, n);
    buf[n] = 0;
    char *field[4] = {buf, "", "", ""};
    for (int k = 1; k < 4; k++) {
        char *nl = strchr(field[k - 1], '\n');
        if (!nl) break;
        *nl = 0;
        field[k] = nl + 1;
    }
    size_t len = http_unescape(field[0]);
    EXPECT(len == strlen(field[0]));
    char id[256];
    Route r = http_route(field[0], id, sizeof id);
    EXPECT(r >= R_NONE && r < R_COUNT && route_name(r));
    if (r == R_MODEL_ONE || r == R_RESPONSE_ONE) EXPECT(strlen(id) < sizeof id && id[0]);
    if (r == R_SLOT_ACTION) EXPECT(id[0] && strspn(id, "0123456789") == strlen(id));
    (void)http_wants_post(r);
    (void)http_origin_allowed(field[1][0] ? field[1] : NULL, field[2]);
    bool one = http_bearer_matches(field[3], "sekret", 6), two = http_bearer_matches(field[3], "k2", 2);
    EXPECT(http_bearer_matches_any(field[3], " sekret ,,k2,") == (one || two));
    free(buf);
}

/* stops (up to 3, NUL-separated) \n text: fed in pieces with and without include_stop_str_in_output */
static void stop_check(const uint8_t *d, size_t n) {
    const char *nl = memchr(d, '\n', n);
    if (!nl) return;
    size_t ns = (size_t)(nl - (const char *)d);
    char stops_buf[64] = {0};
    memcpy(stops_buf, d, ns < 63 ? ns : 63);
    const char *stops[3];
    int k = 0;
    for (char *p = stops_buf; k < 3 && p < stops_buf + 63 && *p; p += strlen(p) + 1) stops[k++] = p;
    const char *text = nl + 1;
    size_t len = n - ns - 1;
    SBuf out[2] = {{0}, {0}};
    bool matched[2];
    int which = -1;
    for (int inc = 0; inc < 2; inc++) {
        StopFilter f;
        EXPECT(stop_init(&f, stops, k) == 0);
        f.include = inc;
        bool m = false;
        for (size_t i = 0; i < len && !m;) {
            size_t piece = 1 + (unsigned char)text[i] % 5;
            if (piece > len - i) piece = len - i;
            m = stop_feed(&f, text + i, piece, &out[inc]);
            i += piece;
        }
        if (!m) stop_flush(&f, &out[inc]);
        matched[inc] = m;
        if (m && inc) which = f.which;
        if (m && inc) {
            EXPECT(which >= 0 && which < f.n);
            size_t sl = f.lens[which];
            EXPECT(out[1].n == out[0].n + sl && !memcmp(out[1].p + out[0].n, f.stops[which], sl));
        }
        stop_free(&f);
    }
    EXPECT(matched[0] == matched[1]);
    EXPECT(out[0].n <= len && (!out[0].n || !memcmp(out[0].p, text, out[0].n)));
    if (!matched[0]) EXPECT(out[0].n == len);
    sbuf_free(&out[0]);
    sbuf_free(&out[1]);
}

static void body_check(const uint8_t *d, size_t n) {
    char msg[300], where[96];
    cJSON *doc = json_parse_body((const char *)d, n, true, msg, sizeof msg, where, sizeof where);
    if (!doc) {
        EXPECT(one_line(msg, sizeof msg));
        return;
    }
    char *text = json_print(doc);
    EXPECT(text);
    size_t len = strlen(text);
    EXPECT(utf8_invalid_at(text, len) == len);
    cJSON *again = json_parse_body(text, len, true, msg, sizeof msg, where, sizeof where);
    EXPECT(again);
    cJSON_Delete(again);
    free(text);
    cJSON_Delete(doc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static ResponsesStore *store;
    if (!store) store = rstore_new(16, 1 << 20);
    if (size < 1) return 0;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    ApiDefaults defs;
    memset(&defs, 0, sizeof defs);
    defs.sampling.temperature = 1;
    defs.sampling.top_p = 1;
    defs.n_vocab = 1000;
    defs.chat_max_tokens = -1;
    defs.completion_max_tokens = 16;
    ApiRequest r;
    ApiError e;
    switch (data[0] % 7) {
    case 0:
    case 1: {
        bool chat = data[0] % 6 == 0;
        if (api_parse(chat, (const char *)d, n, &defs, &r, &e)) {
            check_error(&e);
            break;
        }
        if (chat) render_all(&r, n ? d : (const uint8_t *)"x", n ? n : 1);
        api_request_free(&r);
        break;
    }
    case 2:
        if (responses_parse((const char *)d, n, &defs, store, &r, &e)) {
            check_error(&e);
        } else {
            render_all(&r, n ? d : (const uint8_t *)"x", n ? n : 1);
            api_request_free(&r);
        }
        /* the same body as an Anthropic Messages request (/v1/messages) */
        if (anthropic_parse((const char *)d, n, &defs, &r, &e)) {
            check_error(&e);
            break;
        }
        render_all(&r, n ? d : (const uint8_t *)"x", n ? n : 1);
        api_request_free(&r);
        break;
    case 3: head_check(d, n); break;
    case 4: chat_parser_check(d, n); break;
    case 6: stop_check(d, n); break;
    default: body_check(d, n); break;
    }
    return 0;
}
