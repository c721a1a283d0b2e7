/* deltanet_simd.h — the delta-net scan kernels, written once against simd16.h and compiled by
 * deltanet_avx512.c and deltanet_avx2.c (SEQ_FN names the functions of each). docs/KERNELS.md has the
 * measurements.
 *
 * Recurrent form (bit-identical to deltanet_recurrent_ref). Every row c of a head's transposed state (a
 * column of S) evolves on its own: per token, decay it by exp(g), δ = (v[c] − row·k)·β, row += δ·k (fused),
 * o[c] = row·q / √d. So rows can be taken in any grouping and run through the tokens; per token and group
 * of 16 rows:
 *   pass 1: each row decayed and dotted with k in fdot_vec_f32's order (4 accumulators of 16 lanes over
 *           64-element steps, folded (a0+a2)+(a1+a3)); the 16 rows' 16-lane sums reduced together with
 *           v16_reduce16x16 (the same additions as fdot_reduce16, 16 rows at once); leftovers (d_k % 64)
 *           added one by one after that, as fdot_vec_f32 does;
 *   δ for the 16 rows as one vector ((v − dot)·β, two roundings as in the reference);
 *   pass 2: each row decayed again (the same product, cheaper than storing it), updated with a fused
 *           multiply-add, stored, and dotted with q the same way; o for the 16 rows as one vector.
 * Four such groups (64 rows, 32 KiB at d_k = 128: L1) go through a token back to back so that one group's
 * reduction chain overlaps the others' arithmetic; tokens are taken 64 at a time over all the row groups
 * of a work item (one head, unless there are fewer heads than 2 × threads), so the k, q, v pieces of
 * those tokens are read from memory once and from L2 after that; the next token's pieces are prefetched
 * (they lie 8 KiB+ apart, and the hardware prefetchers stop at page boundaries).
 *
 * Chunked form (WY/UT, the math of deltanet_chunked_ref, float accumulation): per head, the state is
 * transposed once into math layout S[i][x] and every step of a chunk is a small row-major GEMM
 * (gemm_simd.h: 4×64 register tiles on AVX-512, broadcast × row, triangular shapes cut at 16 columns):
 *   Kᵀ (transposed chunk of keys), KKᵀ → A, T = (I + A)⁻¹ by forward substitution (64×64),
 *   U = T·diag(β)·V, W' = −T·diag(β e^G)·K, Vnew = U + W'·S,
 *   O = [e^G q·s | (q·k e^{ΔG}) masked ·s] · [S ; Vnew]   (one GEMM over d_k + C, s = 1/√d),
 *   S = e^{G_C}·S + (Kᵀ·diag(e^{G_C − G})) · Vnew.
 * The within-chunk decays e^{G_r − G_c} use the SIMD exp polynomial (≤ 1.5 ulp). Scratch comes from OpCtx
 * (deltanet_scratch_bytes); when the caller gave too little the reference runs instead.
 *
 * Fused form (the fast arithmetic's; its own state layout, kernels/ops.h): a chunk's dots with the base state
 * as one GEMM, the pending updates' corrections per token, the fold at the chunk's end — its section below. */
#include "base/err.h"
#include "base/fdot.h"
#include "kernels/cpu/seq_kernels.h"
#include "kernels/cpu/gemm_simd.h"
#include "kernels/cpu/simd16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline int dn_key_head(const DeltaNetArgs *a, int j) {
    return a->grouped ? j / (a->n_v_head / a->n_k_head) : j % a->n_k_head;
}

/* ---- recurrent ------------------------------------------------------------------------------------------ */

/* One token through rows [0, nr) of a block (nr ≤ 16). NV = d_k / 16 (a compile-time constant in the
 * specialised copies); NF = the V16 chunks inside whole 64-element steps (4·(d_k/64)). */
SIMD_INLINE void rec_token(float *S, int nr, int dk, const int NV, const int NF, const float *k, const float *q,
                           const float *v, float decay, float beta, float scale, float *o) {
    V16 part[16];
    const V16 dec = v16_set1(decay);
    for (int r = 0; r < nr; r++) { /* decay (stored), dot with k */
        float *row = S + (int64_t)r * dk;
        V16 acc[4] = {v16_zero(), v16_zero(), v16_zero(), v16_zero()};
#pragma GCC unroll 32
        for (int c = 0; c < NF; c++) acc[c & 3] = v16_fmadd(v16_mul(v16_load(row + 16 * c), dec), v16_load(k + 16 * c), acc[c & 3]);
        part[r] = v16_add(v16_add(acc[0], acc[2]), v16_add(acc[1], acc[3]));
    }
    for (int r = nr; r < 16; r++) part[r] = v16_zero();
    V16 dots = v16_reduce16x16(part);
    float tmp[16];
    if (NF * 16 < dk) { /* leftovers of fdot_vec_f32: one by one, products rounded */
        v16_store(tmp, dots);
        for (int r = 0; r < nr; r++) {
            const float *row = S + (int64_t)r * dk;
            float s = tmp[r];
            for (int i = NF * 16; i < dk; i++) s += (row[i] * decay) * k[i];
            tmp[r] = s;
        }
        dots = v16_load(tmp);
    }
    v16_store(tmp, v16_mul(v16_sub(v16_load_n(v, nr), dots), v16_set1(beta)));
    for (int r = 0; r < nr; r++) {
        float *row = S + (int64_t)r * dk;
        const V16 d = v16_set1(tmp[r]);
        V16 acc[4] = {v16_zero(), v16_zero(), v16_zero(), v16_zero()};
#pragma GCC unroll 32
        for (int c = 0; c < NV; c++) {
            const V16 x = v16_fmadd(v16_load(k + 16 * c), d, v16_mul(v16_load(row + 16 * c), dec));
            v16_store(row + 16 * c, x);
            if (c < NF) acc[c & 3] = v16_fmadd(x, v16_load(q + 16 * c), acc[c & 3]);
        }
        part[r] = v16_add(v16_add(acc[0], acc[2]), v16_add(acc[1], acc[3]));
    }
    dots = v16_reduce16x16(part);
    if (NF * 16 < dk) {
        v16_store(tmp, dots);
        for (int r = 0; r < nr; r++) {
            const float *row = S + (int64_t)r * dk;
            float s = tmp[r];
            for (int i = NF * 16; i < dk; i++) s += row[i] * q[i];
            tmp[r] = s;
        }
        dots = v16_load(tmp);
    }
    v16_store_n(o, v16_mul(dots, v16_set1(scale)), nr);
}

