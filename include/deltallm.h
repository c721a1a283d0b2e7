/* deltallm.h — the public API of the deltallm inference engine.
 *
 * An engine is a loaded model (weights mapped read-only, tokenizer, compute threads); a session is one
 * inference timeline on it (the recurrent state and KV cache of one sequence). The CLI and the server
 * use only this header.
 *
 *   DlEngine *e = dl_engine_open(&params, &err);
 *   DlSession *s = dl_session_new(e, &err);
 *   dl_tokenize(e, prompt, strlen(prompt), false, &ids, &n, &err);
 *   dl_session_eval(s, ids, n, &err);                    // prefill
 *   for (;;) { int32_t t = dl_sampler_sample(smp, dl_session_logits(s)); ... dl_session_eval(s, &t, 1, &err); }
 *
 * Threads:
 *   - An engine computes on its own thread pool (created by dl_engine_open, inheriting the caller's signal
 *     mask) with one set of activation buffers, so the calls that compute — dl_session_eval,
 *     dl_decode_batch, dl_engine_prefetch — must not overlap on one engine: make them from one thread, or
 *     serialize them (the server runs them all on its scheduler thread). Separate engines are independent.
 *   - A session, a sampler and a detokenizer are each used by one thread at a time; nothing locks them.
 *     dl_session_snapshot / restore / copy read and write session state: not during compute on it.
 *   - The read-only calls may run from any thread at any time, during compute too: dl_engine_info,
 *     dl_tokenize, dl_token_*, dl_chat_template, dl_version.
 *   - DlEngineParams.progress runs on the thread that called dl_engine_open or dl_engine_prefetch.
 *   - The library installs no signal handlers, never prints or exits, and reads no environment variables
 *     (the CLI maps DELTALLM_* to DlEngineParams: src/cli/cli_engine.h).
 *
 * Ownership:
 *   - Each _new / _open has a _free / _close, which accepts NULL. Free the sessions, samplers and
 *     detokenizers of an engine before closing it.
 *   - Pointers the library returns stay its own: dl_engine_info, dl_token_piece and dl_chat_template until
 *     the engine is closed; dl_session_logits until that session's next eval (or dl_decode_batch), restore
 *     or free; the text of dl_detok_push / dl_detok_flush until the next call on that detokenizer.
 *   - dl_tokenize's *ids is malloc'ed: the caller frees it with free(). Snapshot buffers are the caller's.
 *   - Arguments (paths, text, DlEngineParams, DlSamplingParams) are only read during the call: they may be
 *     freed or changed afterwards — but for DlEngineParams.progress_user, which dl_engine_prefetch also
 *     passes to the progress callback.
 *
 * Errors: functions return 0 (or a pointer) on success and -1 (or NULL) on failure, with one line in
 * *err. Nothing here prints or exits.
 *
 * Linking: libdeltallm.so.MAJOR or libdeltallm.a (`make install`; pkg-config deltallm), only libc, libm and
 * pthreads below it. examples/simple.c is a complete program. */
#ifndef DELTALLM_H
#define DELTALLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* MAJOR.MINOR.PATCH. The shared library is libdeltallm.so.MAJOR: MAJOR changes when a program built
 * against an older header could break (a changed struct or signature), MINOR when functions are added. */
#define DELTALLM_VERSION "0.2.0"
const char *dl_version(void); /* the version of the library actually loaded */

typedef struct DlError {
    char msg[512];
} DlError;

typedef struct DlEngine DlEngine;
typedef struct DlSession DlSession;
typedef struct DlSampler DlSampler;
typedef struct DlDetok DlDetok;

/* ---- engine ---------------------------------------------------------------------------------------- */

/* Load progress: work done of a phase, in bytes ("read": the file with no_mmap; "pack": weights copied into
 * the fast kernels' layout; "prefetch": dl_engine_prefetch). Called on the thread that called
 * dl_engine_open or dl_engine_prefetch, done rising to total within a phase. */
typedef void (*DlProgressFn)(void *user, const char *phase, uint64_t done, uint64_t total);

