/* forward_graph.c — a decode pass recorded once and replayed (docs/VULKAN.md, "A decode pass recorded once"), as
 * CUDA graphs do for llama.cpp's CUDA build.
 *
 * forward_model runs the whole trunk over the batch forward_begin opened. On a backend with graph ops (a device),
 * a batch of one sequence of at most GRAPH_MAX_ROWS tokens, not tentative, with nothing dumped, profiled, provided
 * (expert provider) or injected (image rows), has a key (GraphKey): the state and where its segments are, the
 * tokens, the logit rows, the head's columns and the context bucket (the cache rows the pass may reach, rounded
 * up to a power of two from 256: a kernel that sizes its work by the context sizes it by the bucket's end). The
 * first pass of a key is recorded into the least recently used of the backend's BACKEND_GRAPHS slots and kept;
 * later passes of that key upload their inputs (token ids, positions, cache rows: forward_begin) and replay it,
 * recording nothing. Every value that changes from token to token reaches the kernels through those inputs
 * (AttentionArgs.rows_at, AttnPrepArgs.rows_at); an op that takes one from the host instead (kv_append's row,
 * without the fused attn_prep) spoils the capture, and the backend refuses a replay after any allocation or free
 * (the recorded addresses may be stale) — both fall back to recording. A replay runs the recorded commands on the
 * same buffers: the recorded pass's bits (tests/test_vk_stream.c checks them against recording every pass).
 * Prefill, chunked, speculative (tentative) and multi-sequence batches record every pass, as before.
 * What it does not do: replay one key on another (no patching of recorded commands). */
#include "model/forward_internal.h"

#include <string.h>

static uint64_t seg_hash(const SeqState *st) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < st->n_segs; i++) {
        h = (h ^ (uint64_t)(uintptr_t)st->segs[i].view.buf) * 1099511628211ull;
        h = (h ^ (uint64_t)st->segs[i].view.off) * 1099511628211ull;
    }
    return h;
}

/* the batch's key, or false: not a shape that is recorded once */
static bool graph_key(const Forward *f, GraphKey *k) {
    if (!f->be->vt->graph_capture || !f->rows_on || f->n_seqs != 1 || f->rows > GRAPH_MAX_ROWS || f->dump ||
        f->prof.enabled || f->has_provider || f->mm.embd || f->mm.pos_thw || f->thw_on)
        return false;
    const BatchSeq *q = &f->seqs[0];
    const SeqState *st = q->state;
    if (q->tentative || st->l0 != 0 || st->l1 < f->m->cfg.n_layer || q->n_out > f->max_out) return false;
    memset(k, 0, sizeof *k); /* compared with memcmp */
    k->st = st;
    k->segs = seg_hash(st);
    k->rows = f->rows;
    k->n_out = q->n_out;
    k->bucket = fwd_bucket(st->n_past + f->rows);
    k->v0 = f->v0, k->v1 = f->v1;
    return true;
}

void forward_model(Forward *f) {
    Backend *be = f->be;
    const int V = f->v1 ? f->v1 - f->v0 : f->m->cfg.n_vocab;
    GraphKey k;
    f->graph_cap = -1;
    if (graph_key(f, &k)) {
        int slot = -1, lru = 0;
        for (int i = 0; i < BACKEND_GRAPHS; i++) {
            if (f->graphs[i].valid && memcmp(&f->graphs[i].key, &k, sizeof k) == 0) slot = i;
            if (f->graphs[i].used < f->graphs[lru].used) lru = i;
        }
        if (slot >= 0 && be->vt->graph_replay(be, slot, f->graphs[slot].id)) {
            FwdGraph *g = &f->graphs[slot];
            g->used = ++f->graph_tick;
            f->cnt.layer_steps += g->layer_steps;
            f->cnt.layer_dispatches += g->layer_dispatches, f->cnt.layer_barriers += g->layer_barriers;
            fwd_head_download(f, 0, f->n_out, V); /* submits the inputs and the graph, waits, reads */
            return;
        }
        if (slot < 0) slot = lru; /* a new key over the least recently used one; a stale one over itself */
        f->graphs[slot].valid = false;
        f->graphs[slot].used = ++f->graph_tick;
        if ((f->graph_id = be->vt->graph_capture(be, slot)) != 0) {
            f->graph_cap = slot;
            f->graph_spoiled = false;
            f->graph_key = k;
            f->graph_c0 = f->cnt;
        }
    }
    forward_embed(f);
    forward_layers(f, 0, f->m->cfg.n_layer);
    forward_head(f);
    fwd_graph_end(f); /* when the head did not end it (nothing wanted logits) */
}

void fwd_graph_end(Forward *f) {
    const int slot = f->graph_cap;
    if (slot < 0) return;
    f->graph_cap = -1;
    const bool whole = f->be->vt->graph_end(f->be);
    if (!whole || f->graph_spoiled || f->failed) return;
    FwdGraph *g = &f->graphs[slot];
    g->valid = true;
    g->id = f->graph_id;
    g->key = f->graph_key;
    g->layer_steps = f->cnt.layer_steps - f->graph_c0.layer_steps;
    g->layer_dispatches = f->cnt.layer_dispatches - f->graph_c0.layer_dispatches;
    g->layer_barriers = f->cnt.layer_barriers - f->graph_c0.layer_barriers;
}
