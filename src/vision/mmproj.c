/* mmproj.c — opens and validates a qwen3vl_merger mmproj file (mmproj.h). Every key and tensor the encoder
 * reads is checked here, once: presence, type, shape against the hyperparameters; a file that passes can be
 * run without further checks. Refusals are one line naming the key or tensor. */
#include "vision/mmproj.h"

#include "gguf/format.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_TOKENS_MIN 8    /* llama.cpp's image token limits for this projector (clip.cpp, set_limit_image_tokens) */
#define N_TOKENS_MAX 4096

bool mmproj_is_clip(const Gguf *g) {
    const GgufValue *v = gguf_get(g, "general.architecture");
    return v && v->type == GGUF_TYPE_STRING && gguf_str_eq(v->s, "clip");
}

static float *own(Mmproj *m, size_t n) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **p = realloc(m->owned, sizeof *p * (size_t)cap);
        if (!p) return NULL;
        m->owned = p, m->cap_owned = cap;
    }
    float *f = malloc(sizeof(float) * (n ? n : 1));
    if (f) m->owned[m->n_owned++] = f;
    return f;
}

/* a tensor that must (or may) be there, with n_dims dims ne[0..] (checked where ne[i] > 0) */
static int tensor(const Gguf *g, const char *name, bool required, int n_dims, int64_t ne0, int64_t ne1, int64_t ne2,
                  int64_t ne3, const GgufTensor **out, Err *err) {
    const GgufTensor *t = gguf_find_tensor(g, name);
    *out = t;
    if (!t) return required ? err_set(err, "mmproj: tensor '%s' is missing", name) : 0;
    const int64_t want[4] = {ne0, ne1, ne2, ne3};
    bool ok = true;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        const int64_t have = i < t->n_dims ? t->ne[i] : 1;
        if (i < n_dims ? want[i] > 0 && have != want[i] : have != 1) ok = false;
    }
    if (!ok) {
        return err_set(err, "mmproj: tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                            "], expected [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]",
                       name, t->ne[0], t->n_dims > 1 ? t->ne[1] : 1, t->n_dims > 2 ? t->ne[2] : 1,
                       t->n_dims > 3 ? t->ne[3] : 1, ne0, n_dims > 1 ? ne1 : 1, n_dims > 2 ? ne2 : 1, n_dims > 3 ? ne3 : 1);
    }
    return 1;
}

/* a vector of n floats, widened to F32 */
static int vec(Mmproj *m, const char *name, bool required, int64_t n, const float **out, Err *err) {
    const GgufTensor *t;
    *out = NULL;
    int rc = tensor(m->g, name, required, 1, n, 0, 0, 0, &t, err);
    if (rc <= 0) return rc;
    if (!format_is_float(t->type))
        return err_set(err, "mmproj: tensor '%s' is %s; vectors must be f32, f16 or bf16", name, format_name(t->type));
    float *f = own(m, (size_t)n);
    if (!f) return err_set(err, "mmproj: out of memory");
    format_get(t->type)->to_float(t->data, f, n);
    *out = f;
    return 1;
}

static int mat_from(const GgufTensor *t, int64_t cols, int64_t rows, MatW *w, Err *err) {
    const Format *f = format_get(t->type);
    if (!f || !f->weight || !f->to_float)
        return err_set(err, "mmproj: tensor '%s' has weight format %s, which deltallm does not run", t->name,
                       format_name(t->type));
    if (cols % f->block)
        return err_set(err, "mmproj: tensor '%s': %" PRId64 " columns are not whole %s blocks", t->name, cols, f->name);
    *w = (MatW){.data = t->data, .type = t->type, .cols = cols, .rows = rows, .row_bytes = format_row_bytes(f, cols)};
    return 0;
}

static int mat(Mmproj *m, const char *name, bool required, int64_t in, int64_t out, MatW *w, Err *err) {
    const GgufTensor *t;
    int rc = tensor(m->g, name, required, 2, in, out, 0, 0, &t, err);
    if (rc <= 0) return rc;
    return mat_from(t, in, out, w, err) ? -1 : 1;
}

static int get_pos_u32(const Gguf *g, const char *key, uint32_t lo, uint32_t hi, bool required, int *out, Err *err) {
    uint32_t v = 0;
    int rc = gguf_get_u32(g, key, &v, required, err);
    if (rc <= 0) return rc ? err_set(err, "mmproj: %s", err->msg) : 0;
    if (v < lo || v > hi) return err_set(err, "mmproj: %s = %u is out of range [%u, %u]", key, v, lo, hi);
    *out = (int)v;
    return 1;
}