typedef struct RecJob {
    const DeltaNetArgs *a;
    int n_split, split_rows; /* work items per head, rows per item (a multiple of the kernel's row unit) */
} RecJob;

/* Work items of whole heads unless that leaves threads idle (few heads, many threads): then heads split into
 * row ranges of a multiple of `unit` rows. */
static RecJob dn_split(const DeltaNetArgs *a, int nth, int unit) {
    const int n_grp = (a->d_v + unit - 1) / unit;
    int n_split = (2 * nth + a->n_v_head - 1) / a->n_v_head;
    if (n_split > n_grp) n_split = n_grp;
    if (n_split < 1) n_split = 1;
    RecJob job = {a, n_split, (n_grp + n_split - 1) / n_split * unit};
    job.n_split = (a->d_v + job.split_rows - 1) / job.split_rows;
    return job;
}

/* item it of a job: head *j, rows (values) [*c_beg, *c_end) */
static void dn_range(const RecJob *job, int64_t it, int *j, int *c_beg, int *c_end) {
    *j = (int)(it / job->n_split), *c_beg = (int)(it % job->n_split) * job->split_rows;
    *c_end = job->a->d_v - *c_beg < job->split_rows ? job->a->d_v : *c_beg + job->split_rows;
}

/* dn_range; out of place, those rows of state_in copied to state */
static void dn_item(const RecJob *job, int64_t it, int *j, int *c_beg, int *c_end) {
    const DeltaNetArgs *a = job->a;
    dn_range(job, it, j, c_beg, c_end);
    if (a->state_in && a->state_in != a->state) {
        const int64_t off = ((int64_t)*j * a->d_v + *c_beg) * a->d_k;
        memcpy(a->state + off, a->state_in + off, sizeof(float) * (size_t)(*c_end - *c_beg) * (size_t)a->d_k);
    }
}

/* Rows run through a token together: four 16-row groups back to back, so that one group's reductions (a
 * dependency chain) overlap the others' multiply-adds; 64 rows of 128 keys are 32 KiB, which stays in L1. */
#define REC_ROWS 64
/* Tokens per pass over an item's row groups: the k, q, v rows of REC_T tokens stay in L2 while every row
 * group of the head reads them (k and q of one head are 512-byte pieces 8 KiB apart in memory). */
#define REC_T 64
#define REC_PF 1 /* prefetch distance, tokens */

SIMD_INLINE void rec_rows(const DeltaNetArgs *a, int j, int c0, int nr, int t0, int t1, const int NV) {
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head, Hk = a->n_k_head;
    const int NF = (NV / 4) * 4; /* a constant with NV */
    const float scale = 1.0f / sqrtf((float)dv);
    const int kh = dn_key_head(a, j);
    float *S = a->state + ((int64_t)j * dv + c0) * dk;
    for (int t = t0; t < t1; t++) {
        const int64_t tk = ((int64_t)t * Hk + kh) * dk, tv = ((int64_t)t * H + j) * dv + c0;
        const float decay = expf(a->g[(int64_t)t * H + j]), beta = a->beta[(int64_t)t * H + j];
        if (t + REC_PF < a->T) { /* a later token's k, q, v, out: pieces 8+ KiB apart, which the hardware
                                   * prefetchers do not follow across pages */
            const float *kn = a->k + tk + (int64_t)REC_PF * Hk * dk, *qn = a->q + tk + (int64_t)REC_PF * Hk * dk,
                        *vn = a->v + tv + (int64_t)REC_PF * H * dv;
            float *on = a->out + tv + (int64_t)REC_PF * H * dv;
            for (int i = 0; i < dk; i += 16) __builtin_prefetch(kn + i), __builtin_prefetch(qn + i);
            for (int i = 0; i < nr; i += 16) __builtin_prefetch(vn + i), __builtin_prefetch(on + i, 1);
        }
        for (int r0 = 0; r0 < nr; r0 += 16)
            rec_token(S + r0 * (int64_t)dk, nr - r0 < 16 ? nr - r0 : 16, dk, NV, NF, a->k + tk, a->q + tk, a->v + tv + r0,
                      decay, beta, scale, a->out + tv + r0);
        if (a->steps) /* the rows after this token */
            memcpy(a->steps + (((int64_t)t * H + j) * dv + c0) * dk, S, sizeof(float) * (size_t)nr * (size_t)dk);
    }
}

