/* test_server_engine.c — `deltallm serve` opens the engine `run` opens (group `server`): the engine options
 * (--arith / --exact, -ctk / -ctv, DELTALLM_VULKAN_LIB, DELTALLM_VK_TUNE) reach the server's engine through
 * the real binary, and the checkpoint fingerprint keeps a state saved under one arithmetic or cache type from
 * being restored under another (on disk and as slot files). Once, serve copied only some of cli_engine's
 * settings into ServerConfig and dropped the rest without a word.
 *
 * The reference for `run` is the engine `run` builds: its own option parser (gen_options_parse) and opener
 * (gen_open_engine) over the same argv; the served completion's logprobs must be its greedy logprobs. The
 * servers run as processes (`$DELTALLM_BIN serve --port 0`, one thread, one slot) on the tiny models m7 and m1. */
#include "test.h"
#include "cli_proc.h"
#include "test_devices.h"
#include "test_http.h"

#include "cli/gen_options.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define M1 "models/m1-qwen3next-legacy-f32.gguf"
/* m7 (q8_0 weights): the fast arithmetic's integer products and the exact one's F32 differ there by ~0.7 in a
 * logprob, the q8_0 and f16 caches by ~0.02 (m1, all F32, only by 5e-5 and 2e-3) */
#define M7 "models/m7-qwen35-wide-q8_0.gguf"
static const char *model = M1; /* the test's model */
#define PROMPT "The quick brown fox jumps over the lazy dog and then"
#define N_GEN 6

typedef struct Serve {
    pid_t pid;
    int port;
    int out; /* the server's stdout (its "listening" line) */
    char err_path[512];
} Serve;

/* Starts `BIN serve -m MODEL --port 0 -t 1 -np 1 -c 1024 --no-webui ARGS` with `env` (shell assignments, may be "")
 * and waits for its "listening on" line; false (the log kept in err_path) when it exits or stays silent. */
static bool serve_start(Serve *s, const char *env, const char *args) {
    static int k;
    memset(s, 0, sizeof *s);
    snprintf(s->err_path, sizeof s->err_path, "%s/serve_engine%d.err", test_tmpdir(), k++);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "exec env %s '%s' serve -m '%s' --port 0 -t 1 -np 1 -c 1024 --no-webui %s 2>'%s'", env ? env : "",
             cli_bin(), test_data(model), args, s->err_path);
    int fd[2];
    if (pipe(fd)) return false;
    s->pid = fork();
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]), close(fd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    s->out = fd[0];
    char buf[4096];
    size_t n = 0;
    const time_t t0 = time(NULL);
    while (time(NULL) - t0 < 60 && n + 1 < sizeof buf) {
        struct pollfd p = {s->out, POLLIN, 0};
        if (poll(&p, 1, 1000) <= 0) continue;
        const ssize_t r = read(s->out, buf + n, sizeof buf - 1 - n);
        if (r <= 0) break;
        buf[n += (size_t)r] = 0;
        const char *l = strstr(buf, "listening on http://127.0.0.1:");
        if (l && strchr(l, '\n')) {
            s->port = atoi(l + strlen("listening on http://127.0.0.1:"));
            return s->port > 0;
        }
    }
    return false;
}

/* SIGTERM (the server finishes its checkpoint writes) and the exit status; -1 if it had to be killed. */
static int serve_stop(Serve *s) {
    if (s->pid <= 0) return -1;
    kill(s->pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 300; i++) {
        if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
            close(s->out);
            s->pid = 0;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        const struct timespec ms = {0, 50 * 1000000L};
        nanosleep(&ms, NULL);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &st, 0);
    close(s->out);
    s->pid = 0;
    return -1;
}

static char *serve_log(const Serve *s) {
    char *t = test_read_file(s->err_path, NULL);
    return t ? t : strdup("");
}

/* Whether `serve ARGS` (serve_start's) with env refuses to start: exits with status 1 and a log holding
 * `want`, on one line. A server that starts anyway is stopped (the check fails, the test goes on). */
