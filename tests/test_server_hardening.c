/* test_server_hardening.c — the server against hostile and careless clients (group `server`): checkpoint
 * files that are FIFOs, log injection, NUL characters in prompts, slowloris connections, bytes that are
 * not UTF-8, duplicate keys, API key handling, request framing, oversized chunked uploads, messages as
 * real clients echo them, several prompts in one completion request. Each test reproduces a failure the
 * server had (issue 14) and checks the fixed behaviour, in-process on the m1 test model. */
#include "test.h"
#include "test_http.h"

#include "server/json_io.h"
#include "server/openai.h"
#include "server/prefix_cache.h"
#include "server/server.h"
#include "server/util.h"
#include "base/clock.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MODEL "models/m1-qwen3next-legacy-f32.gguf"
#define AUTH "Authorization: Bearer k\r\n"

/* The tests' server with an API key ("k") and a 64 KiB body limit. */
static void base_config(ServerConfig *c) {
    test_server_config(c);
    c->api_key = "k";
    c->max_body_bytes = 64 * 1024;
}

/* Starts a server whose log goes to NAME in the scratch directory (*logf, open for reading back; the caller
 * sends the log back to stderr with srv_log_stream(NULL)). */
static Server *start_logged(const ServerConfig *c, const char *name, FILE **logf) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    if (!(*logf = fopen(path, "w+"))) return NULL;
    srv_log_stream(*logf);
    Server *s = test_server_start(c);
    if (!s) srv_log_stream(NULL);
    return s;
}

static cJSON *json_of(const HttpResp *r) { return r->body ? cJSON_ParseWithLength(r->body, r->body_len) : NULL; }

static int usage_of(const HttpResp *r, const char *field) {
    cJSON *j = json_of(r);
    const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), field);
    int n = cJSON_IsNumber(v) ? v->valueint : -1;
    cJSON_Delete(j);
    return n;
}

/* ------------------------------------------------------------------------------------------ 1. FIFO */

typedef struct OpenArgs {
    PrefixCacheConfig cfg;
    PrefixCache *pc;
    Err err;
    volatile bool done;
} OpenArgs;

static void *open_cache(void *arg) {
    OpenArgs *a = arg;
    a->pc = pcache_new(&a->cfg, &a->err);
    a->done = true;
    return NULL;
}

TEST(server, state_dir_fifo_and_file) {
    char dir[600], fifo[700], file[700];
    snprintf(dir, sizeof dir, "%s/fifo-state", test_tmpdir());
    REQUIRE(mkdir(dir, 0700) == 0);
    snprintf(fifo, sizeof fifo, "%s/00000000-5555555555555555-256.dlckpt", dir);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    OpenArgs a = {.cfg = {.ram_bytes = 1 << 20, .dir = dir, .disk_bytes = 1 << 20, .fingerprint = {1, 2}}};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, open_cache, &a) == 0);
    for (int i = 0; i < 500 && !a.done; i++) usleep(10000);
    bool hung = !a.done;
    if (hung) { /* before the fix: blocked in open() on the FIFO; a writer releases it */
        int w = open(fifo, O_WRONLY | O_NONBLOCK);
        if (w >= 0) close(w);
    }
    pthread_join(th, NULL);
    CHECK_MSG(!hung, "opening the cache blocked on a FIFO in the state directory");
    REQUIRE_MSG(a.pc, "%s", a.err.msg);
    PcacheStats st;
    pcache_stats(a.pc, &st);
    CHECK_MSG(st.ignored_files == 1 && st.disk_entries == 0, "ignored %llu, entries %zu",
              (unsigned long long)st.ignored_files, st.disk_entries);
    pcache_free(a.pc);
    /* a symlink to a regular file is skipped as well */
    char target[700], link_path[700];
    snprintf(target, sizeof target, "%s/target", test_tmpdir());
    snprintf(link_path, sizeof link_path, "%s/00000000-6666666666666666-256.dlckpt", dir);
    FILE *f = fopen(target, "wb");
    REQUIRE(f);
    fputs("x", f);
    fclose(f);
    REQUIRE(symlink(target, link_path) == 0);
    Err err = {{0}};
    PrefixCache *pc = pcache_new(&a.cfg, &err);
    REQUIRE(pc);
    pcache_stats(pc, &st);
    CHECK(st.ignored_files == 2);
    pcache_free(pc);
    /* --state-dir naming a regular file: said so (it was "Permission denied") */
    snprintf(file, sizeof file, "%s/plain-file", test_tmpdir());
    REQUIRE((f = fopen(file, "wb")));
    fclose(f);
    PrefixCacheConfig fc = a.cfg;
    fc.dir = file;
    pc = pcache_new(&fc, &err);
    CHECK(!pc);
    CHECK_MSG(strstr(err.msg, "not a directory") != NULL, "message: %s", err.msg);
    pcache_free(pc);
}

