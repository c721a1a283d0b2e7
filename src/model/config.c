/* config.c — reading ModelConfig from GGUF metadata (see config.h and docs/GGUF.md). */
#include "model/config.h"

#include <stdio.h>
#include <string.h>

int arch_from_name(const char *name) {
    if (strcmp(name, "qwen3next") == 0) return ARCH_QWEN3NEXT;
    if (strcmp(name, "qwen35") == 0) return ARCH_QWEN35;
    if (strcmp(name, "qwen35moe") == 0) return ARCH_QWEN35MOE;
    return -1;
}

/* A u32 key that may also be stored as a per-layer array whose entries are all equal (llama.cpp allows
 * arrays for head counts, FFN widths and expert counts). */
static int get_uniform(const Gguf *g, const char *arch, const char *suffix, int *out, bool required, int n_layer,
                       Err *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const GgufValue *v = gguf_get(g, key);
    if (v && v->type == GGUF_TYPE_ARRAY) {
        const GgufArray *a = &v->arr;
        if (!a->raw || a->n == 0 || !gguf_type_is_int(a->type))
            return err_set(err, "metadata '%s' must be an integer or an array of integers", key);
        if (n_layer > 0 && a->n != (uint64_t)n_layer)
            return err_set(err, "metadata '%s' has %llu entries, block_count is %d", key, (unsigned long long)a->n, n_layer);
        int64_t first = gguf_arr_i64(a, 0);
        for (uint64_t i = 1; i < a->n; i++) {
            int64_t x = gguf_arr_i64(a, i);
            /* MTP blocks may carry 0 for values they do not use */
            if (x != first && x != 0)
                return err_set(err, "metadata '%s' varies per layer (%lld vs %lld): not supported", key, (long long)first,
                               (long long)x);
        }
        if (first < 0 || first > INT32_MAX) return err_set(err, "metadata '%s' = %lld is out of range", key, (long long)first);
        *out = (int)first;
        return 1;
    }
    uint32_t u;
    int rc = gguf_get_u32(g, key, &u, required, err);
    if (rc == 1) {
        if (u > INT32_MAX) return err_set(err, "metadata '%s' = %u is out of range", key, u);
        *out = (int)u;
    }
    return rc;
}

static int get_float(const Gguf *g, const char *arch, const char *suffix, float *out, bool required, Err *err) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(g, key, out, required, err);
}

#define CHECK_RANGE(v, lo, hi, what)                                                                       \
    if ((v) < (lo) || (v) > (hi)) return err_set(err, "%s: %s = %d is out of range [%d, %d]", a, what, (int)(v), (int)(lo), (int)(hi))

