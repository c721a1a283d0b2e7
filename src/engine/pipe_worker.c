/* pipe_worker.c — the ranks after rank 0 in an engine over MPI (pipe.h): dl_mpi_worker waits for rank 0 to
 * open an engine, loads the model file (its own copy on its own disk: only the tensor directory and the
 * tensors of its layer range are ever read), binds just those, and then applies the chain's messages in
 * order — batches through its layers, session operations on its states — passing each one on, until rank 0
 * closes the engine (then it waits for the next one) or leaves the job.
 *
 * Nothing here decides anything: rank 0 checked every batch before sending it, so a batch or an operation
 * this rank cannot apply is reported back (a batch carries the error to rank 0 in place of its rows) and
 * rank 0 stops the pipe. */
#include "engine/pipe.h"

#include "deltallm.h"
#include "dist/dist.h"
#include "kernels/cpu/isa.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Worker {
    int rank, n_ranks, l0, l1;
    Model *m;
    Weight *bound;
    int n_bound;
    uint64_t bound_bytes;
    Backend *be;
    Forward *fw;
    SeqState **st; /* per session id */
    int st_cap;
    int n_ctx;
    float *hidden; /* [n_batch][n_embd] */
    uint64_t next_item;
    double compute_s, t_reset;
    uint64_t batches, tokens, bytes0;
} Worker;

static void worker_close(Worker *w) {
    for (int i = 0; i < w->st_cap; i++) seqstate_free(w->st[i]);
    free(w->st);
    forward_free(w->fw);
    backend_destroy(w->be);
    free(w->bound);
    model_free(w->m);
    free(w->hidden);
    const int rank = w->rank, n = w->n_ranks;
    memset(w, 0, sizeof *w);
    w->rank = rank, w->n_ranks = n;
}

/* Answers rank 0: the header of op with status, then body (an error line when status is set). */
static void answer(PipeOp op, int status, const void *body, size_t bytes) {
    const PipeHdr h = {(uint32_t)op, 0, 0, 0, status, 0, 0};
    Err e = {{0}};
    dist_send(0, PIPE_TAG_REPLY, &h, sizeof h, body, bytes, &e); /* a failed job: the main loop will see it */
}

static void answer_err(PipeOp op, const Err *e) { answer(op, -1, e->msg, strlen(e->msg)); }

static int worker_open(Worker *w, const PipeOpen *o, PipeOpenReply *rep, Err *err) {
    Isa isa;
    DeltaNetAlgo algo;
    if (o->n_ranks != w->n_ranks) return err_set(err, "rank 0 cut the model for %d ranks, the job has %d", o->n_ranks, w->n_ranks);
    if (isa_parse(o->isa[0] ? o->isa : NULL, &isa, err) || deltanet_algo_parse(o->deltanet, &algo, err)) return -1;
    if (!(w->m = model_load(o->path, err))) return -1;
    if (pipe_fingerprint(w->m) != o->fingerprint)
        return err_set(err, "%s here is not the model rank 0 opened (the tensor directories differ)", o->path);
    w->l0 = o->l0[w->rank];
    w->l1 = o->l1[w->rank];
    if (w->l0 < 0 || w->l0 >= w->l1 || w->l1 > w->m->cfg.n_layer) return err_set(err, "a bad layer range [%d, %d)", w->l0, w->l1);
    const BackendOptions bo = {.name = o->backend[0] ? o->backend : NULL,
                               .cpu = {.isa = (int)isa, .pack = !o->no_pack},
                               .n_threads = o->n_threads,
                               .mode = o->mode == MATMUL_EXACT ? MATMUL_EXACT : o->mode == MATMUL_GGML ? MATMUL_GGML : MATMUL_FAST,
                               .kv_k = o->kv_k, /* checked by backend_create */
                               .kv_v = o->kv_v,
                               };
    if (!(w->bound = pipe_weights(w->m, w->l0, w->l1, false, &w->n_bound, &w->bound_bytes, err)) ||
        !(w->be = backend_create(&bo, err)) || w->be->vt->bind(w->be, w->bound, w->n_bound, err))
        return -1;
    ForwardOptions fo = {.max_batch = o->n_batch, .max_seqs = o->n_seq_max, .max_ctx = o->n_ctx, .algo = algo, .be = w->be};
    if (!(w->fw = forward_new(w->m, &fo, err))) return -1;
    if (!(w->hidden = malloc(sizeof(float) * (size_t)o->n_batch * (size_t)w->m->cfg.n_embd))) return err_set(err, "out of memory");
    w->n_ctx = o->n_ctx;
    SeqState *probe = seqstate_new(w->m, w->be, 1, w->l0, w->l1, err); /* the saved sizes: fixed + per token */
    if (!probe) return -1;
    rep->saved_fixed = seqstate_saved_bytes(probe, 0);
    rep->saved_per_token = seqstate_saved_bytes(probe, 1) - rep->saved_fixed;
    rep->bound_bytes = w->bound_bytes;
    seqstate_free(probe);
    w->next_item = 0;
    w->t_reset = now_s();
    w->bytes0 = dist_bytes_sent();
    return 0;
}