static bool serve_refuses(const char *env, const char *args, const char *want) {
    Serve s;
    if (serve_start(&s, env, args)) {
        serve_stop(&s);
        return CHECK_MSG(false, "serve %s %s started", env, args);
    }
    int st = 0;
    if (s.pid > 0) waitpid(s.pid, &st, 0);
    close(s.out);
    char *log = serve_log(&s);
    const char *nl = strchr(log, '\n');
    const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(log, want) && nl && !nl[1];
    CHECK_MSG(ok, "serve %s %s: exit %d, '%s' (wanted one line with '%s')", env, args, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
              log, want);
    free(log);
    return ok;
}

static cJSON *get_json(int port, const char *method, const char *path, const char *body, int *status) {
    HttpResp r = http(port, method, path, NULL, body);
    cJSON *j = r.body ? cJSON_ParseWithLength(r.body, r.body_len) : NULL;
    if (status) *status = r.status;
    http_free(&r);
    return j;
}

static const cJSON *at(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    return b ? cJSON_GetObjectItemCaseSensitive(v, b) : v;
}

/* The server's greedy completion of PROMPT: N_GEN token logprobs into lp; the prompt tokens it reused from
 * a checkpoint into *cached (may be NULL). Returns how many logprobs came. */
static int served_logprobs(int port, double *lp, double *cached) {
    int st;
    cJSON *j = get_json(port, "POST", "/v1/completions",
                        "{\"prompt\": \"" PROMPT "\", \"max_tokens\": 6, \"temperature\": 0, \"logprobs\": 1, "
                        "\"ignore_eos\": true}", &st);
    const cJSON *c0 = cJSON_GetArrayItem(at(j, "choices", NULL), 0);
    const cJSON *tl = at(at(c0, "logprobs", NULL), "token_logprobs", NULL);
    int n = 0;
    for (const cJSON *t = tl ? tl->child : NULL; t && n < N_GEN; t = t->next) lp[n++] = t->valuedouble;
    const cJSON *ct = at(at(j, "usage", "prompt_tokens_details"), "cached_tokens", NULL);
    if (cached) *cached = cJSON_IsNumber(ct) ? ct->valuedouble : -1;
    CHECK_MSG(st == 200 && n == N_GEN, "completion: status %d, %d logprobs", st, n);
    cJSON_Delete(j);
    return n;
}

/* The greedy logprobs of PROMPT from the engine `run ENGINE_ARGS` opens (its parser, its opener). */
static int run_logprobs(const char *const *engine_args, int n_args, double *lp) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = "run";
    const char *base[] = {"-m", test_data(model), "-t", "1", "-c", "1024"};
    for (int i = 0; i < 6; i++) argv[argc++] = (char *)base[i];
    for (int i = 0; i < n_args; i++) argv[argc++] = (char *)engine_args[i];
    GenOptions o;
    gen_options_init(&o, 16);
    for (int i = 1; i < argc; i++) {
        const int r = gen_options_parse(&o, "run", argc, argv, &i);
        if (!CHECK_MSG(r == 1, "run does not take '%s'", argv[i])) return 0;
    }
    DlError err = {{0}};
    DlEngine *e = gen_open_engine(&o, &err);
    if (!CHECK_MSG(e, "run's engine: %s", err.msg)) return 0;
    DlSession *ss = dl_session_new(e, &err);
    int32_t *ids = NULL;
    size_t n = 0;
    int k = 0;
    if (ss && dl_tokenize(e, PROMPT, strlen(PROMPT), true, &ids, &n, &err) == 0 && dl_session_eval(ss, ids, n, &err) == 0) {
        const int V = dl_engine_info(e)->n_vocab;
        for (; k < N_GEN; k++) {
            const int32_t best = test_greedy_logprob(dl_session_logits(ss), V, &lp[k]);
            if (dl_session_eval(ss, &best, 1, &err)) break;
        }
    }
    CHECK_MSG(k == N_GEN, "run's engine: %s", err.msg);
    free(ids);
    dl_session_free(ss);
    dl_engine_close(e);
    return k;
}

static double max_diff(const double *a, const double *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]));
    return w;
}

static const char *props_engine(const cJSON *props, const char *key) {
    return cJSON_GetStringValue(at(at(props, "engine", NULL), key, NULL));
}

/* serve ARGS vs run RUN_ARGS: the same logprobs (the same engine, the same passes), and /props naming the
 * arithmetic and the cache types. */
