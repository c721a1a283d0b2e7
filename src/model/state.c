/* state.c — per-sequence state: conv windows and delta-net matrices of the recurrent layers, and the
 * F32 KV cache of the attention layers, sized once from the config and the context length and held in
 * one allocation. */
#include "model/model.h"

#include "base/bigalloc.h"

#include <stdlib.h>
#include <string.h>

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

static size_t conv_floats(const ModelConfig *c) { return (size_t)c->ssm_conv_dim * (size_t)(c->ssm_d_conv - 1); }
static size_t ssm_floats(const ModelConfig *c) {
    return (size_t)c->ssm_n_v_head * (size_t)c->ssm_head_v_dim * (size_t)c->ssm_d_state;
}
static size_t kv_floats(const ModelConfig *c, int n_ctx) {
    return (size_t)n_ctx * (size_t)c->n_head_kv * (size_t)c->head_dim;
}

size_t seqstate_recurrent_bytes(const Model *m) {
    const ModelConfig *c = &m->cfg;
    return (size_t)c->n_recurrent * (conv_floats(c) + ssm_floats(c)) * sizeof(float);
}

SeqState *seqstate_new(const Model *m, int n_ctx, Err *err) {
    const ModelConfig *c = &m->cfg;
    if (n_ctx < 1 || n_ctx > (1 << 24)) return err_set(err, "context size %d out of range [1, %d]", n_ctx, 1 << 24), NULL;
    size_t bytes = 0;
    for (int il = 0; il < c->n_layer; il++) {
        if (c->recurrent[il]) bytes += ALIGN64(conv_floats(c) * 4) + ALIGN64(ssm_floats(c) * 4);
        else bytes += 2 * ALIGN64(kv_floats(c, n_ctx) * 4);
    }
    SeqState *s = calloc(1, sizeof *s);
    float **ptrs = calloc(4 * (size_t)c->n_layer, sizeof *ptrs);
    void *mem = NULL;
    if (!s || !ptrs || !(mem = big_alloc(bytes))) {
        free(s);
        free(ptrs);
        return err_set(err, "out of memory for the sequence state (%zu MiB at context %d)", bytes >> 20, n_ctx), NULL;
    }
    s->n_ctx = n_ctx;
    s->mem = mem;
    s->bytes = bytes;
    s->conv = ptrs;
    s->ssm = ptrs + c->n_layer;
    s->k = ptrs + 2 * c->n_layer;
    s->v = ptrs + 3 * c->n_layer;
    uint8_t *p = mem;
    for (int il = 0; il < c->n_layer; il++) {
        if (c->recurrent[il]) {
            s->conv[il] = (float *)p, p += ALIGN64(conv_floats(c) * 4);
            s->ssm[il] = (float *)p, p += ALIGN64(ssm_floats(c) * 4);
        } else {
            s->k[il] = (float *)p, p += ALIGN64(kv_floats(c, n_ctx) * 4);
            s->v[il] = (float *)p, p += ALIGN64(kv_floats(c, n_ctx) * 4);
        }
    }
    seqstate_reset(s, m);
    return s;
}

void seqstate_free(SeqState *s) {
    if (!s) return;
    free(s->mem);
    free(s->conv);
    free(s);
}

void seqstate_reset(SeqState *s, const Model *m) {
    const ModelConfig *c = &m->cfg;
    s->n_past = 0;
    /* only the recurrent state must be zero; KV rows are written before they are read */
    for (int il = 0; il < c->n_layer; il++) {
        if (!c->recurrent[il]) continue;
        memset(s->conv[il], 0, conv_floats(c) * 4);
        memset(s->ssm[il], 0, ssm_floats(c) * 4);
    }
}

void seqstate_copy(SeqState *dst, const SeqState *src, const Model *m) {
    const ModelConfig *c = &m->cfg;
    ASSERT(dst->n_ctx == src->n_ctx);
    dst->n_past = src->n_past;
    for (int il = 0; il < c->n_layer; il++) {
        if (c->recurrent[il]) {
            memcpy(dst->conv[il], src->conv[il], conv_floats(c) * 4);
            memcpy(dst->ssm[il], src->ssm[il], ssm_floats(c) * 4);
        } else {
            size_t n = (size_t)src->n_past * (size_t)c->n_head_kv * (size_t)c->head_dim * 4;
            memcpy(dst->k[il], src->k[il], n);
            memcpy(dst->v[il], src->v[il], n);
        }
    }
}
