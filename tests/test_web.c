/* test_web.c — the chat page (group `web`): the embedded files served at / and /web/ (in process: types,
 * caching, methods, the security headers, no key needed, --no-webui), the Markdown renderer in Node
 * (tests/web/markdown.test.mjs), and the page in headless Chromium against `deltallm serve`
 * (tests/web/browser.mjs: skipped with a note where node or Chromium is missing). */
#include "image/image.h"
#include "test.h"

#include "cli_proc.h"
#include "server/server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define MODEL "models/m3-qwen35-dense-bf16.gguf"

typedef struct Reply {
    int status;
    char *head; /* the status line and headers */
    char *body;
    size_t body_len;
} Reply;

/* Sends a raw HTTP/1.0-style request (the connection closes after the reply) and reads the reply. */
static Reply request(int port, const char *raw) {
    Reply r = {0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0) close(fd);
        return r;
    }
    for (size_t n = strlen(raw), w = 0; w < n;) {
        ssize_t k = write(fd, raw + w, n - w);
        if (k <= 0) break;
        w += (size_t)k;
    }
    size_t len = 0, cap = 1 << 16;
    char *all = malloc(cap + 1);
    for (ssize_t k; all && (k = read(fd, all + len, cap - len)) > 0;) {
        len += (size_t)k;
        if (len == cap) all = realloc(all, (cap *= 2) + 1);
    }
    close(fd);
    if (!all) return r;
    all[len] = 0;
    char *sep = strstr(all, "\r\n\r\n");
    if (sep && sscanf(all, "HTTP/1.%*d %d", &r.status) == 1) {
        r.head = strndup(all, (size_t)(sep - all));
        r.body_len = len - (size_t)(sep + 4 - all);
        r.body = malloc(r.body_len + 1);
        memcpy(r.body, sep + 4, r.body_len + 1);
    }
    free(all);
    return r;
}

static Reply get(int port, const char *path, const char *extra) {
    char raw[2048];
    snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n", path, extra ? extra : "");
    return request(port, raw);
}

static void reply_free(Reply *r) {
    free(r->head);
    free(r->body);
}

/* The value of a header in r (a static copy), or NULL. */
static const char *header(const Reply *r, const char *name) {
    static char value[1024];
    for (const char *p = r->head; p && (p = strstr(p, "\r\n")); p += 2) {
        size_t n = strlen(name);
        if (!strncasecmp(p + 2, name, n) && p[2 + n] == ':') {
            const char *v = p + 3 + n;
            while (*v == ' ') v++;
            snprintf(value, sizeof value, "%.*s", (int)strcspn(v, "\r"), v);
            return value;
        }
    }
    return NULL;
}

static Server *start(bool no_webui) {
    ServerConfig c;
    server_config_init(&c);
    c.model_path = test_data(MODEL);
    c.port = 0;
    c.ctx_size = 256;
    c.threads = 1;
    c.api_key = "web-key";
    c.no_cache = true;
    c.no_webui = no_webui;
    Err err = {{0}};
    Server *s = server_start(&c, &err);
    test_check(s != NULL, __FILE__, __LINE__, "server_start", "%s", err.msg);
    return s;
}

