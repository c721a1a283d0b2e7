/* cli_engine.h — the engine options every computing command (run, serve, bench, eval, parity) shares,
 * parsed in one place, and the environment variables behind them, read once, here:
 *
 *   --arith fast|llama|exact             DELTALLM_ARITH     the arithmetic (default fast; llama: llama.cpp's bits)
 *   --exact                                                 the exact arithmetic whatever --arith says
 *   -ctk / -ctv f32|f16|q8_0|q4_0                           the K / V cache's type (default f16 in the fast arithmetic)
 *   --device cpu|vulkan[:N]              DELTALLM_DEVICE    where the model runs (deltallm devices lists them)
 *   -ngl N, --n-gpu-layers N                                the first N layers on the device, the rest on the CPU
 *   --backend cpu|ref                    DELTALLM_BACKEND   the CPU's kernels, or the scalar reference of every op
 *   --isa auto|ref|avx2|avx512           DELTALLM_ISA       the CPU kernels' ISA level
 *   --deltanet auto|recurrent|chunked    DELTALLM_DELTANET  the delta-net scan's form
 *   --no-pack                            DELTALLM_PACK=0    keep the file's weight layout
 *   --mpi [--split F,F,..]                                  the layers over the ranks of an MPI job (mpirun)
 *   --mpi-timeout S                                         how long a rank may stay silent (default 30)
 *                                        DELTALLM_VK_TUNE   the Vulkan backend's tuning (coop=0,tile=N,chunk=N)
 *                                        DELTALLM_VULKAN_LIB  the Vulkan loader file (instead of libvulkan.so.1)
 *   --mem-budget SIZE                    DELTALLM_MEM_BUDGET  memory for the weights (an MoE model bigger
 *                                                           than it streams its experts through a cache)
 *   --cache-policy lru|lfu               DELTALLM_CACHE_POLICY  the expert cache's eviction
 *                                        DELTALLM_CACHE_PREDICT=0, DELTALLM_CACHE_IO_THREADS=N (measurements)
 *
 * A flag wins over its variable. The values are checked where they are used (backend_create, isa_parse,
 * deltanet_algo_parse), each by its one parser. Every command that opens an engine fills its DlEngineParams
 * with cli_engine_apply (serve too: ServerConfig.engine), so an option here reaches every engine alike. */
#ifndef DL_CLI_CLI_ENGINE_H
#define DL_CLI_CLI_ENGINE_H

#include <stdbool.h>

#include "base/err.h"
#include "deltallm.h"

typedef struct CliEngine {
    const char *backend, *isa, *deltanet, *cache_policy, *arith;
    bool exact;            /* --exact: the exact arithmetic over arith */
    const char *ctk, *ctv; /* -ctk, -ctv */
    const char *device; /* NULL: the CPU (backend) */
    const char *tune;   /* DELTALLM_VK_TUNE */
    const char *device_lib; /* DELTALLM_VULKAN_LIB: the Vulkan loader file */
    int ngl;            /* -1: not given */
    bool no_pack, cache_no_predict;
    const char *mem_budget; /* as given; parsed by cli_parse_size */
    int cache_io_threads;
    bool mpi;
    const char *split;
} CliEngine;

/* "24G", "512M", "8GiB", "1.5G", "4096" (bytes): K, M, G, T are powers of 1024; returns -1 for anything
 * else or 0. */
int cli_parse_size(const char *s, unsigned long long *out);

/* The defaults: the environment's values. */
void cli_engine_init(CliEngine *o);
/* If argv[*i] is one of the options above, takes it (and its value: *i advances) and returns 1; 0 if it is
 * not one; 2 after printing a usage error for a missing or bad value. */
int cli_engine_arg(const char *cmd, int argc, char **argv, int *i, CliEngine *o);
/* Sets the engine parameters' arithmetic (p->exact stays set if the caller set it), K and V cache types,
 * backend (or the -ngl stages: p->model_path must be set, its layer count is read; open the engine before
 * the next call), ISA, delta-net form, packing, MPI, a device's tuning and library, the expert cache and the
 * memory budget (a bad --mem-budget was refused by cli_engine_arg; a bad DELTALLM_MEM_BUDGET fails here
 * with one line). */
int cli_engine_apply(const CliEngine *o, DlEngineParams *p, Err *err);
/* The help lines of the options (ends with a newline). */
extern const char cli_engine_help[];

/* main.c, before and after the command. With --mpi on the command line every rank joins the MPI job;
 * cli_mpi_start returns 1 on a rank other than 0 after serving rank 0's engines (*rc: the exit status), and
 * 0 where the command is to run. cli_mpi_end leaves the job; when the job failed and the command did not
 * report it (exit status 0), it prints the failure's line and makes the status 1. */
int cli_mpi_start(int argc, char **argv, int *rc);
int cli_mpi_end(const char *cmd, int rc);
/* With an engine over MPI: prints (stderr) which rank holds which layers. */
void cli_engine_report(DlEngine *e);

/* For the developer tools that drive the forward pass directly (eval, parity): the backend options (mode,
 * threads, ISA, packing) and the delta-net form; fails with one line for a bad value. */
typedef struct ForwardOptions ForwardOptions;
int cli_engine_forward(const CliEngine *o, int n_threads, ForwardOptions *fo, Err *err);

#endif