/* ------------------------------------------------------------------------------------------ 2. log */

static bool log_line_ok(const char *line, size_t n) {
    /* "YYYY-MM-DD HH:MM:SS.mmm X " then printable text only */
    static const char shape[] = "dddd-dd-dd dd:dd:dd.ddd ";
    if (n < sizeof shape) return false;
    for (size_t i = 0; i < sizeof shape - 1; i++) {
        if (shape[i] == 'd' ? !(line[i] >= '0' && line[i] <= '9') : line[i] != shape[i]) return false;
    }
    if (!strchr("EWID", line[sizeof shape - 1]) || line[sizeof shape] != ' ') return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f) return false;
    return utf8_invalid_at(line, n) == n;
}

TEST(server, log_escapes_client_text) {
    SBuf b = {0};
    log_escape(&b, "a\nb\x1b[31m\xff\xc2\x9b ok \xc3\xa9", 17);
    CHECK_MSG(b.p && !strcmp(b.p, "a\\nb\\x1b[31m\\xff\\xc2\\x9b ok \xc3\xa9"), "escaped: %s", b.p ? b.p : "");
    sbuf_free(&b);
    ServerConfig c;
    base_config(&c);
    FILE *logf = NULL;
    Server *s = start_logged(&c, "server.log", &logf);
    REQUIRE(s);
    int port = server_port(s);
    HttpResp r = http(port, "GET", "/x%0a2026-12-01%2000:00:00.000%20I%20FORGED%1b%5b31m", NULL, NULL);
    CHECK(r.status == 401);
    http_free(&r);
    r = http(port, "GET", "/health%0aFORGED-HEALTH", NULL, NULL);
    CHECK(r.status == 401);
    http_free(&r);
    r = http(port, "GET", "/nothing%0aFORGED-404", AUTH, NULL);
    CHECK(r.status == 404);
    http_free(&r);
    r = http(port, "POST", "/v1/chat/completions", AUTH,
             "{\"messages\": [{\"role\": \"user\\nFORGED-ROLE\", \"content\": \"x\"}]}");
    CHECK(r.status == 400);
    http_free(&r);
    r = http(port, "POST", "/v1/chat/completions", AUTH,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"bogus\\nFAKE\\u001b[2J\": 1}");
    CHECK(r.status == 400);
    http_free(&r);
    server_stop(s);
    srv_log_stream(NULL);
    fflush(logf);
    rewind(logf);
    char line[4096];
    int n_lines = 0, bad = 0, escaped = 0;
    while (fgets(line, sizeof line, logf)) {
        size_t n = strcspn(line, "\n");
        n_lines++;
        if (!log_line_ok(line, n)) {
            bad++;
            test_note("bad log line: %.*s", (int)(n > 120 ? 120 : n), line);
        }
        escaped += strstr(line, "\\n2026-12-01") != NULL || strstr(line, "\\nFORGED") != NULL;
    }
    fclose(logf);
    CHECK_MSG(n_lines > 5 && bad == 0, "%d of %d log lines forged or with control bytes", bad, n_lines);
    CHECK_MSG(escaped >= 4, "the injected text is not in the log, escaped (%d lines)", escaped);
}

/* ------------------------------------------------------------------------------------------ 3. NUL */

