/* synth.c — see synth.h. Tensors are generated one at a time by the writer's fill callback, so even a
 * multi-GB model needs only its largest tensor in memory. */
#include "model/synth.h"
#include "base/splitmix.h"

#include "gguf/format.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Preset {
    const char *name;
    SynthSpec spec;
} Preset;

#define Q35 .head_dim = 256, .ssm_d_state = 128, .ssm_n_group = 16, .ssm_d_conv = 4, .full_attn_interval = 4, \
            .rope_base = 1e7f, .rms_eps = 1e-6f, .rope_sections = {11, 11, 10, 0}, .ctx = 262144, .n_vocab = 248320

static const Preset presets[] = {
    {"qwen3.5-0.8b", {.arch = "qwen35", .n_embd = 1024, .n_layer = 24, .n_head = 8, .n_head_kv = 2, .n_ff = 3584,
                      .ssm_dt_rank = 16, .tied = true, Q35}},
    {"qwen3.5-2b", {.arch = "qwen35", .n_embd = 2048, .n_layer = 24, .n_head = 8, .n_head_kv = 2, .n_ff = 6144,
                    .ssm_dt_rank = 16, .tied = true, Q35}},
    {"qwen3.5-9b", {.arch = "qwen35", .n_embd = 4096, .n_layer = 32, .n_head = 16, .n_head_kv = 4, .n_ff = 12288,
                    .ssm_dt_rank = 32, .tied = false, Q35}},
    {"qwen3.5-35b-a3b", {.arch = "qwen35moe", .n_embd = 2048, .n_layer = 40, .n_head = 16, .n_head_kv = 2,
                         .n_ff = 512, .n_expert = 256, .n_expert_used = 8, .n_ff_exp = 512, .n_ff_shexp = 512,
                         .ssm_dt_rank = 32, .tied = false, Q35}},
    {"qwen3-next-80b-a3b", {.arch = "qwen3next", .n_embd = 2048, .n_layer = 48, .n_head = 16, .n_head_kv = 2,
                            .head_dim = 256, .n_ff = 5120, .n_expert = 512, .n_expert_used = 10, .n_ff_exp = 512,
                            .n_ff_shexp = 512, .ssm_d_state = 128, .ssm_n_group = 16, .ssm_dt_rank = 32,
                            .ssm_d_conv = 4, .full_attn_interval = 4, .rope_base = 1e7f, .rms_eps = 1e-6f,
                            .ctx = 262144, .tied = false, .n_vocab = 151936}},
};
#undef Q35

int synth_preset(SynthSpec *spec, const char *name, Err *err) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) {
            *spec = presets[i].spec;
            spec->n_rot = spec->head_dim / 4;
            spec->wtype = FMT_Q8_0;
            spec->seed = 1;
            spec->name = presets[i].name;
            return 0;
        }
    return err_set(err, "unknown preset '%s' (qwen3.5-0.8b, qwen3.5-2b, qwen3.5-9b, qwen3.5-35b-a3b, qwen3-next-80b-a3b)",
                   name);
}

/* ---- values -------------------------------------------------------------------------------------------- */

typedef enum Init { INIT_MATRIX, INIT_NORM, INIT_SSM_A, INIT_DT, INIT_CONV } Init;

typedef struct TensorGen {
    Init init;
    float scale;   /* matrices: standard deviation */
    int64_t row;   /* elements per row (ne[0]) */
    uint32_t type; /* FormatId the tensor is stored in */
} TensorGen;

typedef struct Gen {
    const SynthSpec *spec;
    TensorGen t[4096];
    int n, next;
    float *rowbuf;
    int64_t rowcap;
} Gen;

static uint64_t mix(uint64_t *s) { return splitmix_next(s); }
static float unif(uint64_t *s) { return (float)((mix(s) >> 40) * (1.0 / 16777216.0)); } /* [0, 1) */
static float gauss(uint64_t *s) { return splitmix_gauss(s); }

static float value(const TensorGen *tg, uint64_t *s) {
    switch (tg->init) {
    case INIT_NORM: return 1.0f + 0.05f * gauss(s);
    case INIT_SSM_A: return -expf(logf(0.05f) + unif(s) * (logf(4.0f) - logf(0.05f)));
    case INIT_DT: return -0.5f + 0.5f * gauss(s);
    case INIT_CONV: return 0.5f * gauss(s);
    default: return tg->scale * gauss(s);
    }
}

