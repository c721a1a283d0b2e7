/* backend.h — the boundary between the forward pass (src/model/) and whatever computes it. A backend
 * owns device memory, holds the weights it was given (bound once), runs a command stream, and implements
 * every op the forward pass uses. The forward pass is written once against this header; adding a device
 * means a folder under src/backend/ that fills a BackendVt, one row in the registry (registry.c) and one
 * Makefile rule: the backend-ops test and the device conformance suite (tests/test_device.c) take it from the
 * registry. docs/ARCHITECTURE.md draws the boundary and lists the three steps.
 *
 * Backends today: "ref" (the scalar reference of every op: the spec) and "cpu" (the kernels of
 * src/kernels/cpu/ for one ISA level, with the ISA picked at run time), both in src/backend/cpu/, and
 * "vulkan" / "vulkan:N" (GLSL compute shaders on a Vulkan device, src/backend/vulkan/, when built with the
 * Vulkan headers and glslc). registry.c picks one by name.
 *
 * Memory. A BBuf is one device allocation; a BView is a byte offset into one. Every op reads and writes
 * views, so a device backend never hands out host pointers. Activations are F32 unless an op says
 * otherwise; index buffers (token ids, positions, expert selections, row lists) are int32.
 *
 * Ordering. Ops and copies run in the order they are issued (a device backend records them into a
 * command stream between begin and submit). A download waits for everything issued before it; an upload
 * is ordered with the ops around it. On host backends every call completes before it returns.
 *
 * Arithmetic. The mode (BackendOptions.mode) picks how matmuls round their activations: MATMUL_FAST (the
 * default, "fast": activations rounded as ggml does, then summed in one order whatever the batch, so a row's
 * result does not depend on its batch), MATMUL_GGML ("llama": llama.cpp's rounding and summation order bit
 * for bit) or MATMUL_EXACT (F32 on dequantized weights). The row ops follow ggml-cpu's arithmetic
 * (kernels/ops.h documents each one's order); a CPU backend matches the reference bit for bit, other backends
 * within a stated NMSE (the backend-ops test).
 *
 * Errors. Ops do not fail (shapes are the caller's contract, checked by ASSERT on the host backends);
 * allocation, binding and submission report one line through Err. Nothing here prints or exits. */
#ifndef DL_BACKEND_BACKEND_H
#define DL_BACKEND_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "kernels/ops.h"

/* ---- weights: what a backend is told about each bound tensor (the model's registry, model/model.h) ---------- */

/* One bound tensor (a matrix, a stack of expert matrices, or a small F32 vector). A fused tensor (qwen's
 * ffn_gate_up_exps) is two entries that share its bytes at different offsets. */
typedef struct Weight {
    int id;             /* index in the registry; backends keep their handles in arrays indexed by it */
    const char *name;   /* the tensor's name in the file */
    int layer;          /* block index, -1 for the global tensors */
    int role;           /* the model's tag for it (model/model.h's WRole): for messages and tests; no backend reads it */
    uint32_t type;      /* FormatId; vectors are always F32 here (converted at load when the file is not) */
    int64_t cols, rows; /* ggml ne[0] (input width) and ne[1] (outputs) of one matrix; a vector: n × 1 */
    int n_expert;       /* 0, or the experts in the stack */
    size_t row_bytes;
    size_t bytes;        /* one matrix (one expert's) */
    size_t expert_stride; /* bytes from one expert's matrix to the next */
    const void *host;   /* the first matrix's bytes: in the file mapping, or an F32 copy owned by the model */
    bool gemv;          /* multiplied row by row even in a batch, as llama.cpp's mul_mat_id does (experts) */
    bool lookup_only;   /* only rows are looked up (an embedding table not tied to the head) */
    bool looked_up;     /* get_rows reads its rows (the token embedding): a device needs a row-lookup kernel for it */
    bool file_pages;    /* host lies in a read-only file mapping: its pages may be dropped from memory (they
                           are read back from the file), as a backend that keeps its own copy does */
    bool streamed;      /* an expert stack whose experts an expert cache reads from the file and hands to
                           matmul (MatArgs.data): the backend never reads, keeps, uploads or prefetches it */
} Weight;

