/* vk_internal.h — the Vulkan backend's shared declarations (the .c files of src/backend/vulkan/ only).
 *
 *   vk_loader.c    libvulkan opened at run time (dlopen), the entry points this backend calls
 *   vk_device.c    one context per physical device, shared by every backend on it: instance, device, queue,
 *                  memory types, the i-quant tables, pipelines (created on first use), device listing
 *   vk_stream.c    a backend's command stream: recording, barriers, the staging ring, submit / wait,
 *                  uploads, downloads, copies, fills, dispatches, timestamps
 *   vk_backend.c   the BackendVt: memory, weights (bind: upload once, progress bar), reserve, create
 *   vk_ops.c       the row ops;  vk_matmul.c the matrix products (GEMV, tiled GEMM, cooperative matrix, MoE)
 *   vk_seq.c       conv + SiLU, the delta rule (recurrent, chunked), attention
 *
 * Memory: every BBuf is one VkBuffer with its own device-local memory, addressed by shaders through its
 * device address (VK_KHR_buffer_device_address): push constants carry 64-bit addresses, so no descriptor
 * sets exist. Shaders are GLSL compiled to SPIR-V at build time (shaders/, embedded by the Makefile). */
#ifndef DL_BACKEND_VULKAN_VK_INTERNAL_H
#define DL_BACKEND_VULKAN_VK_INTERNAL_H

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* ---- entry points (vk_loader.c) ------------------------------------------------------------------------------- */

#define VK_GLOBAL_FNS(X) X(vkCreateInstance) X(vkEnumerateInstanceVersion) X(vkEnumerateInstanceExtensionProperties)
#define VK_INSTANCE_FNS(X)                                                                                            \
    X(vkDestroyInstance) X(vkEnumeratePhysicalDevices) X(vkGetPhysicalDeviceProperties)                              \
    X(vkGetPhysicalDeviceProperties2) X(vkGetPhysicalDeviceFeatures2) X(vkGetPhysicalDeviceMemoryProperties)         \
    X(vkGetPhysicalDeviceQueueFamilyProperties) X(vkCreateDevice) X(vkGetDeviceProcAddr)                             \
    X(vkEnumerateDeviceExtensionProperties)
#define VK_DEVICE_FNS(X)                                                                                              \
    X(vkDestroyDevice) X(vkGetDeviceQueue) X(vkQueueSubmit) X(vkDeviceWaitIdle) X(vkAllocateMemory) X(vkFreeMemory) \
    X(vkMapMemory) X(vkUnmapMemory) X(vkCreateBuffer) X(vkDestroyBuffer) X(vkGetBufferMemoryRequirements)           \
    X(vkBindBufferMemory) X(vkGetBufferDeviceAddress) X(vkCreateShaderModule) X(vkDestroyShaderModule)               \
    X(vkCreatePipelineLayout) X(vkDestroyPipelineLayout) X(vkCreateComputePipelines) X(vkDestroyPipeline)            \
    X(vkCreateCommandPool) X(vkDestroyCommandPool) X(vkAllocateCommandBuffers) X(vkResetCommandBuffer)               \
    X(vkBeginCommandBuffer) X(vkEndCommandBuffer) X(vkCmdBindPipeline) X(vkCmdPushConstants) X(vkCmdDispatch)       \
    X(vkCmdDispatchIndirect) X(vkCmdPipelineBarrier) X(vkCmdCopyBuffer) X(vkCmdFillBuffer) X(vkCmdWriteTimestamp)   \
    X(vkCmdResetQueryPool) X(vkCreateQueryPool) X(vkDestroyQueryPool) X(vkGetQueryPoolResults) X(vkCreateFence)     \
    X(vkDestroyFence) X(vkResetFences) X(vkWaitForFences)

typedef struct VkFns {
#define VK_DECL(name) PFN_##name name;
    VK_GLOBAL_FNS(VK_DECL) VK_INSTANCE_FNS(VK_DECL) VK_DEVICE_FNS(VK_DECL)
    PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV vkGetPhysicalDeviceCooperativeMatrixPropertiesNV;
#undef VK_DECL
} VkFns;

extern VkFns vkf; /* filled by vk_load, vk_load_instance, vk_load_device */

/* Opens libvulkan once (vk_backend_load's file when it came first, else libvulkan.so.1); false with a line in err if it cannot. */
bool vk_load(Err *err);
void vk_load_instance(VkInstance inst);
void vk_load_device(VkDevice dev);
const char *vk_result_str(VkResult r);

/* ---- shaders (the Makefile compiles shaders/NAME.comp and embeds them) -------------------------------------------------- */

