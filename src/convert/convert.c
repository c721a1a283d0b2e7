/* convert.c — Hugging Face checkpoint → GGUF (see convert.h for the transforms).
 *
 * Plan, then stream: the safetensors parts are opened and validated, every tensor is mapped to its
 * output (name, type, shape, and a recipe: its source tensors, a head permutation, an arithmetic step),
 * the metadata is written, and the writer pulls each tensor through fill(), which decodes the source to
 * float, applies the recipe and encodes the output type — one tensor in memory at a time.
 * Order of the output tensors: the converter's — parts in name order, tensors in name order within a
 * part, a stacked expert tensor where the last of its experts is read. */
#include "convert/convert.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fp16.h"
#include "convert/convert_internal.h"
#include "convert/safetensors.h"
#include "gguf/format.h"

typedef enum { ARCH_QWEN35, ARCH_QWEN35MOE, ARCH_QWEN3NEXT } Arch;
static const char *const ARCH_NAME[] = {"qwen35", "qwen35moe", "qwen3next"};

typedef struct Hp {
    Arch arch;
    int L, n_mtp, vocab, hk, hv, dk, dv;
    int n_expert;
} Hp;

/* recipe steps */
enum { OP_NONE, OP_PLUS_ONE, OP_NEG_EXP };
enum { VR_NONE, VR_ROWS, VR_QKV_ROWS, VR_COLS };       /* V-head reorder kinds */
enum { PART_ALL, PART_QKVZ_QKV, PART_QKVZ_Z, PART_GATE, PART_UP }; /* which rows of the source */

typedef struct Out {
    char name[GGUF_MAX_NAME];
    uint32_t type;
    int n_dims;
    int64_t ne[4];
    const StTensor **src; /* n_src sources stacked along the slowest dimension (experts) */
    int n_src;
    int op, vr, part;
    int64_t vr_hd; /* head width of the reorder (1 for per-head scalars) */
} Out;

typedef struct Plan {
    const HfConvertOpts *o;
    Hp hp;
    StFile **parts;
    int n_parts;
    Out *outs;
    int n_out, cap_out;
    /* experts waiting for their layer's set: [layer][expert][gate, up, down] */
    const StTensor **pending;
    int *pending_n;
    int done;
} Plan;

/* ---- names ------------------------------------------------------------------------------------------ */

static const struct {
    const char *hf, *gguf;
} LAYER_NAMES[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"linear_attn.in_proj_qkv.weight", "attn_qkv.weight"},
    {"linear_attn.in_proj_z.weight", "attn_gate.weight"},
    {"linear_attn.in_proj_b.weight", "ssm_beta.weight"},
    {"linear_attn.in_proj_a.weight", "ssm_alpha.weight"},
    {"linear_attn.in_proj_ba.weight", "ssm_ba.weight"},
    {"linear_attn.conv1d.weight", "ssm_conv1d.weight"},
    {"linear_attn.dt_bias", "ssm_dt.bias"},
    {"linear_attn.A_log", "ssm_a"},
    {"linear_attn.norm.weight", "ssm_norm.weight"},
    {"linear_attn.out_proj.weight", "ssm_out.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.experts.gate_proj.weight", "ffn_gate_exps.weight"},
    {"mlp.experts.up_proj.weight", "ffn_up_exps.weight"},
    {"mlp.experts.down_proj.weight", "ffn_down_exps.weight"},
    /* the MTP block's own tensors (after mtp.* → model.layers.L.*) */
    {"eh_proj.weight", "nextn.eh_proj.weight"},
    {"enorm.weight", "nextn.enorm.weight"},
    {"hnorm.weight", "nextn.hnorm.weight"},
    {"shared_head.norm.weight", "nextn.shared_head_norm.weight"},
    {"shared_head.head.weight", "nextn.shared_head_head.weight"},
    {"embed_tokens.weight", "nextn.embed_tokens.weight"},
};

int hf_gguf_name(const char *hf, int L, char *out, int cap) {
    if (!strcmp(hf, "model.embed_tokens.weight")) return snprintf(out, (size_t)cap, "token_embd.weight"), 0;
    if (!strcmp(hf, "model.norm.weight")) return snprintf(out, (size_t)cap, "output_norm.weight"), 0;
    if (!strcmp(hf, "lm_head.weight")) return snprintf(out, (size_t)cap, "output.weight"), 0;
    int bid, n = 0;
    if (sscanf(hf, "model.layers.%d.%n", &bid, &n) != 1 || n == 0 || bid < 0) return -1;
    const char *rest = hf + n;
    for (size_t i = 0; i < sizeof LAYER_NAMES / sizeof *LAYER_NAMES; i++)
        if (!strcmp(rest, LAYER_NAMES[i].hf)) {
            if (!strncmp(LAYER_NAMES[i].gguf, "nextn.", 6) && bid < L) return -1;
            return snprintf(out, (size_t)cap, "blk.%d.%s", bid, LAYER_NAMES[i].gguf) >= cap ? -1 : 0;
        }
    return -1;
}

/* The name as llama.cpp's filter_tensors leaves it: language_model. dropped, model.mtp. → mtp., mtp.* → the
 * layer after the trunk. Returns false for tensors the text model does not have (vision tower, ...). */