typedef struct DlEngineParams {
    const char *model_path; /* a .gguf file (or any part of a split set) */
    int n_threads;          /* compute threads; 0 = dl_default_threads for the model and this process's CPUs */
    int n_ctx;              /* context per session in tokens; 0 = min(the model's, 4096) */
    int n_batch;            /* prompt tokens per forward pass; 0 = 512 */
    int n_seq_max;          /* sessions one dl_decode_batch may advance together; 0 = 1 */
    /* The arithmetic: "fast" (NULL, the default: activations rounded as llama.cpp rounds them, whole blocks
     * summed in integers, one order whatever the batch, so a row's result never depends on its batch),
     * "llama" (llama.cpp v0.4.0's summation orders too: its logits bit for bit) or "exact" (F32 activations
     * on dequantized weights: the reference). */
    const char *arith;
    bool exact;             /* "exact" whatever arith says */
    /* The KV cache's type, K and V alike: "f16" (NULL in the fast arithmetic: llama.cpp's default, half the
     * memory and the attention bandwidth of F32), "f32" (NULL in the llama and exact arithmetics), or, in the
     * fast arithmetic only, "q8_0" / "q4_0" (llama.cpp's blocks of 32 per head: 34 / 18 bytes for 32 values).
     * kv_type_k and kv_type_v, when set, choose K's and V's type each (-ctk, -ctv); NULL: kv_type's. A GPU
     * keeps F32. */
    const char *kv_type;
    const char *kv_type_k, *kv_type_v;
    const char *deltanet;   /* "auto" (NULL), "recurrent" or "chunked" */
    const char *backend;    /* "cpu" (NULL), "ref" (the scalar reference of every op), "vulkan" or "vulkan:N" (a
                               GPU through Vulkan, when the build has it: `deltallm devices` lists them) */
    const char *isa;        /* cpu: "auto" (NULL), "ref", "avx2" or "avx512" */
    bool no_pack;           /* keep the file's weight layout (packing copies some matrices into the layout
                               the kernels read faster; the results are the same bits either way) */
    /* The layers cut into stages run one after the other, each on its own backend (a model split between a
     * GPU and the CPU). NULL / 0: one stage of every layer on `backend`. The embeddings run on the first
     * stage, the head on the last; the hidden rows cross between stages. Results are the same bits as one
     * stage on the same backends. */
    const struct DlStage *stages;
    int n_stages;
    bool no_mmap;           /* read the weights into memory instead of mapping the file (packed Q8_0
                               matrices are then held twice: their originals cannot be dropped) */
    DlProgressFn progress;  /* NULL: none */
    void *progress_user;
    /* Over MPI (the process is rank 0 of a job started by mpirun, dl_mpi_init called; see "several processes"
     * below): the layers cut into one contiguous range per rank. This process keeps the tokenizer, the
     * embeddings, the head and the first range; each other rank (dl_mpi_worker) reads and holds only its
     * range. Logits are the same bits as one process with the same n_batch. split: each rank's share of the
     * layers' weight bytes ("0.3,0.3,0.4"), or NULL: balanced by the bytes each rank reads per token (rank 0's
     * head included). A job of one rank runs as one process. Not with stages. */
    bool mpi;
    const char *split;
    /* a device's tuning, "key=value,..." (the Vulkan backend: coop=0|1, tile=N, chunk=N; docs/VULKAN.md) */
    const char *device_tune;
    /* a device's runtime library when not the system's (the Vulkan loader file instead of libvulkan.so.1; the
     * CLI takes it from DELTALLM_VULKAN_LIB); NULL: the default */
    const char *device_lib;
    /* Memory the weights may take, in bytes; 0 = what the machine can give without swapping (MemAvailable
     * less 1 GiB and the sessions' state). A model that fits runs as it always did (its file mapped). An MoE
     * model that does not keeps its other weights resident and reads its experts on demand into an expert
     * cache of the rest of the budget (docs/EXPERT_CACHE.md); a budget too small for that fails with the
     * sizes. */
    uint64_t mem_budget;
    const char *cache_policy; /* expert cache eviction: "lfu" (NULL) or "lru" */
    bool cache_no_predict;    /* expert cache: no next-layer prediction (for measurements) */
    int cache_io_threads;     /* expert cache: reader threads (0 = 8) */
} DlEngineParams;

typedef struct DlStage {
    const char *backend; /* as DlEngineParams.backend (NULL: the engine's) */
    int n_layers;        /* 0: the layers left (the last stage) */
} DlStage;

#define DL_MAX_STAGES 8

