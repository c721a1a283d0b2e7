/* test_server_vision.c — images in the server (group `server_vision`): `serve --mmproj` on a tiny synthetic
 * Qwen3.5 model (the real vocabulary, width 64) with a tiny synthetic projector; an image_url data URL gives
 * the logprobs the CLI's path (cli_image_encode + cli_image_eval, then greedy decoding) gives for the same
 * prompt; the second turn of a conversation restores a checkpoint holding the image and re-encodes nothing,
 * with the output of a cold run; n = 2 (the second choice restores the first's snapshot: pos_delta travels
 * in it) gives twice the same; the Responses and Anthropic forms give the chat form's output; remote URLs, bad
 * base64, a corrupt or huge PNG and a server without --mmproj are one-line 400s; /props and /v1/models say so. */
#include "test.h"
#include "test_devices.h"
#include "test_http.h"
#include "test_vision_oracle.h"

#include "backend/backend.h"
#include "cli/cli_image.h"
#include "deltallm.h"
#include "image/image.h"
#include "model/synth.h"
#include "server/server.h"
#include "server/vision.h"
#include "vision/mmproj_synth.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint8_t *test_png_encode(const uint8_t *rgb, int w, int h, size_t *size); /* test_vision.c */

typedef struct VFiles {
    char model[512], mmproj[512], png[512];
    char *data_url;  /* the PNG as a data URL */
    char *data_url2; /* another picture of the same size */
    bool ok;
} VFiles;

static char *b64(const uint8_t *p, size_t n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc(n / 3 * 4 + 5), *q = o;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *q++ = A[v >> 18], *q++ = A[v >> 12 & 63];
        *q++ = i + 1 < n ? A[v >> 6 & 63] : '=';
        *q++ = i + 2 < n ? A[v & 63] : '=';
    }
    *q = 0;
    return o;
}

static const VFiles *files(void) {
    static VFiles f;
    static bool done;
    if (done) return &f;
    done = true;
    SynthSpec sp;
    Err err = {{0}};
    if (synth_preset(&sp, "qwen3.5-0.8b", &err)) return &f;
    sp.n_embd = 64, sp.n_layer = 2, sp.full_attn_interval = 2, sp.n_head = 2, sp.n_head_kv = 1, sp.head_dim = 64;
    sp.n_rot = 64, sp.n_ff = 128, sp.ssm_d_state = 16, sp.ssm_n_group = 2, sp.ssm_dt_rank = 4, sp.ctx = 4096;
    sp.seed = 11;
    snprintf(f.model, sizeof f.model, "%s/sv-model.gguf", test_tmpdir());
    if (synth_write(&sp, test_data("vocab/ggml-vocab-qwen35.gguf"), f.model, &err)) return test_note("synth: %s", err.msg), &f;
    MmprojSpec mp;
    if (mmproj_synth_preset(&mp, "tiny", &err)) return &f;
    snprintf(f.mmproj, sizeof f.mmproj, "%s/sv-mmproj.gguf", test_tmpdir());
    if (mmproj_synth_write(&mp, f.mmproj, &err)) return test_note("mmproj: %s", err.msg), &f;
    const int w = 40, h = 28;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    size_t n;
    for (int i = 0; i < w * h * 3; i++) rgb[i] = (uint8_t)((i * 53 + (i / 3 / w) * 5) & 0xff);
    uint8_t *png = test_png_encode(rgb, w, h, &n);
    char *enc2 = b64(png, n);
    f.data_url2 = malloc(strlen(enc2) + 32);
    sprintf(f.data_url2, "data:image/png;base64,%s", enc2);
    free(enc2), free(png);
    for (int i = 0; i < w * h * 3; i++) rgb[i] = (uint8_t)((i * 37 + (i / 3 / w) * 11) & 0xff);
    png = test_png_encode(rgb, w, h, &n);
    free(rgb);
    snprintf(f.png, sizeof f.png, "%s/sv.png", test_tmpdir());
    FILE *fp = fopen(f.png, "wb");
    if (!fp || fwrite(png, 1, n, fp) != n) return free(png), &f;
    fclose(fp);
    char *enc = b64(png, n);
    free(png);
    f.data_url = malloc(strlen(enc) + 32);
    sprintf(f.data_url, "data:image/png;base64,%s", enc);
    free(enc);
    f.ok = true;
    return &f;
}

/* The tiny model, projector and PNG for other test files (test_chat_cli.c); false when they cannot be made. */
bool test_vl_files(const char **model, const char **mmproj, const char **png);
bool test_vl_files(const char **model, const char **mmproj, const char **png) {
    const VFiles *f = files();
    *model = f->model, *mmproj = f->mmproj, *png = f->png;
    return f->ok;
}

