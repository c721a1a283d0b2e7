/* server.c — see server.h: the server's life cycle (model, chat template, prefix cache, scheduler, HTTP)
 * and the fingerprint that binds checkpoint files to one model and one set of arithmetic settings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "server/server_internal.h"
#include "server/util.h"

void server_config_init(ServerConfig *c) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->parallel = 1;
    c->batch_size = 256;
    c->cache_ram_mib = 2048;
    c->cache_chunk = 256;
    c->state_max_mib = 10240;
    c->queue_max = 64;
    c->max_body_bytes = (size_t)8 << 20;
    c->timeout_s = 600;
    c->read_timeout_s = 60;
    c->header_timeout_s = 10;
    c->max_connections = 256;
    c->max_connections_per_ip = 32;
    DlSamplingParams sp; /* the CLI's and the page's defaults (llama-server's too): one set everywhere */
    dl_sampling_params_init(&sp);
    c->temperature = sp.temperature;
    c->top_p = sp.top_p;
    c->min_p = sp.min_p;
    c->top_k = sp.top_k;
    c->n_predict = -1;
    dl_sampler_extra_init(&c->sampling_extra);
    dl_engine_params_init(&c->engine);
}

static char *read_text_file(const char *path, Err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, "cannot open %s", path), NULL;
    SBuf b = {0};
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) sbuf_put(&b, buf, n);
    fclose(f);
    if (b.oom) {
        sbuf_free(&b);
        return err_set(err, "out of memory reading %s", path), NULL;
    }
    if (!b.p) sbuf_put(&b, "", 0);
    return b.p;
}

char *server_read_file(const char *path, Err *err) { return read_text_file(path, err); }

/* The model's identity: its size, its first 4 MiB (header, metadata, tensor table) and 64 samples of
 * 4 KiB spread over the file — enough to tell apart two files of the same shape (a fine-tune, another
 * quantization) without reading tens of GB at start-up. */
