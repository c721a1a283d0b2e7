/* model_load.c — binds every tensor of a qwen3next / qwen35 / qwen35moe GGUF to the Model contract
 * (model.h), once, by name, checking type and shape against the config, into one registry of Weight
 * entries (name, layer, role, format, bytes, expert count) that the backends, packing, uploads and the
 * bytes-per-token estimate all read. Both qwen3next layouts (legacy
 * fused ssm_in, and attn_qkv + attn_gate), ssm_ba vs ssm_beta/ssm_alpha, fused ffn_gate_up_exps and tied
 * output are handled here, and the MTP blocks (the last nextn_predict_layers: an attention block with its FFN
 * plus blk.N.nextn.*) when the file has them. */
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
    int cap; /* registry entries allocated */
} Binder;

/* A new registry entry (the array is sized once for the whole model, so entries never move). */
static Weight *add_weight(Binder *b, const GgufTensor *t, WRole role) {
    ASSERT(b->m->n_weights < b->cap);
    Weight *w = &b->m->weights[b->m->n_weights];
    *w = (Weight){.id = b->m->n_weights, .name = t->name, .layer = b->layer, .role = (int)role, .type = t->type,
                  .looked_up = role == W_TOK_EMBD};
    b->m->n_weights++;
    return w;
}

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

static Weight *mat_entry(Binder *b, const GgufTensor *t, WRole role, int64_t cols, int64_t rows) {
    Weight *w = add_weight(b, t, role);
    w->cols = cols;
    w->rows = rows;
    w->row_bytes = format_row_bytes(format_get(t->type), cols);
    w->bytes = w->row_bytes * (size_t)rows;
    w->host = t->data;
    w->file_pages = gguf_file_mapped(b->g);
    return w;
}

static int bind_mat(Binder *b, const Weight **out, WRole role, const char *fmt, int64_t cols, int64_t rows, bool required) {
    *out = NULL;
    const GgufTensor *t = find(b, fmt, required);
    if (!t) return required ? -1 : 0;
    int64_t want[2] = {cols, rows};
    if (check_shape(b, t, 2, want) || check_type(b, t)) return -1;
    *out = mat_entry(b, t, role, cols, rows);
    b->m->n_tensors_bound++;
    return 1;
}

/* A stack of n expert matrices of rows × cols; split > 1 cuts each expert's matrix into that many entries
 * of rows / split (a fused gate_up tensor: gate first, then up), returned in out[0..split). */
static int bind_experts(Binder *b, const Weight **out, const WRole *roles, int split, const char *fmt, int64_t cols,
                        int64_t rows, int n, bool required) {
    for (int i = 0; i < split; i++) out[i] = NULL;
    const GgufTensor *t = find(b, fmt, required);
    if (!t) return required ? -1 : 0;
    int64_t want[3] = {cols, rows, n};
    if (check_shape(b, t, 3, want) || check_type(b, t)) return -1;
    for (int i = 0; i < split; i++) {
        Weight *w = mat_entry(b, t, roles[i], cols, rows / split);
        w->n_expert = n;
        w->gemv = true;
        w->expert_stride = w->row_bytes * (size_t)rows;
        w->host = (const uint8_t *)t->data + (size_t)i * w->bytes;
        out[i] = w;
    }
    b->m->n_tensors_bound++;
    return 1;
}

/* A vector of n floats (trailing dims of 1 allowed). F32 data aligned for floats is used in place; anything
 * else is converted into an owned F32 copy. */
