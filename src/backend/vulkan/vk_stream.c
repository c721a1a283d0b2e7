/* vk_stream.c — a Vulkan backend's command stream (backend.h: begin / submit / wait, and the ordering rules
 * of uploads, downloads and ops).
 *
 * One primary command buffer records everything between submissions: dispatches, copies, fills and the
 * copies out of the staging ring that carry uploads. Each command names the buffer ranges it reads and writes
 * (VkAcc); the stream keeps those of the commands recorded since the last barrier and records a global memory
 * barrier only before a command that reads what one of them wrote or writes what one of them touched, so
 * independent commands (a layer's projections) run back to back. A command with unknown accesses waits for
 * everything before it and makes the next one wait (`dep=0` in the tuning string: a barrier before every
 * command, the old stream). The counters (dispatches, barriers, host time recording) feed --profile. An upload issued while
 * commands are recorded is copied into the staging ring at once and recorded as a buffer copy, so it lands
 * in issue order; a download submits what is recorded, waits, and reads. When nothing is pending and the
 * device memory is the host's (lavapipe, integrated GPUs), uploads and downloads are plain memcpy.
 *
 * Timestamps (vks_mark) go into a query pool and are read back after each wait, so a profile can span the
 * several submissions of one forward pass (an MoE layer's selection download flushes the stream).
 *
 * Recorded passes (graph_capture / graph_end / graph_replay, docs/VULKAN.md "A decode pass recorded once"):
 * a capture records into a graph's own command buffer (not one-time) instead of the stream's, with uploads
 * in it read from the graph's own staging; what the stream recorded before the capture (the pass's inputs,
 * when they are not plain memcpy) is submitted first, ended by a barrier. A replay records nothing: the next
 * submission hands over the inputs and the kept graph, and the counters add the graph's commands. A
 * submission, a timestamp or a staging overflow inside a capture leaves the graph unkept (it still runs
 * that once); every allocation or free (epoch) makes kept graphs stale. */
#include "backend/vulkan/vk_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define STAGE_BYTES ((size_t)32 << 20)

void vks_fail(VkBackend *b, const char *fmt, ...) {
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->fail_msg, sizeof b->fail_msg, fmt, ap);
    va_end(ap);
    b->failed = true;
}

int vks_init(VkBackend *b, Err *err) {
    VkDev *d = b->d;
    const VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = d->queue_family};
    VkResult r = vkf.vkCreateCommandPool(d->dev, &pci, NULL, &b->pool);
    if (r != VK_SUCCESS) return err_set(err, "command pool: %s", vk_result_str(r));
    const VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = b->pool,
                                            .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    if ((r = vkf.vkAllocateCommandBuffers(d->dev, &ai, &b->cmd)) != VK_SUCCESS)
        return err_set(err, "command buffer: %s", vk_result_str(r));
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = vkf.vkCreateFence(d->dev, &fci, NULL, &b->fence)) != VK_SUCCESS) return err_set(err, "fence: %s", vk_result_str(r));
    if (!(b->stage = vk_buf_new(d, STAGE_BYTES, true, false, err))) return err_prefix(err, "staging buffer"), -1;
    b->cur = b->cmd;
    if (d->timestamps) {
        const VkQueryPoolCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO, .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                           .queryCount = VK_MARKS_MAX};
        if (vkf.vkCreateQueryPool(d->dev, &qci, NULL, &b->qpool) != VK_SUCCESS) b->qpool = VK_NULL_HANDLE;
    }
    return 0;
}

void vks_destroy(VkBackend *b) {
    VkDev *d = b->d;
    Err e = {{0}};
    if (b->recording || b->in_flight) vks_flush(b, &e);
    if (b->qpool) vkf.vkDestroyQueryPool(d->dev, b->qpool, NULL);
    vk_buf_free(d, b->stage);
    for (int i = 0; i < BACKEND_GRAPHS; i++) vk_buf_free(d, b->graphs[i].stage); /* their buffers go with the pool */
    if (b->fence) vkf.vkDestroyFence(d->dev, b->fence, NULL);
    if (b->pool) vkf.vkDestroyCommandPool(d->dev, b->pool, NULL);
}

