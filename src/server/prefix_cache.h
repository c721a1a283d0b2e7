/* prefix_cache.h — checkpoints of sessions at token-prefix boundaries, in RAM (LRU within a byte budget)
 * and optionally on disk, so a request whose prompt starts with a known prefix resumes from it instead of
 * recomputing it (a recurrent state cannot be rolled back, only restored).
 *
 * A checkpoint is a session snapshot (dl_session_snapshot: recurrent state, KV rows, position, last
 * logits) taken right after the prefill reached position pos, together with the tokens [0, pos) it
 * stands for. Its key is (pos, hash of those tokens); a hit is always confirmed by comparing the stored
 * tokens, so a hash collision can never restore a wrong state.
 *
 * Disk (optional): every checkpoint stored in RAM is also written, by a background thread, to
 * DIR/<model>-<key>-<pos>.dlckpt (written to a temporary name, then renamed). Files carry a header with
 * a fingerprint of the model and of the settings that affect the arithmetic, a header checksum and a
 * checksum of tokens + snapshot. At start the directory is scanned: files of another model or settings
 * (stale) and files with a bad header (corrupt) are ignored with a warning; a body that fails its
 * checksum when loaded is ignored with a warning too. The disk has its own byte budget (LRU by use).
 * Temporary files left by a writer that died (NAME.dlckpt.tmp<pid>, the pid no longer running) are deleted
 * by the scan.
 *
 * Threads: all calls may come from any thread (one mutex); the disk writer runs on its own thread. */
#ifndef DL_SERVER_PREFIX_CACHE_H
#define DL_SERVER_PREFIX_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct PrefixCache PrefixCache;

typedef struct PrefixCacheConfig {
    size_t ram_bytes;         /* RAM budget for snapshots (0: nothing kept in RAM beyond a disk write) */
    const char *dir;          /* NULL: no disk cache */
    uint64_t disk_bytes;      /* disk budget */
    uint64_t fingerprint[2];  /* the model and the settings that shape the arithmetic */
} PrefixCacheConfig;

PrefixCache *pcache_new(const PrefixCacheConfig *cfg, Err *err);
/* Finishes pending disk writes, then frees everything. */
void pcache_free(PrefixCache *pc);

/* Keys of the prefixes tokens[0, (i+1)*chunk) for i < n / chunk, chained chunk by chunk (O(n)). */
void pcache_prefix_keys(const int32_t *tokens, size_t n, int chunk, uint64_t *keys);

/* A checkpoint handed out by a lookup; release it with pcache_release. */
typedef struct PcacheHit {
    size_t pos;
    const void *data; /* the snapshot */
    size_t size;
    bool from_disk;
    void *blob_; /* internal */
} PcacheHit;

/* The longest checkpoint among the positions (i+1)*chunk ≤ max_pos whose tokens are tokens[0, pos).
 * keys: pcache_prefix_keys of tokens. Returns false when there is none. A hit (RAM or disk) counts as a
 * use of it and of the shorter checkpoints of the same prefix (they stay ahead in the LRU order). */
bool pcache_lookup(PrefixCache *pc, const int32_t *tokens, int chunk, const uint64_t *keys, size_t max_pos,
                   PcacheHit *hit);
void pcache_release(PrefixCache *pc, PcacheHit *hit);

/* Whether a checkpoint of this key is held (RAM or disk). */
bool pcache_contains(PrefixCache *pc, uint64_t key, size_t pos);
/* Stores a checkpoint of tokens[0, pos) (copied) with the snapshot data (malloc'ed; ownership passes to
 * the cache, which frees it at once if it does not fit the budgets). */
void pcache_store(PrefixCache *pc, const int32_t *tokens, size_t pos, uint64_t key, void *data, size_t size);

/* Checkpoints at any position, kept in RAM only (same budget and LRU): the state right before a chat's last
 * turn header and the state at the end of a reply, so the next turn of the conversation resumes exactly where
 * its prompt stops matching (the interval checkpoints above only exist at multiples of the interval).
 * pcache_lookup_exact: the longest one with min_pos < pos ≤ max_pos whose tokens are tokens[0, pos) (compared
 * in full; a linear scan of the entries). */
void pcache_store_exact(PrefixCache *pc, const int32_t *tokens, size_t pos, void *data, size_t size);
bool pcache_lookup_exact(PrefixCache *pc, const int32_t *tokens, size_t min_pos, size_t max_pos, PcacheHit *hit);

typedef struct PcacheStats {
    size_t ram_entries, ram_bytes;
    size_t disk_entries;
    uint64_t disk_bytes;
    uint64_t hits_ram, hits_disk, misses, stores, evictions, disk_writes, disk_errors, ignored_files;
    uint64_t orphans_removed; /* temporary files of writers that died (kill -9), deleted at start */
} PcacheStats;
void pcache_stats(PrefixCache *pc, PcacheStats *st);
/* A checkpoint file of its own (slot save / restore): the same format (header, fingerprint, checksums),
 * written to path through a temporary name; read back with every check. On failure a one-line reason. */
int pcache_file_write(const uint64_t fingerprint[2], const char *path, const int32_t *tokens, size_t n,
                      const void *data, size_t size, Err *err);
int pcache_file_read(const uint64_t fingerprint[2], const char *path, int32_t **tokens, size_t *n, void **data,
                     size_t *size, Err *err);

/* Waits until the disk writer has nothing pending (tests, shutdown). */
void pcache_flush(PrefixCache *pc);

#endif