static bool canonical_name(const char *hf, const Hp *hp, bool no_mtp, char *out, size_t cap) {
    static const char *const skip[] = {"visual.", "vision.", "audio.", "vision_", "audio_", "projector.", "patch_embed",
                                       "merger."};
    for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
        if (strstr(hf, skip[i])) return false;
    char buf[512];
    const char *lm = strstr(hf, "language_model.");
    if (lm) snprintf(buf, sizeof buf, "%.*s%s", (int)(lm - hf), hf, lm + strlen("language_model."));
    else snprintf(buf, sizeof buf, "%s", hf);
    const char *s = !strncmp(buf, "model.mtp.", 10) ? buf + 6 : buf;
    if (!strncmp(s, "mtp.", 4)) {
        if (no_mtp) return false;
        int k, n = 0;
        if (sscanf(s, "mtp.layers.%d.%n", &k, &n) == 1 && n) return snprintf(out, cap, "model.layers.%d.%s", hp->L + k, s + n), true;
        static const char *const from[] = {"fc.", "pre_fc_norm_embedding.", "pre_fc_norm_hidden.", "norm."};
        static const char *const to[] = {"eh_proj.", "enorm.", "hnorm.", "shared_head.norm."};
        for (int i = 0; i < 4; i++)
            if (!strncmp(s + 4, from[i], strlen(from[i])))
                return snprintf(out, cap, "model.layers.%d.%s%s", hp->L, to[i], s + 4 + strlen(from[i])), true;
        return snprintf(out, cap, "%s", s), true; /* unknown mtp tensor: refused by the name map */
    }
    snprintf(out, cap, "%s", s);
    return true;
}

/* ---- hyperparameters and metadata -------------------------------------------------------------------- */

static int hp_int(const cJSON *cfg, const char *key, int *out) {
    const cJSON *v = cv_hparam(cfg, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble) return 0;
    *out = (int)v->valuedouble;
    return 1;
}

static const cJSON *rope_params(const cJSON *cfg) {
    const cJSON *r = cv_hparam(cfg, "rope_parameters");
    if (!cJSON_IsObject(r)) r = cv_hparam(cfg, "rope_scaling");
    return cJSON_IsObject(r) ? r : NULL;
}

/* a rope value from rope_parameters, else the top-level key (llama.cpp mirrors the globals into it) */
static bool rope_num(const cJSON *cfg, const char *key, double *out) {
    const cJSON *r = rope_params(cfg), *v = r ? cJSON_GetObjectItemCaseSensitive(r, key) : NULL;
    if (!cJSON_IsNumber(v)) v = cv_hparam(cfg, key);
    if (!cJSON_IsNumber(v)) return false;
    *out = v->valuedouble;
    return true;
}

/* llama.cpp's Metadata.id_to_title on the directory name: '-' becomes a space, all-lowercase words that are
 * not versions or numbers are title-cased ("t12smoke" → "T12Smoke"). Its other name heuristics (basename,
 * finetune, version, a size label read from the name) are not reproduced: docs/CONVERT.md. */
static void id_to_title(const char *id, char *out, size_t cap) {
    size_t o = 0;
    const char *p = id;
    while (*p && o + 1 < cap) {
        while (*p == '-' || *p == ' ' || *p == '\t') p++;
        const char *w = p;
        while (*p && *p != '-' && *p != ' ' && *p != '\t') p++;
        if (p == w) break;
        bool has_lower = false, has_upper = false;
        for (const char *c = w; c < p; c++) has_lower |= *c >= 'a' && *c <= 'z', has_upper |= *c >= 'A' && *c <= 'Z';
        const bool number = (*w >= '0' && *w <= '9') || (*w == 'v' && p - w > 1 && w[1] >= '0' && w[1] <= '9');
        const bool title = has_lower && !has_upper && !number;
        if (o) out[o++] = ' ';
        bool prev_letter = false;
        for (const char *c = w; c < p && o + 1 < cap; c++) {
            const bool letter = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z');
            char ch = *c;
            if (title && letter) ch = prev_letter ? ch : (char)(ch - 'a' + 'A');
            out[o++] = ch;
            prev_letter = letter;
        }
    }
    out[o] = '\0';
}

/* llama.cpp's model_weight_count_rounded_notation: 2 significant digits with a K/M/B/T suffix */
static void size_label(uint64_t n, char *out, size_t cap) {
    double v = (double)n;
    const char *suf = "K";
    double s = v * 1e-3;
    if (v > 1e12) s = v * 1e-12, suf = "T";
    else if (v > 1e9) s = v * 1e-9, suf = "B";
    else if (v > 1e6) s = v * 1e-6, suf = "M";
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", nearbyint(s));
    const char *d = digits;
    while (*d == '0') d++;
    int fix = 2 - (int)strlen(d);
    snprintf(out, cap, "%.*f%s", fix > 0 ? fix : 0, s, suf);
}