static int fill(void *ctx, const char *name, void *dst, size_t nbytes, Err *err) {
    Gen *g = ctx;
    if (g->next >= g->n) return err_set(err, "internal: more tensors written than generated");
    const TensorGen *tg = &g->t[g->next++];
    const Format *f = format_get(tg->type);
    uint64_t s = g->spec->seed * 0x100000001B3ull;
    for (const char *p = name; *p; p++) s = (s ^ (uint8_t)*p) * 0x100000001B3ull;
    if (tg->row > g->rowcap) {
        free(g->rowbuf);
        g->rowbuf = malloc(sizeof(float) * (size_t)tg->row);
        g->rowcap = g->rowbuf ? tg->row : 0;
        if (!g->rowbuf) return err_set(err, "out of memory generating '%s'", name);
    }
    const size_t rb = format_row_bytes(f, tg->row);
    for (size_t off = 0; off + rb <= nbytes; off += rb) {
        for (int64_t i = 0; i < tg->row; i++) g->rowbuf[i] = value(tg, &s);
        f->quantize(g->rowbuf, (uint8_t *)dst + off, tg->row);
    }
    return 0;
}

/* ---- the tensor list ------------------------------------------------------------------------------------ */

typedef struct Build {
    GgufWriter *w;
    Gen *gen;
    const SynthSpec *sp;
    Err *err;
} Build;

/* the matrix type, falling back as llama-quantize does when rows do not fit the block */
static uint32_t matrix_type(const SynthSpec *sp, int64_t row) {
    const Format *f = format_get(sp->wtype);
    if (f && f->quantize && row % f->block == 0) return sp->wtype;
    return row % 32 == 0 ? FMT_Q8_0 : FMT_F16;
}

static int add(Build *b, const char *name, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2, uint32_t type, Init init,
               float scale) {
    if (b->gen->n >= (int)(sizeof b->gen->t / sizeof b->gen->t[0])) return err_set(b->err, "too many tensors");
    int64_t ne[3] = {ne0, ne1, ne2};
    b->gen->t[b->gen->n++] = (TensorGen){init, scale, ne0, type};
    return gguf_w_tensor(b->w, name, type, n_dims, ne, NULL, fill, b->gen, b->err);
}

static int mat(Build *b, const char *name, int64_t in, int64_t out, float scale) {
    return add(b, name, 2, in, out, 1, matrix_type(b->sp, in), INIT_MATRIX, scale / sqrtf((float)in));
}
static int vec(Build *b, const char *name, int64_t n, Init init) { return add(b, name, 1, n, 1, 1, FMT_F32, init, 0); }

