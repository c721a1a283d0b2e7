/* prefix_cache.c — see prefix_cache.h.
 *
 * RAM: entries in a hash table keyed by (key, pos) and on an LRU list; each holds a copy of its tokens
 * and a reference-counted blob with the snapshot (the disk writer holds its own reference while it
 * writes, so eviction never frees data in use).
 * Disk: an index of valid files (key, pos, size, last use) filled by the start-up scan and by the writer;
 * loading a file re-checks the header, the body checksum and the tokens. */
#include "server/prefix_cache.h"

#include "server/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Blob {
    atomic_int refs;
    size_t size;
    void *data;
} Blob;

static Blob *blob_new(void *data, size_t size) {
    Blob *b = malloc(sizeof *b);
    if (!b) return NULL;
    atomic_init(&b->refs, 1);
    b->size = size;
    b->data = data;
    return b;
}
static void blob_ref(Blob *b) { atomic_fetch_add(&b->refs, 1); }
static void blob_unref(Blob *b) {
    if (b && atomic_fetch_sub(&b->refs, 1) == 1) {
        free(b->data);
        free(b);
    }
}

typedef struct Entry {
    uint64_t key;
    size_t pos;
    int32_t *tokens;
    Blob *blob;
    bool exact;                  /* pcache_store_exact: any position, RAM only, found by pcache_lookup_exact */
    struct Entry *hnext;         /* hash chain */
    struct Entry *prev, *next;   /* LRU list: head = most recent */
} Entry;

typedef struct DiskEntry {
    uint64_t key;
    size_t pos;
    uint64_t bytes;
    uint64_t last_use;
    char *path;
} DiskEntry;

typedef struct WriteJob {
    uint64_t key;
    size_t pos;
    int32_t *tokens;
    Blob *blob;
    struct WriteJob *next;
} WriteJob;

#define NBUCKETS 4096u
#define CKPT_MAGIC "DLCKPT\0\1"
#define CKPT_VERSION 1u
#define WRITE_QUEUE_MAX_BYTES ((size_t)2 << 30)

typedef struct CkptHeader {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    uint64_t fingerprint[2];
    uint64_t key;
    uint64_t n_tokens;
    uint64_t data_bytes;
    uint64_t body_sum;
    uint64_t header_sum; /* hash64 of everything above */
} CkptHeader;

struct PrefixCache {
    PrefixCacheConfig cfg;
    char *dir;
    pthread_mutex_t mu;
    pthread_cond_t cv, idle_cv;
    Entry *buckets[NBUCKETS];
    Entry *lru_head, *lru_tail;
    size_t ram_entries, ram_bytes;
    DiskEntry *disk;
    size_t n_disk, cap_disk;
    uint64_t disk_bytes, use_clock;
    WriteJob *wq_head, *wq_tail;
    size_t wq_bytes;
    bool writing, stop;
    pthread_t writer;
    bool writer_started;
    PcacheStats st;
};

static size_t bucket_of(uint64_t key, size_t pos) { return (size_t)((key ^ (pos * 0x9E3779B97F4A7C15ull)) % NBUCKETS); }

static size_t entry_bytes(const Entry *e) { return e->blob->size + e->pos * sizeof(int32_t) + sizeof *e; }

/* ------------------------------------------------------------------------------------------ RAM */

static Entry *ram_find(PrefixCache *pc, uint64_t key, size_t pos) {
    for (Entry *e = pc->buckets[bucket_of(key, pos)]; e; e = e->hnext)
        if (e->key == key && e->pos == pos) return e;
    return NULL;
}

