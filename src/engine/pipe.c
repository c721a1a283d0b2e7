/* pipe.c — rank 0's side of an engine over MPI (pipe.h has the protocol): opening the other ranks' parts,
 * the batches in flight, the head, the session operations every rank applies, statistics, and the public
 * calls for pipelined decode (dl_decode_start / dl_decode_finish) and for joining the job (dl_mpi_*).
 *
 * A batch is computed on rank 0 up to its last layer (embeddings, layers [0, c1)), sent down the chain, and
 * "completed" when its hidden rows come back from the last rank: then the head runs on the rows that want
 * logits. The call that submits a batch returns at once unless it wants logits, so the batches of a long
 * prompt follow each other through the ranks (rank 0 computes batch i+1 while rank 1 computes batch i), and
 * dl_decode_start lets a server keep one group of sessions per rank in flight. Batches complete in order.
 *
 * The head runs on rank 0's own forward pass, between batches, on the session's rank-0 state (it runs no
 * layer, so only the state's bookkeeping is saved around it). Any failure — a rank that died, an MPI error, a
 * rank that could not compute a batch, a message out of order — breaks the pipe and fails the job: the ranks'
 * states may no longer agree, so every later call fails with the same line and every rank stops. (A rank
 * that cannot open the model, or make a session, only fails that call.) */
#include "engine/pipe.h"

#include "dist/dist.h"
#include "engine/engine_internal.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Item {
    uint64_t no;
    int n, rows;
    DlSession **sess; /* [n_seq_max] */
    BatchSeq *q;      /* [n_seq_max]: tokens, n_out, logits for the head */
    bool async;
} Item;

typedef struct Ticket {
    uint64_t no;
    bool done;
    int rc;
} Ticket;

struct Pipe {
    int n_ranks;
    int l0[PIPE_MAX_RANKS], l1[PIPE_MAX_RANKS];
    PipeOpenReply part[PIPE_MAX_RANKS];
    Weight *bound; /* rank 0's part of the registry (the backend keeps a pointer to it) */
    int n_bound;
    uint64_t bound_bytes;
    Item *ring;
    int cap, head, n_in, max_in; /* batches in flight, oldest at head */
    uint64_t next_no;
    Ticket *tickets; /* dl_decode_start's groups, oldest first */
    int t_head, t_n;
    char broken[512];
    float *hidden;  /* [n_batch][n_embd] */
    uint8_t *stage; /* header + sequence table of a batch */
    bool *id_used;
    int id_cap;
    double compute_s, t_reset; /* rank 0's statistics */
    uint64_t batches, tokens, bytes0;
};

static bool g_engine_open; /* one engine over the job at a time: the ranks serve one */

static int broken(const Pipe *p, Err *err) { return err_set(err, "%s", p->broken); }

/* The ranks may no longer agree: the pipe is done, and so is the job (every rank stops with this line). */
static int pipe_break(Pipe *p, const char *why) {
    if (!p->broken[0]) snprintf(p->broken, sizeof p->broken, "%s", why);
    if (!dist_failure()) dist_fail("%s", why);
    return -1;
}

/* ---- messages ---------------------------------------------------------------------------------------- */

static int send_chain(Pipe *p, const PipeHdr *h, const void *body, size_t bytes, Err *err) {
    Err e = {{0}};
    if (dist_send(1, PIPE_TAG_CHAIN, h, sizeof *h, body, bytes, &e)) return pipe_break(p, e.msg), broken(p, err);
    return 0;
}

/* The reply of rank r to op: 0 (the message in *out, or freed when out is NULL) or -1 with its error line. */
static int reply(Pipe *p, int r, PipeOp op, DistMsg **out, Err *err) {
    Err e = {{0}};
    DistMsg *m = dist_recv(r, PIPE_TAG_REPLY, &e);
    if (!m) return pipe_break(p, e.msg), broken(p, err);
    PipeHdr h;
    if (m->bytes < sizeof h) return dist_msg_free(m), pipe_break(p, "a malformed reply"), broken(p, err);
    memcpy(&h, m->data, sizeof h);
    if (h.op != (uint32_t)op) {
        dist_msg_free(m);
        char why[128];
        snprintf(why, sizeof why, "rank %d answered operation %u to operation %d (the protocol broke)", r, h.op, op);
        return pipe_break(p, why), broken(p, err);
    }
    if (h.status) {
        err_set(err, "rank %d (%s): %.*s", r, dist_host(r), (int)(m->bytes - sizeof h), (const char *)m->data + sizeof h);
        dist_msg_free(m);
        return -1;
    }
    if (out) *out = m;
    else dist_msg_free(m);
    return 0;
}