TEST(server, nul_characters_reach_the_tokenizer) {
    ServerConfig c;
    base_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    SBuf body = {0};
    const char *chat = "{\"max_tokens\": 1, \"chat_template_kwargs\": {\"enable_thinking\": false}, \"messages\": "
                       "[{\"role\": \"user\", \"content\": \"a%s\"}]}";
    sbuf_printf(&body, chat, "");
    HttpResp r = http(port, "POST", "/v1/chat/completions", AUTH, body.p);
    int plain = usage_of(&r, "prompt_tokens");
    http_free(&r);
    body.n = 0;
    SBuf tail = {0};
    sbuf_puts(&tail, "\\u0000");
    for (int i = 0; i < 20; i++) sbuf_puts(&tail, "hello world ");
    sbuf_printf(&body, chat, tail.p);
    r = http(port, "POST", "/v1/chat/completions", AUTH, body.p);
    int with_nul = usage_of(&r, "prompt_tokens");
    CHECK_MSG(r.status == 200, "status %d %s", r.status, r.body ? r.body : "");
    http_free(&r);
    CHECK_MSG(plain > 0 && with_nul >= plain + 40, "chat: 'a' = %d prompt tokens, 'a\\u0000hello world...' = %d", plain,
              with_nul);
    /* completions: the whole prompt, not 1 token */
    body.n = 0;
    sbuf_printf(&body, "{\"max_tokens\": 1, \"prompt\": \"a%s\"}", tail.p);
    r = http(port, "POST", "/v1/completions", AUTH, body.p);
    int comp = usage_of(&r, "prompt_tokens");
    http_free(&r);
    CHECK_MSG(comp > 40, "completion prompt of 'a\\u0000hello world...' = %d tokens", comp);
    /* the NUL itself is a token, and comes back from /detokenize as \u0000 */
    r = http(port, "POST", "/tokenize", AUTH, "{\"content\": \"a\\u0000b\"}");
    cJSON *j = json_of(&r);
    int n_tok = cJSON_GetArraySize(cJSON_GetObjectItem(j, "tokens"));
    char *ids = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "tokens"));
    CHECK_MSG(n_tok == 3, "'a\\u0000b' -> %d tokens", n_tok);
    http_free(&r);
    body.n = 0;
    sbuf_printf(&body, "{\"tokens\": %s}", ids ? ids : "[]");
    r = http(port, "POST", "/detokenize", AUTH, body.p);
    CHECK_MSG(r.body && strstr(r.body, "\"a\\u0000b\""), "detokenized: %s", r.body ? r.body : "");
    http_free(&r);
    free(ids);
    cJSON_Delete(j);
    /* a stop string with a NUL is refused rather than silently cut */
    r = http(port, "POST", "/v1/completions", AUTH, "{\"prompt\": \"x\", \"stop\": \"a\\u0000b\"}");
    CHECK(r.status == 400 && is_error_object(r.body));
    http_free(&r);
    sbuf_free(&tail);
    sbuf_free(&body);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ 4. slowloris */

typedef struct Dribbler {
    int fd;
    double opened, closed_at; /* closed_at: when the server closed it (0: never) */
    bool refused;             /* closed at once (the per-address limit) */
} Dribbler;

typedef struct DribbleRun {
    Dribbler *d;
    int n;
    double seconds;
} DribbleRun;

/* Sends one header byte per 100 ms on every socket and notes when the server closes each one. */
static void *dribble(void *arg) {
    DribbleRun *run = arg;
    const char *line = "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
    double t0 = now_s();
    for (int step = 0; now_s() - t0 < run->seconds; step++) {
        for (int i = 0; i < run->n; i++) {
            Dribbler *d = &run->d[i];
            if (d->fd < 0 || d->closed_at > 0) continue;
            struct pollfd p = {d->fd, POLLIN | POLLRDHUP, 0};
            bool gone = poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR));
            if (!gone && send(d->fd, line + step % 70, 1, MSG_NOSIGNAL) < 0) gone = true;
            if (gone) d->closed_at = now_s();
        }
        usleep(100000);
    }
    return NULL;
}

