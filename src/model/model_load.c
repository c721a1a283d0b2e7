/* model_load.c — binds every tensor of a qwen3next / qwen35 / qwen35moe GGUF to the Model contract
 * (model.h), once, by name, checking type and shape against the config. Both qwen3next layouts (legacy
 * fused ssm_in, and attn_qkv + attn_gate), ssm_ba vs ssm_beta/ssm_alpha, fused ffn_gate_up_exps and tied
 * output are handled here; MTP blocks (the last nextn_predict_layers) are left unbound. */
#include "model/model.h"

#include "gguf/format.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Binder {
    Model *m;
    const Gguf *g;
    Err *err;
    int layer;
} Binder;

static const char *shape_str(char *buf, size_t cap, int n_dims, const int64_t *ne) {
    int n = snprintf(buf, cap, "{");
    for (int d = 0; d < n_dims; d++) n += snprintf(buf + n, cap - (size_t)n, "%s%" PRId64, d ? ", " : "", ne[d]);
    snprintf(buf + n, cap - (size_t)n, "}");
    return buf;
}

static const GgufTensor *find(Binder *b, const char *fmt, bool required) {
    char name[GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, fmt, b->layer);
    const GgufTensor *t = gguf_find_tensor(b->g, name);
    if (!t && required) err_set(b->err, "missing tensor '%s'", name);
    return t;
}

/* Checks dims; extra trailing dims of 1 are accepted ({E} and {E, 1} both match a vector of E). */
static int check_shape(Binder *b, const GgufTensor *t, int n_dims, const int64_t *want) {
    bool ok = true;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) ok &= t->ne[d] == (d < n_dims ? want[d] : 1);
    if (ok) return 0;
    char w[96], f[96];
    return err_set(b->err, "tensor '%s': expected shape %s, found %s", t->name, shape_str(w, sizeof w, n_dims, want),
                   shape_str(f, sizeof f, t->n_dims, t->ne));
}

static int check_type(Binder *b, const GgufTensor *t) {
    const Format *f = format_get(t->type);
    if (!f || !f->weight || !f->to_float)
        return err_set(b->err, "tensor '%s': weight format %s is not supported", t->name, format_name(t->type));
    return 0;
}

static int bind_mat(Binder *b, MatW *out, const char *fmt, int64_t cols, int64_t rows, bool required) {
    memset(out, 0, sizeof *out);
    const GgufTensor *t = find(b, fmt, required);
    if (!t) return required ? -1 : 0;
    int64_t want[2] = {cols, rows};
    if (check_shape(b, t, 2, want) || check_type(b, t)) return -1;
    *out = (MatW){t->data, t->type, cols, rows, format_row_bytes(format_get(t->type), cols), false, NULL};
    b->m->n_tensors_bound++;
    return 1;
}

static int bind_experts(Binder *b, ExpertW *out, const char *fmt, int64_t cols, int64_t rows, int n, bool required) {
    memset(out, 0, sizeof *out);
    const GgufTensor *t = find(b, fmt, required);
    if (!t) return required ? -1 : 0;
    int64_t want[3] = {cols, rows, n};
    if (check_shape(b, t, 3, want) || check_type(b, t)) return -1;
    size_t rb = format_row_bytes(format_get(t->type), cols);
    *out = (ExpertW){t->data, t->type, cols, rows, rb, rb * (size_t)rows, 0, n};
    b->m->n_tensors_bound++;
    return 1;
}

/* A vector of n floats (trailing dims of 1 allowed). F32 data aligned for floats is used in place; anything
 * else is converted into an owned F32 copy. */
static int bind_vec_shape(Binder *b, const float **out, const char *fmt, int n_dims, const int64_t *ne, bool required) {
    *out = NULL;
    const GgufTensor *t = find(b, fmt, required);
    if (!t) return required ? -1 : 0;
    if (check_shape(b, t, n_dims, ne) || check_type(b, t)) return -1;
    b->m->n_tensors_bound++;
    if (t->type == FMT_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        *out = t->data;
        return 1;
    }
    float *copy = malloc((size_t)t->n_elements * sizeof(float));
    void **owned = realloc(b->m->owned, (size_t)(b->m->n_owned + 1) * sizeof *owned);
    if (!copy || !owned) {
        free(copy);
        if (owned) b->m->owned = owned;
        return err_set(b->err, "out of memory converting '%s'", t->name);
    }
    b->m->owned = owned;
    b->m->owned[b->m->n_owned++] = copy;
    format_get(t->type)->to_float(t->data, copy, (int64_t)t->n_elements);
    *out = copy;
    return 1;
}