SIMD_INLINE void rec_item(const DeltaNetArgs *a, int j, int c_beg, int c_end, const int NV) {
    for (int t0 = 0; t0 < a->T; t0 += REC_T) {
        const int t1 = a->T - t0 < REC_T ? a->T : t0 + REC_T;
        for (int c0 = c_beg; c0 < c_end; c0 += REC_ROWS)
            rec_rows(a, j, c0, c_end - c0 < REC_ROWS ? c_end - c0 : REC_ROWS, t0, t1, NV);
    }
}

static void rec_items(void *ctx, int64_t b, int64_t e, int thread) {
    (void)thread;
    const RecJob *job = ctx;
    const DeltaNetArgs *a = job->a;
    for (int64_t it = b; it < e; it++) {
        int j, c_beg, c_end;
        dn_item(job, it, &j, &c_beg, &c_end);
        switch (a->d_k / 16) { /* specialised copies for the head sizes in use */
        case 1: rec_item(a, j, c_beg, c_end, 1); break;
        case 2: rec_item(a, j, c_beg, c_end, 2); break;
        case 4: rec_item(a, j, c_beg, c_end, 4); break;
        case 8: rec_item(a, j, c_beg, c_end, 8); break;
        case 16: rec_item(a, j, c_beg, c_end, 16); break;
        default: rec_item(a, j, c_beg, c_end, a->d_k / 16); break;
        }
    }
}

void SEQ_FN(deltanet_recurrent)(const OpCtx *c, const DeltaNetArgs *a) {
    if (a->d_k % 16 != 0 || a->T < 1) {
        deltanet_recurrent_ref(c, a);
        return;
    }
    RecJob job = dn_split(a, pool_size(c->pool), REC_ROWS);
    pool_for(c->pool, (int64_t)a->n_v_head * job.n_split, 1, rec_items, &job);
}

/* ---- fused (the fast arithmetic's form; deltanet_ref.c has the math) ------------------------------------------ */

/* Per work item (a head, or a range of its 64-value panels) and panel: the tokens go in segments that share
 * a base S̃ (up to the end of the chunk, or to a token that folds the scale in); a segment's dots with S̃ are
 * one GEMM (its k and q rows × the panel, FU_R rows × FU_NG groups of 16 values per register tile, four
 * partial sums over key blocks), so a panel element is read once per FU_R rows instead of written and read once per
 * token; then each token's corrections from the pending keys (O(n·d)), and at a chunk's end the fold
 * S̃ += Σ K_j D_jᵀ (one read and write of the panel per chunk). Values are in the lanes: no reductions
 * across lanes except the pending keys' dots (16 at once, v16_reduce16x16). */
#if defined(__AVX512F__)
#define FU_R 4  /* GEMM tile: token rows */
#define FU_NG 4 /* GEMM tile: 16-value groups (FU_R × FU_NG accumulators) */
#else
#define FU_R 2  /* a V16 is two of AVX2's 16 YMM registers */
#define FU_NG 1
#endif
#define FU_C DN_FUSED_C
#define FU_COLS DN_FUSED_PANEL
#define FU_BLK (2 * FU_COLS) /* values per token loop: the pending keys' dots are shared by them */

/* out[r][16g + l] = the dot of panel column 16g + l with y[r], for R rows and NG groups: four partial sums
 * over the key blocks of dk / 4 (one accumulator each in turn), added (0+1)+(2+3) */
SIMD_INLINE void fu_tile(const float *S, int64_t ld, int dk, const int R, const int NG, const float *const *y, float *out,
                         int ldo) {
    V16 part[2][FU_R][FU_NG];
    for (int b = 0; b < 4; b++) {
        V16 acc[FU_R][FU_NG];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) acc[r][g] = v16_zero();
        for (int i = b * dk / 4; i < (b + 1) * dk / 4; i++) {
            const float *row = S + (int64_t)i * ld;
            V16 x[FU_NG];
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) x[g] = v16_load(row + 16 * g);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const V16 bv = v16_set1(y[r][i]);
#pragma GCC unroll 4
                for (int g = 0; g < NG; g++) acc[r][g] = v16_fmadd(x[g], bv, acc[r][g]);
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) {
                if (b & 1) part[b >> 1][r][g] = v16_add(part[b >> 1][r][g], acc[r][g]);
                else part[b >> 1][r][g] = acc[r][g];
            }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) v16_store(out + r * ldo + 16 * g, v16_add(part[0][r][g], part[1][r][g]));
}

/* R rows against the panel's ng groups, FU_NG at a time */
SIMD_INLINE void fu_rows(const float *S, int64_t ld, int dk, int ng, const int R, const float *const *y, float *out, int ldo) {
    int g = 0;
    for (; g + FU_NG <= ng; g += FU_NG) fu_tile(S + 16 * g, ld, dk, R, FU_NG, y, out + 16 * g, ldo);
    for (; g < ng; g++) fu_tile(S + 16 * g, ld, dk, R, 1, y, out + 16 * g, ldo);
}

