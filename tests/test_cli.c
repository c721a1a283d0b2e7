/* test_cli.c — the deltallm binary's options and failure behaviour (run, bench, serve, --version), and the
 * load progress: the engine's callback (read, pack, prefetch) and the terminal bar drawn from it. */
#include "test.h"

#include "cli/progress.h"
#include "cli_proc.h"
#include "deltallm.h"

#include <stdlib.h>
#include <string.h>

#define MODEL "models/m3-qwen35-dense-bf16.gguf"
#define MODEL_Q8 "models/m7-qwen35-wide-q8_0.gguf"

static bool empty(const char *s) { return !s || !*s; }

TEST(cli, errors_print_nothing_on_stdout) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    char args[2048], *out = NULL, *err = NULL;
    char path[600];
    snprintf(path, sizeof path, "%s/four-bytes.txt", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("abc\n", f);
    fclose(f);
    struct {
        const char *what, *args, *stderr_has;
        int rc;
    } cases[] = {
        {"a 4-byte text file", "run -m '%s' -p hello", "not a GGUF file", 1},
        {"a missing model", "run -m /nonexistent/model.gguf -p hello", "cannot open", 1},
        {"a prompt longer than the context", "run -m '" "%s" "' -c 16 -p 'one two three four five six seven eight nine "
                                              "ten eleven twelve thirteen fourteen fifteen sixteen seventeen'",
         "context", 1},
        {"--no-think without --chat", "run -m '%s' -p hello --no-think", "--no-think needs --chat", 2},
        {"-sys without --chat", "run -m '%s' -p hello -sys 'be brief'", "needs --chat", 2},
        {"bench of a missing model", "bench -m /nonexistent/model.gguf -p 8 -n 0", "cannot open", 1},
        {"an unreadable -f", "run -m '%s' -f /nonexistent/prompt.txt", "cannot read", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *model = i == 0 ? path : test_data(MODEL);
        snprintf(args, sizeof args, cases[i].args, model);
        int rc = cli_run(args, NULL, &out, &err);
        /* the error: the last line of stderr (the model line may come before it) */
        const char *last = err ? err + strlen(err) : NULL;
        if (last && last > err && last[-1] == '\n') last--;
        while (last && last > err && last[-1] != '\n') last--;
        CHECK_MSG(rc == cases[i].rc && empty(out) && last && strstr(last, cases[i].stderr_has) && strstr(last, "deltallm "),
                  "%s: exit %d (want %d), stdout '%s', stderr '%s' (want an error line with '%s')", cases[i].what, rc,
                  cases[i].rc, out ? out : "", err ? err : "", cases[i].stderr_has);
        free(out);
        free(err);
    }
}

TEST(cli, version_and_help) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    char *out = NULL;
    CHECK(cli_run("--version", NULL, &out, NULL) == 0 && out && !strncmp(out, "deltallm " DELTALLM_VERSION " (", 16));
    free(out);
    CHECK(!strcmp(dl_version(), DELTALLM_VERSION));
    const char *cmds[] = {"run --help", "chat --help", "serve --help"};
    for (int i = 0; i < 3; i++) {
        CHECK_MSG(cli_run(cmds[i], NULL, &out, NULL) == 0 && out && strstr(out, "--ctx-size") && strstr(out, "--mlock") &&
                      strstr(out, "--no-mmap") && (i == 2 || (strstr(out, "--system-prompt") && strstr(out, "-sys"))),
                  "%s lacks an option:\n%s", cmds[i], out ? out : "");
        free(out);
    }
    CHECK(cli_run("--help", NULL, &out, NULL) == 0 && out && strstr(out, "chat ") && strstr(out, "--version"));
    free(out);
}

/* Output of `run` with extra options (stdout only), or NULL when it fails. */
static char *run_out(const char *extra, const char *stdin_text, char **err) {
    char args[2048], *out = NULL;
    snprintf(args, sizeof args, "run -m '%s' -n 24 -t 1 %s", test_data(MODEL), extra);
    int rc = cli_run(args, stdin_text, &out, err);
    if (rc != 0) {
        test_check(false, __FILE__, __LINE__, "run", "run %s: exit %d: %s", extra, rc, err && *err ? *err : "");
        free(out);
        return NULL;
    }
    return out;
}