static void serve_matches_run(const char *args, const char *const *run_args, int n_run, double *lp_srv,
                              const char *arith, const char *kv) {
    for (int i = 0; i < N_GEN; i++) lp_srv[i] = 0;
    Serve s;
    if (!serve_start(&s, "", args)) {
        char *log = serve_log(&s);
        CHECK_MSG(false, "serve %s did not start: %s", args, log);
        free(log);
        serve_stop(&s);
        return;
    }
    served_logprobs(s.port, lp_srv, NULL);
    int st;
    cJSON *p = get_json(s.port, "GET", "/props", NULL, &st);
    const char *a = props_engine(p, "arith"), *k = props_engine(p, "cache_type_k"), *v = props_engine(p, "cache_type_v");
    CHECK_MSG(st == 200 && a && !strcmp(a, arith) && k && !strcmp(k, kv) && v && !strcmp(v, kv),
              "serve %s: /props engine says %s %s/%s, not %s %s", args, a ? a : "-", k ? k : "-", v ? v : "-", arith, kv);
    cJSON_Delete(p);
    char *log = serve_log(&s);
    char want[96];
    snprintf(want, sizeof want, "arithmetic %s, K/V cache %s/%s", arith, kv, kv);
    CHECK_MSG(strstr(log, want), "serve %s: the log does not say '%s'", args, want);
    free(log);
    CHECK(serve_stop(&s) == 0);
    double lp_run[N_GEN];
    REQUIRE(run_logprobs(run_args, n_run, lp_run) == N_GEN);
    const double d = max_diff(lp_srv, lp_run, N_GEN);
    CHECK_MSG(d < 1e-5, "serve %s vs run: logprobs differ by %.3g (first %.6f vs %.6f)", args, d, lp_srv[0], lp_run[0]);
}

TEST(server, serve_takes_runs_arithmetic) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN is not set");
    model = M7;
    const char *exact[] = {"--exact"};
    double fast[N_GEN], ex[N_GEN], ex2[N_GEN];
    serve_matches_run("", NULL, 0, fast, "fast", "f16");
    serve_matches_run("--arith exact", exact, 1, ex, "exact", "f32");
    serve_matches_run("--exact", exact, 1, ex2, "exact", "f32");
    /* the arithmetics differ on m7, so a dropped --arith would fail the comparison above */
    const double d = max_diff(fast, ex, N_GEN);
    CHECK_MSG(d > 1e-2, "fast and exact logprobs agree within %.3g on m7: the test would not see a dropped --arith", d);
    CHECK_MSG(max_diff(ex, ex2, N_GEN) == 0, "--exact and --arith exact differ");
    test_note("serve = run in both arithmetics; fast vs exact differ by up to %.3g", d);
}

TEST(server, serve_takes_runs_cache_types) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN is not set");
    model = M7;
    const char *q8[] = {"-ctk", "q8_0", "-ctv", "q8_0"}, *f16[] = {"-ctk", "f16", "-ctv", "f16"};
    double lq[N_GEN], lf[N_GEN];
    serve_matches_run("-ctk q8_0 -ctv q8_0", q8, 4, lq, "fast", "q8_0");
    serve_matches_run("--cache-type-k f16 --cache-type-v f16", f16, 4, lf, "fast", "f16");
    const double d = max_diff(lq, lf, N_GEN);
    CHECK_MSG(d > 1e-3, "q8_0 and f16 caches give logprobs within %.3g on m7", d);
    test_note("serve = run with q8_0 and f16 caches; they differ by up to %.3g", d);
    /* what serve cannot honour is refused at start with one line (here: the engine's own check) */
    serve_refuses("", "--arith exact -ctk q8_0", "q8_0");
}