/* rows y[0 … nr) against the panel's ng groups into out[nr][ldo]: tiles of FU_R rows, then the rest */
static void fu_gemm(const float *S, int64_t ld, int dk, int ng, const float *const *y, int nr, float *out, int ldo) {
    int r0 = 0;
    for (; r0 + FU_R <= nr; r0 += FU_R) fu_rows(S, ld, dk, ng, FU_R, y + r0, out + r0 * ldo, ldo);
    switch (nr - r0) { /* a decode step's two rows (k, q) land here */
#if FU_R > 3
    case 3: fu_rows(S, ld, dk, ng, 3, y + r0, out + r0 * ldo, ldo); break;
#endif
#if FU_R > 2
    case 2: fu_rows(S, ld, dk, ng, 2, y + r0, out + r0 * ldo, ldo); break;
#endif
    case 1: fu_rows(S, ld, dk, ng, 1, y + r0, out + r0 * ldo, ldo); break;
    default: break;
    }
}

/* The panel's S̃ += Σ_{j<n} K_j D_jᵀ (D_j: the panel's values of row j, stride ldd), then × c when scale. Four
 * keys × NG groups at a time (independent chains over j). */
SIMD_INLINE void fu_fold_ng(float *S, int64_t ld, int dk, const int NG, const float *const *kp, const float *D, int64_t ldd,
                            int n, bool scale, float c) {
    const V16 cv = v16_set1(c);
    for (int i0 = 0; i0 < dk; i0 += 4) {
        V16 x[4][4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) x[u][g] = v16_load(S + (int64_t)(i0 + u) * ld + 16 * g);
        for (int j = 0; j < n; j++) {
            V16 d[4];
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) d[g] = v16_load(D + (int64_t)j * ldd + 16 * g);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                const V16 kb = v16_set1(kp[j][i0 + u]);
#pragma GCC unroll 4
                for (int g = 0; g < NG; g++) x[u][g] = v16_fmadd(kb, d[g], x[u][g]);
            }
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
#pragma GCC unroll 4
            for (int g = 0; g < NG; g++) v16_store(S + (int64_t)(i0 + u) * ld + 16 * g, scale ? v16_mul(cv, x[u][g]) : x[u][g]);
    }
}

static void fu_fold(float *S, int64_t ld, int dk, int ng, const float *const *kp, const float *D, int64_t ldd, int n,
                    bool scale, float c) {
#if defined(__AVX512F__)
    switch (ng) {
    case 4: fu_fold_ng(S, ld, dk, 4, kp, D, ldd, n, scale, c); return;
    case 3: fu_fold_ng(S, ld, dk, 3, kp, D, ldd, n, scale, c); return;
    case 2: fu_fold_ng(S, ld, dk, 2, kp, D, ldd, n, scale, c); return;
    default: break;
    }
#endif
    for (int g = 0; g < ng; g++) fu_fold_ng(S + 16 * g, ld, dk, 1, kp, D + 16 * g, ldd, n, scale, c);
}

/* wk[j] = dn_kdot(kp[j], k) for j < n and wq[j] = dn_kdot(kp[j], q) for j ≤ n with kp[n] = k (n < 16): the
 * pending keys read once for both, 16 rows' sums reduced at once */
static void fu_kdots(const float *const *kp, int n, const float *k, const float *q, int dk, float *wk, float *wq) {
    V16 pk[16], pq[16];
    for (int j = 0; j < n; j++) { /* each key's sums in registers (an array element's chain through memory
                                   * cost 4× the whole step) */
        V16 ak = v16_zero(), aq = v16_zero();
        for (int i = 0; i < dk; i += 16) {
            const V16 x = v16_load(kp[j] + i);
            ak = v16_fmadd(x, v16_load(k + i), ak);
            aq = v16_fmadd(x, v16_load(q + i), aq);
        }
        pk[j] = ak, pq[j] = aq;
    }
    V16 kq = v16_zero();
    for (int i = 0; i < dk; i += 16) kq = v16_fmadd(v16_load(k + i), v16_load(q + i), kq);
    pq[n] = kq, pk[n] = v16_zero();
    for (int j = n + 1; j < 16; j++) pk[j] = pq[j] = v16_zero();
    v16_store(wk, v16_reduce16x16(pk));
    v16_store(wq, v16_reduce16x16(pq));
}

/* u_g = Σ_{i<n} w_i·D_i[16g …] for the block's NG groups (i outer: the groups' chains interleave) */
SIMD_INLINE void fu_corr_ng(const float *w, const float *D, int64_t ldd, int n, const int NG, V16 *u) {
#pragma GCC unroll 8
    for (int g = 0; g < NG; g++) u[g] = v16_zero();
    for (int i = 0; i < n; i++) {
        const V16 wv = v16_set1(w[i]);
#pragma GCC unroll 8
        for (int g = 0; g < NG; g++) u[g] = v16_fmadd(wv, v16_load(D + (int64_t)i * ldd + 16 * g), u[g]);
    }
}
static void fu_corr(const float *w, const float *D, int64_t ldd, int n, int ng, V16 *u) {
    if (ng == FU_BLK / 16) fu_corr_ng(w, D, ldd, n, FU_BLK / 16, u);
    else
        for (int g = 0; g < ng; g++) fu_corr_ng(w, D + 16 * g, ldd, n, 1, u + g);
}

