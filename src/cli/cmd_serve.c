/* cmd_serve.c — `deltallm serve`: options, then the OpenAI-compatible server (src/server/) until SIGINT or
 * SIGTERM. Prints "listening on http://HOST:PORT" on stdout once it accepts connections (scripts wait for
 * that line; with --port 0 it carries the port that was chosen). */
#include "cli/cli.h"
#include "cli/cli_engine.h"
#include "cli/draft_options.h"
#include "cli/progress.h"
#include "server/server.h"
#include "server/util.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(void) {
    printf("usage: deltallm serve -m MODEL.gguf [options]\n"
           "  --host H                 address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)\n"
           "  --port P                 port (default 8080; 0 = any free port)\n"
           "  -np, --parallel N        requests computed at once (slots; default 1)\n"
           "  -c, --ctx-size N         context per slot in tokens (default min(model, 4096))\n"
           "  -b, --batch-size N       prompt tokens per forward pass (default 256)\n"
           "  -t, --threads N          compute threads (default: one per 128 MiB of weights read per token, at most\n"
           "                           the CPUs: 1 for the embedded model)\n"
           "  --no-mmap                read the weights into memory instead of mapping the file\n"
           "  --mlock                  read every weight page first and lock them in memory\n"
           "  --api-key KEY[,KEY...]   require 'Authorization: Bearer KEY', any of the keys (also $DELTALLM_API_KEY)\n"
           "  --api-key-file FILE      the same, the keys read from FILE, one per line (whitespace trimmed)\n"
           "  --alias NAME             model id reported by the API (default: the file name)\n"
           "  --mmproj FILE            vision projector (llama.cpp's Qwen3.5 mmproj): chat requests may hold images\n"
           "                           (image_url data URLs, input_image, Anthropic base64 image blocks)\n"
           "  --vision-device NAME     run the vision encoder on that backend (vulkan[:N], cpu, ref; F32 arithmetic)\n"
           "  --chat-template-file F   use this chat template instead of the GGUF's\n"
           "  --chat-format NAME       force the chat format: chatml, qwen3, qwen3-coder, qwen35\n"
           "  --queue N                requests that may wait for a slot (default 64; beyond: 503)\n"
           "  --cache-ram MiB          RAM for prefix checkpoints (default 2048)\n"
           "  --cache-chunk N          checkpoint interval in tokens (default 256)\n"
           "  --cache-dense            keep a checkpoint at every interval (default: the last of each prompt\n"
           "                           and those at 1, 2, 4, 8, ... intervals)\n"
           "  --no-cache               no prefix reuse\n"
           "  --state-dir DIR          also keep checkpoints on disk (survive restarts)\n"
           "  --state-max MiB          disk budget for --state-dir (default 10240)\n"
           "  --max-body MiB           largest request body (default 8)\n"
           "  --max-connections N      open connections (default 256); beyond, the oldest one still sending\n"
           "                           its headers is closed\n"
           "  --slot-save-path DIR     POST /slots/{id}?action=save|restore keeps slot files here\n"
           "  --ssl-key-file FILE --ssl-cert-file FILE  serve HTTPS (PEM key and certificate)\n"
           "  --header-timeout S       a new connection's request headers must arrive within S seconds\n"
           "                           (default 10; 0 = only --read-timeout)\n"
           "  --timeout S              idle connection timeout in seconds (default 600)\n"
           "  --read-timeout S         a request's headers and body must arrive within S seconds (default 60;\n"
           "                           0 = no deadline); idle keep-alive connections close after it too\n"
           "  --max-connections-per-ip N  open connections per client address (default 32; 0 = no limit)\n"
           "  --cors-origin ORIGINS    answer browsers from these origins ('*' or a comma-separated list)\n"
           "  --metrics                serve Prometheus metrics at /metrics\n"
           "  --temp T --top-p P --top-k K --min-p P\n"
           "                           sampling defaults for requests that do not set them (default 0.8, 0.95, 40, 0.05:\n"
           "                           the CLI's and the page's; GET /props shows them)\n"
           "  --typical P --mirostat N --mirostat-lr ETA --mirostat-ent TAU --dry-multiplier M --dry-base B\n"
           "  --dry-allowed-length N --dry-penalty-last-n N --xtc-probability P --xtc-threshold T\n"
           "  --top-n-sigma N --dynatemp-range R --dynatemp-exp E --samplers a;b;..\n"
           "                           llama.cpp's samplers, defaults for requests\n"
           "  -n, --n-predict N        default max_tokens for chat completions (default -1: until the context ends)\n"
           "  --no-webui               no chat page at / (by default http://HOST:PORT/ is a chat in the browser)\n"
           "  -v, --verbose            debug log\n%s%s", draft_options_help, cli_engine_help);
}

