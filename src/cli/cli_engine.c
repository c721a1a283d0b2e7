/* cli_engine.c — see cli_engine.h. */
#include "cli/cli_engine.h"

#include "cli/cli.h"
#include "backend/backend.h"
#include "kernels/cpu/isa.h"
#include "model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char cli_engine_help[] =
    "  --arith A                fast (default), llama (llama.cpp's summation orders: its logits bit for bit) or exact\n"
    "                           (F32 activations on dequantized weights; also --exact) (DELTALLM_ARITH)\n"
    "  -ctk T, -ctv T           the K and the V cache's type: f32, f16, q8_0 or q4_0 (each on its own; default f16 in\n"
    "                           the fast arithmetic, f32 in the llama and exact ones and on a GPU; q8_0 and q4_0: the\n"
    "                           fast arithmetic on the CPU)\n"
    "  --device D               cpu (default) or a device (deltallm devices lists them: vulkan[:N]): where the model\n"
    "                           runs (DELTALLM_DEVICE)\n"
    "  -ngl N                   the first N layers on the --device (the first device when none is given), the rest on\n"
    "                           the CPU\n"
    "  --backend cpu|ref        the CPU kernels (default) or the scalar reference of every op (DELTALLM_BACKEND)\n"
    "  --isa LEVEL              auto, ref, avx2 or avx512: the kernels' ISA level (DELTALLM_ISA)\n"
    "  --deltanet FORM          auto, recurrent or chunked: the delta-net scan (DELTALLM_DELTANET)\n"
    "  --no-pack                keep the file's weight layout (DELTALLM_PACK=0; same results, faster load)\n"
    "  --mem-budget SIZE        memory for the weights, e.g. 16G (default: what the machine has free); an MoE model\n"
    "                           bigger than it streams its experts from the file through a cache\n"
    "                           (DELTALLM_MEM_BUDGET)\n"
    "  --cache-policy P         the expert cache's eviction: lfu (default) or lru (DELTALLM_CACHE_POLICY)\n"
    "  --mpi                    under mpirun: one range of layers per rank (rank 0 also embeddings, head, sampling)\n"
    "  --split F,F,...          with --mpi: each rank's share of the layers' weight bytes (default: balanced per\n"
    "                           token)\n"
    "  --mpi-timeout S          with --mpi: a rank silent this long fails the job (default 30; same machine: at once)\n";

void cli_engine_init(CliEngine *o) {
    memset(o, 0, sizeof *o);
    o->backend = getenv("DELTALLM_BACKEND");
    o->device = getenv("DELTALLM_DEVICE");
    o->tune = getenv("DELTALLM_VK_TUNE");
    o->device_lib = getenv("DELTALLM_VULKAN_LIB");
    o->isa = getenv("DELTALLM_ISA");
    o->deltanet = getenv("DELTALLM_DELTANET");
    o->arith = getenv("DELTALLM_ARITH");
    const char *pk = getenv("DELTALLM_PACK");
    o->no_pack = pk && strcmp(pk, "0") == 0;
    o->ngl = -1;
    o->mem_budget = getenv("DELTALLM_MEM_BUDGET");
    o->cache_policy = getenv("DELTALLM_CACHE_POLICY");
    const char *pr = getenv("DELTALLM_CACHE_PREDICT"), *io = getenv("DELTALLM_CACHE_IO_THREADS");
    o->cache_no_predict = pr && strcmp(pr, "0") == 0;
    o->cache_io_threads = io ? atoi(io) : 0;
}

int cli_parse_size(const char *s, unsigned long long *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    const double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v <= 0) return -1;
    double mul = 1;
    if (*end) {
        const char *u = "KMGT", *p = strchr(u, *end >= 'a' ? *end - 32 : *end);
        if (!p || !*p) return -1;
        for (const char *q = u; q <= p; q++) mul *= 1024;
        end++;
        if (*end && strcasecmp(end, "iB") != 0 && strcasecmp(end, "B") != 0) return -1;
    }
    if (v * mul < 1 || v * mul > 9.0e18) return -1;
    *out = (unsigned long long)(v * mul);
    return 0;
}