/* A block of values (c0 … c0 + nv − 1, nv ≤ FU_BLK, whole panels) of head j through every token: the head's
 * S̃ block at Sh (panels from c0), the pending D at D (columns from c0, row stride d_v), the state's pending
 * keys Kst (n0 of them), the scale c0s before the batch. */
static void fu_block(const DeltaNetArgs *a, int j, int c0, int nv, float *Sh, float *D, const float *Kst, int n0,
                     float c0s, float *Kw, float *tailw) {
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head, ng = nv / 16;
    const int64_t ldk = (int64_t)a->n_k_head * dk, ldv = (int64_t)H * dv;
    const float s = 1.0f / sqrtf((float)dk);
    const float *K = a->k + (int64_t)dn_key_head(a, j) * dk, *Q = a->q + (int64_t)dn_key_head(a, j) * dk;
    const float *kp[FU_C], *rows[2 * FU_C];
    float AB[2 * FU_C * FU_BLK] __attribute__((aligned(64))), wk[FU_C][16] __attribute__((aligned(64))),
        wq[FU_C][16] __attribute__((aligned(64))), cts[FU_C];
    V16 u[FU_BLK / 16];
    for (int i = 0; i < n0; i++) kp[i] = Kst + (int64_t)i * dk;
    int n = n0;
    float c = c0s;
#define FU_PANELS(CALL)                                                                                                \
    for (int p0 = 0; p0 < nv; p0 += FU_COLS) {                                                                         \
        const int pw = nv - p0 < FU_COLS ? nv - p0 : FU_COLS;                                                          \
        float *S = Sh + (int64_t)(c0 + p0) * dk;                                                                       \
        CALL;                                                                                                          \
    }
    for (int t = 0; t < a->T;) {
        float ct = c * expf(a->g[(int64_t)t * H + j]);
        if (dn_fused_rescales(ct)) {
            FU_PANELS(fu_fold(S, pw, dk, pw / 16, kp, D + p0, dv, n, true, ct));
            n = 0, ct = 1.0f;
        }
        /* the segment: tokens t … t + m − 1 up to the chunk's end or a token that folds the scale in */
        int m = 1;
        cts[0] = ct;
        for (; m < FU_C - n && t + m < a->T; m++) {
            const float cc = cts[m - 1] * expf(a->g[(int64_t)(t + m) * H + j]);
            if (dn_fused_rescales(cc)) break;
            cts[m] = cc;
        }
        for (int r = 0; r < m; r++) rows[r] = K + (t + r) * ldk, rows[m + r] = Q + (t + r) * ldk;
        for (int r = t + m; r < t + m + FU_C && r < a->T; r++) { /* the next segment's pieces: 8+ KiB apart,
                                                                   * which the hardware prefetchers do not follow */
            for (int i = 0; i < dk; i += 16) __builtin_prefetch(K + r * ldk + i), __builtin_prefetch(Q + r * ldk + i);
            for (int x = 0; x < nv; x += 16)
                __builtin_prefetch(a->v + r * ldv + (int64_t)j * dv + c0 + x),
                    __builtin_prefetch(a->out + r * ldv + (int64_t)j * dv + c0 + x, 1);
        }
        for (int r = 0; r < m; r++) { /* the segment's pending-key dots, off the tokens' dependency chain */
            kp[n + r] = rows[r];
            fu_kdots(kp, n + r, rows[r], rows[m + r], dk, wk[r], wq[r]);
        }
        FU_PANELS(fu_gemm(S, pw, dk, pw / 16, rows, 2 * m, AB + p0, FU_BLK));
        for (int r = 0; r < m; r++, t++) {
            ct = cts[r];
            const float *v = a->v + t * ldv + (int64_t)j * dv + c0;
            float *o = a->out + t * ldv + (int64_t)j * dv + c0;
            const V16 ctv = v16_set1(ct), civ = v16_set1(1.0f / ct), bv = v16_set1(a->beta[(int64_t)t * H + j]),
                      osv = v16_set1(ct * s);
            fu_corr(wk[r], D, dv, n, ng, u);
            for (int g = 0; g < ng; g++) {
                const V16 av = v16_mul(ctv, v16_add(v16_load(AB + r * FU_BLK + 16 * g), u[g]));
                v16_store(D + (int64_t)n * dv + 16 * g, v16_mul(v16_mul(v16_sub(v16_load(v + 16 * g), av), bv), civ));
            }
            if (Kw) memcpy(Kw + (int64_t)n * dk, kp[n], sizeof(float) * (size_t)dk); /* slots ≥ n0 or unread */
            n++; /* kp[n] = k already */
            fu_corr(wq[r], D, dv, n, ng, u);
            for (int g = 0; g < ng; g++)
                v16_store(o + 16 * g, v16_mul(v16_add(v16_load(AB + (m + r) * FU_BLK + 16 * g), u[g]), osv));
            c = ct;
        }
        if (n == FU_C) {
            FU_PANELS(fu_fold(S, pw, dk, pw / 16, kp, D + p0, dv, n, false, 0.0f));
            n = 0;
        }
    }
    if (tailw) tailw[0] = c, tailw[1] = (float)n;
#undef FU_PANELS
}

typedef struct FuJob {
    RecJob r;
    const float *src; /* the state before the batch (state_in, or state) */
} FuJob;

