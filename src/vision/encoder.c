/* encoder.c — the qwen3vl_merger vision tower on the CPU (encoder.h). Scalar LayerNorm, rotary, attention and
 * GELU; the matmuls through the Ops table. Attention is parallel over heads on the pool. */
#include "vision/encoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float vision_gelu(float x) {
    const float k = 0.79788456080286535588f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

int vision_n_tokens(const Mmproj *m, int nx, int ny) {
    const int a = 2 * m->patch_size;
    if (nx <= 0 || ny <= 0 || nx % a || ny % a) return -1;
    return (nx / a) * (ny / a);
}

/* ggml_norm then ·w + b: mean and variance summed in double */
static void layernorm(const float *x, const float *w, const float *b, int n, float eps, float *y) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    const float mean = (float)(s / n);
    double s2 = 0;
    for (int i = 0; i < n; i++) {
        const float v = x[i] - mean;
        y[i] = v;
        s2 += (double)v * v;
    }
    const float scale = 1.0f / sqrtf((float)(s2 / n) + eps);
    for (int i = 0; i < n; i++) y[i] = y[i] * scale * w[i] + b[i];
}

static void add_bias(float *y, const float *b, int64_t T, int n) {
    for (int64_t t = 0; t < T; t++)
        for (int i = 0; i < n; i++) y[t * n + i] += b[i];
}

/* the 2-D rotary rotation of one head vector of d: pairs (k, k + d/2); the first d/4 pairs turn with the
 * patch's row, the rest with its column (ggml's vision M-RoPE with sections d/4 each) */
static void rope2d(float *v, int d, int row, int col, float theta_scale) {
    const int half = d / 2, quarter = d / 4;
    float th_r = (float)row, th_c = (float)col;
    for (int k = 0; k < half; k++) {
        if (k == quarter) th_c = (float)col; /* the column section starts its own angle */
        const float theta = k < quarter ? th_r : th_c;
        const float c = cosf(theta), s = sinf(theta);
        const float x0 = v[k], x1 = v[k + half];
        v[k] = x0 * c - x1 * s;
        v[k + half] = x0 * s + x1 * c;
        th_r *= theta_scale;
        if (k >= quarter) th_c *= theta_scale;
    }
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
    for (int64_t h = b; h < e; h++) {
        for (int t = 0; t < T; t++) {
            const float *q = j->qkv + (size_t)t * 3 * E + (size_t)h * d;
            float mx = -INFINITY;
            for (int u = 0; u < T; u++) {
                const float *k = j->qkv + (size_t)u * 3 * E + E + (size_t)h * d;
                float s = 0;
                for (int i = 0; i < d; i++) s += q[i] * k[i];
                sc[u] = s * scale;
                if (sc[u] > mx) mx = sc[u];
            }
            double sum = 0;
            for (int u = 0; u < T; u++) sum += sc[u] = expf(sc[u] - mx);
            const float inv = (float)(1.0 / sum);
            float *o = j->out + (size_t)t * E + (size_t)h * d;
            memset(o, 0, sizeof(float) * (size_t)d);
            for (int u = 0; u < T; u++) {
                const float *v = j->qkv + (size_t)u * 3 * E + 2 * E + (size_t)h * d;
                const float p = sc[u] * inv;
                for (int i = 0; i < d; i++) o[i] += p * v[i];
            }
        }
    }
}

/* bilinear resize of the learned position grid (side S) to px × py, ggml_interpolate's half-pixel rule,
 * written in merge order into pos [T][E] */