typedef struct VkSpv {
    const char *name; /* the .comp file's name, with _FORMAT for per-format variants ("mm_vec_q4_K"); mm_vec's
                         two-format ones are mm_vec2_A_B ("mm_vec2_q5_K_q4_K") */
    const uint32_t *words;
    size_t n_words;
} VkSpv;
extern const VkSpv vk_spv[];
extern const int vk_n_spv;

/* ---- the device context: one per physical device, shared by every backend on it ----------------------------- */

/* Kernels with one variant per weight format. */
typedef enum VkFmtKernel { VKF_MM_VEC, VKF_MM_MAT, VKF_MM_COOP, VKF_GET_ROWS, VKF_COUNT } VkFmtKernel;

/* Kernels without format variants, in the order of vk_kernel_names (vk_device.c). */
typedef enum VkKernel {
    VK_ELTWISE, VK_NORM, VK_ROPE, VK_DN_GATES, VK_MOE_ROUTE, VK_MOE_GROUP, VK_CONV_SILU, VK_DN_RECURRENT,
    VK_DN_CHUNKED, VK_ATTENTION, VK_PROBE_COPY, VK_DN_PREP, VK_ATTN_PREP, VK_ATTN_COMBINE, VK_DN_PREP_SCAN, VK_LAYER_NORM,
    VK_ROPE_2D, VK_ATTN_FULL, VK_KERNEL_COUNT
} VkKernel;

#define VK_PUSH_BYTES 128 /* push-constant block of every kernel */

typedef struct VkDev {
    int index, refs;
    VkInstance instance;
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    uint32_t queue_family;
    pthread_mutex_t lock; /* the queue and the pipeline table */
    VkPhysicalDeviceProperties props;
    uint32_t subgroup_min, subgroup_max; /* subgroup sizes the device may use for compute */
    bool full_subgroups;                 /* VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT allowed */
    bool coopmat;                        /* VK_NV_cooperative_matrix with 16x16x16 f16 → f32 */
    bool timestamps;
    double ns_per_tick;
    uint32_t mem_device, mem_host;       /* memory type indices: device-local; host-visible + coherent */
    bool device_is_host;                 /* the device-local type is also host-visible + coherent (lavapipe,
                                            integrated GPUs): uploads and downloads can skip the staging copy */
    bool loop_limited;                   /* llvmpipe: at most VK_LOOP_ITERS_LLVMPIPE loop steps per invocation */
    uint64_t device_bytes;               /* the largest device-local heap */
    uint64_t max_alloc;
    char name[256];
    VkPipelineLayout layout;
    VkPipeline pipes[VK_KERNEL_COUNT];
    VkPipeline fmt_pipes[VKF_COUNT][64];
    int fmt_spv[VKF_COUNT][64];          /* index into vk_spv, or -1: no kernel for that format */
    VkPipeline pair_pipes[64][64];
    int16_t pair_spv[64][64];            /* mm_vec's two-format variant [w's format][w2's], or -1 */
    BBuf *tables;                        /* the i-quant grids and IQ4 / MXFP4 levels (vk_tables.h) */
} VkDev;

/* The context of device index (created on first use, shared, kept for the process); NULL with a line. */
VkDev *vk_dev_get(int index, Err *err);
void vk_dev_put(VkDev *d);
int vk_dev_count(Err *err);
VkPipeline vk_pipe(VkDev *d, VkKernel k);
VkPipeline vk_fmt_pipe(VkDev *d, VkFmtKernel k, uint32_t fmt);
bool vk_fmt_has(const VkDev *d, VkFmtKernel k, uint32_t fmt);
/* mm_vec with w in format fa and w2 in fb (fa != fb; the Makefile's VK_PAIR_FORMATS) */
VkPipeline vk_pair_pipe(VkDev *d, uint32_t fa, uint32_t fb);
bool vk_pair_has(const VkDev *d, uint32_t fa, uint32_t fb);

/* ---- memory ------------------------------------------------------------------------------------------------------ */

struct BBuf {
    VkBuffer buf;
    VkDeviceMemory mem;
    VkDeviceAddress addr;
    size_t bytes;
    void *map; /* host pointer when the memory is host-visible */
};

/* A buffer of bytes (+ 256 bytes of slack that kernels may read past a matrix's end), zeroed if zero. */
BBuf *vk_buf_new(VkDev *d, size_t bytes, bool host, bool zero, Err *err);
void vk_buf_free(VkDev *d, BBuf *b);
static inline uint64_t va(BView v) { return v.buf->addr + v.off; }

/* ---- the backend --------------------------------------------------------------------------------------------------- */

#define VK_MARKS_MAX 4096
#define VK_PEND_MAX 48

