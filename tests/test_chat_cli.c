/* test_chat_cli.c — `deltallm chat`: the conversation and its session reuse (chat_conv.c, in process), and
 * the interactive program itself driven through a pseudo-terminal (turns, /reset, /exit, Ctrl-C stopping
 * one reply) and through pipes. */
#include "test.h"

#include "cli/chat_conv.h"
#include "cli/chat_prompt.h"
#include "cli_proc.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MODEL "models/m3-qwen35-dense-bf16.gguf"
#define QWEN35_TEMPLATE "chat/Qwen3.5-4B.jinja"

typedef struct Text {
    char reasoning[8192], content[8192];
    size_t nr, nc;
} Text;

static void add(char *dst, size_t *n, const char *s, size_t len) {
    if (*n + len >= 8192) len = 8191 - *n;
    memcpy(dst + *n, s, len);
    *n += len;
    dst[*n] = 0;
}
static void on_r(void *u, const char *s, size_t n) { add(((Text *)u)->reasoning, &((Text *)u)->nr, s, n); }
static void on_c(void *u, const char *s, size_t n) { add(((Text *)u)->content, &((Text *)u)->nc, s, n); }

typedef struct Fixture {
    DlEngine *e;
    ChatTemplate t;
    ChatConv *conv;
    DlSampler *greedy;
} Fixture;

static bool fixture_open(Fixture *f, const char *template_rel, int n_ctx) {
    memset(f, 0, sizeof *f);
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = test_data(MODEL);
    p.n_threads = 1;
    p.n_ctx = n_ctx;
    DlError err = {{0}};
    char msg[512];
    if (!(f->e = dl_engine_open(&p, &err))) return test_check(false, __FILE__, __LINE__, "engine", "%s", err.msg);
    if (chat_prompt_template(dl_chat_template(f->e), template_rel ? test_data(template_rel) : NULL, NULL, &f->t, msg,
                             sizeof msg))
        return test_check(false, __FILE__, __LINE__, "template", "%s", msg);
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    sp.temperature = 0;
    f->greedy = dl_sampler_new(f->e, &sp, &err);
    f->conv = chat_conv_new(f->e, &f->t, NULL, true, &err);
    return test_check(f->greedy && f->conv, __FILE__, __LINE__, "conv", "%s", err.msg);
}

static void fixture_close(Fixture *f) {
    chat_conv_free(f->conv);
    dl_sampler_free(f->greedy);
    dl_engine_close(f->e);
}

/* The conversation up to its last user message, rendered with the assistant prompt, as tokens. */
static int32_t *rendered_prompt(Fixture *f, size_t *n) {
    cJSON *msgs = cJSON_Duplicate(chat_conv_messages(f->conv), 1);
    int last = cJSON_GetArraySize(msgs) - 1;
    if (last >= 0 && !strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, last), "role")->valuestring, "assistant"))
        cJSON_DeleteItemFromArray(msgs, last);
    ChatRenderOptions o = {.add_generation_prompt = true, .enable_thinking = CHAT_THINKING_DEFAULT,
                           .flatten_text_parts = true};
    char *text = NULL;
    size_t len = 0;
    Err e = {{0}};
    int32_t *ids = NULL;
    DlError err;
    if (chat_render(&f->t, msgs, NULL, &o, &text, &len, &e) || dl_tokenize(f->e, text, len, true, &ids, n, &err))
        ids = NULL;
    free(text);
    cJSON_Delete(msgs);
    return ids;
}

/* Turns with the Qwen3.5 template (its renderings drop earlier turns' reasoning, so the session must go
 * back to the snapshot) and with ChatML (the reply is kept): each time the session must hold exactly the
 * tokens of the conversation as the template renders it, and reuse what came before. */
