/* host_ops.c — the row ops of the host backends: norms, gates, RoPE, KV append, routing, gather/scatter and
 * the weighted sums, in ggml-cpu's arithmetic (the scalar op_* functions of kernels/ops.h, whose orders are
 * documented there), plus SiLU / SwiGLU rows through the ISA's SIMD rows (bit-identical to the scalar ones).
 * These are the loops over activations that the forward pass (src/model/) used to run itself. The per-row ones
 * that prefill spends time in (norms, gates, RoPE, the residual add) split their rows over the backend's pool
 * (about 16 KiB of floats per work item, so a decode step's single row stays on the caller); each row is
 * computed as on one thread, so the results do not depend on the split. */
#include "backend/cpu/host_backend.h"

#include "base/fp16.h"

#include "gguf/format.h"

#include <string.h>

/* Row r of a packed matrix (pack.c's layouts), block by block back in the file's bytes and dequantized by the
 * format: a tied embedding table is also the head, packed, and its file pages were dropped (reading them would
 * fault them back in). */
static void packed_row(const MatW *m, const Format *f, int64_t r, float *o) {
    uint8_t block[256];
    for (int64_t i = 0; i < m->cols / f->block; i++) {
        if (m->pack_kind == PACK_P16)
            pack_p16_block(m->pack, m, r, i, block);
        else /* PACK_R8 (Q8_0) */
            memcpy(block, (const uint8_t *)m->pack + (size_t)(r >> 3) * 8 * m->row_bytes + ((size_t)i * 8 + (size_t)(r & 7)) * (size_t)f->bytes,
                   (size_t)f->bytes);
        f->to_float(block, o + i * f->block, f->block);
    }
}

static void h_get_rows(Backend *be, const Weight *w, BView ids, int n, BView out) {
    const HostBackend *hb = host_of(be);
    const MatW *m = w->id < hb->n_ids ? &hb->mats[w->id] : NULL;
    const Format *fmt = format_get(w->type);
    const int32_t *id = hi_n(ids, n);
    float *o = hf_n(out, (int64_t)n * w->cols);
    for (int i = 0; i < n; i++) {
        if (m && m->pack && !w->n_expert) packed_row(m, fmt, id[i], o + (int64_t)i * w->cols);
        else fmt->to_float((const uint8_t *)w->host + (size_t)id[i] * w->row_bytes, o + (int64_t)i * w->cols, w->cols);
    }
}

/* work items of about 16 KiB of floats: items of `grain` rows of n floats */
static int64_t row_grain(int64_t n) { return n >= 4096 ? 1 : 4096 / (n > 0 ? n : 1); }

/* A VecSet op's arguments for its row function */
typedef struct SetJob {
    const float *x, *w;
    float *y;
    const VecSet *s;
    float eps;
    bool l2; /* norm_rows: the L2 norm, else RMS with w */
    const Ops *ops;
} SetJob;

static void norm_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const SetJob *j = ctx;
    const VecSet *s = j->s;
    NormRows a = {.w = j->w, .n = s->n, .eps = j->eps, .l2 = j->l2};
    for (int64_t r = r0; r < r1; r++)
        for (int h = 0; h < s->heads; h++) {
            a.x[a.m] = j->x + r * s->x_row + h * s->x_head;
            a.y[a.m] = j->y + r * s->y_row + h * s->y_head;
            if (++a.m == NORM_ROWS_MAX) j->ops->norm_rows(&a), a.m = 0;
        }
    if (a.m) j->ops->norm_rows(&a);
}

static void h_rms_norm(Backend *be, BView xv, BView yv, const Weight *w, const VecSet *s, float eps) {
    SetJob j = {hf(xv), w ? w->host : NULL, hf(yv), s, eps, false, host_of(be)->ops};
    pool_for(host_of(be)->pool, s->rows, row_grain((int64_t)s->heads * s->n), norm_rows, &j);
}

static void h_l2_norm(Backend *be, BView xv, BView yv, const VecSet *s, float eps) {
    SetJob j = {hf(xv), NULL, hf(yv), s, eps, true, host_of(be)->ops};
    pool_for(host_of(be)->pool, s->rows, row_grain((int64_t)s->heads * s->n), norm_rows, &j);
}

static void add_range(void *ctx, int64_t i0, int64_t i1, int thread) {
    (void)thread;
    const SetJob *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] += j->x[i];
}

static void h_add(Backend *be, BView yv, BView xv, int64_t n) {
    SetJob j = {hf_n(xv, n), NULL, hf_n(yv, n), NULL, 0.f, false, NULL};
    pool_for(host_of(be)->pool, n, 4096, add_range, &j);
}

static void h_copy_rows(Backend *be, BView dst, int64_t ld_dst, BView src, int64_t ld_src, int rows, int n) {
    (void)be;
    float *d = hf(dst);
    const float *s = hf(src);
    for (int64_t r = 0; r < rows; r++) memmove(d + r * ld_dst, s + r * ld_src, sizeof(float) * (size_t)n);
}