/* ---- memory -------------------------------------------------------------------------------------------- */

typedef struct BBuf BBuf; /* defined by each backend */

typedef struct BView {
    BBuf *buf;
    size_t off; /* bytes */
} BView;

static inline BView bv_bytes(BView v, size_t bytes) {
    v.off += bytes;
    return v;
}
static inline BView bv_f32(BView v, int64_t i) { /* the i-th float (or int32) after v */
    v.off += (size_t)i * 4;
    return v;
}

/* ---- op arguments ------------------------------------------------------------------------------------- */

/* rows × heads vectors of n floats; vector (r, h) of x starts r·x_row + h·x_head floats after x, and the
 * same for y (which may alias x when the strides agree). */
typedef struct VecSet {
    int rows, heads, n;
    int64_t x_row, x_head, y_row, y_head;
} VecSet;

/* y[t][o] = W·x[t] for output rows o in [o0, o1) (o1 == 0: every row), t < T; y rows are o1 − o0 wide.
 * expert ≥ 0 selects a matrix of an expert stack; data, when not NULL, is that matrix's bytes in host
 * memory supplied by an expert provider (forward_set_expert_provider) instead of the bound copy. */
typedef struct MatArgs {
    const Weight *w;
    int expert;
    const void *data;
    int64_t o0, o1;
    BView x, y;
    int64_t T;
    /* x RMS-normed on the fly (rms_norm's bits, weight x_norm, eps x_eps) when x_norm is set: only for a backend
     * with Backend.fold_norm_rows ≥ T, and only through matmul, matmul_pair and matmul_swiglu */
    const Weight *x_norm;
    float x_eps;
} MatArgs;

/* β = sigmoid(b), g = softplus(a + dt_bias)·ssm_a for R rows of Hv heads. b of row t, head j is at
 * b + t·ld_in + (j / group)·2·group + j % group, a at the same place + group (qwen3next's ssm_ba holds
 * [b (group) | a (group)] per key head); group == 0 means b and a are separate [R][Hv] (ld_in = Hv). */
typedef struct GateArgs {
    int R, Hv, group;
    int64_t ld_in;
    BView b, a, beta, g; /* beta and g are [R][Hv]; they may alias b and a when group == 0 */
    const Weight *dt_bias, *ssm_a;
} GateArgs;

/* The delta rule over one sequence (kernels/ops.h DeltaNetArgs, in views). state_in is the state before
 * the batch (== state: in place); state the one after. steps, when set, receives the state after every
 * token ([T][Hv][Dv][Dk]; recurrent form only). */
/* A delta-net layer's inputs to the recurrence in one op (optional: BackendVt.dn_prep), with the bits of
 * conv_silu(x → y over T tokens of C channels, K taps), l2_norm of y's q heads (channels [0, key)) into q and
 * of its k heads ([key, 2·key)) into k, copy_rows of its v channels into v (rows of C − 2·key), and dn_gates;
 * y itself is not written. One sequence. */
typedef struct DnPrepArgs {
    int T, C, K, key, d_k;
    float eps;
    const Weight *conv_w;
    BView x, state, q, k, v;
    GateArgs gates;
} DnPrepArgs;

typedef struct DeltaArgs {
    int T, n_k_head, n_v_head, d_k, d_v;
    bool grouped, chunked;
    BView q, k, v, g, beta, state_in, state, out, steps;
    bool has_steps;
} DeltaArgs;

/* One sequence of BackendVt.conv_silu_seqs: conv_silu's x [T][C], state and y for it. */
typedef struct ConvSeq {
    BView x, state, y;
    int T;
} ConvSeq;

/* Causal attention of T queries at positions pos0 … pos0+T−1 over the cache rows 0 … pos0+T−1
 * (kernels/ops.h AttnArgs, in views). rows_at, when set (a backend with graph ops), is int32 [T] on the device
 * holding the same values pos0 … pos0+T−1: a device reads them there, so that a recorded pass replayed at a
 * later position attends over the right rows (host backends read pos0). */