int model_config_read(ModelConfig *c, const Gguf *g, Err *err) {
    memset(c, 0, sizeof *c);
    GgufStr s;
    if (gguf_get_str(g, "general.architecture", &s, true, err) < 0) return -1;
    gguf_str_copy(s, c->arch_name, sizeof c->arch_name);
    int arch = s.len < sizeof c->arch_name ? arch_from_name(c->arch_name) : -1;
    if (arch < 0)
        return err_set(err, "unknown architecture '%.*s': deltallm runs qwen3next, qwen35 and qwen35moe",
                       (int)(s.len > 40 ? 40 : s.len), s.ptr);
    c->arch = (Arch)arch;
    const char *a = c->arch_name;
    if (gguf_get_str(g, "general.name", &s, false, err) == 1) gguf_str_copy(s, c->name, sizeof c->name);

    if (get_uniform(g, a, "block_count", &c->n_layer_all, true, 0, err) < 0) return -1;
    CHECK_RANGE(c->n_layer_all, 1, MODEL_MAX_LAYERS, "block_count");
    int L = c->n_layer_all;
    if (get_uniform(g, a, "nextn_predict_layers", &c->n_nextn, false, 0, err) < 0) return -1;
    CHECK_RANGE(c->n_nextn, 0, L - 1, "nextn_predict_layers");
    c->n_layer = L - c->n_nextn;
    if (get_uniform(g, a, "context_length", &c->n_ctx_train, true, 0, err) < 0) return -1;
    if (get_uniform(g, a, "embedding_length", &c->n_embd, true, 0, err) < 0) return -1;
    CHECK_RANGE(c->n_embd, 1, 1 << 16, "embedding_length");
    if (get_float(g, a, "attention.layer_norm_rms_epsilon", &c->rms_eps, true, err) < 0) return -1;
    if (!(c->rms_eps >= 0 && c->rms_eps < 1)) return err_set(err, "%s: rms epsilon %g is out of range", a, c->rms_eps);

    /* attention */
    if (get_uniform(g, a, "attention.head_count", &c->n_head, true, L, err) < 0) return -1;
    c->n_head_kv = c->n_head;
    if (get_uniform(g, a, "attention.head_count_kv", &c->n_head_kv, false, L, err) < 0) return -1;
    CHECK_RANGE(c->n_head, 1, 1024, "attention.head_count");
    CHECK_RANGE(c->n_head_kv, 1, c->n_head, "attention.head_count_kv");
    if (c->n_head % c->n_head_kv) return err_set(err, "%s: head_count %d is not a multiple of head_count_kv %d", a, c->n_head, c->n_head_kv);
    c->head_dim = c->n_embd / c->n_head;
    if (get_uniform(g, a, "attention.key_length", &c->head_dim, false, 0, err) < 0) return -1;
    int vlen = c->head_dim;
    if (get_uniform(g, a, "attention.value_length", &vlen, false, 0, err) < 0) return -1;
    CHECK_RANGE(c->head_dim, 2, 4096, "attention.key_length");
    if (vlen != c->head_dim) return err_set(err, "%s: value_length %d differs from key_length %d", a, vlen, c->head_dim);
    c->n_rot = c->head_dim;
    if (get_uniform(g, a, "rope.dimension_count", &c->n_rot, false, 0, err) < 0) return -1;
    CHECK_RANGE(c->n_rot, 2, c->head_dim, "rope.dimension_count");
    if (c->n_rot % 2) return err_set(err, "%s: rope.dimension_count %d is odd", a, c->n_rot);
    c->rope_base = 10000.0f;
    if (get_float(g, a, "rope.freq_base", &c->rope_base, false, err) < 0) return -1;
    if (!(c->rope_base > 1)) return err_set(err, "%s: rope.freq_base %g is out of range", a, c->rope_base);
    float factor = 0;
    if (get_float(g, a, "rope.scaling.factor", &factor, false, err) < 0) return -1;
    c->rope_freq_scale = factor > 0 ? 1.0f / factor : 1.0f;
    c->rope_imrope = c->arch != ARCH_QWEN3NEXT;
    if (c->rope_imrope) {
        char key[160];
        snprintf(key, sizeof key, "%s.rope.dimension_sections", a);
        const GgufValue *v = gguf_get(g, key);
        if (!v) return err_set(err, "missing required metadata key '%s'", key);
        int64_t sec[4] = {0, 0, 0, 0};
        if (v->type == GGUF_TYPE_ARRAY && v->arr.raw && gguf_type_is_int(v->arr.type)) {
            for (uint64_t i = 0; i < v->arr.n && i < 4; i++) sec[i] = gguf_arr_i64(&v->arr, i);
        } else if (gguf_type_is_int(v->type)) {
            if (gguf_get_i64(g, key, &sec[0], true, err) < 0) return -1;
        } else {
            return err_set(err, "metadata '%s' must be an integer array", key);
        }
        /* range-check before narrowing to int */
        for (int i = 0; i < 4; i++) {
            if (sec[i] < 0 || sec[i] > 4096)
                return err_set(err, "%s: rope.dimension_sections[%d] = %lld is out of range [0, 4096]", a, i,
                               (long long)sec[i]);
            c->rope_sections[i] = (int)sec[i];
        }
    }

    /* gated delta net */
    if (get_uniform(g, a, "ssm.conv_kernel", &c->ssm_d_conv, true, 0, err) < 0) return -1;
    if (get_uniform(g, a, "ssm.inner_size", &c->ssm_d_inner, true, 0, err) < 0) return -1;
    if (get_uniform(g, a, "ssm.state_size", &c->ssm_d_state, true, 0, err) < 0) return -1;
    if (get_uniform(g, a, "ssm.time_step_rank", &c->ssm_n_v_head, true, 0, err) < 0) return -1;
    if (get_uniform(g, a, "ssm.group_count", &c->ssm_n_k_head, true, 0, err) < 0) return -1;
    CHECK_RANGE(c->ssm_d_conv, 2, 16, "ssm.conv_kernel");
    CHECK_RANGE(c->ssm_d_state, 1, 1024, "ssm.state_size");
    CHECK_RANGE(c->ssm_n_v_head, 1, 1024, "ssm.time_step_rank");
    CHECK_RANGE(c->ssm_n_k_head, 1, c->ssm_n_v_head, "ssm.group_count");
    if (c->ssm_n_v_head % c->ssm_n_k_head)
        return err_set(err, "%s: ssm.time_step_rank %d is not a multiple of ssm.group_count %d", a, c->ssm_n_v_head,
                       c->ssm_n_k_head);
    if (c->ssm_d_inner % c->ssm_n_v_head)
        return err_set(err, "%s: ssm.inner_size %d is not a multiple of time_step_rank %d", a, c->ssm_d_inner, c->ssm_n_v_head);
    c->ssm_head_v_dim = c->ssm_d_inner / c->ssm_n_v_head;
    if (c->ssm_head_v_dim != c->ssm_d_state)
        return err_set(err, "%s: value head dim %d (inner_size/time_step_rank) differs from state_size %d", a,
                       c->ssm_head_v_dim, c->ssm_d_state);
    c->ssm_key_dim = c->ssm_n_k_head * c->ssm_d_state;
    c->ssm_conv_dim = 2 * c->ssm_key_dim + c->ssm_d_inner;

    /* layer kinds: recurrent_layers if present, else the interval rule */
    char key[160];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", a);
    const GgufValue *rl = gguf_get(g, key);
    if (rl && rl->type != GGUF_TYPE_ARRAY) {
        /* a scalar applies to every layer, as llama.cpp's get_key_or_arr reads it */
        if (rl->type != GGUF_TYPE_BOOL && !gguf_type_is_int(rl->type))
            return err_set(err, "metadata '%s' must be a flag or an array of %d flags", key, L);
        for (int i = 0; i < L; i++) c->recurrent[i] = i < c->n_layer && rl->u != 0;
    } else if (rl) {
        if (!rl->arr.raw || rl->arr.n != (uint64_t)L || (rl->arr.type != GGUF_TYPE_BOOL && !gguf_type_is_int(rl->arr.type)))
            return err_set(err, "metadata '%s' must be an array of %d flags", key, L);
        for (int i = 0; i < L; i++) c->recurrent[i] = i < c->n_layer && gguf_arr_i64(&rl->arr, (uint64_t)i) != 0;
    } else {
        c->full_attention_interval = 4;
        if (get_uniform(g, a, "full_attention_interval", &c->full_attention_interval, false, 0, err) < 0) return -1;
        CHECK_RANGE(c->full_attention_interval, 1, MODEL_MAX_LAYERS, "full_attention_interval");
        for (int i = 0; i < L; i++) c->recurrent[i] = i < c->n_layer && (i + 1) % c->full_attention_interval != 0;
    }
    for (int i = 0; i < c->n_layer; i++) {
        c->n_recurrent += c->recurrent[i];
        c->n_attention += !c->recurrent[i];
    }

    /* feed-forward */
    if (get_uniform(g, a, "feed_forward_length", &c->n_ff, false, L, err) < 0) return -1;
    if (get_uniform(g, a, "expert_count", &c->n_expert, false, L, err) < 0) return -1;
    if (get_uniform(g, a, "expert_used_count", &c->n_expert_used, false, L, err) < 0) return -1;
    c->moe = c->arch != ARCH_QWEN35;
    if (c->moe) {
        if (c->n_expert <= 0) return err_set(err, "%s: expert_count must be > 0 for a mixture-of-experts model", a);
        CHECK_RANGE(c->n_expert, 1, 4096, "expert_count");
        CHECK_RANGE(c->n_expert_used, 1, c->n_expert, "expert_used_count");
        if (get_uniform(g, a, "expert_feed_forward_length", &c->n_ff_exp, false, L, err) < 0) return -1;
        if (c->n_ff_exp == 0) c->n_ff_exp = c->n_ff / c->n_expert_used;
        if (get_uniform(g, a, "expert_shared_feed_forward_length", &c->n_ff_shexp, false, 0, err) < 0) return -1;
        if (c->n_ff_shexp == 0) c->n_ff_shexp = c->n_ff;
        CHECK_RANGE(c->n_ff_exp, 1, 1 << 20, "expert_feed_forward_length");
    } else {
        CHECK_RANGE(c->n_ff, 1, 1 << 20, "feed_forward_length");
    }

    const GgufTensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (emb) {
        if (emb->n_dims != 2 || emb->ne[0] != c->n_embd)
            return err_set(err, "tensor 'token_embd.weight': expected shape {%d, n_vocab}, found %d dims with ne[0] = %lld",
                           c->n_embd, emb->n_dims, (long long)emb->ne[0]);
        if (emb->ne[1] > INT32_MAX) return err_set(err, "tensor 'token_embd.weight': vocabulary too large");
        c->n_vocab = (int)emb->ne[1];
    }
    return 0;
}