static SeqState *state_of(Worker *w, int id, Err *err) {
    if (id < 0 || id >= w->st_cap || !w->st[id]) return err_set(err, "no session %d on rank %d", id, w->rank), NULL;
    return w->st[id];
}

/* Runs a batch through the rank's layers and passes it on (to rank 0 from the last rank). */
static void worker_batch(Worker *w, const DistMsg *m, const PipeHdr *h) {
    Err e = {{0}};
    const size_t E = w->m ? (size_t)w->m->cfg.n_embd : 0;
    const size_t seq_bytes = sizeof(PipeSeq) * (size_t)(h->n > 0 ? h->n : 0);
    const bool last = w->rank == w->n_ranks - 1;
    PipeHdr out = *h;
    const float *rows_in = NULL;
    if (!w->m) err_set(&e, "rank %d has no model open", w->rank);
    else if (h->status) err_set(&e, "%.*s", (int)(m->bytes - sizeof *h), (const char *)m->data + sizeof *h); /* upstream */
    else if (h->n < 1 || h->n > 256 || h->rows < 1 || m->bytes != sizeof *h + seq_bytes + sizeof(float) * (size_t)h->rows * E)
        err_set(&e, "rank %d: a malformed batch", w->rank);
    else if (h->item != w->next_item)
        err_set(&e, "rank %d: batch %llu arrived where %llu was due", w->rank, (unsigned long long)h->item,
                (unsigned long long)w->next_item);
    w->next_item = h->item + 1;
    if (!e.msg[0]) {
        const double t0 = now_s();
        BatchSeq q[256];
        const PipeSeq *ps = (const PipeSeq *)(m->data + sizeof *h);
        for (int i = 0; i < h->n && !e.msg[0]; i++) {
            SeqState *s = state_of(w, ps[i].id, &e);
            if (s && s->n_past != ps[i].n_past)
                err_set(&e, "rank %d: session %d is at position %d, rank 0's at %d", w->rank, ps[i].id, s->n_past, ps[i].n_past);
            q[i] = (BatchSeq){s, NULL, ps[i].n_tokens, 0, NULL, ps[i].tentative != 0};
        }
        rows_in = (const float *)(m->data + sizeof *h + seq_bytes);
        if (!e.msg[0] && forward_begin(w->fw, q, h->n, &e) == 0) {
            forward_hidden_write(w->fw, rows_in);
            forward_layers(w->fw, w->l0, w->l1);
            forward_hidden_read(w->fw, w->hidden);
            forward_end(w->fw, &e);
        }
        w->compute_s += now_s() - t0;
        w->batches++;
        w->tokens += (uint64_t)h->rows;
    }
    Err se = {{0}};
    const int to = last ? 0 : w->rank + 1, tag = last ? PIPE_TAG_RESULT : PIPE_TAG_CHAIN;
    if (e.msg[0]) {
        out.status = -1;
        dist_send(to, tag, &out, sizeof out, e.msg, strlen(e.msg), &se);
    } else if (last) {
        dist_send(to, tag, &out, sizeof out, w->hidden, sizeof(float) * (size_t)h->rows * E, &se);
    } else {
        dist_send(to, tag, m->data, sizeof *h + seq_bytes, w->hidden, sizeof(float) * (size_t)h->rows * E, &se);
    }
}