/* A control message down the chain; with want_reply, every rank's answer is awaited (the first error wins,
 * the others are still read so that no reply is left behind). */
static int control(Pipe *p, PipeOp op, int a, int b, const void *body, size_t bytes, bool want_reply, Err *err) {
    if (p->broken[0]) return broken(p, err);
    const PipeHdr h = {(uint32_t)op, 0, a, b, 0, 0, 0};
    if (send_chain(p, &h, body, bytes, err)) return -1;
    int rc = 0;
    for (int r = 1; want_reply && r < p->n_ranks && !p->broken[0]; r++) rc |= reply(p, r, op, NULL, err);
    return p->broken[0] ? broken(p, err) : rc;
}

/* ---- batches ----------------------------------------------------------------------------------------- */

/* The head for the rows of a completed batch that want logits. */
static int head_pass(DlEngine *en, Item *it, const float *hidden, Err *err) {
    Forward *fw = en->st[0].fw;
    struct {
        int n_past, rb_n, rb_pos0;
    } keep[256];
    BatchSeq q[256];
    for (int i = 0; i < it->n; i++) {
        SeqState *st = it->sess[i]->states[0];
        keep[i].n_past = st->n_past, keep[i].rb_n = st->rb.n, keep[i].rb_pos0 = st->rb.pos0;
        st->n_past = 0; /* no layer runs: positions and context room do not matter */
        q[i] = (BatchSeq){st, NULL, it->q[i].n_tokens, it->q[i].n_out, it->q[i].logits, false};
    }
    int rc = forward_begin(fw, q, it->n, err);
    if (rc == 0) {
        forward_hidden_write(fw, hidden);
        forward_head(fw);
        rc = forward_end(fw, err);
    }
    for (int i = 0; i < it->n; i++) {
        SeqState *st = it->sess[i]->states[0];
        st->n_past = keep[i].n_past, st->rb.n = keep[i].rb_n, st->rb.pos0 = keep[i].rb_pos0;
    }
    return rc;
}

static Ticket *ticket_of(Pipe *p, uint64_t no) {
    for (int k = 0; k < p->t_n; k++) {
        Ticket *t = &p->tickets[(p->t_head + k) % p->cap];
        if (t->no == no) return t;
    }
    return NULL;
}

/* Receives the oldest batch's rows back from the last rank and runs its head. */
static int complete_oldest(DlEngine *en, Err *err) {
    Pipe *p = en->pipe;
    if (p->broken[0]) return broken(p, err);
    ASSERT(p->n_in > 0);
    Item *it = &p->ring[p->head];
    Err e = {{0}};
    DistMsg *m = dist_recv(p->n_ranks - 1, PIPE_TAG_RESULT, &e);
    if (!m) return pipe_break(p, e.msg), broken(p, err);
    const size_t E = (size_t)en->model->cfg.n_embd;
    PipeHdr h = {0};
    if (m->bytes >= sizeof h) memcpy(&h, m->data, sizeof h);
    const size_t want = sizeof h + sizeof(float) * (size_t)it->rows * E;
    char why[480];
    if (m->bytes < sizeof h || h.op != PIPE_BATCH || h.item != it->no) {
        snprintf(why, sizeof why, "the last rank returned batch %llu out of order (expected %llu)",
                 (unsigned long long)h.item, (unsigned long long)it->no);
        dist_msg_free(m);
        return pipe_break(p, why), broken(p, err);
    }
    if (h.status || m->bytes != want) {
        snprintf(why, sizeof why, "%.*s", (int)(m->bytes - sizeof h),
                 h.status ? (const char *)m->data + sizeof h : "a batch came back with the wrong size");
        dist_msg_free(m);
        return pipe_break(p, why), broken(p, err);
    }
    int n_out = 0;
    for (int i = 0; i < it->n; i++) n_out += it->q[i].n_out;
    const double t0 = now_s();
    int rc = n_out ? head_pass(en, it, (const float *)(m->data + sizeof h), &e) : 0;
    p->compute_s += now_s() - t0;
    dist_msg_free(m);
    for (int i = 0; i < it->n; i++) {
        it->sess[i]->pipe_busy--;
        if (rc == 0 && it->q[i].n_out && it->q[i].logits == it->sess[i]->logits) it->sess[i]->has_logits = true;
    }
    Ticket *t = it->async ? ticket_of(p, it->no) : NULL;
    if (t) t->done = true, t->rc = rc;
    p->head = (p->head + 1) % p->cap;
    p->n_in--;
    if (rc) return pipe_break(p, e.msg), broken(p, err);
    return 0;
}