typedef struct AttentionArgs {
    int T, pos0, n_head, n_head_kv, d;
    float scale;
    BView q, k, v, out;
    BView rows_at;
    int keys_max; /* with rows_at: the most keys a query may have when the op is replayed (the recorded pass's context
                     bucket, forward_graph.c); a device that sizes its work by the keys (the split over them) sizes it
                     by this, so a replay and a fresh recording pick the same form. 0: pos0 + T */
} AttentionArgs;

/* The routed experts of an MoE layer in one op (optional: BackendVt.moe_ffn; a device's, the CPU's): for every row t
 * and slot s, eo[t·k + s] = down_e(silu(gate_e·x_t) ⊙ (up_e·x_t)) with e = sel[t·k + s]. The backend groups
 * the rows by expert itself (no selection comes back to the host); gate_out and up_out are [R·k][ff]
 * scratch, work MOE_WORK_INTS(R, k, n_expert) int32 of scratch. */
typedef struct MoeArgs {
    const Weight *gate, *up, *down;
    BView x, sel, eo; /* x [R][E], sel int32 [R][k], eo [R][k][E] */
    BView gate_out, up_out, work;
    int R, k, n_expert;
} MoeArgs;
#define MOE_WORK_INTS(R, k, n_expert) (5 * (size_t)(R) * (size_t)(k) + 6 * (size_t)(n_expert) + 64)

/* rope's positions: int32 [rows] (one position per row: text), or with thw int32 [rows][3], each row's own (time,
 * height, width) for IMROPE's three axes (an image's tokens: kernels/ops.h op_rope_thw; a row with t = h = w = p
 * gets op_rope's bits at p; without sections NEOX at t) */
typedef struct RopeArgs {
    int rows, heads, d, n_rot;
    int64_t row_stride; /* floats between rows; heads are d apart */
    float base, freq_scale;
    const int *sections; /* 4 ints (IMROPE), or NULL (NEOX) */
    bool thw;            /* positions [rows][3] (t, h, w) instead of [rows] */
} RopeArgs;

/* A gated-attention layer's q and k after the projections in one op (optional: BackendVt.attn_prep), with the
 * bits of rms_norm of each q head (the first d of its [q | gate] block in qg, rows 2·n_head·d) with q_norm into
 * qa, rms_norm of k (rows n_head_kv·d) with k_norm, rope on both at pos, and the kv_append of k and v into the
 * cache rows k_cache / v_cache (views at the first row) of one sequence; ka is not written. With rows_at set
 * (int32 [rows] on the device: each row's cache row), k_cache and v_cache are the caches' row 0 and row r goes
 * to cache row rows_at[r] (a recorded pass replayed at later rows). */
typedef struct AttnPrepArgs {
    int rows, n_head, n_head_kv, d;
    float eps;
    const Weight *q_norm, *k_norm;
    BView qg, qa, ka, va, pos, k_cache, v_cache;
    RopeArgs rope; /* rows, heads and row_stride are not read; a backend declines rope.thw (images) */
    BView rows_at;
} AttnPrepArgs;

/* The vision tower's 2-D rotary (kernels/ops.h op_rope_2d) in place on rows × heads head vectors of d (heads d
 * apart, rows row_stride floats apart); pos is int32 [rows][2]: each row's (patch row, patch column). The angle
 * step is base^(−4/d) (ggml's vision M-RoPE with sections d/4). */
typedef struct Rope2dArgs {
    int rows, heads, d;
    int64_t row_stride;
    float base;
} Rope2dArgs;

/* Full (non-causal) attention of T rows over the same T rows, n_head heads of d (the vision tower's patches):
 * out row t, head h = softmax_u(q_t,h · k_u,h · scale) · v_u,h (kernels/ops.h op_attn_full_row). Rows of q, k,
 * v and out are *_row floats apart, heads d apart within a row (q, k and v may be parts of one qkv row). */
typedef struct FullAttnArgs {
    int T, n_head, d;
    float scale;
    BView q, k, v, out;
    int64_t q_row, k_row, v_row, o_row;
} FullAttnArgs;

/* bias_act's activations */
enum { ACT_NONE = 0, ACT_GELU = 1 };

/* ---- the backend ---------------------------------------------------------------------------------------- */

typedef struct Backend Backend;

