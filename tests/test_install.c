/* test_install.c — the library as other programs use it (group `install`): `make install` into a scratch
 * PREFIX (and a DESTDIR stage), the versioned soname, only the dl_* API exported, the pkg-config file, and
 * examples/simple.c built against the installed shared and static libraries, generating what `deltallm run`
 * generates. Runs from `make test` (which sets DELTALLM_BUILD and DELTALLM_CC). */
#include "test.h"

#include "cli_proc.h"
#include "deltallm.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MODEL "models/m3-qwen35-dense-bf16.gguf"
#define PROMPT "The quick brown fox"

/* Runs a shell command; its stdout (malloc'd) and exit status. */
static char *sh(const char *cmd, int *status) {
    char out[600], full[8192];
    static int k;
    snprintf(out, sizeof out, "%s/install-sh%d.out", test_tmpdir(), k++);
    snprintf(full, sizeof full, "(%s) > '%s' 2>&1", cmd, out);
    int st = system(full);
    if (status) *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *text = test_read_file(out, NULL);
    return text ? text : strdup("");
}

static bool exists(const char *dir, const char *rel, bool link) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    struct stat st;
    return lstat(p, &st) == 0 && (link ? S_ISLNK(st.st_mode) : S_ISREG(st.st_mode));
}

TEST(install, example_against_installed_library) {
    const char *build = getenv("DELTALLM_BUILD"), *cc = getenv("DELTALLM_CC");
    if (!build || !*build || !cli_bin())
        return test_skip("DELTALLM_BUILD not set (run through make test): the install test is skipped");
    if (!cc || !*cc) cc = "cc";
    int st;
    char cmd[4096], prefix[600], *out;
    snprintf(prefix, sizeof prefix, "%s/prefix", test_tmpdir());
    /* the test itself runs under make: a nested make must not use the parent's jobserver */
    const char *make = "env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS make -s --no-print-directory";
    snprintf(cmd, sizeof cmd, "%s install BUILD='%s' PREFIX='%s'", make, build, prefix);
    out = sh(cmd, &st);
    REQUIRE_MSG(st == 0, "make install: %s", out);
    free(out);
    const char *files[] = {"bin/deltallm", "lib/libdeltallm.a", "lib/libdeltallm.so." DELTALLM_VERSION,
                           "include/deltallm.h", "lib/pkgconfig/deltallm.pc"};
    for (int i = 0; i < 5; i++) CHECK_MSG(exists(prefix, files[i], false), "%s not installed", files[i]);
    CHECK(exists(prefix, "lib/libdeltallm.so", true) && exists(prefix, "lib/libdeltallm.so.0", true));

    snprintf(cmd, sizeof cmd, "readelf -d '%s/lib/libdeltallm.so' | grep SONAME", prefix);
    out = sh(cmd, &st);
    CHECK_MSG(strstr(out, "[libdeltallm.so.0]"), "soname: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "nm -D --defined-only '%s/lib/libdeltallm.so' | awk '{print $3}'", prefix);
    out = sh(cmd, &st);
    int n_api = 0, n_other = 0;
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n")) {
        if (!strncmp(l, "dl_", 3)) n_api++;
        else if (strcmp(l, "DELTALLM_0") != 0) n_other++, test_note("exported besides the API: %s", l);
    }
    CHECK_MSG(n_api >= 30 && n_other == 0, "%d dl_* symbols, %d others exported", n_api, n_other);
    free(out);

    char pc[800];
    snprintf(pc, sizeof pc, "PKG_CONFIG_PATH='%s/lib/pkgconfig' pkg-config", prefix);
    snprintf(cmd, sizeof cmd, "%s --modversion deltallm", pc);
    out = sh(cmd, &st);
    CHECK_MSG(st == 0 && !strncmp(out, DELTALLM_VERSION "\n", strlen(DELTALLM_VERSION) + 1), "pkg-config: %s", out);
    free(out);

    /* the example, against the shared library (found through pkg-config) and the static one */
    char want_args[1200], *want = NULL;
    snprintf(want_args, sizeof want_args, "run -m '%s' -p '" PROMPT "' -n 12 --temp 0 -t 1", test_data(MODEL));
    REQUIRE(cli_run(want_args, NULL, &want, NULL) == 0 && want);
    const char *kinds[2] = {"shared", "static"};
    for (int k = 0; k < 2; k++) {
        char exe[700];
        snprintf(exe, sizeof exe, "%s/simple-%s", test_tmpdir(), kinds[k]);
        if (k == 0)
            snprintf(cmd, sizeof cmd, "%s examples/simple.c $(%s --cflags --libs deltallm) -Wl,-rpath,'%s/lib' -o '%s'", cc,
                     pc, prefix, exe);
        else
            snprintf(cmd, sizeof cmd, "%s examples/simple.c $(%s --cflags deltallm) '%s/lib/libdeltallm.a' "
                     "$(%s --static --libs-only-other --libs-only-l deltallm | sed 's/-ldeltallm//') -o '%s'", cc, pc,
                     prefix, pc, exe);
        out = sh(cmd, &st);
        CHECK_MSG(st == 0, "building examples/simple.c (%s): %s", kinds[k], out);
        free(out);
        if (st) continue;
        snprintf(cmd, sizeof cmd, "ldd '%s' | grep -c libdeltallm", exe);
        out = sh(cmd, &st);
        CHECK_MSG(atoi(out) == (k == 0), "%s build: libdeltallm in ldd %s", kinds[k], out);
        free(out);
        snprintf(cmd, sizeof cmd, "'%s' '%s' '" PROMPT "' 12 2>/dev/null", exe, test_data(MODEL));
        out = sh(cmd, &st);
        CHECK_MSG(st == 0 && !strcmp(out, want), "examples/simple (%s) printed\n%s\nwhere deltallm run printed\n%s",
                  kinds[k], out, want);
        free(out);
    }
    free(want);

    /* DESTDIR stages under another root; the pkg-config file still names the real prefix */
    char stage[600];
    snprintf(stage, sizeof stage, "%s/stage", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s install BUILD='%s' PREFIX=/usr DESTDIR='%s' && grep '^prefix=' '%s/usr/lib/pkgconfig/deltallm.pc'",
             make, build, stage, stage);
    out = sh(cmd, &st);
    CHECK_MSG(st == 0 && !strcmp(out, "prefix=/usr\n") && exists(stage, "usr/lib/libdeltallm.so." DELTALLM_VERSION, false),
              "DESTDIR: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "%s uninstall BUILD='%s' PREFIX='%s' && find '%s' ! -type d", make, build, prefix, prefix);
    out = sh(cmd, &st);
    CHECK_MSG(st == 0 && !*out, "make uninstall left: %s", out);
    free(out);
}
