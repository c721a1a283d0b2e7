/* host_backend.h — the host backends ("ref" and "cpu"), shared by their files: backend_cpu.c (memory,
 * binding, the matmul and sequence ops through the kernels' Ops table), host_ops.c (the row ops: the loops
 * over activations the forward pass no longer has), host_vision.c (the vision tower's ops) and pack.c (load-time
 * repacking).
 *
 * Host memory: a BBuf is a big_alloc'ed block; a BView resolves to base + off. Caller memory wrapped by
 * wrap_host is a view of a BBuf whose base is 0 and whose offset is the address. */
#ifndef DL_BACKEND_CPU_HOST_BACKEND_H
#define DL_BACKEND_CPU_HOST_BACKEND_H

#include "backend/backend.h"
#include "kernels/cpu/isa.h"
#include "kernels/ops.h"

struct BBuf {
    uintptr_t base;
    size_t bytes;
};

static inline void *hv(BView v) { return (void *)(v.buf->base + v.off); }
static inline float *hf(BView v) { return (float *)hv(v); }
static inline int32_t *hi(BView v) { return (int32_t *)hv(v); }

/* The same for a view of n bytes (floats, ints), checked in sanitizer builds: off + n <= the buffer's bytes.
 * The activation buffers share one region (forward.c), so an op overrunning its view writes into a neighbour
 * ASan cannot see; the check catches one that runs past the region, and a view past its buffer (the ref
 * backend runs every op through these). Wrapped caller memory (base 0) is ASan's to check. */
#if defined(__SANITIZE_ADDRESS__)
#define HOST_VIEW_CHECKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HOST_VIEW_CHECKS 1
#endif
#endif
static inline void *hv_n(BView v, size_t n) {
#ifdef HOST_VIEW_CHECKS
    ASSERT(v.buf->base == 0 || (v.off <= v.buf->bytes && n <= v.buf->bytes - v.off));
#endif
    (void)n;
    return hv(v);
}
static inline float *hf_n(BView v, int64_t n) { return (float *)hv_n(v, (size_t)n * sizeof(float)); }
static inline int32_t *hi_n(BView v, int64_t n) { return (int32_t *)hv_n(v, (size_t)n * sizeof(int32_t)); }

/* The file ranges whose matrices have a packed copy (sorted by address) and the copies' arena. */
typedef struct PackedRange {
    const void *src;
    size_t bytes;
} PackedRange;

typedef struct PackSet {
    void *arena;
    size_t bytes;
    PackedRange *ranges;
    int n;
} PackSet;

typedef struct HostProgress {
    void (*fn)(void *user, const char *phase, uint64_t done, uint64_t total); /* BackendOptions.progress */
    void *user;
} HostProgress;

typedef struct HostBackend {
    Backend be;
    Isa isa;
    const Ops *ops;
    Pool *pool;
    OpCtx oc;      /* mode, pool, scratch (reserve) */
    bool pack;
    MatW *mats;    /* per weight id < n_ids: the kernels' view (experts: the first matrix of the stack); data
                      NULL for an id not bound here */
    const Weight *weights; /* what bind was given (the registry or a part of it) */
    int n_weights, n_ids;
    PackSet packs;
    HostProgress progress; /* BackendOptions.progress */
    BBuf wrap;     /* base 0: views of caller memory */
    uint8_t *moe_ws; /* host_moe.c's per-thread work areas, moe_ws_bytes in all (grown on demand) */
    size_t moe_ws_bytes;
    bool moe_oom;  /* they could not be had: the next wait fails */
} HostBackend;

static inline HostBackend *host_of(Backend *be) { return (HostBackend *)be; }

/* Gives the matrices the fast kernels read faster in another layout a packed copy (MatW.pack; today: Q8_0,
 * PACK_R8 for llama.cpp's orders (rows a multiple of 8), PACK_P16 for the fast arithmetic (rows a multiple of
 * 16, AVX-512)) and drops the pages of those whose droppable[i] says they are file pages (read
 * back from the file if touched again; other memory would lose its contents). Results are bit-identical
 * with or without. */
/* progress (may be NULL): "pack", bytes copied of bytes to copy, on the calling thread. */
int host_pack(MatW *mats, const bool *droppable, int n, int kind, const HostProgress *progress, PackSet *out, Err *err);
void host_pack_free(PackSet *p);
/* The R8 layout (MatW.pack): rows (a multiple of 8) of row_bytes, blocks of block_bytes, interleaved by 8
 * per block: block i of row 8g+r goes to dst + g·8·row_bytes + (8i + r)·block_bytes. */
void pack_rows8(void *dst, const void *src, int64_t rows, size_t row_bytes, size_t block_bytes);
/* The P16 layout (ops.h's PACK_P16) of a Q8_0 or Q4_K matrix w whose rows are a multiple of 16: dst must hold
 * pack_p16_bytes(w) · rows / 16 bytes. pack_p16_block rebuilds row r's block i (the file's bytes) from it. */
bool pack_p16_format(const MatW *w);
size_t pack_p16_bytes(const MatW *w); /* bytes per panel of 16 rows */
void pack_p16(void *dst, const MatW *w);
void pack_p16_block(const void *pack, const MatW *w, int64_t r, int64_t i, uint8_t *block);

/* "cpu" (ref false: the ISA's kernels) or "ref" (the scalar reference); the registry's rows (registry.c). */
Backend *host_backend_create(const BackendOptions *o, bool ref, Err *err);
/* The CPU as the one host device (the registry's cpu row: deltallm devices). */
int host_devices(const BackendOptions *o, BackendDevice *out, int cap, Err *err);

/* The row ops (host_ops.c), installed into a vtable by backend_cpu.c. */
void host_ops_install(BackendVt *vt);
/* The vision tower's ops (host_vision.c), installed by host_ops_install. */
void host_vision_install(BackendVt *vt);
/* The kernels' view of weight w, or of its expert `expert` (≥ 0; its bytes at data when not NULL: an expert
 * cache's copy, read without panels). */
MatW host_expert_mat(const HostBackend *hb, const Weight *w, int expert, const void *data);
/* BackendVt.moe_ffn (host_moe.c) */
void host_moe_ffn(Backend *be, const MoeArgs *a);

#endif