static Server *start_vision(const VFiles *f, bool with_mmproj) {
    ServerConfig c;
    test_server_config(&c);
    c.model_path = f->model;
    c.chat_template_file = NULL;
    c.chat_format = "qwen35";
    c.ctx_size = 1024;
    c.mmproj = with_mmproj ? f->mmproj : NULL;
    return test_server_start(&c);
}

/* {"role":"user","content":[image, text]} as JSON (malloc'd) with the given URL. */
static char *user_image(const char *url, const char *text) {
    char *o = malloc(strlen(url) + strlen(text) + 200);
    sprintf(o, "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"%s\"}},"
               "{\"type\":\"text\",\"text\":\"%s\"}]}", url, text);
    return o;
}

static char *chat_body(const char *messages, const char *extra) {
    char *o = malloc(strlen(messages) + strlen(extra) + 300);
    sprintf(o, "{\"messages\":[%s],\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,"
               "\"chat_template_kwargs\":{\"enable_thinking\":false}%s}", messages, extra);
    return o;
}

static cJSON *post(int port, const char *path, const char *body, int *status) {
    HttpResp r = http(port, "POST", path, NULL, body);
    *status = r.status;
    cJSON *j = r.body ? cJSON_Parse(r.body) : NULL;
    if (r.status != 200) test_note("%s %d: %.300s", path, r.status, r.body ? r.body : "");
    http_free(&r);
    return j;
}

static double jnum(const cJSON *o, const char *path) { /* "a.b.c" */
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *k = strtok(buf, "."); k && v; k = strtok(NULL, ".")) v = cJSON_GetObjectItemCaseSensitive(v, k);
    return cJSON_IsNumber(v) ? v->valuedouble : -1;
}

static const cJSON *choice0(const cJSON *r) { return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "choices"), 0); }

static const char *content_of(const cJSON *r) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(choice0(r), "message");
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    return cJSON_IsString(c) ? c->valuestring : "";
}

/* The choice's token logprobs, into lp (at most 16); the count. */
static int logprobs_of(const cJSON *choice, double *lp) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice, "logprobs"), "content");
    int n = 0;
    for (const cJSON *t = c ? c->child : NULL; t && n < 16; t = t->next) lp[n++] = jnum(t, "logprob");
    return n;
}

TEST(server_vision, image_url_matches_the_cli_path) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const VFiles *f = files();
    REQUIRE_MSG(f->ok, "could not write the test files");
    Server *s = start_vision(f, true);
    REQUIRE(s);
    const int port = server_port(s);
    char *um = user_image(f->data_url, "Describe it.");
    char *body = chat_body(um, "");
    int st;
    cJSON *r = post(port, "/v1/chat/completions", body, &st);
    CHECK(st == 200 && r);
    double lp_srv[16];
    const int n_srv = logprobs_of(choice0(r), lp_srv);
    CHECK_MSG(n_srv == 6, "%d logprobs", n_srv);
    /* the same prompt through the CLI's functions */
    char *tb = malloc(strlen(um) + 128);
    sprintf(tb, "{\"messages\":[%s],\"chat_template_kwargs\":{\"enable_thinking\":false}}", um);
    cJSON *t = post(port, "/apply-template", tb, &st);
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(t, "prompt");
    REQUIRE(st == 200 && cJSON_IsString(prompt) && strstr(prompt->valuestring, MM_IMAGE_MARKER));
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = f->model, p.n_threads = 1, p.n_ctx = 1024;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    DlSession *ss = dl_session_new(e, &err);
    CliImage img;
    int32_t *ids = NULL;
    size_t n = 0, n_eval = 0;
    REQUIRE(ss && dl_tokenize(e, prompt->valuestring, strlen(prompt->valuestring), true, &ids, &n, &err) == 0);
    REQUIRE_MSG(cli_image_encode(e, f->mmproj, f->png, 1, &img, &err) == 0, "%s", err.msg);
    REQUIRE_MSG(cli_image_eval(e, ss, ids, n, &img, &n_eval, &err) == 0, "%s", err.msg);
    CHECK_MSG(jnum(r, "usage.prompt_tokens") == (double)n_eval, "prompt tokens %g, the CLI's %zu", jnum(r, "usage.prompt_tokens"), n_eval);
    const int V = dl_engine_info(e)->n_vocab;
    double worst = 0;
    for (int k = 0; k < 6 && k < n_srv; k++) {
        double lp;
        const int32_t best = test_greedy_logprob(dl_session_logits(ss), V, &lp);
        worst = fmax(worst, fabs(lp - lp_srv[k]));
        REQUIRE(dl_session_eval(ss, &best, 1, &err) == 0);
    }
    CHECK_MSG(worst < 1e-3, "server vs CLI path: logprobs differ by %.3g", worst);
    test_note("%zu prompt rows (%d image tokens), %d tokens, max |Δ logprob| %.2g", n_eval, img.n_tokens, n_srv, worst);
    /* n = 2: the second choice restores the first's prompt snapshot (its position shift with it) */
    char *body2 = chat_body(um, ",\"n\":2");
    cJSON *r2 = post(port, "/v1/chat/completions", body2, &st);
    double a[16], b[16];
    const int na = logprobs_of(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r2, "choices"), 0), a);
    const int nb = logprobs_of(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r2, "choices"), 1), b);
    CHECK(st == 200 && na == 6 && nb == 6);
    for (int k = 0; k < na && k < nb; k++) CHECK_MSG(fabs(a[k] - b[k]) < 1e-4 && fabs(a[k] - lp_srv[k]) < 1e-4, "token %d: %g %g %g", k, a[k], b[k], lp_srv[k]);
    cli_image_free(&img);
    free(ids), free(tb), free(um), free(body), free(body2);
    cJSON_Delete(r), cJSON_Delete(r2), cJSON_Delete(t);
    dl_session_free(ss);
    dl_engine_close(e);
    server_stop(s);
}

