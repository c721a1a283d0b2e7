/* engine_cache.c — the memory budget of an engine (DlEngineParams.mem_budget): whether the model's weights
 * fit, and when an MoE model's do not, its expert cache (model/expert_cache.h): opened before the weights are
 * bound (the expert stacks are then streamed), handed to every stage's forward pass, the other weights made
 * resident (and locked where `ulimit -l` allows). Its statistics for the profile report and bench. */
#include "engine/engine_cache.h"

#include <stdio.h>
#include <string.h>

#define GIB (1024.0 * 1024 * 1024)
#define MARGIN ((uint64_t)1 << 30)

/* MemAvailable from /proc/meminfo in bytes, or 0 when unknown. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* The first stage's backend that is a device (the registry says which), or NULL when every stage runs on the host. */
static const char *device_stage(const DlEngineParams *p) {
    const int n = p->n_stages > 0 && p->stages ? p->n_stages : 1;
    for (int i = 0; i < n; i++) {
        const char *b = p->n_stages > 0 && p->stages && p->stages[i].backend ? p->stages[i].backend : p->backend;
        if (b && *b && !backend_is_host(b)) return b;
    }
    return NULL;
}

int engine_cache_open(DlEngine *en, const DlEngineParams *p, Err *e) {
    const Model *m = en->model;
    uint64_t weights = 0;
    for (int64_t i = 0; i < gguf_n_tensors(m->gguf); i++) weights += gguf_tensor(m->gguf, i)->nbytes;
    if (p->mpi) { /* each rank binds its own layers; the cache is per process and not wired into the ranks yet */
        if (!p->mem_budget) return 0;
        return err_set(e, "--mem-budget: the expert cache does not run over --mpi yet (each rank holds only its layers)");
    }
    uint64_t budget = p->mem_budget;
    if (!budget) {
        /* the sessions' states with the KV types a CPU stage keeps (en->kv_k / kv_v: the options, parsed at open) */
        const uint64_t avail = mem_available(),
                       state = (uint64_t)seqstate_bytes(m, en->n_ctx, en->kv_k, en->kv_v) * (uint64_t)en->n_seq_max;
        if (avail <= MARGIN + state) return 0; /* unknown (or nothing left): run as before */
        budget = avail - MARGIN - state;
    }
    if (weights <= budget) return 0;
    if (!m->cfg.moe) {
        if (!p->mem_budget) return 0; /* a dense model bigger than memory runs from the mapping, as before */
        return err_set(e, "memory budget %.2f GiB: the weights take %.2f GiB and the model has no experts to stream",
                       (double)budget / GIB, (double)weights / GIB);
    }
    const char *dev = device_stage(p);
    if (dev) {
        /* a device's bind uploads every weight to its own memory, and its expert op is fused: no streaming */
        if (!p->mem_budget) return 0;
        return err_set(e, "memory budget %.2f GiB: the weights take %.2f GiB and the expert cache streams experts on the CPU "
                          "only, not on %s (drop --mem-budget, or run on --device cpu)",
                       (double)budget / GIB, (double)weights / GIB, dev);
    }
    CachePolicy policy;
    if (cache_policy_parse(p->cache_policy, &policy, e)) return -1;
    const uint64_t experts = model_expert_bytes(m), resident = weights - experts;
    const uint64_t slot = expert_cache_slot_bytes(m), least = slot * 2 * (uint64_t)m->cfg.n_expert_used;
    if (resident + least > budget)
        return err_set(e,
                       "memory budget %.2f GiB is too small for %s: its weights other than the experts take %.2f GiB and "
                       "the expert cache needs at least %.1f MiB more",
                       (double)budget / GIB, p->model_path, (double)resident / GIB, (double)least / (1 << 20));
    const ExpertCacheOptions o = {.slot_budget = budget - resident,
                                  .policy = policy,
                                  .predict = !p->cache_no_predict,
                                  .io_threads = p->cache_io_threads};
    if (!(en->cache = expert_cache_new(en->model, &o, e))) {
        err_prefix(e, "expert cache");
        return -1;
    }
    ExpertCacheStats st;
    expert_cache_stats(en->cache, &st);
    en->cache_info = (DlCacheStats){.budget = budget,
                                    .resident_bytes = resident,
                                    .expert_bytes = experts,
                                    .n_slots = st.n_slots,
                                    .slot_bytes = st.slot_bytes,
                                    .direct = st.direct,
                                    .io_threads = st.io_threads};
    return 0;
}