static bool same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

TEST(cli, run_seed_stdin_mmap_options) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    /* a random seed by default, printed with -v; a given seed repeats */
    char *e1 = NULL, *e2 = NULL, *a = run_out("-p hello -v --temp 1", NULL, &e1), *b = run_out("-p hello -v --temp 1", NULL, &e2);
    const char *s1 = e1 ? strstr(e1, "seed: ") : NULL, *s2 = e2 ? strstr(e2, "seed: ") : NULL;
    CHECK_MSG(s1 && s2 && strtoull(s1 + 6, NULL, 10) != strtoull(s2 + 6, NULL, 10), "-v: %s / %s", e1 ? e1 : "", e2 ? e2 : "");
    char again[64];
    snprintf(again, sizeof again, "-p hello --temp 1 --seed %llu", s1 ? strtoull(s1 + 6, NULL, 10) : 0ull);
    char *c = run_out(again, NULL, NULL);
    CHECK_MSG(same(a, c), "the printed seed does not reproduce the run:\n%s\n%s", a ? a : "", c ? c : "");
    char *err = NULL, *q = run_out("-p hello --temp 1", NULL, &err);
    CHECK_MSG(err && !strstr(err, "seed:"), "the seed is printed only with -v");
    free(a), free(b), free(c), free(q), free(e1), free(e2), free(err);
    /* -f - reads standard input; --no-mmap and --mlock give the same text */
    char *ref = run_out("-p 'The quick brown fox' --temp 0", NULL, NULL);
    char *in = run_out("-f - --temp 0", "The quick brown fox", NULL);
    char *nm = run_out("-p 'The quick brown fox' --temp 0 --no-mmap", NULL, NULL);
    CHECK_MSG(same(ref, in), "-f -: %s vs %s", in ? in : "", ref ? ref : "");
    CHECK_MSG(same(ref, nm), "--no-mmap: %s vs %s", nm ? nm : "", ref ? ref : "");
    char args[1024], *ml = NULL, *mle = NULL;
    snprintf(args, sizeof args, "run -m '%s' -n 24 -t 1 -p 'The quick brown fox' --temp 0 --mlock", test_data(MODEL));
    int rc = cli_run(args, NULL, &ml, &mle);
    if (rc == 0) CHECK_MSG(same(ref, ml), "--mlock: %s vs %s", ml ? ml : "", ref ? ref : "");
    else CHECK_MSG(mle && strstr(mle, "cannot lock") && empty(ml), "--mlock failed without saying why: %s", mle ? mle : "");
    if (rc != 0) test_note("--mlock refused here: %s", mle);
    /* the chat options */
    char *sys = run_out("-p hello --chat -sys 'be brief' --no-think --temp 0", NULL, NULL);
    CHECK(sys != NULL);
    free(ref), free(in), free(nm), free(ml), free(mle), free(sys);
}

/* run with drafts: the trained model's MTP block, and a draft model (m3 has no MTP block: m5 drafts for it),
 * greedy, give plain decoding's text; -v reports the drafts; bad draft options are one-line usage errors. */