static void fu_items(void *ctx, int64_t b, int64_t e, int thread) {
    (void)thread;
    const FuJob *job = ctx;
    const DeltaNetArgs *a = job->r.a;
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head;
    const size_t hb = DN_FUSED_HEAD(dk, dv), nS = (size_t)dk * dv;
    for (int64_t it = b; it < e; it++) {
        int j, c_beg, c_end;
        dn_range(&job->r, it, &j, &c_beg, &c_end);
        float *blk = a->state + (size_t)j * hb;
        const float *sb = job->src + (size_t)j * hb;
        float *D = blk + nS + (size_t)FU_C * dk;
        if (job->src != a->state) { /* out of place: this item's panels and pending values */
            memcpy(blk + (size_t)c_beg * dk, sb + (size_t)c_beg * dk, sizeof(float) * (size_t)(c_end - c_beg) * dk);
            for (int i = 0; i < FU_C; i++)
                memcpy(D + (size_t)i * dv + c_beg, sb + nS + (size_t)FU_C * dk + (size_t)i * dv + c_beg,
                       sizeof(float) * (size_t)(c_end - c_beg));
        }
        const float c0s = job->src[(size_t)H * hb + 2 * j];
        const int n0 = dn_fused_count(job->src[(size_t)H * hb + 2 * j + 1]);
        const bool own = job->r.n_split == 1; /* the whole head: its keys and scale are this item's to write */
        if (own && job->src != a->state) memcpy(blk + nS, sb + nS, sizeof(float) * (size_t)FU_C * dk);
        for (int c0 = c_beg; c0 < c_end; c0 += FU_BLK)
            fu_block(a, j, c0, c_end - c0 < FU_BLK ? c_end - c0 : FU_BLK, blk, D + c0, sb + nS, n0, c0s,
                     own && c0 == 0 ? blk + nS : NULL, own && c0 == 0 ? a->state + (size_t)H * hb + 2 * j : NULL);
    }
}

/* whether the fused kernel takes a (else the reference runs) */
static bool fu_takes(const DeltaNetArgs *a) { return !(a->d_v % 16 || a->d_k % 16 || a->T < 1 || a->steps); }

/* a's job: items of whole panels */
static FuJob fu_job(const OpCtx *c, const DeltaNetArgs *a) {
    return (FuJob){dn_split(a, pool_size(c->pool), FU_COLS), a->state_in ? a->state_in : a->state};
}

/* after the job's items: when heads were split between items, the pending keys, the scale and the count after
 * the batch (the items read the ones before) */
static void fu_tail(const FuJob *job) {
    if (job->r.n_split == 1) return; /* the items wrote them */
    const DeltaNetArgs *a = job->r.a;
    const float *src = job->src;
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head;
    const size_t hb = DN_FUSED_HEAD(dk, dv), nS = (size_t)dk * dv;
    for (int j = 0; j < H; j++) {
        float *K = a->state + (size_t)j * hb + nS, *tail = a->state + (size_t)H * hb + 2 * j;
        if (src != a->state) memcpy(K, src + (size_t)j * hb + nS, sizeof(float) * (size_t)FU_C * dk);
        float cs = src[(size_t)H * hb + 2 * j];
        int n = dn_fused_count(src[(size_t)H * hb + 2 * j + 1]);
        const float *kh = a->k + (int64_t)dn_key_head(a, j) * dk;
        for (int t = 0; t < a->T; t++) {
            float ct = cs * expf(a->g[(int64_t)t * H + j]);
            if (dn_fused_rescales(ct)) n = 0, ct = 1.0f;
            memcpy(K + (size_t)n * dk, kh + (int64_t)t * a->n_k_head * dk, sizeof(float) * (size_t)dk);
            if (++n == FU_C) n = 0;
            cs = ct;
        }
        tail[0] = cs, tail[1] = (float)n;
    }
}

void SEQ_FN(deltanet_fused)(const OpCtx *c, const DeltaNetArgs *a) {
    if (!fu_takes(a)) {
        deltanet_fused_ref(c, a);
        return;
    }
    FuJob job = fu_job(c, a);
    pool_for(c->pool, (int64_t)a->n_v_head * job.r.n_split, 1, fu_items, &job);
    fu_tail(&job);
}

#undef FU_R
#undef FU_NG
#undef FU_C
#undef FU_COLS
#undef FU_BLK

/* ---- chunked -------------------------------------------------------------------------------------------- */

#define CS DELTANET_CHUNK