static void image_stats(int port, double *enc, double *hits) {
    HttpResp h = http(port, "GET", "/health", NULL, NULL);
    cJSON *j = cJSON_Parse(h.body ? h.body : "");
    *enc = jnum(j, "images.encoded"), *hits = jnum(j, "images.cache_hits");
    cJSON_Delete(j);
    http_free(&h);
}

TEST(server_vision, second_turn_reuses_the_image) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const VFiles *f = files();
    REQUIRE_MSG(f->ok, "could not write the test files");
    Server *s = start_vision(f, true);
    REQUIRE(s);
    const int port = server_port(s);
    char *um = user_image(f->data_url, "Describe it.");
    char *body = chat_body(um, "");
    int st;
    cJSON *r1 = post(port, "/v1/chat/completions", body, &st);
    REQUIRE(st == 200);
    double enc, hits;
    image_stats(port, &enc, &hits);
    CHECK_MSG(enc == 1 && hits == 0, "encoded %g, cache hits %g", enc, hits);
    /* turn 2: the history with the image, the reply, a new question */
    cJSON *reply = cJSON_CreateString(content_of(r1));
    char *rq = cJSON_PrintUnformatted(reply);
    char *msgs = malloc(strlen(um) + strlen(rq) + 200);
    sprintf(msgs, "%s,{\"role\":\"assistant\",\"content\":%s},{\"role\":\"user\",\"content\":\"And the colours?\"}", um, rq);
    char *warm = chat_body(msgs, ""), *cold = chat_body(msgs, ",\"cache_prompt\":false");
    cJSON *rw = post(port, "/v1/chat/completions", warm, &st);
    CHECK(st == 200);
    cJSON *rc = post(port, "/v1/chat/completions", cold, &st);
    CHECK(st == 200);
    const double cached = jnum(rw, "usage.prompt_tokens_details.cached_tokens");
    CHECK_MSG(cached > 20, "turn 2 restored %g tokens", cached); /* the image's 20 rows and the text around them */
    CHECK_MSG(jnum(rc, "usage.prompt_tokens_details.cached_tokens") <= 0, "the cold run restored %g",
              jnum(rc, "usage.prompt_tokens_details.cached_tokens"));
    image_stats(port, &enc, &hits);
    CHECK_MSG(enc == 1 && hits == 2, "encoded %g, cache hits %g (the image is encoded once)", enc, hits);
    double lw[16], lc[16];
    const int nw = logprobs_of(choice0(rw), lw), nc = logprobs_of(choice0(rc), lc);
    CHECK(nw == 6 && nc == 6);
    double worst = 0;
    for (int k = 0; k < nw && k < nc; k++) worst = fmax(worst, fabs(lw[k] - lc[k]));
    CHECK_MSG(worst < 1e-4 && !strcmp(content_of(rw), content_of(rc)), "warm vs cold: max |Δ logprob| %.3g, '%s' / '%s'",
              worst, content_of(rw), content_of(rc));
    test_note("turn 2: %g of %g prompt tokens restored; warm vs cold max |Δ logprob| %.2g", cached,
              jnum(rw, "usage.prompt_tokens"), worst);
    /* another picture of the same size, the same text: nothing past the text before it is reused */
    char *um2 = user_image(f->data_url2, "Describe it."), *body3 = chat_body(um2, "");
    cJSON *r3 = post(port, "/v1/chat/completions", body3, &st);
    CHECK(st == 200);
    double l1[16], l3[16];
    const int n1 = logprobs_of(choice0(r1), l1), n3 = logprobs_of(choice0(r3), l3);
    CHECK_MSG(jnum(r3, "usage.prompt_tokens_details.cached_tokens") < 5, "another image: %g tokens restored",
              jnum(r3, "usage.prompt_tokens_details.cached_tokens"));
    CHECK(n1 == 6 && n3 == 6 && l1[0] != l3[0]);
    image_stats(port, &enc, &hits);
    CHECK_MSG(enc == 2, "encoded %g", enc);
    free(um2), free(body3), cJSON_Delete(r3);
    free(um), free(body), free(rq), free(msgs), free(warm), free(cold);
    cJSON_Delete(reply), cJSON_Delete(r1), cJSON_Delete(rw), cJSON_Delete(rc);
    server_stop(s);
}