static int pipe_run(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, bool async, Err *err) {
    Pipe *p = en->pipe;
    if (p->broken[0]) return broken(p, err);
    if (n > en->n_seq_max) return err_set(err, "%d sequences in one batch (at most %d)", n, en->n_seq_max);
    int want = 0; /* the head's checks, made here: a batch the head would refuse must not leave */
    for (int i = 0; i < n; i++) {
        if (!seqs[i].tokens) return err_set(err, "no tokens for sequence %d of the batch", i);
        if (seqs[i].n_out < 0 || seqs[i].n_out > seqs[i].n_tokens || (seqs[i].n_out && !seqs[i].logits))
            return err_set(err, "bad logits request (%d rows of %d tokens)", seqs[i].n_out, seqs[i].n_tokens);
        want += seqs[i].n_out;
    }
    if (n > 1 && want > en->n_seq_max)
        return err_set(err, "%d logit rows requested from a multi-sequence batch (at most %d)", want, en->n_seq_max);
    while (p->n_in >= p->max_in)
        if (complete_oldest(en, err)) return -1;
    /* rank 0's layers */
    Stage *st = &en->st[0];
    BatchSeq q[256];
    for (int i = 0; i < n; i++) q[i] = seqs[i], q[i].state = sess[i]->states[0], q[i].n_out = 0, q[i].logits = NULL;
    const double t0 = now_s();
    if (forward_begin(st->fw, q, n, err)) return -1; /* the checks refuse before anything is sent */
    PipeSeq *ps = (PipeSeq *)(p->stage + sizeof(PipeHdr));
    for (int i = 0; i < n; i++)
        ps[i] = (PipeSeq){sess[i]->pipe_id, seqs[i].n_tokens, sess[i]->states[0]->n_past, seqs[i].tentative};
    forward_embed(st->fw);
    forward_layers(st->fw, st->l0, st->l1);
    forward_hidden_read(st->fw, p->hidden);
    const int rows = forward_rows(st->fw);
    if (forward_end(st->fw, err)) return pipe_break(p, err->msg);
    p->compute_s += now_s() - t0;
    Item *it = &p->ring[(p->head + p->n_in) % p->cap];
    const PipeHdr h = {PIPE_BATCH, n, 0, 0, 0, rows, p->next_no};
    memcpy(p->stage, &h, sizeof h);
    Err e = {{0}};
    if (dist_send(1, PIPE_TAG_CHAIN, p->stage, sizeof h + sizeof(PipeSeq) * (size_t)n, p->hidden,
                  sizeof(float) * (size_t)rows * (size_t)en->model->cfg.n_embd, &e))
        return pipe_break(p, e.msg), broken(p, err);
    it->no = p->next_no++;
    it->n = n;
    it->rows = rows;
    it->async = async;
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        it->sess[i] = sess[i];
        it->q[i] = seqs[i];
        sess[i]->pipe_busy++;
        n_out += seqs[i].n_out;
    }
    p->n_in++;
    p->batches++;
    p->tokens += (uint64_t)rows;
    if (async) {
        ASSERT(p->t_n < p->cap);
        p->tickets[(p->t_head + p->t_n++) % p->cap] = (Ticket){it->no, false, 0};
        return 0;
    }
    if (n_out == 0) return 0; /* the next batch of a prompt follows it down the chain */
    /* logits wanted: wait for this batch (and the ones before it) */
    const uint64_t mine = it->no;
    while (p->n_in > 0 && p->ring[p->head].no <= mine)
        if (complete_oldest(en, err)) return -1;
    return 0;
}

static int pipe_quiesce(DlSession *s, Err *err) {
    while (s->pipe_busy > 0 && !s->engine->pipe->broken[0])
        if (complete_oldest(s->engine, err)) return -1;
    return s->engine->pipe->broken[0] ? broken(s->engine->pipe, err) : 0;
}

static int drain(DlEngine *en, Err *err) {
    while (en->pipe->n_in > 0)
        if (complete_oldest(en, err)) return -1;
    return 0;
}