void dl_engine_params_init(DlEngineParams *p);
DlEngine *dl_engine_open(const DlEngineParams *p, DlError *err);
void dl_engine_close(DlEngine *e);

typedef struct DlModelInfo {
    const char *arch;   /* "qwen3next", "qwen35", "qwen35moe" */
    const char *name;   /* general.name ("" when absent) */
    int n_vocab;
    int n_ctx_train;
    int n_ctx;          /* per session, as opened */
    int n_layer;
    int n_embd;
    uint64_t file_bytes;
    uint64_t weight_bytes;
    size_t session_bytes; /* memory one session takes (recurrent state + KV cache) */
    uint64_t decode_bytes; /* weight bytes read per decoded token (experts: the average share selected) */
    const char *ops;      /* the kernels in use: "ref", "avx2", "avx512" */
    int n_threads;
    /* the arithmetic and the K and V caches' element types as opened ("fast", "llama", "exact"; "f32", "f16",
     * "q8_0", "q4_0"): DlEngineParams' names resolved (a device keeps F32; with stages, the last stage's) */
    const char *arith;
    const char *kv_type_k, *kv_type_v;
} DlModelInfo;
const DlModelInfo *dl_engine_info(const DlEngine *e);

/* The compute threads an engine takes when DlEngineParams.n_threads is 0: one thread per
 * DL_THREAD_DECODE_BYTES of weights read per decoded token (DlModelInfo.decode_bytes), at least 1, at most
 * n_cpus (the CPUs this process may use). Below that size a token's work per op is too small for a second
 * thread to pay for its synchronisation: the measured crossover is in docs/ARCHITECTURE.md ("Threads"). */
#define DL_THREAD_DECODE_BYTES ((uint64_t)128 << 20)
int dl_default_threads(uint64_t decode_bytes, int n_cpus);
/* The CPUs this process may use (its affinity mask, else the online CPUs). */
int dl_cpu_count(void);

/* Makes the weights resident before compute so no forward pass waits on the disk: reads every page of
 * the mapping, and with lock also mlock()s it (fails with the reason if the system refuses). */
int dl_engine_prefetch(DlEngine *e, bool lock, DlError *err);

/* The expert cache of an engine that streams its experts (DlEngineParams.mem_budget): its size and what it
 * did since it was opened or last reset. */
typedef struct DlCacheStats {
    uint64_t budget;          /* the memory budget in force */
    uint64_t resident_bytes;  /* the weights kept in memory (everything but the experts) */
    uint64_t expert_bytes;    /* every expert of the file */
    int n_slots;              /* experts the cache holds */
    uint64_t slot_bytes;
    bool direct;              /* reads bypass the page cache (O_DIRECT) */
    bool locked;              /* the resident weights are mlock()ed (needs `ulimit -l` above their size) */
    int io_threads;
    uint64_t tokens;          /* tokens evaluated */
    uint64_t lookups, hits, inflight, misses; /* experts each layer used per batch: in memory, being read, not */
    uint64_t acquire_reads;   /* reads started only when the expert was needed (no room ahead, or re-read) */
    uint64_t reads, bytes_read, evictions, cancelled;
    double read_s, stall_s;   /* summed over the reader threads; the compute waiting for reads */
    uint64_t predicted, predicted_used, used_after_predict; /* next-layer predictions: precision, recall */
} DlCacheStats;
/* Fills *out and returns 0, or returns -1 when the engine has no expert cache. reset: zero the counters
 * afterwards. */
int dl_engine_cache_stats(DlEngine *e, DlCacheStats *out, bool reset);

/* Profiling: time per phase and per op, and major page faults during compute; on resets the counters. */
void dl_engine_profile(DlEngine *e, bool on);
/* Writes the report (text, one item per line) into buf; returns the length it needed. */
int dl_engine_profile_report(const DlEngine *e, char *buf, size_t cap);

/* What a device engine issued since it was opened or last reset (summed over its device stages): forward
 * passes, tokens, commands (dispatches, copies, fills), barriers between them, the same inside the layers
 * (layer_steps: layers run, summed over passes), and the host's time issuing them (the stream's begin to the
 * submission, waits excluded); commands counts replayed recordings too, recorded only what the host recorded.
 * Returns -1 when no stage runs on a device. */