static void h_dn_gates(Backend *be, const GateArgs *a) {
    (void)be;
    const float *b = hf(a->b), *al = hf(a->a), *dt = a->dt_bias->host, *sa = a->ssm_a->host;
    float *beta = hf(a->beta), *g = hf(a->g);
    for (int64_t t = 0; t < a->R; t++)
        for (int j = 0; j < a->Hv; j++) {
            int64_t off = t * a->ld_in + j;
            if (a->group) off = t * a->ld_in + (int64_t)(j / a->group) * 2 * a->group + j % a->group;
            const float bj = b[off], aj = al[off];
            beta[t * a->Hv + j] = op_sigmoid(bj);
            g[t * a->Hv + j] = op_softplus(aj + dt[j]) * sa[j];
        }
}

typedef struct GatedJob {
    const float *o, *z, *w;
    float *out;
    int n;
    float eps;
    const Ops *ops;
} GatedJob;

static void gated_norm_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const GatedJob *j = ctx;
    NormRows a = {.w = j->w, .n = j->n, .eps = j->eps, .z_on = true};
    for (int64_t i = r0; i < r1; i++) {
        a.x[a.m] = j->o + i * j->n, a.y[a.m] = j->out + i * j->n, a.z[a.m] = j->z + i * j->n;
        if (++a.m == NORM_ROWS_MAX) j->ops->norm_rows(&a), a.m = 0;
    }
    if (a.m) j->ops->norm_rows(&a);
}

static void h_gated_norm(Backend *be, BView ov, BView zv, const Weight *w, int rows, int n, float eps, BView outv) {
    HostBackend *hb = host_of(be);
    float *z = hf(zv);
    hb->ops->silu_rows(&hb->oc, z, z, rows, n);
    GatedJob j = {hf(ov), z, w->host, hf(outv), n, eps, hb->ops};
    pool_for(hb->pool, rows, row_grain(n), gated_norm_rows, &j);
}

typedef struct RopeJob {
    float *x;
    const int32_t *pos;
    const RopeArgs *a;
} RopeJob;

static void rope_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const RopeJob *j = ctx;
    const RopeArgs *a = j->a;
    for (int64_t r = r0; r < r1; r++)
        for (int h = 0; h < a->heads; h++) {
            float *x = j->x + r * a->row_stride + (int64_t)h * a->d;
            if (a->thw) { /* an image's rows: (time, height, width) */
                const int32_t *p = j->pos + 3 * r;
                op_rope_thw(x, a->n_rot, p[0], p[1], p[2], a->base, a->freq_scale, a->sections);
            } else {
                op_rope(x, a->n_rot, j->pos[r], a->base, a->freq_scale, a->sections);
            }
        }
}

static void h_rope(Backend *be, BView xv, BView posv, const RopeArgs *a) {
    RopeJob j = {hf(xv), hi(posv), a};
    pool_for(host_of(be)->pool, a->rows, row_grain((int64_t)a->heads * a->d), rope_rows, &j);
}

/* KV rows in the cache's type, as llama.cpp's CPU set_rows writes them (ggml-cpu's from_float of the type): F16
 * rounded to nearest even; Q8_0 through ggml's x86 quantize_row_q8_0 (the format table's activation rounding,
 * from_float: 127/amax, round half to even); Q4_0 through quantize_row_q4_0_ref (the table's quantize: ggml's
 * CPU from_float for Q4_0 is that reference). The rows' values are quantized 32 at a time: every head's row
 * (head_dim a multiple of 32) is whole blocks. */
static void h_kv_append(Backend *be, BView cache, int row0, BView src, int T, int width, bool v) {
    const uint32_t type = v ? be->kv_v : be->kv_k;
    const float *x = hf(src);
    const int64_t n = (int64_t)T * width;
    uint8_t *dst = (uint8_t *)hv(cache) + kv_row_bytes(type, (int64_t)row0 * width);
    switch (type) {
    case FMT_F32: memcpy(dst, x, sizeof(float) * (size_t)n); break;
    case FMT_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = fp32_to_fp16(x[i]);
        break;
    case FMT_Q8_0: format_get(FMT_Q8_0)->from_float(x, dst, n); break;
    case FMT_Q4_0: format_get(FMT_Q4_0)->quantize(x, dst, n); break;
    default: ASSERT(!"a KV cache type kv_type_format does not give");
    }
}

static void mul_sigmoid_rows(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const SetJob *j = ctx;
    const VecSet *s = j->s;
    for (int64_t r = r0; r < r1; r++)
        for (int h = 0; h < s->heads; h++) {
            float *o = j->y + r * s->y_row + h * s->y_head;
            const float *gate = j->x + r * s->x_row + h * s->x_head;
            j->ops->mul_sigmoid(o, gate, s->n);
        }
}