static int wait_fence(VkBackend *b) {
    if (!b->in_flight) return 0;
    const VkResult r = vkf.vkWaitForFences(b->d->dev, 1, &b->fence, VK_TRUE, UINT64_MAX);
    b->in_flight = false;
    if (r != VK_SUCCESS) {
        vks_fail(b, "Vulkan device %s: %s", b->d->name, vk_result_str(r));
        return -1;
    }
    if (b->n_queries > 0) {
        uint64_t t[VK_MARKS_MAX];
        if (vkf.vkGetQueryPoolResults(b->d->dev, b->qpool, 0, (uint32_t)b->n_queries, sizeof t, t, sizeof t[0],
                                      VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT) == VK_SUCCESS)
            for (int i = 0; i < b->n_queries && b->n_marks < VK_MARKS_MAX; i++)
                b->marks[b->n_marks++] = (VkMark){b->q_tags[i], t[i]};
        b->n_queries = 0;
    }
    return 0;
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void vks_begin(VkBackend *b) {
    if (b->recording) return;
    wait_fence(b);
    vkf.vkResetCommandBuffer(b->cmd, 0);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    vkf.vkBeginCommandBuffer(b->cmd, &bi);
    if (b->qpool) vkf.vkCmdResetQueryPool(b->cmd, b->qpool, 0, VK_MARKS_MAX);
    b->recording = true;
    b->n_cmds = 0;
    b->n_pend = 0;
    b->n_queries = 0;
    b->stage_at = 0; /* nothing in flight reads the ring any more */
    b->cur = b->cmd;
    b->n_cur = 0;
    b->rec_t0 = now_ns();
}

static void barrier_in(VkCommandBuffer c) {
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                                 VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                                 VK_ACCESS_INDIRECT_COMMAND_READ_BIT};
    vkf.vkCmdPipelineBarrier(c, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                             VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT |
                                 VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT,
                             0, 1, &mb, 0, NULL, 0, NULL);
}

static int submit(VkBackend *b) {
    if (!b->recording) return 0;
    b->recording = false;
    if (b->cap) { /* a submission inside a capture: the graph runs this once and is not kept */
        b->cap->broken = true;
        vkf.vkEndCommandBuffer(b->cap->cmd);
        b->pend_graph = b->cap;
        b->cap = NULL;
    }
    VkGraph *g = b->pend_graph;
    b->pend_graph = NULL;
    b->cur = b->cmd;
    if (g && b->n_cmds > 0) barrier_in(b->cmd); /* the inputs are visible to the graph */
    vkf.vkEndCommandBuffer(b->cmd);
    const bool main = b->n_cmds > 0 || b->n_queries > 0;
    if (!main && !g) return 0;
    b->host_ns += now_ns() - b->rec_t0;
    vkf.vkResetFences(b->d->dev, 1, &b->fence);
    const VkCommandBuffer bufs[2] = {main ? b->cmd : g->cmd, g ? g->cmd : VK_NULL_HANDLE};
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = main && g ? 2 : 1,
                             .pCommandBuffers = bufs};
    pthread_mutex_lock(&b->d->lock);
    const VkResult r = vkf.vkQueueSubmit(b->d->queue, 1, &si, b->fence);
    pthread_mutex_unlock(&b->d->lock);
    b->n_submits++;
    if (r != VK_SUCCESS) {
        vks_fail(b, "Vulkan submission: %s", vk_result_str(r));
        return -1;
    }
    b->in_flight = true;
    return 0;
}

static int report(VkBackend *b, Err *err) {
    if (!b->failed) return 0;
    b->failed = false;
    return err_set(err, "%s", b->fail_msg);
}

int vks_flush(VkBackend *b, Err *err) {
    submit(b);
    wait_fence(b);
    return report(b, err);
}

/* the vtable's stream calls */
static void v_begin(Backend *be) { vks_begin(vkb(be)); }
static int v_submit(Backend *be, Err *err) {
    submit(vkb(be));
    return report(vkb(be), err);
}
static int v_wait(Backend *be, Err *err) {
    wait_fence(vkb(be));
    return report(vkb(be), err);
}

void vks_barrier(VkBackend *b) {
    b->n_pend = 0;
    if (b->n_cur > 0) barrier_in(b->cur);
}

/* recording resumes: a graph waiting for the submission (after graph_end or graph_replay) goes first */
static void rec_open(VkBackend *b) {
    if (b->pend_graph) submit(b);
    vks_begin(b);
}