static int bind_vec(Binder *b, const float **out, const char *fmt, int64_t n, bool required) {
    return bind_vec_shape(b, out, fmt, 1, &n, required);
}

static int bind_attention(Binder *b, LayerW *l) {
    const ModelConfig *c = &b->m->cfg;
    const int64_t E = c->n_embd, D = c->head_dim, H = c->n_head, Hkv = c->n_head_kv;
    if (bind_mat(b, &l->wq, "blk.%d.attn_q.weight", E, 2 * D * H, true) < 0) return -1;
    if (bind_mat(b, &l->wk, "blk.%d.attn_k.weight", E, D * Hkv, true) < 0) return -1;
    if (bind_mat(b, &l->wv, "blk.%d.attn_v.weight", E, D * Hkv, true) < 0) return -1;
    if (bind_mat(b, &l->wo, "blk.%d.attn_output.weight", D * H, E, true) < 0) return -1;
    if (bind_vec(b, &l->q_norm, "blk.%d.attn_q_norm.weight", D, true) < 0) return -1;
    if (bind_vec(b, &l->k_norm, "blk.%d.attn_k_norm.weight", D, true) < 0) return -1;
    return 0;
}

static int bind_deltanet(Binder *b, LayerW *l) {
    const ModelConfig *c = &b->m->cfg;
    const int64_t E = c->n_embd, Hv = c->ssm_n_v_head, conv = c->ssm_conv_dim, val = c->ssm_d_inner;
    int rc = bind_mat(b, &l->qkv, "blk.%d.attn_qkv.weight", E, conv, false);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (bind_mat(b, &l->z, "blk.%d.attn_gate.weight", E, val, true) < 0) return -1;
    } else {
        if (c->arch != ARCH_QWEN3NEXT) return find(b, "blk.%d.attn_qkv.weight", true), -1;
        if (!find(b, "blk.%d.ssm_in.weight", false))
            return err_set(b->err, "missing tensor 'blk.%d.attn_qkv.weight' (or the legacy 'blk.%d.ssm_in.weight')",
                           b->layer, b->layer);
        l->legacy = true;
        if (bind_mat(b, &l->ssm_in, "blk.%d.ssm_in.weight", E, conv + val, true) < 0) return -1;
    }
    int64_t conv_shape[2] = {c->ssm_d_conv, conv};
    if (bind_vec_shape(b, &l->conv1d, "blk.%d.ssm_conv1d.weight", 2, conv_shape, true) < 0) return -1;
    if (bind_vec(b, &l->dt_bias, "blk.%d.ssm_dt.bias", Hv, true) < 0) return -1;
    if (bind_vec(b, &l->ssm_a, "blk.%d.ssm_a", Hv, true) < 0) return -1;
    if (bind_vec(b, &l->ssm_norm, "blk.%d.ssm_norm.weight", c->ssm_head_v_dim, true) < 0) return -1;
    if (bind_mat(b, &l->ssm_out, "blk.%d.ssm_out.weight", val, E, true) < 0) return -1;
    if (c->arch == ARCH_QWEN3NEXT) {
        if (bind_mat(b, &l->ba, "blk.%d.ssm_ba.weight", E, 2 * Hv, true) < 0) return -1;
    } else {
        if (bind_mat(b, &l->beta, "blk.%d.ssm_beta.weight", E, Hv, true) < 0) return -1;
        if (bind_mat(b, &l->alpha, "blk.%d.ssm_alpha.weight", E, Hv, true) < 0) return -1;
    }
    return 0;
}

