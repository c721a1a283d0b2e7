/* encoder.c — the qwen3vl_merger vision tower on the CPU (encoder.h). The matmuls through the Ops table; the
 * rotary angles computed once per image; LayerNorm and GELU row-parallel on the pool. Exact mode: scalar
 * attention (attn_heads, parallel over heads) and libm GELU — the arithmetic tools/vision_ref.py checks. Fast
 * mode (any other MatMode, with an ISA): attention through vattn (GEMM tiles + vector exp) and GELU read from
 * a table over the F16 inputs, as ggml computes it (see vision_gelu_fast). */
#include "vision/encoder.h"

#include "base/clock.h"
#include "base/fp16.h"
#include "vision/vattn.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

float vision_gelu(float x) { return op_gelu(x); }

/* GELU of every F16 input, in float (not rounded to F16 after, as ggml's table is: one rounding less) */
static float *gelu_table;
static void gelu_table_init(void) {
    gelu_table = malloc(sizeof(float) * 65536);
    if (gelu_table)
        for (int i = 0; i < 65536; i++) gelu_table[i] = vision_gelu(fp16_to_fp32((uint16_t)i));
}

float vision_gelu_fast(float x) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, gelu_table_init);
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f || !gelu_table) return x >= 10.0f ? x : vision_gelu(x);
    return gelu_table[fp32_to_fp16(x)];
}

int vision_n_tokens(const Mmproj *m, int nx, int ny) {
    const int a = 2 * m->patch_size;
    if (nx <= 0 || ny <= 0 || nx % a || ny % a) return -1;
    return (nx / a) * (ny / a);
}

/* ggml_norm then ·w + b: mean and variance summed in double (kernels/ref/ops_vision.c) */
static void layernorm(const float *x, const float *w, const float *b, int n, float eps, float *y) {
    op_layernorm(x, w, b, n, eps, y);
}

static void add_bias(float *y, const float *b, int64_t T, int n) {
    for (int64_t t = 0; t < T; t++)
        for (int i = 0; i < n; i++) y[t * n + i] += b[i];
}

/* the 2-D rotary angles of every patch: pairs (k, k + d/2) of a head of d; the first d/4 pairs turn with the
 * patch's row, the rest with its column (ggml's vision M-RoPE with sections d/4 each: the column section
 * starts its own angle). cs [T][d/2][2]: cos, sin. */
static void rope2d_table(int px, int py, int d, float theta_scale, float *cs) {
    const int half = d / 2, quarter = d / 4;
    int idx = 0;
    for (int yb = 0; yb < py / 2; yb++)
        for (int xb = 0; xb < px / 2; xb++)
            for (int dy = 0; dy < 2; dy++)
                for (int dx = 0; dx < 2; dx++, idx++) {
                    const int row = 2 * yb + dy, col = 2 * xb + dx;
                    float th_r = (float)row, th_c = (float)col;
                    float *t = cs + (size_t)idx * half * 2;
                    for (int k = 0; k < half; k++) {
                        if (k == quarter) th_c = (float)col;
                        const float theta = k < quarter ? th_r : th_c;
                        t[2 * k] = cosf(theta), t[2 * k + 1] = sinf(theta);
                        th_r *= theta_scale;
                        if (k >= quarter) th_c *= theta_scale;
                    }
                }
}

static void rope2d(float *v, int d, const float *cs) {
    const int half = d / 2;
    for (int k = 0; k < half; k++) {
        const float c = cs[2 * k], s = cs[2 * k + 1];
        const float x0 = v[k], x1 = v[k + half];
        v[k] = x0 * c - x1 * s;
        v[k + half] = x0 * s + x1 * c;
    }
}

/* row-parallel jobs: LayerNorm of rows, rotary of q and k rows, GELU of a range */
typedef struct RowJob {
    const float *x, *w, *b, *cs;
    float *y;
    int n, d, H;
    float eps;
    bool fast;
} RowJob;

static void ln_rows(void *ctx, int64_t b, int64_t e, int thread) {
    const RowJob *j = ctx;
    for (int64_t t = b; t < e; t++) layernorm(j->x + t * j->n, j->w, j->b, j->n, j->eps, j->y + t * j->n);
}

