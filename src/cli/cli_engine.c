/* cli_engine.c — see cli_engine.h. */
#include "cli/cli_engine.h"

#include "cli/cli.h"
#include "kernels/cpu/isa.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char cli_engine_help[] =
    "  --backend cpu|ref  the CPU kernels (default) or the scalar reference of every op (DELTALLM_BACKEND)\n"
    "  --isa LEVEL        auto, ref, avx2 or avx512: the kernels' ISA level (DELTALLM_ISA)\n"
    "  --deltanet FORM    auto, recurrent or chunked: the delta-net scan (DELTALLM_DELTANET)\n"
    "  --no-pack          keep the file's weight layout (DELTALLM_PACK=0; same results, faster load)\n"
    "  --mpi              under mpirun: one range of layers per rank (rank 0 also embeddings, head, sampling)\n"
    "  --split F,F,...    with --mpi: each rank's share of the layers' weight bytes (default: balanced per token)\n"
    "  --mpi-timeout S    with --mpi: a rank silent this long fails the job (default 30; same machine: at once)\n";

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
    const char *timeout = NULL;
    const char **slot = !strcmp(a, "--backend") ? &o->backend : !strcmp(a, "--isa") ? &o->isa
                      : !strcmp(a, "--deltanet") ? &o->deltanet : !strcmp(a, "--split") ? &o->split
                      : !strcmp(a, "--mpi-timeout") ? &timeout : NULL; /* read by cli_mpi_start */
    if (slot) {
        if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        *slot = argv[++*i];
        return 1;
    }
    if (!strcmp(a, "--no-pack") || !strcmp(a, "--mpi")) {
        *(a[2] == 'n' ? &o->no_pack : &o->mpi) = true;
        return 1;
    }
    return 0;
}

void cli_engine_apply(const CliEngine *o, DlEngineParams *p) {
    p->backend = o->backend;
    p->isa = o->isa;
    p->deltanet = o->deltanet;
    p->no_pack = o->no_pack;
    p->mpi = o->mpi;
    p->split = o->split;
}

/* ---- MPI ------------------------------------------------------------------------------------------------ */

int cli_mpi_start(int argc, char **argv, int *rc) {
    bool mpi = false;
    double timeout = 30;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mpi")) mpi = true;
        if (!strcmp(argv[i], "--mpi-timeout") && i + 1 < argc && cli_parse_float(argv[1], argv[i], argv[i + 1], 1, 1e6, &timeout)) {
            *rc = 2;
            return 1;
        }
    }
    if (!mpi) return 0;
    DlError err = {{0}};
    const int rank = dl_mpi_init(&argc, &argv, timeout, &err);
    if (rank < 0) {
        fprintf(stderr, "deltallm: --mpi: %s\n", err.msg);
        *rc = 1;
        return 1;
    }
    if (rank == 0) return 0;
    *rc = dl_mpi_worker(&err);
    if (err.msg[0]) fprintf(stderr, "deltallm: rank %d: %s\n", rank, err.msg);
    return 1;
}

int cli_mpi_end(const char *cmd, int rc) {
    const char *f = dl_mpi_failure();
    if (f && rc == 0 && dl_mpi_rank() == 0) {
        fprintf(stderr, "deltallm %s: %s: every rank stops\n", cmd, f);
        rc = 1;
    }
    dl_mpi_finalize();
    return rc;
}

void cli_engine_report(DlEngine *e) {
    DlStageStats st[64];
    DlError err = {{0}};
    const int n = dl_engine_stage_stats(e, true, st, 64, &err);
    for (int i = 0; i < n; i++)
        fprintf(stderr, "rank %d (%s, pid %d): layers [%d, %d)%s, %.2f GiB of weights\n", st[i].rank, st[i].host, st[i].pid,
                st[i].l0, st[i].l1, st[i].rank == 0 ? " + embeddings, head, sampling" : "",
                (double)st[i].weight_bytes / (1u << 30));
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