typedef struct DlDeviceCounts {
    uint64_t passes, tokens, dispatches, barriers;
    uint64_t layer_steps, layer_dispatches, layer_barriers;
    double host_s;
    uint64_t recorded, replays; /* commands the host recorded; passes replayed from a recording */
} DlDeviceCounts;
int dl_engine_device_counts(DlEngine *e, DlDeviceCounts *out, bool reset);

/* ---- tokens ---------------------------------------------------------------------------------------- */

/* Text to ids (malloc'ed; free with free()). parse_special: control tokens such as <|im_start|> written in
 * the text become their ids (use it for text produced by a chat template, not for user input). */
int dl_tokenize(const DlEngine *e, const char *text, size_t len, bool parse_special, int32_t **ids, size_t *n,
                DlError *err);
/* The bytes a token stands for (may be part of a UTF-8 character); NULL for an id out of range. */
const char *dl_token_piece(const DlEngine *e, int32_t id, size_t *len);
bool dl_token_is_eog(const DlEngine *e, int32_t id); /* end of generation (<|im_end|>, <|endoftext|>, ...) */
/* Control (or unknown) token: one the detokenizer drops unless render_special (<|im_start|>, <|im_end|>, ...).
 * User-defined tokens such as <think> or <tool_call> are not control tokens: they are rendered as text. */
bool dl_token_is_control(const DlEngine *e, int32_t id);
int32_t dl_token_id(const DlEngine *e, const char *text); /* exact vocabulary entry, or -1 */
const char *dl_chat_template(const DlEngine *e);           /* tokenizer.chat_template, or NULL */

/* Streaming detokenizer: each push returns the text that became complete (always valid UTF-8). */
DlDetok *dl_detok_new(const DlEngine *e, bool render_special, DlError *err);
void dl_detok_free(DlDetok *d);
int dl_detok_push(DlDetok *d, int32_t id, const char **text, size_t *len, DlError *err);
void dl_detok_flush(DlDetok *d, const char **text, size_t *len);

/* ---- sessions ---------------------------------------------------------------------------------------- */

DlSession *dl_session_new(DlEngine *e, DlError *err);
void dl_session_free(DlSession *s);
void dl_session_reset(DlSession *s); /* empty timeline */
int dl_session_n_past(const DlSession *s);
int dl_session_n_ctx(const DlSession *s);

/* Feeds n tokens (any n ≥ 1; split into batches internally) and computes the logits of the last one.
 * Fails with the session unchanged if the context would overflow or an id is out of range. */
int dl_session_eval(DlSession *s, const int32_t *tokens, size_t n, DlError *err);
/* Multimodal input: n positions of which the rows with is_embd[i] set take embd[i·n_embd …] instead of
 * tokens[i]'s embedding (an image's tokens from the vision encoder; tokens[i] stays a valid id, e.g. the image
 * pad token). pos_thw [n][3], or NULL: each row's (time, height, width) rotary positions for IMROPE models (text
 * rows p, p, p); afterwards the text continues at rotary position next_pos. Any backend (a device, -ngl
 * stages); one process, no drafting. */
int dl_session_eval_embd(DlSession *s, const int32_t *tokens, const float *embd, const uint8_t *is_embd,
                         const int32_t *pos_thw, size_t n, int next_pos, DlError *err);
/* The rotary position the next token takes (dl_session_n_past for text-only timelines). */
int dl_session_next_pos(const DlSession *s);
/* Logits [n_vocab] after the last eval (NULL before the first). */
const float *dl_session_logits(const DlSession *s);

/* One token for each of n sessions in a single forward pass (n ≤ n_seq_max): the weights are read once
 * for all of them. Each session's logits are updated. */
int dl_decode_batch(DlSession **s, const int32_t *tokens, int n, DlError *err);

/* Snapshots of a session's whole state (recurrent state, KV cache rows in use, position, last logits):
 * restoring one gives exactly the state it was taken in. Used for prefix reuse (a recurrent state cannot
 * be rolled back, only restored). */
size_t dl_session_snapshot_size(const DlSession *s);
int dl_session_snapshot(const DlSession *s, void *buf, size_t size, DlError *err);
int dl_session_restore(DlSession *s, const void *buf, size_t size, DlError *err);
/* Copies src's state into dst (same engine). */
int dl_session_copy(DlSession *dst, const DlSession *src, DlError *err);