static void rope_rows(void *ctx, int64_t b, int64_t e, int thread) {
    const RowJob *j = ctx;
    for (int64_t t = b; t < e; t++)
        for (int hh = 0; hh < 2 * j->H; hh++) /* q heads then k heads */
            rope2d(j->y + t * j->n + (int64_t)hh * j->d, j->d, j->cs + t * (j->d / 2) * 2);
}

static void gelu_range(void *ctx, int64_t b, int64_t e, int thread) {
    const RowJob *j = ctx;
    float *y = j->y;
    if (j->fast)
        for (int64_t i = b; i < e; i++) y[i] = vision_gelu_fast(y[i]);
    else
        for (int64_t i = b; i < e; i++) y[i] = vision_gelu(y[i]);
}

typedef struct AttnJob {
    const float *qkv; /* [T][3][H][d] */
    float *out;       /* [T][H][d] */
    float *scores;    /* per thread: [T] */
    int T, H, d;
} AttnJob;

static void attn_heads(void *ctx, int64_t b, int64_t e, int thread) {
    AttnJob *j = ctx;
    const int T = j->T, H = j->H, d = j->d, E = H * d;
    float *sc = j->scores + (size_t)thread * (size_t)T;
    const float scale = 1.0f / sqrtf((float)d);
    for (int64_t h = b; h < e; h++) /* the scalar spec (kernels/ref/ops_vision.c), rows of [q | k | v] */
        for (int t = 0; t < T; t++)
            op_attn_full_row(j->qkv + (size_t)t * 3 * E + (size_t)h * d, j->qkv + E + (size_t)h * d, 3 * (int64_t)E,
                             j->qkv + 2 * E + (size_t)h * d, 3 * (int64_t)E, T, d, scale, sc, j->out + (size_t)t * E + (size_t)h * d);
}

/* bilinear resize of the learned position grid (side S) to px × py with aligned corners (ggml_interpolate's
 * BILINEAR | ALIGN_CORNERS, as llama.cpp's qwen3vl graph asks, = torch.linspace(0, S - 1, n) in the Hugging
 * Face model): output i samples input i / sf, sf = (n − 1)/(S − 1) in float; the lower index clamped, the
 * fraction clamped to [0, 1]. Written in merge order into pos [T][E]. */
void vision_positions(const Mmproj *m, int px, int py, float *pos) {
    const int E = m->n_embd, S = m->n_pos_side;
    const float sx = px > 1 && S > 1 ? (float)(px - 1) / (float)(S - 1) : (float)px / (float)S;
    const float sy = py > 1 && S > 1 ? (float)(py - 1) / (float)(S - 1) : (float)py / (float)S;
    int idx = 0;
    for (int yb = 0; yb < py / 2; yb++)
        for (int xb = 0; xb < px / 2; xb++)
            for (int dy = 0; dy < 2; dy++)
                for (int dx = 0; dx < 2; dx++, idx++) {
                    const int y = 2 * yb + dy, x = 2 * xb + dx;
                    float *dst = pos + (size_t)idx * E;
                    if (px == S && py == S) {
                        memcpy(dst, m->pos_embd + ((size_t)y * S + x) * E, sizeof(float) * (size_t)E);
                        continue;
                    }
                    const float fx = (float)x / sx, fy = (float)y / sy;
                    int x0 = (int)floorf(fx), y0 = (int)floorf(fy);
                    int x1 = x0 + 1, y1 = y0 + 1;
                    x0 = x0 < 0 ? 0 : x0 >= S ? S - 1 : x0;
                    x1 = x1 < 0 ? 0 : x1 >= S ? S - 1 : x1;
                    y0 = y0 < 0 ? 0 : y0 >= S ? S - 1 : y0;
                    y1 = y1 < 0 ? 0 : y1 >= S ? S - 1 : y1;
                    float ax = fx - (float)x0, ay = fy - (float)y0;
                    ax = ax < 0 ? 0 : ax > 1 ? 1 : ax;
                    ay = ay < 0 ? 0 : ay > 1 ? 1 : ay;
                    const float *a = m->pos_embd + ((size_t)y0 * S + x0) * E, *b = m->pos_embd + ((size_t)y0 * S + x1) * E;
                    const float *c = m->pos_embd + ((size_t)y1 * S + x0) * E, *dd = m->pos_embd + ((size_t)y1 * S + x1) * E;
                    for (int i = 0; i < E; i++)
                        dst[i] = a[i] * (1 - ax) * (1 - ay) + b[i] * ax * (1 - ay) + c[i] * (1 - ax) * ay + dd[i] * ax * ay;
                }
}