int engine_cache_attach(DlEngine *en, Err *e) {
    if (!en->cache) return 0;
    const ExpertProvider prov = expert_cache_provider(en->cache);
    for (int s = 0; s < en->n_st; s++) forward_set_expert_provider(en->st[s].fw, &prov);
    /* the weights other than the experts: read in now, then locked if the system lets us (with the usual
     * `ulimit -l` of a few MiB it does not; without swap they stay anyway unless the page cache is short) */
    for (int s = 0; s < en->n_st; s++)
        if (en->st[s].be->vt->make_resident(en->st[s].be, false, e)) return -1;
    bool locked = true;
    for (int s = 0; s < en->n_st && locked; s++) {
        Err le = {{0}};
        locked = en->st[s].be->vt->make_resident(en->st[s].be, true, &le) == 0;
    }
    en->cache_info.locked = locked;
    return 0;
}

void engine_cache_close(DlEngine *en) {
    expert_cache_free(en->cache);
    en->cache = NULL;
}

int dl_engine_cache_stats(DlEngine *en, DlCacheStats *out, bool reset) {
    if (!en || !en->cache) return -1;
    ExpertCacheStats st;
    expert_cache_stats(en->cache, &st);
    *out = en->cache_info;
    out->tokens = en->tokens;
    out->lookups = st.lookups, out->hits = st.hits, out->inflight = st.inflight, out->misses = st.misses;
    out->acquire_reads = st.acquire_reads;
    out->reads = st.reads, out->bytes_read = st.bytes_read, out->evictions = st.evictions;
    out->cancelled = st.cancelled;
    out->read_s = st.read_s, out->stall_s = st.stall_s;
    out->predicted = st.predicted, out->predicted_used = st.predicted_used;
    out->used_after_predict = st.used_after_predict;
    if (reset) {
        expert_cache_reset_stats(en->cache);
        en->tokens = 0;
    }
    return 0;
}

static double ratio(uint64_t a, uint64_t b) { return b ? (double)a / (double)b : 0; }

int engine_cache_report(DlEngine *en, char *buf, size_t cap) {
    DlCacheStats s;
    if (dl_engine_cache_stats(en, &s, false)) return 0;
    const double tok = s.tokens ? (double)s.tokens : 1;
    return snprintf(buf, cap,
                    "expert cache: budget %.2f GiB, resident %.2f GiB%s, %d slots of %.2f MiB (%.2f GiB, %.0f%% of the "
                    "experts), %s reads, %d threads\n"
                    "  %llu tokens: %.2f MiB read from disk per token (%llu reads), hit rate %.1f%% (%llu hits, %llu "
                    "in flight, %llu misses, %llu re-read), %llu evictions\n"
                    "  prediction: precision %.1f%%, recall %.1f%% (%llu predicted, %llu cancelled)\n"
                    "  stalled on reads %.3f s (%.2f ms per token), reader busy %.3f s\n",
                    s.budget / GIB, s.resident_bytes / GIB, s.locked ? " (locked)" : " (not locked)", s.n_slots,
                    s.slot_bytes / (1024.0 * 1024), (double)s.n_slots * s.slot_bytes / GIB,
                    100.0 * ratio((uint64_t)s.n_slots * s.slot_bytes, s.expert_bytes), s.direct ? "O_DIRECT" : "buffered",
                    s.io_threads, (unsigned long long)s.tokens, s.bytes_read / tok / (1024.0 * 1024),
                    (unsigned long long)s.reads, 100.0 * ratio(s.hits, s.lookups), (unsigned long long)s.hits,
                    (unsigned long long)s.inflight, (unsigned long long)s.misses, (unsigned long long)s.acquire_reads,
                    (unsigned long long)s.evictions, 100.0 * ratio(s.predicted_used, s.predicted),
                    100.0 * ratio(s.predicted_used, s.used_after_predict), (unsigned long long)s.predicted,
                    (unsigned long long)s.cancelled, s.stall_s, 1e3 * s.stall_s / tok, s.read_s);
}