/* Over MPI, a rank that fails ends the server as SIGTERM does (every thread blocks it; sigwait takes it). */
static void stop_on_mpi_failure(void) { kill(getpid(), SIGTERM); }

int cmd_serve(int argc, char **argv) {
    ServerConfig c;
    server_config_init(&c);
    char *key_owned = NULL;
    long long v;
    double d;
    CliEngine eo;
    cli_engine_init(&eo);
    DraftOptions dro;
    draft_options_init(&dro);
    for (int i = 1; i < argc; i++) {
        const int er = cli_engine_arg("serve", argc, argv, &i, &eo);
        if (er == 2) return free(key_owned), 2;
        if (er == 1) continue;
        const int dr = draft_options_parse(&dro, "serve", argc, argv, &i);
        if (dr < 0) return free(key_owned), 2;
        if (dr > 0) continue;
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV                                                                                              \
    if (!val) return free(key_owned), cli_usage_error("serve", "%s needs a value", a);                     \
    i++
#define INT_OPT(lo, hi, dst)                                                                               \
    do {                                                                                                   \
        NEEDV;                                                                                             \
        if (cli_parse_int("serve", a, val, lo, hi, &v)) return free(key_owned), 2;                         \
        dst = v;                                                                                           \
    } while (0)
#define FLOAT_OPT(lo, hi, dst)                                                                             \
    do {                                                                                                   \
        NEEDV;                                                                                             \
        if (cli_parse_float("serve", a, val, lo, hi, &d)) return free(key_owned), 2;                       \
        dst = (float)d;                                                                                    \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            free(key_owned);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            NEEDV;
            c.model_path = val;
        } else if (!strcmp(a, "--host")) {
            NEEDV;
            c.host = val;
        } else if (!strcmp(a, "--port")) INT_OPT(0, 65535, c.port);
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) INT_OPT(1, 256, c.parallel);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) INT_OPT(16, 1 << 24, c.ctx_size);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) INT_OPT(1, 1 << 16, c.batch_size);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) INT_OPT(0, 4096, c.threads);
        else if (!strcmp(a, "--no-mmap")) c.no_mmap = true;
        else if (!strcmp(a, "--mlock")) c.mlock = true;
        else if (!strcmp(a, "--api-key")) {
            NEEDV;
            if (!*val) return free(key_owned), cli_usage_error("serve", "--api-key is empty (omit it for no key)");
            c.api_key = val;
        } else if (!strcmp(a, "--api-key-file")) {
            NEEDV;
            free(key_owned);
            Err kerr = {{0}};
            if (server_read_key_file(val, &key_owned, &kerr)) return cli_usage_error("serve", "--api-key-file: %s", kerr.msg);
            c.api_key = key_owned;
        } else if (!strcmp(a, "--alias")) {
            NEEDV;
            c.alias = val;
        } else if (!strcmp(a, "--mmproj")) {
            NEEDV;
            c.mmproj = val;
        } else if (!strcmp(a, "--vision-device")) {
            NEEDV;
            c.vision_device = val;
        } else if (!strcmp(a, "--chat-template-file")) {
            NEEDV;
            c.chat_template_file = val;
        } else if (!strcmp(a, "--chat-format")) {
            NEEDV;
            c.chat_format = val;
        } else if (!strcmp(a, "--queue")) INT_OPT(0, 1 << 20, c.queue_max);
        else if (!strcmp(a, "--cache-ram")) INT_OPT(0, 1 << 24, c.cache_ram_mib);
        else if (!strcmp(a, "--cache-chunk")) INT_OPT(1, 1 << 20, c.cache_chunk);
        else if (!strcmp(a, "--cache-dense")) c.cache_dense = true;
        else if (!strcmp(a, "--no-cache")) c.no_cache = true;
        else if (!strcmp(a, "--state-dir")) {
            NEEDV;
            c.state_dir = val;
        } else if (!strcmp(a, "--state-max")) INT_OPT(1, 1ll << 30, c.state_max_mib);
        else if (!strcmp(a, "--max-body")) {
            INT_OPT(1, 4096, c.max_body_bytes);
            c.max_body_bytes <<= 20;
        } else if (!strcmp(a, "--max-connections")) INT_OPT(1, 1 << 16, c.max_connections);
        else if (!strcmp(a, "--timeout")) INT_OPT(1, 1 << 20, c.timeout_s);
        else if (!strcmp(a, "--read-timeout")) {
            NEEDV;
            if (cli_parse_float("serve", a, val, 0, 1 << 20, &d)) return free(key_owned), 2;
            c.read_timeout_s = d;
        } else if (!strcmp(a, "--slot-save-path")) {
            NEEDV;
            c.slot_save_path = val;
        } else if (!strcmp(a, "--ssl-key-file")) {
            NEEDV;
            c.ssl_key_file = val;
        } else if (!strcmp(a, "--ssl-cert-file")) {
            NEEDV;
            c.ssl_cert_file = val;
        } else if (!strcmp(a, "--header-timeout")) {
            NEEDV;
            if (cli_parse_float("serve", a, val, 0, 1 << 20, &d)) return free(key_owned), 2;
            c.header_timeout_s = d;
        } else if (!strcmp(a, "--max-connections-per-ip")) INT_OPT(0, 1 << 16, c.max_connections_per_ip);
        else if (!strcmp(a, "--cors-origin")) {
            NEEDV;
            c.cors_origin = val;
        } else if (!strcmp(a, "--metrics")) c.metrics = true;
        else if (!strcmp(a, "--temp")) FLOAT_OPT(0, 2, c.temperature);
        else if (!strcmp(a, "--top-p")) FLOAT_OPT(0, 1, c.top_p);
        else if (!strcmp(a, "--min-p")) FLOAT_OPT(0, 1, c.min_p);
        else if (!strcmp(a, "--top-k")) INT_OPT(0, 1 << 30, c.top_k);
        else if (!strcmp(a, "--typical")) FLOAT_OPT(0, 1, c.sampling_extra.typical_p);
        else if (!strcmp(a, "--mirostat")) INT_OPT(0, 2, c.sampling_extra.mirostat);
        else if (!strcmp(a, "--mirostat-lr")) FLOAT_OPT(0, 1, c.sampling_extra.mirostat_eta);
        else if (!strcmp(a, "--mirostat-ent")) FLOAT_OPT(0, 100, c.sampling_extra.mirostat_tau);
        else if (!strcmp(a, "--dry-multiplier")) FLOAT_OPT(0, 100, c.sampling_extra.dry_multiplier);
        else if (!strcmp(a, "--dry-base")) FLOAT_OPT(1, 100, c.sampling_extra.dry_base);
        else if (!strcmp(a, "--dry-allowed-length")) INT_OPT(0, 1 << 20, c.sampling_extra.dry_allowed_length);
        else if (!strcmp(a, "--dry-penalty-last-n")) INT_OPT(-1, 1 << 20, c.sampling_extra.dry_penalty_last_n);
        else if (!strcmp(a, "--xtc-probability")) FLOAT_OPT(0, 1, c.sampling_extra.xtc_probability);
        else if (!strcmp(a, "--xtc-threshold")) FLOAT_OPT(0, 1, c.sampling_extra.xtc_threshold);
        else if (!strcmp(a, "--top-n-sigma")) FLOAT_OPT(-1, 1000, c.sampling_extra.top_n_sigma);
        else if (!strcmp(a, "--dynatemp-range")) FLOAT_OPT(0, 100, c.sampling_extra.dynatemp_range);
        else if (!strcmp(a, "--dynatemp-exp")) FLOAT_OPT(0, 100, c.sampling_extra.dynatemp_exponent);
        else if (!strcmp(a, "--samplers") || !strcmp(a, "--sampling-seq")) {
            NEEDV;
            c.sampling_extra.samplers = val;
        }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) INT_OPT(-1, 1 << 30, c.n_predict);
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) srv_log_verbose(true);
        else if (!strcmp(a, "--no-webui")) c.no_webui = true;
        else {
            free(key_owned);
            return cli_usage_error("serve", "unknown option '%s' (deltallm serve --help lists them)", a);
        }
