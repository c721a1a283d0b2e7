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

/* Fused (the fast arithmetic's form; ops.h has its state layout). The physical state is
 * S = c·(S̃ + Σ_{j<n} K_j D_jᵀ): a base S̃ that changes only when a chunk of DN_FUSED_C tokens is complete
 * (counted from the sequence's start) or when the scale has to be folded in, and the chunk's pending keys
 * and scaled updates. The decay is the scalar c; the dots with S̃ read the base, which a batch can take as a
 * GEMM over all of a chunk's tokens (deltanet_simd.h), and no token writes S̃. Per token (e = e^g):
 *   c' = c·e; if c' leaves [2⁻⁶⁰, 2⁶⁰] (or is NaN): S̃ ← c'·(S̃ + Σ_j K_j D_jᵀ), n = 0, c' = 1
 *   A_x = S̃[·][x]·k, B_x = S̃[·][x]·q           (fused_dots: 4 partials over key blocks, (0+1)+(2+3))
 *   u_x = Σ_{j<n} (K_j·k) D_j[x]                    (dn_kdot; fused multiply-adds over j from 0)
 *   δ_x = (v_x − c'·(A_x + u_x))·β,  D_n = δ/c', K_n = k, n += 1
 *   o_x = (B_x + Σ_{j<n} (K_j·q) D_j[x])·(c'·s)   (s = 1/√d_k; the new D_n included)
 *   if n = DN_FUSED_C: S̃ ← S̃ + Σ_j K_j D_jᵀ (per element, fused, j in order), n = 0
 * Every number depends on the sequence only (not on how it is cut into batches), so prefill, chunked
 * prefill and decode give the same bits; every value x's numbers depend only on its own inputs and the
 * keys, so any split of values and any ISA do too. Against float64 it is as close as llama.cpp's order
 * (tests/test_kernels_seq.c, docs/KERNELS.md). */
static float dn_kdot(const float *x, const float *y, int n) {
    float p[16] = {0};
    for (int i = 0; i < n; i++) p[i & 15] = fmaf(x[i], y[i], p[i & 15]);
    return fdot_reduce16(p);
}

static void fused_dots(const float *S, const float *y, int dk, int dv, float *acc) {
    for (int x = 0; x < dv; x++) {
        float p[4] = {0};
        for (int b = 0; b < 4; b++)
            for (int i = b * dk / 4; i < (b + 1) * dk / 4; i++) p[b] = fmaf(S[dn_fused_at(dk, dv, i, x)], y[i], p[b]);
        acc[x] = (p[0] + p[1]) + (p[2] + p[3]);
    }
}

/* S̃ ← S̃ + Σ_{j<n} K_j D_jᵀ, then (scale) × c */
static void fused_fold(float *S, const float *K, const float *D, int n, int dk, int dv, bool scale, float c) {
    for (int i = 0; i < dk; i++)
        for (int x = 0; x < dv; x++) {
            float *p = &S[dn_fused_at(dk, dv, i, x)], v = *p;
            for (int j = 0; j < n; j++) v = fmaf(K[(size_t)j * dk + i], D[(size_t)j * dv + x], v);
            *p = scale ? c * v : v;
        }
}

static void fused_heads(void *ctx, int64_t b, int64_t e, int thread) {
    (void)thread;
    const DeltaNetArgs *a = ((const DnJob *)ctx)->a;
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head, C = DN_FUSED_C;
    const size_t hb = DN_FUSED_HEAD(dk, dv), nS = (size_t)dk * dv;
    const float s = 1.0f / sqrtf((float)dk);
    float *A = malloc(sizeof(float) * (size_t)(2 * dv + 2 * C));
    if (!A) abort();
    float *B = A + dv, *wk = B + dv, *wq = wk + C;
    for (int64_t j = b; j < e; j++) {
        float *S = a->state + (size_t)j * hb, *tail = a->state + (size_t)H * hb + 2 * j;
        const float *src = a->state_in ? a->state_in : a->state;
        if (src != a->state) memcpy(S, src + (size_t)j * hb, sizeof(float) * hb);
        float *K = S + nS, *D = K + (size_t)C * dk, c = src[(size_t)H * hb + 2 * j];
        int n = dn_fused_count(src[(size_t)H * hb + 2 * j + 1]);
        for (int t = 0; t < a->T; t++) {
            const DnTok tk = head_token(a, j, t);
            float ct = c * tk.decay;
            if (dn_fused_rescales(ct)) fused_fold(S, K, D, n, dk, dv, true, ct), n = 0, ct = 1.0f;
            const float ci = 1.0f / ct, os = ct * s;
            fused_dots(S, tk.k, dk, dv, A);
            fused_dots(S, tk.q, dk, dv, B);
            for (int i = 0; i < n; i++) wk[i] = dn_kdot(K + (size_t)i * dk, tk.k, dk);
            for (int x = 0; x < dv; x++) {
                float u = 0.0f;
                for (int i = 0; i < n; i++) u = fmaf(wk[i], D[(size_t)i * dv + x], u);
                D[(size_t)n * dv + x] = ((tk.v[x] - ct * (A[x] + u)) * tk.beta) * ci;
            }
            memcpy(K + (size_t)n * dk, tk.k, sizeof(float) * (size_t)dk);
            n++;
            for (int i = 0; i < n; i++) wq[i] = dn_kdot(K + (size_t)i * dk, tk.q, dk);
            for (int x = 0; x < dv; x++) {
                float u = 0.0f;
                for (int i = 0; i < n; i++) u = fmaf(wq[i], D[(size_t)i * dv + x], u);
                tk.o[x] = (B[x] + u) * os;
            }
            c = ct;
            if (n == C) fused_fold(S, K, D, n, dk, dv, false, 0.0f), n = 0;
        }
        tail[0] = c, tail[1] = (float)n;
    }
    free(A);
}

