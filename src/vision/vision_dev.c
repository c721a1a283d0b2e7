/* vision_dev.c — the vision tower on a backend (vision_dev.h): the projector's tensors as a Weight registry
 * bound once, and per image one command stream (begin, the inputs' uploads, the graph, the download, submit,
 * wait) over one buffer holding every activation (kept for the next image, grown when one needs more). */
#include "vision/vision_dev.h"

#include "gguf/format.h"
#include "vision/encoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the registry's entries of one block (ids from VisionDev.w) */
typedef struct DevLayer {
    const Weight *qkv, *qkv_b, *out, *out_b, *up, *up_b, *down, *down_b, *ln1_w, *ln1_b, *ln2_w, *ln2_b;
    const Weight *ds_norm_w, *ds_norm_b, *ds_fc1, *ds_fc1_b, *ds_fc2, *ds_fc2_b; /* deepstack: NULL without */
} DevLayer;

struct VisionDev {
    const Mmproj *m;
    Backend *be;
    Weight *w;
    int n_w;
    const Weight *patch0, *patch1, *patch_b, *post_ln_w, *post_ln_b, *mm0, *mm0_b, *mm2, *mm2_b;
    DevLayer *layers;
    BBuf *buf; /* the activations, kept between images and grown when an image needs more */
    size_t buf_bytes;
};

static const Weight *add_mat(VisionDev *vd, const MatW *mw, const char *name, int layer) {
    Weight *w = &vd->w[vd->n_w];
    const size_t bytes = mw->row_bytes * (size_t)mw->rows;
    *w = (Weight){.id = vd->n_w++, .name = name, .layer = layer, .type = mw->type, .cols = mw->cols, .rows = mw->rows,
                  .row_bytes = mw->row_bytes, .bytes = bytes, .expert_stride = bytes, .host = mw->data};
    return w;
}

static const Weight *add_vec(VisionDev *vd, const float *x, int n, const char *name, int layer) {
    Weight *w = &vd->w[vd->n_w];
    *w = (Weight){.id = vd->n_w++, .name = name, .layer = layer, .type = FMT_F32, .cols = n, .rows = 1,
                  .row_bytes = (size_t)n * 4, .bytes = (size_t)n * 4, .expert_stride = (size_t)n * 4, .host = x};
    return w;
}

/* the registry of every tensor the tower reads (vision_dev_open) */
static void registry(VisionDev *vd) {
    const Mmproj *m = vd->m;
    const int E = m->n_embd, F = m->n_ff, P = m->proj_dim;
    vd->patch0 = add_mat(vd, &m->patch0, "v.patch_embd.weight", -1);
    vd->patch1 = add_mat(vd, &m->patch1, "v.patch_embd.weight.1", -1);
    vd->patch_b = add_vec(vd, m->patch_b, E, "v.patch_embd.bias", -1);
    for (int il = 0; il < m->n_layer; il++) {
        const VisionLayer *L = &m->layers[il];
        DevLayer *d = &vd->layers[il];
        d->ln1_w = add_vec(vd, L->ln1_w, E, "ln1.weight", il), d->ln1_b = add_vec(vd, L->ln1_b, E, "ln1.bias", il);
        d->qkv = add_mat(vd, &L->qkv, "attn_qkv.weight", il), d->qkv_b = add_vec(vd, L->qkv_b, 3 * E, "attn_qkv.bias", il);
        d->out = add_mat(vd, &L->out, "attn_out.weight", il), d->out_b = add_vec(vd, L->out_b, E, "attn_out.bias", il);
        d->ln2_w = add_vec(vd, L->ln2_w, E, "ln2.weight", il), d->ln2_b = add_vec(vd, L->ln2_b, E, "ln2.bias", il);
        d->up = add_mat(vd, &L->up, "ffn_up.weight", il), d->up_b = add_vec(vd, L->up_b, F, "ffn_up.bias", il);
        d->down = add_mat(vd, &L->down, "ffn_down.weight", il), d->down_b = add_vec(vd, L->down_b, E, "ffn_down.bias", il);
        if (L->deepstack) {
            d->ds_norm_w = add_vec(vd, L->ds_norm_w, 4 * E, "deepstack.norm.weight", il);
            d->ds_norm_b = add_vec(vd, L->ds_norm_b, 4 * E, "deepstack.norm.bias", il);
            d->ds_fc1 = add_mat(vd, &L->ds_fc1, "deepstack.fc1.weight", il);
            d->ds_fc1_b = add_vec(vd, L->ds_fc1_b, 4 * E, "deepstack.fc1.bias", il);
            d->ds_fc2 = add_mat(vd, &L->ds_fc2, "deepstack.fc2.weight", il);
            d->ds_fc2_b = add_vec(vd, L->ds_fc2_b, P, "deepstack.fc2.bias", il);
        }
    }
    vd->post_ln_w = add_vec(vd, m->post_ln_w, E, "v.post_ln.weight", -1);
    vd->post_ln_b = add_vec(vd, m->post_ln_b, E, "v.post_ln.bias", -1);
    vd->mm0 = add_mat(vd, &m->mm0, "mm.0.weight", -1), vd->mm0_b = add_vec(vd, m->mm0_b, 4 * E, "mm.0.bias", -1);
    vd->mm2 = add_mat(vd, &m->mm2, "mm.2.weight", -1), vd->mm2_b = add_vec(vd, m->mm2_b, P, "mm.2.bias", -1);
}