static int read_keys(Mmproj *m, Err *err) {
    const Gguf *g = m->g;
    GgufStr s;
    int rc = gguf_get_str(g, "clip.projector_type", &s, false, err);
    if (rc == 0) rc = gguf_get_str(g, "clip.vision.projector_type", &s, false, err);
    if (rc < 0) return err_set(err, "mmproj: %s", err->msg);
    if (rc == 0) return err_set(err, "mmproj: no clip.projector_type (not a multimodal projector file?)");
    gguf_str_copy(s, m->proj_type, sizeof m->proj_type);
    if (!gguf_str_eq(s, "qwen3vl_merger"))
        return err_set(err, "mmproj: projector type '%s' is not supported (deltallm runs qwen3vl_merger: Qwen3-VL, Qwen3.5)",
                       m->proj_type);
    bool has_vision = true;
    if (gguf_get_bool(g, "clip.has_vision_encoder", &has_vision, false, err) < 0) return err_set(err, "mmproj: %s", err->msg);
    if (!has_vision) return err_set(err, "mmproj: clip.has_vision_encoder is false: the file has no vision tower");
    if (get_pos_u32(g, "clip.vision.embedding_length", 4, 16384, true, &m->n_embd, err) < 0) return -1;
    if (get_pos_u32(g, "clip.vision.feed_forward_length", 1, 65536, true, &m->n_ff, err) < 0) return -1;
    if (get_pos_u32(g, "clip.vision.block_count", 1, 256, true, &m->n_layer, err) < 0) return -1;
    if (get_pos_u32(g, "clip.vision.projection_dim", 1, 65536, true, &m->proj_dim, err) < 0) return -1;
    if (get_pos_u32(g, "clip.vision.attention.head_count", 1, 1024, true, &m->n_head, err) < 0) return -1;
    if (get_pos_u32(g, "clip.vision.image_size", 1, 16384, true, &m->image_size, err) < 0) return -1;
    if (get_pos_u32(g, "clip.vision.patch_size", 1, 64, true, &m->patch_size, err) < 0) return -1;
    m->n_merge = 2;
    if (get_pos_u32(g, "clip.vision.spatial_merge_size", 1, 8, false, &m->n_merge, err) < 0) return -1;
    if (m->n_merge != 2)
        return err_set(err, "mmproj: clip.vision.spatial_merge_size = %d; the qwen3vl_merger graph merges 2×2", m->n_merge);
    if (m->n_embd % m->n_head)
        return err_set(err, "mmproj: embedding_length %d is not a multiple of head_count %d", m->n_embd, m->n_head);
    m->d_head = m->n_embd / m->n_head;
    if (m->d_head % 4)
        return err_set(err, "mmproj: head size %d is not a multiple of 4 (the 2-D rotary positions split it in quarters)",
                       m->d_head);
    m->eps = 1e-6f;
    if (gguf_get_f32(g, "clip.vision.attention.layer_norm_epsilon", &m->eps, true, err) < 0)
        return err_set(err, "mmproj: %s", err->msg);
    if (!(m->eps > 0 && m->eps < 1))
        return err_set(err, "mmproj: clip.vision.attention.layer_norm_epsilon %g is out of range", m->eps);
    m->use_gelu = false;
    if (gguf_get_bool(g, "clip.use_gelu", &m->use_gelu, false, err) < 0) return err_set(err, "mmproj: %s", err->msg);
    bool use_silu = false;
    if (gguf_get_bool(g, "clip.use_silu", &use_silu, false, err) < 0) return err_set(err, "mmproj: %s", err->msg);
    if (!m->use_gelu || use_silu)
        return err_set(err, "mmproj: the qwen3vl_merger tower's MLP is GELU: clip.use_gelu must be true (and use_silu false)");
    const char *names[2] = {"clip.vision.image_mean", "clip.vision.image_std"};
    float *dst[2] = {m->mean, m->std};
    for (int k = 0; k < 2; k++) {
        const GgufArray *a;
        if (gguf_get_arr(g, names[k], &a, true, err) < 0) return err_set(err, "mmproj: %s", err->msg);
        if (a->n != 3 || (a->type != GGUF_TYPE_F32 && a->type != GGUF_TYPE_F64))
            return err_set(err, "mmproj: %s must be 3 floats", names[k]);
        for (int i = 0; i < 3; i++) {
            dst[k][i] = (float)gguf_arr_f64(a, (uint64_t)i);
            if (!isfinite(dst[k][i]) || (k == 1 && !(dst[k][i] > 0)))
                return err_set(err, "mmproj: %s[%d] = %g is out of range", names[k], i, dst[k][i]);
        }
    }
    const long area = (long)m->patch_size * m->patch_size * m->n_merge * m->n_merge;
    m->min_pixels = N_TOKENS_MIN * area;
    m->max_pixels = N_TOKENS_MAX * area;
    return 0;
}