static void lru_unlink(PrefixCache *pc, Entry *e) {
    if (e->prev) e->prev->next = e->next;
    else pc->lru_head = e->next;
    if (e->next) e->next->prev = e->prev;
    else pc->lru_tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_push_front(PrefixCache *pc, Entry *e) {
    e->prev = NULL;
    e->next = pc->lru_head;
    if (pc->lru_head) pc->lru_head->prev = e;
    pc->lru_head = e;
    if (!pc->lru_tail) pc->lru_tail = e;
}

static void ram_remove(PrefixCache *pc, Entry *e) {
    Entry **pp = &pc->buckets[bucket_of(e->key, e->pos)];
    while (*pp != e) pp = &(*pp)->hnext;
    *pp = e->hnext;
    lru_unlink(pc, e);
    pc->ram_entries--;
    pc->ram_bytes -= entry_bytes(e);
    blob_unref(e->blob);
    free(e->tokens);
    free(e);
}

static void ram_evict_to(PrefixCache *pc, size_t budget) {
    while (pc->lru_tail && pc->ram_bytes > budget) {
        ram_remove(pc, pc->lru_tail);
        pc->st.evictions++;
    }
}

/* Inserts (tokens copied; blob reference taken over). Returns the entry or NULL when it cannot be kept. */
static Entry *ram_insert(PrefixCache *pc, const int32_t *tokens, size_t pos, uint64_t key, Blob *blob) {
    Entry *e = calloc(1, sizeof *e);
    int32_t *tk = malloc(pos * sizeof *tk + 1);
    if (!e || !tk) {
        free(e);
        free(tk);
        blob_unref(blob);
        return NULL;
    }
    memcpy(tk, tokens, pos * sizeof *tk);
    *e = (Entry){.key = key, .pos = pos, .tokens = tk, .blob = blob};
    if (entry_bytes(e) > pc->cfg.ram_bytes) {
        blob_unref(blob);
        free(tk);
        free(e);
        return NULL;
    }
    ram_evict_to(pc, pc->cfg.ram_bytes - entry_bytes(e));
    size_t b = bucket_of(key, pos);
    e->hnext = pc->buckets[b];
    pc->buckets[b] = e;
    lru_push_front(pc, e);
    pc->ram_entries++;
    pc->ram_bytes += entry_bytes(e);
    return e;
}

/* ------------------------------------------------------------------------------------------ disk */

static DiskEntry *disk_find(PrefixCache *pc, uint64_t key, size_t pos) {
    for (size_t i = 0; i < pc->n_disk; i++)
        if (pc->disk[i].key == key && pc->disk[i].pos == pos) return &pc->disk[i];
    return NULL;
}

static void disk_drop(PrefixCache *pc, DiskEntry *d, bool unlink_file) {
    if (unlink_file) unlink(d->path);
    pc->disk_bytes -= d->bytes;
    free(d->path);
    *d = pc->disk[--pc->n_disk];
}

static int disk_add(PrefixCache *pc, uint64_t key, size_t pos, uint64_t bytes, uint64_t last_use, const char *path) {
    if (pc->n_disk == pc->cap_disk) {
        size_t cap = pc->cap_disk ? pc->cap_disk * 2 : 64;
        DiskEntry *d = realloc(pc->disk, cap * sizeof *d);
        if (!d) return -1;
        pc->disk = d;
        pc->cap_disk = cap;
    }
    char *p = strdup(path);
    if (!p) return -1;
    pc->disk[pc->n_disk++] = (DiskEntry){key, pos, bytes, last_use, p};
    pc->disk_bytes += bytes;
    return 0;
}

static void disk_evict_to(PrefixCache *pc, uint64_t budget) {
    while (pc->n_disk && pc->disk_bytes > budget) {
        size_t lru = 0;
        for (size_t i = 1; i < pc->n_disk; i++)
            if (pc->disk[i].last_use < pc->disk[lru].last_use) lru = i;
        srv_log(LOG_DEBUG, "prefix cache: disk budget: removing %s", pc->disk[lru].path);
        disk_drop(pc, &pc->disk[lru], true);
    }
}

/* DIR/<model and settings>-<key>-<pos>.dlckpt: fingerprint[1] hashes the model's fingerprint with the settings,
 * so servers of other settings (another arithmetic or cache type) on one directory keep apart files rather than
 * overwrite each other's */
static void file_name(const PrefixCache *pc, uint64_t key, size_t pos, char *out, size_t cap) {
    snprintf(out, cap, "%s/%08llx-%016llx-%zu.dlckpt", pc->dir, (unsigned long long)(pc->cfg.fingerprint[1] >> 32),
             (unsigned long long)key, pos);
}

static uint64_t header_sum(const CkptHeader *h) { return hash64(h, offsetof(CkptHeader, header_sum), 0x48445253); }

static uint64_t body_sum(const int32_t *tokens, size_t n, const void *data, size_t size) {
    return hash64(data, size, hash64(tokens, n * sizeof *tokens, 0x424f4459));
}

/* Reads and checks a header: 0 valid, 1 stale (another model/settings/version), -1 corrupt. */
static int check_header(FILE *f, const uint64_t fp[2], CkptHeader *h, uint64_t file_size) {
    if (fread(h, sizeof *h, 1, f) != 1) return -1;
    if (memcmp(h->magic, CKPT_MAGIC, 8) != 0) return -1;
    if (h->version != CKPT_VERSION || h->header_bytes != sizeof *h) return 1;
    if (h->header_sum != header_sum(h)) return -1;
    if (h->fingerprint[0] != fp[0] || h->fingerprint[1] != fp[1]) return 1;
    if (h->n_tokens > (uint64_t)1 << 32 || h->data_bytes > file_size ||
        sizeof *h + h->n_tokens * 4 + h->data_bytes != file_size)
        return -1;
    return 0;
}

static int read_header(FILE *f, const PrefixCache *pc, CkptHeader *h, uint64_t file_size) {
    return check_header(f, pc->cfg.fingerprint, h, file_size);
}

/* Opens a checkpoint file for reading only when it is a regular file: a FIFO would block open() (and the
 * start-up with it), a device or a symlink has no business in the directory. lstat first, then open
 * without following links and without blocking, then check again on the descriptor (the name may have
 * been swapped in between). NULL with *why set otherwise. */
static FILE *open_regular(const char *path, struct stat *sb, const char **why) {
    struct stat ls;
    *why = "cannot be read";
    if (lstat(path, &ls) != 0) return NULL;
    if (!S_ISREG(ls.st_mode)) {
        *why = "is not a regular file";
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode) || sb->st_ino != ls.st_ino || sb->st_dev != ls.st_dev) {
        *why = "is not a regular file";
        close(fd);
        return NULL;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) close(fd);
    return f;
}