/* Sizes the forward pass will use, so a backend can size its scratch once (backend_reserve). */
typedef struct BackendSizes {
    int max_rows;      /* activation rows per call */
    int64_t max_cols;  /* widest activation row a matmul sees */
    int max_ctx;       /* longest sequence */
    int head_dim, gqa_group; /* attention */
    int d_k, d_v;      /* delta-net heads */
} BackendSizes;

typedef struct BackendStats BackendStats;

typedef struct BackendVt {
    void (*destroy)(Backend *be);
    int (*reserve)(Backend *be, const BackendSizes *s, Err *err);

    /* memory: alloc returns zeroed memory */
    BBuf *(*alloc)(Backend *be, size_t bytes, Err *err);
    void (*free)(Backend *be, BBuf *b);
    void (*upload)(Backend *be, BView dst, const void *src, size_t bytes);
    void (*download)(Backend *be, void *dst, BView src, size_t bytes);
    void (*copy)(Backend *be, BView dst, BView src, size_t bytes);
    void (*fill)(Backend *be, BView dst, uint8_t byte, size_t bytes);
    /* A view of caller memory the ops can use directly (host backends), or false: the caller stages. */
    bool (*wrap_host)(Backend *be, void *host, size_t bytes, BView *out);

    /* weights: every entry the model bound, once; the backend keeps (or uploads, or repacks) them */
    int (*bind)(Backend *be, const Weight *w, int n, Err *err);
    /* makes the bound weights resident (reads every page, mlock with lock) so compute never waits on a disk */
    int (*make_resident)(Backend *be, bool lock, Err *err);

    /* command stream: begin starts recording, submit hands what was recorded to the device, wait blocks
     * until it is done (and reports a device failure) */
    void (*begin)(Backend *be);
    int (*submit)(Backend *be, Err *err);
    int (*wait)(Backend *be, Err *err);

    /* ops — in the order the forward pass uses them */
    void (*get_rows)(Backend *be, const Weight *w, BView ids, int n, BView out); /* out[i] = row ids[i] of w, F32 */
    void (*matmul)(Backend *be, const MatArgs *a);
    /* g->y = silu(g·x) ⊙ (u·x) with the bits of matmul(g), matmul(u), swiglu(g->y, u->y, g->y): gate and up in
     * one pass (same x and T; u->y is a work area). Optional: NULL, and the forward pass makes the three calls */
    void (*matmul_swiglu)(Backend *be, const MatArgs *g, const MatArgs *u);
    /* a->y += W·x with the bits of matmul into a temporary and add (a residual in the product's epilogue).
     * Optional: NULL, and the forward pass makes the two calls */
    void (*matmul_add)(Backend *be, const MatArgs *a);
    /* a->y += W·gated_norm(x) with the bits of gated_norm(a->x, z, w, ·, n, eps) into a temporary and matmul_add: the
     * delta-net's gated RMSNorm (x's rows as n-float heads) in the output product's activation load; z is not
     * written. Optional, and may decline (false: nothing recorded, the forward pass makes the two calls); offered
     * batches of up to fold_norm_rows rows */
    bool (*matmul_add_gated)(Backend *be, const MatArgs *a, BView z, const Weight *w, int n, float eps);
    /* a->y[t] += (W·x_t)·σ(g[t]) for each row t (g: one float per row, the gate's logit; not written) with the bits of
     * matmul into a temporary, sigmoid(g) and add_scaled, then, where res.buf is set, res += a->y (add): an MoE
     * layer's shared expert, its σ-gated add and the residual in the down product's epilogue. Optional, and may
     * decline (false: nothing recorded); offered batches of up to fold_norm_rows rows */
    bool (*matmul_add_sigmoid)(Backend *be, const MatArgs *a, BView g, BView res);
    /* a->y = Wa·x and c->y = Wc·x (same x and T) with matmul's bits: two products of one input in one pass where
     * the backend can. Optional: NULL, and the forward pass makes the two calls */
    void (*matmul_pair)(Backend *be, const MatArgs *a, const MatArgs *c);
    void (*rms_norm)(Backend *be, BView x, BView y, const Weight *w, const VecSet *s, float eps); /* w may be NULL */
    void (*l2_norm)(Backend *be, BView x, BView y, const VecSet *s, float eps);
    void (*add)(Backend *be, BView y, BView x, int64_t n);                             /* y += x */
    void (*copy_rows)(Backend *be, BView dst, int64_t ld_dst, BView src, int64_t ld_src, int rows, int n);
    void (*dn_gates)(Backend *be, const GateArgs *a);
    void (*conv_silu)(Backend *be, BView x, int T, int C, int K, const Weight *w, BView state, BView y);
    void (*deltanet)(Backend *be, const DeltaArgs *a);
    /* the fused conv + SiLU + q/k L2 norm + v split + gates (DnPrepArgs); optional, and may decline a shape
     * (false: nothing recorded, the forward pass makes the separate calls) */
    bool (*dn_prep)(Backend *be, const DnPrepArgs *a);
    /* dn_prep and then the delta rule d on its outputs (one sequence, recurrent, the state in place, no steps) in one
     * op, with the bits of the two; d's q, k, v, g and β are dn_prep's outputs and are not written. Optional, may
     * decline (false: nothing recorded, the forward pass makes the separate calls) */
    bool (*dn_prep_scan)(Backend *be, const DnPrepArgs *a, const DeltaArgs *d);
    /* Many sequences of one layer in one op (the decode step of many sessions, docs/LONG_CONTEXT.md "Many
     * streams"): conv_silu of n sequences (the same C, K and w; each its own x, T, state and y) and the delta rule
     * of n sequences (each its own DeltaArgs), with the bits of the n single calls. No sequence's outputs or state
     * may overlap another's. Optional: NULL (vulkan: its per-sequence dispatches are recorded, not handed off),
     * and the forward pass makes the n calls. The CPU backend runs all the sequences' work items in one pool job */
    void (*conv_silu_seqs)(Backend *be, const ConvSeq *s, int n, int C, int K, const Weight *w);
    void (*deltanet_seqs)(Backend *be, const DeltaArgs *a, int n);
    /* attention with mul_sigmoid(out, gate) in its epilogue (gate row t, head h at t·g_row + h·g_head floats);
     * optional */
    void (*attention_gated)(Backend *be, const AttentionArgs *a, BView gate, int64_t g_row, int64_t g_head);
    /* the fused q/k norms + RoPE + cache stores (AttnPrepArgs); optional, may decline (false: nothing recorded) */
    bool (*attn_prep)(Backend *be, const AttnPrepArgs *a);
    /* out = rmsnorm(o)·w·silu(z) over rows vectors of n (z consumed: it holds silu(z) afterwards) */
    void (*gated_norm)(Backend *be, BView o, BView z, const Weight *w, int rows, int n, float eps, BView out);
    void (*rope)(Backend *be, BView x, BView pos, const RopeArgs *a); /* pos: int32 per row, or [rows][3] (a->thw) */
    /* cache rows row0 … row0 + T − 1 of the K (v false) or V (v true) cache ← src [T][width] F32, rounded to the
     * cache's type (Backend.kv_k / kv_v; width a multiple of 32 for the block types) */
    void (*kv_append)(Backend *be, BView cache, int row0, BView src, int T, int width, bool v);
    void (*attention)(Backend *be, const AttentionArgs *a);
    void (*mul_sigmoid)(Backend *be, BView y, BView gate, const VecSet *s); /* y (y strides) *= σ(gate) (x strides) */
    void (*silu)(Backend *be, BView x, BView y, int rows, int n);
    void (*swiglu)(Backend *be, BView g, BView u, BView y, int rows, int n); /* y = silu(g)·u; y may alias g */
    /* MoE routing per row: probs = softmax(logits) in place, sel = top-k (ties to the lower id), w = the
     * selected probabilities renormalised (sum floored at 6.1035e-5) */
    void (*moe_route)(Backend *be, BView logits, BView sel, BView w, int R, int n_expert, int k);
    void (*gather_rows)(Backend *be, BView dst, BView src, BView idx, int n, int width);  /* dst[i] = src[idx[i]] */
    void (*scatter_rows)(Backend *be, BView dst, BView src, BView idx, int n, int width); /* dst[idx[i]] = src[i] */
    void (*moe_combine)(Backend *be, BView out, BView eo, BView w, int R, int k, int width); /* Σ_s w[t][s]·eo[t][s] */
    void (*sigmoid)(Backend *be, BView x, int64_t n);                                 /* in place */
    void (*add_scaled)(Backend *be, BView y, BView x, BView s, int rows, int n);      /* y[r] += x[r]·s[r] */

    /* the vision tower's ops (src/vision/vision_dev.c; kernels/ops.h "vision tower ops" are their scalar spec):
     * LayerNorm with weight and bias (each may be NULL), F32 throughout */
    void (*layer_norm)(Backend *be, BView x, BView y, const Weight *w, const Weight *b, const VecSet *s, float eps);
    /* y[r][i] = act(y[r][i] + b[i]) over rows of n (b may be NULL; act ACT_NONE or ACT_GELU: op_gelu) */
    void (*bias_act)(Backend *be, BView y, const Weight *b, int rows, int n, int act);
    void (*rope_2d)(Backend *be, BView x, BView pos, const Rope2dArgs *a);
    void (*attention_full)(Backend *be, const FullAttnArgs *a);

    /* optional (NULL where a backend has no use for them; registry.c's check lists the required ones) */
    void (*moe_ffn)(Backend *be, const MoeArgs *a);
    /* moe_ffn and then moe_combine(out, a->eo, w, R, k, E) in one op with the bits of the two (eo not written): each
     * row's k down products summed with the routing weights w [R][k] in slot order. May decline (false: nothing
     * recorded, the forward pass makes the two calls) */
    bool (*moe_ffn_combine)(Backend *be, const MoeArgs *a, BView w, BView out);
    /* Recorded passes (a device's: record once, replay; docs/VULKAN.md "A decode pass recorded once").
     * graph_capture, called after begin and the pass's input uploads and before its first op, keeps what is
     * recorded from there to graph_end as graph `slot` (< BACKEND_GRAPHS), replacing what the slot held, and
     * returns the capture's id (0: not kept, recording goes on as usual; Forwards sharing a backend each keep
     * the ids of their own). graph_end closes it and says whether the graph is whole
     * (nothing submitted, downloaded or timed in between; else the slot is left empty); the next submit hands
     * over the commands recorded before the capture, then the graph. graph_replay, called where
     * graph_capture would be, makes the next submit hand over what was recorded since begin (the inputs),
     * then graph `slot`, recording nothing; false (nothing changes) when the slot does not hold capture `id`
     * whole, or memory was allocated or freed since it was captured (its addresses may be stale). A captured pass must read every
     * value that changes between replays from device memory (the inputs). Optional: NULL on host backends */
    uint64_t (*graph_capture)(Backend *be, int slot);
    bool (*graph_end)(Backend *be);
    bool (*graph_replay)(Backend *be, int slot, uint64_t id);
    /* a timestamp into the stream (profiling on a device), and the marks recorded since the last call, oldest
     * first, in seconds of the device's clock; returns how many */
    void (*mark)(Backend *be, int tag);
    int (*marks)(Backend *be, int *tags, double *seconds, int cap);
    void (*stats)(const Backend *be, BackendStats *out);
    /* copy bandwidth over two buffers of bytes (GB/s counting bytes read and written) */
    int (*copy_probe)(Backend *be, size_t bytes, double *gbs, Err *err);
    /* the layout this backend keeps the delta-net states in (a StateLayout); NULL: STATE_PLAIN */
    int (*state_layout)(const Backend *be);
} BackendVt;

