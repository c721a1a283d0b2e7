/* test.h — the test framework: named groups, self-registering test functions, soft checks.
 *
 *   TEST(gguf, rejects_bad_magic) { ... CHECK(x == 1); CHECK_MSG(ok, "case %d", i); ... }
 *
 * Every test belongs to a group; `build/tests --list` lists them, `build/tests gguf tokenizer/vectors`
 * runs a selection. A failed CHECK records the failure and continues; REQUIRE returns from the test.
 * A test that cannot run here (no device, no Node, no MPI, no Chromium) calls test_skip with the reason and
 * returns: it is counted as skipped, never as passed (the summary's last line: N passed, N failed, N skipped). */
#ifndef DL_TESTS_TEST_H
#define DL_TESTS_TEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef void (*TestFn)(void);
void test_register(const char *group, const char *name, TestFn fn);
bool test_check(bool ok, const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Path of a file under tests/data (or $DELTALLM_TEST_DATA); returns a static buffer rotated 8 ways. */
const char *test_data(const char *rel);
/* A fresh scratch directory for this test run (removed at exit unless DELTALLM_KEEP_TMP is set). */
const char *test_tmpdir(void);
/* Reads a whole file; NULL if it cannot. Caller frees. */
void *test_read_file(const char *path, size_t *size);
/* Prints an informational line under the current test (numbers worth seeing in the log). */
void test_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Marks the current test as skipped with a one-line reason (printed as SKIP; a failure recorded before or
 * after still makes it FAIL). The caller returns: `if (!have) return test_skip("no Vulkan device (%s)", why);` */
void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TEST(group, name)                                                                                  \
    static void test_##group##_##name(void);                                                               \
    __attribute__((constructor)) static void register_##group##_##name(void) {                             \
        test_register(#group, #name, test_##group##_##name);                                               \
    }                                                                                                      \
    static void test_##group##_##name(void)

#define CHECK(x) test_check((x), __FILE__, __LINE__, #x, NULL)
#define CHECK_MSG(x, ...) test_check((x), __FILE__, __LINE__, #x, __VA_ARGS__)
#define REQUIRE(x)                                                                                         \
    do {                                                                                                   \
        if (!test_check((x), __FILE__, __LINE__, #x, NULL)) return;                                        \
    } while (0)
#define REQUIRE_MSG(x, ...)                                                                                \
    do {                                                                                                   \
        if (!test_check((x), __FILE__, __LINE__, #x, __VA_ARGS__)) return;                                 \
    } while (0)

#endif