static bool overlaps(const VkAcc *a, const VkAcc *c) {
    return a->buf == c->buf && a->lo < c->hi && c->lo < a->hi && (a->write || c->write);
}

/* Before recording a command with accesses acc[0..n) (n < 0: unknown): a barrier if it depends on a command
 * since the last one, then its accesses join the pending set. */
static void before_acc(VkBackend *b, const VkAcc *acc, int n) {
    rec_open(b);
    bool need = n < 0 || b->n_pend < 0 || b->dep_off || b->n_pend + n > VK_PEND_MAX;
    for (int i = 0; i < n && !need; i++)
        for (int j = 0; j < b->n_pend && !need; j++) need = overlaps(&acc[i], &b->pend[j]);
    if (need && b->n_cur > 0) {
        vks_barrier(b);
        b->n_barrier++;
    }
    if (need) b->n_pend = 0;
    if (n < 0) b->n_pend = -1;
    for (int i = 0; i < n; i++)
        if (acc[i].hi > acc[i].lo) b->pend[b->n_pend++] = acc[i];
    if (!b->cap) b->n_cmds++;
    b->n_cur++;
    b->n_dispatch++;
    b->n_recorded++;
}

static void before(VkBackend *b) { before_acc(b, NULL, -1); }

static bool check(VkBackend *b, VkPipeline p) {
    if (!p) vks_fail(b, "a Vulkan pipeline could not be created");
    return p != VK_NULL_HANDLE;
}

void vks_dispatch_acc(VkBackend *b, VkPipeline p, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy,
                      uint32_t gz, const VkAcc *acc, int n_acc) {
    if (!gx || !gy || !gz || !check(b, p)) return;
    const uint32_t lim = b->d->props.limits.maxComputeWorkGroupCount[1];
    ASSERT(gx <= b->d->props.limits.maxComputeWorkGroupCount[0] && gy <= lim && gz <= b->d->props.limits.maxComputeWorkGroupCount[2]);
    before_acc(b, acc, n_acc);
    vkf.vkCmdBindPipeline(b->cur, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    vkf.vkCmdPushConstants(b->cur, b->d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)push_bytes, push);
    vkf.vkCmdDispatch(b->cur, gx, gy, gz);
}

void vks_dispatch(VkBackend *b, VkPipeline p, const void *push, size_t push_bytes, uint32_t gx, uint32_t gy, uint32_t gz) {
    vks_dispatch_acc(b, p, push, push_bytes, gx, gy, gz, NULL, -1);
}

void vks_dispatch_indirect(VkBackend *b, VkPipeline p, const void *push, size_t push_bytes, BView args, const VkAcc *acc,
                           int n_acc) {
    if (!check(b, p)) return;
    VkAcc all[VK_PEND_MAX];
    int n = 0;
    if (n_acc >= 0 && n_acc < VK_PEND_MAX) {
        all[n++] = acc_r(args, 12);
        for (int i = 0; i < n_acc; i++) all[n++] = acc[i];
    }
    before_acc(b, all, n_acc >= 0 && n_acc < VK_PEND_MAX ? n : -1);
    vkf.vkCmdBindPipeline(b->cur, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    vkf.vkCmdPushConstants(b->cur, b->d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)push_bytes, push);
    vkf.vkCmdDispatchIndirect(b->cur, args.buf->buf, args.off);
}

static bool idle(const VkBackend *b) {
    return !b->in_flight && !b->cap && !b->pend_graph && (!b->recording || b->n_cmds == 0);
}