/* graphs a backend with graph ops keeps (BackendVt.graph_capture's slots) */
#define BACKEND_GRAPHS 4

/* How a backend keeps a delta-net state (backend_state_layout): STATE_PLAIN, [n_v_head][d_v][d_k]; STATE_FUSED,
 * the fused form's (kernels/ops.h: a base state with the values in the lanes, the chunk's pending updates and a
 * scale per head; the host backends in the fast arithmetic). Snapshots record it; dumps convert from it. */
typedef enum StateLayout { STATE_PLAIN = 0, STATE_FUSED = 1 } StateLayout;

/* The KV cache's element types as the options name them (-ctk / -ctv; backend.c's kv_type_parse). KV_DEFAULT:
 * F16 in the fast arithmetic, F32 in the llama and exact ones and on a device. Q8_0 and Q4_0 (llama.cpp's
 * names and blocks) are the fast arithmetic's only: each head's row of head_dim values in blocks of 32. */
enum { KV_DEFAULT = 0, KV_F32 = 1, KV_F16 = 2, KV_Q8_0 = 3, KV_Q4_0 = 4, KV_COUNT };

/* The host backends' own settings (backend/cpu/): no other backend reads them. */
typedef struct CpuOptions {
    int isa;   /* an Isa level (kernels/cpu/isa.h), or -1 for the best this CPU has */
    bool pack; /* repack matrices the kernels read faster another way (same bits) */
} CpuOptions;