/* Block il: a delta-net or attention mixer by the interval (attention always for an MTP block), and its FFN. */
static int layer(Build *b, int il, bool mtp) {
    const SynthSpec *sp = b->sp;
    const int64_t E = sp->n_embd, D = sp->head_dim, H = sp->n_head, Hkv = sp->n_head_kv;
    const int64_t Hv = sp->ssm_dt_rank, key = (int64_t)sp->ssm_n_group * sp->ssm_d_state, val = Hv * sp->ssm_d_state;
    const bool qwen3next = strcmp(sp->arch, "qwen3next") == 0, moe = strcmp(sp->arch, "qwen35") != 0;
    const bool recurrent = !mtp && (il + 1) % sp->full_attn_interval != 0;
    char n[96];
#define NAME(x) (snprintf(n, sizeof n, "blk.%d." x, il), n)
    if (vec(b, NAME("attn_norm.weight"), E, INIT_NORM) || vec(b, NAME("post_attention_norm.weight"), E, INIT_NORM)) return -1;
    if (recurrent) {
        if (mat(b, NAME("attn_qkv.weight"), E, 2 * key + val, 1) || mat(b, NAME("attn_gate.weight"), E, val, 1)) return -1;
        if (add(b, NAME("ssm_conv1d.weight"), 2, sp->ssm_d_conv, 2 * key + val, 1, FMT_F32, INIT_CONV, 0)) return -1;
        if (vec(b, NAME("ssm_dt.bias"), Hv, INIT_DT) || vec(b, NAME("ssm_a"), Hv, INIT_SSM_A)) return -1;
        if (qwen3next) {
            if (mat(b, NAME("ssm_ba.weight"), E, 2 * Hv, 1)) return -1;
        } else if (mat(b, NAME("ssm_beta.weight"), E, Hv, 1) || mat(b, NAME("ssm_alpha.weight"), E, Hv, 1)) {
            return -1;
        }
        if (vec(b, NAME("ssm_norm.weight"), sp->ssm_d_state, INIT_NORM) || mat(b, NAME("ssm_out.weight"), val, E, 1)) return -1;
    } else {
        if (mat(b, NAME("attn_q.weight"), E, 2 * D * H, 1) || mat(b, NAME("attn_k.weight"), E, D * Hkv, 1) ||
            mat(b, NAME("attn_v.weight"), E, D * Hkv, 1) || mat(b, NAME("attn_output.weight"), D * H, E, 1) ||
            vec(b, NAME("attn_q_norm.weight"), D, INIT_NORM) || vec(b, NAME("attn_k_norm.weight"), D, INIT_NORM))
            return -1;
    }
    if (!moe) {
        if (mat(b, NAME("ffn_gate.weight"), E, sp->n_ff, 1) || mat(b, NAME("ffn_up.weight"), E, sp->n_ff, 1) ||
            mat(b, NAME("ffn_down.weight"), sp->n_ff, E, 1))
            return -1;
    } else {
        const int64_t nE = sp->n_expert, Fe = sp->n_ff_exp, Fs = sp->n_ff_shexp;
        const uint32_t te_in = matrix_type(sp, E), te_dn = matrix_type(sp, Fe);
        if (add(b, NAME("ffn_gate_inp.weight"), 2, E, nE, 1, FMT_F32, INIT_MATRIX, 3.0f / sqrtf((float)E)) ||
            add(b, NAME("ffn_gate_exps.weight"), 3, E, Fe, nE, te_in, INIT_MATRIX, 1.0f / sqrtf((float)E)) ||
            add(b, NAME("ffn_up_exps.weight"), 3, E, Fe, nE, te_in, INIT_MATRIX, 1.0f / sqrtf((float)E)) ||
            add(b, NAME("ffn_down_exps.weight"), 3, Fe, E, nE, te_dn, INIT_MATRIX, 1.0f / sqrtf((float)Fe)) ||
            add(b, NAME("ffn_gate_inp_shexp.weight"), 1, E, 1, 1, FMT_F32, INIT_MATRIX, 1.0f / sqrtf((float)E)) ||
            mat(b, NAME("ffn_gate_shexp.weight"), E, Fs, 1) || mat(b, NAME("ffn_up_shexp.weight"), E, Fs, 1) ||
            mat(b, NAME("ffn_down_shexp.weight"), Fs, E, 1))
            return -1;
    }
#undef NAME
    return 0;
}

static int put_u32(GgufWriter *w, const char *arch, const char *key, int64_t v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_w_u32(w, k, (uint32_t)v);
}

static int put_f32(GgufWriter *w, const char *arch, const char *key, float v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_w_f32(w, k, v);
}

static int metadata(Build *b) {
    const SynthSpec *sp = b->sp;
    GgufWriter *w = b->w;
    const char *A = sp->arch;
    int rc = gguf_w_str(w, "general.architecture", A);
    rc |= gguf_w_str(w, "general.name", sp->name ? sp->name : "synthetic");
    rc |= gguf_w_u32(w, "general.quantization_version", 2);
    const struct {
        const char *key;
        int64_t v;
    } u[] = {{"context_length", sp->ctx},
             {"embedding_length", sp->n_embd},
             {"block_count", sp->n_layer},
             {"feed_forward_length", sp->n_ff},
             {"attention.head_count", sp->n_head},
             {"attention.head_count_kv", sp->n_head_kv},
             {"attention.key_length", sp->head_dim},
             {"attention.value_length", sp->head_dim},
             {"rope.dimension_count", sp->n_rot},
             {"ssm.conv_kernel", sp->ssm_d_conv},
             {"ssm.inner_size", (int64_t)sp->ssm_dt_rank * sp->ssm_d_state},
             {"ssm.state_size", sp->ssm_d_state},
             {"ssm.time_step_rank", sp->ssm_dt_rank},
             {"ssm.group_count", sp->ssm_n_group},
             {"full_attention_interval", sp->full_attn_interval}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++) rc |= put_u32(w, A, u[i].key, u[i].v);
    rc |= put_f32(w, A, "attention.layer_norm_rms_epsilon", sp->rms_eps);
    rc |= put_f32(w, A, "rope.freq_base", sp->rope_base);
    if (strcmp(A, "qwen3next") != 0) {
        char k[128];
        snprintf(k, sizeof k, "%s.rope.dimension_sections", A);
        rc |= gguf_w_arr(w, k, GGUF_TYPE_I32, sp->rope_sections, 4);
    }
    if (strcmp(A, "qwen35") != 0) {
        rc |= put_u32(w, A, "expert_count", sp->n_expert);
        rc |= put_u32(w, A, "expert_used_count", sp->n_expert_used);
        rc |= put_u32(w, A, "expert_feed_forward_length", sp->n_ff_exp);
        rc |= put_u32(w, A, "expert_shared_feed_forward_length", sp->n_ff_shexp);
    }
    return rc ? err_set(b->err, "out of memory writing metadata") : 0;
}