static int write_metadata(GgufWriter *w, const Plan *p, const cJSON *cfg, uint32_t file_type, const char *size,
                          const char *name, Err *err) {
    const Hp *hp = &p->hp;
    const char *a = ARCH_NAME[hp->arch];
    char key[96];
    int v;
    double d;
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    int r = gguf_w_str(w, "general.architecture", a) | gguf_w_str(w, "general.type", "model") | gguf_w_str(w, "general.name", name);
    r |= gguf_w_str(w, "general.size_label", size);
    r |= gguf_w_u32(w, K("block_count"), (uint32_t)(hp->L + hp->n_mtp));
    if (hp_int(cfg, "max_position_embeddings", &v)) r |= gguf_w_u32(w, K("context_length"), (uint32_t)v);
    if (hp_int(cfg, "hidden_size", &v)) r |= gguf_w_u32(w, K("embedding_length"), (uint32_t)v);
    if (hp_int(cfg, "intermediate_size", &v)) r |= gguf_w_u32(w, K("feed_forward_length"), (uint32_t)v);
    if (hp_int(cfg, "num_attention_heads", &v)) r |= gguf_w_u32(w, K("attention.head_count"), (uint32_t)v);
    if (hp_int(cfg, "num_key_value_heads", &v)) r |= gguf_w_u32(w, K("attention.head_count_kv"), (uint32_t)v);
    const cJSON *rp = rope_params(cfg), *ms = rp ? cJSON_GetObjectItemCaseSensitive(rp, "mrope_section") : NULL;
    int32_t sections[4] = {11, 11, 10, 0};
    bool have_sections = cJSON_IsArray(ms);
    if (have_sections) {
        for (int i = 0; i < 4; i++) {
            const cJSON *e = cJSON_GetArrayItem(ms, i);
            sections[i] = cJSON_IsNumber(e) ? e->valueint : 0;
        }
        r |= gguf_w_arr(w, K("rope.dimension_sections"), GGUF_TYPE_I32, sections, 4);
    }
    if (rope_num(cfg, "rope_theta", &d)) r |= gguf_w_f32(w, K("rope.freq_base"), (float)d);
    const cJSON *eps = cv_hparam(cfg, "rms_norm_eps");
    if (cJSON_IsNumber(eps)) r |= gguf_w_f32(w, K("attention.layer_norm_rms_epsilon"), (float)eps->valuedouble);
    if (hp->n_expert && hp_int(cfg, "num_experts", &v)) r |= gguf_w_u32(w, K("expert_count"), (uint32_t)v);
    if (hp->n_expert && hp_int(cfg, "num_experts_per_tok", &v)) r |= gguf_w_u32(w, K("expert_used_count"), (uint32_t)v);
    int head_dim = 0;
    if (hp_int(cfg, "head_dim", &head_dim))
        r |= gguf_w_u32(w, K("attention.key_length"), (uint32_t)head_dim) | gguf_w_u32(w, K("attention.value_length"), (uint32_t)head_dim);
    r |= gguf_w_u32(w, "general.file_type", file_type);
    if (hp_int(cfg, "moe_intermediate_size", &v)) r |= gguf_w_u32(w, K("expert_feed_forward_length"), (uint32_t)v);
    if (hp_int(cfg, "shared_expert_intermediate_size", &v)) r |= gguf_w_u32(w, K("expert_shared_feed_forward_length"), (uint32_t)v);
    if (hp->n_mtp) r |= gguf_w_u32(w, K("nextn_predict_layers"), (uint32_t)hp->n_mtp);
    if (hp_int(cfg, "linear_conv_kernel_dim", &v)) r |= gguf_w_u32(w, K("ssm.conv_kernel"), (uint32_t)v);
    r |= gguf_w_u32(w, K("ssm.state_size"), (uint32_t)hp->dk) | gguf_w_u32(w, K("ssm.group_count"), (uint32_t)hp->hk) |
         gguf_w_u32(w, K("ssm.time_step_rank"), (uint32_t)hp->hv) | gguf_w_u32(w, K("ssm.inner_size"), (uint32_t)(hp->dv * hp->hv));
    v = 4;
    hp_int(cfg, "full_attention_interval", &v);
    r |= gguf_w_u32(w, K("full_attention_interval"), (uint32_t)v);
    int hs = 0, nh = 1;
    if (!head_dim && hp_int(cfg, "hidden_size", &hs) && hp_int(cfg, "num_attention_heads", &nh) && nh > 0) head_dim = hs / nh;
    double prf = 0.25;
    rope_num(cfg, "partial_rotary_factor", &prf);
    r |= gguf_w_u32(w, K("rope.dimension_count"), (uint32_t)(int)(head_dim * prf));
    if (hp->arch != ARCH_QWEN3NEXT && !have_sections) r |= gguf_w_arr(w, K("rope.dimension_sections"), GGUF_TYPE_I32, sections, 4);
    r |= gguf_w_u32(w, "general.quantization_version", 2);
#undef K
    if (r) return err_set(err, "out of memory writing metadata");
    return cv_write_vocab(w, p->o->dir, cfg, hp->vocab, err);
}