TEST(cli, run_speculative) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    char args[1024], *plain = NULL, *spec = NULL, *err = NULL;
    const char *tiny = "assets/tinybible-f16.gguf", *prompt = "-p 'And God said' --temp 0 -n 40 -t 1";
    snprintf(args, sizeof args, "run -m %s %s", tiny, prompt);
    CHECK(cli_run(args, NULL, &plain, NULL) == 0);
    snprintf(args, sizeof args, "run -m %s %s --draft-max 3 --draft-p-min 0 -v", tiny, prompt);
    CHECK(cli_run(args, NULL, &spec, &err) == 0);
    CHECK_MSG(same(plain, spec), "--draft-max 3: '%s' vs plain '%s'", spec ? spec : "", plain ? plain : "");
    CHECK_MSG(err && strstr(err, "drafts: ") && strstr(err, "accepted"), "-v: %s", err ? err : "");
    free(plain), free(spec), free(err);
    char *a = run_out("-p hello --temp 0", NULL, NULL), *b = NULL;
    snprintf(args, sizeof args, "-p hello --temp 0 -md '%s' --draft-max 2 --draft-p-min 0", test_data("models/m5-qwen35-7layer-int3-f16.gguf"));
    b = run_out(args, NULL, NULL);
    CHECK_MSG(same(a, b), "--model-draft: '%s' vs plain '%s'", b ? b : "", a ? a : "");
    free(a), free(b);
    static const char *const bad[] = {"--draft-max 17", "--draft-max -1", "--draft-p-min 2", "--draft-vocab x",
                                      "--draft-max", "--draft-max 2 --draft-min 3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *o = NULL, *e = NULL;
        snprintf(args, sizeof args, "run -m '%s' -p hi -n 4 -t 1 %s", test_data(MODEL), bad[i]);
        const int rc = cli_run(args, NULL, &o, &e);
        const char *nl = e ? strchr(e, '\n') : NULL;
        CHECK_MSG(rc != 0 && empty(o) && e && nl && !nl[1], "%s: rc %d, stderr '%s'", bad[i], rc, e ? e : "");
        free(o), free(e);
    }
    /* no drafter: m3 has no MTP block and no draft model was given */
    char *o = NULL, *e = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 4 -t 1 --draft-max 2", test_data(MODEL));
    CHECK(cli_run(args, NULL, &o, &e) == 1 && e && strstr(e, "no drafter"));
    free(o), free(e);
}

/* -ctk / -ctv: K and V each in its own type. q8_0 / q4_0 run (the trained model, greedy) and print text; a bad
 * name is a one-line usage error (exit 2) that lists the names; a quantized cache in the llama arithmetic fails
 * with one line (exit 1). */
TEST(cli, kv_cache_types) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    char args[1024], *o = NULL, *e = NULL;
    const char *tiny = "assets/tinybible-f16.gguf";
    snprintf(args, sizeof args, "run -m %s -p 'And God said' --temp 0 -n 24 -t 1 -ctk q8_0 -ctv q4_0", tiny);
    CHECK_MSG(cli_run(args, NULL, &o, &e) == 0 && o && strlen(o) > 20, "-ctk q8_0 -ctv q4_0: stdout '%s', stderr '%s'",
              o ? o : "", e ? e : "");
    free(o), free(e);
    static const struct {
        const char *opts, *msg;
        int rc;
    } bad[] = {{"-ctk bogus", "deltallm run: -ctk: unknown KV cache type 'bogus' (f32, f16, q8_0 or q4_0)\n", 2},
               {"-ctv q5_9", "deltallm run: -ctv: unknown KV cache type 'q5_9' (f32, f16, q8_0 or q4_0)\n", 2},
               {"--arith llama -ctk q8_0", "a q8_0 KV cache needs the fast arithmetic (the llama arithmetic keeps f32 or f16)\n", 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o = e = NULL;
        snprintf(args, sizeof args, "run -m %s -p hi -n 4 -t 1 %s", tiny, bad[i].opts);
        const int rc = cli_run(args, NULL, &o, &e);
        const char *last = e ? e + strlen(e) : NULL; /* the last line (the model line may come before it) */
        if (last && last > e && last[-1] == '\n') last--;
        while (last && last > e && last[-1] != '\n') last--;
        const bool one = rc == 2 ? e && !strcmp(e, bad[i].msg) : last && strstr(last, bad[i].msg) && strstr(last, "deltallm ");
        CHECK_MSG(rc == bad[i].rc && empty(o) && one, "%s: exit %d (want %d), stderr '%s'", bad[i].opts, rc, bad[i].rc, e ? e : "");
        free(o), free(e);
    }
}