TEST(server_vision, responses_and_anthropic_forms) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const VFiles *f = files();
    REQUIRE_MSG(f->ok, "could not write the test files");
    Server *s = start_vision(f, true);
    REQUIRE(s);
    const int port = server_port(s);
    char *um = user_image(f->data_url, "Describe it.");
    char *body = malloc(strlen(um) + 200); /* no ignore_eos: the Anthropic API has none (greedy: the same stop) */
    sprintf(body, "{\"messages\":[%s],\"max_tokens\":6,\"temperature\":0,\"chat_template_kwargs\":{\"enable_thinking\":false}}", um);
    int st;
    cJSON *rc = post(port, "/v1/chat/completions", body, &st);
    REQUIRE(st == 200);
    const char *b64data = strchr(f->data_url, ',') + 1;
    char *rb = malloc(strlen(f->data_url) + 400), *ab = malloc(strlen(f->data_url) + 400);
    sprintf(rb, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"%s\"},"
                "{\"type\":\"input_text\",\"text\":\"Describe it.\"}]}],\"max_output_tokens\":6,\"temperature\":0,"
                "\"chat_template_kwargs\":{\"enable_thinking\":false}}", f->data_url);
    sprintf(ab, "{\"model\":\"m\",\"max_tokens\":6,\"temperature\":0,\"thinking\":{\"type\":\"disabled\"},"
                "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":\"base64\","
                "\"media_type\":\"image/png\",\"data\":\"%s\"}},{\"type\":\"text\",\"text\":\"Describe it.\"}]}]}", b64data);
    cJSON *rr = post(port, "/v1/responses", rb, &st);
    CHECK(st == 200);
    cJSON *ra = post(port, "/v1/messages", ab, &st);
    CHECK(st == 200);
    /* the same prompt (image rows included) and the same text */
    const double np = jnum(rc, "usage.prompt_tokens");
    CHECK_MSG(jnum(rr, "usage.input_tokens") == np && jnum(ra, "usage.input_tokens") == np, "prompt tokens %g / %g / %g", np,
              jnum(rr, "usage.input_tokens"), jnum(ra, "usage.input_tokens"));
    const cJSON *ot = cJSON_GetObjectItemCaseSensitive(rr, "output_text");
    char *rtext = NULL;
    if (cJSON_IsString(ot)) rtext = strdup(ot->valuestring);
    else { /* output[].content[].text of the message item */
        SBuf sb = {0};
        const cJSON *out = cJSON_GetObjectItemCaseSensitive(rr, "output");
        for (const cJSON *it = out ? out->child : NULL; it; it = it->next) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(it, "type");
            if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "message")) continue;
            for (const cJSON *p = c ? c->child : NULL; p; p = p->next) {
                const cJSON *x = cJSON_GetObjectItemCaseSensitive(p, "text");
                if (cJSON_IsString(x)) sbuf_puts(&sb, x->valuestring);
            }
        }
        rtext = sb.p ? sb.p : strdup("");
    }
    SBuf at = {0};
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(ra, "content");
    for (const cJSON *p = ac ? ac->child : NULL; p; p = p->next) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type"), *x = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "text") && cJSON_IsString(x)) sbuf_puts(&at, x->valuestring);
    }
    const char *ct = content_of(rc);
    CHECK_MSG(!strcmp(rtext, ct), "responses '%s' vs chat '%s'", rtext, ct);
    CHECK_MSG(!strcmp(at.p ? at.p : "", ct), "anthropic '%s' vs chat '%s'", at.p ? at.p : "", ct);
    /* the Responses conversation goes on from the stored one: its image is not encoded again, its prefix reused */
    const cJSON *rid = cJSON_GetObjectItemCaseSensitive(rr, "id");
    if (cJSON_IsString(rid)) {
        char next[300];
        snprintf(next, sizeof next, "{\"previous_response_id\":\"%s\",\"input\":\"And the colours?\",\"max_output_tokens\":4,"
                 "\"temperature\":0}", rid->valuestring);
        cJSON *rn = post(port, "/v1/responses", next, &st);
        double enc, hits;
        image_stats(port, &enc, &hits);
        CHECK_MSG(st == 200 && jnum(rn, "usage.input_tokens_details.cached_tokens") > 20 && enc == 1,
                  "previous_response_id: status %d, %g cached, %g encoded", st, jnum(rn, "usage.input_tokens_details.cached_tokens"), enc);
        cJSON_Delete(rn);
    } else {
        CHECK_MSG(false, "the response has no id");
    }
    free(rtext), sbuf_free(&at), free(rb), free(ab), free(um), free(body);
    cJSON_Delete(rc), cJSON_Delete(rr), cJSON_Delete(ra);
    server_stop(s);
}