typedef struct BackendOptions {
    const char *name; /* a registry name (backend_names): "cpu" (NULL), "ref", "vulkan" or "vulkan:N" */
    int n_threads;    /* 0 = every CPU this process may use */
    MatMode mode;
    CpuOptions cpu;
    /* a device's tuning, "key=value,...": every device backend takes chunk=N (the length from which the delta
     * rule is chunked: Backend.dn_chunk_min; the device suite forces the chunked form with it); vulkan also
     * coop=0|1 (tensor cores for batched products) and tile=N (the batch from which products take the tiled
     * GEMM). NULL: the measured defaults (docs/VULKAN.md). An unknown key fails backend_create, naming it. */
    const char *tune;
    /* the K and V caches' element types, each a KV_* (a device keeps F32 and refuses the others; the host
     * backends take Q8_0 and Q4_0 in the fast arithmetic only) */
    int kv_k, kv_v;
    /* load progress in bytes (DlProgressFn): "pack" while bind copies, "upload" while a device's bind takes the
     * weights, "prefetch" while make_resident reads;
     * called on the calling thread; NULL: none */
    void (*progress)(void *user, const char *phase, uint64_t done, uint64_t total);
    void *progress_user;
    /* a device's runtime library when not the system's (vulkan: the loader file instead of libvulkan.so.1; the
     * CLI takes it from DELTALLM_VULKAN_LIB); NULL: the default. The first backend that loads it decides */
    const char *device_lib;
} BackendOptions;