static int bind_ffn(Binder *b, LayerW *l) {
    const ModelConfig *c = &b->m->cfg;
    const int64_t E = c->n_embd;
    if (!c->moe) {
        if (bind_mat(b, &l->ffn_gate, "blk.%d.ffn_gate.weight", E, c->n_ff, true) < 0) return -1;
        if (bind_mat(b, &l->ffn_up, "blk.%d.ffn_up.weight", E, c->n_ff, true) < 0) return -1;
        if (bind_mat(b, &l->ffn_down, "blk.%d.ffn_down.weight", c->n_ff, E, true) < 0) return -1;
        return 0;
    }
    const int64_t nE = c->n_expert, Fe = c->n_ff_exp, Fs = c->n_ff_shexp;
    if (bind_mat(b, &l->router, "blk.%d.ffn_gate_inp.weight", E, nE, true) < 0) return -1;
    int rc = bind_experts(b, &l->gate_exps, "blk.%d.ffn_gate_up_exps.weight", E, 2 * Fe, (int)nE, false);
    if (rc < 0) return -1;
    if (rc == 1) { /* fused: gate = first Fe rows of each expert, up = the next Fe */
        l->gate_exps.rows = Fe;
        l->up_exps = l->gate_exps;
        l->up_exps.offset = (size_t)Fe * l->gate_exps.row_bytes;
    } else {
        if (bind_experts(b, &l->gate_exps, "blk.%d.ffn_gate_exps.weight", E, Fe, (int)nE, true) < 0) return -1;
        if (bind_experts(b, &l->up_exps, "blk.%d.ffn_up_exps.weight", E, Fe, (int)nE, true) < 0) return -1;
    }
    if (bind_experts(b, &l->down_exps, "blk.%d.ffn_down_exps.weight", Fe, E, (int)nE, true) < 0) return -1;
    /* the shared-expert gate is a vector {E} (or {E, 1}); it multiplies like a one-row matrix */
    const GgufTensor *sg = find(b, "blk.%d.ffn_gate_inp_shexp.weight", true);
    if (!sg) return -1;
    int64_t want[1] = {E};
    if (check_shape(b, sg, 1, want) || check_type(b, sg)) return -1;
    l->shexp_gate = (MatW){sg->data, sg->type, E, 1, format_row_bytes(format_get(sg->type), E), false, NULL};
    b->m->n_tensors_bound++;
    if (bind_mat(b, &l->gate_shexp, "blk.%d.ffn_gate_shexp.weight", E, Fs, true) < 0) return -1;
    if (bind_mat(b, &l->up_shexp, "blk.%d.ffn_up_shexp.weight", E, Fs, true) < 0) return -1;
    if (bind_mat(b, &l->down_shexp, "blk.%d.ffn_down_shexp.weight", Fs, E, true) < 0) return -1;
    return 0;
}

void model_free(Model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    model_pack_free(m);
    free(m->layers);
    gguf_close(m->gguf);
    free(m);
}

Model *model_from_gguf(Gguf *g, Err *err) {
    Model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(g);
        return err_set(err, "out of memory"), NULL;
    }
    m->gguf = g;
    if (model_config_read(&m->cfg, g, err)) goto fail;
    const ModelConfig *c = &m->cfg;
    if (c->n_vocab <= 0) {
        err_set(err, "missing tensor 'token_embd.weight' (a vocabulary-only file cannot run)");
        goto fail;
    }
    if (c->n_recurrent == 0 || c->n_attention == 0) {
        /* llama.cpp refuses such hybrids too; nothing in the published models needs it */
        err_set(err, "the model needs at least one delta-net and one attention layer (has %d and %d)", c->n_recurrent,
                c->n_attention);
        goto fail;
    }
    Binder b = {m, g, err, 0};
    if (bind_mat(&b, &m->tok_embd, "token_embd.weight", c->n_embd, c->n_vocab, true) < 0) goto fail;
    if (bind_vec(&b, &m->output_norm, "output_norm.weight", c->n_embd, true) < 0) goto fail;
    int rc = bind_mat(&b, &m->output, "output.weight", c->n_embd, c->n_vocab, false);
    if (rc < 0) goto fail;
    if (rc == 0) {
        m->output = m->tok_embd;
        m->tied = true;
    }
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) {
        err_set(err, "out of memory");
        goto fail;
    }
    for (int il = 0; il < c->n_layer; il++) {
        LayerW *l = &m->layers[il];
        b.layer = il;
        l->recurrent = c->recurrent[il];
        if (bind_vec(&b, &l->attn_norm, "blk.%d.attn_norm.weight", c->n_embd, true) < 0) goto fail;
        if (bind_vec(&b, &l->post_norm, "blk.%d.post_attention_norm.weight", c->n_embd, true) < 0) goto fail;
        if ((l->recurrent ? bind_deltanet(&b, l) : bind_attention(&b, l)) < 0) goto fail;
        if (bind_ffn(&b, l) < 0) goto fail;
    }
    return m;
fail:
    model_free(m);
    return NULL;
}

Model *model_load(const char *path, Err *err) {
    Gguf *g = gguf_open(path, err);
    if (!g) return NULL;
    return model_from_gguf(g, err);
}