static void chunk_head(const DeltaNetArgs *a, int j, const ChunkWs *w) {
    const int dk = a->d_k, dv = a->d_v, H = a->n_v_head, Hk = a->n_k_head, kh = dn_key_head(a, j);
    const float scale = 1.0f / sqrtf((float)dk);
    const int64_t ldk = (int64_t)Hk * dk, ldv = (int64_t)H * dv, ldqp = dk + CS, ldx = dv + dk;
    float *St = a->state + (int64_t)j * dv * dk; /* storage: St[x][i] = S[i][x] */
    const float *St_in = a->state_in ? a->state_in + (int64_t)j * dv * dk : St; /* out of place: read the old state there */
    float *Sm = w->SV, *Vn = w->SV + (int64_t)dk * dv;
    transpose_pad(St_in, dk, dv, dk, Sm, dv);
    for (int t0 = 0; t0 < a->T; t0 += CS) {
        const int C = a->T - t0 < CS ? a->T - t0 : CS, C16 = (C + 15) & ~15;
        const float *K = a->k + (int64_t)t0 * ldk + (int64_t)kh * dk, *Q = a->q + (int64_t)t0 * ldk + (int64_t)kh * dk;
        const float *V = a->v + (int64_t)t0 * ldv + (int64_t)j * dv, *gg = a->g + (int64_t)t0 * H + j,
                    *bb = a->beta + (int64_t)t0 * H + j;
        float gsum = 0.0f;
        for (int r = 0; r < C; r++) {
            gsum += gg[(int64_t)r * H];
            w->G[r] = gsum;
            w->eG[r] = expf(gsum);
        }
        transpose_pad(K, ldk, C, dk, w->Kt, CS); /* Kt[i][c], zero for C ≤ c < C16 */
        /* A = β_r (k_r·k_c) e^{G_r − G_c} below the diagonal (the GEMM computes the lower 16-column blocks) */
        gemm_nn(C, C16, dk, K, ldk, w->Kt, CS, w->Am, CS, INIT_ZERO, NULL, 0, 0.0f, -1, 0);
        for (int r = C; r < C16; r++) w->G[r] = w->G[C - 1]; /* padding, masked below */
        for (int r = 0; r < C; r++) {
            float *ar = w->Am + r * CS;
            const V16 br = v16_set1(bb[(int64_t)r * H]), gr = v16_set1(w->G[r]);
            const int lim = C16 < ((r + 16) & ~15) ? C16 : ((r + 16) & ~15); /* what the GEMM computed */
            for (int c = 0; c < lim; c += 16) {
                const V16 e = v16_exp(v16_sub(gr, v16_load(w->G + c)));
                const int keep = r - c < 0 ? 0 : r - c > 16 ? 16 : r - c;
                v16_store(ar + c, v16_keep(v16_mul(v16_mul(br, v16_load(ar + c)), e), keep));
            }
        }
        /* T = (I + A)⁻¹ row by row (all 64 columns: zero beyond the diagonal); then T' = T·diag(β) over A's
         * rows (row r of A is dead once T[r] is known) and T'' = −T·diag(β e^G) in place */
        for (int r = 0; r < C; r++) {
            V16 acc[4] = {v16_zero(), v16_zero(), v16_zero(), v16_zero()};
            for (int m = 0; m < r; m++) {
                const V16 x = v16_set1(w->Am[r * CS + m]);
#pragma GCC unroll 4
                for (int v = 0; v < 4; v++) acc[v] = v16_fnmadd(x, v16_load(w->Tm + m * CS + 16 * v), acc[v]);
            }
#pragma GCC unroll 4
            for (int v = 0; v < 4; v++) v16_store(w->Tm + r * CS + 16 * v, acc[v]);
            w->Tm[r * CS + r] = 1.0f;
        }
        for (int c = 0; c < C16; c++) { /* β and −β e^G by column (0 in the padding) */
            const float bc = c < C ? bb[(int64_t)c * H] : 0.0f;
            w->f[c] = bc;
            w->eG[CS + c] = c < C ? -(bc * w->eG[c]) : 0.0f;
        }
        for (int r = 0; r < C; r++) {
            float *tr = w->Tm + r * CS, *ar = w->Am + r * CS;
            for (int c = 0; c < C16; c += 16) {
                const V16 t = v16_load(tr + c);
                v16_store(ar + c, v16_mul(t, v16_load(w->f + c)));
                v16_store(tr + c, v16_mul(t, v16_load(w->eG + CS + c)));
            }
        }
        float *U = w->X, *Wn = w->X + dv;
        gemm_nn(C, dv, C, w->Am, CS, V, ldv, U, ldx, INIT_ZERO, NULL, 0, 0.0f, 0, -1);
        gemm_nn(C, dk, C, w->Tm, CS, K, ldk, Wn, ldx, INIT_ZERO, NULL, 0, 0.0f, 0, -1);
        /* Vnew = U + W'·S */
        gemm_nn(C, dv, dk, Wn, ldx, Sm, dv, Vn, dv, INIT_MAT, U, ldx, 0.0f, -1, -1);
        /* QP = [scale·e^{G_r} q_r | scale·(q_r·k_c) e^{G_r − G_c} for c ≤ r] */
        gemm_nn(C, C16, dk, Q, ldk, w->Kt, CS, w->QP + dk, ldqp, INIT_ZERO, NULL, 0, 0.0f, -1, 0);
        for (int r = 0; r < C; r++) {
            float *qp = w->QP + r * ldqp;
            const float *q = Q + r * ldk;
            const V16 e = v16_set1(w->eG[r] * scale);
            for (int i = 0; i < dk; i += 16) v16_store(qp + i, v16_mul(v16_load(q + i), e));
            const V16 gr = v16_set1(w->G[r]), sc = v16_set1(scale);
            /* zero up to where the GEMM below reads (row block ends r0 + GEMM_MR ≤ r + GEMM_MR) */
            const int lim = C16 < ((r + GEMM_MR + 15) & ~15) ? C16 : ((r + GEMM_MR + 15) & ~15);
            for (int c = 0; c < lim; c += 16) {
                const V16 e = v16_exp(v16_sub(gr, v16_load(w->G + c)));
                const int keep = r + 1 - c < 0 ? 0 : r + 1 - c > 16 ? 16 : r + 1 - c;
                v16_store(qp + dk + c, v16_keep(v16_mul(v16_mul(v16_load(qp + dk + c), e), sc), keep));
            }
        }
        gemm_nn(C, dv, dk + C, w->QP, ldqp, Sm, dv, a->out + (int64_t)t0 * ldv + (int64_t)j * dv, ldv, INIT_ZERO, NULL,
                0, 0.0f, dk, -1);
        /* S = e^{G_C}·S + Kᵀ·diag(e^{G_C − G_c})·Vnew */
        const float gl = w->G[C - 1];
        for (int c = 0; c < C16; c++) w->f[c] = c < C ? expf(gl - w->G[c]) : 0.0f;
        for (int i = 0; i < dk; i++) {
            float *kt = w->Kt + i * CS;
            for (int c = 0; c < C16; c += 16) v16_store(kt + c, v16_mul(v16_load(kt + c), v16_load(w->f + c)));
        }
        gemm_nn(dk, dv, C, w->Kt, CS, Vn, dv, Sm, dv, INIT_SCALE, NULL, 0, expf(gl), -1, -1);
    }
    transpose_pad(Sm, dv, dk, dv, St, dk);
}