/* Tentative evaluation, for speculative decoding: evaluate a few tokens in one batch, then keep only a
 * prefix of them.
 *   dl_session_set_rollback(s, n_max, err)        room for tentative batches of up to n_max tokens (memory:
 *                                                 one more copy of the recurrent state, n_max tokens of scan
 *                                                 inputs and n_max rows of logits); 0 frees it
 *   dl_session_eval_tentative(s, tokens, n, err)  evaluates n ≤ n_max tokens (n ≤ n_batch); the logits of
 *                                                 every one of them are in dl_session_tentative_logits(s)
 *                                                 ([n][n_vocab]); dl_session_logits is unchanged until keep
 *   dl_session_keep(s, k, err)                    keeps the first k (0 ≤ k ≤ n): the session is then exactly
 *                                                 as the batch left it after its k-th token (recurrent state,
 *                                                 conv windows, KV length; logits: those of token k, or the
 *                                                 ones before the batch for k = 0)
 * In exact mode, and whenever a batch computes each row as a single token would, that is bitwise the state
 * of evaluating the k tokens alone. Any other call on the session between the two drops the chance to keep
 * fewer than n. */
int dl_session_set_rollback(DlSession *s, int n_max, DlError *err);
int dl_session_eval_tentative(DlSession *s, const int32_t *tokens, size_t n, DlError *err);
const float *dl_session_tentative_logits(const DlSession *s);
int dl_session_keep(DlSession *s, size_t k, DlError *err);

/* ---- several processes (MPI) ---------------------------------------------------------------------------- *
 * `mpirun -np N prog ...`: every rank calls dl_mpi_init; rank 0 opens engines with params.mpi and uses them as
 * usual, the others call dl_mpi_worker, which serves rank 0's engines until rank 0 calls dl_mpi_finalize.
 * A rank that dies or stops answering for timeout_s (on the same machine: within ~0.1 s) fails the job:
 * every call that needs the other ranks then fails with the line dl_mpi_failure returns. */

/* Joins the job (a build with Open MPI): returns this process's rank, or -1 with one line. */
int dl_mpi_init(int *argc, char ***argv, double timeout_s, DlError *err);
int dl_mpi_rank(void); /* 0 outside a job */
int dl_mpi_size(void); /* 1 outside a job */
/* Ranks > 0: holds and computes the layers rank 0 assigns, until rank 0 leaves; returns the process's exit
 * status (1 with a line in err when the job failed without rank 0 saying why). */
int dl_mpi_worker(DlError *err);
const char *dl_mpi_failure(void);     /* NULL while the job is healthy */
void dl_mpi_on_failure(void (*fn)(void)); /* runs once, on another thread, when the job fails */
/* Leaves the job (rank 0: tells the other ranks to stop). Every rank calls it last. */
void dl_mpi_finalize(void);

/* Pipelined decode. An engine over several processes computes a step in stages one after the other; while
 * one group of sessions is in the later stages, the next group can use the first. dl_decode_start starts a
 * step for n sessions (as dl_decode_batch does) and returns before it is done; dl_decode_finish waits for the
 * oldest step started and not yet finished (its sessions' logits are then current; it reports its error).
 * dl_engine_pipeline_depth: how many groups keep every stage busy (1 in one process, where start computes
 * the step at once and finish has nothing to wait for). A session must not be used otherwise while its step
 * is in flight. */
int dl_engine_pipeline_depth(const DlEngine *e);
int dl_decode_start(DlSession **s, const int32_t *tokens, int n, DlError *err);
int dl_decode_finish(DlEngine *e, DlError *err);

/* Per stage of an engine over several processes: where it runs, its layers, and since the last reset its
 * compute time (the bubble is wall − compute), bytes sent, batches and rows, and its process's memory. */
typedef struct DlStageStats {
    int rank, pid;
    char host[64];
    int l0, l1;
    double compute_s, wall_s;
    uint64_t bytes_sent, batches, tokens;
    uint64_t weight_bytes;             /* weights bound on the rank */
    uint64_t rss_bytes, rss_peak_bytes;
} DlStageStats;
/* Fills up to cap stages (after the work in flight is done); returns how many (0 in one process), or -1.
 * reset starts the counters again. */
int dl_engine_stage_stats(DlEngine *e, bool reset, DlStageStats *out, int cap, DlError *err);
/* ---- speculative decoding ---------------------------------------------------------------------------- */