static void h_mul_sigmoid(Backend *be, BView yv, BView gv, const VecSet *s) {
    SetJob j = {hf(gv), NULL, hf(yv), s, 0.f, false, host_of(be)->ops};
    pool_for(host_of(be)->pool, s->rows, row_grain((int64_t)s->heads * s->n), mul_sigmoid_rows, &j);
}

static void h_silu(Backend *be, BView x, BView y, int rows, int n) {
    HostBackend *hb = host_of(be);
    hb->ops->silu_rows(&hb->oc, hf_n(x, (int64_t)rows * n), hf_n(y, (int64_t)rows * n), rows, n);
}

static void h_swiglu(Backend *be, BView g, BView u, BView y, int rows, int n) {
    HostBackend *hb = host_of(be);
    const int64_t rn = (int64_t)rows * n;
    hb->ops->swiglu_rows(&hb->oc, hf_n(g, rn), hf_n(u, rn), hf_n(y, rn), rows, n);
}

/* top-k of p[0..n) by descending value, ties to the lower index */
static void top_k(const float *p, int n, int k, int32_t *sel) {
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int e = 0; e < n; e++) {
            bool taken = false;
            for (int q = 0; q < s; q++) taken |= sel[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[s] = best;
    }
}

static void h_moe_route(Backend *be, BView logits, BView selv, BView wv, int R, int nE, int kE) {
    (void)be;
    float *rl = hf(logits), *wt = hf(wv);
    int32_t *es = hi(selv);
    for (int64_t t = 0; t < R; t++) {
        float *p = rl + t * nE;
        int32_t *sel = es + t * kE;
        float *w = wt + t * kE;
        op_softmax(p, nE);
        top_k(p, nE, kE, sel);
        double sum = 0.0;
        for (int s = 0; s < kE; s++) sum += (double)p[sel[s]];
        float fs = (float)sum;
        if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
        for (int s = 0; s < kE; s++) w[s] = p[sel[s]] / fs;
    }
}

static void h_gather_rows(Backend *be, BView dst, BView src, BView idx, int n, int width) {
    (void)be;
    float *d = hf_n(dst, (int64_t)n * width);
    const float *s = hf(src);
    const int32_t *ix = hi_n(idx, n);
    for (int64_t i = 0; i < n; i++) memcpy(d + i * width, s + (int64_t)ix[i] * width, sizeof(float) * (size_t)width);
}

static void h_scatter_rows(Backend *be, BView dst, BView src, BView idx, int n, int width) {
    (void)be;
    float *d = hf(dst);
    const float *s = hf_n(src, (int64_t)n * width);
    const int32_t *ix = hi_n(idx, n);
    for (int64_t i = 0; i < n; i++) memcpy(d + (int64_t)ix[i] * width, s + i * width, sizeof(float) * (size_t)width);
}

static void h_moe_combine(Backend *be, BView outv, BView eov, BView wv, int R, int kE, int E) {
    (void)be;
    float *out_all = hf_n(outv, (int64_t)R * E);
    const float *eo_all = hf_n(eov, (int64_t)R * kE * E), *w_all = hf_n(wv, (int64_t)R * kE);
    for (int64_t t = 0; t < R; t++) { /* in selection order */
        float *out = out_all + t * E;
        const float *w = w_all + t * kE, *eo = eo_all + t * kE * E;
        for (int x = 0; x < E; x++) out[x] = eo[x] * w[0];
        for (int s = 1; s < kE; s++)
            for (int x = 0; x < E; x++) out[x] += eo[(int64_t)s * E + x] * w[s];
    }
}

static void h_sigmoid(Backend *be, BView xv, int64_t n) {
    (void)be;
    float *x = hf_n(xv, n);
    for (int64_t i = 0; i < n; i++) x[i] = op_sigmoid(x[i]);
}

static void h_add_scaled(Backend *be, BView yv, BView xv, BView sv, int rows, int n) {
    (void)be;
    float *y = hf_n(yv, (int64_t)rows * n);
    const float *x = hf_n(xv, (int64_t)rows * n), *s = hf_n(sv, rows);
    for (int64_t t = 0; t < rows; t++)
        for (int64_t i = 0; i < n; i++) y[t * n + i] += x[t * n + i] * s[t];
}

void host_ops_install(BackendVt *vt) {
    vt->get_rows = h_get_rows;
    vt->rms_norm = h_rms_norm;
    vt->l2_norm = h_l2_norm;
    vt->add = h_add;
    vt->copy_rows = h_copy_rows;
    vt->dn_gates = h_dn_gates;
    vt->gated_norm = h_gated_norm;
    vt->rope = h_rope;
    vt->kv_append = h_kv_append;
    vt->mul_sigmoid = h_mul_sigmoid;
    vt->silu = h_silu;
    vt->swiglu = h_swiglu;
    vt->moe_route = h_moe_route;
    vt->gather_rows = h_gather_rows;
    vt->scatter_rows = h_scatter_rows;
    vt->moe_combine = h_moe_combine;
    vt->sigmoid = h_sigmoid;
    vt->add_scaled = h_add_scaled;
    host_vision_install(vt);
}