static void check_turns(const char *template_rel) {
    Fixture f;
    if (!fixture_open(&f, template_rel, 1024)) return fixture_close(&f);
    const char *msgs[] = {"hello", "tell me more", "and then?"};
    for (int k = 0; k < 3; k++) {
        Text t = {0};
        ChatConvOutput out = {on_r, on_c, &t};
        ChatTurnStats st;
        DlError err = {{0}};
        ChatTurnEnd end = chat_conv_turn(f.conv, msgs[k], f.greedy, 24, false, &out, NULL, &st, &err);
        CHECK_MSG(end == TURN_DONE || end == TURN_LENGTH, "turn %d ended %d: %s", k, end, err.msg);
        size_t n_want = 0, n_have = 0;
        int32_t *want = rendered_prompt(&f, &n_want);
        const int32_t *have = chat_conv_tokens(f.conv, &n_have);
        CHECK_MSG(want && n_want == st.n_prompt && n_have == st.n_prompt + st.n_gen - (end == TURN_DONE) &&
                      memcmp(want, have, n_want * sizeof *want) == 0,
                  "%s turn %d: the session does not hold the rendered conversation (%zu tokens; session %zu, %zu "
                  "generated)", template_rel ? template_rel : "chatml", k, n_want, n_have, st.n_gen);
        if (k > 0) CHECK_MSG(st.n_reused > 0, "turn %d reused nothing of the session", k);
        test_note("%s turn %d: prompt %zu tokens, %zu reused, %zu generated", template_rel ? "qwen35" : "chatml", k,
                  st.n_prompt, st.n_reused, st.n_gen);
        free(want);
    }
    CHECK(cJSON_GetArraySize(chat_conv_messages(f.conv)) == 6);
    chat_conv_reset(f.conv);
    size_t n;
    chat_conv_tokens(f.conv, &n);
    CHECK(n == 0 && cJSON_GetArraySize(chat_conv_messages(f.conv)) == 0);
    fixture_close(&f);
}

TEST(chat_cli, session_holds_the_rendered_conversation) {
    check_turns(QWEN35_TEMPLATE);
    check_turns(NULL);
}

TEST(chat_cli, interrupted_and_oversized_turns) {
    Fixture f;
    if (!fixture_open(&f, NULL, 64)) return fixture_close(&f);
    Text t = {0};
    ChatConvOutput out = {on_r, on_c, &t};
    ChatTurnStats st;
    DlError err = {{0}};
    volatile sig_atomic_t stop = 1;
    CHECK(chat_conv_turn(f.conv, "hi", f.greedy, 8, false, &out, &stop, &st, &err) == TURN_INTERRUPTED);
    CHECK_MSG(cJSON_GetArraySize(chat_conv_messages(f.conv)) == 0, "an interrupted empty turn stays out of the history");
    char big[400];
    memset(big, 'a', sizeof big - 1);
    for (size_t i = 0; i + 1 < sizeof big; i += 2) big[i] = ' ';
    big[sizeof big - 1] = 0;
    CHECK(chat_conv_turn(f.conv, big, f.greedy, 8, false, &out, NULL, &st, &err) == TURN_TOO_LONG &&
          strstr(err.msg, "does not fit the context"));
    CHECK(cJSON_GetArraySize(chat_conv_messages(f.conv)) == 0);
    /* a reply that runs into the end of the context */
    ChatTurnEnd end = chat_conv_turn(f.conv, "hi", f.greedy, -1, true, &out, NULL, &st, &err);
    CHECK_MSG(end == TURN_CONTEXT && cJSON_GetArraySize(chat_conv_messages(f.conv)) == 2, "end %d", end);
    fixture_close(&f);
}

/* ------------------------------------------------------------------------------------------ the program */

#define PROMPT "\033[1;32m> \033[0m"

/* What the program prints for a greedy first turn "hello" of at most n tokens (computed in process). */
static bool expected_first_reply(const char *template_rel, int n_ctx, int n, Text *t) {
    Fixture f;
    bool ok = fixture_open(&f, template_rel, n_ctx);
    ChatConvOutput out = {on_r, on_c, t};
    ChatTurnStats st;
    DlError err = {{0}};
    ok = ok && chat_conv_turn(f.conv, "hello", f.greedy, n, false, &out, NULL, &st, &err) <= TURN_LENGTH;
    fixture_close(&f);
    return ok;
}