static int bind_vec_shape(Binder *b, const Weight **out, WRole role, const char *fmt, int n_dims, const int64_t *ne,
                          bool required) {
    *out = NULL;
    const GgufTensor *t = find(b, fmt, required);
    if (!t) return required ? -1 : 0;
    if (check_shape(b, t, n_dims, ne) || check_type(b, t)) return -1;
    b->m->n_tensors_bound++;
    Weight *w = add_weight(b, t, role);
    w->type = FMT_F32;
    w->cols = t->ne[0];
    w->rows = (int64_t)t->n_elements / t->ne[0];
    w->row_bytes = (size_t)w->cols * sizeof(float);
    w->bytes = (size_t)t->n_elements * sizeof(float);
    *out = w;
    if (t->type == FMT_F32 && ((uintptr_t)t->data % sizeof(float)) == 0) {
        w->host = t->data;
        w->file_pages = gguf_file_mapped(b->g);
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
    w->host = copy;
    return 1;
}

static int bind_vec(Binder *b, const Weight **out, WRole role, const char *fmt, int64_t n, bool required) {
    return bind_vec_shape(b, out, role, fmt, 1, &n, required);
}

static int bind_attention(Binder *b, LayerW *l) {
    const ModelConfig *c = &b->m->cfg;
    const int64_t E = c->n_embd, D = c->head_dim, H = c->n_head, Hkv = c->n_head_kv;
    if (bind_mat(b, &l->wq, W_ATTN_Q, "blk.%d.attn_q.weight", E, 2 * D * H, true) < 0) return -1;
    if (bind_mat(b, &l->wk, W_ATTN_K, "blk.%d.attn_k.weight", E, D * Hkv, true) < 0) return -1;
    if (bind_mat(b, &l->wv, W_ATTN_V, "blk.%d.attn_v.weight", E, D * Hkv, true) < 0) return -1;
    if (bind_mat(b, &l->wo, W_ATTN_OUT, "blk.%d.attn_output.weight", D * H, E, true) < 0) return -1;
    if (bind_vec(b, &l->q_norm, W_ATTN_Q_NORM, "blk.%d.attn_q_norm.weight", D, true) < 0) return -1;
    if (bind_vec(b, &l->k_norm, W_ATTN_K_NORM, "blk.%d.attn_k_norm.weight", D, true) < 0) return -1;
    return 0;
}

static int bind_deltanet(Binder *b, LayerW *l) {
    const ModelConfig *c = &b->m->cfg;
    const int64_t E = c->n_embd, Hv = c->ssm_n_v_head, conv = c->ssm_conv_dim, val = c->ssm_d_inner;
    int rc = bind_mat(b, &l->qkv, W_SSM_QKV, "blk.%d.attn_qkv.weight", E, conv, false);
    if (rc < 0) return -1;
    if (rc == 1) {
        if (bind_mat(b, &l->z, W_SSM_GATE, "blk.%d.attn_gate.weight", E, val, true) < 0) return -1;
    } else {
        if (c->arch != ARCH_QWEN3NEXT) return find(b, "blk.%d.attn_qkv.weight", true), -1;
        if (!find(b, "blk.%d.ssm_in.weight", false))
            return err_set(b->err, "missing tensor 'blk.%d.attn_qkv.weight' (or the legacy 'blk.%d.ssm_in.weight')",
                           b->layer, b->layer);
        l->legacy = true;
        if (bind_mat(b, &l->ssm_in, W_SSM_IN, "blk.%d.ssm_in.weight", E, conv + val, true) < 0) return -1;
    }
    int64_t conv_shape[2] = {c->ssm_d_conv, conv};
    if (bind_vec_shape(b, &l->conv1d, W_SSM_CONV, "blk.%d.ssm_conv1d.weight", 2, conv_shape, true) < 0) return -1;
    if (bind_vec(b, &l->dt_bias, W_SSM_DT, "blk.%d.ssm_dt.bias", Hv, true) < 0) return -1;
    if (bind_vec(b, &l->ssm_a, W_SSM_A, "blk.%d.ssm_a", Hv, true) < 0) return -1;
    if (bind_vec(b, &l->ssm_norm, W_SSM_NORM, "blk.%d.ssm_norm.weight", c->ssm_head_v_dim, true) < 0) return -1;
    if (bind_mat(b, &l->ssm_out, W_SSM_OUT, "blk.%d.ssm_out.weight", val, E, true) < 0) return -1;
    if (c->arch == ARCH_QWEN3NEXT) {
        if (bind_mat(b, &l->ba, W_SSM_BA, "blk.%d.ssm_ba.weight", E, 2 * Hv, true) < 0) return -1;
    } else {
        if (bind_mat(b, &l->beta, W_SSM_BETA, "blk.%d.ssm_beta.weight", E, Hv, true) < 0) return -1;
        if (bind_mat(b, &l->alpha, W_SSM_ALPHA, "blk.%d.ssm_alpha.weight", E, Hv, true) < 0) return -1;
    }
    return 0;
}

static int bind_ffn(Binder *b, LayerW *l) {
    const ModelConfig *c = &b->m->cfg;
    const int64_t E = c->n_embd;
    if (!c->moe) {
        if (bind_mat(b, &l->ffn_gate, W_FFN_GATE, "blk.%d.ffn_gate.weight", E, c->n_ff, true) < 0) return -1;
        if (bind_mat(b, &l->ffn_up, W_FFN_UP, "blk.%d.ffn_up.weight", E, c->n_ff, true) < 0) return -1;
        if (bind_mat(b, &l->ffn_down, W_FFN_DOWN, "blk.%d.ffn_down.weight", c->n_ff, E, true) < 0) return -1;
        return 0;
    }
    const int64_t nE = c->n_expert, Fe = c->n_ff_exp, Fs = c->n_ff_shexp;
    if (bind_mat(b, &l->router, W_MOE_ROUTER, "blk.%d.ffn_gate_inp.weight", E, nE, true) < 0) return -1;
    static const WRole gate_up[2] = {W_MOE_GATE_EXPS, W_MOE_UP_EXPS};
    const Weight *gu[2];
    /* fused: gate = the first Fe rows of each expert, up = the next Fe */
    int rc = bind_experts(b, gu, gate_up, 2, "blk.%d.ffn_gate_up_exps.weight", E, 2 * Fe, (int)nE, false);
    if (rc < 0) return -1;
    if (rc == 1) {
        l->gate_exps = gu[0];
        l->up_exps = gu[1];
    } else {
        if (bind_experts(b, &l->gate_exps, &gate_up[0], 1, "blk.%d.ffn_gate_exps.weight", E, Fe, (int)nE, true) < 0) return -1;
        if (bind_experts(b, &l->up_exps, &gate_up[1], 1, "blk.%d.ffn_up_exps.weight", E, Fe, (int)nE, true) < 0) return -1;
    }
    static const WRole down[1] = {W_MOE_DOWN_EXPS};
    if (bind_experts(b, &l->down_exps, down, 1, "blk.%d.ffn_down_exps.weight", Fe, E, (int)nE, true) < 0) return -1;
    /* the shared-expert gate is a vector {E} (or {E, 1}); it multiplies like a one-row matrix */
    const GgufTensor *sg = find(b, "blk.%d.ffn_gate_inp_shexp.weight", true);
    if (!sg) return -1;
    int64_t want[1] = {E};
    if (check_shape(b, sg, 1, want) || check_type(b, sg)) return -1;
    l->shexp_gate = mat_entry(b, sg, W_SHEXP_GATE_INP, E, 1);
    b->m->n_tensors_bound++;
    if (bind_mat(b, &l->gate_shexp, W_SHEXP_GATE, "blk.%d.ffn_gate_shexp.weight", E, Fs, true) < 0) return -1;
    if (bind_mat(b, &l->up_shexp, W_SHEXP_UP, "blk.%d.ffn_up_shexp.weight", E, Fs, true) < 0) return -1;
    if (bind_mat(b, &l->down_shexp, W_SHEXP_DOWN, "blk.%d.ffn_down_shexp.weight", Fs, E, true) < 0) return -1;
    return 0;
}

/* The norms, mixer and FFN of block b->layer. */
static int bind_block(Binder *b, LayerW *l) {
    const ModelConfig *c = &b->m->cfg;
    if (bind_vec(b, &l->attn_norm, W_ATTN_NORM, "blk.%d.attn_norm.weight", c->n_embd, true) < 0) return -1;
    if (bind_vec(b, &l->post_norm, W_POST_NORM, "blk.%d.post_attention_norm.weight", c->n_embd, true) < 0) return -1;
    if ((l->recurrent ? bind_deltanet(b, l) : bind_attention(b, l)) < 0) return -1;
    return bind_ffn(b, l);
}

static int bind_nextn(Binder *b, MtpW *t) {
    Model *m = b->m;
    const int64_t E = m->cfg.n_embd, V = m->cfg.n_vocab;
    if (bind_mat(b, &t->eh_proj, W_NEXTN_EH_PROJ, "blk.%d.nextn.eh_proj.weight", 2 * E, E, true) < 0) return -1;
    if (bind_vec(b, &t->enorm, W_NEXTN_ENORM, "blk.%d.nextn.enorm.weight", E, true) < 0) return -1;
    if (bind_vec(b, &t->hnorm, W_NEXTN_HNORM, "blk.%d.nextn.hnorm.weight", E, true) < 0) return -1;
    int rc = bind_vec(b, &t->head_norm, W_NEXTN_HEAD_NORM, "blk.%d.nextn.shared_head_norm.weight", E, false);
    if (rc < 0) return -1;
    if (rc == 0) t->head_norm = m->output_norm;
    if ((rc = bind_mat(b, &t->head, W_NEXTN_HEAD, "blk.%d.nextn.shared_head_head.weight", E, V, false)) < 0) return -1;
    if (rc == 0) t->head = m->output;
    if ((rc = bind_mat(b, &t->embd, W_NEXTN_EMBD, "blk.%d.nextn.embed_tokens.weight", E, V, false)) < 0) return -1;
    if (rc == 0) t->embd = m->tok_embd;
    else m->weights[t->embd->id].lookup_only = true;
    return 0;
}

/* The MTP blocks. Many files keep nextn_predict_layers but drop the blocks' tensors, and a broken block must
 * not stop the trunk from running: either way the model loads without MTP and keeps the reason, which the
 * engine reports when drafts from the MTP head are asked for. */
static void bind_mtp(Binder *b) {
    Model *m = b->m;
    const ModelConfig *c = &m->cfg;
    if (c->n_nextn == 0) return;
    b->layer = c->n_layer;
    if (!find(b, "blk.%d.nextn.eh_proj.weight", false)) {
        snprintf(m->mtp_missing, sizeof m->mtp_missing, "the file has no MTP block (no tensor 'blk.%d.nextn.eh_proj.weight')",
                 c->n_layer);
        return;
    }
    const int n_weights = m->n_weights, n_bound = m->n_tensors_bound;
    Err e = {{0}}, *outer = b->err;
    b->err = &e;
    int rc = (m->mtp = calloc((size_t)c->n_nextn, sizeof *m->mtp)) ? 0 : err_set(&e, "out of memory");
    for (int i = 0; rc == 0 && i < c->n_nextn; i++) {
        b->layer = c->n_layer + i;
        m->mtp[i].layer = b->layer;
        rc = bind_block(b, &m->layers[b->layer]) || bind_nextn(b, &m->mtp[i]) ? -1 : 0;
    }
    b->err = outer;
    if (rc == 0) {
        m->n_mtp = c->n_nextn;
        return;
    }
    /* drop what was bound of the blocks (F32 copies stay owned until model_free) */
    m->n_weights = n_weights;
    m->n_tensors_bound = n_bound;
    memset(&m->layers[c->n_layer], 0, sizeof *m->layers * (size_t)c->n_nextn);
    free(m->mtp);
    m->mtp = NULL;
    snprintf(m->mtp_missing, sizeof m->mtp_missing, "the MTP block cannot be used: %s", e.msg);
}

void model_free(Model *m) {
    if (!m) return;
    free(m->mtp);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->weights);
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
    /* at most 24 entries per block (a fused gate_up stack is two; an MTP block's nextn tensors are 6 more
     * beside its attention and FFN) and 3 global ones */
    Binder b = {m, g, err, -1, 24 * c->n_layer_all + 3};
    m->weights = calloc((size_t)b.cap, sizeof *m->weights);
    if (!m->weights) {
        err_set(err, "out of memory");
        goto fail;
    }
    if (bind_mat(&b, &m->tok_embd, W_TOK_EMBD, "token_embd.weight", c->n_embd, c->n_vocab, true) < 0) goto fail;
    if (bind_vec(&b, &m->output_norm, W_OUTPUT_NORM, "output_norm.weight", c->n_embd, true) < 0) goto fail;
    int rc = bind_mat(&b, &m->output, W_OUTPUT, "output.weight", c->n_embd, c->n_vocab, false);
    if (rc < 0) goto fail;
    if (rc == 0) {
        m->output = m->tok_embd;
        m->tied = true;
    } else {
        m->weights[m->tok_embd->id].lookup_only = true;
    }
    m->layers = calloc((size_t)c->n_layer_all, sizeof *m->layers);
    if (!m->layers) {
        err_set(err, "out of memory");
        goto fail;
    }
    for (int il = 0; il < c->n_layer; il++) {
        LayerW *l = &m->layers[il];
        b.layer = il;
        l->recurrent = c->recurrent[il];
        if (bind_block(&b, l) < 0) goto fail;
    }
    bind_mtp(&b);
    return m;
fail:
    model_free(m);
    return NULL;
}

const Weight *model_weight(const Model *m, const char *name) {
    for (int i = 0; i < m->n_weights; i++)
        if (strcmp(m->weights[i].name, name) == 0) return &m->weights[i];
    return NULL;
}

uint64_t model_decode_bytes(const Model *m) {
    uint64_t n = 0;
    for (int i = 0; i < m->n_weights; i++) {
        const Weight *w = &m->weights[i];
        if (w->layer >= m->cfg.n_layer) continue; /* MTP blocks run only when drafting */
        if (w->role == W_TOK_EMBD) n += m->tied ? w->bytes : w->row_bytes; /* one row, or the tied head */
        else if (w->n_expert) n += (uint64_t)w->bytes * (uint64_t)m->cfg.n_expert_used;
        else n += w->bytes;
    }
    return n;
}

Model *model_load(const char *path, Err *err) {
    Gguf *g = gguf_open(path, err);
    if (!g) return NULL;
    return model_from_gguf(g, err);
}
