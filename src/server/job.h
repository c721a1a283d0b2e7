/* job.h — one generation request as the scheduler sees it, and the hand-over between the HTTP thread
 * that created it and the scheduler thread that computes it.
 *
 * The HTTP thread fills the input part, submits the job and then only reads the output part (under mu)
 * and may set cancel. The scheduler thread writes the output part: text that became final (after the
 * detokenizer and the stop strings), counters, and at the end done + finish. Both hold a reference;
 * the last job_unref frees it. */
#ifndef DL_SERVER_JOB_H
#define DL_SERVER_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deltallm.h"
#include "server/constrain.h"
#include "server/llama_params.h"
#include "server/stop.h"
#include "server/util.h"

typedef enum JobFinish {
    FINISH_NONE,
    FINISH_STOP,      /* end-of-generation token, stop string, or the constraint completed */
    FINISH_LENGTH,    /* max_tokens or the context ran out */
    FINISH_CANCELLED, /* the client went away */
    FINISH_ERROR,     /* compute failed or the server is shutting down (error holds the reason) */
} JobFinish;

typedef struct LogitBias {
    int32_t id;
    float bias;
} LogitBias;

enum { LOGPROBS_MAX_TOP = 20 };

/* The model's log-probability of a generated token and of its most likely alternatives (log-softmax of
 * the raw logits, before logit bias, penalties, temperature and truncation). */
typedef struct TokenLogprob {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[LOGPROBS_MAX_TOP];
    float top_logprob[LOGPROBS_MAX_TOP];
} TokenLogprob;

/* n > 1: the choices of one prompt share its evaluation. The first choice's job (the leader) evaluates the
 * prompt and leaves a snapshot of the session here; the others restore it (an exact copy of the state and the
 * last logits, not a recompute). ready / state are the scheduler thread's; dead may be set by any thread. */
typedef struct PromptShare {
    atomic_int refs;
    atomic_bool dead; /* the leader ended before its prompt was done: the others evaluate it themselves */
    bool ready;
    void *state;
    size_t size;
} PromptShare;

PromptShare *prompt_share_new(void);
void prompt_share_unref(PromptShare *p);

typedef struct Job {
    /* ---- input: set before sched_submit, read-only afterwards (the scheduler owns stop/constraint) */
    int32_t *prompt;
    size_t n_prompt;
    DlSamplingParams sp;
    SamplerSpec *spx; /* NULL: no extra samplers (owned) */
    int max_tokens; /* ≥ 1 */
    StopFilter stop;
    Constraint *constraint; /* NULL: free generation */
    LogitBias *bias;
    int n_bias;
    bool use_cache;
    bool notify_text; /* wake the consumer for every piece of text (streaming); else only at the end */
    size_t n_stable; /* chat: where the last turn header starts — later turns of the conversation share the
                        prompt up to here, so a checkpoint is kept there (0: none) */
    int logprobs;    /* -1: none; else record each token's logprob and this many alternatives (≤ 20) */
    int slot_id;     /* id_slot: the slot it must run in (-1: any) */
    bool render_special; /* skip_special_tokens false: control tokens are rendered as text */
    PromptShare *share; /* n > 1: the prompt's evaluation, shared (NULL: none) */
    struct JobMM *mm;   /* the prompt holds images (server/vision.h): prompt[] holds their rows' keys */
    bool share_leader;  /* this job evaluates it */

    /* ---- output (under mu) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    SBuf text;         /* final text not yet taken by the HTTP side */
    TokenLogprob *lp;  /* logprobs of generated tokens not yet taken (when logprobs ≥ 0) */
    size_t n_lp, cap_lp;
    int n_gen;         /* tokens generated */
    int n_cached;      /* prompt tokens restored from a checkpoint */
    int slot_ran;      /* the slot it was admitted to (-1 before) */
    bool started;      /* the prompt is processed: the first token is coming */
    bool done;
    JobFinish finish;
    char error[512];
    double t_submit, t_admit, t_prompt_done, t_first, t_end;

    atomic_bool cancel;
    atomic_int refs;
    uint64_t id;
    struct Job *next; /* scheduler queue */
} Job;

/* A new job with one reference (the creator's). */
Job *job_new(void);
void job_ref(Job *j);
void job_unref(Job *j);

#endif