static int read_hparams(const cJSON *cfg, Hp *hp, Err *err) {
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_GetArrayItem(archs, 0);
    if (!cJSON_IsString(a0)) return err_set(err, "config.json: no \"architectures\"");
    const char *an = a0->valuestring;
    if (!strcmp(an, "Qwen3_5ForConditionalGeneration") || !strcmp(an, "Qwen3_5ForCausalLM")) hp->arch = ARCH_QWEN35;
    else if (!strcmp(an, "Qwen3_5MoeForConditionalGeneration") || !strcmp(an, "Qwen3_5MoeForCausalLM")) hp->arch = ARCH_QWEN35MOE;
    else if (!strcmp(an, "Qwen3NextForCausalLM")) hp->arch = ARCH_QWEN3NEXT;
    else return err_set(err, "config.json: architecture %.60s is not one deltallm converts (Qwen3.5, Qwen3.5-MoE, Qwen3-Next)", an);
    if (!hp_int(cfg, "num_hidden_layers", &hp->L) || hp->L < 1 || hp->L > 4096) return err_set(err, "config.json: bad num_hidden_layers");
    if (!hp_int(cfg, "vocab_size", &hp->vocab) || hp->vocab < 1 || hp->vocab > (1 << 24)) return err_set(err, "config.json: bad vocab_size");
    if (!hp_int(cfg, "linear_num_key_heads", &hp->hk) || !hp_int(cfg, "linear_num_value_heads", &hp->hv) ||
        !hp_int(cfg, "linear_key_head_dim", &hp->dk) || !hp_int(cfg, "linear_value_head_dim", &hp->dv) || hp->hk < 1 ||
        hp->hv < hp->hk || hp->hv % hp->hk || hp->dk < 1 || hp->dv < 1)
        return err_set(err, "config.json: bad linear attention head counts / dims");
    hp->n_mtp = 0;
    hp_int(cfg, "mtp_num_hidden_layers", &hp->n_mtp);
    if (hp->n_mtp < 0 || hp->n_mtp > 16) return err_set(err, "config.json: bad mtp_num_hidden_layers");
    hp->n_expert = 0;
    if (hp->arch != ARCH_QWEN35 && (!hp_int(cfg, "num_experts", &hp->n_expert) || hp->n_expert < 1 || hp->n_expert > 65536))
        return err_set(err, "config.json: bad num_experts");
    return 0;
}

/* ---- planning ---------------------------------------------------------------------------------------- */

static Out *new_out(Plan *p, Err *err) {
    if (p->n_out == p->cap_out) {
        int cap = p->cap_out ? 2 * p->cap_out : 256;
        Out *o = realloc(p->outs, (size_t)cap * sizeof *o);
        if (!o) return err_set(err, "out of memory"), NULL;
        p->outs = o, p->cap_out = cap;
    }
    Out *o = &p->outs[p->n_out++];
    memset(o, 0, sizeof *o);
    return o;
}

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !strcmp(s + n - m, suf);
}

/* the output type of a tensor (llama.cpp's rules: 1-D, *_norm, routers, conv1d and non-".weight" names
 * stay F32; Q8_0 falls back to F16 when a row is not whole blocks) */
static uint32_t out_type(const Out *o, uint32_t ftype_fmt) {
    if (o->n_dims <= 1 || ends_with(o->name, "_norm.weight") || ends_with(o->name, "ffn_gate_inp.weight") ||
        ends_with(o->name, "ffn_gate_inp_shexp.weight") || ends_with(o->name, "ssm_conv1d.weight") || !ends_with(o->name, ".weight"))
        return FMT_F32;
    if (ftype_fmt == FMT_Q8_0 && o->ne[0] % 32) return FMT_F16;
    return ftype_fmt;
}

/* ggml shape of the output from the HF shape [d0, ..., dn-1] (reversed), stacked experts on top */
static int set_shape(Out *o, const StTensor *t, int stack, int64_t rows_override, Err *err) {
    int nd = t->n_dims;
    int64_t sh[ST_MAX_DIMS];
    for (int i = 0; i < nd; i++) sh[i] = t->shape[i];
    /* conv1d [C, 1, K] → [C, K]: the converter squeezes every size-1 dimension */
    if (ends_with(o->name, "ssm_conv1d.weight")) {
        int k = 0;
        for (int i = 0; i < nd; i++)
            if (sh[i] != 1) sh[k++] = sh[i];
        nd = k;
    }
    if (rows_override >= 0) sh[0] = rows_override;
    int total = nd + (stack > 0);
    if (total < 1 || total > 4) return err_set(err, "tensor %s: %d dimensions", t->name, total);
    o->n_dims = total;
    for (int i = 0; i < 4; i++) o->ne[i] = 1;
    for (int i = 0; i < nd; i++) o->ne[i] = sh[nd - 1 - i];
    if (stack > 0) o->ne[nd] = stack;
    return 0;
}