/* The id whose piece is the JSON "bytes" array b (first match in the vocabulary); -1 if none. */
static int32_t id_of_bytes(const DlEngine *e, const cJSON *b) {
    char buf[256];
    int n = 0;
    for (const cJSON *x = b ? b->child : NULL; x && n < (int)sizeof buf; x = x->next) buf[n++] = (char)x->valueint;
    const int V = dl_engine_info(e)->n_vocab;
    for (int32_t id = 0; id < V; id++) {
        size_t len;
        const char *p = dl_token_piece(e, id, &len);
        if (p && len == (size_t)n && !memcmp(p, buf, len)) return id;
    }
    return -1;
}

/* Each API that takes an image, against llama.cpp's recorded logits (test_vision_oracle.h): a ChatML server
 * (the recorded prompt is ChatML's rendering of [image, "Describe the picture."]) on the oracle's model,
 * projector and PNG. OpenAI chat (image_url): the first token's top_logprobs — the top one is llama.cpp's
 * argmax, the gaps to it within VISION_ORACLE_GAP_LIMIT of llama.cpp's; Responses (input_image) and Anthropic
 * (image block), which give no log-probabilities: the prompt's size and the greedy first token (its text). */
TEST(server_vision, each_api_against_the_mtmd_oracle) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const char *model, *mmproj, *png;
    REQUIRE(test_vision_oracle_files(&model, &mmproj, &png));
    int n1, n2;
    const int32_t *c2, *c1 = test_vision_oracle_prompt(&n1, &c2, &n2);
    const int32_t top1 = test_vision_oracle_top1();
    REQUIRE_MSG(c1 && top1 >= 0, "the recorded oracle is missing");
    size_t n_png;
    uint8_t *bytes = test_read_file(png, &n_png);
    REQUIRE(bytes);
    char *enc = b64(bytes, n_png), *url = malloc(strlen(enc) + 32);
    sprintf(url, "data:image/png;base64,%s", enc);
    free(bytes);
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = model, p.n_threads = 1, p.n_ctx = 64;
    DlError derr = {{0}};
    DlEngine *en = dl_engine_open(&p, &derr); /* the vocabulary, to name the returned tokens */
    REQUIRE_MSG(en, "%s", derr.msg);
    size_t top_len;
    const char *top_piece = dl_token_piece(en, top1, &top_len);
    /* plain ChatML (the model's own template names a default system prompt, which the recording has not) */
    char tpl[600];
    snprintf(tpl, sizeof tpl, "%s/oracle-chatml.jinja", test_tmpdir());
    FILE *tf = fopen(tpl, "wb");
    REQUIRE(tf);
    fputs("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", tf);
    fclose(tf);
    ServerConfig c;
    test_server_config(&c);
    c.model_path = model, c.chat_template_file = tpl, c.chat_format = "chatml", c.ctx_size = 1024, c.mmproj = mmproj;
    Server *s = test_server_start(&c);
    REQUIRE(s);
    const int port = server_port(s);
    const int n_img = 24; /* 48×32 canvas, tiny projector: 6×4 merged tokens */
    /* 1. OpenAI chat, image_url */
    char *um = user_image(url, "Describe the picture.");
    char *body = malloc(strlen(um) + 300);
    sprintf(body, "{\"messages\":[%s],\"max_tokens\":1,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,"
                  "\"top_logprobs\":8}", um);
    int st;
    cJSON *r = post(port, "/v1/chat/completions", body, &st);
    CHECK_MSG(st == 200 && jnum(r, "usage.prompt_tokens") == n1 + n_img + n2, "status %d, %g prompt tokens (want %d)", st,
              jnum(r, "usage.prompt_tokens"), n1 + n_img + n2);
    const cJSON *lpc = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(choice0(r), "logprobs"), "content");
    const cJSON *tok0 = cJSON_GetArrayItem(lpc, 0), *tops = cJSON_GetObjectItemCaseSensitive(tok0, "top_logprobs");
    int32_t ids[8];
    double lp[8];
    int n = 0;
    for (const cJSON *t = tops ? tops->child : NULL; t && n < 8; t = t->next) {
        ids[n] = id_of_bytes(en, cJSON_GetObjectItemCaseSensitive(t, "bytes"));
        lp[n++] = jnum(t, "logprob");
    }
    REQUIRE_MSG(n == 8, "%d top_logprobs", n);
    CHECK_MSG(id_of_bytes(en, cJSON_GetObjectItemCaseSensitive(tok0, "bytes")) == top1 && ids[0] == top1,
              "chat: generated / top token %d / %d, llama.cpp's argmax %d", id_of_bytes(en, cJSON_GetObjectItemCaseSensitive(tok0, "bytes")),
              ids[0], top1);
    int n_cmp;
    const double gap = test_vision_oracle_gap_dist(ids, lp, n, &n_cmp);
    CHECK_MSG(n_cmp >= 4 && gap <= VISION_ORACLE_GAP_LIMIT, "chat: logprob gaps %.3g·std from llama.cpp's (%d compared)", gap,
              n_cmp);
    test_note("chat image_url: top-1 %d (llama.cpp's %d), top-%d gaps within %.2g·std of llama.cpp's (%d recorded)", ids[0], top1,
              n, gap, n_cmp);
    /* 2. Responses input_image, 3. Anthropic image block: the greedy first token */
    const char *b64data = strchr(url, ',') + 1;
    char *rb = malloc(strlen(url) + 400), *ab = malloc(strlen(url) + 400);
    sprintf(rb, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"%s\"},"
                "{\"type\":\"input_text\",\"text\":\"Describe the picture.\"}]}],\"max_output_tokens\":1,\"temperature\":0}", url);
    sprintf(ab, "{\"model\":\"m\",\"max_tokens\":1,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                "\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"%s\"}},{\"type\":\"text\","
                "\"text\":\"Describe the picture.\"}]}]}", b64data);
    cJSON *rr = post(port, "/v1/responses", rb, &st);
    CHECK_MSG(st == 200 && jnum(rr, "usage.input_tokens") == n1 + n_img + n2, "responses: status %d, %g input tokens", st,
              jnum(rr, "usage.input_tokens"));
    SBuf rt = {0};
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(rr, "output");
    for (const cJSON *it = out ? out->child : NULL; it; it = it->next) {
        const cJSON *cc = cJSON_GetObjectItemCaseSensitive(it, "content");
        for (const cJSON *q = cc ? cc->child : NULL; q; q = q->next) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(q, "text");
            if (cJSON_IsString(x)) sbuf_puts(&rt, x->valuestring);
        }
    }
    cJSON *ra = post(port, "/v1/messages", ab, &st);
    CHECK_MSG(st == 200 && jnum(ra, "usage.input_tokens") == n1 + n_img + n2, "anthropic: status %d, %g input tokens", st,
              jnum(ra, "usage.input_tokens"));
    SBuf at = {0};
    const cJSON *ac = cJSON_GetObjectItemCaseSensitive(ra, "content");
    for (const cJSON *q = ac ? ac->child : NULL; q; q = q->next) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(q, "text");
        if (cJSON_IsString(x)) sbuf_puts(&at, x->valuestring);
    }
    const char *want = content_of(r);
    CHECK_MSG(top_piece && strlen(want) == top_len && !memcmp(want, top_piece, top_len), "chat text '%s' is not the piece of %d",
              want, top1);
    CHECK_MSG(rt.p && !strcmp(rt.p, want), "responses: '%s', llama.cpp's argmax '%s'", rt.p ? rt.p : "", want);
    CHECK_MSG(at.p && !strcmp(at.p, want), "anthropic: '%s', llama.cpp's argmax '%s'", at.p ? at.p : "", want);
    sbuf_free(&rt), sbuf_free(&at);
    free(rb), free(ab), free(body), free(um), free(enc), free(url);
    cJSON_Delete(r), cJSON_Delete(rr), cJSON_Delete(ra);
    server_stop(s);
    dl_engine_close(en);
}