/* ---- opening and closing ------------------------------------------------------------------------------- */

static void fill_open(PipeOpen *o, const DlEngine *en, const DlEngineParams *p, const Pipe *pp) {
    memset(o, 0, sizeof *o);
    snprintf(o->path, sizeof o->path, "%s", p->model_path);
    snprintf(o->backend, sizeof o->backend, "%s", p->backend ? p->backend : "");
    snprintf(o->isa, sizeof o->isa, "%s", p->isa ? p->isa : "");
    snprintf(o->deltanet, sizeof o->deltanet, "%s", p->deltanet ? p->deltanet : "");
    o->n_ctx = en->n_ctx, o->n_batch = en->n_batch, o->n_seq_max = en->n_seq_max, o->n_threads = p->n_threads;
    MatMode mode = MATMUL_FAST;
    Err e = {{0}};
    int kv_k = KV_DEFAULT, kv_v = KV_DEFAULT;
    (void)engine_kv_types(p, &kv_k, &kv_v, &mode, NULL, &e); /* checked when the engine opened */
    o->mode = (int32_t)mode, o->no_pack = p->no_pack, o->kv_k = kv_k, o->kv_v = kv_v;
    o->n_ranks = pp->n_ranks;
    for (int r = 0; r < pp->n_ranks; r++) o->l0[r] = pp->l0[r], o->l1[r] = pp->l1[r];
    o->fingerprint = pipe_fingerprint(en->model);
}

static const Runner runner_pipe;

int pipe_open(DlEngine *en, const DlEngineParams *p, Isa isa, DeltaNetAlgo algo, Err *err) {
    if (!dist_active() || dist_rank() != 0) return err_set(err, "--mpi: this process is not rank 0 of an MPI job");
    if (p->n_stages > 0) return err_set(err, "an engine over MPI takes its stages from the ranks (no stages list, no -ngl)");
    if (p->backend && !backend_is_host(p->backend))
        return err_set(err, "--mpi runs every rank on the CPU backends (not with --device %s or -ngl)", p->backend);
    if (g_engine_open) return err_set(err, "an engine over MPI is already open (the ranks serve one at a time)");
    const int N = dist_size();
    if (N > PIPE_MAX_RANKS) return err_set(err, "%d ranks (at most %d)", N, PIPE_MAX_RANKS);
    Pipe *pp = calloc(1, sizeof *pp);
    if (!pp) return err_set(err, "out of memory");
    en->pipe = pp;
    en->runner = &runner_pipe;
    pp->n_ranks = N;
    double frac[PIPE_MAX_RANKS];
    if ((p->split && pipe_parse_split(p->split, N, frac, err)) ||
        pipe_split(en->model, N, p->split ? frac : NULL, pp->l0, pp->l1, err))
        return -1;
    if (!(pp->bound = pipe_weights(en->model, pp->l0[0], pp->l1[0], true, &pp->n_bound, &pp->bound_bytes, err)) ||
        engine_stage_open(en, p, NULL, isa, algo, pp->l0[0], pp->l1[0], pp->bound, pp->n_bound, err))
        return -1;
    pp->max_in = N + 1;
    pp->cap = pp->max_in + 1;
    const size_t S = (size_t)en->n_seq_max;
    pp->ring = calloc((size_t)pp->cap, sizeof *pp->ring);
    pp->tickets = calloc((size_t)pp->cap, sizeof *pp->tickets);
    pp->hidden = malloc(sizeof(float) * (size_t)en->n_batch * (size_t)en->model->cfg.n_embd);
    pp->stage = malloc(sizeof(PipeHdr) + sizeof(PipeSeq) * S);
    bool ok = pp->ring && pp->tickets && pp->hidden && pp->stage;
    for (int i = 0; ok && i < pp->cap; i++)
        ok = (pp->ring[i].sess = calloc(S, sizeof(DlSession *))) && (pp->ring[i].q = calloc(S, sizeof(BatchSeq)));
    if (!ok) return err_set(err, "out of memory");
    g_engine_open = true;
    /* every rank loads its part at the same time (each passes OPEN on before loading) */
    PipeOpen o;
    fill_open(&o, en, p, pp);
    const PipeHdr h = {PIPE_OPEN, 0, 0, 0, 0, 0, 0};
    if (send_chain(pp, &h, &o, sizeof o, err)) return -1;
    int rc = 0;
    for (int r = 1; r < N && !pp->broken[0]; r++) {
        DistMsg *m = NULL;
        Err e = {{0}};
        if (reply(pp, r, PIPE_OPEN, &m, &e)) {
            if (!rc) err_set(err, "%s", e.msg);
            rc = -1;
            continue;
        }
        if (m->bytes == sizeof(PipeHdr) + sizeof(PipeOpenReply)) memcpy(&pp->part[r], m->data + sizeof(PipeHdr), sizeof pp->part[r]);
        else rc = err_set(err, "rank %d: a malformed answer to OPEN", r);
        dist_msg_free(m);
    }
    if (pp->broken[0]) return broken(pp, err);
    return rc; /* on failure dl_engine_close → pipe_close tells the ranks that opened to close again */
}