static int read_tensors(Mmproj *m, Err *err) {
    const Gguf *g = m->g;
    const int64_t E = m->n_embd, F = m->n_ff, P = m->proj_dim, p = m->patch_size;
    const GgufTensor *t;
    char name[GGUF_MAX_NAME];
    /* patch embedding: ggml's conv kernel [p, p, 3, E] (the 3-D conv's two time slices as two tensors) */
    const char *pn[2] = {"v.patch_embd.weight", "v.patch_embd.weight.1"};
    MatW *pw[2] = {&m->patch0, &m->patch1};
    for (int k = 0; k < 2; k++) {
        if (tensor(g, pn[k], true, 4, p, p, 3, E, &t, err) < 0) return -1;
        if (mat_from(t, 3 * p * p, E, pw[k], err)) return -1;
    }
    if (vec(m, "v.patch_embd.bias", true, E, &m->patch_b, err) < 0) return -1;
    /* the learned absolute positions: a square grid */
    if (tensor(g, "v.position_embd.weight", true, 2, E, 0, 0, 0, &t, err) < 0) return -1;
    const int64_t n_pos = t->n_dims > 1 ? t->ne[1] : 1;
    const int side = (int)llround(sqrt((double)n_pos));
    if ((int64_t)side * side != n_pos || side < 1)
        return err_set(err, "mmproj: v.position_embd.weight has %" PRId64 " positions, not a square grid", n_pos);
    m->n_pos_side = side;
    if (tensor(g, "v.position_embd.weight", true, 2, E, n_pos, 0, 0, &t, err) < 0) return -1;
    if (!format_is_float(t->type))
        return err_set(err, "mmproj: tensor 'v.position_embd.weight' is %s; expected f32, f16 or bf16", format_name(t->type));
    float *pe = own(m, (size_t)(E * n_pos));
    if (!pe) return err_set(err, "mmproj: out of memory");
    format_get(t->type)->to_float(t->data, pe, E * n_pos);
    m->pos_embd = pe;
    if (gguf_find_tensor(g, "v.pre_ln.weight") || gguf_find_tensor(g, "v.class_embd"))
        return err_set(err, "mmproj: the file has v.pre_ln / v.class_embd, which the qwen3vl_merger graph does not have");
    if (vec(m, "v.post_ln.weight", true, E, &m->post_ln_w, err) < 0) return -1;
    if (vec(m, "v.post_ln.bias", true, E, &m->post_ln_b, err) < 0) return -1;
    if (mat(m, "mm.0.weight", true, 4 * E, 4 * E, &m->mm0, err) < 0) return -1;
    if (vec(m, "mm.0.bias", true, 4 * E, &m->mm0_b, err) < 0) return -1;
    if (mat(m, "mm.2.weight", true, 4 * E, P, &m->mm2, err) < 0) return -1;
    if (vec(m, "mm.2.bias", true, P, &m->mm2_b, err) < 0) return -1;
    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) return err_set(err, "mmproj: out of memory");
    for (int il = 0; il < m->n_layer; il++) {
        VisionLayer *L = &m->layers[il];
#define NAME(fmt) (snprintf(name, sizeof name, fmt, il), name)
        if (mat(m, NAME("v.blk.%d.attn_qkv.weight"), true, E, 3 * E, &L->qkv, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.attn_qkv.bias"), true, 3 * E, &L->qkv_b, err) < 0) return -1;
        if (mat(m, NAME("v.blk.%d.attn_out.weight"), true, E, E, &L->out, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.attn_out.bias"), true, E, &L->out_b, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.ln1.weight"), true, E, &L->ln1_w, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.ln1.bias"), true, E, &L->ln1_b, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.ln2.weight"), true, E, &L->ln2_w, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.ln2.bias"), true, E, &L->ln2_b, err) < 0) return -1;
        if (mat(m, NAME("v.blk.%d.ffn_up.weight"), true, E, F, &L->up, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.ffn_up.bias"), true, F, &L->up_b, err) < 0) return -1;
        if (mat(m, NAME("v.blk.%d.ffn_down.weight"), true, F, E, &L->down, err) < 0) return -1;
        if (vec(m, NAME("v.blk.%d.ffn_down.bias"), true, E, &L->down_b, err) < 0) return -1;
        if (gguf_find_tensor(g, NAME("v.blk.%d.ffn_gate.weight")))
            return err_set(err, "mmproj: tensor '%s': the qwen3vl_merger MLP has no gate", name);
        if (gguf_find_tensor(g, NAME("v.blk.%d.attn_q.weight")))
            return err_set(err, "mmproj: tensor '%s': the qwen3vl_merger tower keeps q, k, v in one attn_qkv", name);
        /* deepstack: all six tensors or none */
        int n = 0;
        n += vec(m, NAME("v.deepstack.%d.norm.weight"), false, 4 * E, &L->ds_norm_w, err) < 0 ? -100 : !!L->ds_norm_w;
        n += vec(m, NAME("v.deepstack.%d.norm.bias"), false, 4 * E, &L->ds_norm_b, err) < 0 ? -100 : !!L->ds_norm_b;
        int r1 = mat(m, NAME("v.deepstack.%d.fc1.weight"), false, 4 * E, 4 * E, &L->ds_fc1, err);
        n += r1 < 0 ? -100 : r1;
        n += vec(m, NAME("v.deepstack.%d.fc1.bias"), false, 4 * E, &L->ds_fc1_b, err) < 0 ? -100 : !!L->ds_fc1_b;
        int r2 = mat(m, NAME("v.deepstack.%d.fc2.weight"), false, 4 * E, P, &L->ds_fc2, err);
        n += r2 < 0 ? -100 : r2;
        n += vec(m, NAME("v.deepstack.%d.fc2.bias"), false, P, &L->ds_fc2_b, err) < 0 ? -100 : !!L->ds_fc2_b;
        if (n < 0) return -1;
        if (n != 0 && n != 6)
            return err_set(err, "mmproj: deepstack layer %d has %d of its 6 tensors (norm, fc1, fc2 weights and biases)",
                           il, n);
        L->deepstack = n == 6;
        m->n_deepstack += L->deepstack;
#undef NAME
    }
    /* clip.vision.is_deepstack_layers, where written, must agree with the tensors */
    const GgufArray *a;
    int rc = gguf_get_arr(g, "clip.vision.is_deepstack_layers", &a, false, err);
    if (rc < 0) return err_set(err, "mmproj: %s", err->msg);
    if (rc > 0) {
        if (a->type != GGUF_TYPE_BOOL || a->n != (uint64_t)m->n_layer)
            return err_set(err, "mmproj: clip.vision.is_deepstack_layers must be %d bools", m->n_layer);
        for (int il = 0; il < m->n_layer; il++)
            if ((gguf_arr_i64(a, (uint64_t)il) != 0) != m->layers[il].deepstack)
                return err_set(err, "mmproj: clip.vision.is_deepstack_layers[%d] disagrees with the v.deepstack.%d tensors",
                               il, il);
    }
    return 0;
}

Mmproj *mmproj_from_gguf(Gguf *g, Err *err) {
    Mmproj *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(g);
        err_set(err, "mmproj: out of memory");
        return NULL;
    }
    m->g = g;
    if (!mmproj_is_clip(g)) {
        err_set(err, "mmproj: general.architecture is not 'clip' (is this a text model rather than its mmproj file?)");
        mmproj_close(m);
        return NULL;
    }
    if (read_keys(m, err) || read_tensors(m, err)) {
        mmproj_close(m);
        return NULL;
    }
    return m;
}

Mmproj *mmproj_open(const char *path, Err *err) {
    Gguf *g = gguf_open(path, err);
    if (!g) return NULL;
    Mmproj *m = mmproj_from_gguf(g, err);
    if (!m) err_prefix(err, "%s", path);
    return m;
}

void mmproj_close(Mmproj *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    gguf_close(m->g);
    free(m);
}

int mmproj_out_width(const Mmproj *m) { return m->proj_dim * (1 + m->n_deepstack); }

void mmproj_print(FILE *f, const Mmproj *m) {
    fprintf(f, "\n== vision projector (%s) ==\n", m->proj_type);
    fprintf(f, "  tower: %d blocks, width %d, %d heads of %d, MLP %d (GELU), layer-norm eps %g\n", m->n_layer, m->n_embd,
            m->n_head, m->d_head, m->n_ff, m->eps);
    fprintf(f, "  patches: %d×%d pixels, merged %d×%d into one token; position grid %d×%d (learned, resized)\n",
            m->patch_size, m->patch_size, m->n_merge, m->n_merge, m->n_pos_side, m->n_pos_side);
    fprintf(f, "  image: size %d, pixel budget [%ld, %ld] (%d to %d tokens), mean [%g, %g, %g], std [%g, %g, %g]\n",
            m->image_size, m->min_pixels, m->max_pixels, N_TOKENS_MIN, N_TOKENS_MAX, m->mean[0], m->mean[1], m->mean[2],
            m->std[0], m->std[1], m->std[2]);
    fprintf(f, "  output: %d per image token (projection %d", mmproj_out_width(m), m->proj_dim);
    if (m->n_deepstack) {
        fprintf(f, " + %d deepstack layers:", m->n_deepstack);
        for (int il = 0; il < m->n_layer; il++)
            if (m->layers[il].deepstack) fprintf(f, " %d", il);
    }
    fprintf(f, "); weights %s (patch %s)\n", format_name(m->layers[0].qkv.type), format_name(m->patch0.type));
}