static int model_fingerprint(const char *path, uint64_t *fp, Err *err) {
    FILE *f = fopen(path, "rb");
    struct stat sb;
    if (!f || fstat(fileno(f), &sb) != 0) {
        if (f) fclose(f);
        return err_set(err, "cannot read %s", path);
    }
    uint64_t size = (uint64_t)sb.st_size, h = hash64(&size, sizeof size, 0x6d6f64656cull);
    char *buf = malloc((size_t)4 << 20);
    if (!buf) {
        fclose(f);
        return err_set(err, "out of memory");
    }
    size_t n = fread(buf, 1, (size_t)4 << 20, f);
    h = hash64(buf, n, h);
    for (int i = 0; i < 64 && size > ((uint64_t)4 << 20); i++) {
        uint64_t off = size / 64 * (uint64_t)i;
        if (fseeko(f, (off_t)off, SEEK_SET) != 0) break;
        n = fread(buf, 1, 4096, f);
        h = hash64(buf, n, h ^ off);
    }
    free(buf);
    fclose(f);
    *fp = h;
    return 0;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int setup_template(Server *s, Err *err) {
    const ServerConfig *c = &s->cfg;
    char *file_text = NULL;
    const char *text = dl_chat_template(s->engine);
    if (c->chat_template_file) {
        if (!(file_text = read_text_file(c->chat_template_file, err))) return -1;
        text = file_text;
    }
    Err e = {{0}};
    if (c->chat_format) {
        if (chat_format_from_name(c->chat_format, &s->tmpl.format))
            return free(file_text),
                   err_set(err, "unknown chat format '%s' (chatml, qwen3, qwen3-coder, qwen35)", c->chat_format);
        s->tmpl.default_system = false;
        if (s->tmpl.format == CHAT_FORMAT_CHATML && text && strstr(text, "You are a helpful assistant"))
            s->tmpl.default_system = true;
        s->have_template = true;
    } else if (chat_format_detect(text, &s->tmpl.format, &s->tmpl.default_system, &e) == 0) {
        s->have_template = true;
        s->tmpl.thinking_opt_in = chat_thinking_opt_in(text);
    } else if (c->chat_template_file) {
        free(file_text);
        return err_set(err, "%s: %s", c->chat_template_file, e.msg);
    } else {
        srv_log(LOG_WARN, "chat completions are disabled: %s", e.msg);
    }
    free(file_text);
    if (s->have_template)
        srv_log(LOG_INFO, "chat format: %s%s", chat_format_name(s->tmpl.format),
                s->tmpl.default_system ? " (with the default system prompt)" : "");
    return 0;
}

int server_read_key_file(const char *path, char **key, Err *err) {
    *key = NULL;
    char *text = read_text_file(path, err);
    if (!text) return -1;
    /* one key per line (llama-server's --api-key-file), without the whitespace around it; blank lines are
     * skipped; the keys are joined with commas, as --api-key k1,k2 gives them */
    SBuf keys = {0};
    int line = 0;
    for (char *p = text; *p;) {
        size_t n = strcspn(p, "\r\n");
        line++;
        char *a = p;
        size_t m = n;
        while (m && (*a == ' ' || *a == '\t')) a++, m--;
        while (m && (a[m - 1] == ' ' || a[m - 1] == '\t')) m--;
        if (m && memchr(a, ',', m)) {
            free(text);
            sbuf_free(&keys);
            return err_set(err, "%s line %d: an API key may not contain ','", path, line);
        }
        if (m) {
            if (keys.n) sbuf_put(&keys, ",", 1);
            sbuf_put(&keys, a, m);
        }
        p += n;
        if (*p == '\r' && p[1] == '\n') p++;
        if (*p) p++;
    }
    free(text);
    if (!keys.n) return sbuf_free(&keys), err_set(err, "%s holds no API key (the file is empty)", path);
    if (keys.oom) return sbuf_free(&keys), err_set(err, "out of memory");
    *key = keys.p;
    return 0;
}

Server *server_start(const ServerConfig *c, Err *err) {
    if (c->api_key && !c->api_key[0])
        return err_set(err, "the API key is empty: every request would be refused (omit --api-key for none)"), NULL;
    for (const char *k = c->api_key; k && *k;) { /* a list: "k1,k2" */
        size_t n = strcspn(k, ",");
        size_t blank = 0;
        while (blank < n && (k[blank] == ' ' || k[blank] == '\t')) blank++;
        if (blank == n) return err_set(err, "the API key list '%s' has an empty key", c->api_key), NULL;
        k += n + (k[n] == ',');
        if (k[-1] == ',' && !*k) return err_set(err, "the API key list '%s' has an empty key", c->api_key), NULL;
    }
    Server *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, "out of memory"), NULL;
    s->cfg = *c;
    s->started = wall_s();
    s->listen_fd = -1;
    if (http_bind(s, err)) goto fail;
    const int chunk = c->cache_chunk, batch = c->batch_size;
    if (chunk < 1 || batch < 1 || (chunk % batch && batch % chunk)) {
        err_set(err, "the checkpoint interval (%d) must be a multiple or a divisor of the batch size (%d)", chunk, batch);
        goto fail;
    }
    const int segment = chunk < batch ? chunk : batch;
    /* the engine's options whole (ServerConfig.engine); the server owns only these few */
    DlEngineParams p = c->engine;
    if ((p.model_path && (!c->model_path || strcmp(p.model_path, c->model_path))) || p.n_ctx || p.n_batch ||
        p.n_seq_max || p.n_threads || p.no_mmap || p.progress) {
        err_set(err, "ServerConfig.engine sets a parameter the server owns (model_path, n_ctx, n_batch, n_seq_max, "
                     "n_threads, no_mmap, progress): set it in ServerConfig");
        goto fail;
    }
    p.model_path = c->model_path;
    p.n_ctx = c->ctx_size;
    p.n_batch = segment;
    p.n_seq_max = c->parallel;
    p.n_threads = c->threads;
    p.no_mmap = c->no_mmap;
    p.progress = c->load_progress;
    p.progress_user = c->load_progress_user;
    DlError de = {{0}};
    if (!(s->engine = dl_engine_open(&p, &de)) || (c->mlock && dl_engine_prefetch(s->engine, true, &de))) {
        err_set(err, "%s", de.msg);
        goto fail;
    }
    if (c->draft && c->model_draft && dl_engine_open_draft(s->engine, c->model_draft, &de)) {
        err_set(err, "%s", de.msg);
        goto fail;
    }
    s->info = dl_engine_info(s->engine);
    srv_log(LOG_INFO, "model %s: %s, %d layers, vocab %d, context %d per slot, %d slot(s), %d threads, kernels %s, "
                      "arithmetic %s, K/V cache %s/%s",
            c->model_path, s->info->arch, s->info->n_layer, s->info->n_vocab, s->info->n_ctx, c->parallel,
            s->info->n_threads, s->info->ops, s->info->arith, s->info->kv_type_k, s->info->kv_type_v);
    if (s->info->n_ctx_train > 0 && s->info->n_ctx > s->info->n_ctx_train)
        srv_log(LOG_WARN, "the context per slot (%d tokens, %.1f MiB of state per slot) is larger than the model was "
                          "trained for (%d): output beyond %d tokens may degrade",
                s->info->n_ctx, s->info->session_bytes / 1048576.0, s->info->n_ctx_train, s->info->n_ctx_train);
    DlStageStats st[64]; /* over MPI: who holds what */
    for (int i = 0, n = dl_engine_stage_stats(s->engine, true, st, 64, &de); i < n; i++)
        srv_log(LOG_INFO, "rank %d (%s, pid %d): layers [%d, %d)%s", st[i].rank, st[i].host, st[i].pid, st[i].l0, st[i].l1,
                st[i].rank ? "" : " + embeddings, head, sampling");
    if (setup_template(s, err)) goto fail;
    if (c->vision_device && !c->mmproj) {
        err_set(err, "--vision-device needs --mmproj");
        goto fail;
    }
    if (c->mmproj) {
        if (c->draft || c->engine.mpi) {
            err_set(err, "--mmproj cannot be used with %s yet (images need one process and plain decoding)",
                    c->draft ? "drafting" : "--mpi");
            goto fail;
        }
        if (!(s->vision = sv_open(c->mmproj, s->engine, c->threads, c->vision_device, err))) goto fail;
        s->defaults.images = true;
        srv_log(LOG_INFO, "vision projector %s: images in chat requests (encoder on %s)", c->mmproj,
                c->vision_device ? c->vision_device : "the CPU");
    }
    if (c->alias) {
        s->model_id = strdup(c->alias);
    } else {
        const char *b = base_name(c->model_path);
        size_t n = strlen(b);
        if (n > 5 && !strcmp(b + n - 5, ".gguf")) n -= 5;
        s->model_id = strndup(b, n);
    }
    if (c->api_key && !(s->api_key = strdup(c->api_key))) goto oom;
    if (s->api_key) s->api_key_len = strlen(s->api_key);
    if (!s->model_id) goto oom;
    dl_sampling_params_init(&s->defaults.sampling);
    s->defaults.sampling.temperature = c->temperature;
    s->defaults.sampling.top_p = c->top_p;
    s->defaults.sampling.top_k = c->top_k;
    s->defaults.sampling.min_p = c->min_p;
    s->defaults.extra = c->sampling_extra;
    s->defaults.has_extra = true;
    {   /* the default samplers' values and order, checked once here (a request could not fix them) */
        DlError se = {{0}};
        DlSampler *probe = dl_sampler_new_extra(s->engine, &s->defaults.sampling, &c->sampling_extra, &se);
        if (!probe) {
            err_set(err, "sampling defaults: %s", se.msg);
            goto fail;
        }
        dl_sampler_free(probe);
    }
    s->defaults.n_vocab = s->info->n_vocab;
    s->defaults.chat_max_tokens = c->n_predict;
    s->defaults.completion_max_tokens = 16;
    if (!c->no_cache || c->slot_save_path) {
        if (model_fingerprint(c->model_path, &s->fingerprint[0], err)) goto fail;
        /* everything a saved state's bits depend on: the kernels, the threads, the segments, the arithmetic,
         * the caches' types (a snapshot's K/V rows are in them), the delta-net form, where each layer runs
         * and a device's tuning */
        SBuf st = {0};
        char line[256];
        snprintf(line, sizeof line, "deltallm-ckpt v2 ops=%s threads=%d chunk=%d segment=%d arith=%s kv=%s/%s dn=%s",
                 s->info->ops, s->info->n_threads, chunk, segment, s->info->arith, s->info->kv_type_k,
                 s->info->kv_type_v, c->engine.deltanet ? c->engine.deltanet : "auto");
        sbuf_put(&st, line, strlen(line));
        snprintf(line, sizeof line, " backend=%s tune=%s", c->engine.backend ? c->engine.backend : "cpu",
                 c->engine.device_tune ? c->engine.device_tune : "");
        sbuf_put(&st, line, strlen(line));
        for (int i = 0; i < c->engine.n_stages && c->engine.stages; i++) {
            const char *b = c->engine.stages[i].backend ? c->engine.stages[i].backend : c->engine.backend;
            snprintf(line, sizeof line, " stage=%s:%d", b ? b : "cpu", c->engine.stages[i].n_layers);
            sbuf_put(&st, line, strlen(line));
        }
        if (st.oom) {
            sbuf_free(&st);
            goto oom;
        }
        s->fingerprint[1] = hash64(st.p, st.n, s->fingerprint[0]);
        sbuf_free(&st);
    }
    if (c->slot_save_path) {
        struct stat sb;
        if (stat(c->slot_save_path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            err_set(err, "--slot-save-path %s: not a directory", c->slot_save_path);
            goto fail;
        }
    }
    if (!c->no_cache) {
        PrefixCacheConfig pc = {.ram_bytes = c->cache_ram_mib << 20,
                                .dir = c->state_dir,
                                .disk_bytes = (uint64_t)c->state_max_mib << 20,
                                .fingerprint = {s->fingerprint[0], s->fingerprint[1]}};
        if (!(s->cache = pcache_new(&pc, err))) goto fail;
        srv_log(LOG_INFO, "prefix cache: checkpoints every %d tokens, %zu MiB of RAM%s%s", chunk, c->cache_ram_mib,
                c->state_dir ? ", disk: " : "", c->state_dir ? c->state_dir : "");
    }
    SchedConfig sc = {.engine = s->engine,
                      .n_slots = c->parallel,
                      .queue_max = c->queue_max,
                      .chunk = chunk,
                      .segment = segment,
                      .cache = s->cache,
                      .dense = c->cache_dense,
                      .draft = c->draft ? &c->draft_params : NULL};
    if (c->draft)
        srv_log(LOG_INFO, "speculative decoding: up to %d drafts a step (p-min %g) by %s", c->draft_params.n_max,
                c->draft_params.p_min, c->model_draft ? c->model_draft : "the model's MTP block");
    if (!(s->sched = sched_new(&sc, err))) goto fail;
    if (!(s->store = rstore_new(4096, (size_t)64 << 20))) goto oom;
    if (http_start(s, err)) goto fail;
    return s;
oom:
    err_set(err, "out of memory");
fail:
    server_stop(s);
    return NULL;
}

int server_port(const Server *s) { return s->port; }
const char *server_model_id(const Server *s) { return s->model_id; }

void server_stop(Server *s) {
    if (!s) return;
    if (s->sched) sched_shutdown(s->sched);
    http_stop(s);
    if (s->listen_fd >= 0) close(s->listen_fd);
    sched_free(s->sched);
    if (s->cache) pcache_flush(s->cache);
    pcache_free(s->cache);
    dl_engine_close(s->engine);
    rstore_free(s->store);
    sv_close(s->vision);
    free(s->model_id);
    free(s->api_key);
    free(s);
}
