/* mmproj_synth.c — writes synthetic qwen3vl_merger mmproj files (mmproj_synth.h) with deltallm's GGUF writer.
 * Values: matrices N(0, 1/fan_in), norm weights 1 ± 0.05, biases N(0, 0.05²), position table N(0, 0.25²);
 * each tensor's values come from a generator seeded by the spec's seed and the tensor's name, so a file is
 * the same whatever the order or the machine. */
#include "vision/mmproj_synth.h"
#include "base/splitmix.h"

#include "gguf/format.h"
#include "gguf/gguf_writer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { V_MATRIX, V_NORM, V_BIAS, V_POS };

typedef struct TGen {
    int kind;
    float scale;
    int64_t row;
    uint32_t type;
} TGen;

typedef struct SGen {
    const MmprojSpec *sp;
    TGen *t;
    int n, cap, next;
    float *rowbuf;
    int64_t rowcap;
} SGen;

static float gauss(uint64_t *s) { return splitmix_gauss(s); }

static int fill(void *ctx, const char *name, void *dst, size_t nbytes, Err *err) {
    SGen *g = ctx;
    if (g->next >= g->n) return err_set(err, "internal: more tensors written than generated");
    const TGen *tg = &g->t[g->next++];
    const Format *f = format_get(tg->type);
    uint64_t s = (g->sp->seed + 0x5EED) * 0x100000001B3ull;
    for (const char *p = name; *p; p++) s = (s ^ (uint8_t)*p) * 0x100000001B3ull;
    if (tg->row > g->rowcap) {
        free(g->rowbuf);
        g->rowbuf = malloc(sizeof(float) * (size_t)tg->row);
        g->rowcap = g->rowbuf ? tg->row : 0;
        if (!g->rowbuf) return err_set(err, "out of memory generating '%s'", name);
    }
    const size_t rb = format_row_bytes(f, tg->row);
    for (size_t off = 0; off + rb <= nbytes; off += rb) {
        for (int64_t i = 0; i < tg->row; i++) {
            const float z = gauss(&s);
            g->rowbuf[i] = tg->kind == V_NORM ? 1.0f + 0.05f * z : tg->scale * z;
        }
        f->quantize(g->rowbuf, (uint8_t *)dst + off, tg->row);
    }
    return 0;
}

typedef struct B {
    GgufWriter *w;
    SGen *g;
    Err *err;
} B;

static int add(B *b, const char *name, int n_dims, const int64_t *ne, uint32_t type, int kind, float scale) {
    if (b->g->n == b->g->cap) {
        int cap = b->g->cap ? 2 * b->g->cap : 256;
        TGen *t = realloc(b->g->t, sizeof *t * (size_t)cap);
        if (!t) return err_set(b->err, "out of memory");
        b->g->t = t, b->g->cap = cap;
    }
    b->g->t[b->g->n++] = (TGen){kind, scale, ne[0], type};
    return gguf_w_tensor(b->w, name, type, n_dims, ne, NULL, fill, b->g, b->err);
}

static uint32_t mtype(const MmprojSpec *sp, int64_t cols) {
    const Format *f = format_get(sp->wtype);
    if (f && f->quantize && cols % f->block == 0) return sp->wtype;
    return cols % 32 == 0 ? FMT_Q8_0 : FMT_F16;
}

static int mat(B *b, const char *name, int64_t in, int64_t out) {
    const int64_t ne[2] = {in, out};
    return add(b, name, 2, ne, mtype(b->g->sp, in), V_MATRIX, 1.0f / sqrtf((float)in));
}
static int vecf(B *b, const char *name, int64_t n, int kind) {
    const int64_t ne[1] = {n};
    return add(b, name, 1, ne, FMT_F32, kind, kind == V_BIAS ? 0.05f : 1.0f);
}