/* The session operations; 0, or -1 with err (answered when the op has an answer, fatal otherwise). */
static int worker_session_op(Worker *w, const PipeHdr *h, const DistMsg *m, Err *err) {
    if (!w->m) return err_set(err, "rank %d has no model open", w->rank);
    if (h->op == PIPE_NEW) {
        if (h->a < 0 || h->a > (1 << 20)) return err_set(err, "session id %d out of range", h->a);
        if (h->a >= w->st_cap) {
            const int cap = h->a + 16;
            SeqState **st = realloc(w->st, sizeof *st * (size_t)cap);
            if (!st) return err_set(err, "out of memory");
            memset(st + w->st_cap, 0, sizeof *st * (size_t)(cap - w->st_cap));
            w->st = st, w->st_cap = cap;
        }
        if (w->st[h->a]) return err_set(err, "session %d exists already", h->a);
        return (w->st[h->a] = seqstate_new(w->m, w->be, w->n_ctx, w->l0, w->l1, err)) ? 0 : -1;
    }
    if (h->op == PIPE_FREE) { /* also of a session that a failed NEW never made */
        if (h->a >= 0 && h->a < w->st_cap) seqstate_free(w->st[h->a]), w->st[h->a] = NULL;
        return 0;
    }
    SeqState *s = state_of(w, h->a, err);
    if (!s) return -1;
    switch (h->op) {
    case PIPE_RESET: seqstate_reset(s); return 0;
    case PIPE_COPY: {
        SeqState *src = state_of(w, h->b, err);
        if (src) seqstate_copy(s, src);
        return src ? 0 : -1;
    }
    case PIPE_ROLLBACK: return seqstate_enable_rollback(s, w->m, h->b, err);
    case PIPE_KEEP: return forward_keep(w->fw, s, h->b, err);
    case PIPE_RESTORE: {
        const size_t n = seqstate_saved_bytes(s, h->b), have = m->bytes - sizeof *h;
        if (h->b < 0 || h->b > s->n_ctx || have < n) return err_set(err, "rank %d: a snapshot part too short", w->rank);
        seqstate_restore(s, m->data + sizeof *h, h->b);
        return 0;
    }
    case PIPE_SNAPSHOT: {
        if (s->n_past != h->b) return err_set(err, "rank %d: session %d is at %d, not %d", w->rank, h->a, s->n_past, h->b);
        const size_t n = seqstate_saved_bytes(s, s->n_past);
        uint8_t *buf = malloc(n ? n : 1);
        if (!buf) return err_set(err, "out of memory for a snapshot of %zu bytes", n);
        seqstate_save(s, buf);
        answer(PIPE_SNAPSHOT, 0, buf, n);
        free(buf);
        return 0;
    }
    default: return err_set(err, "rank %d: unknown operation %u", w->rank, h->op);
    }
}

static void worker_stats(Worker *w, bool reset) {
    PipeStats s = {0};
    const double t = now_s();
    s.compute_s = w->compute_s;
    s.wall_s = t - w->t_reset;
    s.bytes_sent = dist_bytes_sent() - w->bytes0;
    s.batches = w->batches;
    s.tokens = w->tokens;
    s.bound_bytes = w->bound_bytes;
    pipe_rss(&s.rss_bytes, &s.rss_peak_bytes);
    answer(PIPE_STATS, 0, &s, sizeof s);
    if (reset) w->compute_s = 0, w->t_reset = t, w->bytes0 = dist_bytes_sent(), w->batches = w->tokens = 0;
}

/* Passes a control message on down the chain (before applying it, so the ranks work at once). RESTORE
 * passes on what follows this rank's part. */