#undef NEEDV
#undef INT_OPT
#undef FLOAT_OPT
    }
    if (!c.model_path && !(c.model_path = cli_default_model())) {
        free(key_owned);
        return cli_usage_error("serve", "no model: -m MODEL.gguf (the embedded %s is not here)", CLI_DEFAULT_MODEL);
    }
    if (draft_options_check(&dro, "serve")) return free(key_owned), 2;
    if (c.n_predict == 0) c.n_predict = -1;
    const char *env_key = getenv("DELTALLM_API_KEY");
    if (!c.api_key && env_key && *env_key) c.api_key = env_key;

    /* every thread started from here on inherits the blocked signals; this one waits for them */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* the engine options as cli_engine resolves them for run and chat, handed over whole (arithmetic, cache
     * types, device, -ngl split, tuning, budget, MPI): nothing is copied field by field, so nothing is lost */
    c.engine.model_path = c.model_path; /* -ngl reads the layer count */
    Err ae = {{0}};
    if (cli_engine_apply(&eo, &c.engine, &ae)) return free(key_owned), cli_usage_error("serve", "%s", ae.msg);
    c.draft = draft_options_on(&dro, &c.draft_params);
    c.model_draft = dro.model;
    dl_mpi_on_failure(stop_on_mpi_failure); /* a rank that died: fail what is running and shut down */
    Err err = {{0}};
    LoadProgress bar;
    load_progress_init(&bar, stderr);
    c.load_progress = load_progress_cb;
    c.load_progress_user = &bar;
    Server *s = server_start(&c, &err);
    load_progress_end(&bar);
    free(key_owned);
    if (!s) {
        fprintf(stderr, "deltallm serve: %s\n", err.msg);
        return 1;
    }
    bool v6 = strchr(c.host, ':') != NULL;
    printf("deltallm serve: listening on http://%s%s%s:%d (model '%s')%s\n", v6 ? "[" : "", c.host, v6 ? "]" : "",
           server_port(s), server_model_id(s), c.api_key ? ", API key required" : "");
    fflush(stdout);
    if (strcmp(c.host, "127.0.0.1") != 0 && strcmp(c.host, "localhost") != 0 && strcmp(c.host, "::1") != 0 && !c.api_key)
        srv_log(LOG_WARN, "listening on %s without an API key: anyone who can reach this address can use the model",
                c.host);
    int sig = 0;
    sigwait(&set, &sig);
    if (dl_mpi_failure()) { /* the scheduler fails the running requests at once: let their answers go out */
        srv_log(LOG_ERROR, "%s: shutting down", dl_mpi_failure());
        const struct timespec grace = {0, 500 * 1000000L};
        nanosleep(&grace, NULL);
    } else {
        srv_log(LOG_INFO, "%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    server_stop(s);
    return 0;
}
