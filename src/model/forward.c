/* forward.c — the forward pass, written once against the op catalog: embeddings, the decoder blocks
 *   x += Mixer(RMSNorm(x));  x += FFN(RMSNorm(x))
 * (the mixer is a delta-net layer or gated attention, layer_*.c), the final norm and the LM head.
 * All buffers are allocated in forward_new for max_batch rows; forward_batch allocates nothing. */
#include "model/forward_internal.h"

#include "base/bigalloc.h"
#include "gguf/format.h"
#include "kernels/cpu/kernels_cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

typedef struct BufSpec {
    const char *name;
    void **ptr;
    size_t elems; /* per row unless per_batch */
    size_t elem_size;
    bool per_batch; /* elems is the total, not per row */
} BufSpec;

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

Forward *forward_new(const Model *m, const ForwardOptions *o, Err *err) {
    const ModelConfig *c = &m->cfg;
    ForwardOptions opt = *o;
    if (opt.max_batch < 1 || opt.max_batch > 65536)
        return err_set(err, "batch size %d out of range [1, 65536]", opt.max_batch), NULL;
    if (opt.max_seqs < 1) opt.max_seqs = 1;
    if (opt.max_ctx < 1 || opt.max_ctx > (1 << 24))
        return err_set(err, "context size %d out of range [1, %d]", opt.max_ctx, 1 << 24), NULL;
    if (opt.max_seqs > opt.max_batch) opt.max_seqs = opt.max_batch;
    Forward *f = calloc(1, sizeof *f);
    if (!f) return err_set(err, "out of memory"), NULL;
    f->m = m;
    if (opt.ops) {
        f->ops = opt.ops;
    } else {
        Isa isa;
        if (isa_select(&isa, err)) {
            free(f);
            return NULL;
        }
        f->ops = ops_cpu(isa);
    }
    f->max_batch = opt.max_batch;
    f->max_seqs = opt.max_seqs;
    f->max_ctx = opt.max_ctx;
    f->algo = opt.algo;
    /* AUTO: the default mode keeps llama.cpp's recurrent form (bit-identical results; the chunked form would
     * save ~1% of a prefill, docs/KERNELS.md); the exact mode takes the chunked form from 32 tokens, where
     * it is 1.2-1.4x faster */
    f->chunk_min_tokens = opt.mode == MATMUL_EXACT ? 32 : 1 << 30;
    if (f->algo == DELTANET_AUTO) {
        const char *env = getenv("DELTALLM_DELTANET");
        if (env && strcmp(env, "recurrent") == 0) f->algo = DELTANET_RECURRENT;
        else if (env && strcmp(env, "chunked") == 0) f->algo = DELTANET_CHUNKED;
        else if (env && *env && strcmp(env, "auto") != 0) {
            free(f);
            return err_set(err, "DELTALLM_DELTANET must be recurrent, chunked or auto, not '%s'", env), NULL;
        }
    }
    int n_threads = opt.n_threads > 0 ? opt.n_threads : pool_default_threads();
    if (n_threads > 1) {
        f->pool = pool_create(n_threads, err);
        if (!f->pool) {
            free(f);
            return NULL;
        }
    }

    const size_t E = (size_t)c->n_embd, conv = (size_t)c->ssm_conv_dim, val = (size_t)c->ssm_d_inner;
    const size_t Hv = (size_t)c->ssm_n_v_head, key = (size_t)c->ssm_key_dim;
    const size_t HD = (size_t)c->n_head * (size_t)c->head_dim, KVD = (size_t)c->n_head_kv * (size_t)c->head_dim;
    const size_t kE = c->moe ? (size_t)c->n_expert_used : 0, nE = c->moe ? (size_t)c->n_expert : 0;
    const size_t maxF = (size_t)max64(max64(c->n_ff, c->n_ff_shexp), c->n_ff_exp);
    bool legacy = false;
    for (int il = 0; il < c->n_layer; il++) legacy |= m->layers[il].legacy;
    const size_t R = (size_t)opt.max_batch;
    Bufs *b = &f->b;
    BufSpec specs[] = {
        {"x", (void **)&b->x, E, 4, false},         {"h", (void **)&b->h, E, 4, false},
        {"tmp", (void **)&b->tmp, E, 4, false},     {"tmp2", (void **)&b->tmp2, c->moe ? E : 0, 4, false},
        {"proj", (void **)&b->proj, legacy ? conv + val : 0, 4, false},
        {"mixed", (void **)&b->mixed, conv, 4, false}, {"z", (void **)&b->z, val, 4, false},
        {"ba", (void **)&b->ba, 2 * Hv, 4, false},  {"conv_y", (void **)&b->conv_y, conv, 4, false},
        {"q", (void **)&b->q, key, 4, false},       {"k", (void **)&b->k, key, 4, false},
        {"v", (void **)&b->v, val, 4, false},       {"g", (void **)&b->g, Hv, 4, false},
        {"beta", (void **)&b->beta, Hv, 4, false},  {"o", (void **)&b->o, val, 4, false},
        {"on", (void **)&b->on, val, 4, false},     {"qg", (void **)&b->qg, 2 * HD, 4, false},
        {"qa", (void **)&b->qa, HD, 4, false},      {"ka", (void **)&b->ka, KVD, 4, false},
        {"va", (void **)&b->va, KVD, 4, false},     {"ao", (void **)&b->ao, HD, 4, false},
        {"fg", (void **)&b->fg, maxF, 4, false},    {"fu", (void **)&b->fu, maxF, 4, false},
        {"rl", (void **)&b->rl, nE, 4, false},      {"ew", (void **)&b->ew, kE, 4, false},
        {"es", (void **)&b->es, kE, 4, false},      {"erows", (void **)&b->erows, kE, 4, false},
        {"gx", (void **)&b->gx, c->moe ? E : 0, 4, false}, {"eo", (void **)&b->eo, kE * E, 4, false},
        {"sgate", (void **)&b->sgate, 1, 4, false},
        {"head", (void **)&b->head, opt.max_seqs > 1 ? (size_t)opt.max_seqs * (size_t)c->n_vocab : 0, 4, true},
        {"row0", (void **)&f->row0, (size_t)opt.max_seqs, sizeof(int), true},
    };
    const size_t n_specs = sizeof specs / sizeof specs[0];
    /* widest activation row any matmul sees, for the quantized-activation scratch */
    int64_t max_cols = max64(max64((int64_t)E, (int64_t)val), max64((int64_t)HD, (int64_t)maxF));
    size_t scratch = ops_scratch_bytes((int64_t)R, max_cols, n_threads);
    const size_t attn_scratch = attention_scratch_bytes(opt.max_ctx, n_threads);
    if (attn_scratch > scratch) scratch = attn_scratch;
    const size_t dn_scratch = deltanet_scratch_bytes(c->ssm_d_state, c->ssm_head_v_dim, n_threads);
    if (dn_scratch > scratch) scratch = dn_scratch;
    const size_t fa_scratch = attention_fast_scratch_bytes(opt.max_ctx, c->head_dim, c->n_head / c->n_head_kv, n_threads);
    if (fa_scratch > scratch) scratch = fa_scratch;
    size_t total = ALIGN64(scratch);
    for (size_t i = 0; i < n_specs; i++)
        total += ALIGN64((specs[i].per_batch ? 1 : R) * specs[i].elems * specs[i].elem_size);
    if (!(f->mem = big_alloc(total))) {
        forward_free(f);
        return err_set(err, "out of memory for activation buffers (%zu MiB for batch %d)", total >> 20, opt.max_batch),
               NULL;
    }
    memset(f->mem, 0, total);
    uint8_t *p = f->mem;
    f->oc = (OpCtx){opt.mode, f->pool, p, scratch};
    p += ALIGN64(scratch);
    for (size_t i = 0; i < n_specs; i++) {
        size_t n = ALIGN64((specs[i].per_batch ? 1 : R) * specs[i].elems * specs[i].elem_size);
        *specs[i].ptr = n ? (void *)p : NULL;
        p += n;
    }
    return f;
}