TEST(chat_cli, terminal_turns_reset_exit) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    Text want = {0};
    REQUIRE(expected_first_reply(QWEN35_TEMPLATE, 1024, 16, &want));
    REQUIRE_MSG(want.nr > 0, "the Qwen3.5 template starts replies in reasoning");
    const char *argv[] = {"deltallm", "chat", "-m", test_data(MODEL), "--chat-template-file", test_data(QWEN35_TEMPLATE),
                          "--temp", "0", "-n", "16", "-c", "1024", "-t", "1", NULL};
    Pty p;
    REQUIRE(pty_start(&p, argv));
    char *banner = pty_expect(&p, PROMPT, 20000);
    CHECK_MSG(banner && strstr(banner, "/help"), "no prompt line: %s", p.buf ? p.buf : "");
    free(banner);
    char *reply[3] = {0};
    const char *say[3] = {"hello\r", "tell me more\r", "hello\r"};
    for (int k = 0; k < 3; k++) {
        if (k == 2) {
            pty_send(&p, "/reset\r");
            char *r = pty_expect(&p, PROMPT, 10000);
            CHECK_MSG(r && strstr(r, "[conversation cleared]"), "/reset: %s", r ? r : "(timeout)");
            free(r);
        }
        pty_send(&p, say[k]);
        reply[k] = pty_expect(&p, PROMPT, 20000);
        CHECK_MSG(reply[k] && strstr(reply[k], "[reply cut at 16 tokens (-n)]"), "turn %d: %s", k,
                  reply[k] ? reply[k] : "(timeout)");
    }
    /* the reply as the program shows it: reasoning dimmed, then the content */
    char shown[20000];
    if (want.nc) snprintf(shown, sizeof shown, "\033[2m%s\033[0m\n\n%s\n", want.reasoning, want.content);
    else snprintf(shown, sizeof shown, "\033[2m%s\033[0m\n[", want.reasoning);
    CHECK_MSG(reply[0] && strstr(reply[0], shown), "turn 0 shows other text than a greedy reply:\n%s\nwanted:\n%s",
              reply[0] ? reply[0] : "", shown);
    CHECK_MSG(reply[0] && reply[2] && !strcmp(reply[0], reply[2]), "after /reset the same message got another reply");
    CHECK_MSG(reply[1] && reply[0] && strcmp(reply[1], reply[0]) != 0, "the second turn repeated the first");
    pty_send(&p, "/bogus\r");
    char *r = pty_expect(&p, PROMPT, 10000);
    CHECK_MSG(r && strstr(r, "unknown command /bogus"), "%s", r ? r : "(timeout)");
    free(r);
    pty_send(&p, "/exit\r");
    CHECK_MSG(pty_finish(&p, 10000) == 0, "/exit: the program did not end with status 0");
    for (int k = 0; k < 3; k++) free(reply[k]);
}

TEST(chat_cli, terminal_ctrl_c_stops_a_reply) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    /* replies that would run to the end of a 16k context (several seconds) unless stopped */
    const char *argv[] = {"deltallm", "chat", "-m", test_data(MODEL), "--ignore-eos", "-c", "16384", "-t", "1", NULL};
    Pty p;
    REQUIRE(pty_start(&p, argv));
    free(pty_expect(&p, PROMPT, 20000));
    for (int k = 0; k < 2; k++) {
        pty_send(&p, k ? "again\r" : "go\r");
        char *echo = pty_expect(&p, "\n", 10000); /* the terminal's echo of the line */
        free(echo);
        CHECK_MSG(pty_wait_bytes(&p, 32, 20000), "turn %d: no reply is streamed", k);
        pty_send(&p, "\x03");
        char *r = pty_expect(&p, PROMPT, 20000);
        CHECK_MSG(r && strstr(r, "[stopped]") && !strstr(r, "context is full"), "turn %d: Ctrl-C did not stop the reply: %s",
                  k, r ? r + (strlen(r) > 300 ? strlen(r) - 300 : 0) : "(timeout)");
        free(r);
    }
    pty_send(&p, "\x03"); /* at the prompt: a hint, then a second one quits */
    char *hint = pty_expect(&p, PROMPT, 10000);
    CHECK_MSG(hint && strstr(hint, "Ctrl-C again"), "%s", hint ? hint : "(timeout)");
    free(hint);
    pty_send(&p, "\x03");
    CHECK_MSG(pty_finish(&p, 10000) == 0, "the second Ctrl-C at the prompt did not end the program cleanly");
}

TEST(chat_cli, pipe_one_message_per_line) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    Text want = {0};
    REQUIRE(expected_first_reply(NULL, 1024, 12, &want));
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "chat -m '%s' --temp 0 -n 12 -c 1024 -t 1", test_data(MODEL));
    int rc = cli_run(args, "hello\nhello\\\nagain\n/exit\nnot sent\n", &out, &err);
    char shown[9000];
    snprintf(shown, sizeof shown, "%s\n", want.content);
    CHECK_MSG(rc == 0 && out && !strncmp(out, shown, strlen(shown)),
              "rc %d, stdout:\n%s\nwanted first:\n%s\nstderr: %s", rc, out ? out : "", shown, err ? err : "");
    CHECK_MSG(err && strstr(err, "[reply cut at 12 tokens (-n)]"), "%s", err ? err : "");
    free(out);
    free(err);
}