/* A temporary file "NAME.dlckpt.tmp<pid>" whose writer is gone (a server killed while writing): deleted, so
 * that crashes do not leave files that nothing counts against the disk budget. One whose process still runs
 * (another server on the same directory, writing now) is left alone. Returns whether name was such a file. */
static bool orphan_tmp(PrefixCache *pc, const char *name) {
    const char *t = strstr(name, ".dlckpt.tmp");
    if (!t || t == name) return false;
    const char *digits = t + 11;
    char *end = NULL;
    long pid = strtol(digits, &end, 10);
    if (end == digits || *end || pid <= 0) return false;
    if (pid != (long)getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)) return true; /* still writing */
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", pc->dir, name);
    struct stat sb;
    if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return true;
    if (unlink(path) == 0) {
        pc->st.orphans_removed++;
        srv_log(LOG_WARN, "prefix cache: removed %s (%llu bytes), left by a writer that did not finish", path,
                (unsigned long long)sb.st_size);
    }
    return true;
}

static void scan_dir(PrefixCache *pc) {
    DIR *d = opendir(pc->dir);
    if (!d) return;
    size_t stale = 0, corrupt = 0, valid = 0;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (orphan_tmp(pc, de->d_name)) continue;
        if (n < 8 || strcmp(de->d_name + n - 7, ".dlckpt") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", pc->dir, de->d_name);
        struct stat sb;
        const char *why;
        FILE *f = open_regular(path, &sb, &why);
        if (!f) {
            pc->st.ignored_files++;
            srv_log(LOG_WARN, "prefix cache: ignoring %s: it %s", path, why);
            continue;
        }
        CkptHeader h;
        int rc = read_header(f, pc, &h, (uint64_t)sb.st_size);
        fclose(f);
        if (rc < 0) {
            corrupt++;
            srv_log(LOG_WARN, "prefix cache: ignoring corrupt checkpoint file %s", path);
        } else if (rc > 0) {
            stale++;
            srv_log(LOG_DEBUG, "prefix cache: ignoring stale checkpoint file %s (another model or settings)", path);
        } else if (!disk_find(pc, h.key, (size_t)h.n_tokens)) {
            disk_add(pc, h.key, (size_t)h.n_tokens, (uint64_t)sb.st_size, (uint64_t)sb.st_mtime, path);
            valid++;
        }
    }
    closedir(d);
    pc->st.ignored_files += stale + corrupt;
    if (stale)
        srv_log(LOG_WARN, "prefix cache: ignoring %zu stale checkpoint file(s) in %s (another model, version or "
                          "settings)", stale, pc->dir);
    /* the clock continues after the newest file so that uses during this run count as newer */
    for (size_t i = 0; i < pc->n_disk; i++)
        if (pc->disk[i].last_use > pc->use_clock) pc->use_clock = pc->disk[i].last_use;
    if (valid) srv_log(LOG_INFO, "prefix cache: %zu checkpoint file(s) usable in %s", valid, pc->dir);
    disk_evict_to(pc, pc->cfg.disk_bytes);
}