/* tokenizer.* from the vocabulary file, with the token list padded to n_vocab */
static int vocabulary(Build *b, const char *vocab_gguf) {
    Gguf *v = gguf_open(vocab_gguf, b->err);
    if (!v) return err_prefix(b->err, "vocabulary"), -1;
    int rc = -1;
    char **toks = NULL;
    int32_t *types = NULL;
    const GgufArray *ta, *ty;
    if (gguf_get_arr(v, "tokenizer.ggml.tokens", &ta, true, b->err) < 0 ||
        gguf_get_arr(v, "tokenizer.ggml.token_type", &ty, true, b->err) < 0)
        goto done;
    const uint64_t n = ta->n, N = (uint64_t)b->sp->n_vocab;
    if (ta->type != GGUF_TYPE_STRING || ty->n != n || !ty->raw || n > N) {
        err_set(b->err, "vocabulary: %llu tokens do not fit the model's %llu rows", (unsigned long long)n,
                (unsigned long long)N);
        goto done;
    }
    toks = calloc(N, sizeof *toks);
    types = malloc(sizeof *types * N);
    if (!toks || !types) goto oom;
    for (uint64_t i = 0; i < N; i++) {
        if (i < n) {
            toks[i] = malloc(ta->strs[i].len + 1);
            if (!toks[i]) goto oom;
            gguf_str_copy(ta->strs[i], toks[i], ta->strs[i].len + 1);
            types[i] = (int32_t)gguf_arr_i64(ty, i);
        } else {
            toks[i] = malloc(32);
            if (!toks[i]) goto oom;
            snprintf(toks[i], 32, "[PAD%llu]", (unsigned long long)i);
            types[i] = 4; /* user-defined, as mkmodel pads */
            /* Qwen3.5's vision tokens at their ids (the vocabulary file stops before them): images run on synth models */
            static const char *const vis[] = {"<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                                              "<|video_pad|>"};
            if (N == 248320 && i >= 248053 && i < 248053 + 5) snprintf(toks[i], 32, "%s", vis[i - 248053]), types[i] = 3;
        }
    }
    static const char *const skip[] = {"general.", "qwen2.", "qwen35.", "qwen3next.", "qwen35moe.", "tokenizer.ggml.tokens",
                                       "tokenizer.ggml.token_type", "tokenizer.ggml.scores"};
    if (gguf_w_arr_str(b->w, "tokenizer.ggml.tokens", (const char *const *)toks, N) ||
        gguf_w_arr(b->w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, types, N) ||
        gguf_w_copy_kv(b->w, v, skip, (int)(sizeof skip / sizeof skip[0])))
        goto oom;
    rc = 0;
    goto done;
oom:
    err_set(b->err, "out of memory copying the vocabulary");
done:
    if (toks)
        for (uint64_t i = 0; i < (uint64_t)b->sp->n_vocab; i++) free(toks[i]);
    free(toks);
    free(types);
    gguf_close(v);
    return rc;
}

int synth_write(const SynthSpec *sp, const char *vocab_gguf, const char *path, Err *err) {
    if (sp->n_layer < 2 || sp->full_attn_interval < 2 || sp->n_layer < sp->full_attn_interval)
        return err_set(err, "a synthetic model needs delta-net and attention layers (layers %d, interval %d)", sp->n_layer,
                       sp->full_attn_interval);
    const Format *wf = format_get(sp->wtype);
    if (!wf || !wf->weight || !wf->quantize) return err_set(err, "cannot write weights of type %s", format_name(sp->wtype));
    Gen *gen = calloc(1, sizeof *gen);
    GgufWriter *w = gguf_writer_new(32);
    if (!gen || !w) {
        free(gen);
        gguf_writer_free(w);
        return err_set(err, "out of memory");
    }
    gen->spec = sp;
    Build b = {w, gen, sp, err};
    int rc = metadata(&b) || vocabulary(&b, vocab_gguf) ||
             mat(&b, "token_embd.weight", sp->n_embd, sp->n_vocab, 1.0f) ||
             vec(&b, "output_norm.weight", sp->n_embd, INIT_NORM) ||
             (!sp->tied && mat(&b, "output.weight", sp->n_embd, sp->n_vocab, 2.0f));
    for (int il = 0; !rc && il < sp->n_layer; il++) rc = layer(&b, il, false);
    if (!rc) rc = gguf_writer_write_file(w, path, err);
    gguf_writer_free(w);
    free(gen->rowbuf);
    free(gen);
    return rc ? -1 : 0;
}

/* ---- an MTP block added to a model ---------------------------------------------------------------------- */

/* The generator's view of a model read from its file (shapes only; the weight type of its attention). */
static int spec_of(const ModelConfig *c, const Gguf *g, SynthSpec *sp, Err *err) {
    *sp = (SynthSpec){.arch = c->arch_name, .n_embd = c->n_embd, .n_layer = c->n_layer, .n_head = c->n_head,
                      .n_head_kv = c->n_head_kv, .head_dim = c->head_dim, .n_rot = c->n_rot, .n_ff = c->n_ff,
                      .n_expert = c->n_expert, .n_expert_used = c->n_expert_used, .n_ff_exp = c->n_ff_exp,
                      .n_ff_shexp = c->n_ff_shexp, .ssm_d_state = c->ssm_d_state, .ssm_n_group = c->ssm_n_k_head,
                      .ssm_dt_rank = c->ssm_n_v_head, .ssm_d_conv = c->ssm_d_conv, .full_attn_interval = 2,
                      .n_vocab = c->n_vocab, .wtype = FMT_Q8_0};
    for (int il = 0; il < c->n_layer; il++) {
        if (c->recurrent[il]) continue;
        char name[64];
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", il);
        const GgufTensor *t = gguf_find_tensor(g, name);
        if (t) sp->wtype = t->type;
        return 0;
    }
    return err_set(err, "the model has no attention layer to model an MTP block on");
}

int synth_add_mtp(const char *src, const char *dst, uint64_t seed, Err *err) {
    Gguf *g = gguf_open(src, err);
    if (!g) return -1;
    ModelConfig c;
    SynthSpec sp;
    Gen *gen = NULL;
    GgufWriter *w = NULL;
    int rc = -1;
    if (model_config_read(&c, g, err) || spec_of(&c, g, &sp, err)) goto done;
    if (c.n_nextn > 0) {
        err_set(err, "'%s' already has %d MTP block(s)", src, c.n_nextn);
        goto done;
    }
    if (c.n_layer_all + 1 > MODEL_MAX_LAYERS) {
        err_set(err, "too many blocks");
        goto done;
    }
    sp.seed = seed;
    const Format *wf = format_get(sp.wtype);
    if (!wf || !wf->quantize) sp.wtype = FMT_Q8_0; /* a type the generator cannot write: the common fallback */
    gen = calloc(1, sizeof *gen);
    w = gguf_writer_new(gguf_alignment(g));
    if (!gen || !w) {
        err_set(err, "out of memory");
        goto done;
    }
    gen->spec = &sp;
    char k_blocks[64], k_nextn[64];
    snprintf(k_blocks, sizeof k_blocks, "%s.block_count", c.arch_name);
    snprintf(k_nextn, sizeof k_nextn, "%s.nextn_predict_layers", c.arch_name);
    const char *skip[] = {k_blocks, k_nextn};
    if (gguf_w_copy_kv(w, g, skip, 2) || gguf_w_u32(w, k_blocks, (uint32_t)c.n_layer + 1) ||
        gguf_w_u32(w, k_nextn, 1)) {
        err_set(err, "out of memory copying the metadata");
        goto done;
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        if (gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, NULL, NULL, err)) goto done;
    }
    Build b = {w, gen, &sp, err};
    const int N = c.n_layer;
    const int64_t E = c.n_embd;
    char n[96];
#define NAME(x) (snprintf(n, sizeof n, "blk.%d.nextn." x, N), n)
    if (layer(&b, N, true) || mat(&b, NAME("eh_proj.weight"), 2 * E, E, 1) || vec(&b, NAME("enorm.weight"), E, INIT_NORM) ||
        vec(&b, NAME("hnorm.weight"), E, INIT_NORM) || vec(&b, NAME("shared_head_norm.weight"), E, INIT_NORM))
        goto done;
#undef NAME
    rc = gguf_writer_write_file(w, dst, err);
done:
    gguf_writer_free(w);
    if (gen) free(gen->rowbuf);
    free(gen);
    gguf_close(g);
    return rc ? -1 : 0;
}