/* The first five minutes (issue 29): `deltallm chat` with no -m and no flag chats with the embedded model
 * (assets/tinychat-f16.gguf: its own Qwen3.5 template, thinking off by default): three turns of one
 * conversation in a terminal, each reply ending by itself (<|im_end|>) well within its token limit. */
TEST(chat_cli, embedded_model_three_turns) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set");
    if (access("assets/tinychat-f16.gguf", R_OK) != 0) return test_skip("assets/tinychat-f16.gguf is missing");
    /* the default sampling (the replies a user sees), one seed: the same three replies every run */
    const char *argv[] = {"deltallm", "chat", "--seed", "1", "-n", "200", NULL};
    Pty p;
    REQUIRE(pty_start(&p, argv));
    char *banner = pty_expect(&p, PROMPT, 30000);
    CHECK_MSG(banner && strstr(banner, "Tinychat") && strstr(banner, "qwen35"), "banner: %s", banner ? banner : "(timeout)");
    free(banner);
    const char *say[3] = {"Hello!\r", "What does the ls command do?\r", "Thank you\r"};
    for (int k = 0; k < 3; k++) {
        pty_send(&p, say[k]);
        char *r = pty_expect(&p, PROMPT, 30000);
        const char *nl = r ? strchr(r, '\n') : NULL; /* past the echoed line */
        CHECK_MSG(r && nl && strlen(nl) > 8 && !strstr(r, "[reply cut") && !strstr(r, "context is full"),
                  "turn %d did not end by itself: %s", k, r ? r : "(timeout)");
        if (r) test_note("turn %d: %s", k, r);
        free(r);
    }
    pty_send(&p, "/exit\r");
    CHECK_MSG(pty_finish(&p, 10000) == 0, "/exit: the program did not end with status 0");
}

/* ------------------------------------------------------------------------------------------ images */

#include "cli/cli_image.h"
#include "image/image.h"

#include <math.h>

#include "test_vision_oracle.h"

bool test_vl_files(const char **model, const char **mmproj, const char **png); /* test_server_vision.c */

/* Greedy tokens of the conversation's rendered prompt evaluated cold through the CLI's image path. */
static int32_t *cold_reply(DlEngine *e, const ChatTemplate *t, const cJSON *messages, const CliImage *const *imgs,
                           int n_imgs, int n_gen) {
    cJSON *msgs = cJSON_Duplicate(messages, 1);
    int last = cJSON_GetArraySize(msgs) - 1;
    if (!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(msgs, last), "role")->valuestring, "assistant"))
        cJSON_DeleteItemFromArray(msgs, last);
    ChatRenderOptions o = {.add_generation_prompt = true, .enable_thinking = 0, .flatten_text_parts = true}; /* as the conversation */
    char *text = NULL;
    size_t len = 0, n = 0, n_eval = 0;
    Err er = {{0}};
    DlError err = {{0}};
    int32_t *ids = NULL, *out = NULL;
    DlSession *s = dl_session_new(e, &err);
    if (s && !chat_render(t, msgs, NULL, &o, &text, &len, &er) && !dl_tokenize(e, text, len, true, &ids, &n, &err) &&
        !cli_images_eval(e, s, ids, n, imgs, n_imgs, &n_eval, &err)) {
        out = malloc(sizeof *out * (size_t)n_gen);
        const int V = dl_engine_info(e)->n_vocab;
        for (int k = 0; k < n_gen && out; k++) {
            const float *l = dl_session_logits(s);
            int32_t best = 0;
            for (int v = 1; v < V; v++) best = l[v] > l[best] ? v : best;
            out[k] = best;
            if (dl_session_eval(s, &best, 1, &err)) free(out), out = NULL;
        }
    }
    if (!out) test_note("cold path: %s%s", er.msg, err.msg);
    free(text), free(ids);
    cJSON_Delete(msgs);
    dl_session_free(s);
    return out;
}

/* /image in a chat (chat_conv_attach): each turn's reply is what the CLI's image path gives for the whole
 * rendered conversation evaluated cold, while the second turn reuses the session (the image is not evaluated
 * again); a second picture in turn 3 is told apart from the first. Then the program: `chat --mmproj` with
 * /image on standard input, and /image without a projector refused in one line. */
