/* quantize.c — requantization with llama-quantize's type mixes (see quantize.h). */
#include "quantize/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/pool.h"
#include "gguf/format.h"
#include "gguf/gguf_writer.h"
#include "quantize/quant_ggml.h"

static const QuantFtype FTYPES[] = {
    {"F32", 0, FMT_F32},       {"F16", 1, FMT_F16},       {"BF16", 32, FMT_BF16},    {"Q4_0", 2, FMT_Q4_0},
    {"Q4_1", 3, FMT_Q4_1},     {"Q5_0", 8, FMT_Q5_0},     {"Q5_1", 9, FMT_Q5_1},     {"Q8_0", 7, FMT_Q8_0},
    {"Q2_K", 10, FMT_Q2_K},    {"Q3_K_S", 11, FMT_Q3_K},  {"Q3_K_M", 12, FMT_Q3_K},  {"Q3_K_L", 13, FMT_Q3_K},
    {"Q4_K_S", 14, FMT_Q4_K},  {"Q4_K_M", 15, FMT_Q4_K},  {"Q5_K_S", 16, FMT_Q5_K},  {"Q5_K_M", 17, FMT_Q5_K},
    {"Q6_K", 18, FMT_Q6_K},    {"IQ4_NL", 25, FMT_IQ4_NL}, {"IQ4_XS", 30, FMT_IQ4_XS},
};
enum { F_Q2_K = 10, F_Q3_K_M = 12, F_Q3_K_L = 13, F_Q4_K_S = 14, F_Q4_K_M = 15, F_Q5_K_M = 17, F_IQ4_NL = 25, F_IQ4_XS = 30,
       F_Q3_K_S = 11 };

const QuantFtype *quant_ftype_find(const char *name) {
    for (size_t i = 0; i < sizeof FTYPES / sizeof *FTYPES; i++)
        if (!strcasecmp(name, FTYPES[i].name)) return &FTYPES[i];
    return NULL;
}

const char *quant_ftype_names(void) {
    return "F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS";
}

typedef enum { C_OUTPUT, C_TOKEN_EMBD, C_ATTN_QKV, C_ATTN_V, C_ATTN_K, C_ATTN_Q, C_ATTN_OUTPUT, C_FFN_UP, C_FFN_GATE,
               C_FFN_DOWN, C_OTHER } Category;

static Category category(const char *n) {
    if (!strcmp(n, "output.weight")) return C_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight")) return C_TOKEN_EMBD;
    if (strstr(n, "attn_qkv.weight")) return C_ATTN_QKV;
    if (strstr(n, "attn_v.weight")) return C_ATTN_V;
    if (strstr(n, "attn_k.weight")) return C_ATTN_K;
    if (strstr(n, "attn_q.weight")) return C_ATTN_Q;
    if (strstr(n, "attn_output.weight")) return C_ATTN_OUTPUT;
    if (strstr(n, "ffn_up")) return C_FFN_UP;
    if (strstr(n, "ffn_gate")) return C_FFN_GATE;
    if (strstr(n, "ffn_down")) return C_FFN_DOWN;
    return C_OTHER;
}

static bool allows_quantization(const GgufTensor *t, bool leave_output) {
    if (t->n_dims < 2) return false;
    size_t n = strlen(t->name);
    return n >= 6 && !strcmp(t->name + n - 6, "weight") && !strstr(t->name, "_norm.weight") &&
           !(leave_output && !strcmp(t->name, "output.weight")) && !strstr(t->name, "ffn_gate_inp.weight") &&
           !strstr(t->name, "ssm_conv1d");
}

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static bool is_quantized(uint32_t t) { return t != FMT_F32 && t != FMT_F16 && t != FMT_BF16; }

/* the loader's order: by layer (non-block tensors first), then by name */
static const Gguf *sort_g;
static int layer_of(const char *n) {
    int l = -1;
    sscanf(n, "blk.%d.", &l);
    return l;
}
static int cmp_order(const void *a, const void *b) {
    const GgufTensor *x = gguf_tensor(sort_g, *(const int64_t *)a), *y = gguf_tensor(sort_g, *(const int64_t *)b);
    int lx = layer_of(x->name), ly = layer_of(y->name);
    return lx != ly ? (lx < ly ? -1 : 1) : strcmp(x->name, y->name);
}

typedef struct Mix {
    const QuantFtype *ft;
    int n_attention_wv, i_attention_wv, i_ffn_down, n_layer_all, n_expert, n_gqa;
    bool tied;
} Mix;

static uint32_t fallback(uint32_t want, int64_t ncols) {
    const Format *f = format_get(want);
    if (ncols % f->block == 0) return want;
    uint32_t r = want;
    switch (want) {
    case FMT_IQ4_XS: r = FMT_IQ4_NL; break;
    case FMT_Q2_K: case FMT_Q3_K: r = FMT_Q4_0; break;
    case FMT_Q4_K: r = FMT_Q5_0; break;
    case FMT_Q5_K: r = FMT_Q5_1; break;
    case FMT_Q6_K: r = FMT_Q8_0; break;
    default: break;
    }
    return ncols % format_get(r)->block ? FMT_F16 : r;
}