/* A 400 whose message is one line holding want. */
static void check_refused(int port, const char *path, const char *body, const char *want) {
    HttpResp r = http(port, "POST", path, NULL, body);
    cJSON *j = cJSON_Parse(r.body ? r.body : "");
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(j, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
    CHECK_MSG(r.status == 400 && cJSON_IsString(m) && strstr(m->valuestring, want) && !strchr(m->valuestring, '\n'),
              "%s: status %d, '%.300s' (want '%s')", path, r.status, r.body ? r.body : "", want);
    cJSON_Delete(j);
    http_free(&r);
}

TEST(server_vision, refusals) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const VFiles *f = files();
    REQUIRE_MSG(f->ok, "could not write the test files");
    Server *s = start_vision(f, true);
    REQUIRE(s);
    const int port = server_port(s);
    struct {
        const char *url, *want;
    } bad[] = {
        {"https://example.com/cat.png", "remote image URLs are not fetched"},
        {"http://example.com/cat.png", "remote image URLs are not fetched"},
        {"ftp://example.com/cat.png", "unsupported image URL"},
        {"data:image/png;base64,iVBORw0K!!!!", "bad base64"},
        {"data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1Pe", "PNG"}, /* a cut PNG */
        {"data:image/png,rawbytes", "must be base64"},
        {"data:text/plain;base64,aGVsbG8=", "not an image"},
        {"data:image/png;base64,aGVsbG8gd29ybGQ=", "not a PNG or JPEG"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *um = user_image(bad[i].url, "x"), *body = chat_body(um, "");
        check_refused(port, "/v1/chat/completions", body, bad[i].want);
        free(um), free(body);
    }
    { /* a huge picture: refused from its header, before any pixel memory */
        uint8_t *row = calloc(20000 * 3, 1);
        size_t n = 0;
        uint8_t *png = test_png_encode(row, 20000, 1, &n);
        char *enc = b64(png, n), *url = malloc(strlen(enc) + 32);
        sprintf(url, "data:image/png;base64,%s", enc);
        char *um = user_image(url, "x"), *body = chat_body(um, "");
        check_refused(port, "/v1/chat/completions", body, "20000×1 pixels; the limit is 16384 per side");
        free(row), free(png), free(enc), free(url), free(um), free(body);
    }
    check_refused(port, "/v1/messages",
                  "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                  "\"source\":{\"type\":\"url\",\"url\":\"https://example.com/a.png\"}}]}]}",
                  "remote image URLs are not fetched");
    check_refused(port, "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"system\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,AAAA\"}}]},"
                  "{\"role\":\"user\",\"content\":\"x\"}]}",
                  "only user messages");
    /* /props and /v1/models say the model takes images */
    HttpResp p = http(port, "GET", "/props", NULL, NULL), m = http(port, "GET", "/v1/models", NULL, NULL);
    CHECK_MSG(p.body && strstr(p.body, "\"vision\":true"), "%s", p.body ? p.body : "");
    CHECK_MSG(m.body && strstr(m.body, "\"multimodal\""), "%s", m.body ? m.body : "");
    http_free(&p), http_free(&m);
    server_stop(s);
    { /* a projector beside a model without the vision tokens (m1): refused at start, in one line */
        ServerConfig c;
        test_server_config(&c);
        c.mmproj = f->mmproj;
        Err err = {{0}};
        Server *bad = server_start(&c, &err);
        CHECK_MSG(!bad && strstr(err.msg, "no <|vision_start|> / <|image_pad|> tokens"), "%s", err.msg);
        server_stop(bad);
    }
    /* without --mmproj: one line, and /props says no vision */
    s = start_vision(f, false);
    REQUIRE(s);
    char *um = user_image(f->data_url, "x"), *body = chat_body(um, "");
    check_refused(server_port(s), "/v1/chat/completions", body, "--mmproj");
    p = http(server_port(s), "GET", "/props", NULL, NULL);
    CHECK(p.body && strstr(p.body, "\"vision\":false"));
    http_free(&p);
    free(um), free(body);
    server_stop(s);
}

TEST(server_vision, base64_decoder) {
    Err err = {{0}};
    uint8_t *o = NULL;
    size_t n = 0;
    REQUIRE(sv_base64_decode("aGVs bG8=\n", 10, &o, &n, &err) == 0);
#define FRESH memset(&err, 0, sizeof err)
    CHECK(n == 5 && !memcmp(o, "hello", 5));
    free(o);
    REQUIRE(sv_base64_decode("_-8", 3, &o, &n, &err) == 0); /* URL-safe, unpadded: 0xff 0xef */
    CHECK(n == 2 && o[0] == 0xff && o[1] == 0xef);
    free(o);
    FRESH;
    CHECK(sv_base64_decode("aGVsbG8=x", 9, &o, &n, &err) != 0 && strstr(err.msg, "padding"));
    FRESH;
    CHECK(sv_base64_decode("aGVsb", 5, &o, &n, &err) != 0 && strstr(err.msg, "ends inside"));
    FRESH;
    CHECK(sv_base64_decode("a*b", 3, &o, &n, &err) != 0 && strstr(err.msg, "0x2a"));
}

/* serve --vision-device: the image's logprobs with the encoder on each device = with it on the CPU backend (the
 * exact arithmetic; both through vision/vision_dev.h), within 1e-3; serve --device: the text model on the device
 * answers an image request; an unknown backend refused at start in one line, and the option without --mmproj too. */
TEST(device, vision_server_on_the_device) {
    if (!strstr(image_formats(), "png")) return test_skip("PNG support not built");
    const VFiles *f = files();
    REQUIRE_MSG(f->ok, "could not write the test files");
    const char *dv[TEST_MAX_DEVICES];
    const int nd = test_devices(dv, NULL);
    char *um = user_image(f->data_url, "Describe it."), *body = chat_body(um, "");
    /* run 0: the CPU backend; 1 … nd: the devices; nd + 1: no --vision-device (the CPU encoder's fast path) */
    double lp[2 + TEST_MAX_DEVICES][16];
    int n[2 + TEST_MAX_DEVICES] = {0};
    for (int d = 0; d <= nd + 1; d++) {
        ServerConfig c;
        test_server_config(&c);
        c.model_path = f->model, c.chat_template_file = NULL, c.chat_format = "qwen35", c.ctx_size = 1024;
        c.mmproj = f->mmproj, c.vision_device = d == 0 ? "cpu" : d <= nd ? dv[d - 1] : NULL;
        const char *name = c.vision_device ? c.vision_device : "the fast path";
        Server *s = test_server_start(&c);
        if (!s) continue;
        int st;
        cJSON *r = post(server_port(s), "/v1/chat/completions", body, &st);
        CHECK_MSG(st == 200 && r, "%s: status %d", name, st);
        n[d] = r ? logprobs_of(choice0(r), lp[d]) : 0;
        CHECK_MSG(n[d] == 6, "%s: %d logprobs", name, n[d]);
        cJSON_Delete(r);
        server_stop(s);
        if (d == 0) continue;
        double worst = 0;
        for (int k = 0; k < n[d] && k < n[0]; k++) worst = fmax(worst, fabs(lp[d][k] - lp[0][k]));
        test_note("%s: max |Δ logprob| against the CPU backend %.2g", name, worst);
        if (d <= nd) CHECK_MSG(n[0] == 6 && worst < 1e-3, "%s: logprobs differ from the CPU backend's by %.3g", name, worst);
        else /* the option reaches the encoder: the fast path's embeddings are not the exact ones (1e-3·std apart; on
              * this random model the greedy tokens' logprobs then move by 0.3) */
            CHECK_MSG(n[0] == 6 && worst > 0, "the fast path gives the CPU backend's logprobs: --vision-device ignored?");
    }
    /* the text model on each device (the CPU encoder's fast path, as run nd + 1): the image request answered, its
     * logprobs within 0.2 of the CPU's — the server takes no --arith, so the CPU runs its fast arithmetic, whose
     * distance to F32 this is (measured 0.068 on lavapipe); the device's own bound (1e-3·std of the exact mode) is
     * device/vision_text_model_on_the_device's */
    for (int d = 0; d < nd && n[nd + 1] == 6; d++) {
        ServerConfig c;
        test_server_config(&c);
        c.model_path = f->model, c.chat_template_file = NULL, c.chat_format = "qwen35", c.ctx_size = 1024;
        c.mmproj = f->mmproj, c.engine.backend = dv[d];
        Server *s = test_server_start(&c);
        if (!s) continue;
        int st;
        cJSON *r = post(server_port(s), "/v1/chat/completions", body, &st);
        double lpd[16];
        const int nl = r ? logprobs_of(choice0(r), lpd) : 0;
        double worst = 0;
        for (int k = 0; k < nl && k < 6; k++) worst = fmax(worst, fabs(lpd[k] - lp[nd + 1][k]));
        test_note("text model on %s: %d logprobs, max |Δ logprob| against the CPU's fast arithmetic %.2g", dv[d], nl, worst);
        CHECK_MSG(st == 200 && nl == 6 && worst < 0.2, "text model on %s: status %d, %d logprobs, max |Δ| %.3g", dv[d], st, nl, worst);
        cJSON_Delete(r);
        server_stop(s);
    }
    const char *bad_dev[] = {"nosuch", NULL};
    for (int i = 0; i < 2; i++) {
        ServerConfig c;
        test_server_config(&c);
        c.model_path = f->model, c.chat_format = "qwen35", c.ctx_size = 1024;
        c.mmproj = i == 0 ? f->mmproj : NULL, c.vision_device = i == 0 ? bad_dev[0] : "cpu";
        Err err = {{0}};
        Server *s = server_start(&c, &err);
        CHECK_MSG(!s && !strchr(err.msg, '\n') && strstr(err.msg, i == 0 ? "unknown backend 'nosuch'" : "--vision-device needs --mmproj"),
                  "case %d: %s", i, err.msg);
        if (s) server_stop(s);
    }
    free(um), free(body);
    if (!nd) test_skip("no device backend can run here");
}
