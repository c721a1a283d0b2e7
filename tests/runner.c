/* runner.c — the test runner: `tests [--list] [GROUP | GROUP/NAME ...]`. Runs the selected tests in
 * registration order (grouped), prints one line per test (OK, FAIL or SKIP) and a summary that lists the
 * skipped tests with their reasons and ends with `N passed, N failed, N skipped`; exits 1 if anything failed
 * (and, with DELTALLM_NO_SKIPS=1 — CI's clean machine, where everything must run — if anything was skipped). */
#include "test.h"
#include "base/clock.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct TestCase {
    const char *group, *name;
    TestFn fn;
} TestCase;

static TestCase *cases;
static int n_cases, cap_cases;
static int cur_failures;
static const TestCase *cur;
static char cur_skip[512]; /* the reason when the current test called test_skip, else "" */

void test_register(const char *group, const char *name, TestFn fn) {
    if (n_cases == cap_cases) {
        cap_cases = cap_cases ? cap_cases * 2 : 64;
        cases = realloc(cases, (size_t)cap_cases * sizeof *cases);
        if (!cases) abort();
    }
    cases[n_cases++] = (TestCase){group, name, fn};
}

bool test_check(bool ok, const char *file, int line, const char *expr, const char *fmt, ...) {
    if (ok) return true;
    cur_failures++;
    fprintf(stdout, "    FAIL %s:%d: %s", file, line, expr);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        fputs(" — ", stdout);
        vfprintf(stdout, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stdout);
    fflush(stdout);
    return false;
}

void test_note(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("    note: ", stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
}

void test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cur_skip, sizeof cur_skip, fmt, ap);
    va_end(ap);
    if (!cur_skip[0]) snprintf(cur_skip, sizeof cur_skip, "no reason given");
    printf("    SKIP: %s\n", cur_skip);
    fflush(stdout);
}

const char *test_data(const char *rel) {
    static char bufs[8][1024];
    static int k;
    const char *root = getenv("DELTALLM_TEST_DATA");
    char *b = bufs[k++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", root && *root ? root : "tests/data", rel);
    return b;
}

static char tmpdir[256];
static void rm_tmpdir(void) {
    if (tmpdir[0] && !getenv("DELTALLM_KEEP_TMP")) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    }
}
const char *test_tmpdir(void) {
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/deltallm-tests-XXXXXX");
        if (!mkdtemp(tmpdir)) abort();
        atexit(rm_tmpdir);
    }
    return tmpdir;
}

void *test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) {
        p[n] = '\0';
        if (size) *size = (size_t)n;
    }
    return p;
}

static bool selected(const TestCase *t, int argc, char **argv) {
    if (argc == 0) return true;
    for (int i = 0; i < argc; i++) {
        const char *slash = strchr(argv[i], '/');
        if (slash) {
            size_t gl = (size_t)(slash - argv[i]);
            if (strlen(t->group) == gl && strncmp(t->group, argv[i], gl) == 0 && strcmp(t->name, slash + 1) == 0)
                return true;
        } else if (strcmp(t->group, argv[i]) == 0) {
            return true;
        }
    }
    return false;
}

static int cmp_group(const void *a, const void *b) {
    const TestCase *x = a, *y = b;
    int c = strcmp(x->group, y->group);
    return c ? c : (x < y ? -1 : x > y);
}

int test_mpi_child(int argc, char **argv); /* test_mpi.c: the ranks of an MPI test run */

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--mpi-child") == 0) return test_mpi_child(argc, argv);
    qsort(cases, (size_t)n_cases, sizeof *cases, cmp_group); /* stable enough: ties keep address order */
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: tests [--list] [GROUP | GROUP/NAME ...]\n");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        const char *last = "";
        for (int i = 0; i < n_cases; i++) {
            if (strcmp(cases[i].group, last) != 0) printf("%s\n", cases[i].group);
            printf("  %s/%s\n", cases[i].group, cases[i].name);
            last = cases[i].group;
        }
        return 0;
    }
    struct stat st;
    if (stat(test_data("manifest.json"), &st) != 0) {
        fprintf(stderr, "tests: test data not found at %s (run from the repository root or set DELTALLM_TEST_DATA)\n",
                test_data(""));
        return 2;
    }
    int run = 0, failed = 0, skipped = 0;
    for (int a = 1; a < argc; a++) {
        bool any = false;
        for (int i = 0; i < n_cases; i++) any |= selected(&cases[i], 1, &argv[a]);
        if (!any) {
            fprintf(stderr, "tests: no test matches '%s' (see --list)\n", argv[a]);
            return 2;
        }
    }
    char **skips = calloc((size_t)n_cases + 1, sizeof *skips); /* "group/name: reason" of each skipped test */
    if (!skips) abort();
    double t_all = now_s();
    for (int i = 0; i < n_cases; i++) {
        if (!selected(&cases[i], argc - 1, argv + 1)) continue;
        cur = &cases[i];
        cur_failures = 0;
        cur_skip[0] = 0;
        printf("[ RUN  ] %s/%s\n", cur->group, cur->name);
        fflush(stdout);
        double t0 = now_s();
        cur->fn();
        double dt = now_s() - t0;
        const bool skip = !cur_failures && cur_skip[0];
        printf("[ %s ] %s/%s (%.2fs)\n", cur_failures ? "FAIL" : skip ? "SKIP" : " OK ", cur->group, cur->name, dt);
        fflush(stdout);
        run++;
        failed += cur_failures != 0;
        if (skip) {
            const size_t n = strlen(cur->group) + strlen(cur->name) + strlen(cur_skip) + 4;
            skips[skipped] = malloc(n);
            if (!skips[skipped]) abort();
            snprintf(skips[skipped++], n, "%s/%s: %s", cur->group, cur->name, cur_skip);
        }
    }
    printf("\n%d tests (%.1fs)\n", run, now_s() - t_all);
    for (int i = 0; i < skipped; i++) printf("skipped: %s\n", skips[i]), free(skips[i]);
    free(skips);
    const char *strict = getenv("DELTALLM_NO_SKIPS");
    const bool no_skips = strict && *strict && strcmp(strict, "0") != 0;
    if (no_skips && skipped)
        printf("DELTALLM_NO_SKIPS is set: every test must run here, and %d did not (their reasons above)\n", skipped);
    printf("%d passed, %d failed, %d skipped\n", run - failed - skipped, failed, skipped);
    return failed || (no_skips && skipped) ? 1 : 0;
}
