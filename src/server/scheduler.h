/* scheduler.h — the one thread that computes: N slots (sessions), a bounded queue of waiting jobs,
 * prefill in chunks, batched decode, cancellation, and the prefix cache.
 *
 * Each loop iteration:
 *   1. drops cancelled jobs (queued or running: the slot is free again at once),
 *   2. admits queued jobs into free slots (FIFO); a new job first restores the longest checkpoint that
 *      is a prefix of its prompt,
 *   3. runs one prefill segment of the earliest admitted slot that is still reading its prompt,
 *   4. samples one token for every generating slot and advances all of them in ONE forward pass
 *      (dl_decode_batch); with drafting (SchedConfig.draft), the slots whose jobs sample from the model's
 *      own distribution (no logit bias, constraint or logprobs) take a speculative step instead, all of them
 *      in one dl_speculate_batch (its verify is one forward pass): several tokens each, the ones plain
 *      decoding gives (greedy; and with the same seed where batches compute as single tokens do).
 *
 * Prefill segments end at multiples of the segment size (the smaller of the checkpoint interval and the
 * batch size), counted from position 0. A run that resumes from a checkpoint therefore computes exactly
 * the same forward passes, with the same batch boundaries, as a run from scratch: its logits, and with
 * the same sampling its tokens, are bit-identical. Checkpoints are taken after a segment that ends on a
 * multiple of the checkpoint interval (see SERVER.md for which ones are kept). */
#ifndef DL_SERVER_SCHEDULER_H
#define DL_SERVER_SCHEDULER_H

#include <stdbool.h>

#include "base/err.h"
#include "deltallm.h"
#include "server/job.h"
#include "server/prefix_cache.h"

typedef struct Scheduler Scheduler;

typedef struct SchedConfig {
    DlEngine *engine;  /* opened with n_seq_max ≥ n_slots */
    int n_slots;
    int queue_max;     /* jobs that may wait for a slot */
    int chunk;         /* checkpoint interval in tokens */
    int segment;       /* prefill segment; chunk is a multiple of it */
    PrefixCache *cache; /* NULL: no prefix reuse */
    bool dense;        /* keep a checkpoint at every interval (default: the last one of each prompt and
                          those at 1, 2, 4, 8, ... intervals) */
    const DlDraftParams *draft; /* speculative decoding in every slot (NULL: none); the engine's draft model
                                   drafts when it has one, else the model's MTP block */
} SchedConfig;

Scheduler *sched_new(const SchedConfig *cfg, Err *err);
/* Stops the thread; jobs still queued or running finish with FINISH_ERROR. */
void sched_free(Scheduler *s);
/* Fails every queued and running job ("the server is shutting down") and refuses new ones. */
void sched_shutdown(Scheduler *s);

enum { SUBMIT_OK = 0, SUBMIT_QUEUE_FULL = 1, SUBMIT_STOPPING = 2 };
/* Queues a job (the scheduler takes its own reference). */
int sched_submit(Scheduler *s, Job *job);
/* Queues k jobs or none. They fit when the queue's bound plus the free slots leaves room for them (so
 * queue_max 0 means "a free slot or 503"); a batch larger than slots + queue_max is taken when the server is
 * idle (nothing running or queued), so that it is never refused for good. */
int sched_submit_all(Scheduler *s, Job *const *jobs, int k);
/* The client is gone: the job ends (FINISH_CANCELLED) and its slot is freed at the next iteration. */
void sched_cancel(Scheduler *s, Job *job);

typedef struct SchedStats {
    int n_slots, busy, queued, queue_max;
    uint64_t jobs_done, tokens_generated, tokens_prompt, tokens_cached;
    uint64_t forward_passes;            /* prefill segments + batched decode steps (+ speculative steps) */
    uint64_t drafted, accepted;         /* speculative decoding: drafts verified and accepted, all slots */
    double prompt_seconds, gen_seconds; /* time finished jobs spent in prefill / generating */
} SchedStats;
void sched_stats(Scheduler *s, SchedStats *st);

/* Slot actions (POST /slots/{id}?action=...), on an idle slot only: save takes the session's snapshot and
 * the tokens it stands for (the last job's prompt and output, as far as evaluated; both malloc'd); restore
 * puts such a state into the slot, and the next job there whose prompt starts with those tokens continues
 * from it (its prefill then starts at that position: segments, and so the last bits of the logits, may differ
 * from a run from scratch); erase empties the slot. 0, or SLOT_BUSY / SLOT_BAD (4xx) / SLOT_FAILED (5xx). */
enum { SLOT_BUSY = 1, SLOT_BAD = 2, SLOT_FAILED = 3 };
int sched_slot_save(Scheduler *s, int id, int32_t **tokens, size_t *n, void **data, size_t *size, Err *err);
int sched_slot_restore(Scheduler *s, int id, const int32_t *tokens, size_t n, const void *data, size_t size, Err *err);
int sched_slot_erase(Scheduler *s, int id, size_t *n_erased, Err *err);

/* What one slot is doing (for /slots). */
typedef struct SlotInfo {
    int id;
    int state;        /* 0 idle, 1 reading the prompt, 2 generating */
    uint64_t job_id;  /* 0 when idle */
    int n_ctx, n_past;
    int n_prompt, n_cached, n_gen, max_tokens;
    double seconds;   /* since the job was admitted */
} SlotInfo;
/* Fills out[0..n_slots) (n_slots ≤ cap); returns the number of slots. */
int sched_slots(Scheduler *s, SlotInfo *out, int cap);

#endif