void vks_upload(VkBackend *b, BView dst, const void *src, size_t bytes) {
    if (!bytes) return;
    ASSERT(dst.off + bytes <= dst.buf->bytes + 256);
    b->h2d += bytes;
    if (dst.buf->map && idle(b) && !b->map_off) {
        memcpy((uint8_t *)dst.buf->map + dst.off, src, bytes);
        return;
    }
    const uint8_t *s = src;
    while (bytes) {
        size_t n = bytes < STAGE_BYTES / 2 ? bytes : STAGE_BYTES / 2;
        VkGraph *g = b->cap;
        if (g && g->stage_at + n <= VK_GRAPH_STAGE) { /* a constant of the captured pass: in the graph's staging */
            const VkAcc a = acc_w(dst, n);
            before_acc(b, &a, 1);
            memcpy((uint8_t *)g->stage->map + g->stage_at, s, n);
            const VkBufferCopy c = {g->stage_at, dst.off, n};
            vkf.vkCmdCopyBuffer(b->cur, g->stage->buf, dst.buf->buf, 1, &c);
            g->stage_at = (g->stage_at + n + 63) & ~(size_t)63;
            s += n, dst.off += n, bytes -= n;
            continue;
        }
        if (g) g->broken = true; /* the ring is rewritten by later passes */
        if (b->stage_at + n > STAGE_BYTES) {
            Err e = {{0}};
            if (vks_flush(b, &e)) vks_fail(b, "%s", e.msg);
            vks_begin(b);
        }
        const VkAcc a = acc_w(dst, n); /* the ring's bytes are the host's, each used once per recording */
        before_acc(b, &a, 1);
        memcpy((uint8_t *)b->stage->map + b->stage_at, s, n);
        const VkBufferCopy c = {b->stage_at, dst.off, n};
        vkf.vkCmdCopyBuffer(b->cur, b->stage->buf, dst.buf->buf, 1, &c);
        b->stage_at = (b->stage_at + n + 63) & ~(size_t)63;
        s += n, dst.off += n, bytes -= n;
    }
}

void vks_download(VkBackend *b, void *dst, BView src, size_t bytes) {
    if (!bytes) return;
    ASSERT(src.off + bytes <= src.buf->bytes + 256);
    b->d2h += bytes;
    Err e = {{0}};
    if (!idle(b) && vks_flush(b, &e)) vks_fail(b, "%s", e.msg);
    if (src.buf->map && !b->map_off) {
        memcpy(dst, (const uint8_t *)src.buf->map + src.off, bytes);
        return;
    }
    uint8_t *d = dst;
    while (bytes) {
        const size_t n = bytes < STAGE_BYTES ? bytes : STAGE_BYTES;
        vks_begin(b);
        before(b);
        const VkBufferCopy c = {src.off, 0, n};
        vkf.vkCmdCopyBuffer(b->cur, src.buf->buf, b->stage->buf, 1, &c);
        if (vks_flush(b, &e)) vks_fail(b, "%s", e.msg);
        memcpy(d, b->stage->map, n);
        d += n, src.off += n, bytes -= n;
    }
}

void vks_copy(VkBackend *b, BView dst, BView src, size_t bytes) {
    if (!bytes || (dst.buf == src.buf && dst.off == src.off)) return;
    const bool overlap = dst.buf == src.buf && dst.off < src.off + bytes && src.off < dst.off + bytes;
    if (overlap) { /* memmove semantics through the staging ring */
        ASSERT(bytes <= STAGE_BYTES / 2);
        if (b->cap) b->cap->broken = true;
        if (b->stage_at + bytes > STAGE_BYTES) {
            Err e = {{0}};
            if (vks_flush(b, &e)) vks_fail(b, "%s", e.msg);
        }
        before(b);
        const VkBufferCopy c1 = {src.off, b->stage_at, bytes};
        vkf.vkCmdCopyBuffer(b->cur, src.buf->buf, b->stage->buf, 1, &c1);
        before(b);
        const VkBufferCopy c2 = {b->stage_at, dst.off, bytes};
        vkf.vkCmdCopyBuffer(b->cur, b->stage->buf, dst.buf->buf, 1, &c2);
        b->stage_at = (b->stage_at + bytes + 63) & ~(size_t)63;
        return;
    }
    const VkAcc a[2] = {acc_r(src, bytes), acc_w(dst, bytes)};
    before_acc(b, a, 2);
    const VkBufferCopy c = {src.off, dst.off, bytes};
    vkf.vkCmdCopyBuffer(b->cur, src.buf->buf, dst.buf->buf, 1, &c);
}

void vks_fill(VkBackend *b, BView dst, uint8_t byte, size_t bytes) {
    if (!bytes) return;
    uint8_t pat[4] = {byte, byte, byte, byte};
    while (bytes && (dst.off & 3)) { /* an unaligned head, byte by byte through the ring */
        vks_upload(b, dst, pat, 1);
        b->h2d--;
        dst.off++, bytes--;
    }
    const size_t body = bytes & ~(size_t)3;
    if (body) {
        const VkAcc a = acc_w(dst, body);
        before_acc(b, &a, 1);
        vkf.vkCmdFillBuffer(b->cur, dst.buf->buf, dst.off, body, (uint32_t)byte * 0x01010101u);
    }
    if (bytes > body) {
        vks_upload(b, bv_bytes(dst, body), pat, bytes - body);
        b->h2d -= bytes - body;
    }
}

