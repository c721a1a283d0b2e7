/* scheduler.c — see scheduler.h: slots, queue, prefill segments, checkpoints, sampling (logit bias,
 * constraints), stop handling and batched decode, all on one thread. Also the Job helpers of job.h. */
#include "server/scheduler.h"
#include "server/vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------------------------ jobs */

Job *job_new(void) {
    Job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->cancel, false);
    atomic_init(&j->refs, 1);
    j->use_cache = true;
    j->logprobs = -1;
    j->slot_id = -1;
    j->slot_ran = -1;
    return j;
}

void job_ref(Job *j) { atomic_fetch_add(&j->refs, 1); }

PromptShare *prompt_share_new(void) {
    PromptShare *p = calloc(1, sizeof *p);
    if (p) atomic_init(&p->refs, 1), atomic_init(&p->dead, false);
    return p;
}

void prompt_share_unref(PromptShare *p) {
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
    free(p->state);
    free(p);
}

void job_unref(Job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    free(j->prompt);
    stop_free(&j->stop);
    constraint_free(j->constraint);
    sampler_spec_free(j->spx);
    prompt_share_unref(j->share);
    job_mm_free(j->mm);
    free(j->bias);
    free(j->lp);
    sbuf_free(&j->text);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* ------------------------------------------------------------------------------------------ state */

enum { SLOT_FREE, SLOT_PREFILL, SLOT_GEN, SLOT_WAIT /* n > 1: for the leader's prompt state */ };

typedef struct Slot {
    int id, state;
    bool busy; /* != SLOT_FREE, for other threads (under Scheduler.mu) */
    DlSession *sess;
    Job *job;
    size_t n_done; /* prompt tokens in the session */
    DlSampler *smp;
    DlDetok *detok;
    uint64_t *keys; /* prefix keys of the prompt, one per checkpoint interval */
    int32_t token;  /* sampled, to be decoded */
    bool pending;   /* drafting: token was emitted by a speculative step and waits for the next one */
    int ahead;      /* drafting: tokens the session evaluated beyond what plain decoding has at this token */
    bool truncating; /* constrained, and the shortest answer does not fit max_tokens: cut, not closed */
    uint64_t order; /* admission order */
    SBuf out;       /* scratch for released text */
    int32_t *gen;   /* the tokens emitted so far (the reply checkpoint's tail) */
    size_t n_gen, cap_gen;
    bool gen_lost;  /* out of memory while recording them: no reply checkpoint */
    bool in_flight; /* over MPI: its decode step is in the pipe */
    int32_t *hist;  /* the tokens of the last job: prompt, then what it generated (slot save) */
    size_t n_hist, cap_hist;
    bool kept;      /* the session holds hist[0, n_hist) exactly (a restored slot): a job whose prompt starts
                       with it continues from there */
    bool held;      /* a slot action (save / restore / erase) works on it: not admitted to */
} Slot;

/* Over MPI: one group of slots whose decode step is in the pipe (dl_decode_start). */
typedef struct Group {
    Slot *slot[256];
    Job *job[256]; /* each slot's job when the step started */
    int n;
} Group;

struct Scheduler {
    SchedConfig cfg;
    const DlModelInfo *info;
    Slot *slots;
    float *work; /* [n_vocab] logits after bias / masking */
    const char **piece;
    size_t *piece_len;
    uint8_t *tok_flags; /* 1 eog, 2 control */
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    Job *q_head, *q_tail;
    int q_len;
    bool stopping;
    uint64_t order;
    SchedStats st;
    atomic_ullong n_forward; /* forward passes (scheduler thread writes, readers load) */
    int depth;      /* dl_engine_pipeline_depth: > 1 over MPI */
    Group *groups;  /* [depth], oldest at g_head */
    int g_head, g_n;
    DlDraftParams draft;     /* cfg.draft points here */
};

/* ------------------------------------------------------------------------------------------ output */

static void job_push_text(Job *j, const char *text, size_t n) {
    if (!n) return;
    pthread_mutex_lock(&j->mu);
    sbuf_put(&j->text, text, n);
    if (j->notify_text) pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* The timestamps are read by other threads (sched_slots, the HTTP side): written under the job's lock. */
static void job_set_time(Job *j, double *field) {
    pthread_mutex_lock(&j->mu);
    *field = now_s();
    pthread_mutex_unlock(&j->mu);
}

static void job_finish(Job *j, JobFinish f, const char *error) {
    pthread_mutex_lock(&j->mu);
    if (!j->done) {
        j->done = true;
        j->finish = f;
        if (error) snprintf(j->error, sizeof j->error, "%s", error);
        j->t_end = now_s();
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void slot_release(Scheduler *s, Slot *sl) {
    sl->n_gen = 0;
    sl->gen_lost = false;
    if (sl->job && sl->job->share && sl->job->share_leader && !sl->job->share->ready)
        atomic_store(&sl->job->share->dead, true);
    dl_sampler_free(sl->smp);
    dl_detok_free(sl->detok);
    free(sl->keys);
    sl->smp = NULL;
    sl->detok = NULL;
    sl->keys = NULL;
    sl->out.n = 0;
    Job *j = sl->job;
    pthread_mutex_lock(&s->mu);
    if (j) {
        double now = now_s(), admit = j->t_admit > 0 ? j->t_admit : now;
        double prompt_done = j->t_prompt_done > 0 ? j->t_prompt_done : now;
        s->st.jobs_done++;
        s->st.tokens_generated += (uint64_t)j->n_gen;
        s->st.prompt_seconds += prompt_done - admit;
        if (j->t_prompt_done > 0) s->st.gen_seconds += now - j->t_prompt_done;
    }
    sl->busy = false;
    sl->job = NULL; /* under mu: sched_slots reads it */
    pthread_mutex_unlock(&s->mu);
    job_unref(j);
    sl->state = SLOT_FREE;
}

/* A checkpoint of the session as it stands (tokens[0, pos) = the prompt, then gen[0, pos - n_prompt)), kept
 * at that exact position: the next turn of a conversation resumes there. */
static void keep_exact(Scheduler *s, Slot *sl, size_t pos) {
    Job *j = sl->job;
    if (!s->cfg.cache || !j || !j->use_cache || pos < 1 || pos > j->n_prompt + sl->n_gen) return;
    int32_t *tokens = malloc(pos * sizeof *tokens);
    size_t size = dl_session_snapshot_size(sl->sess);
    void *buf = tokens ? malloc(size) : NULL;
    DlError e = {{0}};
    if (buf && dl_session_snapshot(sl->sess, buf, size, &e) == 0) {
        const size_t np = pos < j->n_prompt ? pos : j->n_prompt;
        memcpy(tokens, j->prompt, np * sizeof *tokens);
        if (pos > np) memcpy(tokens + np, sl->gen, (pos - np) * sizeof *tokens); /* sl->gen may be NULL */
        pcache_store_exact(s->cfg.cache, tokens, pos, buf, size);
    } else {
        free(buf);
        srv_log(LOG_WARN, "checkpoint at %zu tokens not taken: %s", pos, buf ? e.msg : "out of memory");
    }
    free(tokens);
}

static void slot_fail(Scheduler *s, Slot *sl, JobFinish f, const char *why) {
    /* a reply that ended normally: the session holds the state after its evaluated tokens (not the last one
       sampled, an end-of-turn token the next prompt writes itself) — bit for bit the state a prefill of the
       same tokens gives, as the default arithmetic does not depend on how the tokens are batched */
    if ((f == FINISH_STOP || f == FINISH_LENGTH) && sl->job && sl->state == SLOT_GEN && !sl->ahead && !sl->in_flight &&
        !sl->pending && !sl->gen_lost) {
        const size_t past = (size_t)dl_session_n_past(sl->sess);
        if (past > sl->job->n_prompt) keep_exact(s, sl, past);
    }
    if (sl->job) job_finish(sl->job, f, why);
    slot_release(s, sl);
}

/* ------------------------------------------------------------------------------------------ admission */

/* Which checkpoints a prompt leaves (b counts intervals): all with --cache-dense; otherwise the last one
 * before the final turn header (the next turn of the conversation resumes there), the last one of the
 * prompt (the same prompt again: regenerate, retries), and those at 1, 2, 4, 8, ... intervals (shared
 * system prompts and tool lists, branches) — O(log n) snapshots per prompt. */
static bool keep_checkpoint(const Scheduler *s, size_t b, const Job *j) {
    const size_t K = (size_t)s->cfg.chunk;
    if (s->cfg.dense) return true;
    return b == j->n_prompt / K || (j->n_stable && b == j->n_stable / K) || (b & (b - 1)) == 0;
}

static bool hist_put(Slot *sl, const int32_t *t, size_t n) {
    if (n == 0) return true;
    if (sl->n_hist + n > sl->cap_hist) {
        size_t cap = (sl->n_hist + n) * 2 + 64;
        int32_t *p = realloc(sl->hist, cap * sizeof *p);
        if (!p) return false;
        sl->hist = p, sl->cap_hist = cap;
    }
    memcpy(sl->hist + sl->n_hist, t, n * sizeof *t);
    sl->n_hist += n;
    return true;
}

/* n > 1: the leader's prompt is done: its state for the other choices. */
static void share_publish(Slot *sl) {
    PromptShare *p = sl->job->share;
    if (!p || !sl->job->share_leader || p->ready) return;
    DlError e = {{0}};
    p->size = dl_session_snapshot_size(sl->sess);
    if ((p->state = malloc(p->size)) && dl_session_snapshot(sl->sess, p->state, p->size, &e) == 0) {
        p->ready = true;
        return;
    }
    srv_log(LOG_WARN, "job %llu: the prompt state was not shared (%s): the other choices evaluate it",
            (unsigned long long)sl->job->id, p->state ? e.msg : "out of memory");
    free(p->state);
    p->state = NULL;
    atomic_store(&p->dead, true);
}

/* n > 1: a choice waiting for the leader's prompt state takes it when it is there (true: the slot moved on). */
static bool share_take(Scheduler *s, Slot *sl) {
    Job *j = sl->job;
    PromptShare *p = j->share;
    DlError e = {{0}};
    if (p->ready && dl_session_restore(sl->sess, p->state, p->size, &e) == 0) {
        sl->n_done = j->n_prompt;
        sl->state = SLOT_GEN;
        pthread_mutex_lock(&j->mu);
        j->n_cached = (int)j->n_prompt;
        pthread_mutex_unlock(&j->mu);
        pthread_mutex_lock(&s->mu);
        s->st.tokens_prompt += j->n_prompt;
        s->st.tokens_cached += j->n_prompt;
        pthread_mutex_unlock(&s->mu);
        job_set_time(j, &j->t_prompt_done);
        return true;
    }
    if (p->ready) srv_log(LOG_WARN, "job %llu: the shared prompt state was not restored: %s", (unsigned long long)j->id, e.msg);
    if (p->ready || atomic_load(&p->dead)) { /* evaluate it here */
        dl_session_reset(sl->sess);
        sl->n_done = 0;
        sl->state = SLOT_PREFILL;
        pthread_mutex_lock(&s->mu);
        s->st.tokens_prompt += j->n_prompt;
        pthread_mutex_unlock(&s->mu);
        return true;
    }
    return false;
}

static void slot_begin(Scheduler *s, Slot *sl, Job *j) {
    DlError e = {{0}};
    sl->order = ++s->order; /* sl->job was set at admission, under the lock */
    /* a restored slot continues a prompt that starts with its tokens (a prefix of the prompt, all of it at most) */
    /* (a choice that shares its leader's prompt evaluation takes the leader's snapshot instead) */
    size_t resume = sl->kept && sl->n_hist && sl->n_hist <= j->n_prompt && !(j->share && !j->share_leader) &&
                            !memcmp(sl->hist, j->prompt, sl->n_hist * sizeof *sl->hist)
                        ? sl->n_hist
                        : 0;
    sl->kept = false;
    sl->n_hist = 0;
    if (!hist_put(sl, j->prompt, j->n_prompt)) sl->n_hist = 0;
    sl->n_done = 0;
    sl->pending = false;
    sl->ahead = 0;
    job_set_time(j, &j->t_admit);
    pthread_mutex_lock(&j->mu);
    j->slot_ran = sl->id;
    pthread_mutex_unlock(&j->mu);
    sl->smp = dl_sampler_new_extra(s->cfg.engine, &j->sp, j->spx ? &j->spx->x : NULL, &e);
    sl->detok = sl->smp ? dl_detok_new(s->cfg.engine, j->render_special, &e) : NULL;
    size_t nk = j->n_prompt / (size_t)s->cfg.chunk;
    sl->keys = malloc((nk + 1) * sizeof *sl->keys);
    if (!sl->smp || !sl->detok || !sl->keys) {
        slot_fail(s, sl, FINISH_ERROR, sl->keys ? e.msg : "out of memory");
        return;
    }
    if (resume) {
        sl->n_done = resume;
        srv_log(LOG_DEBUG, "job %llu: continues the restored state of slot %d (%zu tokens)", (unsigned long long)j->id,
                sl->id, resume);
    } else {
        dl_session_reset(sl->sess);
    }
    if (!resume && j->share && !j->share_leader) {
        sl->state = SLOT_WAIT;
        share_take(s, sl);
        return;
    }
    if (s->cfg.cache && j->use_cache) pcache_prefix_keys(j->prompt, j->n_prompt, s->cfg.chunk, sl->keys);
    if (!resume && s->cfg.cache && j->use_cache) {
        PcacheHit hit;
        if (pcache_lookup(s->cfg.cache, j->prompt, s->cfg.chunk, sl->keys, j->n_prompt, &hit)) {
            if (dl_session_restore(sl->sess, hit.data, hit.size, &e) == 0) {
                sl->n_done = hit.pos;
                srv_log(LOG_DEBUG, "job %llu: resumed from a checkpoint of %zu tokens%s", (unsigned long long)j->id,
                        hit.pos, hit.from_disk ? " (disk)" : "");
            } else {
                srv_log(LOG_WARN, "job %llu: checkpoint not restored: %s", (unsigned long long)j->id, e.msg);
                dl_session_reset(sl->sess);
            }
            pcache_release(s->cfg.cache, &hit);
        }
        /* a checkpoint at a turn header or at the end of a reply, when it covers more */
        if (pcache_lookup_exact(s->cfg.cache, j->prompt, sl->n_done, j->n_prompt, &hit)) {
            if (dl_session_restore(sl->sess, hit.data, hit.size, &e) == 0) {
                sl->n_done = hit.pos;
                srv_log(LOG_DEBUG, "job %llu: resumed from the exact checkpoint of %zu tokens", (unsigned long long)j->id,
                        hit.pos);
            } else {
                srv_log(LOG_WARN, "job %llu: checkpoint not restored: %s", (unsigned long long)j->id, e.msg);
                dl_session_reset(sl->sess);
                sl->n_done = 0;
            }
            pcache_release(s->cfg.cache, &hit);
        }
    }
    pthread_mutex_lock(&j->mu);
    j->n_cached = (int)sl->n_done;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&s->mu);
    s->st.tokens_prompt += j->n_prompt;
    s->st.tokens_cached += sl->n_done;
    pthread_mutex_unlock(&s->mu);
    sl->state = sl->n_done == j->n_prompt ? SLOT_GEN : SLOT_PREFILL;
    if (sl->state == SLOT_GEN) job_set_time(j, &j->t_prompt_done), share_publish(sl);
}

/* ------------------------------------------------------------------------------------------ prefill */

static void prefill_step(Scheduler *s, Slot *sl) {
    Job *j = sl->job;
    DlError e = {{0}};
    const size_t seg = (size_t)s->cfg.segment, K = (size_t)s->cfg.chunk;
    size_t end = (sl->n_done / seg + 1) * seg;
    if (end > j->n_prompt) end = j->n_prompt;
    /* land on the last turn header: the next turn's prompt matches up to there (the template may write this
       turn's reply differently in the history, as Qwen3.5's drops an empty think block) */
    const bool at_stable = s->cfg.cache && j->use_cache && j->n_stable > sl->n_done && j->n_stable < end && j->n_stable % K != 0;
    if (at_stable) end = j->n_stable;
    s->n_forward++;
    if (j->mm ? sv_eval(sl->sess, j->mm, sl->n_done, end, &e)
              : dl_session_eval(sl->sess, j->prompt + sl->n_done, end - sl->n_done, &e)) {
        srv_log(LOG_ERROR, "job %llu: prefill failed: %s", (unsigned long long)j->id, e.msg);
        slot_fail(s, sl, FINISH_ERROR, e.msg);
        return;
    }
    sl->n_done = end;
    if (at_stable) keep_exact(s, sl, end);
    if (s->cfg.cache && j->use_cache && end % K == 0 && keep_checkpoint(s, end / K, j)) {
        uint64_t key = sl->keys[end / K - 1];
        if (!pcache_contains(s->cfg.cache, key, end)) {
            size_t size = dl_session_snapshot_size(sl->sess);
            void *buf = malloc(size);
            if (buf && dl_session_snapshot(sl->sess, buf, size, &e) == 0) {
                pcache_store(s->cfg.cache, j->prompt, end, key, buf, size);
            } else {
                free(buf);
                srv_log(LOG_WARN, "checkpoint at %zu tokens not taken: %s", end, buf ? e.msg : "out of memory");
            }
        }
    }
    if (sl->n_done == j->n_prompt) {
        sl->state = SLOT_GEN;
        job_set_time(j, &j->t_prompt_done);
        share_publish(sl);
    }
}

/* ------------------------------------------------------------------------------------------ sampling */

static bool token_allowed(const Scheduler *s, const Constraint *c, int32_t t) {
    if (t < 0 || t >= s->info->n_vocab) return false;
    if (s->tok_flags[t] & 1) return constraint_can_end(c); /* a grammar that may stop here */
    if (s->tok_flags[t] || !s->piece_len[t]) return false;
    return constraint_allows(c, s->piece[t], s->piece_len[t]);
}

/* The next token, or -1 when the constraint admits none. */
static int32_t sample(Scheduler *s, Slot *sl) {
    Job *j = sl->job;
    const float *logits = dl_session_logits(sl->sess);
    const int V = s->info->n_vocab;
    const float *src = logits;
    if (j->n_bias) {
        memcpy(s->work, logits, sizeof(float) * (size_t)V);
        for (int i = 0; i < j->n_bias; i++) s->work[j->bias[i].id] += j->bias[i].bias;
        src = s->work;
    }
    const char *lit;
    size_t lit_len;
    if (j->constraint && constraint_literal(j->constraint, &lit, &lit_len)) {
        /* fixed text: its first token as the tokenizer would write it (not a byte-sized piece) */
        int32_t *ids = NULL;
        size_t n = 0;
        DlError e;
        int32_t first = -1;
        if (dl_tokenize(s->cfg.engine, lit, lit_len, false, &ids, &n, &e) == 0 && n > 0) first = ids[0];
        free(ids);
        if (first >= 0 && token_allowed(s, j->constraint, first)) return first;
    }
    int32_t t = dl_sampler_sample(sl->smp, src);
    if (!j->constraint || token_allowed(s, j->constraint, t)) return t;
    if (src != s->work) memcpy(s->work, logits, sizeof(float) * (size_t)V);
    int n_ok = 0;
    for (int32_t v = 0; v < V; v++) {
        if (token_allowed(s, j->constraint, v)) n_ok++;
        else s->work[v] = -INFINITY;
    }
    if (!n_ok) return -1;
    return dl_sampler_sample(sl->smp, s->work); /* = sampling from the masked distribution */
}

/* Records the model's logprob of t and of the job's top alternatives (log-softmax of the raw logits). */
static void record_logprob(Scheduler *s, Slot *sl, int32_t t) {
    Job *j = sl->job;
    const float *l = dl_session_logits(sl->sess);
    const int V = s->info->n_vocab;
    TokenLogprob e;
    memset(&e, 0, sizeof e);
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    double sum = 0;
    for (int v = 0; v < V; v++) sum += exp((double)l[v] - mx);
    const double lse = mx + log(sum);
    const int K = j->logprobs < LOGPROBS_MAX_TOP ? j->logprobs : LOGPROBS_MAX_TOP;
    for (int v = 0; v < V && K > 0; v++) {
        if (e.n_top == K && l[v] <= e.top_logprob[K - 1]) continue;
        int at = e.n_top < K ? e.n_top++ : K - 1; /* insertion into the sorted top list */
        while (at > 0 && e.top_logprob[at - 1] < l[v]) {
            e.top_logprob[at] = e.top_logprob[at - 1], e.top_id[at] = e.top_id[at - 1];
            at--;
        }
        e.top_logprob[at] = l[v], e.top_id[at] = v;
    }
    for (int i = 0; i < e.n_top; i++) e.top_logprob[i] = (float)(e.top_logprob[i] - lse);
    e.id = t;
    e.logprob = (float)(l[t] - lse);
    pthread_mutex_lock(&j->mu);
    if (j->n_lp == j->cap_lp) {
        size_t cap = j->cap_lp ? j->cap_lp * 2 : 16;
        TokenLogprob *p = realloc(j->lp, cap * sizeof *p);
        if (p) j->lp = p, j->cap_lp = cap;
    }
    if (j->n_lp < j->cap_lp) j->lp[j->n_lp++] = e;
    pthread_mutex_unlock(&j->mu);
}

/* Emits what the detokenizer and the stop filter still hold. */
static void flush_text(Slot *sl) {
    Job *j = sl->job;
    const char *t;
    size_t n;
    dl_detok_flush(sl->detok, &t, &n);
    sl->out.n = 0;
    if (j->constraint) sbuf_put(&sl->out, t, n);
    else if (!stop_feed(&j->stop, t, n, &sl->out)) stop_flush(&j->stop, &sl->out);
    job_push_text(j, sl->out.p, sl->out.n);
}

/* Tokens the job may still emit: max_tokens and the context. */
static int budget_left(const Slot *sl) {
    int by_max = sl->job->max_tokens - sl->job->n_gen;
    int by_ctx = dl_session_n_ctx(sl->sess) - (dl_session_n_past(sl->sess) - sl->ahead);
    return by_max < by_ctx ? by_max : by_ctx;
}

/* The number of tokens text takes, as the tokenizer writes it (ids: the tokens, malloc'd, when wanted). */
static size_t count_tokens(const Scheduler *s, const char *text, size_t n, int32_t **ids) {
    int32_t *v = NULL;
    size_t k = 0;
    DlError e;
    if (n && dl_tokenize(s->cfg.engine, text, n, false, &v, &k, &e) != 0) k = n; /* cannot fail on valid text */
    if (ids) *ids = v;
    else free(v);
    return k;
}

/* Ends a constrained job inside its budget: the first `budget` tokens of the shortest completion of what was
 * generated (all of it when it fits: the answer is then valid JSON / a whole call), counted as generated. */
static void close_constraint(Scheduler *s, Slot *sl, int budget) {
    Job *j = sl->job;
    SBuf comp = {0};
    constraint_completion(j->constraint, &comp);
    int32_t *ids = NULL;
    size_t n = count_tokens(s, comp.p, comp.n, &ids), k = budget > 0 && (size_t)budget < n ? (size_t)budget : n;
    if (!ids) k = 0;
    sl->out.n = 0;
    for (size_t i = 0; i < k; i++) {
        const char *text;
        size_t tn;
        DlError e;
        if (dl_detok_push(sl->detok, ids[i], &text, &tn, &e) == 0) sbuf_put(&sl->out, text, tn);
    }
    pthread_mutex_lock(&j->mu);
    j->n_gen += (int)k;
    pthread_mutex_unlock(&j->mu);
    job_push_text(j, sl->out.p, sl->out.n);
    free(ids);
    sbuf_free(&comp);
    flush_text(sl);
    slot_fail(s, sl, FINISH_LENGTH, NULL);
}

/* A constrained job's next token t must leave room for the completion it implies: when the tokens after it
 * would not fit the budget, the answer closes now instead (and stays valid within max_tokens). A job whose
 * shortest answer is already longer than its budget is cut at max_tokens (sl->truncating). */
static bool constraint_fits(Scheduler *s, Slot *sl, int32_t t) {
    Job *j = sl->job;
    int budget = budget_left(sl);
    if (!j->n_gen) {
        SBuf comp = {0};
        constraint_completion(j->constraint, &comp);
        sl->truncating = count_tokens(s, comp.p, comp.n, NULL) > (size_t)budget;
        sbuf_free(&comp);
    }
    if (sl->truncating) return true;
    SBuf after = {0};
    bool ok = constraint_completion_after(j->constraint, s->piece[t], s->piece_len[t], &after) &&
              count_tokens(s, after.p, after.n, NULL) <= (size_t)(budget - 1);
    sbuf_free(&after);
    return ok;
}

/* Handles one sampled token; returns true when the slot goes on (the token must be decoded). accept: record
 * it in the sampler (a speculative step has done that already). */
static bool emit_token(Scheduler *s, Slot *sl, int32_t t, bool accept) {
    Job *j = sl->job;
    DlError e = {{0}};
    if (t < 0) { /* the constraint admits no token: close it */
        close_constraint(s, sl, budget_left(sl));
        return false;
    }
    if ((s->tok_flags[t] & 1) && (!j->constraint || constraint_can_end(j->constraint))) {
        flush_text(sl);
        slot_fail(s, sl, FINISH_STOP, NULL);
        return false;
    }
    if (j->constraint && !constraint_fits(s, sl, t)) {
        close_constraint(s, sl, budget_left(sl));
        return false;
    }
    const char *text;
    size_t n;
    hist_put(sl, &t, 1); /* on failure the history is short: a save then refuses (n_past beyond it) */
    if (dl_detok_push(sl->detok, t, &text, &n, &e)) {
        slot_fail(s, sl, FINISH_ERROR, e.msg);
        return false;
    }
    if (accept) dl_sampler_accept(sl->smp, t);
    if (sl->n_gen == sl->cap_gen) {
        size_t cap = sl->cap_gen ? 2 * sl->cap_gen : 256;
        int32_t *g = realloc(sl->gen, cap * sizeof *g);
        if (g) sl->gen = g, sl->cap_gen = cap;
    }
    if (sl->n_gen < sl->cap_gen && !sl->gen_lost) sl->gen[sl->n_gen++] = t;
    else sl->gen_lost = true;
    pthread_mutex_lock(&j->mu);
    j->n_gen++;
    if (j->n_gen == 1) j->t_first = now_s();
    pthread_mutex_unlock(&j->mu);
    sl->out.n = 0;
    bool stopped = false;
    if (j->constraint) {
        const bool was_lossy = constraint_lossy(j->constraint);
        constraint_advance(j->constraint, s->piece[t], s->piece_len[t]);
        if (!was_lossy && constraint_lossy(j->constraint))
            srv_log(LOG_WARN, "job %llu: the grammar is too ambiguous here (more live alternatives than the bound): "
                    "some valid continuations may be refused from here on", (unsigned long long)j->id);
        sbuf_put(&sl->out, text, n);
        stopped = constraint_done(j->constraint);
    } else {
        stopped = stop_feed(&j->stop, text, n, &sl->out);
    }
    job_push_text(j, sl->out.p, sl->out.n);
    if (stopped) {
        if (j->constraint) flush_text(sl);
        slot_fail(s, sl, FINISH_STOP, NULL);
        return false;
    }
    if (budget_left(sl) <= 0) {
        flush_text(sl);
        slot_fail(s, sl, FINISH_LENGTH, NULL);
        return false;
    }
    sl->token = t;
    return true;
}

/* Samples a generating slot's next token and hands it on; true when the slot goes on (sl->token is to be
 * decoded). */
static bool next_token(Scheduler *s, Slot *sl) {
    if (!sl->job->started) {
        pthread_mutex_lock(&sl->job->mu);
        sl->job->started = true;
        pthread_mutex_unlock(&sl->job->mu);
    }
    int32_t t = sample(s, sl);
    if (t >= 0 && sl->job->logprobs >= 0) record_logprob(s, sl, t);
    return emit_token(s, sl, t, true);
}

/* Over MPI (depth > 1): the generating slots in up to depth groups; a group's step starts as soon as its
 * tokens are sampled and finishes when its logits are back, so while one group crosses the other ranks the
 * next one is computed on rank 0. Each call starts what is ready, then finishes the oldest group. */
static void finish_group(Scheduler *s) {
    Group *g = &s->groups[s->g_head];
    DlError e = {{0}};
    const int rc = dl_decode_finish(s->cfg.engine, &e);
    s->g_head = (s->g_head + 1) % s->depth;
    s->g_n--;
    if (rc) srv_log(LOG_ERROR, "decode failed: %s", e.msg);
    for (int i = 0; i < g->n; i++) {
        g->slot[i]->in_flight = false;
        if (rc && g->slot[i]->state == SLOT_GEN && g->slot[i]->job == g->job[i]) slot_fail(s, g->slot[i], FINISH_ERROR, e.msg);
    }
}

static void decode_step_pipelined(Scheduler *s) {
    int n_gen = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) n_gen += s->slots[i].state == SLOT_GEN;
    const int per = (n_gen + s->depth - 1) / s->depth;
    for (int i = 0; per > 0 && s->g_n < s->depth;) {
        Group *g = &s->groups[(s->g_head + s->g_n) % s->depth];
        DlSession *sess[256];
        int32_t toks[256];
        g->n = 0;
        for (; i < s->cfg.n_slots && g->n < per; i++) {
            Slot *sl = &s->slots[i];
            if (sl->state != SLOT_GEN || sl->in_flight || !next_token(s, sl)) continue;
            sess[g->n] = sl->sess;
            toks[g->n] = sl->token;
            g->job[g->n] = sl->job;
            g->slot[g->n++] = sl;
        }
        if (!g->n) break;
        DlError e = {{0}};
        s->n_forward++;
        if (dl_decode_start(sess, toks, g->n, &e)) {
            srv_log(LOG_ERROR, "decode failed: %s", e.msg);
            for (int k = 0; k < g->n; k++) slot_fail(s, g->slot[k], FINISH_ERROR, e.msg);
            continue;
        }
        for (int k = 0; k < g->n; k++) g->slot[k]->in_flight = true;
        s->g_n++;
    }
    if (s->g_n > 0) finish_group(s);
}

/* Whether the slot's job takes speculative steps: drafting is on and the job samples from the model's own
 * distribution (the step samples each position from the raw logits, as plain decoding of such a job does). */
static bool slot_drafts(const Scheduler *s, const Slot *sl) {
    const Job *j = sl->job;
    return s->cfg.draft && !j->n_bias && !j->constraint && j->logprobs < 0;
}

/* One speculative step for n slots (their tokens emitted, not yet evaluated): emits what each step returns. */
static void speculate_step(Scheduler *s, Slot **who, int n) {
    DlSession *sess[256];
    DlSampler *smp[256];
    int32_t first[256], out[256 * (DL_DRAFT_MAX + 1)];
    int n_out[256];
    uint64_t drafted = 0, accepted = 0;
    DlDraftStats st;
    for (int i = 0; i < n; i++) {
        sess[i] = who[i]->sess, smp[i] = who[i]->smp, first[i] = who[i]->token;
        dl_session_draft_stats(sess[i], &st);
        drafted -= st.drafted, accepted -= st.accepted;
    }
    DlError e = {{0}};
    s->n_forward++;
    if (dl_speculate_batch(sess, smp, first, n, out, DL_DRAFT_MAX + 1, n_out, &e)) {
        srv_log(LOG_ERROR, "speculative step failed: %s", e.msg);
        for (int i = 0; i < n; i++) slot_fail(s, who[i], FINISH_ERROR, e.msg);
        return;
    }
    for (int i = 0; i < n; i++) {
        Slot *sl = who[i];
        dl_session_draft_stats(sess[i], &st);
        drafted += st.drafted, accepted += st.accepted;
        bool going = true;
        for (int t = 0; t < n_out[i] && going; t++) {
            sl->ahead = n_out[i] - 1 - t; /* budget_left counts the context as plain decoding has it */
            going = emit_token(s, sl, out[i * (DL_DRAFT_MAX + 1) + t], false);
        }
        sl->ahead = 0;
        sl->pending = going;
    }
    pthread_mutex_lock(&s->mu);
    s->st.drafted += drafted, s->st.accepted += accepted;
    pthread_mutex_unlock(&s->mu);
}

static void decode_step(Scheduler *s) {
    if (s->depth > 1) {
        decode_step_pipelined(s);
        return;
    }
    DlSession *sess[256];
    int32_t toks[256];
    Slot *who[256], *spec[256];
    int n = 0, ns = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) {
        Slot *sl = &s->slots[i];
        if (sl->state != SLOT_GEN) continue;
        if (!sl->job->started) {
            pthread_mutex_lock(&sl->job->mu);
            sl->job->started = true;
            pthread_mutex_unlock(&sl->job->mu);
        }
        if (sl->pending) { /* emitted by the last speculative step */
            sl->pending = false;
            spec[ns++] = sl;
            continue;
        }
        int32_t t = sample(s, sl);
        if (t >= 0 && sl->job->logprobs >= 0) record_logprob(s, sl, t);
        if (!emit_token(s, sl, t, true)) continue;
        if (slot_drafts(s, sl)) {
            spec[ns++] = sl;
            continue;
        }
        sess[n] = sl->sess;
        toks[n] = sl->token;
        who[n++] = sl;
    }
    if (ns) speculate_step(s, spec, ns);
    if (!n) return;
    DlError e = {{0}};
    s->n_forward++;
    if (dl_decode_batch(sess, toks, n, &e)) {
        srv_log(LOG_ERROR, "decode failed: %s", e.msg);
        for (int i = 0; i < n; i++) slot_fail(s, who[i], FINISH_ERROR, e.msg);
    }
}

/* ------------------------------------------------------------------------------------------ the loop */

static bool any_active(const Scheduler *s) {
    for (int i = 0; i < s->cfg.n_slots; i++)
        if (s->slots[i].state != SLOT_FREE) return true;
    return false;
}

static void *sched_main(void *arg) {
    Scheduler *s = arg;
    for (;;) {
        /* admission (and the stop request) under the lock */
        Job *admit[256];
        Slot *into[256];
        int n_admit = 0;
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && !s->q_head && !any_active(s)) pthread_cond_wait(&s->cv, &s->mu);
        bool stopping = s->stopping;
        /* FIFO; a job that names its slot (id_slot) waits for that one, and the jobs behind it go ahead */
        Job *prev = NULL, *next;
        for (Job *j = s->q_head; j && !stopping && n_admit < s->cfg.n_slots; j = next) {
            next = j->next;
            int i = -1;
            if (j->slot_id >= 0 && j->slot_id < s->cfg.n_slots && s->slots[j->slot_id].state == SLOT_FREE &&
                !s->slots[j->slot_id].held)
                i = j->slot_id;
            for (int k = 0; j->slot_id < 0 && k < s->cfg.n_slots && i < 0; k++)
                if (s->slots[k].state == SLOT_FREE && !s->slots[k].held) i = k;
            if (i < 0) {
                prev = j;
                continue;
            }
            if (prev) prev->next = next;
            else s->q_head = next;
            if (s->q_tail == j) s->q_tail = prev;
            s->q_len--;
            j->next = NULL;
            s->slots[i].state = SLOT_PREFILL; /* reserved */
            s->slots[i].busy = true;
            s->slots[i].job = j;
            admit[n_admit] = j;
            into[n_admit++] = &s->slots[i];
        }
        if (!stopping && !n_admit && !any_active(s)) {
            /* queued jobs all wait for slots held by a slot action (id_slot): sleep until one is given back */
            pthread_cond_wait(&s->cv, &s->mu);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        if (stopping) break;
        for (int i = 0; i < n_admit; i++) {
            if (atomic_load(&admit[i]->cancel)) {
                job_finish(admit[i], FINISH_CANCELLED, NULL);
                slot_release(s, into[i]);
                continue;
            }
            slot_begin(s, into[i], admit[i]);
        }
        /* cancelled jobs leave their slots now */
        for (int i = 0; i < s->cfg.n_slots; i++) {
            Slot *sl = &s->slots[i];
            if (sl->state != SLOT_FREE && atomic_load(&sl->job->cancel)) {
                srv_log(LOG_DEBUG, "job %llu: cancelled, slot %d freed", (unsigned long long)sl->job->id, i);
                slot_fail(s, sl, FINISH_CANCELLED, NULL);
            }
        }
        for (int i = 0; i < s->cfg.n_slots; i++)
            if (s->slots[i].state == SLOT_WAIT) share_take(s, &s->slots[i]);
        /* one prefill segment: the earliest admitted slot first */
        Slot *pre = NULL;
        for (int i = 0; i < s->cfg.n_slots; i++) {
            Slot *sl = &s->slots[i];
            if (sl->state == SLOT_PREFILL && (!pre || sl->order < pre->order)) pre = sl;
        }
        if (pre) prefill_step(s, pre);
        decode_step(s);
    }
    /* shutting down: fail what is left */
    for (int i = 0; i < s->cfg.n_slots; i++)
        if (s->slots[i].state != SLOT_FREE) slot_fail(s, &s->slots[i], FINISH_ERROR, "the server is shutting down");
    return NULL;
}

/* ------------------------------------------------------------------------------------------ API */

Scheduler *sched_new(const SchedConfig *cfg, Err *err) {
    Scheduler *s = calloc(1, sizeof *s);
    if (!s) return err_set(err, "out of memory"), NULL;
    s->cfg = *cfg;
    if (cfg->draft) s->draft = *cfg->draft, s->cfg.draft = &s->draft;
    s->info = dl_engine_info(cfg->engine);
    s->depth = dl_engine_pipeline_depth(cfg->engine);
    if (s->depth > cfg->n_slots) s->depth = cfg->n_slots;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (cfg->n_slots < 1 || cfg->n_slots > 256 || cfg->chunk < 1 || cfg->segment < 1 || cfg->chunk % cfg->segment) {
        sched_free(s);
        return err_set(err, "bad scheduler settings"), NULL;
    }
    const int V = s->info->n_vocab;
    s->slots = calloc((size_t)cfg->n_slots, sizeof *s->slots);
    s->work = malloc(sizeof(float) * (size_t)V);
    s->piece = calloc((size_t)V, sizeof *s->piece);
    s->piece_len = calloc((size_t)V, sizeof *s->piece_len);
    s->tok_flags = calloc((size_t)V, 1);
    if (s->depth > 1) s->groups = calloc((size_t)s->depth, sizeof *s->groups);
    if (!s->slots || !s->work || !s->piece || !s->piece_len || !s->tok_flags || (s->depth > 1 && !s->groups)) {
        sched_free(s);
        return err_set(err, "out of memory"), NULL;
    }
    for (int32_t t = 0; t < V; t++) {
        s->piece[t] = dl_token_piece(cfg->engine, t, &s->piece_len[t]);
        if (!s->piece[t]) s->piece_len[t] = 0;
        s->tok_flags[t] = (uint8_t)((dl_token_is_eog(cfg->engine, t) ? 1 : 0) |
                                    (dl_token_is_control(cfg->engine, t) ? 2 : 0));
    }
    for (int i = 0; i < cfg->n_slots; i++) {
        DlError e = {{0}};
        s->slots[i].id = i;
        if (!(s->slots[i].sess = dl_session_new(cfg->engine, &e)) ||
            (cfg->draft && dl_session_set_draft(s->slots[i].sess, cfg->draft, &e))) {
            err_set(err, "slot %d: %s", i, e.msg);
            sched_free(s);
            return NULL;
        }
    }
    if (pthread_create(&s->thread, NULL, sched_main, s) != 0) {
        sched_free(s);
        return err_set(err, "cannot start the scheduler thread"), NULL;
    }
    s->thread_started = true;
    return s;
}

void sched_shutdown(Scheduler *s) {
    pthread_mutex_lock(&s->mu);
    bool was = s->stopping;
    s->stopping = true;
    Job *q = s->q_head;
    s->q_head = s->q_tail = NULL;
    s->q_len = 0;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    while (q) {
        Job *next = q->next;
        job_finish(q, FINISH_ERROR, "the server is shutting down");
        job_unref(q);
        q = next;
    }
    if (!was && s->thread_started) {
        pthread_join(s->thread, NULL);
        s->thread_started = false;
    }
}

void sched_free(Scheduler *s) {
    if (!s) return;
    sched_shutdown(s);
    for (int i = 0; s->slots && i < s->cfg.n_slots; i++) dl_session_free(s->slots[i].sess);
    for (int i = 0; s->slots && i < s->cfg.n_slots; i++) sbuf_free(&s->slots[i].out), free(s->slots[i].hist);
    for (int i = 0; s->slots && i < s->cfg.n_slots; i++) free(s->slots[i].gen);
    free(s->slots);
    free(s->work);
    free(s->piece);
    free(s->piece_len);
    free(s->tok_flags);
    free(s->groups);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* Places free now: the queue's bound plus the slots that are free and not yet claimed by a queued job (every
 * job passes through the queue, so a free slot means one more job may wait there for an instant). */
/* A busy slot whose job is done: its answer may already be with the client, and the slot is free at the
 * scheduler's next step (under s->mu; the job's lock nests inside it, as in sched_slots). */
static bool finishing(const Slot *sl) {
    Job *j = sl->busy && !sl->held ? sl->job : NULL;
    if (!j) return false;
    pthread_mutex_lock(&j->mu);
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done;
}

static int places_left(const Scheduler *s) {
    int free_slots = 0;
    /* a finishing slot counts as free: a client that sends its next request the moment it has the answer
     * would otherwise find the slot still taken (a 503 with --queue 0) */
    for (int i = 0; i < s->cfg.n_slots; i++) free_slots += !s->slots[i].busy || finishing(&s->slots[i]);
    return s->cfg.queue_max + free_slots - s->q_len;
}

int sched_submit_all(Scheduler *s, Job *const *jobs, int k) {
    pthread_mutex_lock(&s->mu);
    int rc = SUBMIT_OK;
    if (s->stopping) rc = SUBMIT_STOPPING;
    else if (k > s->cfg.queue_max + s->cfg.n_slots ? s->q_len > 0 || places_left(s) < s->cfg.queue_max + s->cfg.n_slots
                                                   : k > places_left(s))
        rc = SUBMIT_QUEUE_FULL; /* a batch larger than the whole capacity waits only on an idle server */
    for (int i = 0; rc == SUBMIT_OK && i < k; i++) {
        Job *job = jobs[i];
        job_ref(job);
        job->t_submit = now_s();
        job->next = NULL;
        if (s->q_tail) s->q_tail->next = job;
        else s->q_head = job;
        s->q_tail = job;
        s->q_len++;
    }
    if (rc == SUBMIT_OK) pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int sched_submit(Scheduler *s, Job *job) { return sched_submit_all(s, &job, 1); }

void sched_cancel(Scheduler *s, Job *job) {
    atomic_store(&job->cancel, true);
    pthread_mutex_lock(&s->mu);
    /* a queued job leaves the queue at once */
    Job **pp = &s->q_head, *prev = NULL;
    bool removed = false;
    while (*pp) {
        if (*pp == job) {
            *pp = job->next;
            if (s->q_tail == job) s->q_tail = prev;
            s->q_len--;
            job->next = NULL;
            removed = true;
            break;
        }
        prev = *pp;
        pp = &(*pp)->next;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (removed) {
        if (job->share && job->share_leader) atomic_store(&job->share->dead, true);
        job_finish(job, FINISH_CANCELLED, NULL);
        job_unref(job);
    }
}

void sched_stats(Scheduler *s, SchedStats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->n_slots = s->cfg.n_slots;
    st->queued = s->q_len;
    st->queue_max = s->cfg.queue_max;
    int busy = 0;
    for (int i = 0; i < s->cfg.n_slots; i++) busy += s->slots[i].busy;
    st->busy = busy;
    st->forward_passes = atomic_load(&s->n_forward);
    pthread_mutex_unlock(&s->mu);
}

int sched_slots(Scheduler *s, SlotInfo *out, int cap) {
    int n = s->cfg.n_slots < cap ? s->cfg.n_slots : cap;
    double now = now_s();
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        const Slot *sl = &s->slots[i];
        SlotInfo *o = &out[i];
        memset(o, 0, sizeof *o);
        o->id = i;
        o->n_ctx = dl_session_n_ctx(sl->sess);
        Job *j = sl->busy ? sl->job : NULL;
        if (!j) continue;
        pthread_mutex_lock(&j->mu);
        o->state = j->t_prompt_done > 0 ? 2 : 1;
        o->job_id = j->id;
        o->n_prompt = (int)j->n_prompt;
        o->n_cached = j->n_cached;
        o->n_gen = j->n_gen;
        o->n_past = j->t_prompt_done > 0 ? (int)j->n_prompt + j->n_gen : j->n_cached;
        o->max_tokens = j->max_tokens;
        o->seconds = j->t_admit > 0 ? now - j->t_admit : 0;
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ------------------------------------------------------------------------------------------ slot actions */

/* Takes an idle slot away from admission (NULL: no such slot, or busy: *busy set). */
static Slot *slot_hold(Scheduler *s, int id, bool *busy) {
    *busy = false;
    if (id < 0 || id >= s->cfg.n_slots) return NULL;
    pthread_mutex_lock(&s->mu);
    Slot *sl = &s->slots[id];
    /* a slot whose job is done is released at the scheduler's next step: wait for it (up to a second) */
    for (int i = 0; i < 1000 && finishing(sl); i++) {
        pthread_mutex_unlock(&s->mu);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->mu);
    }
    if (sl->busy || sl->held) {
        *busy = true;
        sl = NULL;
    } else {
        sl->held = true;
        sl->busy = true;
    }
    pthread_mutex_unlock(&s->mu);
    return sl;
}

static void slot_unhold(Scheduler *s, Slot *sl) {
    pthread_mutex_lock(&s->mu);
    sl->held = false;
    sl->busy = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

int sched_slot_save(Scheduler *s, int id, int32_t **tokens, size_t *n, void **data, size_t *size, Err *err) {
    bool busy;
    *tokens = NULL, *data = NULL, *n = *size = 0;
    Slot *sl = slot_hold(s, id, &busy);
    if (!sl) return err_set(err, busy ? "slot %d is busy" : "no slot %d", id), busy ? SLOT_BUSY : SLOT_BAD;
    int rc = 0;
    size_t past = (size_t)dl_session_n_past(sl->sess);
    DlError e = {{0}};
    if (past == 0) rc = SLOT_BAD, err_set(err, "slot %d holds nothing to save", id);
    else if (past > sl->n_hist) rc = SLOT_FAILED, err_set(err, "slot %d: its tokens are not known (%zu past)", id, past);
    else if (!(*tokens = malloc(past * sizeof **tokens)) || !(*size = dl_session_snapshot_size(sl->sess)) ||
             !(*data = malloc(*size)))
        rc = SLOT_FAILED, err_set(err, "out of memory");
    else if (dl_session_snapshot(sl->sess, *data, *size, &e))
        rc = SLOT_FAILED, err_set(err, "%s", e.msg);
    if (rc == 0) {
        memcpy(*tokens, sl->hist, past * sizeof **tokens);
        *n = past;
    } else {
        free(*tokens), free(*data);
        *tokens = NULL, *data = NULL, *size = 0;
    }
    slot_unhold(s, sl);
    return rc;
}

int sched_slot_restore(Scheduler *s, int id, const int32_t *tokens, size_t n, const void *data, size_t size, Err *err) {
    bool busy;
    Slot *sl = slot_hold(s, id, &busy);
    if (!sl) return err_set(err, busy ? "slot %d is busy" : "no slot %d", id), busy ? SLOT_BUSY : SLOT_BAD;
    DlError e = {{0}};
    int rc = 0;
    sl->kept = false;
    sl->n_hist = 0;
    if (dl_session_restore(sl->sess, data, size, &e)) rc = SLOT_BAD, err_set(err, "%s", e.msg);
    else if ((size_t)dl_session_n_past(sl->sess) != n) rc = SLOT_BAD, err_set(err, "the file's state and tokens disagree");
    else if (!hist_put(sl, tokens, n)) rc = SLOT_FAILED, err_set(err, "out of memory");
    if (rc) dl_session_reset(sl->sess), sl->n_hist = 0;
    else sl->kept = true;
    slot_unhold(s, sl);
    return rc;
}

int sched_slot_erase(Scheduler *s, int id, size_t *n_erased, Err *err) {
    bool busy;
    *n_erased = 0;
    Slot *sl = slot_hold(s, id, &busy);
    if (!sl) return err_set(err, busy ? "slot %d is busy" : "no slot %d", id), busy ? SLOT_BUSY : SLOT_BAD;
    *n_erased = (size_t)dl_session_n_past(sl->sess);
    dl_session_reset(sl->sess);
    sl->n_hist = 0;
    sl->kept = false;
    slot_unhold(s, sl);
    return 0;
}
