/* deltanet_ref.c — the three reference forms of the gated delta rule (ops.h, docs/MODEL.md).
 *
 * Recurrent: token by token, per value head, on the transposed state (row j of a head's block is column
 * j of S, so every inner loop is contiguous): S ← exp(g)·S; δ = β(v − Sᵀk); S += k δᵀ; o = Sᵀq / √d_k —
 * llama.cpp's own algorithm, with its dot / multiply-add arithmetic (op_dot_f32, op_mad_f32).
 *
 * Chunked (WY/UT form): chunks of DELTANET_CHUNK tokens; within a chunk, with G the cumulative log-decay,
 *   A[r][c] = β_r (k_r·k_c) e^{G_r−G_c} (c < r),   (I + A) U = diag(β) V,   (I + A) W = diag(β e^G) K
 * (one forward substitution for both), then with the chunk's starting state S:
 *   Vnew = U − W S,   o_r = e^{G_r} Sᵀq_r + Σ_{c≤r} e^{G_r−G_c} (q_r·k_c) Vnew_c,
 *   S ← e^{G_last} S + Σ_c e^{G_last−G_c} k_c Vnewᵀ_c.
 * A last chunk shorter than the chunk length is processed as is, which equals llama.cpp's zero padding. */
#include "kernels/ops.h"

#include "base/err.h"
#include "base/fdot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline int key_head(const DeltaNetArgs *a, int j) {
    return a->grouped ? j / (a->n_v_head / a->n_k_head) : j % a->n_k_head;
}

static float dotf(const float *a, const float *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    return (float)s;
}

typedef struct DnJob {
    const DeltaNetArgs *a;
    float *scratch; /* chunked: per-thread workspaces, or NULL */
} DnJob;

/* Head j's state (out of place: state_in's copied into it first). */
static float *head_state(const DeltaNetArgs *a, int64_t j) {
    const size_t n = (size_t)a->d_v * (size_t)a->d_k;
    float *s = a->state + (size_t)j * n;
    if (a->state_in && a->state_in != a->state) memcpy(s, a->state_in + (size_t)j * n, sizeof(float) * n);
    return s;
}

/* Token t of head j: its q, k (the head's key head), v, out, decay exp(g) and β. */
typedef struct DnTok {
    const float *q, *k, *v;
    float *o;
    float decay, beta;
} DnTok;
static DnTok head_token(const DeltaNetArgs *a, int64_t j, int t) {
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head, kh = key_head(a, (int)j);
    const int64_t th = (int64_t)t * H + j;
    DnTok x = {a->q + ((int64_t)t * a->n_k_head + kh) * dk, a->k + ((int64_t)t * a->n_k_head + kh) * dk, a->v + th * dv,
               a->out + th * dv, expf(a->g[th]), a->beta[th]};
    return x;
}

static void recurrent_heads(void *ctx, int64_t b, int64_t e, int thread) {
    const DeltaNetArgs *a = ((const DnJob *)ctx)->a;
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head;
    const float scale = 1.0f / sqrtf((float)dv);
    for (int64_t j = b; j < e; j++) {
        float *s = head_state(a, j);
        for (int t = 0; t < a->T; t++) {
            const DnTok x = head_token(a, j, t);
            const float *q = x.q, *k = x.k, *v = x.v;
            const float decay = x.decay, beta = x.beta;
            float *o = x.o;
            for (int c = 0; c < dv; c++) { /* row c is column c of S: decay, delta, update, output */
                float *row = s + (int64_t)c * dk;
                for (int i = 0; i < dk; i++) row[i] *= decay;
                const float delta = (v[c] - fdot_vec_f32(row, k, dk)) * beta;
                fdot_mad_f32(row, k, delta, dk);
                o[c] = fdot_vec_f32(row, q, dk) * scale;
            }
            if (a->steps) memcpy(a->steps + ((int64_t)t * H + j) * dv * dk, s, sizeof(float) * (size_t)dv * dk);
        }
    }
}

void deltanet_recurrent_ref(const OpCtx *c, const DeltaNetArgs *a) {
    DnJob j = {a, NULL};
    pool_for(c->pool, a->n_v_head, 1, recurrent_heads, &j);
}