int cli_engine_arg(const char *cmd, int argc, char **argv, int *i, CliEngine *o) {
    const char *a = argv[*i];
    const char *timeout = NULL;
    const char **slot = !strcmp(a, "--backend") ? &o->backend : !strcmp(a, "--isa") ? &o->isa
                      : !strcmp(a, "--deltanet") ? &o->deltanet : !strcmp(a, "--device") ? &o->device
                      : !strcmp(a, "--mem-budget") ? &o->mem_budget : !strcmp(a, "--cache-policy") ? &o->cache_policy
                      : !strcmp(a, "--split") ? &o->split : !strcmp(a, "--arith") ? &o->arith
                      : !strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") ? &o->ctk
                      : !strcmp(a, "-ctv") || !strcmp(a, "--cache-type-v") ? &o->ctv
                      : !strcmp(a, "--mpi-timeout") ? &timeout : NULL; /* read by cli_mpi_start */
    if (slot) {
        if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        *slot = argv[++*i];
        unsigned long long v;
        if (slot == &o->mem_budget && cli_parse_size(*slot, &v))
            return cli_usage_error(cmd, "--mem-budget expects a size such as 16G or 512M, got '%s'", *slot);
        MatMode m;
        Err e = {{0}};
        if (slot == &o->arith && arith_parse(*slot, false, &m, &e)) return cli_usage_error(cmd, "%s", e.msg);
        int kv;
        if ((slot == &o->ctk || slot == &o->ctv) && kv_type_parse(*slot, &kv, &e)) return cli_usage_error(cmd, "%s: %s", a, e.msg);
        return 1;
    }
    if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers")) {
        long long v;
        if (*i + 1 >= argc) return cli_usage_error(cmd, "%s needs a value", a);
        if (cli_parse_int(cmd, a, argv[++*i], 0, 1 << 20, &v)) return 2;
        o->ngl = (int)v;
        return 1;
    }
    if (!strcmp(a, "--exact")) {
        o->exact = true;
        return 1;
    }
    if (!strcmp(a, "--no-pack") || !strcmp(a, "--mpi")) {
        *(a[2] == 'n' ? &o->no_pack : &o->mpi) = true;
        return 1;
    }
    return 0;
}

/* the model's layer count, read from its header (-1 if the file cannot be read: opening it fails later) */
static int model_layers(const char *path) {
    Err err = {{0}};
    Gguf *g = path ? gguf_open(path, &err) : NULL;
    ModelConfig c;
    const int n = g && model_config_read(&c, g, &err) == 0 ? c.n_layer : -1;
    gguf_close(g);
    return n;
}

/* -ngl's two stages: dl_engine_open reads them while it opens (and keeps what it needs), which every caller
 * does right after cli_engine_apply */
static DlStage split[2];

int cli_engine_apply(const CliEngine *o, DlEngineParams *p, Err *err) {
    const bool on_device = o->device && strcmp(o->device, "cpu") != 0;
    p->backend = on_device ? o->device : o->backend;
    p->isa = o->isa;
    p->deltanet = o->deltanet;
    p->arith = o->arith;
    p->exact = p->exact || o->exact;
    p->kv_type_k = o->ctk;
    p->kv_type_v = o->ctv;
    p->no_pack = o->no_pack;
    p->mpi = o->mpi;
    p->split = o->split;
    p->device_tune = o->tune;
    p->device_lib = o->device_lib;
    p->cache_policy = o->cache_policy;
    p->cache_no_predict = o->cache_no_predict;
    p->cache_io_threads = o->cache_io_threads;
    unsigned long long v = 0;
    if (o->mem_budget && cli_parse_size(o->mem_budget, &v))
        return err_set(err, "DELTALLM_MEM_BUDGET expects a size such as 16G or 512M, got '%s'", o->mem_budget);
    p->mem_budget = v;
    if (o->ngl < 0 || (o->device && !on_device)) return 0; /* no split, or everything on the CPU anyway */
    /* no --device: the first device backend of the registry (a build without one names vulkan, whose
     * backend_create then says how to get it) */
    const char *dev = on_device ? o->device : backend_first_device() ? backend_first_device() : "vulkan";
    const int L = model_layers(p->model_path);
    if (o->ngl == 0) {
        p->backend = o->backend;
    } else if (L > 0 && o->ngl >= L) {
        p->backend = dev; /* llama.cpp's -ngl 99: every layer */
    } else {
        split[0] = (DlStage){dev, o->ngl};
        split[1] = (DlStage){o->backend ? o->backend : "cpu", 0};
        p->stages = split;
        p->n_stages = 2;
    }
    return 0;
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

int cli_engine_forward(const CliEngine *o, int n_threads, ForwardOptions *fo, Err *err) {
    Isa isa;
    MatMode mode;
    int kv_k, kv_v;
    if (isa_parse(o->isa, &isa, err) || deltanet_algo_parse(o->deltanet, &fo->algo, err) || arith_parse(o->arith, o->exact, &mode, err) ||
        kv_type_parse(o->ctk, &kv_k, err) || kv_type_parse(o->ctv, &kv_v, err))
        return -1;
    if (o->ngl >= 0) return err_set(err, "-ngl splits the layers of an engine; this tool runs one backend (use --device)");
    const bool on_device = o->device && strcmp(o->device, "cpu") != 0;
    fo->be = NULL;
    fo->backend = (BackendOptions){.name = on_device ? o->device : o->backend,
                                   .cpu = {.isa = (int)isa, .pack = !o->no_pack},
                                   .n_threads = n_threads,
                                   .mode = mode,
                                   .kv_k = kv_k,
                                   .kv_v = kv_v,
                                   .tune = o->tune,
                                   .device_lib = o->device_lib};
    return 0;
}