void forward_free(Forward *f) {
    if (!f) return;
    pool_destroy(f->pool);
    free(f->mem);
    free(f);
}

void forward_set_dump(Forward *f, Dump *d) { f->dump = d; }
const char *forward_ops_name(const Forward *f) { return f->ops->name; }
int forward_n_threads(const Forward *f) { return pool_size(f->pool); }

/* ---- profiling ---------------------------------------------------------------------------------------- */

double fwd_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void fwd_phase(Forward *f, Phase ph, double *t0) {
    if (!f->prof.enabled) return;
    double t = fwd_now();
    f->prof.phase[ph] += t - *t0;
    *t0 = t;
}

static void prof_op(Forward *f, const char *name, double dt) {
    Profile *p = &f->prof;
    int i = 0;
    while (i < p->n_ops && p->ops[i].name != name) i++;
    if (i == p->n_ops) {
        if (p->n_ops == PROFILE_MAX_OPS) return;
        p->ops[p->n_ops++] = (ProfOp){name, 0, 0};
    }
    p->ops[i].seconds += dt;
    p->ops[i].calls++;
}

void fwd_matmul(Forward *f, const char *name, const MatW *w, const float *x, int64_t T, float *y) {
    if (!f->prof.enabled) {
        f->ops->matmul(&f->oc, w, x, T, y);
        return;
    }
    double t = fwd_now();
    f->ops->matmul(&f->oc, w, x, T, y);
    prof_op(f, name, fwd_now() - t);
}

