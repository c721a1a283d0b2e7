/* cmd_parity.c — `deltallm parity -m MODEL.gguf --ref DUMP_DIR`: one line per stage of the forward pass
 * with the largest error against llama.cpp's dump and a YES/NO verdict (cli/parity.h). */
#include "cli/cli.h"
#include "cli/cli_engine.h"
#include "cli/parity.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

int cmd_parity(int argc, char **argv) {
    const char *model = NULL, *ref = NULL;
    double tol = 1e-5;
    long long threads = 0;
    CliEngine eo;
    cli_engine_init(&eo);
    for (int i = 1; i < argc; i++) {
        const int er = cli_engine_arg("parity", argc, argv, &i, &eo);
        if (er == 2) return 2;
        if (er == 1) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm parity -m MODEL.gguf --ref DUMP_DIR [--exact] [--tol 1e-5] [-t THREADS]\n"
                   "  DUMP_DIR: a dump folder written by llref --dump-dir (index.json lists tokens and mode)\n"
                   "  a stage matches when max|delta|/std(reference) <= tol (routing: identical experts)\n"
                   "  the arithmetic is llama.cpp's (--arith llama) unless --arith or --exact says otherwise\n%s",
                   cli_engine_help);
            return 0;
        } else if (!strcmp(a, "-m") && v) {
            model = argv[++i];
        } else if (!strcmp(a, "--ref") && v) {
            ref = argv[++i];
        } else if (!strcmp(a, "--tol") && v) {
            if (cli_parse_float("parity", a, argv[++i], 0, 1e9, &tol)) return 2;
        } else if (!strcmp(a, "-t") && v) {
            if (cli_parse_int("parity", a, argv[++i], 1, 1024, &threads)) return 2;
        } else {
            return cli_usage_error("parity", "unknown or incomplete option '%s'", a);
        }
    }
    if (!model || !ref) return cli_usage_error("parity", "needs -m MODEL.gguf and --ref DUMP_DIR");
    if (!eo.arith) eo.arith = "llama"; /* a comparison with llama.cpp: its arithmetic unless told otherwise */
    ParityRow rows[PARITY_MAX_ROWS];
    Err err = {{0}};
    ForwardOptions fo = {0};
    int n = cli_engine_forward(&eo, (int)threads, &fo, &err) ? -1 : parity_run(model, ref, &fo, tol, rows, &err);
    if (n < 0) {
        fprintf(stderr, "deltallm parity: %s\n", err.msg);
        return 1;
    }
    printf("%-26s %-40s %5s %11s %11s  %s\n", "stage", "llama.cpp tensor", "count", "max|d|", "max|d|/std", "match");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const ParityRow *r = &rows[i];
        char extra[32] = "";
        if (r->mismatches) snprintf(extra, sizeof extra, " (%d rows differ)", r->mismatches);
        printf("%-26s %-40s %5d %11.3e %11.3e  %s%s\n", r->stage, r->tensors, r->n_tensors, r->max_abs, r->max_rel,
               r->ok ? "YES" : "NO", extra);
        bad += !r->ok;
    }
    printf("%d of %d stages match (tolerance %.1e, %s arithmetic)\n", n - bad, n, tol, arith_name(fo.backend.mode));
    return bad ? 1 : 0;
}