static int pick_type(Mix *m, const GgufTensor *t, uint32_t *out, Err *err) {
    const int ft = m->ft->id;
    uint32_t nt = m->ft->base;
    if (!is_quantized(nt)) return *out = nt, 0;
    const Category c = category(t->name);
    if (c == C_OUTPUT || (m->tied && c == C_TOKEN_EMBD)) {
        if (t->ne[0] % format_get(nt)->block) nt = FMT_Q8_0;
        else if (nt != FMT_Q8_0) nt = FMT_Q6_K;
    } else if (c == C_TOKEN_EMBD) {
        /* untied embedding: the default type for every file type written here */
    } else if (c == C_ATTN_V || c == C_ATTN_QKV) {
        if (ft == F_Q2_K) nt = m->n_gqa >= 4 ? FMT_Q4_K : FMT_Q3_K;
        else if (ft == F_Q3_K_M) nt = m->i_attention_wv < 2 ? FMT_Q5_K : FMT_Q4_K;
        else if (ft == F_Q3_K_L) nt = FMT_Q5_K;
        else if ((ft == F_IQ4_NL || ft == F_IQ4_XS) && m->n_gqa >= 4) nt = FMT_Q5_K;
        else if ((ft == F_Q4_K_M || ft == F_Q5_K_M) && use_more_bits(m->i_attention_wv, m->n_attention_wv)) nt = FMT_Q6_K;
        else if (ft == F_Q4_K_S && m->i_attention_wv < 4) nt = FMT_Q5_K;
        if (m->n_expert == 8) nt = FMT_Q8_0;
        m->i_attention_wv++;
    } else if (c == C_ATTN_K) {
        if (m->n_expert == 8) nt = FMT_Q8_0;
    } else if (c == C_FFN_DOWN) {
        int il = m->i_ffn_down, nl = m->n_layer_all;
        if (m->n_expert > 1) {
            il = layer_of(t->name);
            if (il < 0 || il >= nl) return err_set(err, "%s: cannot tell its layer (of %d)", t->name, nl);
        }
        if (ft == F_Q2_K) nt = FMT_Q3_K;
        else if (ft == F_Q3_K_M) nt = il < nl / 16 ? FMT_Q5_K : FMT_Q4_K;
        else if (ft == F_Q3_K_L) nt = FMT_Q5_K;
        else if (ft == F_Q4_K_M) {
            if (use_more_bits(il, nl)) nt = FMT_Q6_K;
        } else if (il < nl / 8 && (ft == F_IQ4_NL || ft == F_IQ4_XS)) nt = FMT_Q5_K;
        else if (ft == F_Q5_K_M && use_more_bits(il, nl)) nt = FMT_Q6_K;
        else if (ft == F_Q4_K_S && il < nl / 8) nt = FMT_Q5_K;
        m->i_ffn_down++;
    } else if (c == C_ATTN_OUTPUT) {
        if (m->n_expert == 8) {
            if (ft == F_Q2_K || ft == F_Q3_K_S || ft == F_Q3_K_M || ft == F_IQ4_NL || ft == F_Q4_K_S || ft == F_Q4_K_M || ft == F_IQ4_XS)
                nt = FMT_Q5_K;
        } else if (ft == F_Q2_K) nt = FMT_Q3_K;
        else if (ft == F_Q3_K_M) nt = FMT_Q4_K;
        else if (ft == F_Q3_K_L) nt = FMT_Q5_K;
    }
    *out = fallback(nt, t->ne[0]);
    return 0;
}

static int arch_u32(const Gguf *g, const char *arch, const char *key, uint32_t *v, bool req, Err *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return gguf_get_u32(g, k, v, req, err);
}