TEST(server, slowloris_is_cut_off) {
    ServerConfig c;
    base_config(&c);
    c.read_timeout_s = 1.0;
    c.max_connections = 24;
    c.max_connections_per_ip = 4;
    Err err = {{0}};
    Server *s = server_start(&c, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    int port = server_port(s);
    enum { N_ONE = 30, N_MANY = 16, N = N_ONE + N_MANY };
    Dribbler d[N];
    int opened = 0;
    for (int i = 0; i < N; i++) {
        char from[32];
        snprintf(from, sizeof from, "127.0.0.%d", i < N_ONE ? 2 : 3 + (i - N_ONE) / 2);
        d[i] = (Dribbler){.fd = http_connect_from(port, from), .opened = now_s()};
        if (d[i].fd >= 0) {
            opened++;
            const char *start = "GET /health HTTP/1.1\r\nHost: x\r\n";
            if (send(d[i].fd, start, strlen(start), MSG_NOSIGNAL) < 0) d[i].closed_at = now_s();
        }
    }
    if (opened < N) {
        test_skip("cannot bind 127.0.0.x source addresses (%d of %d sockets): slowloris test skipped", opened, N);
        for (int i = 0; i < N; i++)
            if (d[i].fd >= 0) close(d[i].fd);
        server_stop(s);
        return;
    }
    DribbleRun run = {d, N, 3.0};
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, dribble, &run) == 0);
    /* normal clients are served all along */
    int ok = 0, tried = 0;
    double t0 = now_s();
    while (now_s() - t0 < 2.8) {
        HttpResp r = http(port, "GET", "/health", NULL, NULL);
        tried++;
        ok += r.status == 200;
        http_free(&r);
        usleep(150000);
    }
    pthread_join(th, NULL);
    int refused = 0, cut = 0, late = 0, open_still = 0;
    for (int i = 0; i < N; i++) {
        double t = d[i].closed_at > 0 ? d[i].closed_at - d[i].opened : -1;
        if (t < 0) open_still++;
        else if (t < 0.5) refused++;
        else if (t < 2.5) cut++;
        else late++;
        close(d[i].fd);
    }
    test_note("slowloris: %d sockets dribbling; %d refused at once (4 per address), %d cut off by the 1 s deadline, %d "
              "late, %d still open; %d of %d normal requests served meanwhile",
              N, refused, cut, late, open_still, ok, tried);
    CHECK_MSG(ok == tried && tried >= 5, "normal requests failed while others dribbled: %d of %d", ok, tried);
    CHECK(refused == N_ONE - 4);
    CHECK_MSG(open_still == 0 && late == 0, "%d dribbling connections outlived the deadline", open_still + late);
    /* a request that arrives whole is not affected by the deadline, and keep-alive works within it */
    HttpResp r = http(port, "GET", "/health", NULL, NULL);
    CHECK(r.status == 200);
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ 6, 7. JSON */