void vision_patches(const Mmproj *m, const float *pix, int nx, int ny, float *h) {
    const int p = m->patch_size, px = nx / p, py = ny / p, K = 3 * p * p;
    int idx = 0;
    for (int yb = 0; yb < py / 2; yb++)
        for (int xb = 0; xb < px / 2; xb++)
            for (int dy = 0; dy < 2; dy++)
                for (int dx = 0; dx < 2; dx++, idx++) {
                    const int y0 = (2 * yb + dy) * p, x0 = (2 * xb + dx) * p;
                    float *dst = h + (size_t)idx * K;
                    for (int ch = 0; ch < 3; ch++)
                        for (int ky = 0; ky < p; ky++)
                            memcpy(dst + (ch * p + ky) * p, pix + ((size_t)ch * ny + y0 + ky) * nx + x0, sizeof(float) * (size_t)p);
                }
}

/* the fast attention of one layer: per head K transposed and V padded, then (head, block of 64 rows) items */
typedef struct FastAttn {
    VattnRowsFn fn;
    VattnArgs a[64]; /* per head (H ≤ 64 checked by the caller) */
    float *work;     /* per thread: [64][tp] + [64][dp] */
    int nblk;
    size_t work_per_thread;
} FastAttn;

static void fast_attn_items(void *ctx, int64_t b, int64_t e, int thread) {
    FastAttn *f = ctx;
    float *s = f->work + (size_t)thread * f->work_per_thread;
    for (int64_t it = b; it < e; it++) {
        const VattnArgs *a = &f->a[it / f->nblk];
        const int q0 = (int)(it % f->nblk) * 64, m = a->T - q0 < 64 ? a->T - q0 : 64;
        f->fn(a, q0, m, s, s + (size_t)64 * a->tp);
    }
}

typedef struct KvPack {
    const float *qkv;
    float *kt, *v;
    int T, tp, d, dp, E;
} KvPack;

static void kv_pack_heads(void *ctx, int64_t b, int64_t e, int thread) {
    const KvPack *k = ctx;
    for (int64_t h = b; h < e; h++) {
        float *kt = k->kt + (size_t)h * k->d * k->tp, *v = k->v + (size_t)h * k->tp * k->dp;
        memset(kt, 0, sizeof(float) * (size_t)k->d * k->tp);
        memset(v, 0, sizeof(float) * (size_t)k->tp * k->dp);
        for (int t = 0; t < k->T; t++) {
            const float *src = k->qkv + (size_t)t * 3 * k->E + (size_t)k->E + (size_t)h * k->d;
            for (int i = 0; i < k->d; i++) kt[(size_t)i * k->tp + t] = src[i];
            memcpy(v + (size_t)t * k->dp, src + k->E, sizeof(float) * (size_t)k->d);
        }
    }
}