VisionDev *vision_dev_open(const Mmproj *m, const BackendOptions *o, Err *err) {
    VisionDev *vd = calloc(1, sizeof *vd);
    const int cap = 9 + 18 * m->n_layer;
    if (!vd || !(vd->w = calloc((size_t)cap, sizeof *vd->w)) || !(vd->layers = calloc((size_t)m->n_layer, sizeof *vd->layers))) {
        vision_dev_close(vd);
        return err_set(err, "vision: out of memory"), NULL;
    }
    vd->m = m;
    registry(vd);
    const BackendOptions none = {0};
    vd->be = backend_create(o ? o : &none, err);
    if (!vd->be || vd->be->vt->bind(vd->be, vd->w, vd->n_w, err)) {
        if (vd->be) err_prefix(err, "vision encoder on %s", vd->be->name);
        vision_dev_close(vd);
        return NULL;
    }
    return vd;
}

void vision_dev_close(VisionDev *vd) {
    if (!vd) return;
    if (vd->buf) vd->be->vt->free(vd->be, vd->buf);
    backend_destroy(vd->be);
    free(vd->w), free(vd->layers), free(vd);
}

const char *vision_dev_backend(const VisionDev *vd) { return vd->be->name; }

static size_t up256(size_t n) { return (n + 255) & ~(size_t)255; }