TEST(web, page_and_files_are_served) {
    Server *s = start(false);
    if (!s) return;
    const int port = server_port(s);
    Reply r = get(port, "/", NULL);
    char etag[128] = "";
    CHECK_MSG(r.status == 200 && header(&r, "Content-Type") && strstr(header(&r, "Content-Type"), "text/html") &&
                  r.body && strstr(r.body, "<script type=\"module\" src=\"/web/app.js\">"),
              "GET / without a key: %d %s", r.status, r.head ? r.head : "");
    const char *csp = header(&r, "Content-Security-Policy");
    CHECK_MSG(csp && strstr(csp, "script-src 'self'") && strstr(csp, "default-src 'none'") && !strstr(csp, "unsafe"),
              "CSP: %s", csp ? csp : "(none)");
    CHECK(header(&r, "X-Content-Type-Options") && header(&r, "X-Frame-Options") && header(&r, "Cache-Control"));
    if (header(&r, "ETag")) snprintf(etag, sizeof etag, "%s", header(&r, "ETag"));
    reply_free(&r);
    /* every file of src/server/web/ is served byte for byte */
    DIR *d = opendir("src/server/web");
    REQUIRE(d);
    int n_files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[512], url[512];
        snprintf(path, sizeof path, "src/server/web/%s", e->d_name);
        snprintf(url, sizeof url, "/web/%s", e->d_name);
        size_t n = 0;
        char *want = test_read_file(path, &n);
        r = get(port, url, NULL);
        CHECK_MSG(r.status == 200 && want && r.body_len == n && !memcmp(r.body, want, n), "%s: %d, %zu bytes of %zu",
                  url, r.status, r.body_len, n);
        const char *type = header(&r, "Content-Type");
        const char *dot = strrchr(e->d_name, '.');
        CHECK_MSG(type && dot && ((!strcmp(dot, ".js") && strstr(type, "javascript")) ||
                                  (!strcmp(dot, ".css") && strstr(type, "text/css")) ||
                                  (!strcmp(dot, ".html") && strstr(type, "text/html"))),
                  "%s served as %s", url, type ? type : "?");
        reply_free(&r);
        free(want);
        n_files++;
    }
    closedir(d);
    CHECK(n_files >= 4);
    /* caching, methods, unknown files, and the API still behind the key */
    char inm[200];
    snprintf(inm, sizeof inm, "If-None-Match: %s\r\n", etag);
    r = get(port, "/", inm);
    CHECK_MSG(etag[0] && r.status == 304 && r.body_len == 0, "If-None-Match %s: %d", etag, r.status);
    reply_free(&r);
    r = get(port, "/?conversation=1", NULL);
    CHECK(r.status == 200);
    reply_free(&r);
    r = request(port, "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    CHECK_MSG(r.status == 200 && r.body_len == 0, "HEAD: %d, %zu bytes", r.status, r.body_len);
    reply_free(&r);
    r = request(port, "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}");
    CHECK_MSG(r.status == 405 && header(&r, "Allow") && strstr(header(&r, "Allow"), "GET"), "POST /: %d", r.status);
    reply_free(&r);
    const char *missing[] = {"/web/", "/web/nope.js", "/web/../Makefile", "/web/app.js/x", "/index.html"};
    for (int i = 0; i < 5; i++) {
        r = get(port, missing[i], NULL);
        CHECK_MSG(r.status == 404 || r.status == 401, "%s: %d", missing[i], r.status);
        reply_free(&r);
    }
    r = get(port, "/v1/models", NULL);
    CHECK_MSG(r.status == 401, "the API needs the key although the page does not: %d", r.status);
    reply_free(&r);
    server_stop(s);
    /* --no-webui */
    if (!(s = start(true))) return;
    r = get(server_port(s), "/", NULL);
    CHECK_MSG(r.status == 404 || r.status == 401, "--no-webui: GET / is %d", r.status);
    reply_free(&r);
    r = get(server_port(s), "/web/app.js", NULL);
    CHECK(r.status == 404 || r.status == 401);
    reply_free(&r);
    server_stop(s);
}

bool test_vl_files(const char **model, const char **mmproj, const char **png); /* test_server_vision.c */

static bool have_node(void) { return system("node --version > /dev/null 2>&1") == 0; }

/* Runs a Node script of tests/web, its ok / not ok lines as notes; the exit status. */
static int run_node(const char *script, const char *env) {
    char cmd[2048], log[600];
    snprintf(log, sizeof log, "%s/%s.log", test_tmpdir(), script);
    snprintf(cmd, sizeof cmd, "%s DELTALLM_TEST_TMP='%s' node tests/web/%s > '%s' 2>&1", env, test_tmpdir(), script, log);
    int rc = system(cmd);
    char *text = test_read_file(log, NULL);
    for (char *line = text ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n"))
        if (!strncmp(line, "ok ", 3) || !strncmp(line, "not ok", 6) || rc != 0) test_note("%s", line);
    free(text);
    return rc;
}

TEST(web, markdown_renderer) {
    if (!have_node()) return test_skip("node is not installed: the Markdown renderer's tests are skipped");
    CHECK_MSG(run_node("markdown.test.mjs", "") == 0, "tests/web/markdown.test.mjs failed");
}

TEST(web, browser) {
    const char *chromium = getenv("CHROMIUM") && *getenv("CHROMIUM") ? getenv("CHROMIUM") : "/usr/bin/chromium";
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: the browser test is skipped");
    if (!have_node()) return test_skip("node is not installed: the browser test (tests/web) is skipped");
    if (access(chromium, X_OK) != 0)
        return test_skip("Chromium is not installed (%s; apt-get install chromium): the browser test is skipped", chromium);
    char env[3000];
    const char *shot = getenv("DELTALLM_WEB_SCREENSHOT");
    /* the image part: a tiny Qwen3.5 model with its projector (test_server_vision.c), where PNG is built */
    const char *vl = "", *mp = "", *png = "";
    if (!strstr(image_formats(), "png") || !test_vl_files(&vl, &mp, &png)) vl = mp = png = "";
    snprintf(env, sizeof env,
             "DELTALLM_BIN='%s' CHROMIUM='%s' DELTALLM_WEB_SCREENSHOT='%s' DELTALLM_WEB_VL_MODEL='%s' "
             "DELTALLM_WEB_MMPROJ='%s' DELTALLM_WEB_PNG='%s'",
             cli_bin(), chromium, shot && *shot ? shot : "", vl, mp, png);
    CHECK_MSG(run_node("browser.mjs", env) == 0, "tests/web/browser.mjs failed");
}