void vks_mark(VkBackend *b, int tag) {
    if (!b->qpool) return;
    rec_open(b);
    if (b->n_queries >= VK_MARKS_MAX) return;
    if (b->cap) b->cap->broken = true; /* the query pool is reset per submission */
    if (b->n_cur > 0) b->n_barrier++; /* a timestamp after everything before it: a real barrier, counted */
    vks_barrier(b);
    vkf.vkCmdWriteTimestamp(b->cur, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, b->qpool, (uint32_t)b->n_queries);
    b->q_tags[b->n_queries++] = tag;
}

/* ---- recorded passes --------------------------------------------------------------------------------------- */

static bool graph_ready(const VkBackend *b, int slot) {
    return !b->graph_off && slot >= 0 && slot < BACKEND_GRAPHS && b->recording && !b->cap && !b->pend_graph && !b->failed;
}

uint64_t vks_graph_capture(Backend *be, int slot) {
    VkBackend *b = vkb(be);
    if (!graph_ready(b, slot)) return 0;
    VkGraph *g = &b->graphs[slot];
    g->kept = false;
    if (!g->cmd) {
        const VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                                .commandPool = b->pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                                .commandBufferCount = 1};
        if (vkf.vkAllocateCommandBuffers(b->d->dev, &ai, &g->cmd) != VK_SUCCESS) return g->cmd = VK_NULL_HANDLE, 0;
    }
    if (!g->stage) { /* its own, not the backend's memory: allocating it leaves the other graphs valid */
        Err e = {{0}};
        if (!(g->stage = vk_buf_new(b->d, VK_GRAPH_STAGE, true, false, &e))) return 0;
    }
    vkf.vkResetCommandBuffer(g->cmd, 0);
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkf.vkBeginCommandBuffer(g->cmd, &bi);
    g->broken = false;
    g->stage_at = 0;
    g->d0 = b->n_dispatch, g->b0 = b->n_barrier;
    b->cap = g;
    b->cur = g->cmd;
    b->n_cur = 0;
    b->n_pend = 0; /* the inputs before it are behind the barrier submit puts between the two */
    return g->id = ++b->graph_ids;
}

bool vks_graph_end(Backend *be) {
    VkBackend *b = vkb(be);
    VkGraph *g = b->cap;
    if (!g) return false;
    vkf.vkEndCommandBuffer(g->cmd);
    b->cap = NULL;
    b->pend_graph = g;
    g->kept = !g->broken && !b->failed;
    g->epoch = b->epoch;
    g->n_cmds = b->n_dispatch - g->d0, g->n_barriers = b->n_barrier - g->b0;
    return g->kept;
}

bool vks_graph_replay(Backend *be, int slot, uint64_t id) {
    VkBackend *b = vkb(be);
    if (!graph_ready(b, slot)) return false;
    VkGraph *g = &b->graphs[slot];
    if (!g->kept || g->id != id || g->epoch != b->epoch) return false;
    b->pend_graph = g;
    b->n_dispatch += g->n_cmds, b->n_barrier += g->n_barriers;
    b->n_replays++;
    return true;
}

/* memory calls of the vtable */
static void v_upload(Backend *be, BView dst, const void *src, size_t bytes) { vks_upload(vkb(be), dst, src, bytes); }
static void v_download(Backend *be, void *dst, BView src, size_t bytes) { vks_download(vkb(be), dst, src, bytes); }
static void v_copy(Backend *be, BView dst, BView src, size_t bytes) { vks_copy(vkb(be), dst, src, bytes); }
static void v_fill(Backend *be, BView dst, uint8_t byte, size_t bytes) { vks_fill(vkb(be), dst, byte, bytes); }

void vks_install(BackendVt *vt) {
    vt->upload = v_upload;
    vt->download = v_download;
    vt->copy = v_copy;
    vt->fill = v_fill;
    vt->begin = v_begin;
    vt->submit = v_submit;
    vt->wait = v_wait;
    vt->graph_capture = vks_graph_capture;
    vt->graph_end = vks_graph_end;
    vt->graph_replay = vks_graph_replay;
}