static void pipe_close(DlEngine *en) {
    Pipe *p = en->pipe;
    if (!p) return;
    Err e = {{0}};
    if (!p->broken[0] && g_engine_open) {
        drain(en, &e);
        control(p, PIPE_CLOSE, 0, 0, NULL, 0, false, &e);
    }
    for (int i = 0; p->ring && i < p->cap; i++) free(p->ring[i].sess), free(p->ring[i].q);
    free(p->ring);
    free(p->tickets);
    free(p->hidden);
    free(p->stage);
    free(p->id_used);
    /* the stage's backend points into bound: free it after the engine's stages are gone */
    for (int s = 0; s < en->n_st; s++) {
        forward_free(en->st[s].fw);
        backend_destroy(en->st[s].be);
        en->st[s].fw = NULL, en->st[s].be = NULL;
    }
    en->n_st = 0;
    free(p->bound);
    free(p);
    en->pipe = NULL;
    g_engine_open = false;
}

static int pipe_prefetch(DlEngine *en, bool lock, Err *err) { return control(en->pipe, PIPE_PREFETCH, lock, 0, NULL, 0, true, err); }

/* ---- sessions ------------------------------------------------------------------------------------------ */

static int pipe_session_new(DlSession *s, Err *err) {
    Pipe *p = s->engine->pipe;
    if (p->broken[0]) return broken(p, err);
    int id = 0;
    while (id < p->id_cap && p->id_used[id]) id++;
    if (id == p->id_cap) {
        const int cap = p->id_cap ? 2 * p->id_cap : 16;
        bool *u = realloc(p->id_used, sizeof *u * (size_t)cap);
        if (!u) return err_set(err, "out of memory");
        memset(u + p->id_cap, 0, sizeof *u * (size_t)(cap - p->id_cap));
        p->id_used = u, p->id_cap = cap;
    }
    if (control(p, PIPE_NEW, id, 0, NULL, 0, true, err)) {
        Err e = {{0}};
        control(p, PIPE_FREE, id, 0, NULL, 0, false, &e); /* the ranks that made it drop it */
        return -1;
    }
    p->id_used[id] = true;
    s->pipe_id = id;
    return 0;
}

static void pipe_session_free(DlSession *s) {
    Pipe *p = s->engine->pipe;
    if (s->pipe_id < 0) return;
    Err e = {{0}};
    if (pipe_quiesce(s, &e) == 0) control(p, PIPE_FREE, s->pipe_id, 0, NULL, 0, false, &e);
    p->id_used[s->pipe_id] = false;
    s->pipe_id = -1;
}

static void pipe_session_reset(DlSession *s) {
    Err e = {{0}};
    if (pipe_quiesce(s, &e) == 0) control(s->engine->pipe, PIPE_RESET, s->pipe_id, 0, NULL, 0, false, &e);
}

static int pipe_session_copy(DlSession *dst, const DlSession *src, Err *err) {
    if (pipe_quiesce(dst, err) || pipe_quiesce((DlSession *)src, err)) return -1;
    return control(dst->engine->pipe, PIPE_COPY, dst->pipe_id, src->pipe_id, NULL, 0, false, err);
}

static int pipe_session_rollback(DlSession *s, int n_max, Err *err) {
    if (pipe_quiesce(s, err)) return -1;
    return control(s->engine->pipe, PIPE_ROLLBACK, s->pipe_id, n_max, NULL, 0, true, err);
}

static int pipe_keep(DlSession *s, int k, Err *err) {
    if (pipe_quiesce(s, err)) return -1;
    return control(s->engine->pipe, PIPE_KEEP, s->pipe_id, k, NULL, 0, true, err);
}

