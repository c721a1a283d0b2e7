/* server.h — the OpenAI-compatible HTTP server as one object: load the model, start the scheduler, the
 * prefix cache and the HTTP daemon; stop them again. `deltallm serve` (src/cli/cmd_serve.c) and the
 * tests (in-process) use only this. */
#ifndef DL_SERVER_SERVER_H
#define DL_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "deltallm.h"

typedef struct ServerConfig {
    const char *model_path;
    const char *host; /* default 127.0.0.1 */
    int port;         /* 0: any free port (server_port tells which) */
    int parallel;     /* slots */
    int ctx_size;     /* tokens per slot; 0: min(model, 4096) */
    int batch_size;   /* prompt tokens per forward pass */
    int threads;      /* 0: all CPUs */
    bool no_mmap;     /* read the weights into memory (DlEngineParams.no_mmap) */
    bool mlock;       /* read every weight page and lock them in memory before serving */
    void (*load_progress)(void *user, const char *phase, uint64_t done, uint64_t total); /* DlProgressFn */
    void *load_progress_user;
    const char *api_key; /* NULL: no authentication; "" is refused; "k1,k2": any of these keys */
    const char *alias;   /* model id in responses; NULL: the file name without .gguf */
    const char *chat_template_file; /* overrides the GGUF's template */
    const char *chat_format;        /* overrides the detected format: chatml, qwen3, qwen3-coder, qwen35 */
    bool no_cache;
    size_t cache_ram_mib;
    int cache_chunk;
    bool cache_dense;
    const char *state_dir;
    const char *slot_save_path; /* POST /slots/{id}?action=save|restore: files live here (NULL: refused) */
    size_t state_max_mib;
    int queue_max;
    size_t max_body_bytes;
    int timeout_s; /* idle HTTP connection timeout */
    double read_timeout_s; /* a request's headers and body must arrive within this (0: no deadline) */
    double header_timeout_s; /* a request's headers must arrive within this (0: only read_timeout_s) */
    int max_connections; /* beyond it, the oldest connection still sending its headers is closed */
    int max_connections_per_ip; /* 0: no limit */
    const char *ssl_key_file, *ssl_cert_file; /* both: HTTPS (PEM files), through libmicrohttpd's GnuTLS */
    const char *cors_origin; /* NULL: no CORS headers; "*" or a comma-separated list of origins */
    bool metrics;            /* serve /metrics */
    float temperature, top_p, min_p; /* defaults for requests that do not say */
    int top_k;
    DlSamplerExtra sampling_extra; /* llama.cpp's further samplers, defaults for requests (dry_breakers unused) */
    int n_predict; /* default max_tokens for chat (-1: until the context is full) */
    /* The engine's options as every command resolves them (cli_engine_apply: the arithmetic, the K and V
     * cache types, the backend or device and -ngl's stages, ISA, delta-net form, packing, a device's tuning
     * and library, the memory budget and expert cache, MPI), taken whole, so `serve` opens the engine `run`
     * opens. server_start sets only what the server owns: model_path, n_ctx (ctx_size), n_batch (the
     * segment), n_seq_max (parallel), n_threads (threads), no_mmap and progress from the fields above (here
     * they stay 0 / NULL, model_path may name the same file: another value is refused, not overridden).
     * server_config_init: dl_engine_params_init's. */
    DlEngineParams engine;
    bool no_webui; /* no chat page at / */
    bool draft;              /* speculative decoding in every slot (draft_params) */
    DlDraftParams draft_params;
    const char *model_draft; /* a smaller model of the same vocabulary drafts (NULL: the MTP block) */
    const char *mmproj;      /* the vision projector: chat requests may hold images (NULL: text only) */
    const char *vision_device; /* the backend the vision tower runs on (NULL: the CPU encoder's fast path) */
} ServerConfig;

void server_config_init(ServerConfig *c);

/* API keys from a file: one per line, without surrounding whitespace, joined with commas (*key malloc'd).
 * A file without a key, or a key with a comma, is an error. */
int server_read_key_file(const char *path, char **key, Err *err);

typedef struct Server Server;

/* Loads the model and starts serving. Nothing is printed except through the server log (stderr). */
Server *server_start(const ServerConfig *c, Err *err);
int server_port(const Server *s);
const char *server_model_id(const Server *s);
/* Ends running and queued requests ("shutting down"), stops the HTTP daemon, frees everything. */
void server_stop(Server *s);

#endif