int vision_dev_encode(VisionDev *vd, const float *pix, int nx, int ny, float *out, Err *err) {
    const Mmproj *m = vd->m;
    const int n_tok = vision_n_tokens(m, nx, ny);
    if (n_tok <= 0)
        return err_set(err, "vision: image %d×%d is not a positive multiple of %d on each side", nx, ny, 2 * m->patch_size);
    const int p = m->patch_size, px = nx / p, py = ny / p, T = px * py, G = T / 4, E = m->n_embd, F = m->n_ff;
    const int P = m->proj_dim, H = m->n_head, d = m->d_head, K = 3 * p * p, W = mmproj_out_width(m);
    Backend *be = vd->be;
    const BackendVt *vt = be->vt;
    int64_t maxcols = K;
    if (F > maxcols) maxcols = F;
    if (4 * (int64_t)E > maxcols) maxcols = 4 * (int64_t)E;
    if (3 * (int64_t)E > maxcols) maxcols = 3 * (int64_t)E;
    const BackendSizes sz = {.max_rows = T, .max_cols = maxcols, .max_ctx = T};
    if (vt->reserve(be, &sz, err)) return -1;
    /* one buffer: x [T][E] (the residual), h [T][max(E, K)], a [T][max(3E, F)], b [max(T·E, G·P)], posf [T][E],
     * rpos int32 [T][2], o [G][W] */
    const size_t fx = (size_t)T * E, fh = (size_t)T * (E > K ? E : K), fa = (size_t)T * (3 * E > F ? 3 * E : F);
    const size_t fb = fx > (size_t)G * P ? fx : (size_t)G * P, fo = (size_t)G * W;
    const size_t at_h = up256(4 * fx), at_a = at_h + up256(4 * fh), at_b = at_a + up256(4 * fa), at_p = at_b + up256(4 * fb);
    const size_t at_r = at_p + up256(4 * fx), at_o = at_r + up256(8 * (size_t)T), total = at_o + up256(4 * fo);
    float *hp = malloc(sizeof(float) * (size_t)T * K), *hpos = malloc(sizeof(float) * fx);
    int32_t *hr = malloc(sizeof(int32_t) * 2 * (size_t)T);
    if (hp && hpos && hr && total > vd->buf_bytes) {
        if (vd->buf) vt->free(be, vd->buf);
        vd->buf_bytes = (vd->buf = vt->alloc(be, total, err)) ? total : 0;
        if (!vd->buf) err_prefix(err, "vision: activations of a %d×%d image (%d patches)", nx, ny, T);
    }
    BBuf *buf = hp && hpos && hr ? vd->buf : NULL;
    if (!buf) {
        free(hp), free(hpos), free(hr);
        return err_set(err, "vision: out of memory for a %d×%d image (%d patches)", nx, ny, T); /* a first message stays */
    }
    const BView x = {buf, 0}, h = {buf, at_h}, a = {buf, at_a}, b = {buf, at_b}, posf = {buf, at_p}, rpos = {buf, at_r};
    const BView o = {buf, at_o};
    vision_patches(m, pix, nx, ny, hp);
    vision_positions(m, px, py, hpos);
    for (int yb = 0, idx = 0; yb < py / 2; yb++) /* each patch's (row, column), in merge order */
        for (int xb = 0; xb < px / 2; xb++)
            for (int dy = 0; dy < 2; dy++)
                for (int dx = 0; dx < 2; dx++, idx++) hr[2 * idx] = 2 * yb + dy, hr[2 * idx + 1] = 2 * xb + dx;

    vt->begin(be);
    vt->upload(be, h, hp, sizeof(float) * (size_t)T * K);
    vt->upload(be, posf, hpos, sizeof(float) * fx);
    vt->upload(be, rpos, hr, sizeof(int32_t) * 2 * (size_t)T);
    const MatArgs pe0 = {.w = vd->patch0, .expert = -1, .x = h, .y = x, .T = T}, pe1 = {.w = vd->patch1, .expert = -1, .x = h, .y = a, .T = T};
    vt->matmul(be, &pe0);
    vt->matmul(be, &pe1);
    vt->add(be, x, a, (int64_t)fx);
    vt->bias_act(be, x, vd->patch_b, T, E, ACT_NONE);
    vt->add(be, x, posf, (int64_t)fx);
    const VecSet rows_e = {T, 1, E, E, 0, E, 0};
    const Rope2dArgs rope = {T, 2 * H, d, 3 * (int64_t)E, 10000.0f}; /* the q heads then the k heads of each qkv row */
    const FullAttnArgs att = {T, H, d, 1.0f / sqrtf((float)d), a, bv_f32(a, E), bv_f32(a, 2 * (int64_t)E), h,
                              3 * (int64_t)E, 3 * (int64_t)E, 3 * (int64_t)E, E};
    int ds_i = 0;
    for (int il = 0; il < m->n_layer; il++) {
        const DevLayer *L = &vd->layers[il];
        vt->layer_norm(be, x, h, L->ln1_w, L->ln1_b, &rows_e, m->eps);
        vt->matmul(be, &(MatArgs){.expert = -1, .w = L->qkv, .x = h, .y = a, .T = T});
        vt->bias_act(be, a, L->qkv_b, T, 3 * E, ACT_NONE);
        vt->rope_2d(be, a, rpos, &rope);
        vt->attention_full(be, &att);
        vt->matmul(be, &(MatArgs){.expert = -1, .w = L->out, .x = h, .y = b, .T = T});
        vt->bias_act(be, b, L->out_b, T, E, ACT_NONE);
        vt->add(be, x, b, (int64_t)fx);
        vt->layer_norm(be, x, h, L->ln2_w, L->ln2_b, &rows_e, m->eps);
        vt->matmul(be, &(MatArgs){.expert = -1, .w = L->up, .x = h, .y = a, .T = T});
        vt->bias_act(be, a, L->up_b, T, F, ACT_GELU);
        vt->matmul(be, &(MatArgs){.expert = -1, .w = L->down, .x = a, .y = b, .T = T});
        vt->bias_act(be, b, L->down_b, T, E, ACT_NONE);
        vt->add(be, x, b, (int64_t)fx);
        if (L->ds_fc1) { /* the block's output, four patches per row, through its merger into columns [P·k, P·(k+1)) */
            const VecSet rows_4e = {G, 1, 4 * E, 4 * (int64_t)E, 0, 4 * (int64_t)E, 0};
            vt->layer_norm(be, x, b, L->ds_norm_w, L->ds_norm_b, &rows_4e, m->eps);
            vt->matmul(be, &(MatArgs){.expert = -1, .w = L->ds_fc1, .x = b, .y = a, .T = G});
            vt->bias_act(be, a, L->ds_fc1_b, G, 4 * E, ACT_GELU);
            vt->matmul(be, &(MatArgs){.expert = -1, .w = L->ds_fc2, .x = a, .y = b, .T = G});
            vt->bias_act(be, b, L->ds_fc2_b, G, P, ACT_NONE);
            ds_i++;
            vt->copy_rows(be, bv_f32(o, (int64_t)ds_i * P), W, b, P, G, P);
        }
    }
    vt->layer_norm(be, x, h, vd->post_ln_w, vd->post_ln_b, &rows_e, m->eps);
    vt->matmul(be, &(MatArgs){.expert = -1, .w = vd->mm0, .x = h, .y = a, .T = G}); /* each merged token: four patch rows side by side */
    vt->bias_act(be, a, vd->mm0_b, G, 4 * E, ACT_GELU);
    vt->matmul(be, &(MatArgs){.expert = -1, .w = vd->mm2, .x = a, .y = b, .T = G});
    vt->bias_act(be, b, vd->mm2_b, G, P, ACT_NONE);
    vt->copy_rows(be, o, W, b, P, G, P);
    vt->download(be, out, o, sizeof(float) * fo);
    int rc = vt->submit(be, err);
    if (rc == 0) rc = vt->wait(be, err);
    if (rc) err_prefix(err, "vision encoder on %s", be->name);
    free(hp), free(hpos), free(hr);
    return rc ? -1 : 0;
}
