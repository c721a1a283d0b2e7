// mm_common.glsl — the matrix kernels' arguments (vk_matmul.c: MatPush) and their work items.
//
// A product runs over work items: (expert, first token p0, tokens n). Without an item list (items == 0)
// the item of workgroup row y is (0, y·TILE, min(TILE, T − y·TILE)): a plain product. With one (the MoE
// path: moe_group.comp writes it), each item is one expert's tokens. Token p reads activation row
// xidx[p] (or p) and writes output row yidx[p] (or p), so a gather before and a scatter after need no
// copies. The weight of expert e is at w + e·estride; rows are row_bytes apart.
// flags (mm_vec only): MM_ACC adds the product to y (a residual in the epilogue); MM_SWIGLU also takes the
// product with w2 (same shape: the up matrix) and writes silu(W·x) · (W2·x); MM_PAIR also writes
// W2·x (rows2 rows of the same width) to y2: two products sharing their input in one dispatch. w2's rows are
// row_bytes2 apart; it has w's format, or in mm_vec's two-format variants (FMT_TWO) its own.
// MM_XV4: x rows may be read as vec4. MM_NORM (a plain product): x is RMS-normed on the fly with the weight at
// estride's place and eps, with norm.comp's bits (the same 128-thread reduction, (x·scale)·w). MM_GNORM (mm_vec,
// a plain product): x is the delta-net's gated RMSNorm on the fly, norm.comp's MODE_GATED bits per rows2-float
// head of each row: ((x·scale_head)·w)·silu(z), the norm weight at estride's place, z at w2 (rows ldx apart).
// MM_COMBINE (mm_vec, MoE decode's down product and combine): workgroup row y is token t, which owns the k
// activation rows t·k … t·k + k − 1 (one per slot); y[t][row] = Σ_s (W_e·x[t·k + s])·wt[t·k + s] summed in slot
// order as moe_combine sums (e = sel[t·k + s], clamped below n_expert; sel at xidx, wt at w2).
// MM_SIGADD (mm_vec, a plain product): y += (W·x)·σ(g[t]) with g at w2 (one float per token: the bits of the
// product, sigmoid and add_scaled), and where y2 ≠ 0 then y2 += y (add: a residual, rows ldy apart).
#define MM_ACC 1u
#define MM_SWIGLU 2u
#define MM_PAIR 4u
#define MM_XV4 8u
#define MM_NORM 16u
#define MM_GNORM 32u
#define MM_COMBINE 64u
#define MM_SIGADD 128u
layout(push_constant) uniform MatPush {
    uint64_t w, x, y, items, xidx, yidx, tab, estride;
    uint cols, rows, T, ldx, ldy, row_bytes;
    float eps;
    uint flags;
    uint64_t w2, y2;
    uint rows2, row_bytes2;
    uint k, n_expert; // MM_COMBINE
} p;

void item_of(uint y, uint tile, out uint e, out uint p0, out uint n) {
    if (p.items != 0ul) {
        I32 it = I32(p.items);
        e = uint(it.v[3u * y]);
        p0 = uint(it.v[3u * y + 1u]);
        n = uint(it.v[3u * y + 2u]);
    } else {
        e = 0u;
        p0 = y * tile;
        n = min(tile, p.T - p0);
    }
}
uint xrow_of(uint t) { return p.xidx != 0ul ? uint(I32(p.xidx).v[t]) : t; }
uint yrow_of(uint t) { return p.yidx != 0ul ? uint(I32(p.yidx).v[t]) : t; }