static void positions(const Mmproj *m, int px, int py, float *pos) {
    const int E = m->n_embd, S = m->n_pos_side;
    const float sx = (float)px / (float)S, sy = (float)py / (float)S;
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
                    const float fx = ((float)x + 0.5f) / sx - 0.5f, fy = ((float)y + 0.5f) / sy - 0.5f;
                    int x0 = (int)floorf(fx), y0 = (int)floorf(fy);
                    const float ax = fx - (float)x0, ay = fy - (float)y0;
                    int x1 = x0 + 1, y1 = y0 + 1;
                    x0 = x0 < 0 ? 0 : x0 >= S ? S - 1 : x0;
                    x1 = x1 < 0 ? 0 : x1 >= S ? S - 1 : x1;
                    y0 = y0 < 0 ? 0 : y0 >= S ? S - 1 : y0;
                    y1 = y1 < 0 ? 0 : y1 >= S ? S - 1 : y1;
                    const float *a = m->pos_embd + ((size_t)y0 * S + x0) * E, *b = m->pos_embd + ((size_t)y0 * S + x1) * E;
                    const float *c = m->pos_embd + ((size_t)y1 * S + x0) * E, *dd = m->pos_embd + ((size_t)y1 * S + x1) * E;
                    for (int i = 0; i < E; i++)
                        dst[i] = a[i] * (1 - ax) * (1 - ay) + b[i] * ax * (1 - ay) + c[i] * (1 - ax) * ay + dd[i] * ax * ay;
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
    const int64_t maxcols = 4 * (int64_t)E > F ? (4 * (int64_t)E > K ? 4 * (int64_t)E : K) : (F > K ? F : K);
    OpCtx c = {.mode = run ? run->mode : MATMUL_EXACT, .pool = pool};
    c.scratch_bytes = ops_scratch_bytes(T, maxcols, nth);
    /* buffers */
    const size_t big = (size_t)T * (size_t)(3 * E > F ? 3 * E : F);
    float *x = malloc(sizeof(float) * (size_t)T * E), *h = malloc(sizeof(float) * (size_t)T * (E > K ? E : K));
    size_t bsz = (size_t)T * (size_t)E; /* out rows [T][E]; the groups' [T/4][4E] and [T/4][P] */
    if ((size_t)(T / 4) * (size_t)P > bsz) bsz = (size_t)(T / 4) * (size_t)P;
    float *a = malloc(sizeof(float) * big), *b = malloc(sizeof(float) * bsz);
    float *sc = malloc(sizeof(float) * (size_t)T * nth);
    void *scratch = NULL;
    if (posix_memalign(&scratch, 64, c.scratch_bytes)) scratch = NULL;
    c.scratch = scratch;
    int rc = -1;
    if (!x || !h || !a || !b || !sc || !scratch) {
        err_set(err, "vision: out of memory for a %d×%d image (%d patches)", nx, ny, T);
        goto done;
    }
    /* patches in merge order, each [3][p][p] */
    {
        int idx = 0;
        for (int yb = 0; yb < py / 2; yb++)
            for (int xb = 0; xb < px / 2; xb++)
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++, idx++) {
                        const int y0 = (2 * yb + dy) * p, x0 = (2 * xb + dx) * p;
                        float *dst = h + (size_t)idx * K;
                        for (int ch = 0; ch < 3; ch++)
                            for (int ky = 0; ky < p; ky++)
                                memcpy(dst + (ch * p + ky) * p, pix + ((size_t)ch * ny + y0 + ky) * nx + x0,
                                       sizeof(float) * (size_t)p);
                    }
    }
    ops->matmul(&c, &m->patch0, h, T, x);
    ops->matmul(&c, &m->patch1, h, T, a);
    for (size_t i = 0; i < (size_t)T * E; i++) x[i] += a[i];
    add_bias(x, m->patch_b, T, E);
    positions(m, px, py, a);
    for (size_t i = 0; i < (size_t)T * E; i++) x[i] += a[i];

    const float theta_scale = powf(10000.0f, -4.0f / (float)d);
    int ds_i = 0;
    for (int il = 0; il < m->n_layer; il++) {
        const VisionLayer *L = &m->layers[il];
        for (int t = 0; t < T; t++) layernorm(x + (size_t)t * E, L->ln1_w, L->ln1_b, E, m->eps, h + (size_t)t * E);
        ops->matmul(&c, &L->qkv, h, T, a);
        add_bias(a, L->qkv_b, T, 3 * E);
        {
            int idx = 0;
            for (int yb = 0; yb < py / 2; yb++)
                for (int xb = 0; xb < px / 2; xb++)
                    for (int dy = 0; dy < 2; dy++)
                        for (int dx = 0; dx < 2; dx++, idx++)
                            for (int hh = 0; hh < 2 * H; hh++) /* q heads then k heads */
                                rope2d(a + (size_t)idx * 3 * E + (size_t)hh * d, d, 2 * yb + dy, 2 * xb + dx, theta_scale);
        }
        AttnJob job = {a, h, sc, T, H, d};
        pool_for(pool, H, 1, attn_heads, &job);
        ops->matmul(&c, &L->out, h, T, b);
        add_bias(b, L->out_b, T, E);
        for (size_t i = 0; i < (size_t)T * E; i++) x[i] += b[i];
        for (int t = 0; t < T; t++) layernorm(x + (size_t)t * E, L->ln2_w, L->ln2_b, E, m->eps, h + (size_t)t * E);
        ops->matmul(&c, &L->up, h, T, a);
        add_bias(a, L->up_b, T, F);
        for (size_t i = 0; i < (size_t)T * F; i++) a[i] = vision_gelu(a[i]);
        ops->matmul(&c, &L->down, a, T, b);
        add_bias(b, L->down_b, T, E);
        for (size_t i = 0; i < (size_t)T * E; i++) x[i] += b[i];
        if (L->deepstack) {
            const int G = T / 4, E4 = 4 * E;
            for (int g = 0; g < G; g++) layernorm(x + (size_t)g * E4, L->ds_norm_w, L->ds_norm_b, E4, m->eps, b + (size_t)g * E4);
            ops->matmul(&c, &L->ds_fc1, b, G, a);
            add_bias(a, L->ds_fc1_b, G, E4);
            for (size_t i = 0; i < (size_t)G * E4; i++) a[i] = vision_gelu(a[i]);
            ops->matmul(&c, &L->ds_fc2, a, G, b);
            add_bias(b, L->ds_fc2_b, G, P);
            ds_i++;
            for (int g = 0; g < G; g++) memcpy(out + (size_t)g * W + (size_t)ds_i * P, b + (size_t)g * P, sizeof(float) * (size_t)P);
        }
    }
    for (int t = 0; t < T; t++) layernorm(x + (size_t)t * E, m->post_ln_w, m->post_ln_b, E, m->eps, h + (size_t)t * E);
    {
        const int G = T / 4, E4 = 4 * E; /* each merged token: its four patches' rows side by side */
        ops->matmul(&c, &m->mm0, h, G, a);
        add_bias(a, m->mm0_b, G, E4);
        for (size_t i = 0; i < (size_t)G * E4; i++) a[i] = vision_gelu(a[i]);
        ops->matmul(&c, &m->mm2, a, G, b);
        add_bias(b, m->mm2_b, G, P);
        for (int g = 0; g < G; g++) memcpy(out + (size_t)g * W, b + (size_t)g * P, sizeof(float) * (size_t)P);
    }
    rc = 0;
done:
    free(x), free(h), free(a), free(b), free(sc), free(scratch);
    return rc;
}