/* Fused (the fast arithmetic's recurrent form): each row x of the stored state (column x of S) on its own,
 * in an order that one pass over the state per token can compute:
 *   a = S_x·k                  (the old S; dn_dot16: 16 lanes, lane i mod 16 fused multiply-adds in order,
 *                               folded 8, 4, 2, 1)
 *   δ = (v_x − e·a)·β          (e = exp(g))
 *   S_x[i] = k_i·δ + e·S_x[i]  (a fused multiply-add of the rounded e·S)
 *   o_x = (S_x·q)·s            (the new S, dn_dot16; s = 1/√d_k)
 * The kernel (deltanet_simd.h) updates a row and, in the same pass, dots it with this token's q and the
 * next token's k; every row's numbers depend only on its inputs, so any split of rows, any ISA and any
 * batch give the same bits. Against float64 it is as close as llama.cpp's order (docs/KERNELS.md). */
static float dn_dot16(const float *x, const float *y, int n) {
    float p[16] = {0};
    for (int i = 0; i < n; i++) p[i & 15] = fmaf(x[i], y[i], p[i & 15]);
    return fdot_reduce16(p);
}

static void fused_heads(void *ctx, int64_t b, int64_t e, int thread) {
    const DeltaNetArgs *a = ((const DnJob *)ctx)->a;
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head;
    const float scale = 1.0f / sqrtf((float)dk);
    for (int64_t j = b; j < e; j++) {
        float *s = head_state(a, j);
        for (int t = 0; t < a->T; t++) {
            const DnTok tk = head_token(a, j, t);
            const float *q = tk.q, *k = tk.k, *v = tk.v;
            const float decay = tk.decay, beta = tk.beta;
            float *o = tk.o;
            for (int x = 0; x < dv; x++) {
                float *row = s + (int64_t)x * dk;
                const float delta = (v[x] - decay * dn_dot16(row, k, dk)) * beta;
                for (int i = 0; i < dk; i++) row[i] = fmaf(k[i], delta, decay * row[i]);
                o[x] = dn_dot16(row, q, dk) * scale;
            }
            if (a->steps) memcpy(a->steps + ((int64_t)t * H + j) * dv * dk, s, sizeof(float) * (size_t)dv * dk);
        }
    }
}

void deltanet_fused_ref(const OpCtx *c, const DeltaNetArgs *a) {
    DnJob j = {a, NULL};
    pool_for(c->pool, a->n_v_head, 1, fused_heads, &j);
}

/* Per-thread scratch of the chunked form, allocated per call (the reference is not on the hot path). */
typedef struct ChunkScratch {
    float *G, *A, *U, *W, *Vn; /* [C], [C][C], [C][dv], [C][dk], [C][dv] */
} ChunkScratch;

static size_t chunk_scratch_floats(int dk, int dv) {
    const size_t CS = DELTANET_CHUNK;
    return CS + CS * CS + CS * (size_t)dv + CS * (size_t)dk + CS * (size_t)dv;
}