typedef struct ChunkJob {
    const DeltaNetArgs *a;
    float *scratch;
    size_t per_thread; /* floats */
} ChunkJob;

static void chunk_items(void *ctx, int64_t b, int64_t e, int thread) {
    const ChunkJob *job = ctx;
    ChunkWs w;
    chunk_ws_floats(job->a->d_k, job->a->d_v, &w, job->scratch + (size_t)thread * job->per_thread);
    for (int64_t j = b; j < e; j++) chunk_head(job->a, (int)j, &w);
}

/* whether the chunked kernel takes a with c's scratch (else the reference runs) */
static bool chunk_takes(const OpCtx *c, const DeltaNetArgs *a) {
    const size_t need = chunk_ws_floats(a->d_k, a->d_v, NULL, NULL) * sizeof(float) * (size_t)pool_size(c->pool);
    return !(a->d_k % 16 || a->d_v % 16 || a->T < 1 || !c->scratch || c->scratch_bytes < need ||
             ((uintptr_t)c->scratch & 63));
}

void SEQ_FN(deltanet_chunked)(const OpCtx *c, const DeltaNetArgs *a) {
    ASSERT(!a->steps);
    if (!chunk_takes(c, a)) {
        deltanet_chunked_ref(c, a);
        return;
    }
    ChunkJob job = {a, c->scratch, chunk_ws_floats(a->d_k, a->d_v, NULL, NULL)};
    pool_for(c->pool, a->n_v_head, 1, chunk_items, &job);
}

/* ---- many sequences in one pool job ------------------------------------------------------------------------ */

/* Each sequence's job is the one its own call builds (the same split of heads into items, by the same thread
 * count), its items concatenated with the others' into one pool_for (SeqsJob), so every item computes what it
 * computes in the single call; a sequence the kernel would hand to the reference runs its own call first. The
 * chunked items share the per-thread scratch as the single call's do (a thread runs one item at a time). */
void SEQ_FN(deltanet_seqs)(const OpCtx *c, const DeltaNetArgs *a, const DeltaNetForm *form, int n) {
    for (int i0 = 0; i0 < n; i0 += OPS_SEQS_MAX) {
        const int m = n - i0 < OPS_SEQS_MAX ? n - i0 : OPS_SEQS_MAX;
        RecJob rec[OPS_SEQS_MAX];
        FuJob fu[OPS_SEQS_MAX];
        ChunkJob ch[OPS_SEQS_MAX];
        bool fused[OPS_SEQS_MAX] = {false};
        SeqsJob sj = {0};
        for (int i = 0; i < m; i++) {
            const DeltaNetArgs *ai = &a[i0 + i];
            const int H = ai->n_v_head;
            switch (form[i0 + i]) {
            case DN_FORM_FUSED:
                if (!fu_takes(ai)) {
                    deltanet_fused_ref(c, ai);
                    break;
                }
                fu[i] = fu_job(c, ai), fused[i] = true;
                seqs_add(&sj, fu_items, &fu[i], (int64_t)H * fu[i].r.n_split);
                break;
            case DN_FORM_CHUNKED:
                ASSERT(!ai->steps);
                if (!chunk_takes(c, ai)) {
                    deltanet_chunked_ref(c, ai);
                    break;
                }
                ch[i] = (ChunkJob){ai, c->scratch, chunk_ws_floats(ai->d_k, ai->d_v, NULL, NULL)};
                seqs_add(&sj, chunk_items, &ch[i], H);
                break;
            default:
                if (ai->d_k % 16 != 0 || ai->T < 1) {
                    deltanet_recurrent_ref(c, ai);
                    break;
                }
                rec[i] = dn_split(ai, pool_size(c->pool), REC_ROWS);
                seqs_add(&sj, rec_items, &rec[i], (int64_t)H * rec[i].n_split);
                break;
            }
        }
        if (sj.n) pool_for(c->pool, sj.start[sj.n], 1, seqs_items, &sj);
        for (int i = 0; i < m; i++)
            if (fused[i]) fu_tail(&fu[i]);
    }
}

#undef CS