/* One buffer range a recorded command reads or writes (bytes [lo, hi) of buf). */
typedef struct VkAcc {
    const BBuf *buf;
    uint64_t lo, hi;
    bool write;
} VkAcc;
static inline VkAcc acc_r(BView v, uint64_t bytes) { return (VkAcc){v.buf, v.off, v.off + bytes, false}; }
static inline VkAcc acc_w(BView v, uint64_t bytes) { return (VkAcc){v.buf, v.off, v.off + bytes, true}; }
/* a grid dimension capped at the device minimum's 65535 (the kernels stride over the rest) */
static inline uint32_t cap65535(uint64_t n) { return n > 65535 ? 65535 : (uint32_t)n; }
/* bytes spanned by rows × heads vectors of n floats at strides row, head (floats) */
static inline uint64_t span(uint64_t rows, uint64_t row, uint64_t heads, uint64_t head, uint64_t n) {
    if (!rows || !heads || !n) return 0;
    return 4 * ((rows - 1) * row + (heads - 1) * head + n);
}

typedef struct VkMark {
    int tag;
    uint64_t ticks;
} VkMark;

/* A recorded pass kept for replay (BackendVt.graph_capture / graph_replay). Uploads recorded inside it read
 * from its own staging (constants of the pass: the ring is rewritten by every submission). */
typedef struct VkGraph {
    VkCommandBuffer cmd;
    BBuf *stage;
    size_t stage_at;
    bool kept;            /* whole, replayable while epoch holds */
    bool broken;          /* a submission, timestamp or staging overflow inside the capture */
    uint64_t epoch;       /* VkBackend.epoch at the capture */
    uint64_t id;          /* the capture's id (graph_capture's answer) */
    uint64_t n_cmds, n_barriers, d0, b0; /* its commands and barriers (counted again at each replay) */
} VkGraph;
#define VK_GRAPH_STAGE ((size_t)64 << 10)

typedef struct VkBackend {
    Backend be;
    VkDev *d;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    bool recording, in_flight;
    int n_cmds;          /* commands recorded into cmd since the last submission */
    /* recorded passes: cur is where commands go (cmd, or the graph being captured); pend_graph is submitted
     * after cmd by the next submission (captured or replayed); epoch counts allocations and frees (a graph
     * records addresses: it is replayed only in the epoch it was captured in) */
    VkCommandBuffer cur;
    VkGraph graphs[BACKEND_GRAPHS];
    VkGraph *cap, *pend_graph;
    int n_cur;           /* commands recorded into cur */
    uint64_t epoch, graph_ids;
    bool graph_off;      /* tune graph=0: no graphs kept (record every pass, for comparisons) */
    bool map_off;        /* tune map=0: uploads and downloads through the staging ring even where the device
                            memory is the host's (a discrete GPU's path, tested on lavapipe) */
    /* the accesses of the commands recorded since the last barrier (vks_cmd): a command that reads what one
     * of them wrote, or writes what one of them read or wrote, gets a barrier first */
    VkAcc pend[VK_PEND_MAX];
    int n_pend;          /* -1: something unknown since the last barrier (the next command waits) */
    bool fuse_off;       /* tune fuse=0: the optional fused ops are not offered (comparisons) */
    bool prep_scan_off;  /* tune prepscan=0: dn_prep_scan not offered (dn_prep, then the recurrence) */
    bool moe_fuse_off;   /* tune moefuse=0: moe_ffn_combine and matmul_add_sigmoid decline (MoE decode as before) */
    bool dep_off;        /* tune dep=0: a barrier before every command (the old stream, for comparisons) */
    /* staging ring (host-visible): uploads recorded in the stream read from here */
    BBuf *stage;
    size_t stage_at;
    /* weights: per registry id the buffer view that holds it */
    BView *wv;
    const Weight *weights;
    int n_weights;
    BBuf **wbufs;
    int n_wbufs;
    /* scratch for the chunked delta rule, the MoE grouping's dispatch arguments, copies of provider data */
    BBuf *scratch;
    size_t scratch_bytes;
    BBuf *pscratch;      /* an expert provider's matrix, uploaded for one product */
    size_t pscratch_bytes;
    size_t weight_bytes;
    void (*progress)(void *user, const char *phase, uint64_t done, uint64_t total); /* "upload" in bind */
    void *progress_user;
    /* timestamps */
    VkQueryPool qpool;
    int n_queries;       /* recorded in the current command buffer */
    int q_tags[VK_MARKS_MAX];
    VkMark marks[VK_MARKS_MAX];
    int n_marks;
    /* statistics */
    uint64_t h2d, d2h, n_submits;
    uint64_t n_dispatch, n_barrier; /* commands run (dispatches, copies, fills; replayed ones too), barriers */
    uint64_t n_recorded, n_replays; /* commands recorded by the host; graphs replayed */
    uint64_t host_ns, rec_t0;       /* host time issuing (from a begin to the submit, waits excluded) */
    bool failed;
    char fail_msg[300];
    bool coop;           /* use the cooperative-matrix GEMM (device has it, not turned off) */
    int tile_min_rows;   /* batches of at least this many rows take the tiled GEMM */
    int attn_split_min;  /* attention of at most VK_ATTN_SPLIT_T queries over more keys than this is split over
                            the keys (flash-decoding); 0: never */
} VkBackend;