TEST(server, request_json_strictness) {
    ApiDefaults d = test_api_defaults();
    struct {
        const char *body;
        const char *param;
    } bad[] = {
        {"{\"prompt\": \"x\", \"max_tokens\": 100000, \"max_tokens\": 2}", "max_tokens"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"content\": \"b\"}]}", "messages[0].content"},
        {"{\"\xff\": 1, \"prompt\": \"x\"}", ""},
        {"{\"prompt\": \"\xc0\x80\"}", ""}, /* the in-server NUL spelling is not valid UTF-8 on the wire */
        {"{\"prompt\": \"x\xed\xa0\x80\"}", ""}, /* a UTF-16 surrogate in UTF-8 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ApiRequest r;
        ApiError e;
        memset(&e, 0, sizeof e);
        bool chat = strstr(bad[i].body, "messages") != NULL;
        int rc = api_parse(chat, bad[i].body, strlen(bad[i].body), &d, &r, &e);
        CHECK_MSG(rc == -1 && e.status == 400, "case %zu: rc %d status %d", i, rc, e.status);
        if (bad[i].param[0]) CHECK_MSG(!strcmp(e.param, bad[i].param), "case %zu: param '%s' (%s)", i, e.param, e.message);
        char *json = api_error_json(&e);
        CHECK_MSG(json && utf8_invalid_at(json, strlen(json)) == strlen(json), "case %zu: error body not UTF-8: %s", i,
                  json ? json : "");
        free(json);
    }
    /* raw control bytes are not JSON (cJSON would skip them, a NUL included, as whitespace) */
    static const char ctl[] = "{\"prompt\": \"x\",\x01 \"max_tokens\": 2}", nul[] = "\0{\"prompt\": \"x\"}";
    const char *raw_cases[] = {ctl, nul};
    const size_t raw_len[] = {sizeof ctl - 1, sizeof nul - 1};
    for (int i = 0; i < 2; i++) {
        ApiRequest r;
        ApiError e;
        CHECK_MSG(api_parse(false, raw_cases[i], raw_len[i], &d, &r, &e) == -1 && e.status == 400 &&
                      strstr(e.message, "control character"),
                  "raw control byte case %d: %s", i, e.message);
    }
    /* error bodies are valid UTF-8 whatever the message holds (a cut multi-byte character, raw bytes) */
    ApiError e;
    api_error(&e, 400, NULL, "x\xff", NULL, "unknown field '\xff\xfe' and a cut \xe2\x82");
    char *json = api_error_json(&e);
    CHECK(json && utf8_invalid_at(json, strlen(json)) == strlen(json) && strstr(json, "\\\\xff"));
    free(json);
    /* over HTTP too, for paths */
    ServerConfig c;
    base_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    HttpResp r = http(port, "GET", "/v1/%ff%fe", AUTH, NULL);
    CHECK(r.status == 404 && r.body && utf8_invalid_at(r.body, r.body_len) == r.body_len);
    http_free(&r);
    r = http(port, "POST", "/v1/completions", AUTH, "{\"\xff\": 1}");
    CHECK(r.status == 400 && r.body && utf8_invalid_at(r.body, r.body_len) == r.body_len && strstr(r.body, "UTF-8"));
    http_free(&r);
    r = http(port, "POST", "/v1/completions", AUTH, "{\"max_tokens\": 100000, \"prompt\": \"x\", \"max_tokens\": 2}");
    CHECK_MSG(r.status == 400 && strstr(r.body, "duplicate key 'max_tokens'"), "%d %s", r.status, r.body ? r.body : "");
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ 9. keys */

TEST(server, api_key_rules) {
    ServerConfig c;
    base_config(&c);
    c.api_key = "";
    Err err = {{0}};
    Server *s = server_start(&c, &err);
    CHECK(!s);
    CHECK_MSG(strstr(err.msg, "API key is empty") != NULL, "%s", err.msg);
    server_stop(s);
    char path[600];
    snprintf(path, sizeof path, "%s/key.txt", test_tmpdir());
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs("  \t sekret-key \r\n second line\n", f);
    fclose(f);
    char *key = NULL;
    REQUIRE(server_read_key_file(path, &key, &err) == 0);
    CHECK_MSG(key && !strcmp(key, "sekret-key,second line"), "keys '%s'", key ? key : "");
    c.api_key = key;
    s = server_start(&c, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    HttpResp r = http(server_port(s), "GET", "/v1/models", "Authorization: Bearer sekret-key\r\n", NULL);
    CHECK(r.status == 200);
    http_free(&r);
    server_stop(s);
    free(key);
    f = fopen(path, "wb");
    REQUIRE(f);
    fputs(" \r\n", f);
    fclose(f);
    CHECK(server_read_key_file(path, &key, &err) != 0 && !key);
    /* the CLI refuses an empty key before loading anything */
    const char *bin = getenv("DELTALLM_BIN");
    if (bin && *bin) {
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "'%s' serve -m '%s' --api-key '' > /dev/null 2>&1", bin, test_data(MODEL));
        int rc = system(cmd);
        CHECK_MSG(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 2, "serve --api-key '' exit status %d", rc);
    }
}

/* ------------------------------------------------------------------------------------------ 10. smaller */

/* Writes all of buf, false if the peer reset the connection first. */
static bool write_all(int fd, const char *buf, size_t n) {
    while (n) {
        ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        buf += k;
        n -= (size_t)k;
    }
    return true;
}

TEST(server, paths_framing_and_limits) {
    ServerConfig c;
    base_config(&c);
    c.ctx_size = 8192; /* m1 was trained for 4096 */
    FILE *logf = NULL;
    Server *s = start_logged(&c, "ctx.log", &logf);
    srv_log_stream(NULL);
    REQUIRE(s);
    fflush(logf);
    char logpath[600];
    snprintf(logpath, sizeof logpath, "%s/ctx.log", test_tmpdir());
    size_t n_log = 0;
    char *log_text = test_read_file(logpath, &n_log);
    CHECK_MSG(log_text && strstr(log_text, "larger than the model was trained for (4096)"), "no warning for -c 8192");
    free(log_text);
    fclose(logf);
    int port = server_port(s);
    const char *paths[] = {"/health%00", "/health/", "/v1/models/", "/v1/chat/completions/", "/health%00/x"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) {
        HttpResp r = http(port, "GET", paths[i], AUTH, NULL);
        CHECK_MSG(r.status == 404, "%s -> %d", paths[i], r.status);
        http_free(&r);
    }
    /* Content-Length and chunked together: refused, connection closed */
    const char *smuggle = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 4\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
    HttpResp r = http_raw(port, smuggle, strlen(smuggle));
    CHECK_MSG(r.status == 400 && r.head && strstr(r.head, "onnection: close") && !strstr(r.body, "\"object\":\"list\""),
              "CL + TE: %d", r.status);
    http_free(&r);
    const char *two_cl = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\nContent-Length: 2\r\n"
                         "Content-Length: 20\r\n\r\n{}";
    r = http_raw(port, two_cl, strlen(two_cl));
    CHECK_MSG(r.status == 400, "two Content-Length: %d", r.status);
    http_free(&r);
    const char *gzip = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n";
    r = http_raw(port, gzip, strlen(gzip));
    CHECK_MSG(r.status == 501, "Transfer-Encoding gzip: %d", r.status);
    http_free(&r);
    /* content: [] is refused */
    r = http(port, "POST", "/v1/chat/completions", AUTH, "{\"messages\": [{\"role\": \"user\", \"content\": []}]}");
    CHECK_MSG(r.status == 400 && strstr(r.body, "empty"), "content []: %d", r.status);
    http_free(&r);
    /* a chunked upload of 64 times the limit: read to its end, then 413 (it was a reset) */
    int fd = http_connect(port);
    REQUIRE(fd >= 0);
    const char *head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n"
                       "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    bool sent = write_all(fd, head, strlen(head));
    char *chunk = malloc(65536 + 16);
    REQUIRE(chunk);
    int hn = snprintf(chunk, 16, "10000\r\n");
    memset(chunk + hn, 'a', 65536);
    memcpy(chunk + hn + 65536, "\r\n", 2);
    for (int i = 0; i < 64 && sent; i++) sent = write_all(fd, chunk, (size_t)hn + 65536 + 2);
    if (sent) sent = write_all(fd, "0\r\n\r\n", 5);
    free(chunk);
    r = http_read_response(fd);
    close(fd);
    CHECK_MSG(sent && r.status == 413 && is_error_object(r.body), "4 MiB chunked upload: sent %d, status %d", sent,
              r.status);
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ 11. messages */

TEST(server, messages_as_clients_echo_them) {
    ServerConfig c;
    base_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    const char *echoed =
        "{\"max_tokens\": 2, \"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"cache_control\": {}},"
        "{\"role\": \"assistant\", \"content\": \"hello\", \"refusal\": null, \"annotations\": [], \"audio\": null,"
        " \"function_call\": null, \"parsed\": null, \"tool_calls\": []},"
        "{\"role\": \"assistant\", \"content\": [{\"type\": \"refusal\", \"refusal\": \"I cannot say.\"}]},"
        "{\"role\": \"assistant\", \"content\": null, \"refusal\": \"No comment.\"},"
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"again\", \"extra\": 1}]}]}";
    HttpResp r = http(port, "POST", "/v1/chat/completions", AUTH, echoed);
    CHECK_MSG(r.status == 200, "echoed messages: %d %s", r.status, r.body ? r.body : "");
    http_free(&r);
    r = http(port, "POST", "/apply-template", AUTH, echoed);
    CHECK_MSG(r.status == 200 && strstr(r.body, "I cannot say.") && strstr(r.body, "No comment."),
              "refusals rendered: %s", r.body ? r.body : "");
    http_free(&r);
    /* top level stays strict, and known fields inside messages are still checked */
    r = http(port, "POST", "/v1/chat/completions", AUTH,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"frobnicate\": 1}");
    CHECK(r.status == 400 && strstr(r.body, "Unrecognized request argument"));
    http_free(&r);
    r = http(port, "POST", "/v1/chat/completions", AUTH, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", "
                                                         "\"name\": 5}]}");
    CHECK(r.status == 400);
    http_free(&r);
    server_stop(s);
}

/* ------------------------------------------------------------------------------------------ 12. prompts */

TEST(server, completions_with_several_prompts) {
    ServerConfig c;
    base_config(&c);
    Server *s = test_server_start(&c);
    REQUIRE(s);
    int port = server_port(s);
    HttpResp one = http(port, "POST", "/v1/completions", AUTH,
                        "{\"prompt\": \"The river\", \"max_tokens\": 5, \"temperature\": 0}");
    HttpResp r = http(port, "POST", "/v1/completions", AUTH,
                      "{\"prompt\": [\"Once upon\", \"The river\", [5, 6, 7]], \"max_tokens\": 5, \"temperature\": 0}");
    CHECK_MSG(r.status == 200, "%d %s", r.status, r.body ? r.body : "");
    cJSON *j = json_of(&r), *j1 = json_of(&one);
    const cJSON *choices = cJSON_GetObjectItem(j, "choices");
    CHECK(cJSON_GetArraySize(choices) == 3);
    for (int i = 0; i < 3; i++)
        CHECK(cJSON_GetObjectItem(cJSON_GetArrayItem(choices, i), "index")->valueint == i);
    const char *t1 = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(choices, 1), "text"));
    const char *alone = cJSON_GetStringValue(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j1, "choices"), 0), "text"));
    CHECK_MSG(t1 && alone && !strcmp(t1, alone), "prompt 1 in a batch '%s' vs alone '%s'", t1 ? t1 : "", alone ? alone : "");
    int pt = usage_of(&r, "prompt_tokens"), ct = usage_of(&r, "completion_tokens");
    CHECK_MSG(pt > usage_of(&one, "prompt_tokens") && ct <= 15 && ct >= 3, "usage: prompt %d completion %d", pt, ct);
    cJSON_Delete(j);
    cJSON_Delete(j1);
    http_free(&r);
    http_free(&one);
    /* streamed: chunks of both choices, one finish each, one [DONE] */
    r = http(port, "POST", "/v1/completions", AUTH,
             "{\"prompt\": [\"a\", \"b\"], \"max_tokens\": 3, \"stream\": true, \"stream_options\": "
             "{\"include_usage\": true}}");
    CHECK(r.status == 200);
    int finishes = 0, dones = 0, idx1 = 0;
    for (const char *p = r.body; p && (p = strstr(p, "data: ")); p += 6) {
        finishes += !strncmp(p, "data: {", 7) && strstr(p, "\"finish_reason\":\"") &&
                    strstr(p, "\"finish_reason\":\"") < strstr(p, "\n\n");
        dones += !strncmp(p, "data: [DONE]", 12);
        const char *end = strstr(p, "\n\n");
        const char *i1 = strstr(p, "\"index\":1");
        idx1 += i1 && end && i1 < end;
    }
    CHECK_MSG(finishes == 2 && dones == 1 && idx1 >= 1, "finishes %d, [DONE] %d, chunks of choice 1: %d", finishes,
              dones, idx1);
    http_free(&r);
    /* each prompt is checked on its own */
    r = http(port, "POST", "/v1/completions", AUTH, "{\"prompt\": [\"a\", \"\"]}");
    CHECK(r.status == 400 && strstr(r.body, "prompt[1]"));
    http_free(&r);
    server_stop(s);
}
