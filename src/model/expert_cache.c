/* expert_cache.c — see expert_cache.h. The slots, the (layer, expert) → slot map, the read queue and its
 * I/O threads, eviction, and the statistics.
 *
 * A slot is FREE, LOADING (queued or being read) or READY; a READY or LOADING slot belongs to one key
 * (layer·n_expert + expert). A slot in use by the current group of experts is pinned; one holding an expert
 * that a prefetch (exact or predicted) asked for and that has not been acquired yet is protected. Only
 * unpinned, unprotected, non-LOADING slots are evicted by prefetches; an acquire that finds an expert
 * missing may also take a protected slot (its expert is then read again later: counted as a reread) and,
 * when every other slot is loading, waits for a read to finish. Since a group pins at most half the slots,
 * an acquire always finds a slot. */
#include "model/expert_cache.h"

#include "gguf/gguf.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define IO_ALIGN 4096u
#define DEFAULT_IO_THREADS 8
#define MAX_IO_THREADS 64
#define GROUP 32 /* experts per acquire */

enum { S_FREE, S_LOADING, S_READY, S_FAILED };

typedef struct Slot {
    int key;          /* -1 when free */
    uint8_t state;
    bool started;     /* an I/O thread has taken its read */
    bool cancel;      /* dropped before its read started: the I/O thread frees it */
    bool protect;     /* asked for by a prefetch, not acquired yet */
    bool predicted;   /* read because of a prediction (for the statistics) */
    int pins;
    uint64_t tick;    /* last acquire */
    int err;          /* errno of a failed read */
} Slot;

typedef struct Span { /* one matrix of one layer's expert stacks in its file */
    int fd;
    uint64_t off;     /* of expert 0 */
    size_t stride, bytes;
} Span;

struct ExpertCache {
    const Model *m;
    int n_layer, n_expert, kE;
    Span (*span)[3];  /* [n_layer]: gate, up, down (zero for layers without experts) */
    size_t span_off[3], slot_bytes;
    int *fds, n_fds;
    const char **paths;
    bool direct;
    uint8_t *mem;     /* n_slots · slot_bytes */
    size_t mem_bytes;
    Slot *slots;
    int n_slots;
    int *map;         /* [n_layer·n_expert] slot or −1 */
    uint32_t *freq;   /* [n_layer·n_expert] acquires */
    uint8_t *pred;    /* [n_layer·n_expert] predicted, not yet compared */
    bool *layer_pred; /* [n_layer] a prediction is waiting for the layer's routing */
    CachePolicy policy;
    bool predict;
    uint64_t tick;
    int *pinned, n_pinned; /* the current group */
    int *fresh;       /* [n_slots] scratch: the slots an exact prefetch starts */
    /* the read queue: a ring of slot indices (each slot at most once) */
    int *q, q_head, q_len;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t threads[MAX_IO_THREADS];
    int n_threads;
    bool quit;
    ExpertCacheStats st;
};

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

int cache_policy_parse(const char *s, CachePolicy *out, Err *err) {
    if (!s || !*s || strcmp(s, "lfu") == 0) *out = CACHE_LFU; /* the default: docs/EXPERT_CACHE.md */
    else if (strcmp(s, "lru") == 0) *out = CACHE_LRU;
    else return err_set(err, "cache policy must be lru or lfu, not '%s'", s);
    return 0;
}

static const Weight *stack_of(const LayerW *l, int k) { return k == 0 ? l->gate_exps : k == 1 ? l->up_exps : l->down_exps; }

size_t expert_cache_slot_bytes(const Model *m) {
    size_t total = 0;
    for (int k = 0; k < 3; k++) {
        size_t most = 0;
        for (int il = 0; il < m->cfg.n_layer + m->n_mtp; il++) {
            const Weight *w = m->cfg.moe ? stack_of(&m->layers[il], k) : NULL;
            if (w && w->n_expert && w->bytes > most) most = w->bytes;
        }
        total += most ? round_up(most, IO_ALIGN) + IO_ALIGN : 0;
    }
    return total;
}

uint64_t model_expert_bytes(const Model *m) {
    uint64_t total = 0;
    for (int i = 0; i < m->n_weights; i++)
        if (m->weights[i].n_expert) total += (uint64_t)m->weights[i].expert_stride * (uint64_t)m->weights[i].n_expert;
    return total;
}

/* ---- the read queue and the I/O threads ------------------------------------------------------------------- */