/* Writes a checkpoint file: to path.tmp<pid>, then renamed (a reader never sees half a file). */
static bool write_ckpt(const uint64_t fp[2], const char *path, uint64_t key, const int32_t *tokens, size_t pos,
                       const void *data, size_t size) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
    CkptHeader h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.header_bytes = sizeof h;
    h.fingerprint[0] = fp[0];
    h.fingerprint[1] = fp[1];
    h.key = key;
    h.n_tokens = pos;
    h.data_bytes = size;
    h.body_sum = body_sum(tokens, pos, data, size);
    h.header_sum = header_sum(&h);
    FILE *f = fopen(tmp, "wb");
    bool ok = f && fwrite(&h, sizeof h, 1, f) == 1 && (pos == 0 || fwrite(tokens, sizeof(int32_t), pos, f) == pos) &&
              fwrite(data, 1, size, f) == size;
    if (f && fclose(f) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        int saved = errno;
        unlink(tmp);
        errno = saved;
    }
    return ok;
}

static bool write_file(PrefixCache *pc, const WriteJob *w, char *path, size_t cap) {
    file_name(pc, w->key, w->pos, path, cap);
    bool ok = write_ckpt(pc->cfg.fingerprint, path, w->key, w->tokens, w->pos, w->blob->data, w->blob->size);
    if (!ok) srv_log(LOG_WARN, "prefix cache: cannot write %s: %s", path, strerror(errno));
    return ok;
}