/* Faster decoding with a drafter: each step drafts up to n_max tokens, evaluates the token before them and the
 * drafts in one batched forward pass (tentatively), keeps the longest prefix the model agrees with and samples
 * the token after it; the state is then exactly that of the kept tokens (the recurrent state, conv windows and
 * KV of the model and of the drafter). The drafter is the model's own MTP block (Qwen3.5 / Qwen3.6 /
 * Qwen3-Next files that keep it, nextn_predict_layers ≥ 1), or a smaller model of the same vocabulary attached
 * with dl_engine_open_draft.
 *
 * Acceptance: at each position the sampler draws the target model's token as plain decoding would (same
 * penalties, same random draws in the same order) and a draft counts only when it equals that token — with a
 * deterministic (greedy) drafter this is the standard speculative-sampling test (accept with probability
 * p(draft), otherwise draw from p without it), so the distribution of the output is the model's. Where a
 * batch of tokens computes each row as one token would (exact mode; the default mode where its kernels are
 * batch-invariant), the tokens are the very ones plain decoding produces with the same sampler and seed.
 *
 *   dl_session_eval(s, prompt, n, &err);  int32_t t = dl_sampler_sample(smp, dl_session_logits(s));
 *   dl_sampler_accept(smp, t);  emit(t);
 *   while (!done) { int k = dl_session_speculate(s, smp, t, out, cap, &err); emit(out[0..k)); t = out[k - 1]; }
 *
 * speculate evaluates `first` (the last token emitted, not yet evaluated) and returns the tokens after it (at
 * least one; the last is not evaluated, as in plain decoding). It stops at an end-of-generation token (that
 * token is the last returned) and records each returned token in the sampler (dl_sampler_accept). */
typedef struct DlDraftParams {
    int n_max;   /* most tokens drafted per step (--draft-max), 1..16 */
    int n_min;   /* a step with fewer drafts verifies none (--draft-min) */
    float p_min; /* drafting stops at a draft the drafter gives less probability than this (--draft-p-min; 0: always
                    n_max, which makes rejections happen) */
    int n_vocab; /* MTP: its head over the first n_vocab token ids only (0: the whole vocabulary) */
} DlDraftParams;

void dl_draft_params_init(DlDraftParams *p); /* n_max 3, n_min 0, p_min 0.5, the whole vocabulary */
/* Opens a smaller model of the same vocabulary as the drafter of this engine's sessions (the engine's
 * threads, context, batch and arithmetic). */
int dl_engine_open_draft(DlEngine *e, const char *path, DlError *err);
/* Turns drafting on for a session (p NULL: off): the engine's draft model if it has one, else the model's MTP
 * block. Memory: the drafter's state and n_max + 1 tokens of rollback room. Resets the statistics. */
int dl_session_set_draft(DlSession *s, const DlDraftParams *p, DlError *err);
/* One step (see above): out receives 1 to cap tokens; returns their number, or -1. */
int dl_session_speculate(DlSession *s, DlSampler *smp, int32_t first, int32_t *out, size_t cap, DlError *err);
/* One step for n sessions in one batched forward pass per phase (n ≤ n_seq_max): session i's tokens go to
 * out + i·cap, their number to n_out[i]. */
int dl_speculate_batch(DlSession **s, DlSampler **smp, const int32_t *first, int n, int32_t *out, size_t cap, int *n_out,
                       DlError *err);

#define DL_DRAFT_MAX 16
typedef struct DlDraftStats {
    uint64_t steps;                    /* speculate steps */
    uint64_t drafted, accepted;        /* drafts verified, and accepted */
    uint64_t drafted_at[DL_DRAFT_MAX];  /* drafts verified at position i of a step */
    uint64_t accepted_at[DL_DRAFT_MAX]; /* and accepted there */
    uint64_t draft_passes;             /* drafter forward passes */
    double draft_s, verify_s, keep_s;  /* time drafting, verifying (the batched pass), rolling back (the keep alone) */
} DlDraftStats;
/* Controlled acceptance, for measuring the machinery (bench --draft-accept): after each drafter pass the
 * session's drafts are replaced by tokens[p] for their positions p (tokens: what the model gives at each
 * position of the session from 0, e.g. the prompt and a greedy run's output; drafts past n are dropped), each
 * made wrong (another id) with probability 1 - accept, drawn from its own generator seeded by seed. The output
 * is still the model's; only the acceptance changes. Needs drafting on (dl_session_set_draft drops the oracle);
 * n 0 turns it off. */