void deltanet_fused_ref(const OpCtx *c, const DeltaNetArgs *a) {
    ASSERT(!a->steps);
    DnJob j = {a, NULL};
    pool_for(c->pool, a->n_v_head, 1, fused_heads, &j);
}

void deltanet_fused_to_state(const float *fused, float *state, int n_v_head, int d_k, int d_v) {
    const size_t hb = DN_FUSED_HEAD(d_k, d_v), n = (size_t)d_k * (size_t)d_v;
    for (int j = 0; j < n_v_head; j++) {
        const float *S = fused + (size_t)j * hb, *K = S + n, *D = K + (size_t)DN_FUSED_C * d_k;
        const float c = fused[(size_t)n_v_head * hb + 2 * j];
        const int np = dn_fused_count(fused[(size_t)n_v_head * hb + 2 * j + 1]);
        for (int i = 0; i < d_k; i++)
            for (int x = 0; x < d_v; x++) {
                float v = S[dn_fused_at(d_k, d_v, i, x)];
                for (int p = 0; p < np; p++) v = fmaf(K[(size_t)p * d_k + i], D[(size_t)p * d_v + x], v);
                state[(size_t)j * n + (size_t)x * d_k + i] = c * v;
            }
    }
}

void deltanet_state_to_fused(const float *state, float *fused, int n_v_head, int d_k, int d_v) {
    const size_t hb = DN_FUSED_HEAD(d_k, d_v), n = (size_t)d_k * (size_t)d_v;
    memset(fused, 0, sizeof(float) * DELTANET_FUSED_FLOATS(n_v_head, d_k, d_v));
    for (int j = 0; j < n_v_head; j++) {
        for (int i = 0; i < d_k; i++)
            for (int x = 0; x < d_v; x++)
                fused[(size_t)j * hb + dn_fused_at(d_k, d_v, i, x)] = state[(size_t)j * n + (size_t)x * d_k + i];
        fused[(size_t)n_v_head * hb + 2 * j] = 1.0f;
    }
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

void deltanet_seqs_ref(const OpCtx *c, const DeltaNetArgs *a, const DeltaNetForm *form, int n) {
    for (int i = 0; i < n; i++) {
        if (form[i] == DN_FORM_FUSED) deltanet_fused_ref(c, &a[i]);
        else if (form[i] == DN_FORM_CHUNKED) deltanet_chunked_ref(c, &a[i]);
        else deltanet_recurrent_ref(c, &a[i]);
    }
}

const Ops ops_ref = {
    .name = "ref",
    .matmul = matmul_ref,
    .conv_silu = conv_silu_ref,
    .deltanet_recurrent = deltanet_recurrent_ref,
    .deltanet_chunked = deltanet_chunked_ref,
    .deltanet_fused = deltanet_fused_ref,
    .conv_silu_seqs = conv_silu_seqs_ref,
    .deltanet_seqs = deltanet_seqs_ref,
    .attention = attention_ref,
    .silu_rows = silu_rows_ref,
    .swiglu_rows = swiglu_rows_ref,
    .matmul_swiglu = matmul_swiglu_ref,
    .norm_rows = norm_rows_ref,
    .mul_sigmoid = mul_sigmoid_ref,
};