int pcache_file_write(const uint64_t fingerprint[2], const char *path, const int32_t *tokens, size_t n,
                      const void *data, size_t size, Err *err) {
    uint64_t key = hash64(tokens, n * sizeof *tokens, 0x534c4f54);
    if (!write_ckpt(fingerprint, path, key, tokens, n, data, size))
        return err_set(err, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

int pcache_file_read(const uint64_t fingerprint[2], const char *path, int32_t **tokens, size_t *n, void **data,
                     size_t *size, Err *err) {
    *tokens = NULL, *data = NULL, *n = *size = 0;
    struct stat sb;
    const char *why;
    FILE *f = open_regular(path, &sb, &why);
    if (!f) return err_set(err, "%s %s", path, errno == ENOENT ? "does not exist" : why);
    CkptHeader h;
    int rc = check_header(f, fingerprint, &h, (uint64_t)sb.st_size);
    int32_t *tk = NULL;
    void *d = NULL;
    if (rc > 0) why = "was saved by another model or with other settings";
    else if (rc < 0) why = "is not a checkpoint file (bad header)";
    else if (!(tk = malloc(h.n_tokens * sizeof *tk + 1)) || !(d = malloc(h.data_bytes ? h.data_bytes : 1)))
        why = "does not fit in memory";
    else if ((h.n_tokens && fread(tk, sizeof *tk, h.n_tokens, f) != h.n_tokens) || fread(d, 1, h.data_bytes, f) != h.data_bytes)
        why = "is truncated";
    else if (body_sum(tk, h.n_tokens, d, h.data_bytes) != h.body_sum)
        why = "fails its checksum";
    else
        why = NULL;
    fclose(f);
    if (why) {
        free(tk);
        free(d);
        return err_set(err, "%s %s", path, why);
    }
    *tokens = tk, *n = h.n_tokens, *data = d, *size = h.data_bytes;
    return 0;
}

static void *writer_main(void *arg) {
    PrefixCache *pc = arg;
    pthread_mutex_lock(&pc->mu);
    for (;;) {
        while (!pc->wq_head && !pc->stop) pthread_cond_wait(&pc->cv, &pc->mu);
        if (!pc->wq_head) break;
        WriteJob *w = pc->wq_head;
        pc->wq_head = w->next;
        if (!pc->wq_head) pc->wq_tail = NULL;
        pc->writing = true;
        pthread_mutex_unlock(&pc->mu);
        char path[4096];
        bool ok = write_file(pc, w, path, sizeof path);
        pthread_mutex_lock(&pc->mu);
        pc->wq_bytes -= w->blob->size;
        pc->writing = false;
        if (ok) {
            uint64_t bytes = sizeof(CkptHeader) + w->pos * 4 + w->blob->size;
            DiskEntry *old = disk_find(pc, w->key, w->pos);
            if (old) disk_drop(pc, old, false);
            disk_add(pc, w->key, w->pos, bytes, ++pc->use_clock, path);
            pc->st.disk_writes++;
            disk_evict_to(pc, pc->cfg.disk_bytes);
        } else {
            pc->st.disk_errors++;
        }
        blob_unref(w->blob);
        free(w->tokens);
        free(w);
        if (!pc->wq_head) pthread_cond_broadcast(&pc->idle_cv);
    }
    pthread_cond_broadcast(&pc->idle_cv);
    pthread_mutex_unlock(&pc->mu);
    return NULL;
}

/* Loads a disk checkpoint and checks it against tokens; NULL (with a warning) when it does not verify. */
static Blob *disk_load(PrefixCache *pc, DiskEntry *d, const int32_t *tokens) {
    struct stat sb;
    CkptHeader h;
    Blob *blob = NULL;
    int32_t *tk = NULL;
    void *data = NULL;
    const char *why;
    FILE *f = open_regular(d->path, &sb, &why);
    if (f) {
        int rc = read_header(f, pc, &h, (uint64_t)sb.st_size);
        if (rc != 0 || h.key != d->key || h.n_tokens != d->pos) {
            why = rc > 0 ? "is stale" : "has a corrupt header";
        } else {
            tk = malloc(d->pos * sizeof *tk + 1);
            data = malloc(h.data_bytes ? h.data_bytes : 1);
            if (!tk || !data) {
                why = "does not fit in memory";
            } else if ((d->pos && fread(tk, sizeof *tk, d->pos, f) != d->pos) ||
                       fread(data, 1, h.data_bytes, f) != h.data_bytes) {
                why = "is truncated";
            } else if (body_sum(tk, d->pos, data, h.data_bytes) != h.body_sum) {
                why = "fails its checksum";
            } else if (memcmp(tk, tokens, d->pos * sizeof *tk) != 0) {
                why = NULL; /* a hash collision: valid file, other tokens */
                free(data);
                data = NULL;
            } else if ((blob = blob_new(data, h.data_bytes))) {
                data = NULL;
            }
        }
    }
    if (f) fclose(f);
    free(tk);
    free(data);
    if (!blob && why) {
        srv_log(LOG_WARN, "prefix cache: ignoring checkpoint file %s: it %s", d->path, why);
        pc->st.disk_errors++;
        pc->st.ignored_files++;
        disk_drop(pc, d, false);
    }
    return blob;
}

/* ------------------------------------------------------------------------------------------ API */

PrefixCache *pcache_new(const PrefixCacheConfig *cfg, Err *err) {
    PrefixCache *pc = calloc(1, sizeof *pc);
    if (!pc) return err_set(err, "out of memory"), NULL;
    pc->cfg = *cfg;
    pthread_mutex_init(&pc->mu, NULL);
    pthread_cond_init(&pc->cv, NULL);
    pthread_cond_init(&pc->idle_cv, NULL);
    if (cfg->dir) {
        if (!(pc->dir = strdup(cfg->dir))) {
            pcache_free(pc);
            return err_set(err, "out of memory"), NULL;
        }
        if (mkdir(pc->dir, 0700) != 0 && errno != EEXIST) {
            err_set(err, "cannot create the state directory %s: %s", pc->dir, strerror(errno));
            pcache_free(pc);
            return NULL;
        }
        struct stat ds;
        if (stat(pc->dir, &ds) != 0 || !S_ISDIR(ds.st_mode)) {
            err_set(err, "the state directory %s is not a directory", pc->dir);
            pcache_free(pc);
            return NULL;
        }
        if (access(pc->dir, R_OK | W_OK | X_OK) != 0) {
            err_set(err, "the state directory %s is not writable: %s", pc->dir, strerror(errno));
            pcache_free(pc);
            return NULL;
        }
        scan_dir(pc);
        if (pthread_create(&pc->writer, NULL, writer_main, pc) != 0) {
            pcache_free(pc);
            return err_set(err, "cannot start the checkpoint writer thread"), NULL;
        }
        pc->writer_started = true;
    }
    return pc;
}

void pcache_flush(PrefixCache *pc) {
    pthread_mutex_lock(&pc->mu);
    while (pc->writer_started && (pc->wq_head || pc->writing)) pthread_cond_wait(&pc->idle_cv, &pc->mu);
    pthread_mutex_unlock(&pc->mu);
}

void pcache_free(PrefixCache *pc) {
    if (!pc) return;
    if (pc->writer_started) {
        pthread_mutex_lock(&pc->mu);
        pc->stop = true;
        pthread_cond_broadcast(&pc->cv);
        pthread_mutex_unlock(&pc->mu);
        pthread_join(pc->writer, NULL);
    }
    while (pc->lru_head) ram_remove(pc, pc->lru_head);
    while (pc->n_disk) disk_drop(pc, &pc->disk[pc->n_disk - 1], false);
    free(pc->disk);
    free(pc->dir);
    pthread_cond_destroy(&pc->cv);
    pthread_cond_destroy(&pc->idle_cv);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

void pcache_prefix_keys(const int32_t *tokens, size_t n, int chunk, uint64_t *keys) {
    uint64_t h = 0x70726566ull; /* "pref" */
    for (size_t i = 0; (i + 1) * (size_t)chunk <= n; i++) {
        h = hash64(tokens + i * (size_t)chunk, (size_t)chunk * sizeof *tokens, h);
        keys[i] = h;
    }
}

static void touch_disk(PrefixCache *pc, DiskEntry *d) {
    d->last_use = ++pc->use_clock;
}

bool pcache_lookup(PrefixCache *pc, const int32_t *tokens, int chunk, const uint64_t *keys, size_t max_pos,
                   PcacheHit *hit) {
    memset(hit, 0, sizeof *hit);
    pthread_mutex_lock(&pc->mu);
    size_t nb = max_pos / (size_t)chunk;
    Entry *found = NULL;
    Blob *blob = NULL;
    size_t at = 0;
    for (size_t i = nb; i > 0 && !blob; i--) {
        size_t pos = i * (size_t)chunk;
        Entry *e = ram_find(pc, keys[i - 1], pos);
        if (e && memcmp(e->tokens, tokens, pos * sizeof *tokens) == 0) {
            found = e;
            blob = e->blob;
            blob_ref(blob);
            at = i;
            pc->st.hits_ram++;
            break;
        }
        DiskEntry *d = pc->dir ? disk_find(pc, keys[i - 1], pos) : NULL;
        if (d && (blob = disk_load(pc, d, tokens))) {
            touch_disk(pc, d);
            at = i;
            pc->st.hits_disk++;
            hit->from_disk = true;
            /* keep it in RAM too (the RAM entry takes one reference, the hit another) */
            blob_ref(blob);
            found = ram_insert(pc, tokens, pos, keys[i - 1], blob);
        }
    }
    if (!blob) {
        pc->st.misses++;
        pthread_mutex_unlock(&pc->mu);
        return false;
    }
    /* the shorter checkpoints of this prefix are used too: refresh them (shortest first, so the hit ends
       up most recent) */
    for (size_t i = 1; i < at; i++) {
        size_t pos = i * (size_t)chunk;
        Entry *e = ram_find(pc, keys[i - 1], pos);
        if (e && memcmp(e->tokens, tokens, pos * sizeof *tokens) == 0) {
            lru_unlink(pc, e);
            lru_push_front(pc, e);
        }
        DiskEntry *d = pc->dir ? disk_find(pc, keys[i - 1], pos) : NULL;
        if (d) touch_disk(pc, d);
    }
    if (found) {
        lru_unlink(pc, found);
        lru_push_front(pc, found);
    }
    DiskEntry *d = pc->dir ? disk_find(pc, keys[at - 1], at * (size_t)chunk) : NULL;
    if (d) touch_disk(pc, d);
    hit->pos = at * (size_t)chunk;
    hit->data = blob->data;
    hit->size = blob->size;
    hit->blob_ = blob;
    pthread_mutex_unlock(&pc->mu);
    return true;
}

void pcache_release(PrefixCache *pc, PcacheHit *hit) {
    (void)pc;
    if (hit->blob_) blob_unref(hit->blob_);
    memset(hit, 0, sizeof *hit);
}

bool pcache_contains(PrefixCache *pc, uint64_t key, size_t pos) {
    pthread_mutex_lock(&pc->mu);
    bool in = ram_find(pc, key, pos) || (pc->dir && disk_find(pc, key, pos));
    pthread_mutex_unlock(&pc->mu);
    return in;
}

void pcache_store(PrefixCache *pc, const int32_t *tokens, size_t pos, uint64_t key, void *data, size_t size) {
    Blob *blob = blob_new(data, size);
    if (!blob) {
        free(data);
        return;
    }
    pthread_mutex_lock(&pc->mu);
    pc->st.stores++;
    Entry *old = ram_find(pc, key, pos);
    if (old) ram_remove(pc, old);
    if (pc->dir && !disk_find(pc, key, pos) && pc->wq_bytes + size <= WRITE_QUEUE_MAX_BYTES) {
        WriteJob *w = calloc(1, sizeof *w);
        int32_t *tk = malloc(pos * sizeof *tk + 1);
        if (w && tk) {
            memcpy(tk, tokens, pos * sizeof *tk);
            blob_ref(blob);
            *w = (WriteJob){key, pos, tk, blob, NULL};
            if (pc->wq_tail) pc->wq_tail->next = w;
            else pc->wq_head = w;
            pc->wq_tail = w;
            pc->wq_bytes += size;
            pthread_cond_signal(&pc->cv);
        } else {
            free(w);
            free(tk);
        }
    }
    ram_insert(pc, tokens, pos, key, blob); /* takes the creation reference */
    pthread_mutex_unlock(&pc->mu);
}

static uint64_t exact_key(const int32_t *tokens, size_t pos) {
    return hash64(tokens, pos * sizeof *tokens, 0x6578616374ull); /* "exact" */
}

void pcache_store_exact(PrefixCache *pc, const int32_t *tokens, size_t pos, void *data, size_t size) {
    Blob *blob = pos ? blob_new(data, size) : NULL;
    if (!blob) {
        free(data);
        return;
    }
    const uint64_t key = exact_key(tokens, pos);
    pthread_mutex_lock(&pc->mu);
    pc->st.stores++;
    Entry *old = ram_find(pc, key, pos);
    if (old) ram_remove(pc, old);
    Entry *e = ram_insert(pc, tokens, pos, key, blob);
    if (e) e->exact = true;
    pthread_mutex_unlock(&pc->mu);
}

bool pcache_lookup_exact(PrefixCache *pc, const int32_t *tokens, size_t min_pos, size_t max_pos, PcacheHit *hit) {
    memset(hit, 0, sizeof *hit);
    pthread_mutex_lock(&pc->mu);
    Entry *best = NULL;
    for (Entry *e = pc->lru_head; e; e = e->next)
        if (e->exact && e->pos > min_pos && e->pos <= max_pos && (!best || e->pos > best->pos) &&
            memcmp(e->tokens, tokens, e->pos * sizeof *tokens) == 0)
            best = e;
    if (best) {
        pc->st.hits_ram++;
        lru_unlink(pc, best);
        lru_push_front(pc, best);
        blob_ref(best->blob);
        *hit = (PcacheHit){.pos = best->pos, .data = best->blob->data, .size = best->blob->size, .blob_ = best->blob};
    }
    pthread_mutex_unlock(&pc->mu);
    return best != NULL;
}

void pcache_stats(PrefixCache *pc, PcacheStats *st) {
    pthread_mutex_lock(&pc->mu);
    *st = pc->st;
    st->ram_entries = pc->ram_entries;
    st->ram_bytes = pc->ram_bytes;
    st->disk_entries = pc->n_disk;
    st->disk_bytes = pc->disk_bytes;
    pthread_mutex_unlock(&pc->mu);
}