static int plan_tensor(Plan *p, const char *cname_in, const StTensor *t, const StTensor **stacked, int n_stacked, Err *err) {
    const Hp *hp = &p->hp;
    char cname[512], gname[GGUF_MAX_NAME];
    /* transformers' fused experts have no ".weight" suffix */
    snprintf(cname, sizeof cname, "%s%s", cname_in, ends_with(cname_in, "mlp.experts.down_proj") ? ".weight" : "");
    const int64_t key_dim = (int64_t)hp->hk * hp->dk, r = hp->hv / hp->hk;
    const int bid = !strncmp(cname, "model.layers.", 13) ? atoi(cname + 13) : -1;
    if (strstr(cname, "linear_attn.in_proj_qkvz.weight")) {
        /* qwen3next: one source, two outputs */
        int64_t per = 2 * hp->dk + 2 * r * hp->dv;
        if (t->n_dims != 2 || t->shape[0] != hp->hk * per) return err_set(err, "%s: shape does not match the head counts", t->name);
        for (int k = 0; k < 2; k++) {
            Out *o = new_out(p, err);
            if (!o) return -1;
            snprintf(o->name, sizeof o->name, "blk.%d.attn_%s.weight", bid, k ? "gate" : "qkv");
            if (!(o->src = malloc(sizeof *o->src))) return err_set(err, "out of memory");
            o->src[0] = t, o->n_src = 1, o->part = k ? PART_QKVZ_Z : PART_QKVZ_QKV;
            if (set_shape(o, t, 0, k ? (int64_t)hp->hv * hp->dv : 2 * key_dim + (int64_t)hp->hv * hp->dv, err)) return -1;
        }
        return 0;
    }
    if (ends_with(cname, "mlp.experts.gate_up_proj") || ends_with(cname, "mlp.experts.gate_up_proj.weight")) {
        if (t->n_dims != 3 || t->shape[1] % 2) return err_set(err, "%s: unexpected gate_up_proj shape", t->name);
        for (int k = 0; k < 2; k++) {
            Out *o = new_out(p, err);
            if (!o) return -1;
            snprintf(o->name, sizeof o->name, "blk.%d.ffn_%s_exps.weight", bid, k ? "up" : "gate");
            if (!(o->src = malloc(sizeof *o->src))) return err_set(err, "out of memory");
            o->src[0] = t, o->n_src = 1, o->part = k ? PART_UP : PART_GATE;
            if (set_shape(o, t, 0, -1, err)) return -1;
            o->ne[1] /= 2;
        }
        return 0;
    }
    if (hf_gguf_name(cname, hp->L, gname, sizeof gname)) return err_set(err, "%s: not a tensor of %s", t->name, ARCH_NAME[hp->arch]);
    if (strstr(cname, "linear_attn.")) { /* the head permutations index by the config: check it first */
        const int64_t vd = (int64_t)hp->hv * hp->dv;
        int64_t want = -1, got = t->n_dims ? t->shape[0] : 1;
        if (strstr(cname, "in_proj_qkv.") || strstr(cname, "conv1d.")) want = 2 * key_dim + vd;
        else if (strstr(cname, "in_proj_z.")) want = vd;
        else if (strstr(cname, "in_proj_b.") || strstr(cname, "in_proj_a.") || strstr(cname, "A_log") || strstr(cname, "dt_bias")) want = hp->hv;
        else if (strstr(cname, "in_proj_ba.")) want = 2 * hp->hv;
        else if (strstr(cname, "out_proj.")) want = vd, got = t->n_dims == 2 ? t->shape[1] : -1;
        else if (strstr(cname, "linear_attn.norm.")) want = hp->dv;
        if (want >= 0 && got != want)
            return err_set(err, "%s: %lld rows or columns where config.json's head counts give %lld", t->name, (long long)got,
                           (long long)want);
    }
    const bool vre = hp->arch != ARCH_QWEN3NEXT && hp->hk != hp->hv && strstr(cname, "linear_attn.");
    Out *o = new_out(p, err);
    if (!o) return -1;
    snprintf(o->name, sizeof o->name, "%s", gname);
    o->n_src = n_stacked ? n_stacked : 1;
    o->src = malloc((size_t)o->n_src * sizeof *o->src);
    if (!o->src) return err_set(err, "out of memory");
    for (int i = 0; i < o->n_src; i++) o->src[i] = n_stacked ? stacked[i] : t;
    if (set_shape(o, t, n_stacked, -1, err)) return -1;
    if (ends_with(cname, "norm.weight") && !ends_with(cname, "linear_attn.norm.weight")) o->op = OP_PLUS_ONE;
    if (ends_with(cname, ".A_log")) o->op = OP_NEG_EXP;
    if (vre) {
        if (strstr(cname, "in_proj_qkv.") || strstr(cname, "conv1d.")) o->vr = VR_QKV_ROWS, o->vr_hd = hp->dv;
        else if (strstr(cname, "in_proj_z.")) o->vr = VR_ROWS, o->vr_hd = hp->dv;
        else if (strstr(cname, "in_proj_b.") || strstr(cname, "in_proj_a.") || strstr(cname, "A_log") || strstr(cname, "dt_bias"))
            o->vr = VR_ROWS, o->vr_hd = 1;
        else if (strstr(cname, "out_proj.")) o->vr = VR_COLS, o->vr_hd = hp->dv;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* model*.safetensors in name order, or the parts an index names */
static int list_parts(const char *dir, char ***names, int *n, Err *err) {
    Err e2 = {{0}};
    cJSON *idx = cv_read_json(dir, "model.safetensors.index.json", false, &e2);
    char **list = NULL;
    int cnt = 0, cap = 0;
    if (idx) {
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *it;
        if (!cJSON_IsObject(wm)) {
            cJSON_Delete(idx);
            return err_set(err, "model.safetensors.index.json: no weight_map");
        }
        cJSON_ArrayForEach(it, wm) {
            if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
                cJSON_Delete(idx);
                return err_set(err, "model.safetensors.index.json: bad file name for %.60s", it->string);
            }
            bool seen = false;
            for (int i = 0; i < cnt && !seen; i++) seen = !strcmp(list[i], it->valuestring);
            if (seen) continue;
            if (cnt == cap) list = realloc(list, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *list);
            list[cnt++] = strdup(it->valuestring);
        }
        cJSON_Delete(idx);
    } else {
        DIR *d = opendir(dir);
        if (!d) return err_set(err, "%s: cannot open the directory", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
            if (strncmp(de->d_name, "model", 5) || !ends_with(de->d_name, ".safetensors")) continue;
            if (cnt == cap) list = realloc(list, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *list);
            list[cnt++] = strdup(de->d_name);
        }
        closedir(d);
    }
    if (!cnt) return err_set(err, "%s: no model*.safetensors files", dir);
    qsort(list, (size_t)cnt, sizeof *list, cmp_str);
    *names = list, *n = cnt;
    return 0;
}

/* experts of one layer arrive one by one: the stacked tensor is planned when the layer's set is complete */
static int plan_expert(Plan *p, const char *cname, const StTensor *t, Err *err) {
    int bid, xid, n = 0;
    char which[16];
    if (sscanf(cname, "model.layers.%d.mlp.experts.%d.%15[a-z]_proj.weight%n", &bid, &xid, which, &n) != 3 || !n ||
        bid < 0 || bid >= p->hp.L + p->hp.n_mtp || xid < 0 || xid >= p->hp.n_expert)
        return err_set(err, "%s: unexpected expert tensor", t->name);
    int w = !strcmp(which, "down") ? 0 : !strcmp(which, "gate") ? 1 : !strcmp(which, "up") ? 2 : -1;
    if (w < 0) return err_set(err, "%s: unexpected expert tensor", t->name);
    const int nE = p->hp.n_expert;
    const StTensor **slot = &p->pending[((size_t)bid * nE + xid) * 3 + w];
    if (*slot) return err_set(err, "%s: duplicate expert tensor", t->name);
    *slot = t;
    if (++p->pending_n[bid] < 3 * nE) return 0;
    for (int k = 0; k < 3; k++) { /* down, gate, up: the converter's order */
        const StTensor *stack[65536 > 0 ? 1 : 1];
        (void)stack;
        const StTensor **srcs = malloc((size_t)nE * sizeof *srcs);
        if (!srcs) return err_set(err, "out of memory");
        for (int x = 0; x < nE; x++) {
            srcs[x] = p->pending[((size_t)bid * nE + x) * 3 + k];
            if (srcs[x]->n_dims != 2 || srcs[x]->shape[0] != srcs[0]->shape[0] || srcs[x]->shape[1] != srcs[0]->shape[1] ||
                srcs[x]->dtype != srcs[0]->dtype) {
                free(srcs);
                return err_set(err, "layer %d: experts of different shapes or dtypes", bid);
            }
        }
        char merged[128];
        snprintf(merged, sizeof merged, "model.layers.%d.mlp.experts.%s_proj.weight", bid, k == 0 ? "down" : k == 1 ? "gate" : "up");
        int rc = plan_tensor(p, merged, srcs[0], srcs, nE, err);
        free(srcs);
        if (rc) return -1;
    }
    return 0;
}

/* torch's float32 exp on the CPU (SLEEF's expf_u10 in its FMA form), which llama.cpp's converter applies to
 * A_log: ssm_a comes out bit for bit as it writes it (checked against torch on 10^6 values; a correctly
 * rounded exp differs from it in the last bit for about 10% of inputs). */
static float torch_expf(float d) {
    const int q = (int)nearbyintf(d * 1.442695040888963407359924681001892137426645954152985934135449406931f);
    float s = fmaf((float)q, -0.693145751953125f, d);
    s = fmaf((float)q, -1.428606765330187045e-06f, s);
    float u = 0.000198527617612853646278381f;
    u = fmaf(u, s, 0.00139304355252534151077271f);
    u = fmaf(u, s, 0.00833336077630519866943359f);
    u = fmaf(u, s, 0.0416664853692054748535156f);
    u = fmaf(u, s, 0.166666671633720397949219f);
    u = fmaf(u, s, 0.5f);
    u = 1.0f + fmaf(s * s, u, s);
    const int m = q >> 1;
    u = u * fp32_from_bits((uint32_t)(m + 127) << 23) * fp32_from_bits((uint32_t)(q - m + 127) << 23);
    if (d < -104) u = 0;
    if (d > 100) u = INFINITY;
    return u;
}

/* ---- streaming the data ------------------------------------------------------------------------------ */

static void decode(const StTensor *t, float *dst) {
    const uint8_t *s = t->data;
    for (uint64_t i = 0; i < t->n_elements; i++) {
        uint16_t h;
        switch (t->dtype) {
        case ST_F32: memcpy(&dst[i], s + 4 * i, 4); break;
        case ST_F16: memcpy(&h, s + 2 * i, 2), dst[i] = fp16_to_fp32(h); break;
        default: memcpy(&h, s + 2 * i, 2), dst[i] = fp32_from_bits((uint32_t)h << 16); break;
        }
    }
}

/* V heads grouped [nk][r][hd] → tiled [r][nk][hd], over n "units" of `unit` floats each */
static void tile_heads(float *x, float *tmp, int64_t nk, int64_t r, int64_t hd, int64_t unit) {
    for (int64_t g = 0; g < nk; g++)
        for (int64_t j = 0; j < r; j++)
            memcpy(tmp + ((j * nk + g) * hd) * unit, x + ((g * r + j) * hd) * unit, (size_t)(hd * unit) * sizeof *x);
    memcpy(x, tmp, (size_t)(nk * r * hd * unit) * sizeof *x);
}

typedef struct FillCtx {
    Plan *p;
} FillCtx;

static int fill(void *ctx, const char *name, void *dst, size_t nbytes, Err *err) {
    Plan *p = ((FillCtx *)ctx)->p;
    Out *o = &p->outs[p->done++];
    const Hp *hp = &p->hp;
    const StTensor *t0 = o->src[0];
    const uint64_t per = t0->n_elements;
    uint64_t total = per * (uint64_t)o->n_src;
    float *x = malloc(total * sizeof *x), *tmp = NULL;
    if (!x) return err_set(err, "%s: out of memory (%llu floats)", name, (unsigned long long)total);
    for (int i = 0; i < o->n_src; i++) decode(o->src[i], x + per * (uint64_t)i);
    const int64_t E = t0->n_dims == 2 ? t0->shape[1] : 1;
    const int64_t key_dim = (int64_t)hp->hk * hp->dk, r = hp->hv / hp->hk;
    /* row selection (qkvz split, gate_up split) */
    if (o->part == PART_QKVZ_QKV || o->part == PART_QKVZ_Z) {
        const int64_t rv = r * hp->dv, grp = 2 * hp->dk + 2 * rv;
        float *y = malloc((size_t)(o->ne[1] * E) * sizeof *y);
        if (!y) return free(x), err_set(err, "out of memory");
        int64_t row = 0;
        if (o->part == PART_QKVZ_QKV) {
            static const int64_t off_q = 0;
            for (int part = 0; part < 3; part++) /* all q, all k, all v */
                for (int64_t g = 0; g < hp->hk; g++) {
                    int64_t off = part == 0 ? off_q : part == 1 ? hp->dk : 2 * hp->dk, len = part < 2 ? hp->dk : rv;
                    memcpy(y + row * E, x + (g * grp + off) * E, (size_t)(len * E) * sizeof *x), row += len;
                }
        } else {
            for (int64_t g = 0; g < hp->hk; g++)
                memcpy(y + row * E, x + (g * grp + 2 * hp->dk + rv) * E, (size_t)(rv * E) * sizeof *x), row += rv;
        }
        free(x);
        x = y;
        total = (uint64_t)(o->ne[1] * E);
    } else if (o->part == PART_GATE || o->part == PART_UP) {
        const int64_t nE = t0->shape[0], rows2 = t0->shape[1], in = t0->shape[2], half = rows2 / 2;
        float *y = malloc((size_t)(nE * half * in) * sizeof *y);
        if (!y) return free(x), err_set(err, "out of memory");
        for (int64_t e = 0; e < nE; e++)
            memcpy(y + e * half * in, x + (e * rows2 + (o->part == PART_UP ? half : 0)) * in, (size_t)(half * in) * sizeof *x);
        free(x);
        x = y;
        total = (uint64_t)(nE * half * in);
    }
    if (o->vr != VR_NONE) {
        const int64_t unit = o->vr == VR_COLS ? 1 : (int64_t)(total / (uint64_t)o->ne[o->n_dims - 1]);
        const int64_t rows = o->ne[o->n_dims - 1];
        tmp = malloc(total * sizeof *tmp);
        if (!tmp) return free(x), err_set(err, "out of memory");
        if (o->vr == VR_ROWS) {
            tile_heads(x, tmp, hp->hk, r, o->vr_hd, unit);
        } else if (o->vr == VR_QKV_ROWS) {
            tile_heads(x + 2 * key_dim * unit, tmp, hp->hk, r, o->vr_hd, unit);
        } else { /* columns of each row */
            const int64_t cols = o->ne[0];
            for (int64_t i = 0; i < (int64_t)(total / (uint64_t)cols); i++) tile_heads(x + i * cols, tmp, hp->hk, r, o->vr_hd, 1);
        }
        (void)rows;
    }
    /* arithmetic in the source's precision: F16 stays F16 (BF16 was widened to F32 by the converter) */
    const bool half = t0->dtype == ST_F16;
    if (o->op == OP_PLUS_ONE)
        for (uint64_t i = 0; i < total; i++) x[i] = half ? fp16_to_fp32(fp32_to_fp16(x[i] + 1.0f)) : x[i] + 1.0f;
    else if (o->op == OP_NEG_EXP)
        for (uint64_t i = 0; i < total; i++) {
            float v = -torch_expf(x[i]);
            x[i] = half ? fp16_to_fp32(fp32_to_fp16(v)) : v;
        }
    const Format *f = format_get(o->type);
    if (format_row_bytes(f, o->ne[0]) * (total / (uint64_t)o->ne[0]) != nbytes) {
        free(x), free(tmp);
        return err_set(err, "%s: internal size mismatch", name);
    }
    f->quantize(x, dst, (int64_t)total);
    free(x), free(tmp);
    if (p->o->progress) p->o->progress(p->o->progress_ctx, p->done, p->n_out, name);
    return 0;
}

int hf_convert(const HfConvertOpts *o, Err *err) {
    int rc = -1;
    Plan p = {.o = o};
    char **part_names = NULL;
    GgufWriter *w = NULL;
    cJSON *cfg = cv_read_json(o->dir, "config.json", true, err);
    if (!cfg || read_hparams(cfg, &p.hp, err) || list_parts(o->dir, &part_names, &p.n_parts, err)) goto done;
    p.parts = calloc((size_t)p.n_parts, sizeof *p.parts);
    if (!p.parts) goto oom;
    for (int i = 0; i < p.n_parts; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", o->dir, part_names[i]);
        if (!(p.parts[i] = st_open(path, err))) goto done;
    }
    /* Qwen3-Next's config has no mtp_num_hidden_layers: count the mtp.layers.K in the checkpoint */
    if (!p.hp.n_mtp && !o->no_mtp)
        for (int i = 0; i < p.n_parts; i++)
            for (int k = 0; k < st_n_tensors(p.parts[i]); k++) {
                const char *nm = st_tensor(p.parts[i], k)->name, *m = strstr(nm, "mtp.layers.");
                int id;
                if (m && sscanf(m, "mtp.layers.%d.", &id) == 1 && id >= 0 && id < 16 && id + 1 > p.hp.n_mtp) p.hp.n_mtp = id + 1;
            }
    if (o->no_mtp) p.hp.n_mtp = 0;
    const int blocks = p.hp.L + p.hp.n_mtp;
    if (p.hp.n_expert) {
        p.pending = calloc((size_t)blocks * (size_t)p.hp.n_expert * 3, sizeof *p.pending);
        p.pending_n = calloc((size_t)blocks, sizeof *p.pending_n);
        if (!p.pending || !p.pending_n) goto oom;
    }
    /* plan in the converter's order */
    uint32_t ftype_fmt = FMT_F16;
    bool typed = false;
    for (int i = 0; i < p.n_parts; i++)
        for (int k = 0; k < st_n_tensors(p.parts[i]); k++) {
            const StTensor *t = st_tensor(p.parts[i], k);
            char cname[512];
            if (!canonical_name(t->name, &p.hp, o->no_mtp, cname, sizeof cname)) continue;
            if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16) {
                err_set(err, "%s: dtype %s (deltallm converts F32, F16 and BF16 checkpoints)", t->name, st_dtype_name(t->dtype));
                goto done;
            }
            if (!typed && t->n_dims >= 2 && t->dtype != ST_F32) ftype_fmt = t->dtype == ST_BF16 ? FMT_BF16 : FMT_F16, typed = true;
            int bid = -1, x = -1;
            if (p.hp.n_expert && sscanf(cname, "model.layers.%d.mlp.experts.%d.", &bid, &x) == 2) {
                if (plan_expert(&p, cname, t, err)) goto done;
            } else if (plan_tensor(&p, cname, t, NULL, 0, err)) {
                goto done;
            }
        }
    for (int b = 0; p.pending_n && b < blocks; b++)
        if (p.pending_n[b] && p.pending_n[b] < 3 * p.hp.n_expert) {
            err_set(err, "layer %d: %d of %d expert tensors present", b, p.pending_n[b], 3 * p.hp.n_expert);
            goto done;
        }
    static const uint32_t FT[] = {[HF_OUT_F32] = FMT_F32, [HF_OUT_F16] = FMT_F16, [HF_OUT_BF16] = FMT_BF16, [HF_OUT_Q8_0] = FMT_Q8_0};
    if (o->type != HF_OUT_AUTO) ftype_fmt = FT[o->type];
    const uint32_t file_type = ftype_fmt == FMT_F32 ? 0 : ftype_fmt == FMT_F16 ? 1 : ftype_fmt == FMT_Q8_0 ? 7 : 32;
    /* gguf-py's parameter count: experts counted once per expert, the label "NxSIZE" for MoE */
    uint64_t n_params = 0, shared = 0, per_expert = 0, expert_sum = 0, n_exp_t = 0;
    for (int i = 0; i < p.n_out; i++) {
        p.outs[i].type = out_type(&p.outs[i], ftype_fmt);
        uint64_t ne = 1;
        for (int d = 0; d < p.outs[i].n_dims; d++) ne *= (uint64_t)p.outs[i].ne[d];
        n_params += ne;
        if (strstr(p.outs[i].name, "_exps.") && p.outs[i].n_dims >= 3) {
            const uint64_t cnt = (uint64_t)p.outs[i].ne[2];
            per_expert += ne / cnt, expert_sum += cnt, n_exp_t++;
        } else {
            shared += ne;
        }
        if (p.outs[i].ne[0] % format_get(p.outs[i].type)->block) {
            err_set(err, "%s: row of %lld elements", p.outs[i].name, (long long)p.outs[i].ne[0]);
            goto done;
        }
    }
    if (!(w = gguf_writer_new(32))) goto oom;
    const char *slash = strrchr(o->dir, '/');
    char dname[256];
    snprintf(dname, sizeof dname, "%s", slash && slash[1] ? slash + 1 : o->dir);
    if (!o->name && slash && !slash[1]) { /* trailing slash */
        int len = (int)(slash - o->dir);
        const char *s2 = len > 0 ? memrchr(o->dir, '/', (size_t)len) : NULL;
        snprintf(dname, sizeof dname, "%.*s", (int)(len - (s2 ? s2 + 1 - o->dir : 0)), s2 ? s2 + 1 : o->dir);
    }
    char title[256], label[48], sz[32];
    id_to_title(dname, title, sizeof title);
    if (n_exp_t) {
        size_label(shared + per_expert, sz, sizeof sz);
        snprintf(label, sizeof label, "%llux%s", (unsigned long long)(expert_sum / n_exp_t), sz);
    } else {
        size_label(n_params, label, sizeof label);
    }
    if (write_metadata(w, &p, cfg, file_type, label, o->name ? o->name : title, err)) goto done;
    FillCtx fc = {&p};
    for (int i = 0; i < p.n_out; i++)
        if (gguf_w_tensor(w, p.outs[i].name, p.outs[i].type, p.outs[i].n_dims, p.outs[i].ne, NULL, fill, &fc, err)) goto done;
    if (gguf_writer_write_file(w, o->out, err)) goto done;
    rc = 0;
    goto done;
oom:
    err_set(err, "out of memory");
done:
    gguf_writer_free(w);
    for (int i = 0; i < p.n_out; i++) free(p.outs[i].src);
    free(p.outs);
    for (int i = 0; p.parts && i < p.n_parts; i++) st_close(p.parts[i]);
    free(p.parts);
    for (int i = 0; part_names && i < p.n_parts; i++) free(part_names[i]);
    free(part_names);
    free(p.pending);
    free(p.pending_n);
    cJSON_Delete(cfg);
    return rc;
}