static void pass_on(const Worker *w, const DistMsg *m, const PipeHdr *h) {
    if (w->rank + 1 >= w->n_ranks) return;
    Err e = {{0}};
    size_t skip = 0;
    if (h->op == PIPE_RESTORE && w->m && h->a >= 0 && h->a < w->st_cap && w->st[h->a]) {
        skip = seqstate_saved_bytes(w->st[h->a], h->b);
        if (skip > m->bytes - sizeof *h) skip = m->bytes - sizeof *h;
    }
    dist_send(w->rank + 1, PIPE_TAG_CHAIN, h, sizeof *h, m->data + sizeof *h + skip, m->bytes - sizeof *h - skip, &e);
}

/* The exit status of a worker that stops on an error, with the line. */
static int stop_with(DlError *err, const Err *e) {
    if (err) snprintf(err->msg, sizeof err->msg, "%s", e->msg);
    return 1;
}

int dl_mpi_worker(DlError *err) {
    Err e = {{0}};
    if (err) err->msg[0] = 0;
    if (!dist_active() || dist_rank() == 0) return err_set(&e, "dl_mpi_worker: not a worker rank of an MPI job"), stop_with(err, &e);
    Worker w = {0};
    w.rank = dist_rank();
    w.n_ranks = dist_size();
    for (;;) {
        DistMsg *m = dist_recv(-1, PIPE_TAG_CHAIN, &e);
        if (!m) break; /* the job failed: e says why */
        PipeHdr h = {0};
        if (m->bytes >= sizeof h) memcpy(&h, m->data, sizeof h);
        else h.op = 0;
        if (h.op == PIPE_EXIT) {
            if (!h.a) pass_on(&w, m, &h); /* a = 1: rank 0 told every rank itself */
            dist_msg_free(m);
            worker_close(&w);
            return h.a ? 1 : 0; /* 1: the job failed and rank 0 said why (err stays empty) */
        }
        if (h.op != PIPE_BATCH) pass_on(&w, m, &h);
        Err oe = {{0}};
        switch (h.op) {
        case PIPE_BATCH: worker_batch(&w, m, &h); break;
        case PIPE_OPEN: {
            PipeOpenReply rep = {0};
            if (w.m) err_set(&oe, "rank %d has a model open already", w.rank);
            else if (m->bytes != sizeof h + sizeof(PipeOpen)) err_set(&oe, "a malformed OPEN");
            else worker_open(&w, (const PipeOpen *)(m->data + sizeof h), &rep, &oe);
            if (oe.msg[0]) {
                worker_close(&w);
                answer_err(PIPE_OPEN, &oe);
            } else {
                answer(PIPE_OPEN, 0, &rep, sizeof rep);
            }
            break;
        }
        case PIPE_CLOSE: worker_close(&w); break;
        case PIPE_PREFETCH:
            if (!w.be) err_set(&oe, "rank %d has no model open", w.rank);
            else w.be->vt->make_resident(w.be, h.a != 0, &oe);
            if (oe.msg[0]) answer_err(PIPE_PREFETCH, &oe);
            else answer(PIPE_PREFETCH, 0, NULL, 0);
            break;
        case PIPE_STATS: worker_stats(&w, h.a != 0); break;
        case PIPE_NEW:
        case PIPE_ROLLBACK:
        case PIPE_KEEP:
        case PIPE_RESTORE:
            if (worker_session_op(&w, &h, m, &oe)) answer_err((PipeOp)h.op, &oe);
            else answer((PipeOp)h.op, 0, NULL, 0);
            break;
        case PIPE_SNAPSHOT:
            if (worker_session_op(&w, &h, m, &oe)) answer_err(PIPE_SNAPSHOT, &oe);
            break;
        default: /* FREE, RESET, COPY: no answer; failing one means the ranks no longer agree */
            if (worker_session_op(&w, &h, m, &oe)) {
                dist_msg_free(m);
                worker_close(&w);
                err_set(&e, "rank %d: %s", w.rank, oe.msg);
                return stop_with(err, &e);
            }
        }
        dist_msg_free(m);
    }
    worker_close(&w);
    return stop_with(err, &e);
}