static size_t part_bytes(const Pipe *p, int r, int n_past) {
    return (size_t)(p->part[r].saved_fixed + p->part[r].saved_per_token * (uint64_t)n_past);
}

static size_t pipe_saved_bytes(const DlSession *s, int n_past) {
    const Pipe *p = s->engine->pipe;
    size_t n = 0;
    for (int r = 1; r < p->n_ranks; r++) n += part_bytes(p, r, n_past);
    return n;
}

static int pipe_snapshot(const DlSession *s, uint8_t *out, Err *err) {
    Pipe *p = s->engine->pipe;
    if (pipe_quiesce((DlSession *)s, err)) return -1;
    const int n_past = s->state->n_past;
    const PipeHdr h = {PIPE_SNAPSHOT, 0, s->pipe_id, n_past, 0, 0, 0};
    if (send_chain(p, &h, NULL, 0, err)) return -1;
    int rc = 0;
    for (int r = 1; r < p->n_ranks; r++) {
        DistMsg *m = NULL;
        if (reply(p, r, PIPE_SNAPSHOT, &m, rc ? NULL : err)) {
            rc = -1;
            if (p->broken[0]) return broken(p, err);
            continue;
        }
        const size_t n = part_bytes(p, r, n_past);
        if (m->bytes != sizeof h + n) rc = err_set(err, "rank %d sent a snapshot part of the wrong size", r);
        else memcpy(out, m->data + sizeof h, n);
        out += n;
        dist_msg_free(m);
    }
    return rc;
}

static int pipe_restore(DlSession *s, const uint8_t *in, int n_past, Err *err) {
    if (pipe_quiesce(s, err)) return -1;
    return control(s->engine->pipe, PIPE_RESTORE, s->pipe_id, n_past, in, pipe_saved_bytes(s, n_past), true, err);
}

/* ---- the public calls ------------------------------------------------------------------------------------ */

int dl_engine_pipeline_depth(const DlEngine *e) { return e->pipe ? e->pipe->n_ranks : 1; }

int dl_decode_start(DlSession **s, const int32_t *tokens, int n, DlError *err) {
    if (n < 1 || !s[0]->engine->pipe) return dl_decode_batch(s, tokens, n, err);
    Err e = {{0}};
    DlEngine *en = s[0]->engine;
    if (n > en->n_seq_max) return err_set(&e, "%d sessions in one batch (at most %d)", n, en->n_seq_max), engine_fail(err, &e);
    BatchSeq seqs[256];
    for (int i = 0; i < n; i++) {
        if (s[i]->engine != en) return err_set(&e, "sessions of different engines in one batch"), engine_fail(err, &e);
        seqs[i] = (BatchSeq){NULL, &tokens[i], 1, 1, s[i]->logits, false};
        s[i]->has_logits = false;
    }
    return pipe_run(en, s, seqs, n, true, &e) ? engine_fail(err, &e) : 0;
}

int dl_decode_finish(DlEngine *en, DlError *err) {
    Pipe *p = en->pipe;
    Err e = {{0}};
    if (!p) return 0; /* one process: dl_decode_start computed the step */
    if (p->t_n == 0) return err_set(&e, "no decode step in flight"), engine_fail(err, &e);
    Ticket *t = &p->tickets[p->t_head];
    while (!t->done)
        if (complete_oldest(en, &e)) break;
    const int rc = t->done ? t->rc : -1;
    p->t_head = (p->t_head + 1) % p->cap;
    p->t_n--;
    if (rc && !e.msg[0]) err_set(&e, "%s", p->broken[0] ? p->broken : "the decode step failed");
    return rc ? engine_fail(err, &e) : 0;
}