static void q_push(ExpertCache *c, int s, bool front) {
    if (front) {
        c->q_head = (c->q_head + c->n_slots - 1) % c->n_slots;
        c->q[c->q_head] = s;
    } else {
        c->q[(c->q_head + c->q_len) % c->n_slots] = s;
    }
    c->q_len++;
    pthread_cond_signal(&c->work);
}

/* Reads [off, off + len) of fd into dst, which holds the aligned span around it; returns 0 or an errno. */
static int read_span(ExpertCache *c, int fd, uint64_t off, size_t len, uint8_t *dst, size_t *done) {
    const uint64_t a0 = off & ~(uint64_t)(IO_ALIGN - 1);
    const size_t need = (size_t)(off + len - a0), want = round_up(need, IO_ALIGN);
    size_t got = 0;
    while (got < need) {
        ssize_t r = pread(fd, dst + got, want - got, (off_t)(a0 + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) return EIO; /* the file is shorter than its tensor directory says: it changed under us */
        got += (size_t)r;
    }
    if (!c->direct) posix_fadvise(fd, (off_t)a0, (off_t)want, POSIX_FADV_DONTNEED);
    *done += got;
    return 0;
}

static void *io_main(void *arg) {
    ExpertCache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->quit && c->q_len == 0) pthread_cond_wait(&c->work, &c->mu);
        if (c->quit) break;
        const int s = c->q[c->q_head];
        c->q_head = (c->q_head + 1) % c->n_slots;
        c->q_len--;
        Slot *sl = &c->slots[s];
        if (sl->cancel) { /* a wrong prediction, dropped before its read */
            c->map[sl->key] = -1;
            *sl = (Slot){.key = -1, .state = S_FREE};
            c->st.cancelled++;
            pthread_cond_broadcast(&c->done);
            continue;
        }
        sl->started = true;
        const int layer = sl->key / c->n_expert, e = sl->key % c->n_expert;
        uint8_t *base = c->mem + (size_t)s * c->slot_bytes;
        pthread_mutex_unlock(&c->mu);
        const double t0 = now_s();
        size_t bytes = 0;
        int rc = 0;
        for (int k = 0; k < 3 && rc == 0; k++) {
            const Span *sp = &c->span[layer][k];
            rc = read_span(c, sp->fd, sp->off + (uint64_t)e * sp->stride, sp->bytes, base + c->span_off[k], &bytes);
        }
        const double dt = now_s() - t0;
        pthread_mutex_lock(&c->mu);
        sl->started = false;
        sl->state = rc ? S_FAILED : S_READY;
        sl->err = rc;
        c->st.reads++;
        c->st.bytes_read += bytes;
        c->st.read_s += dt;
        pthread_cond_broadcast(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- slots ---------------------------------------------------------------------------------------------- */

/* The slot to (re)use: a free one, else the policy's pick among the evictable ones (steal: protected ones
 * too, unprotected ones first). −1 when there is none. */
static int victim(ExpertCache *c, bool steal) {
    int best = -1;
    for (int s = 0; s < c->n_slots; s++) {
        const Slot *sl = &c->slots[s];
        if (sl->state == S_FREE || (sl->state == S_FAILED && !sl->pins)) return s;
        if (sl->state != S_READY || sl->pins || (sl->protect && !steal)) continue;
        if (best < 0) {
            best = s;
            continue;
        }
        const Slot *b = &c->slots[best];
        bool better;
        if (steal && sl->protect != b->protect) better = !sl->protect; /* an unprotected one first */
        else if (c->policy == CACHE_LFU && c->freq[sl->key] != c->freq[b->key]) better = c->freq[sl->key] < c->freq[b->key];
        else if (c->policy == CACHE_LFU) better = sl->tick > b->tick; /* ties: the most recent (a sweep streams) */
        else better = sl->tick < b->tick;
        if (better) best = s;
    }
    return best;
}

/* Gives slot s (from victim) to key, LOADING; the caller queues its read. */
static void take(ExpertCache *c, int s, int key, bool predicted) {
    Slot *sl = &c->slots[s];
    if (sl->state != S_FREE) {
        c->map[sl->key] = -1;
        c->st.evictions += sl->state == S_READY;
    }
    *sl = (Slot){.key = key, .state = S_LOADING, .protect = true, .predicted = predicted, .tick = c->tick};
    c->map[key] = s;
}

static const uint8_t *slot_matrix(const ExpertCache *c, int s, int layer, int e, int k) {
    const Span *sp = &c->span[layer][k];
    const uint64_t off = sp->off + (uint64_t)e * sp->stride;
    return c->mem + (size_t)s * c->slot_bytes + c->span_off[k] + (size_t)(off & (IO_ALIGN - 1));
}

/* ---- the provider -------------------------------------------------------------------------------------- */

/* Forgets the prediction for a layer: its slots lose their protection, queued reads are dropped. */
static void drop_prediction(ExpertCache *c, int layer, const int32_t *keep, int n_keep) {
    uint8_t *p = c->pred + (size_t)layer * c->n_expert;
    for (int i = 0; i < n_keep; i++) p[keep[i]] |= 2; /* mark the experts that stay */
    for (int e = 0; e < c->n_expert; e++) {
        if (p[e] == 1) {
            const int s = c->map[layer * c->n_expert + e];
            if (s >= 0 && !c->slots[s].pins) {
                c->slots[s].protect = false;
                if (c->slots[s].state == S_LOADING && !c->slots[s].started) c->slots[s].cancel = true;
            }
        }
        p[e] = 0;
    }
    c->layer_pred[layer] = false;
}

static void cp_prefetch(void *ctx, int layer, const int32_t *experts, int n, bool exact) {
    ExpertCache *c = ctx;
    pthread_mutex_lock(&c->mu);
    uint8_t *p = c->pred + (size_t)layer * c->n_expert;
    if (exact) {
        if (c->layer_pred[layer]) {
            for (int i = 0; i < n; i++) c->st.predicted_used += p[experts[i]] == 1;
            c->st.used_after_predict += (uint64_t)n;
            drop_prediction(c, layer, experts, n);
        }
    } else {
        if (c->layer_pred[layer]) drop_prediction(c, layer, NULL, 0);
        for (int i = 0; i < n; i++) p[experts[i]] = 1;
        c->layer_pred[layer] = true;
        c->st.predicted += (uint64_t)n;
    }
    /* protect what is here (or on its way), then read what is missing while slots are free to take */
    for (int i = 0; i < n; i++) {
        const int key = layer * c->n_expert + experts[i], s = c->map[key];
        if (s >= 0) {
            Slot *sl = &c->slots[s];
            sl->protect = true;
            if (sl->cancel) sl->cancel = false; /* wanted after all */
            if (exact) {
                if (sl->state == S_READY) c->st.hits++;
                else c->st.inflight++;
            }
        } else if (exact) {
            c->st.misses++;
        }
        if (exact) c->st.lookups++;
    }
    /* an exact list goes to the front of the queue, in its order (the first group is read first);
     * predictions go to the back */
    int n_new = 0;
    for (int i = 0; i < n; i++) {
        const int key = layer * c->n_expert + experts[i];
        if (c->map[key] >= 0) continue;
        const int s = victim(c, false);
        if (s < 0) break;
        take(c, s, key, !exact);
        if (exact) c->fresh[n_new++] = s;
        else q_push(c, s, false);
    }
    while (n_new > 0) q_push(c, c->fresh[--n_new], true);
    pthread_mutex_unlock(&c->mu);
}

static int cp_acquire(void *ctx, int layer, const int32_t *experts, int n, const void *(*data)[3], Err *err) {
    ExpertCache *c = ctx;
    pthread_mutex_lock(&c->mu);
    c->tick++;
    /* pin what is here; read what is not, at the front of the queue */
    for (int i = 0; i < n; i++) {
        const int key = layer * c->n_expert + experts[i];
        int s = c->map[key];
        while (s < 0) {
            s = victim(c, true);
            if (s >= 0) {
                take(c, s, key, false);
                q_push(c, s, true);
                c->st.acquire_reads++;
                break;
            }
            pthread_cond_wait(&c->done, &c->mu); /* every free-able slot is loading */
            s = c->map[key];
        }
        Slot *sl = &c->slots[s];
        if (sl->cancel) sl->cancel = false;
        sl->pins++;
        sl->protect = false;
        sl->tick = c->tick;
        c->freq[key]++;
        c->pinned[c->n_pinned++] = s;
    }
    /* wait for the reads */
    const double t0 = now_s();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const int s = c->pinned[c->n_pinned - n + i];
        while (c->slots[s].state == S_LOADING) pthread_cond_wait(&c->done, &c->mu);
        if (c->slots[s].state == S_FAILED)
            rc = err_set(err, "reading expert %d of layer %d from %s: %s", experts[i], layer, c->paths[0],
                         strerror(c->slots[s].err));
        for (int k = 0; k < 3 && rc == 0; k++) data[i][k] = slot_matrix(c, s, layer, experts[i], k);
    }
    c->st.stall_s += now_s() - t0;
    if (rc) { /* unpin; failed slots become free */
        for (int i = 0; i < c->n_pinned; i++) {
            Slot *sl = &c->slots[c->pinned[i]];
            if (--sl->pins == 0 && sl->state == S_FAILED) {
                c->map[sl->key] = -1;
                *sl = (Slot){.key = -1, .state = S_FREE};
            }
        }
        c->n_pinned = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void cp_release(void *ctx, int layer) {
    (void)layer;
    ExpertCache *c = ctx;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n_pinned; i++) c->slots[c->pinned[i]].pins--;
    c->n_pinned = 0;
    pthread_mutex_unlock(&c->mu);
}

ExpertProvider expert_cache_provider(ExpertCache *c) {
    /* groups of GROUP experts (at least a decode token's, at most half the slots): a prompt's layer computes
     * its first group while the next ones are read, instead of waiting for all of them */
    int group = GROUP < c->n_slots / 2 ? GROUP : c->n_slots / 2;
    if (group < c->kE) group = c->kE;
    return (ExpertProvider){c, cp_acquire, cp_release, cp_prefetch, group, c->predict};
}

/* ---- create / destroy / statistics ---------------------------------------------------------------------- */

/* Whether O_DIRECT reads work on fd (some file systems refuse them at open, others at the first read). */
static bool direct_works(int fd, void *page) { return pread(fd, page, IO_ALIGN, 0) >= 0; }

ExpertCache *expert_cache_new(Model *m, const ExpertCacheOptions *o, Err *err) {
    const ModelConfig *cf = &m->cfg;
    if (!cf->moe) return err_set(err, "the expert cache needs an MoE model"), NULL;
    if (!gguf_file_mapped(m->gguf)) return err_set(err, "the expert cache needs the model file mapped (not --no-mmap)"), NULL;
    ExpertCache *c = calloc(1, sizeof *c);
    if (!c) return err_set(err, "out of memory"), NULL;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    c->m = m;
    c->n_layer = cf->n_layer + m->n_mtp; /* the trunk and the MTP blocks (model.h: layers) */
    c->n_expert = cf->n_expert;
    c->kE = cf->n_expert_used;
    c->policy = o->policy;
    c->predict = o->predict;
    c->n_fds = gguf_n_splits(m->gguf);
    c->fds = malloc(sizeof *c->fds * (size_t)c->n_fds);
    c->paths = calloc((size_t)c->n_fds, sizeof *c->paths);
    c->span = calloc((size_t)c->n_layer, sizeof *c->span);
    const size_t keys = (size_t)c->n_layer * (size_t)c->n_expert;
    c->map = malloc(sizeof *c->map * keys);
    c->freq = calloc(keys, sizeof *c->freq);
    c->pred = calloc(keys, 1);
    c->layer_pred = calloc((size_t)c->n_layer, sizeof *c->layer_pred);
    if (!c->fds || !c->paths || !c->span || !c->map || !c->freq || !c->pred || !c->layer_pred) goto oom;
    for (size_t i = 0; i < keys; i++) c->map[i] = -1;
    for (int i = 0; i < c->n_fds; i++) c->fds[i] = -1;

    /* the files: O_DIRECT where it works */
    void *page = NULL;
    if (posix_memalign(&page, IO_ALIGN, IO_ALIGN)) goto oom;
    c->direct = !o->buffered;
    for (int i = 0; i < c->n_fds; i++) {
        c->paths[i] = gguf_split_path(m->gguf, i);
        int fd = c->direct ? open(c->paths[i], O_RDONLY | O_DIRECT | O_CLOEXEC) : -1;
        if (fd >= 0 && !direct_works(fd, page)) close(fd), fd = -1;
        if (fd < 0) {
            c->direct = false;
            fd = open(c->paths[i], O_RDONLY | O_CLOEXEC);
        }
        if (fd < 0) {
            free(page);
            err_set(err, "cannot open %s for the expert cache: %s", c->paths[i], strerror(errno));
            expert_cache_free(c);
            return NULL;
        }
        c->fds[i] = fd;
    }
    free(page);
    if (!c->direct) /* one kind of read for every part */
        for (int i = 0; i < c->n_fds; i++) fcntl(c->fds[i], F_SETFL, fcntl(c->fds[i], F_GETFL) & ~O_DIRECT);

    /* where each layer's stacks are in their files, and the slot layout */
    for (int k = 0, at = 0; k < 3; k++) {
        size_t most = 0;
        for (int il = 0; il < c->n_layer; il++) {
            const Weight *w = stack_of(&m->layers[il], k);
            if (!w || !w->n_expert) continue;
            int split = -1;
            for (int s = 0; s < c->n_fds && split < 0; s++) {
                const void *base;
                size_t size;
                gguf_split_mapping(m->gguf, s, &base, &size);
                if ((const uint8_t *)w->host >= (const uint8_t *)base && (const uint8_t *)w->host < (const uint8_t *)base + size)
                    split = s;
                if (split == s) c->span[il][k].off = (uint64_t)((const uint8_t *)w->host - (const uint8_t *)base);
            }
            if (split < 0) {
                err_set(err, "expert cache: %s is not in the file mapping", w->name);
                expert_cache_free(c);
                return NULL;
            }
            c->span[il][k].fd = c->fds[split];
            c->span[il][k].stride = w->expert_stride;
            c->span[il][k].bytes = w->bytes;
            if (w->bytes > most) most = w->bytes;
        }
        c->span_off[k] = (size_t)at;
        at += (int)(most ? round_up(most, IO_ALIGN) + IO_ALIGN : 0);
        c->slot_bytes = (size_t)at;
    }
    const uint64_t n_slots = c->slot_bytes ? o->slot_budget / c->slot_bytes : 0;
    if (n_slots < (uint64_t)(2 * c->kE)) {
        err_set(err, "room for %llu expert slots of %.2f MiB; the cache needs at least %d (%.1f MiB)",
                (unsigned long long)n_slots, (double)c->slot_bytes / (1 << 20), 2 * c->kE,
                (double)c->slot_bytes * 2 * c->kE / (1 << 20));
        expert_cache_free(c);
        return NULL;
    }
    c->n_slots = n_slots > (uint64_t)keys ? (int)keys : (int)n_slots;
    c->mem_bytes = (size_t)c->n_slots * c->slot_bytes;
    c->mem = mmap(NULL, c->mem_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (c->mem == MAP_FAILED) {
        c->mem = NULL;
        err_set(err, "out of memory for %d expert slots (%zu MiB)", c->n_slots, c->mem_bytes >> 20);
        expert_cache_free(c);
        return NULL;
    }
    c->slots = calloc((size_t)c->n_slots, sizeof *c->slots);
    c->pinned = malloc(sizeof *c->pinned * (size_t)c->n_slots);
    c->q = malloc(sizeof *c->q * (size_t)c->n_slots);
    c->fresh = malloc(sizeof *c->fresh * (size_t)c->n_slots);
    if (!c->slots || !c->pinned || !c->q || !c->fresh) goto oom;
    for (int s = 0; s < c->n_slots; s++) c->slots[s].key = -1;
    const int nt = o->io_threads > 0 ? (o->io_threads < MAX_IO_THREADS ? o->io_threads : MAX_IO_THREADS) : DEFAULT_IO_THREADS;
    for (int i = 0; i < nt; i++) {
        if (pthread_create(&c->threads[i], NULL, io_main, c) != 0) {
            err_set(err, "cannot start the expert cache's I/O threads");
            expert_cache_free(c);
            return NULL;
        }
        c->n_threads = i + 1;
    }
    for (int il = 0; il < c->n_layer; il++)
        for (int k = 0; k < 3; k++) {
            Weight *w = (Weight *)stack_of(&m->layers[il], k);
            if (w && w->n_expert) w->streamed = true;
        }
    expert_cache_reset_stats(c);
    return c;
oom:
    err_set(err, "out of memory");
    expert_cache_free(c);
    return NULL;
}

void expert_cache_free(ExpertCache *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->quit = true;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->n_threads; i++) pthread_join(c->threads[i], NULL);
    for (int i = 0; c->fds && i < c->n_fds; i++)
        if (c->fds[i] >= 0) close(c->fds[i]);
    if (c->mem) munmap(c->mem, c->mem_bytes);
    for (int il = 0; c->m && il < c->n_layer && c->span; il++) /* the model's stacks are its own again */
        for (int k = 0; k < 3; k++) {
            Weight *w = (Weight *)stack_of(&c->m->layers[il], k);
            if (w) w->streamed = false;
        }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->done);
    free(c->fds), free(c->paths), free(c->span), free(c->map), free(c->freq), free(c->pred), free(c->layer_pred);
    free(c->slots), free(c->pinned), free(c->q), free(c->fresh);
    free(c);
}

void expert_cache_stats(ExpertCache *c, ExpertCacheStats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    pthread_mutex_unlock(&c->mu);
}

void expert_cache_reset_stats(ExpertCache *c) {
    pthread_mutex_lock(&c->mu);
    c->st = (ExpertCacheStats){.n_slots = c->n_slots, .io_threads = c->n_threads, .slot_bytes = c->slot_bytes,
                               .direct = c->direct};
    pthread_mutex_unlock(&c->mu);
}
