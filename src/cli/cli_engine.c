/* cli_engine.c — see cli_engine.h. */
#include "cli/cli_engine.h"

#include "cli/cli.h"
#include "kernels/cpu/isa.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

const char cli_engine_help[] =
    "  --backend cpu|ref  the CPU kernels (default) or the scalar reference of every op (DELTALLM_BACKEND)\n"
    "  --isa LEVEL        auto, ref, avx2 or avx512: the kernels' ISA level (DELTALLM_ISA)\n"
    "  --deltanet FORM    auto, recurrent or chunked: the delta-net scan (DELTALLM_DELTANET)\n"
    "  --no-pack          keep the file's weight layout (DELTALLM_PACK=0; same results, faster load)\n";

void cli_engine_init(CliEngine *o) {
    memset(o, 0, sizeof *o);
    o->backend = getenv("DELTALLM_BACKEND");
    o->isa = getenv("DELTALLM_ISA");
    o->deltanet = getenv("DELTALLM_DELTANET");
    const char *pk = getenv("DELTALLM_PACK");
    o->no_pack = pk && strcmp(pk, "0") == 0;
}

int cli_engine_arg(const char *cmd, int argc, char **argv, int *i, CliEngine *o) {
    const char *a = argv[*i];
    const char **slot = !strcmp(a, "--backend") ? &o->backend : !strcmp(a, "--isa") ? &o->isa
                      : !strcmp(a, "--deltanet") ? &o->deltanet : NULL;
    if (slot) {
        if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        *slot = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--no-pack")) {
        o->no_pack = true;
        return 1;
    }
    return 0;
}

void cli_engine_apply(const CliEngine *o, DlEngineParams *p) {
    p->backend = o->backend;
    p->isa = o->isa;
    p->deltanet = o->deltanet;
    p->no_pack = o->no_pack;
}

int cli_engine_forward(const CliEngine *o, bool exact, int n_threads, ForwardOptions *fo, Err *err) {
    Isa isa;
    if (isa_parse(o->isa, &isa, err) || deltanet_algo_parse(o->deltanet, &fo->algo, err)) return -1;
    fo->be = NULL;
    fo->backend = (BackendOptions){.name = o->backend,
                                   .isa = (int)isa,
                                   .n_threads = n_threads,
                                   .mode = exact ? MATMUL_EXACT : MATMUL_GGML,
                                   .pack = !o->no_pack};
    return 0;
}