int dl_engine_stage_stats(DlEngine *en, bool reset, DlStageStats *out, int cap, DlError *err) {
    Pipe *p = en->pipe;
    Err e = {{0}};
    if (!p) return 0;
    const double t = now_s();
    if (drain(en, &e)) return engine_fail(err, &e);
    int n = 0;
    if (cap > 0) {
        DlStageStats *o = &out[n++];
        memset(o, 0, sizeof *o);
        o->rank = 0;
        snprintf(o->host, sizeof o->host, "%s", dist_host(0));
        o->pid = dist_pid(0);
        o->l0 = p->l0[0], o->l1 = p->l1[0];
        o->compute_s = p->compute_s;
        o->wall_s = p->t_reset > 0 ? t - p->t_reset : 0;
        o->bytes_sent = dist_bytes_sent() - p->bytes0;
        o->batches = p->batches, o->tokens = p->tokens;
        o->weight_bytes = p->bound_bytes;
        pipe_rss(&o->rss_bytes, &o->rss_peak_bytes);
    }
    if (reset) p->compute_s = 0, p->t_reset = t, p->bytes0 = dist_bytes_sent(), p->batches = p->tokens = 0;
    const PipeHdr h = {PIPE_STATS, 0, reset, 0, 0, 0, 0};
    Err se = {{0}};
    if (send_chain(p, &h, NULL, 0, &se)) return engine_fail(err, &se);
    int rc = 0;
    for (int r = 1; r < p->n_ranks; r++) {
        DistMsg *m = NULL;
        if (reply(p, r, PIPE_STATS, &m, &se)) {
            rc = -1;
            if (p->broken[0]) break;
            continue;
        }
        PipeStats ps;
        if (m->bytes == sizeof h + sizeof ps && n < cap) {
            memcpy(&ps, m->data + sizeof h, sizeof ps);
            DlStageStats *o = &out[n++];
            memset(o, 0, sizeof *o);
            o->rank = r;
            snprintf(o->host, sizeof o->host, "%s", dist_host(r));
            o->pid = dist_pid(r);
            o->l0 = p->l0[r], o->l1 = p->l1[r];
            o->compute_s = ps.compute_s, o->wall_s = ps.wall_s;
            o->bytes_sent = ps.bytes_sent, o->batches = ps.batches, o->tokens = ps.tokens;
            o->rss_bytes = ps.rss_bytes, o->rss_peak_bytes = ps.rss_peak_bytes, o->weight_bytes = ps.bound_bytes;
        }
        dist_msg_free(m);
    }
    return rc ? engine_fail(err, &se) : n;
}

/* ---- joining the job --------------------------------------------------------------------------------------- */

int dl_mpi_init(int *argc, char ***argv, double timeout_s, DlError *err) {
    Err e = {{0}};
    if (dist_init(argc, argv, timeout_s, &e)) return engine_fail(err, &e);
    return dist_rank();
}

int dl_mpi_rank(void) { return dist_active() ? dist_rank() : 0; }
int dl_mpi_size(void) { return dist_active() ? dist_size() : 1; }
const char *dl_mpi_failure(void) { return dist_failure(); }
void dl_mpi_on_failure(void (*fn)(void)) { dist_on_failure(fn); }

void dl_mpi_finalize(void) {
    if (!dist_active()) return;
    if (dist_rank() == 0 && dist_size() > 1) {
        Err e = {{0}};
        const PipeHdr h = {PIPE_EXIT, 0, dist_failure() != NULL, 0, 0, 0, 0};
        if (!dist_failure()) {
            dist_send(1, PIPE_TAG_CHAIN, &h, sizeof h, NULL, 0, &e);
        } else { /* the chain may be cut: tell every rank that is still there */
            for (int r = 1; r < dist_size(); r++)
                if (r != dist_failed_rank()) dist_send(r, PIPE_TAG_CHAIN, &h, sizeof h, NULL, 0, &e);
        }
    }
    dist_finalize();
}

/* ---- the runner ----------------------------------------------------------------------------------------------- */

static int pipe_run_sync(DlEngine *en, DlSession *const *sess, const BatchSeq *seqs, int n, Err *err) {
    return pipe_run(en, sess, seqs, n, false, err);
}
static int pipe_keep_all(DlEngine *en, DlSession *s, int k, Err *err) {
    return stages_keep(en, s, k, err) || pipe_keep(s, k, err) ? -1 : 0;
}

static const Runner runner_pipe = {
    .name = "mpi",
    .speculates = false, /* speculative decoding does not run over --mpi */
    .close = pipe_close,
    .prefetch = pipe_prefetch,
    .run = pipe_run_sync,
    .keep = pipe_keep_all,
    .quiesce = pipe_quiesce,
    .session_new = pipe_session_new,
    .session_free = pipe_session_free,
    .session_reset = pipe_session_reset,
    .session_copy = pipe_session_copy,
    .session_rollback = pipe_session_rollback,
    .saved_bytes = pipe_saved_bytes,
    .snapshot = pipe_snapshot,
    .restore = pipe_restore,
};