int quant_plan(const Gguf *g, const QuantizeOpts *o, int64_t *order, uint32_t *types, Err *err) {
    const int64_t n = gguf_n_tensors(g);
    for (int64_t i = 0; i < n; i++) order[i] = i;
    sort_g = g;
    qsort(order, (size_t)n, sizeof *order, cmp_order);
    GgufStr arch_s;
    char arch[64];
    if (gguf_get_str(g, "general.architecture", &arch_s, true, err) < 0) return -1;
    gguf_str_copy(arch_s, arch, sizeof arch);
    if (strcmp(arch, "qwen35") && strcmp(arch, "qwen35moe") && strcmp(arch, "qwen3next"))
        return err_set(err, "architecture %s: deltallm quantizes qwen35, qwen35moe and qwen3next models", arch);
    if (n == 0) return err_set(err, "no tensors to quantize (a vocabulary-only file?)");
    Mix m = {.ft = o->ftype, .tied = true};
    uint32_t blocks = 0, ne = 0, h = 1, hkv = 1;
    if (arch_u32(g, arch, "block_count", &blocks, true, err) < 0 || arch_u32(g, arch, "expert_count", &ne, false, err) < 0 ||
        arch_u32(g, arch, "attention.head_count", &h, false, err) < 0 || arch_u32(g, arch, "attention.head_count_kv", &hkv, false, err) < 0)
        return -1;
    m.n_layer_all = (int)blocks, m.n_expert = (int)ne, m.n_gqa = hkv ? (int)(h / hkv) : 0;
    for (int64_t i = 0; i < n; i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        Category c = category(t->name);
        if (c == C_ATTN_V || c == C_ATTN_QKV) m.n_attention_wv++;
        if (c == C_OUTPUT) m.tied = false;
    }
    for (int64_t k = 0; k < n; k++) {
        const GgufTensor *t = gguf_tensor(g, order[k]);
        if (!allows_quantization(t, o->leave_output)) {
            types[k] = t->type;
            continue;
        }
        if (pick_type(&m, t, &types[k], err)) return -1;
        if (!qg_quantizer(types[k])) return err_set(err, "%s: deltallm cannot write %s", t->name, format_name(types[k]));
        if (!format_get(t->type) || !format_get(t->type)->to_float)
            return err_set(err, "%s: cannot read its type %s", t->name, format_name(t->type));
    }
    return 0;
}

typedef struct Job {
    const QuantizeOpts *o;
    const Gguf *g;
    const int64_t *order;
    const uint32_t *types;
    int64_t next;
    Pool *pool;
} Job;

typedef struct RowTask {
    const GgufTensor *t;
    uint32_t type;
    uint8_t *dst;
    int64_t rows;
    volatile int failed; /* a worker could not allocate its row buffer */
} RowTask;

static void quantize_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const RowTask *rt = ctx;
    const Format *src = format_get(rt->t->type), *dst = format_get(rt->type);
    const int64_t ncol = rt->t->ne[0];
    const size_t sb = format_row_bytes(src, ncol), db = format_row_bytes(dst, ncol);
    float *row = malloc((size_t)ncol * sizeof *row);
    RowTask *task = ctx;
    if (!row) {
        task->failed = 1;
        return;
    }
    FormatFromFloat q = qg_quantizer(rt->type);
    for (int64_t r = r0; r < r1; r++) {
        src->to_float((const uint8_t *)rt->t->data + (size_t)r * sb, row, ncol);
        q(row, rt->dst + (size_t)r * db, ncol);
    }
    free(row);
}

static int fill(void *ctx, const char *name, void *dst, size_t nbytes, Err *err) {
    Job *j = ctx;
    const int64_t k = j->next++;
    const GgufTensor *t = gguf_tensor(j->g, j->order[k]);
    const uint32_t type = j->types[k];
    if (type == t->type) {
        memcpy(dst, t->data, nbytes);
    } else {
        RowTask rt = {t, type, dst, (int64_t)(t->n_elements / (uint64_t)t->ne[0]), 0};
        pool_for(j->pool, rt.rows, 16, quantize_rows, &rt);
        if (rt.failed) return err_set(err, "%s: out of memory", name);
    }
    if (j->o->progress) j->o->progress(j->o->progress_ctx, (int)k + 1, (int)gguf_n_tensors(j->g), name, type);
    return 0;
}

int gguf_quantize(const QuantizeOpts *o, Err *err) {
    int rc = -1;
    Gguf *g = gguf_open(o->in, err);
    if (!g) return -1;
    const int64_t n = gguf_n_tensors(g);
    int64_t *order = calloc((size_t)n + 1, sizeof *order);
    uint32_t *types = calloc((size_t)n + 1, sizeof *types);
    GgufWriter *w = NULL;
    Job job = {.o = o, .g = g, .order = order, .types = types};
    if (!order || !types) {
        err_set(err, "out of memory");
        goto done;
    }
    if (quant_plan(g, o, order, types, err)) goto done;
    if (!(w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT)) ) {
        err_set(err, "out of memory");
        goto done;
    }
    static const char *const skip[] = {"general.quantization_version", "general.file_type", "split.", "general.alignment"};
    if (gguf_w_copy_kv(w, g, skip, 4) || gguf_w_u32(w, "general.quantization_version", 2) ||
        gguf_w_u32(w, "general.file_type", (uint32_t)o->ftype->id)) {
        err_set(err, "out of memory copying metadata");
        goto done;
    }
    for (int64_t k = 0; k < n; k++) {
        const GgufTensor *t = gguf_tensor(g, order[k]);
        if (gguf_w_tensor(w, t->name, types[k], t->n_dims, t->ne, NULL, fill, &job, err)) goto done;
    }
    job.pool = pool_create(o->n_threads > 0 ? o->n_threads : pool_default_threads(), err);
    if (!job.pool) goto done;
    if (gguf_writer_write_file(w, o->out, err)) goto done;
    rc = 0;
done:
    if (job.pool) pool_destroy(job.pool);
    gguf_writer_free(w);
    free(order);
    free(types);
    gguf_close(g);
    return rc;
}