int vision_encode(const Mmproj *m, const float *pix, int nx, int ny, const VisionRun *run, float *out, Err *err) {
    const int n_tok = vision_n_tokens(m, nx, ny);
    if (n_tok <= 0)
        return err_set(err, "vision: image %d×%d is not a positive multiple of %d on each side", nx, ny, 2 * m->patch_size);
    const int p = m->patch_size, px = nx / p, py = ny / p, T = px * py, E = m->n_embd, F = m->n_ff, P = m->proj_dim;
    const int H = m->n_head, d = m->d_head, K = 3 * p * p, W = mmproj_out_width(m);
    const Ops *ops = run && run->ops ? run->ops : &ops_ref;
    Pool *pool = run ? run->pool : NULL;
    const int nth = pool_size(pool);
    const MatMode mode = run ? run->mode : MATMUL_EXACT;
    const bool fast = mode != MATMUL_EXACT;
    VisionProfile *prof = run ? run->prof : NULL;
    VattnRowsFn vattn = fast && run && H <= 64 ? vattn_select(run->isa) : NULL;
    const int64_t maxcols = 4 * (int64_t)E > F ? (4 * (int64_t)E > K ? 4 * (int64_t)E : K) : (F > K ? F : K);
    OpCtx c = {.mode = mode, .pool = pool};
    c.scratch_bytes = ops_scratch_bytes(T, maxcols, nth);
    /* buffers */
    const size_t big = (size_t)T * (size_t)(3 * E > F ? 3 * E : F);
    const int tp = (T + 15) & ~15, dp = (d + 15) & ~15;
    float *x = malloc(sizeof(float) * (size_t)T * E), *h = malloc(sizeof(float) * (size_t)T * (E > K ? E : K));
    size_t bsz = (size_t)T * (size_t)E; /* out rows [T][E]; the groups' [T/4][4E] and [T/4][P] */
    if ((size_t)(T / 4) * (size_t)P > bsz) bsz = (size_t)(T / 4) * (size_t)P;
    float *a = malloc(sizeof(float) * big), *b = malloc(sizeof(float) * bsz);
    float *sc = malloc(sizeof(float) * (size_t)T * nth), *cs = malloc(sizeof(float) * (size_t)T * (size_t)d);
    FastAttn *fa = NULL;
    float *kt = NULL, *vv = NULL, *inv = NULL;
    if (vattn) {
        fa = calloc(1, sizeof *fa);
        fa->work_per_thread = (size_t)64 * (size_t)(tp + dp);
        fa->work = malloc(sizeof(float) * fa->work_per_thread * (size_t)nth);
        kt = malloc(sizeof(float) * (size_t)H * d * tp), vv = malloc(sizeof(float) * (size_t)H * tp * dp);
        inv = malloc(sizeof(float) * (size_t)T * H);
    }
    void *scratch = NULL;
    if (posix_memalign(&scratch, 64, c.scratch_bytes)) scratch = NULL;
    c.scratch = scratch;
    int rc = -1;
    if (!x || !h || !a || !b || !sc || !cs || !scratch || (vattn && (!fa || !fa->work || !kt || !vv || !inv))) {
        err_set(err, "vision: out of memory for a %d×%d image (%d patches)", nx, ny, T);
        goto done;
    }
    double t0 = prof ? now_s() : 0;
#define LAP(field)                                                                                                 \
    do {                                                                                                           \
        if (prof) {                                                                                                \
            const double t1 = now_s();                                                                             \
            prof->field += t1 - t0;                                                                                \
            t0 = t1;                                                                                               \
        }                                                                                                          \
    } while (0)
    vision_patches(m, pix, nx, ny, h); /* patches in merge order, each [3][p][p] */
    LAP(other);
    ops->matmul(&c, &m->patch0, h, T, x);
    ops->matmul(&c, &m->patch1, h, T, a);
    LAP(matmul);
    for (size_t i = 0; i < (size_t)T * E; i++) x[i] += a[i];
    add_bias(x, m->patch_b, T, E);
    vision_positions(m, px, py, a);
    for (size_t i = 0; i < (size_t)T * E; i++) x[i] += a[i];
    rope2d_table(px, py, d, powf(10000.0f, -4.0f / (float)d), cs);
    LAP(other);

    int ds_i = 0;
    const int64_t rgrain = T / (4 * nth) > 1 ? T / (4 * nth) : 1, egrain = 1 << 14;
    for (int il = 0; il < m->n_layer; il++) {
        const VisionLayer *L = &m->layers[il];
        RowJob ln1 = {.x = x, .w = L->ln1_w, .b = L->ln1_b, .y = h, .n = E, .eps = m->eps};
        pool_for(pool, T, rgrain, ln_rows, &ln1);
        LAP(other);
        ops->matmul(&c, &L->qkv, h, T, a);
        LAP(matmul);
        add_bias(a, L->qkv_b, T, 3 * E);
        RowJob rj = {.cs = cs, .y = a, .n = 3 * E, .d = d, .H = H};
        pool_for(pool, T, rgrain, rope_rows, &rj);
        LAP(other);
        if (vattn) {
            KvPack kp = {a, kt, vv, T, tp, d, dp, E};
            pool_for(pool, H, 1, kv_pack_heads, &kp);
            fa->fn = vattn, fa->nblk = (T + 63) / 64;
            for (int hh = 0; hh < H; hh++)
                fa->a[hh] = (VattnArgs){T, tp, d, dp, 1.0f / sqrtf((float)d), a + (size_t)hh * d, 3 * E,
                                        kt + (size_t)hh * d * tp, vv + (size_t)hh * tp * dp, h + (size_t)hh * d, E,
                                        inv + (size_t)hh * T};
            pool_for(pool, (int64_t)H * fa->nblk, 1, fast_attn_items, fa);
        } else {
            AttnJob job = {a, h, sc, T, H, d};
            pool_for(pool, H, 1, attn_heads, &job);
        }
        LAP(attention);
        ops->matmul(&c, &L->out, h, T, b);
        LAP(matmul);
        add_bias(b, L->out_b, T, E);
        for (size_t i = 0; i < (size_t)T * E; i++) x[i] += b[i];
        RowJob ln2 = {.x = x, .w = L->ln2_w, .b = L->ln2_b, .y = h, .n = E, .eps = m->eps};
        pool_for(pool, T, rgrain, ln_rows, &ln2);
        LAP(other);
        ops->matmul(&c, &L->up, h, T, a);
        LAP(matmul);
        add_bias(a, L->up_b, T, F);
        RowJob gj = {.y = a, .fast = fast};
        pool_for(pool, (int64_t)T * F, egrain, gelu_range, &gj);
        LAP(other);
        ops->matmul(&c, &L->down, a, T, b);
        LAP(matmul);
        add_bias(b, L->down_b, T, E);
        for (size_t i = 0; i < (size_t)T * E; i++) x[i] += b[i];
        LAP(other);
        if (L->deepstack) {
            const int G = T / 4, E4 = 4 * E;
            for (int g = 0; g < G; g++) layernorm(x + (size_t)g * E4, L->ds_norm_w, L->ds_norm_b, E4, m->eps, b + (size_t)g * E4);
            ops->matmul(&c, &L->ds_fc1, b, G, a);
            add_bias(a, L->ds_fc1_b, G, E4);
            RowJob dj = {.y = a, .fast = fast};
            pool_for(pool, (int64_t)G * E4, egrain, gelu_range, &dj);
            ops->matmul(&c, &L->ds_fc2, a, G, b);
            add_bias(b, L->ds_fc2_b, G, P);
            ds_i++;
            for (int g = 0; g < G; g++) memcpy(out + (size_t)g * W + (size_t)ds_i * P, b + (size_t)g * P, sizeof(float) * (size_t)P);
            LAP(other);
        }
    }
    RowJob lnp = {.x = x, .w = m->post_ln_w, .b = m->post_ln_b, .y = h, .n = E, .eps = m->eps};
    pool_for(pool, T, rgrain, ln_rows, &lnp);
    {
        const int G = T / 4, E4 = 4 * E; /* each merged token: its four patches' rows side by side */
        ops->matmul(&c, &m->mm0, h, G, a);
        add_bias(a, m->mm0_b, G, E4);
        RowJob mj = {.y = a, .fast = fast};
        pool_for(pool, (int64_t)G * E4, egrain, gelu_range, &mj);
        ops->matmul(&c, &m->mm2, a, G, b);
        add_bias(b, m->mm2_b, G, P);
        for (int g = 0; g < G; g++) memcpy(out + (size_t)g * W, b + (size_t)g * P, sizeof(float) * (size_t)P);
    }
    LAP(matmul);
#undef LAP
    rc = 0;
done:
    free(x), free(h), free(a), free(b), free(sc), free(cs), free(scratch);
    if (fa) free(fa->work);
    free(fa), free(kt), free(vv), free(inv);
    return rc;
}