struct Backend {
    const BackendVt *vt;
    char name[32];    /* "ref", "cpu:avx512", ... */
    MatMode mode;
    int n_threads;
    int dn_chunk_min; /* the sequence length from which this backend's chunked delta rule is the faster form
                         (measured per backend), or 0: the forward pass's own rule */
    /* the products take MatArgs.x_norm for batches of up to this many rows (0: never; the RMSNorm folded into
     * the activation load) */
    int fold_norm_rows;
    /* the K and V caches' element formats (FormatIds: FMT_F32 — a zeroed Backend's —, FMT_F16, FMT_Q8_0,
     * FMT_Q4_0): kv_append rounds to them, attention reads them (widened or dequantized exactly) */
    uint32_t kv_k, kv_v;
};

/* The delta-net states' layout on be. */
static inline StateLayout backend_state_layout(const Backend *be) {
    return be->vt->state_layout ? (StateLayout)be->vt->state_layout(be) : STATE_PLAIN;
}

/* Creates a backend by name through the registry ("cpu" when o->name is NULL); fails with one line for an
 * unknown name, an ISA this CPU lacks, a device that is missing or unusable, or a backend that left a required
 * slot of BackendVt empty (the line names the op). */
Backend *backend_create(const BackendOptions *o, Err *err);
void backend_destroy(Backend *be);
/* The names backend_create accepts, for messages ("cpu, ref, vulkan[:N]"). */
const char *backend_names(void);
/* The KV cache type by name: "f32", "f16", "q8_0", "q4_0" (NULL or "": KV_DEFAULT); another name fails with
 * one line listing these. */
int kv_type_parse(const char *name, int *kv_type, Err *err);
/* The element format (a FormatId) a host backend keeps for kv_type in arithmetic `mode`; fails with one line
 * for a value out of range or a quantized type outside the fast arithmetic. */