int mmproj_synth_preset(MmprojSpec *sp, const char *name, Err *err) {
    memset(sp, 0, sizeof *sp);
    sp->seed = 1, sp->wtype = FMT_F16, sp->patch_size = 16, sp->n_pos_side = 48, sp->n_head = 16;
    if (!strcmp(name, "qwen3.5")) {
        sp->n_embd = 1152, sp->n_ff = 4304, sp->n_layer = 27, sp->proj_dim = 2048;
    } else if (!strcmp(name, "qwen3.5-small")) {
        sp->n_embd = 1024, sp->n_ff = 4096, sp->n_layer = 24, sp->proj_dim = 1024;
    } else if (!strcmp(name, "tiny")) {
        sp->n_embd = 32, sp->n_ff = 64, sp->n_layer = 2, sp->n_head = 2, sp->proj_dim = 64;
        sp->patch_size = 4, sp->n_pos_side = 4, sp->wtype = FMT_F32;
    } else {
        return err_set(err, "unknown mmproj preset '%s' (presets: qwen3.5, qwen3.5-small, tiny)", name);
    }
    sp->name = name;
    return 0;
}

static int build(const MmprojSpec *sp, GgufWriter *w, SGen *g, Err *err) {
    if (sp->n_embd < 4 || sp->n_head < 1 || sp->n_embd % sp->n_head || (sp->n_embd / sp->n_head) % 4 || sp->n_layer < 1 ||
        sp->n_ff < 1 || sp->proj_dim < 1 || sp->patch_size < 1 || sp->n_pos_side < 1 || sp->n_deepstack < 0 ||
        sp->n_deepstack > MMPROJ_SYNTH_MAX_DS)
        return err_set(err, "mmproj synth: inconsistent shape (width %d, heads %d, layers %d)", sp->n_embd, sp->n_head,
                       sp->n_layer);
    const int64_t E = sp->n_embd, F = sp->n_ff, P = sp->proj_dim, p = sp->patch_size;
    const float half[3] = {0.5f, 0.5f, 0.5f};
    int rc = 0;
    rc |= gguf_w_str(w, "general.architecture", "clip");
    rc |= gguf_w_str(w, "general.name", sp->name ? sp->name : "synthetic mmproj");
    rc |= gguf_w_str(w, "general.description", "deltallm synthetic qwen3vl_merger projector (random weights)");
    rc |= gguf_w_bool(w, "clip.has_vision_encoder", 1);
    rc |= gguf_w_str(w, "clip.projector_type", "qwen3vl_merger");
    rc |= gguf_w_bool(w, "clip.use_gelu", 1);
    rc |= gguf_w_u32(w, "clip.vision.embedding_length", (uint32_t)E);
    rc |= gguf_w_u32(w, "clip.vision.feed_forward_length", (uint32_t)F);
    rc |= gguf_w_u32(w, "clip.vision.block_count", (uint32_t)sp->n_layer);
    rc |= gguf_w_u32(w, "clip.vision.projection_dim", (uint32_t)P);
    rc |= gguf_w_u32(w, "clip.vision.attention.head_count", (uint32_t)sp->n_head);
    rc |= gguf_w_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f);
    rc |= gguf_w_u32(w, "clip.vision.image_size", (uint32_t)(p * sp->n_pos_side));
    rc |= gguf_w_u32(w, "clip.vision.patch_size", (uint32_t)p);
    rc |= gguf_w_u32(w, "clip.vision.spatial_merge_size", 2);
    rc |= gguf_w_arr(w, "clip.vision.image_mean", GGUF_TYPE_F32, half, 3);
    rc |= gguf_w_arr(w, "clip.vision.image_std", GGUF_TYPE_F32, half, 3);
    uint8_t ds[256] = {0};
    if (sp->n_deepstack) {
        if (sp->n_layer > 256) return err_set(err, "mmproj synth: too many layers");
        for (int i = 0; i < sp->n_deepstack; i++) {
            if (sp->deepstack[i] < 0 || sp->deepstack[i] >= sp->n_layer)
                return err_set(err, "mmproj synth: deepstack layer %d out of range", sp->deepstack[i]);
            ds[sp->deepstack[i]] = 1;
        }
        rc |= gguf_w_arr(w, "clip.vision.is_deepstack_layers", GGUF_TYPE_BOOL, ds, (uint64_t)sp->n_layer);
    }
    if (rc) return err_set(err, "out of memory");
    B b = {w, g, err};
    const uint32_t ptype = sp->wtype == FMT_F32 ? FMT_F32 : FMT_F16;
    const int64_t pne[4] = {p, p, 3, E};
    if (add(&b, "v.patch_embd.weight", 4, pne, ptype, V_MATRIX, 1.0f / sqrtf((float)(6 * p * p))) ||
        add(&b, "v.patch_embd.weight.1", 4, pne, ptype, V_MATRIX, 1.0f / sqrtf((float)(6 * p * p))) ||
        vecf(&b, "v.patch_embd.bias", E, V_BIAS))
        return -1;
    const int64_t posne[2] = {E, (int64_t)sp->n_pos_side * sp->n_pos_side};
    if (add(&b, "v.position_embd.weight", 2, posne, FMT_F32, V_POS, 0.25f)) return -1;
    char n[GGUF_MAX_NAME];
    for (int il = 0; il < sp->n_layer; il++) {
#define N(fmt) (snprintf(n, sizeof n, fmt, il), n)
        if (mat(&b, N("v.blk.%d.attn_qkv.weight"), E, 3 * E) || vecf(&b, N("v.blk.%d.attn_qkv.bias"), 3 * E, V_BIAS) ||
            mat(&b, N("v.blk.%d.attn_out.weight"), E, E) || vecf(&b, N("v.blk.%d.attn_out.bias"), E, V_BIAS) ||
            vecf(&b, N("v.blk.%d.ln1.weight"), E, V_NORM) || vecf(&b, N("v.blk.%d.ln1.bias"), E, V_BIAS) ||
            vecf(&b, N("v.blk.%d.ln2.weight"), E, V_NORM) || vecf(&b, N("v.blk.%d.ln2.bias"), E, V_BIAS) ||
            mat(&b, N("v.blk.%d.ffn_up.weight"), E, F) || vecf(&b, N("v.blk.%d.ffn_up.bias"), F, V_BIAS) ||
            mat(&b, N("v.blk.%d.ffn_down.weight"), F, E) || vecf(&b, N("v.blk.%d.ffn_down.bias"), E, V_BIAS))
            return -1;
        if (ds[il] && (vecf(&b, N("v.deepstack.%d.norm.weight"), 4 * E, V_NORM) ||
                       vecf(&b, N("v.deepstack.%d.norm.bias"), 4 * E, V_BIAS) ||
                       mat(&b, N("v.deepstack.%d.fc1.weight"), 4 * E, 4 * E) ||
                       vecf(&b, N("v.deepstack.%d.fc1.bias"), 4 * E, V_BIAS) ||
                       mat(&b, N("v.deepstack.%d.fc2.weight"), 4 * E, P) ||
                       vecf(&b, N("v.deepstack.%d.fc2.bias"), P, V_BIAS)))
            return -1;
#undef N
    }
    if (vecf(&b, "v.post_ln.weight", E, V_NORM) || vecf(&b, "v.post_ln.bias", E, V_BIAS) ||
        mat(&b, "mm.0.weight", 4 * E, 4 * E) || vecf(&b, "mm.0.bias", 4 * E, V_BIAS) || mat(&b, "mm.2.weight", 4 * E, P) ||
        vecf(&b, "mm.2.bias", P, V_BIAS))
        return -1;
    return 0;
}

static int write_any(const MmprojSpec *sp, const char *path, uint8_t **out, size_t *size, Err *err) {
    GgufWriter *w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    SGen g = {.sp = sp};
    int rc = -1;
    if (!w) {
        err_set(err, "out of memory");
        goto done;
    }
    if (build(sp, w, &g, err)) goto done;
    rc = path ? gguf_writer_write_file(w, path, err) : gguf_writer_write_mem(w, out, size, err);
done:
    gguf_writer_free(w);
    free(g.t);
    free(g.rowbuf);
    return rc;
}

int mmproj_synth_write(const MmprojSpec *sp, const char *path, Err *err) { return write_any(sp, path, NULL, NULL, err); }
int mmproj_synth_write_mem(const MmprojSpec *sp, uint8_t **out, size_t *size, Err *err) {
    return write_any(sp, NULL, out, size, err);
}
