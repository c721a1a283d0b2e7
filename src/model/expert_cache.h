/* expert_cache.h — MoE models bigger than memory: the experts stay in the file and are read on demand into a
 * fixed set of cache slots (one slot = one expert's gate, up and down matrices), while every other weight
 * stays resident. The cache is an ExpertProvider (model.h): the forward pass tells it a layer's experts
 * right after routing (prefetch, exact), acquires them in groups and releases them; with predictions on, it
 * also hears which experts the next layer will probably use (its router applied to the current residual
 * stream) and reads those while the current layer computes. docs/EXPERT_CACHE.md has the design and the
 * measurements.
 *
 * Reads: a pool of I/O threads pread() whole matrices into 4 KiB-aligned slot spans, through O_DIRECT
 * where the file system allows it (no page-cache copy, no page-cache pressure), buffered otherwise (then
 * the pages read are dropped with POSIX_FADV_DONTNEED). Eviction picks, among the slots that are neither
 * in use, nor loading, nor holding a prediction not yet used: LRU (least recently acquired) or LFU (least
 * often acquired over the whole run, ties to the most recently acquired, so that a prefill's sweep over
 * every expert streams through a few slots instead of evicting what the next sweep needs first).
 *
 * Thread safety: one forward pass at a time (as the engine guarantees); the I/O threads synchronise with it
 * through one mutex. The results do not depend on the cache: logits are the same bits as with the weights
 * mapped (tests/test_expert_cache.c). */
#ifndef DL_MODEL_EXPERT_CACHE_H
#define DL_MODEL_EXPERT_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/model.h"

typedef enum CachePolicy { CACHE_LFU = 0, CACHE_LRU } CachePolicy;
/* "lfu" (NULL or "": the default, chosen by measurement) or "lru"; the one parser of that option. */
int cache_policy_parse(const char *s, CachePolicy *out, Err *err);

typedef struct ExpertCacheOptions {
    uint64_t slot_budget; /* bytes for the slots */
    CachePolicy policy;
    bool predict;         /* next-layer predictions (the forward pass computes them) */
    int io_threads;       /* 0: 8 */
    bool buffered;        /* no O_DIRECT even where it works */
} ExpertCacheOptions;

typedef struct ExpertCacheStats {
    int n_slots, io_threads;
    size_t slot_bytes;
    bool direct;         /* reads through O_DIRECT */
    /* per layer and batch, each expert a layer uses, counted once when its routing is known: */
    uint64_t lookups;    /* = hits + inflight + misses */
    uint64_t hits;       /* in a slot already */
    uint64_t inflight;   /* being read already (a prediction): the wait is shorter */
    uint64_t misses;     /* read then */
    uint64_t acquire_reads; /* reads an acquire had to start itself: no room when the layer's list came, or the
                               slot was taken for another expert meanwhile (the expert is read again) */
    uint64_t reads, bytes_read; /* expert reads done, and their bytes (aligned spans) */
    uint64_t evictions;
    uint64_t cancelled;  /* predicted reads dropped before they started (the prediction was wrong) */
    double read_s;       /* summed over the I/O threads */
    double stall_s;      /* the forward pass waiting for reads */
    /* predictions: experts predicted for a layer, how many of them the layer used, and how many experts the
     * predicted layers used in all (precision = predicted_used / predicted, recall = predicted_used / used) */
    uint64_t predicted, predicted_used, used_after_predict;
} ExpertCacheStats;

typedef struct ExpertCache ExpertCache;

/* Bytes of one slot (the widest layer's gate + up + down, each padded to whole aligned pages), and of every
 * expert stack in the model. */
size_t expert_cache_slot_bytes(const Model *m);
uint64_t model_expert_bytes(const Model *m);

/* A cache for the MoE model m (mapped from its file): opens the file(s) for reading, allocates
 * slot_budget / slot_bytes slots (at least 2·n_expert_used, or it fails with one line) and marks every
 * expert stack streamed (Weight.streamed), so call it before the weights are bound. */
ExpertCache *expert_cache_new(Model *m, const ExpertCacheOptions *o, Err *err);
void expert_cache_free(ExpertCache *c);
ExpertProvider expert_cache_provider(ExpertCache *c);
void expert_cache_stats(ExpertCache *c, ExpertCacheStats *out);
void expert_cache_reset_stats(ExpertCache *c);

#endif