int kv_type_format(int kv_type, MatMode mode, uint32_t *fmt, Err *err);
/* "f32", "f16", "q8_0", "q4_0" for a FormatId kv_type_format gives ("?" otherwise). */
const char *kv_format_name(uint32_t fmt);
/* Bytes of one token's cache row of n values (n a multiple of 32 for the block formats). */
size_t kv_row_bytes(uint32_t fmt, int64_t n);
/* The arithmetic by name: "fast" (or NULL: the default, MATMUL_FAST), "llama" (MATMUL_GGML: llama.cpp's bits)
 * or "exact" (MATMUL_EXACT); `exact` set forces MATMUL_EXACT. Fails with one line for another name. */
int arith_parse(const char *name, bool exact, MatMode *mode, Err *err);
const char *arith_name(MatMode mode);

/* Statistics a backend can report (for --profile and the engine's info); zero where it has none. */
struct BackendStats {
    size_t packed_bytes; /* weights held in a repacked copy */
    int n_packed;
    uint64_t h2d_bytes, d2h_bytes; /* a device: bytes uploaded and downloaded since it was created */
    uint64_t submits;              /* a device: command submissions */
    size_t device_weight_bytes;    /* a device: weights it holds */
    bool f16_products;             /* a device: batched products round their inputs to f16 (tensor cores) */
    uint64_t dispatches, barriers; /* a device: kernels dispatched (copies and fills count too), barriers recorded */
    uint64_t host_ns;              /* a device: host time issuing work (begin to submission, not waiting) */
    uint64_t recorded;             /* a device: commands recorded by the host (dispatches counts replayed ones too) */
    uint64_t replays;              /* a device: recorded passes replayed (graph_replay) */
};
void backend_stats(const Backend *be, BackendStats *out);

/* A device backend's copy bandwidth (GB/s, bytes read + written) over buffers of `bytes`: the ceiling a
 * decode's weight bandwidth is judged against. Fails for a backend without a probe (the host backends:
 * cli/bwprobe.h measures the CPU's read bandwidth). */
int backend_copy_probe(const char *name, size_t bytes, double *gbs, Err *err);

/* One device this build can compute on (deltallm devices). */
typedef struct BackendDevice {
    char name[48];       /* what --device takes: "cpu", "vulkan:0" */
    char desc[200];
    uint64_t memory_bytes;
} BackendDevice;
/* Fills up to cap devices and returns how many there are; a backend that cannot list its devices (no Vulkan
 * loader, not in this build) leaves its line in note. o (may be NULL) gives device_lib. */
int backend_devices(const BackendOptions *o, BackendDevice *out, int cap, char *note, size_t note_cap);

/* ---- the registry (registry.c): one row per backend ------------------------------------------------------------
 * Adding a backend: its folder (a create and, for a device, a device listing), one row in registry.c's table,
 * one Makefile rule (docs/ARCHITECTURE.md). Everything that lists backends reads the table: backend_create,
 * `deltallm devices`, --device, the backend-ops and device test suites. */
typedef struct BackendReg {
    const char *name;  /* "cpu", "ref", "vulkan": what --device takes */
    bool indexed;      /* also "name:N", device N (from 0; the plain name is device 0) */
    bool host;         /* computes on the host (not a device: the device suite skips it) */
    /* NULL when this build lacks the backend; `missing` says why (and how to get it) */
    Backend *(*create)(const BackendOptions *o, int index, Err *err);
    /* its devices, up to cap (out may be NULL when cap is 0), with the options' device_lib; returns how many
     * there are, or -1 with a line in err. NULL: it lists none (ref: the CPU, already listed) */
    int (*devices)(const BackendOptions *o, BackendDevice *out, int cap, Err *err);
    /* whether it can run here (a device present); NULL: always. false with a line in err */
    bool (*available)(Err *err);
    const char *missing;
} BackendReg;

/* The table (n rows). */
const BackendReg *backend_registry(int *n);
/* Whether r is built and can run here; false with a line in err. */
bool backend_available(const BackendReg *r, Err *err);
/* backend_create for a given row (device index), with the same check that every required op is there. */
Backend *backend_create_from(const BackendReg *r, const BackendOptions *o, int index, Err *err);
/* Whether name (NULL: "cpu") is a host backend; false for a device and for an unknown name. */
bool backend_is_host(const char *name);
/* The first device backend this build has ("vulkan"), or NULL (the default of -ngl). */
const char *backend_first_device(void);

#endif