TEST(chat_cli, image_attached_to_the_next_message) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const char *model, *mmproj, *png;
    REQUIRE(test_vl_files(&model, &mmproj, &png));
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.n_threads = 1, p.n_ctx = 1024;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    ChatTemplate t;
    char msg[512];
    REQUIRE(chat_prompt_template(NULL, test_data(QWEN35_TEMPLATE), NULL, &t, msg, sizeof msg) == 0);
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    sp.temperature = 0;
    DlSampler *greedy = dl_sampler_new(e, &sp, &err);
    ChatConv *conv = chat_conv_new(e, &t, NULL, false, &err);
    REQUIRE(greedy && conv);
    CliImage keep[2], give;
    REQUIRE_MSG(cli_image_encode(e, mmproj, png, 1, &keep[0], &err) == 0, "%s", err.msg);
    const CliImage *imgs[2] = {&keep[0], &keep[1]};
    keep[1] = keep[0];
    keep[1].embd = malloc(sizeof(float) * (size_t)keep[0].n_tokens * (size_t)keep[0].width);
    for (int i = 0; i < keep[0].n_tokens * keep[0].width; i++) keep[1].embd[i] = -keep[0].embd[i]; /* "another picture" */
    const char *turns[] = {"Describe it.", "And the colours?", "Compare them."};
    enum { NG = 5 };
    for (int k = 0; k < 3; k++) {
        if (k != 1) { /* a picture before turns 1 and 3 */
            give = keep[k / 2];
            give.embd = malloc(sizeof(float) * (size_t)give.n_tokens * (size_t)give.width);
            memcpy(give.embd, keep[k / 2].embd, sizeof(float) * (size_t)give.n_tokens * (size_t)give.width);
            REQUIRE(chat_conv_attach(conv, &give, &err) == 0 && chat_conv_pending_images(conv) == 1);
        }
        Text tx = {0};
        ChatConvOutput out = {on_r, on_c, &tx};
        ChatTurnStats st;
        ChatTurnEnd end = chat_conv_turn(conv, turns[k], greedy, NG, true, &out, NULL, &st, &err);
        REQUIRE_MSG(end == TURN_LENGTH, "turn %d ended %d: %s", k, end, err.msg);
        size_t n_have = 0;
        const int32_t *have = chat_conv_tokens(conv, &n_have);
        int32_t *want = cold_reply(e, &t, chat_conv_messages(conv), imgs, k < 2 ? 1 : 2, NG);
        REQUIRE(want && n_have == st.n_prompt + NG);
        CHECK_MSG(!memcmp(have + st.n_prompt, want, sizeof *want * NG), "turn %d: the reply differs from the cold CLI path", k);
        int n_keys = 0;
        for (size_t i = 0; i < n_have; i++) n_keys += have[i] < 0;
        CHECK_MSG(n_keys == (k < 2 ? 1 : 2) * keep[0].n_tokens, "turn %d: %d image rows in the session", k, n_keys);
        if (k > 0) CHECK_MSG(st.n_reused > (size_t)keep[0].n_tokens, "turn %d reused %zu tokens", k, st.n_reused);
        test_note("turn %d: prompt %zu rows, %zu reused", k, st.n_prompt, st.n_reused);
        free(want);
    }
    cli_image_free(&keep[0]), cli_image_free(&keep[1]);
    chat_conv_free(conv);
    dl_sampler_free(greedy);
    dl_engine_close(e);
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: the program part skipped");
    char args[2048], in[1024], *o = NULL, *er = NULL;
    snprintf(args, sizeof args, "chat -m '%s' --mmproj '%s' --chat-template-file '%s' --temp 0 -n 3 -c 1024 -t 1", model,
             mmproj, test_data(QWEN35_TEMPLATE));
    snprintf(in, sizeof in, "/image %s\nDescribe it.\n/image %s.none\n/exit\n", png, png);
    int rc = cli_run(args, in, &o, &er);
    CHECK_MSG(rc == 0 && er && strstr(er, "[image ") && strstr(er, "cannot open") && strstr(er, "[reply cut at 3 tokens"),
              "rc %d, stderr: %s", rc, er ? er : "");
    free(o), free(er);
    o = er = NULL;
    snprintf(args, sizeof args, "chat -m '%s' --chat-template-file '%s' --temp 0 -n 2 -c 1024 -t 1", model,
             test_data(QWEN35_TEMPLATE));
    snprintf(in, sizeof in, "/image %s\n/exit\n", png);
    rc = cli_run(args, in, &o, &er);
    CHECK_MSG(rc == 0 && er && strstr(er, "/image needs a vision projector: start chat with --mmproj FILE"), "rc %d: %s", rc,
              er ? er : "");
    free(o), free(er);
}