/* bench --slots takes a list (a decode row per count of sessions) and, with -d, starts every session from the
 * depth's context; a bad list is one line */
TEST(cli, bench_slots_list_at_depth) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set: skipped");
    char args[1024], *o = NULL, *e = NULL;
    snprintf(args, sizeof args, "bench -m assets/tinybible-f16.gguf -p 0 -n 3 -d 5 --slots 1,3 -r 1 -t 1 --no-prefetch");
    CHECK_MSG(cli_run(args, NULL, &o, &e) == 0 && o && strstr(o, "| tg3 x1 @ d5 |") && strstr(o, "| tg3 x3 @ d5 |"),
              "stdout '%s', stderr '%s'", o ? o : "", e ? e : "");
    free(o), free(e);
    o = e = NULL;
    snprintf(args, sizeof args, "bench -m assets/tinybible-f16.gguf -p 0 -n 3 --slots 2,0 --no-prefetch");
    CHECK_MSG(cli_run(args, NULL, &o, &e) == 2 && empty(o) && e && strstr(e, "bad --slots list '2,0'"), "stderr '%s'", e ? e : "");
    free(o), free(e);
}

/* ------------------------------------------------------------------------------------------ progress */

typedef struct Seen {
    char phases[8][16];
    int n_phases;
    uint64_t last_done[8], total[8];
    bool monotone;
    int calls;
} Seen;

static void record(void *user, const char *phase, uint64_t done, uint64_t total) {
    Seen *s = user;
    s->calls++;
    if (!s->n_phases || strcmp(s->phases[s->n_phases - 1], phase) != 0) {
        if (s->n_phases == 8) return;
        snprintf(s->phases[s->n_phases++], 16, "%s", phase);
        s->last_done[s->n_phases - 1] = 0;
    }
    int k = s->n_phases - 1;
    if (done < s->last_done[k] || done > total || (s->total[k] && s->total[k] != total)) s->monotone = false;
    s->last_done[k] = done;
    s->total[k] = total;
}

TEST(cli, load_progress_callback) {
    /* --no-mmap reads the file (read), the Q8_0 matrices are packed (pack), dl_engine_prefetch (prefetch) */
    Seen s = {.monotone = true};
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = test_data(MODEL_Q8);
    p.no_mmap = true;
    p.progress = record;
    p.progress_user = &s;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    /* the default (fast) arithmetic packs P16 panels for its AVX-512 kernels only (backend_cpu.c) */
    const bool packs = strcmp(dl_engine_info(e)->ops, "avx512") == 0;
    CHECK_MSG(dl_engine_prefetch(e, false, &err) == 0, "%s", err.msg);
    const char *want[] = {"read", "pack", "prefetch"};
    int w = 0;
    for (int i = 0; i < 3; i++) {
        if (i == 1 && !packs) continue;
        CHECK_MSG(w < s.n_phases && !strcmp(s.phases[w], want[i]), "phase %d: %s, want %s", w,
                  w < s.n_phases ? s.phases[w] : "(none)", want[i]);
        CHECK_MSG(w < s.n_phases && s.last_done[w] == s.total[w] && s.total[w] > 0, "%s ended at %llu of %llu", want[i],
                  (unsigned long long)s.last_done[w], (unsigned long long)s.total[w]);
        w++;
    }
    CHECK_MSG(s.n_phases == w, "%d phases reported, want %d", s.n_phases, w);
    CHECK(s.monotone);
    CHECK_MSG(s.total[0] == dl_engine_info(e)->file_bytes, "read %llu of a %llu-byte file", (unsigned long long)s.total[0],
              (unsigned long long)dl_engine_info(e)->file_bytes);
    dl_engine_close(e);
    /* mapped, nothing to read: only pack */
    Seen m = {.monotone = true};
    p.no_mmap = false;
    p.progress_user = &m;
    e = dl_engine_open(&p, &err);
    REQUIRE_MSG(e, "%s", err.msg);
    CHECK(m.n_phases == (packs ? 1 : 0) && (!packs || !strcmp(m.phases[0], "pack")));
    dl_engine_close(e);
}