void fwd_conv_silu(Forward *f, const float *x, int T, int C, int K, const float *w, float *state, float *y) {
    double t = f->prof.enabled ? fwd_now() : 0;
    f->ops->conv_silu(&f->oc, x, T, C, K, w, state, y);
    if (f->prof.enabled) prof_op(f, "conv1d+silu", fwd_now() - t);
}

void fwd_deltanet(Forward *f, const DeltaNetArgs *a, bool chunked) {
    double t = f->prof.enabled ? fwd_now() : 0;
    if (chunked) f->ops->deltanet_chunked(&f->oc, a);
    else f->ops->deltanet_recurrent(&f->oc, a);
    if (f->prof.enabled) prof_op(f, chunked ? "deltanet (chunked)" : "deltanet (recurrent)", fwd_now() - t);
}

void fwd_attention(Forward *f, const AttnArgs *a) {
    double t = f->prof.enabled ? fwd_now() : 0;
    f->ops->attention(&f->oc, a);
    if (f->prof.enabled) prof_op(f, "attention", fwd_now() - t);
}

void fwd_silu_rows(Forward *f, float *x, int rows, int n) {
    double t = f->prof.enabled ? fwd_now() : 0;
    f->ops->silu_rows(&f->oc, x, x, rows, n);
    if (f->prof.enabled) prof_op(f, "silu", fwd_now() - t);
}

void fwd_swiglu_rows(Forward *f, float *g, const float *u, int rows, int n) {
    double t = f->prof.enabled ? fwd_now() : 0;
    f->ops->swiglu_rows(&f->oc, g, u, g, rows, n);
    if (f->prof.enabled) prof_op(f, "swiglu", fwd_now() - t);
}

void forward_profile_enable(Forward *f, bool on) {
    memset(&f->prof, 0, sizeof f->prof);
    f->prof.enabled = on;
}

static int cmp_op(const void *a, const void *b) {
    const ProfOp *x = a, *y = b;
    return x->seconds < y->seconds ? 1 : x->seconds > y->seconds ? -1 : 0;
}