/* /image against llama.cpp's recorded logits (test_vision_oracle.h): a ChatML conversation (the recorded prompt is
 * ChatML's rendering of [image, "Describe the picture."]) on the oracle's model, projector and PNG — the turn's
 * prompt is the recorded one token for token (the image's rows in its place) and the greedy reply's first token
 * is llama.cpp's argmax; then the program (`chat --chat-format chatml --mmproj`, /image on standard input)
 * replies with that token's text. */
TEST(chat_cli, image_reply_matches_the_mtmd_oracle) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const char *model, *mmproj, *png;
    REQUIRE(test_vision_oracle_files(&model, &mmproj, &png));
    int n1, n2;
    const int32_t *c2, *c1 = test_vision_oracle_prompt(&n1, &c2, &n2);
    const int32_t top1 = test_vision_oracle_top1();
    REQUIRE_MSG(c1 && top1 >= 0, "the recorded oracle is missing");
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.n_threads = 1, p.n_ctx = 256;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    ChatTemplate t;
    char msg[512];
    REQUIRE(chat_prompt_template(NULL, NULL, "chatml", &t, msg, sizeof msg) == 0);
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    sp.temperature = 0;
    DlSampler *greedy = dl_sampler_new(e, &sp, &err);
    ChatConv *conv = chat_conv_new(e, &t, NULL, false, &err);
    REQUIRE(greedy && conv);
    CliImage img;
    REQUIRE_MSG(cli_image_encode(e, mmproj, png, 1, &img, &err) == 0, "%s", err.msg);
    const int n_img = img.n_tokens;
    REQUIRE(chat_conv_attach(conv, &img, &err) == 0);
    Text tx = {0};
    ChatConvOutput out = {on_r, on_c, &tx};
    ChatTurnStats st;
    ChatTurnEnd end = chat_conv_turn(conv, "Describe the picture.", greedy, 1, true, &out, NULL, &st, &err);
    REQUIRE_MSG(end == TURN_LENGTH, "ended %d: %s", end, err.msg);
    size_t n_have = 0;
    const int32_t *have = chat_conv_tokens(conv, &n_have);
    bool same = st.n_prompt == (size_t)(n1 + n_img + n2) && n_have == st.n_prompt + 1;
    for (int i = 0; same && i < n1; i++) same = have[i] == c1[i];
    for (int i = 0; same && i < n_img; i++) same = have[n1 + i] < 0;
    for (int i = 0; same && i < n2; i++) same = have[n1 + n_img + i] == c2[i];
    CHECK_MSG(same, "the turn's prompt (%zu rows) is not the recorded one (%d + %d image rows + %d)", st.n_prompt, n1, n_img, n2);
    CHECK_MSG(n_have == st.n_prompt + 1 && have[st.n_prompt] == top1, "reply token %d, llama.cpp's argmax %d",
              n_have > st.n_prompt ? have[st.n_prompt] : -1, top1);
    size_t pl;
    const char *piece = dl_token_piece(e, top1, &pl);
    char want[64];
    snprintf(want, sizeof want, "%.*s", (int)(pl < 63 ? pl : 63), piece ? piece : "");
    test_note("prompt %zu rows = the recorded one; reply token %d ('%s') = llama.cpp's argmax", st.n_prompt, have[st.n_prompt], want);
    chat_conv_free(conv);
    dl_sampler_free(greedy);
    dl_engine_close(e);
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: the program part skipped");
    char args[2048], in[1024], *o = NULL, *er = NULL;
    snprintf(args, sizeof args, "chat -m '%s' --mmproj '%s' --chat-format chatml --temp 0 -n 1 -c 1024 -t 1", model, mmproj);
    snprintf(in, sizeof in, "/image %s\nDescribe the picture.\n/exit\n", png);
    const int rc = cli_run(args, in, &o, &er);
    CHECK_MSG(rc == 0 && o && strstr(o, want), "rc %d, reply '%s', llama.cpp's argmax '%s'; stderr %s", rc, o ? o : "", want,
              er ? er : "");
    free(o), free(er);
}
