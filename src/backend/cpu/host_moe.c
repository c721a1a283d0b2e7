/* host_moe.c — the routed experts of an MoE layer on the CPU backend, in one op (BackendVt.moe_ffn).
 *
 * The forward pass's host path (model/layer_ffn.c) runs the used experts one after another and splits each
 * expert's three products over the threads: at a prefill of Qwen3-Next's 512 experts that is ~10 rows per
 * product, and every product, SwiGLU and copy waits for all threads. Here the rows are grouped by expert
 * (ascending row, as the host path groups them), the experts sorted by their row count, largest first, and
 * whole experts handed to the pool's threads: each thread gathers its expert's rows, runs gate, up, SwiGLU and
 * down alone (pool NULL, its own scratch) and scatters the results, so a layer waits once. When fewer experts
 * are used than 2 × threads (a decode step), they run one after another with each product on all threads.
 *
 * Every product is the same kernel call on the same rows either way (the kernels' results depend neither on
 * the thread count nor on which thread runs them), so the outputs are the host path's bits
 * (backend_ops/moe_ffn_fused_experts against the reference; the parity and batch_invariance groups run the
 * models through it).
 *
 * Work areas: per thread the gathered rows and the down products ([rows][E] each) and a matmul scratch, grown
 * on demand in one allocation; when it cannot be had, the op leaves eo alone and the next wait fails. */
#include "backend/cpu/host_backend.h"

#include "kernels/ops.h"

#include <stdlib.h>
#include <string.h>

typedef struct MoeRun {
    HostBackend *hb;
    const MoeArgs *a;
    const float *x;
    float *eo, *g, *u;
    int E, F;
    const int32_t *order, *count, *start, *pairs; /* experts by descending rows; per expert; pairs t·k + s */
    size_t per_thread;                          /* bytes of a thread's work area */
    size_t scratch_bytes;
} MoeRun;

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Expert e's rows through gate, up, SwiGLU, down; c: the kernels' context (the pool, or none) */
static void one_expert(const MoeRun *r, int e, const OpCtx *c, uint8_t *ws) {
    const MoeArgs *a = r->a;
    const int n = r->count[e], E = r->E, F = r->F, k = a->k;
    const int32_t *pairs = r->pairs + r->start[e];
    float *xg = (float *)ws, *yd = (float *)(ws + align64(sizeof(float) * (size_t)n * E));
    float *g = r->g + (size_t)r->start[e] * F, *u = r->u + (size_t)r->start[e] * F;
    for (int j = 0; j < n; j++) memcpy(xg + (size_t)j * E, r->x + (size_t)(pairs[j] / k) * E, sizeof(float) * (size_t)E);
    const MatW wg = host_expert_mat(r->hb, a->gate, e, NULL), wu = host_expert_mat(r->hb, a->up, e, NULL),
               wd = host_expert_mat(r->hb, a->down, e, NULL);
    const Ops *ops = r->hb->ops;
    ops->matmul_swiglu(c, &wg, &wu, xg, n, g, u);
    ops->matmul(c, &wd, g, n, yd);
    for (int j = 0; j < n; j++) memcpy(r->eo + (size_t)pairs[j] * E, yd + (size_t)j * E, sizeof(float) * (size_t)E);
}

static void experts_on_threads(void *ctx, int64_t b, int64_t e, int thread) {
    const MoeRun *r = ctx;
    uint8_t *ws = r->hb->moe_ws + (size_t)thread * r->per_thread;
    uint8_t *scratch = ws + r->per_thread - r->scratch_bytes;
    const OpCtx c = {r->hb->oc.mode, NULL, scratch, r->scratch_bytes};
    for (int64_t i = b; i < e; i++) one_expert(r, r->order[i], &c, ws);
}

void host_moe_ffn(Backend *be, const MoeArgs *a) {
    HostBackend *hb = host_of(be);
    const int R = a->R, k = a->k, nE = a->n_expert, nth = pool_size(hb->pool);
    const MatW *mg = &hb->mats[a->gate->id];
    const int E = (int)mg->cols, F = (int)mg->rows;
    const int32_t *sel = hi(a->sel);
    /* work: count, start, fill, order (nE each), pairs (R·k): within MOE_WORK_INTS */
    int32_t *count = hi(a->work), *start = count + nE, *fill = start + nE, *order = fill + nE, *pairs = order + nE;
    memset(count, 0, sizeof(int32_t) * (size_t)nE);
    for (int i = 0; i < R * k; i++) count[sel[i]]++;
    int n_used = 0, cmax = 0;
    for (int e = 0, s = 0; e < nE; e++) {
        start[e] = s, fill[e] = s, s += count[e];
        if (count[e]) order[n_used++] = e, cmax = count[e] > cmax ? count[e] : cmax;
    }
    for (int i = 0; i < R * k; i++) pairs[fill[sel[i]]++] = i; /* ascending row within each expert */
    /* largest first (insertion sort: stable, experts with equal counts keep their index order) */
    for (int i = 1; i < n_used; i++) {
        const int32_t v = order[i];
        int j = i;
        while (j > 0 && count[order[j - 1]] < count[v]) order[j] = order[j - 1], j--;
        order[j] = v;
    }
    const bool spread = nth > 1 && n_used >= 2 * nth;
    const int n_ws = spread ? nth : 1;
    MoeRun r = {hb, a, hf(a->x), hf(a->eo), hf(a->gate_out), hf(a->up_out), E, F, order, count, start, pairs, 0, 0};
    r.scratch_bytes = spread ? align64(ops_scratch_bytes(cmax, E > F ? E : F, 1)) : 0;
    r.per_thread = 2 * align64(sizeof(float) * (size_t)cmax * (size_t)E) + r.scratch_bytes;
    if (r.per_thread * (size_t)n_ws > hb->moe_ws_bytes) {
        void *p = NULL;
        const size_t want = r.per_thread * (size_t)n_ws;
        if (posix_memalign(&p, 64, want)) {
            hb->moe_oom = true;
            return;
        }
        free(hb->moe_ws);
        hb->moe_ws = p, hb->moe_ws_bytes = want;
    }
    if (spread) {
        pool_for(hb->pool, n_used, 1, experts_on_threads, &r);
        return;
    }
    for (int i = 0; i < n_used; i++) one_expert(&r, order[i], &hb->oc, hb->moe_ws);
}