int forward_profile_report(const Forward *f, char *buf, size_t cap) {
    static const char *const names[PH_COUNT] = {"embedding", "attention layers", "delta-net pre-scan (proj+conv)",
                                                "delta-net scan", "delta-net post-scan (norm+ssm_out)",
                                                "MoE / FFN", "head (norm+logits)"};
    const Profile *p = &f->prof;
    size_t n = 0;
#define OUT(...) (n += (size_t)snprintf(buf + (n < cap ? n : cap), n < cap ? cap - n : 0, __VA_ARGS__))
    const double tot = p->total > 0 ? p->total : 1e-12;
    OUT("profile: %llu forward passes, %llu tokens, %.3f s, ops: %s, major page faults during compute: %ld\n",
        (unsigned long long)p->forwards, (unsigned long long)p->tokens, p->total, f->ops->name, p->majflt);
    OUT("  %-36s %10s %7s\n", "phase", "ms", "%");
    double covered = 0;
    for (int i = 0; i < PH_COUNT; i++) {
        OUT("  %-36s %10.2f %6.1f%%\n", names[i], p->phase[i] * 1e3, 100 * p->phase[i] / tot);
        covered += p->phase[i];
    }
    OUT("  %-36s %10.2f %6.1f%%\n", "other (norms, residuals)", (p->total - covered) * 1e3, 100 * (p->total - covered) / tot);
    ProfOp ops[PROFILE_MAX_OPS];
    memcpy(ops, p->ops, sizeof(ProfOp) * (size_t)p->n_ops);
    qsort(ops, (size_t)p->n_ops, sizeof ops[0], cmp_op);
    OUT("  %-36s %10s %7s %8s\n", "op", "ms", "%", "calls");
    for (int i = 0; i < p->n_ops; i++)
        OUT("  %-36s %10.2f %6.1f%% %8llu\n", ops[i].name, ops[i].seconds * 1e3, 100 * ops[i].seconds / tot,
            (unsigned long long)ops[i].calls);
#undef OUT
    return (int)n;
}

DeltaNetAlgo forward_deltanet_algo(const Forward *f, int T) {
    if (f->algo != DELTANET_AUTO) return f->algo;
    return T >= f->chunk_min_tokens ? DELTANET_CHUNKED : DELTANET_RECURRENT;
}

int forward_run(Forward *f, SeqState *s, const int32_t *tokens, int T, float *logits, int n_out, Err *err) {
    BatchSeq seq = {s, tokens, T, n_out, logits};
    return forward_batch(f, &seq, 1, err);
}

static void embed(Forward *f, Bufs *b) {
    const Model *m = f->m;
    const Format *fmt = format_get(m->tok_embd.type);
    const int64_t E = m->cfg.n_embd;
    for (int s = 0; s < f->n_seqs; s++)
        for (int t = 0; t < f->seqs[s].n_tokens; t++) {
            const int32_t id = f->seqs[s].tokens[t];
            fmt->to_float((const uint8_t *)m->tok_embd.data + (size_t)id * m->tok_embd.row_bytes,
                          b->x + (int64_t)(f->row0[s] + t) * E, E);
        }
    fwd_dump(f, m->cfg.arch == ARCH_QWEN3NEXT ? "model.embed_tokens" : "model.input_embed", -1, b->x, E, f->rows, 1, 1);
}

static void head(Forward *f, Bufs *b) {
    const Model *m = f->m;
    const int64_t E = m->cfg.n_embd, V = m->cfg.n_vocab;
    /* final norm of the rows that want logits, gathered contiguously into h */
    int n = 0;
    for (int s = 0; s < f->n_seqs; s++) {
        const BatchSeq *q = &f->seqs[s];
        for (int t = q->n_tokens - q->n_out; t < q->n_tokens; t++, n++)
            op_rmsnorm(b->x + (int64_t)(f->row0[s] + t) * E, m->output_norm, (int)E, m->cfg.rms_eps, b->h + (int64_t)n * E);
    }
    if (n == 0) return;
    fwd_dump(f, "result_norm", -1, b->h, E, n, 1, 1);
    if (f->n_seqs == 1) {
        fwd_matmul(f, "output", &m->output, b->h, n, f->seqs[0].logits);
        fwd_dump(f, "result_output", -1, f->seqs[0].logits, V, n, 1, 1);
        return;
    }
    /* several sequences: one pass over the head weights, then copy each sequence's rows out */
    fwd_matmul(f, "output", &m->output, b->h, n, b->head);
    n = 0;
    for (int s = 0; s < f->n_seqs; s++) {
        const BatchSeq *q = &f->seqs[s];
        if (q->n_out) memcpy(q->logits, b->head + (int64_t)n * V, sizeof(float) * (size_t)(q->n_out * V));
        n += q->n_out;
    }
}