int dl_session_set_draft_oracle(DlSession *s, const int32_t *tokens, int n, double accept, uint64_t seed, DlError *err);
/* The session's counts since dl_session_set_draft. */
void dl_session_draft_stats(const DlSession *s, DlDraftStats *st);

/* ---- sampling ---------------------------------------------------------------------------------------- */

typedef struct DlSamplingParams {
    float temperature;       /* ≤ 0: greedy (argmax, lowest id on ties) */
    int top_k;               /* ≤ 0: off */
    float top_p;             /* ≥ 1: off */
    float min_p;             /* ≤ 0: off */
    float repeat_penalty;    /* 1: off */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int penalty_last_n;      /* how many recent tokens the penalties look at */
    uint64_t seed;
} DlSamplingParams;

void dl_sampling_params_init(DlSamplingParams *p); /* temp 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties */
DlSampler *dl_sampler_new(const DlEngine *e, const DlSamplingParams *p, DlError *err);
void dl_sampler_free(DlSampler *s);
/* Picks the next token from logits [n_vocab] (not modified). */
int32_t dl_sampler_sample(DlSampler *s, const float *logits);
/* Records a token of the context (prompt or generated) for the penalties. */
void dl_sampler_accept(DlSampler *s, int32_t token);
void dl_sampler_reset(DlSampler *s);

/* llama.cpp's further samplers (its names and defaults; --typical, --mirostat*, --dry-*, --xtc-*, --top-n-sigma,
 * --samplers). A sampler made with any of them on runs llama.cpp's chain over every candidate, in `samplers`
 * order: penalties (DlSamplingParams' repeat / frequency / presence), dry, top_n_sigma, top_k, typ_p, top_p,
 * min_p, xtc, temperature, then the draw. Mirostat replaces the chain: temperature, then mirostat. With all of
 * them off (dl_sampler_extra_init) the sampler is exactly dl_sampler_new's. */
typedef struct DlSamplerExtra {
    float typical_p;         /* locally typical sampling: keep the tokens nearest the entropy up to this mass; ≥ 1: off */
    int mirostat;            /* 0 off, 1 (Mirostat), 2 (Mirostat 2.0) */
    float mirostat_tau;      /* target surprise in bits (5) */
    float mirostat_eta;      /* learning rate of mu (0.1); mu starts at 2·tau and moves after each accepted token */
    float dry_multiplier;    /* DRY ("don't repeat yourself"): 0 off */
    float dry_base;          /* penalty = multiplier · base^(length − allowed_length) (1.75) */
    int dry_allowed_length;  /* repeats up to this long are free (2) */
    int dry_penalty_last_n;  /* tokens DRY looks back over (-1: 4096, 0: off) */
    const char *const *dry_breakers; /* strings that end a repeated sequence; NULL: "\n", ":", "\"", "*" */
    int n_dry_breakers;
    float xtc_probability;   /* exclude top choices: chance per token (0: off) */
    float xtc_threshold;     /* the tokens at or above it, all but the least likely, are removed (0.1; > 0.5: off) */
    float top_n_sigma;       /* keep logits ≥ max − n·σ (≤ 0: off) */
    int min_tokens;          /* end-of-generation tokens are not drawn before this many were accepted */
    const char *samplers;    /* the order: names separated by ';' (top_k;top_p;...) or llama.cpp's letters
                                ("edkypmxt"); NULL: the default above */
    float dynatemp_range;    /* dynamic temperature: > 0 draws at t ± range, by the candidates' entropy (0: off) */
    float dynatemp_exponent; /* the temperature = lo + (hi − lo) · (entropy / its maximum)^exponent (1) */
} DlSamplerExtra;

void dl_sampler_extra_init(DlSamplerExtra *x); /* all off, llama.cpp's defaults for the rest */
/* dl_sampler_new with x (NULL: none); fails with one line for a bad sampler name or value. */
DlSampler *dl_sampler_new_extra(const DlEngine *e, const DlSamplingParams *p, const DlSamplerExtra *x, DlError *err);

#ifdef __cplusplus
}
#endif

#endif