static void chunked_heads(void *ctx, int64_t b, int64_t e, int thread) {
    const DnJob *job = ctx;
    const DeltaNetArgs *a = job->a;
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head, CS = DELTANET_CHUNK;
    const float scale = 1.0f / sqrtf((float)dk);
    /* the OpCtx scratch when it has room for every thread (the forward pass reserves it), else the heap */
    float *mem = job->scratch ? job->scratch + (size_t)thread * chunk_scratch_floats(dk, dv)
                              : malloc(sizeof(float) * chunk_scratch_floats(dk, dv));
    if (!mem) abort();
    ChunkScratch sc = {mem, mem + CS, mem + CS + CS * CS, mem + CS + CS * CS + CS * dv,
                       mem + CS + CS * CS + CS * dv + CS * dk};
    for (int64_t j = b; j < e; j++) {
        float *S = head_state(a, j); /* S[c][i] = S_math[i][c] */
        const int kh = key_head(a, (int)j);
#define QROW(t) (a->q + ((int64_t)(t) * a->n_k_head + kh) * dk)
#define KROW(t) (a->k + ((int64_t)(t) * a->n_k_head + kh) * dk)
#define VROW(t) (a->v + ((int64_t)(t) * H + j) * dv)
#define OROW(t) (a->out + ((int64_t)(t) * H + j) * dv)
        for (int t0 = 0; t0 < a->T; t0 += CS) {
            const int C = a->T - t0 < CS ? a->T - t0 : CS;
            float gsum = 0.0f;
            for (int r = 0; r < C; r++) {
                gsum += a->g[(int64_t)(t0 + r) * H + j];
                sc.G[r] = gsum;
            }
            /* A (strictly lower) and the forward substitution for U and W together */
            for (int r = 0; r < C; r++) {
                const float br = a->beta[(int64_t)(t0 + r) * H + j];
                for (int cc = 0; cc < r; cc++)
                    sc.A[r * CS + cc] = br * dotf(KROW(t0 + r), KROW(t0 + cc), dk) * expf(sc.G[r] - sc.G[cc]);
                float *u = sc.U + (int64_t)r * dv, *w = sc.W + (int64_t)r * dk;
                const float *v = VROW(t0 + r), *k = KROW(t0 + r);
                const float wb = br * expf(sc.G[r]);
                for (int x = 0; x < dv; x++) u[x] = br * v[x];
                for (int x = 0; x < dk; x++) w[x] = wb * k[x];
                for (int cc = 0; cc < r; cc++) {
                    const float m = sc.A[r * CS + cc];
                    const float *uc = sc.U + (int64_t)cc * dv, *wc = sc.W + (int64_t)cc * dk;
                    for (int x = 0; x < dv; x++) u[x] -= m * uc[x];
                    for (int x = 0; x < dk; x++) w[x] -= m * wc[x];
                }
            }
            /* Vnew = U − W S and the outputs, both against the chunk's starting state */
            for (int r = 0; r < C; r++) {
                float *vn = sc.Vn + (int64_t)r * dv;
                const float *w = sc.W + (int64_t)r * dk;
                for (int x = 0; x < dv; x++) vn[x] = sc.U[(int64_t)r * dv + x] - dotf(S + (int64_t)x * dk, w, dk);
            }
            for (int r = 0; r < C; r++) {
                const float *q = QROW(t0 + r);
                float *o = OROW(t0 + r);
                const float eg = expf(sc.G[r]);
                for (int x = 0; x < dv; x++) o[x] = eg * dotf(S + (int64_t)x * dk, q, dk);
                for (int cc = 0; cc <= r; cc++) {
                    const float m = dotf(q, KROW(t0 + cc), dk) * expf(sc.G[r] - sc.G[cc]);
                    const float *vn = sc.Vn + (int64_t)cc * dv;
                    for (int x = 0; x < dv; x++) o[x] += m * vn[x];
                }
                for (int x = 0; x < dv; x++) o[x] *= scale;
            }
            /* state update */
            const float glast = sc.G[C - 1], el = expf(glast);
            for (int x = 0; x < dv; x++) {
                float *row = S + (int64_t)x * dk;
                for (int i = 0; i < dk; i++) row[i] *= el;
            }
            for (int cc = 0; cc < C; cc++) {
                const float f = expf(glast - sc.G[cc]);
                const float *k = KROW(t0 + cc), *vn = sc.Vn + (int64_t)cc * dv;
                for (int x = 0; x < dv; x++) {
                    float *row = S + (int64_t)x * dk;
                    const float m = f * vn[x];
                    for (int i = 0; i < dk; i++) row[i] += m * k[i];
                }
            }
        }
#undef QROW
#undef KROW
#undef VROW
#undef OROW
    }
    if (!job->scratch) free(mem);
}

void deltanet_chunked_ref(const OpCtx *c, const DeltaNetArgs *a) {
    ASSERT(!a->steps);
    DnJob j = {a, NULL};
    const size_t need = chunk_scratch_floats(a->d_k, a->d_v) * sizeof(float) * (size_t)pool_size(c->pool);
    if (c->scratch && ((uintptr_t)c->scratch & 63) == 0 && c->scratch_bytes >= need) j.scratch = c->scratch;
    pool_for(c->pool, a->n_v_head, 1, chunked_heads, &j);
}

const Ops ops_ref = {
    .name = "ref",
    .matmul = matmul_ref,
    .conv_silu = conv_silu_ref,
    .deltanet_recurrent = deltanet_recurrent_ref,
    .deltanet_chunked = deltanet_chunked_ref,
    .deltanet_fused = deltanet_fused_ref,
    .attention = attention_ref,
    .silu_rows = silu_rows_ref,
    .swiglu_rows = swiglu_rows_ref,
};