int forward_batch(Forward *f, const BatchSeq *seqs, int n_seqs, Err *err) {
    const Model *m = f->m;
    const ModelConfig *c = &m->cfg;
    if (n_seqs < 1 || n_seqs > f->max_seqs)
        return err_set(err, "a batch of %d sequences (this context takes at most %d)", n_seqs, f->max_seqs);
    int rows = 0, n_out = 0;
    for (int s = 0; s < n_seqs; s++) {
        const BatchSeq *q = &seqs[s];
        if (q->n_tokens < 1) return err_set(err, "empty token list for sequence %d of the batch", s);
        if (q->n_out < 0 || q->n_out > q->n_tokens || (q->n_out && !q->logits))
            return err_set(err, "bad logits request (%d rows of %d tokens)", q->n_out, q->n_tokens);
        if (q->n_tokens > f->max_batch - rows)
            return err_set(err, "batch of more than %d tokens (the batch size)", f->max_batch);
        if (q->state->n_ctx > f->max_ctx)
            return err_set(err, "a sequence of context %d on a forward pass sized for %d", q->state->n_ctx, f->max_ctx);
        if (q->n_tokens > q->state->n_ctx - q->state->n_past)
            return err_set(err, "context full: %d tokens + %d new exceed the context size %d", q->state->n_past,
                           q->n_tokens, q->state->n_ctx);
        for (int t = 0; t < q->n_tokens; t++)
            if (q->tokens[t] < 0 || q->tokens[t] >= c->n_vocab)
                return err_set(err, "token id %d out of range [0, %d)", q->tokens[t], c->n_vocab);
        for (int r = 0; r < s; r++)
            if (seqs[r].state == q->state) return err_set(err, "the same sequence twice in one batch");
        f->row0[s] = rows;
        rows += q->n_tokens;
        n_out += q->n_out;
    }
    if (n_seqs > 1 && n_out > f->max_seqs)
        return err_set(err, "%d logit rows requested from a multi-sequence batch (at most %d)", n_out, f->max_seqs);
    f->seqs = seqs;
    f->n_seqs = n_seqs;
    f->rows = rows;
    Bufs *b = &f->b;
    if (f->dump && n_seqs == 1) dump_begin_ubatch(f->dump, seqs[0].state->n_past, rows);

    long flt0 = 0;
    double t_all = 0, t0 = 0;
    if (f->prof.enabled) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        flt0 = ru.ru_majflt;
        t_all = t0 = fwd_now();
    }
    embed(f, b);
    fwd_phase(f, PH_EMBED, &t0);
    const int64_t E = c->n_embd;
    for (int il = 0; il < c->n_layer; il++) {
        for (int64_t r = 0; r < rows; r++) op_rmsnorm(b->x + r * E, m->layers[il].attn_norm, (int)E, c->rms_eps, b->h + r * E);
        fwd_dump(f, "attn_norm", il, b->h, E, rows, 1, 1);
        if (m->layers[il].recurrent) layer_deltanet(f, b, il);
        else layer_attention(f, b, il);
        for (int64_t i = 0; i < rows * E; i++) b->x[i] += b->tmp[i];
        fwd_dump(f, "attn_residual", il, b->x, E, rows, 1, 1);
        for (int64_t r = 0; r < rows; r++) op_rmsnorm(b->x + r * E, m->layers[il].post_norm, (int)E, c->rms_eps, b->h + r * E);
        fwd_dump(f, "attn_post_norm", il, b->h, E, rows, 1, 1);
        layer_ffn(f, b, il);
        fwd_dump(f, "ffn_out", il, b->tmp, E, rows, 1, 1);
        for (int64_t i = 0; i < rows * E; i++) b->x[i] += b->tmp[i];
        fwd_dump(f, "l_out", il, b->x, E, rows, 1, 1);
    }
    t0 = fwd_now();
    head(f, b);
    fwd_phase(f, PH_HEAD, &t0);
    if (f->prof.enabled) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        f->prof.majflt += ru.ru_majflt - flt0;
        f->prof.total += fwd_now() - t_all;
        f->prof.forwards++;
        f->prof.tokens += (uint64_t)rows;
    }
    for (int s = 0; s < n_seqs; s++) seqs[s].state->n_past += seqs[s].n_tokens;
    return 0;
}