/* The device settings the CLI reads from the environment reach serve's engine as they reach run's. */
TEST(server, serve_takes_the_device_environment) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN is not set");
    model = M1;
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 1 -t 1 --device vulkan", test_data(model));
    const char *lib = "DELTALLM_VULKAN_LIB=/nonexistent/libvulkan-test.so";
    setenv("DELTALLM_VULKAN_LIB", "/nonexistent/libvulkan-test.so", 1);
    const int rc = cli_run(args, NULL, &out, &err);
    unsetenv("DELTALLM_VULKAN_LIB");
    const bool no_vulkan = err && strstr(err, "unknown backend");
    if (!no_vulkan) CHECK_MSG(rc == 1 && err && strstr(err, "libvulkan-test.so"), "run: exit %d, %s", rc, err ? err : "");
    free(out), free(err);
    if (no_vulkan) return test_skip("this build has no Vulkan backend");
    serve_refuses(lib, "--device vulkan", "libvulkan-test.so");
    const char *dv[TEST_MAX_DEVICES];
    if (test_devices(dv, NULL) == 0) return; /* the tuning is read where a device opens */
    snprintf(args, sizeof args, "--device %s", dv[0]);
    serve_refuses("DELTALLM_VK_TUNE=bogus=1", args, "bogus");
    test_note("DELTALLM_VULKAN_LIB and DELTALLM_VK_TUNE (on %s) reach serve's engine", dv[0]);
}
/* Checkpoints on disk made with an f16 cache are not used by a server with a q8_0 cache (nor a slot file
 * restored into it); the f16 server after it still finds its own. */
TEST(server, checkpoints_are_bound_to_the_cache_type) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN is not set");
    model = M1;
    char dir[512], slots[512], args[1400];
    snprintf(dir, sizeof dir, "%s/ckpt_kv", test_tmpdir());
    snprintf(slots, sizeof slots, "%s/slots_kv", test_tmpdir());
    mkdir(dir, 0700), mkdir(slots, 0700);
    const char *common = "--cache-chunk 8 -b 8 --state-dir '%s' --slot-save-path '%s' %s";
    double lp[N_GEN], cached = -1;
    int st;
    /* 1: f16 (the default) stores its checkpoints and a slot file */
    Serve s;
    snprintf(args, sizeof args, common, dir, slots, "");
    REQUIRE_MSG(serve_start(&s, "", args), "serve did not start");
    served_logprobs(s.port, lp, &cached);
    cJSON *j = get_json(s.port, "POST", "/slots/0?action=save", "{\"filename\": \"f16.slot\"}", &st);
    CHECK_MSG(st == 200, "slot save: %d", st);
    cJSON_Delete(j);
    CHECK(serve_stop(&s) == 0);
    /* 2: q8_0 on the same directory: every file is another setting's */
    snprintf(args, sizeof args, common, dir, slots, "-ctk q8_0 -ctv q8_0");
    REQUIRE_MSG(serve_start(&s, "", args), "serve -ctk q8_0 did not start");
    j = get_json(s.port, "GET", "/health", NULL, &st);
    const double disk = cJSON_GetNumberValue(at(at(j, "prefix_cache", NULL), "disk_entries", NULL));
    const double ignored = cJSON_GetNumberValue(at(at(j, "prefix_cache", NULL), "ignored_files", NULL));
    CHECK_MSG(disk == 0 && ignored >= 1, "q8_0 server: %g checkpoints taken from disk, %g ignored", disk, ignored);
    cJSON_Delete(j);
    served_logprobs(s.port, lp, &cached);
    CHECK_MSG(cached == 0, "q8_0 server reused %g prompt tokens of an f16 checkpoint", cached);
    HttpResp r = http(s.port, "POST", "/slots/0?action=restore", NULL, "{\"filename\": \"f16.slot\"}");
    CHECK_MSG(r.status >= 400 && r.status < 500 && r.body && strstr(r.body, "other settings"), "restoring an f16 slot file under q8_0: %d %s",
              r.status, r.body ? r.body : "");
    http_free(&r);
    CHECK(serve_stop(&s) == 0);
    /* 3: f16 again: its own checkpoints are there and used */
    snprintf(args, sizeof args, common, dir, slots, "");
    REQUIRE_MSG(serve_start(&s, "", args), "serve did not start again");
    served_logprobs(s.port, lp, &cached);
    CHECK_MSG(cached > 0, "the f16 server did not reuse its own checkpoints (cached %g)", cached);
    j = get_json(s.port, "POST", "/slots/0?action=restore", "{\"filename\": \"f16.slot\"}", &st);
    CHECK_MSG(st == 200, "restoring the f16 slot file under f16: %d", st);
    cJSON_Delete(j);
    CHECK(serve_stop(&s) == 0);
    test_note("q8_0 server: %g of the f16 server's files ignored; f16 again: %g prompt tokens from disk", ignored, cached);
}