TEST(cli, load_progress_bar) {
    char line[256];
    load_progress_line(line, sizeof line, "read", 3ull << 30, 12ull << 30, 2.0, 100);
    CHECK_MSG(strstr(line, "loading: read") && strstr(line, "3.0 / 12.0 GiB") && strstr(line, " 25%") &&
                  strstr(line, "1.5 GiB/s") && strstr(line, "6 s left") && strstr(line, "[#####") && strlen(line) <= 100,
              "'%s'", line);
    load_progress_line(line, sizeof line, "pack", 5ull << 20, 10ull << 20, 0.5, 40);
    CHECK_MSG(strstr(line, "5.0 / 10.0 MiB") && strstr(line, "10.0 MiB/s") && !strchr(line, '[') && strlen(line) <= 60,
              "narrow terminal: '%s'", line);
    /* drawn on a terminal once a phase has taken min_s, erased at the end; silent elsewhere */
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    REQUIRE(f);
    LoadProgress p;
    load_progress_init(&p, f);
    CHECK_MSG(!p.enabled, "a memory stream is not a terminal");
    load_progress_cb(&p, "read", 1, 2);
    load_progress_end(&p);
    fflush(f);
    CHECK(n == 0);
    p.enabled = true;
    p.min_s = 0;
    load_progress_cb(&p, "read", 1 << 20, 2 << 20);
    fflush(f);
    CHECK_MSG(buf && !strncmp(buf, "\rloading: read", 14) && strstr(buf, " 50%") && strstr(buf, "\033[K"), "'%s'",
              buf ? buf : "");
    load_progress_cb(&p, "read", 2 << 20, 2 << 20); /* the end of a phase erases its line */
    fflush(f);
    CHECK_MSG(n >= 4 && !strcmp(buf + n - 4, "\r\033[K") && !p.shown, "'%s'", buf ? buf : "");
    load_progress_end(&p);
    fclose(f);
    free(buf);
    f = open_memstream(&buf, &n);
    load_progress_init(&p, f);
    p.enabled = true; /* min_s 0.5: a fast phase draws nothing */
    load_progress_cb(&p, "pack", 1, 2);
    load_progress_cb(&p, "pack", 2, 2);
    load_progress_end(&p);
    fclose(f);
    CHECK_MSG(n == 0, "a phase shorter than min_s was drawn: '%s'", buf);
    free(buf);
}

/* run --grammar / --grammar-file: the generated text is in the grammar's language and the run stops when it is
 * complete; a bad grammar is a one-line error. */
TEST(cli, run_grammar) {
    if (!cli_bin()) return test_skip("DELTALLM_BIN not set");
    char *err = NULL, *out = run_out("-p 'Q:' --temp 1 --seed 5 --grammar 'root ::= (\"yes\" | \"no\") \"!\"'", NULL, &err);
    const size_t n = out ? strlen(out) : 0;
    CHECK_MSG(out && err && strstr(err, "grammar complete") && n >= 6 &&
                  (!strcmp(out + n - 5, "yes!\n") || !strcmp(out + n - 4, "no!\n")),
              "out '%s' err '%s'", out ? out : "", err ? err : "");
    free(out), free(err);
    char args[1024];
    snprintf(args, sizeof args, "-p 'Play:' --seed 2 --grammar-file '%s'", test_data("gbnf/chess.gbnf"));
    out = run_out(args, NULL, NULL);
    CHECK_MSG(out && strstr(out, "Play:1. "), "chess: '%s'", out ? out : "");
    free(out);
    char *o2 = NULL, *e2 = NULL;
    snprintf(args, sizeof args, "run -m '%s' -n 4 -p x --grammar 'root ::= nope'", test_data(MODEL));
    const int rc = cli_run(args, NULL, &o2, &e2);
    CHECK_MSG(rc == 1 && e2 && strstr(e2, "undefined rule: nope") && o2 && !*o2, "rc %d err '%s'", rc, e2 ? e2 : "");
    free(o2), free(e2);
}