static inline VkBackend *vkb(Backend *be) { return (VkBackend *)be; }

/* stream (vk_stream.c) */
void vks_begin(VkBackend *b);                      /* starts recording if not already */
int vks_flush(VkBackend *b, Err *err);             /* submits what is recorded and waits */
void vks_barrier(VkBackend *b);                    /* the next command sees everything recorded before */
/* A dispatch whose buffer accesses are acc[0..n_acc) (weights and tables, never written in a pass, need not be
 * listed); it waits only for the earlier commands it depends on. n_acc < 0: accesses unknown (it waits for
 * everything before, and everything after waits for it). */
void vks_dispatch_acc(VkBackend *b, VkPipeline p, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy,
                      uint32_t gz, const VkAcc *acc, int n_acc);
void vks_dispatch(VkBackend *b, VkPipeline p, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz);
/* indirect: the arguments (args, 12 bytes) are read as well as acc */
void vks_dispatch_indirect(VkBackend *b, VkPipeline p, const void *push, size_t push_bytes, BView args, const VkAcc *acc,
                           int n_acc);
void vks_upload(VkBackend *b, BView dst, const void *src, size_t bytes);
void vks_download(VkBackend *b, void *dst, BView src, size_t bytes);
void vks_copy(VkBackend *b, BView dst, BView src, size_t bytes);
void vks_fill(VkBackend *b, BView dst, uint8_t byte, size_t bytes);
void vks_mark(VkBackend *b, int tag);
/* the graph ops (BackendVt.graph_capture, graph_end, graph_replay) */
uint64_t vks_graph_capture(Backend *be, int slot);
bool vks_graph_end(Backend *be);
bool vks_graph_replay(Backend *be, int slot, uint64_t id);
int vks_init(VkBackend *b, Err *err);
void vks_install(BackendVt *vt); /* memory copies and the stream calls */
void vks_destroy(VkBackend *b);
/* a failure inside the stream (device lost, out of memory) is kept and reported by the next submit/wait */
void vks_fail(VkBackend *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* scratch of at least bytes (grown between passes only; the stream is flushed first when it must grow) */
BView vk_scratch(VkBackend *b, size_t bytes);

/* ops (vk_ops.c, vk_matmul.c, vk_seq.c) install themselves into the vtable */
void vk_ops_install(BackendVt *vt);
void vk_matmul_install(BackendVt *vt);
void vk_seq_install(BackendVt *vt);
void vk_vision_install(BackendVt *vt); /* vk_vision.c: the vision tower's ops */
/* y = silu(g)·u over rows of n (y may alias g) */
void vk_swiglu(VkBackend *b, BView y, BView g, BView u, int rows, int n);
/* the weight view of an entry (expert e of a stack when e >= 0) */
BView vk_weight(VkBackend *b, const Weight *w, int expert);

/* work items of at most this many tokens per workgroup for the vector kernels (mm_vec) */
#define VK_VEC_TOKENS 8
/* sequence length from which the chunked delta rule is used (docs/VULKAN.md, "Delta rule: the choice") */
#define VK_DN_CHUNK_MIN 128
/* Attention split over the keys (flash-decoding, docs/VULKAN.md): for at most VK_ATTN_SPLIT_T queries over more
 * than VK_ATTN_SPLIT_MIN keys (tune split=N), S = ceil(keys / VK_ATTN_SPLIT_KEYS) workgroups per (query, head),
 * at least 2 and at most VK_ATTN_SPLIT_ROWS / T (attn_combine.comp's MAX_S), then one combine dispatch. */
#define VK_ATTN_SPLIT_MIN 512
#define VK_ATTN_SPLIT_KEYS 256
#define VK_ATTN_SPLIT_T 4
#define VK_ATTN_SPLIT_ROWS 128
/* lavapipe (llvmpipe) ends every loop of an invocation once 65535 iterations of all its loops together have run
 * (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS, a guard against endless loops): the results are then silently wrong.
 * attention.comp's walk over the keys is the one kernel that can reach it; the host refuses such a walk there
 * (VkDev.loop_limited) instead of returning wrong numbers. */
#define VK_LOOP_ITERS_LLVMPIPE 65535

#endif
