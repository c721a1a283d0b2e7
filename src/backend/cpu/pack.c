/* pack.c — load-time repacking of matrix weights for the fast CPU kernels (host_backend.h: host_pack), a
 * detail of the CPU backend behind bind().
 *
 * A Q8_0 matrix whose row count is a multiple of 8 gets a copy with its rows interleaved by 8 per block
 * ("R8", MatW.pack): block i of rows 8g … 8g+7 lies at pack + g·8·row_bytes + i·8·34 + (r mod 8)·34. The
 * kernels' 8-row tiles then read one sequential stream instead of eight 1-row streams 1 row apart, which
 * the prefetchers follow much better (docs/KERNELS.md, "Decode GEMV"). The kernels read the same blocks
 * in the same order, so results are bit-identical either way (tests: kernels/matmul_bitwise_all_formats,
 * the parity tests).
 *
 * All copies live in one arena (no per-matrix rounding to huge pages). The file's pages of a packed
 * matrix are dropped from the process as soon as a slice of it is copied (MADV_DONTNEED on the read-only
 * file mapping: the page cache keeps them), so resident memory stays about the file size, at load too;
 * what still reads the file's copy (the exact mode's reference matmul, the embedding lookup of a tied
 * head) faults those pages back in. All CPUs copy, at load: ~1.2–2 s for the 0.8B Q8_0 file (800 MB)
 * on the development VM, mostly the kernel clearing fresh pages. Packing on a background thread instead
 * (load in 0.3 s) was tried: the first seconds of decode ran at half speed next to it and the peak RSS
 * rose 25% (the compute kept faulting in file pages of matrices not yet copied), so it is done up
 * front (docs/KERNELS.md, "Decode GEMV").
 *
 * The fast arithmetic reads Q8_0, Q4_0, Q4_1, IQ4_NL, Q4_K, Q5_K and Q6_K matrices whose row count is a multiple
 * of 16 (and expert stacks of them whose experts' rows are) as P16 panels instead (ops.h's PACK_P16: 16 rows'
 * blocks transposed into the vectors the kernel multiplies; the file's size, but Q4_K / Q5_K 2.8% / 2.3% more:
 * their scales unpacked). */
#include "backend/cpu/host_backend.h"

#include "base/bigalloc.h"
#include "gguf/format.h"
#include "gguf/quant_blocks.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PACK_ROWS 8
#define Q8_0_BYTES 34
#define SLICE_GROUPS 256 /* 8-row groups per slice: 2048 rows, ~2 MiB at K = 1024 */
#define MAX_THREADS 64

/* The copy loop; inlined with a constant block size for Q8_0 so the 34-byte copies are a few moves. */
static inline __attribute__((always_inline)) void pack_loop(uint8_t *dst, const uint8_t *src, int64_t rows,
                                                            size_t row_bytes, size_t block_bytes) {
    const size_t nb = row_bytes / block_bytes;
    for (int64_t g = 0; g < rows / PACK_ROWS; g++) {
        const uint8_t *sg = src + (size_t)g * PACK_ROWS * row_bytes;
        uint8_t *dg = dst + (size_t)g * PACK_ROWS * row_bytes;
        for (size_t i = 0; i < nb; i++)
            for (int r = 0; r < PACK_ROWS; r++)
                memcpy(dg + (i * PACK_ROWS + (size_t)r) * block_bytes, sg + (size_t)r * row_bytes + i * block_bytes, block_bytes);
    }
}

void pack_rows8(void *dst, const void *src, int64_t rows, size_t row_bytes, size_t block_bytes) {
    pack_loop(dst, src, rows, row_bytes, block_bytes);
}

static void pack_rows8_q8_0(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes) {
    pack_loop(dst, src, rows, row_bytes, Q8_0_BYTES);
}

static void pack_p16_q8_0(void *dst, const void *src, int64_t rows, size_t row_bytes) {
    const size_t nb = row_bytes / Q8_0_BYTES;
    for (int64_t p = 0; p < rows / 16; p++) {
        const uint8_t *sp = (const uint8_t *)src + (size_t)p * 16 * row_bytes;
        uint8_t *panel = (uint8_t *)dst + (size_t)p * 16 * row_bytes;
        for (size_t i = 0; i < nb; i++) {
            uint8_t *q = panel + q8p16_q((int64_t)i), *d = panel + q8p16_d((int64_t)i, (int64_t)nb);
            for (int r = 0; r < 16; r++) {
                const uint8_t *b = sp + (size_t)r * row_bytes + i * Q8_0_BYTES;
                memcpy(d + 2 * r, b, 2);
                for (int g = 0; g < 8; g++)
                    for (int k = 0; k < 4; k++) q[64 * g + 4 * r + k] = b[2 + 4 * g + k] ^ 0x80;
            }
        }
    }
}

#define Q4K_BYTES 144

#define Q5K_BYTES 176
#define Q6K_BYTES 210

/* Q4_K, or Q5_K with its qh bytes at 2048 and everything after them 512 further (ops.h) */
static void pack_p16_q45_K(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes, bool q5) {
    const size_t nsb = row_bytes / (q5 ? Q5K_BYTES : Q4K_BYTES), SB = q5 ? Q5K_P16_SB : Q4K_P16_SB, at = q5 ? 2560 : 2048;
    for (int64_t p = 0; p < rows / 16; p++)
        for (size_t sb = 0; sb < nsb; sb++) {
            uint8_t *o = dst + ((size_t)p * nsb + sb) * SB;
            for (int r = 0; r < 16; r++) {
                const uint8_t *blk = src + ((size_t)p * 16 + (size_t)r) * row_bytes;
                const uint8_t *qs, *scales;
                const uint16_t *d, *dmin;
                if (q5) {
                    const BlockQ5_K *b = (const BlockQ5_K *)blk + sb;
                    qs = b->qs, scales = b->scales, d = &b->d, dmin = &b->dmin;
                    for (int v = 0; v < 8; v++) memcpy(o + 2048 + 64 * v + 4 * r, b->qh + 4 * v, 4);
                } else {
                    const BlockQ4_K *b = (const BlockQ4_K *)blk + sb;
                    qs = b->qs, scales = b->scales, d = &b->d, dmin = &b->dmin;
                }
                for (int v = 0; v < 32; v++) memcpy(o + 64 * v + 4 * r, qs + 4 * v, 4);
                for (int k = 0; k < 8; k++) quant_k4_scale_min(k, scales, o + at + 16 * k + r, o + at + 128 + 16 * k + r);
                memcpy(o + at + 256 + 2 * r, d, 2);
                memcpy(o + at + 288 + 2 * r, dmin, 2);
            }
        }
}

static void pack_p16_q6_K(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes) {
    const size_t nsb = row_bytes / Q6K_BYTES;
    for (int64_t p = 0; p < rows / 16; p++)
        for (size_t sb = 0; sb < nsb; sb++) {
            uint8_t *o = dst + ((size_t)p * nsb + sb) * Q6K_P16_SB;
            for (int r = 0; r < 16; r++) {
                const BlockQ6_K *b = (const BlockQ6_K *)(src + ((size_t)p * 16 + (size_t)r) * row_bytes) + sb;
                for (int v = 0; v < 32; v++) memcpy(o + 64 * v + 4 * r, b->ql + 4 * v, 4); /* v = 16h + 8p + m */
                for (int v = 0; v < 16; v++) memcpy(o + 2048 + 64 * v + 4 * r, b->qh + 4 * v, 4); /* v = 8h + m */
                for (int g = 0; g < 16; g++) o[3072 + 16 * g + r] = (uint8_t)b->scales[g];
                memcpy(o + 3328 + 2 * r, &b->d, 2);
            }
        }
}

/* Q4_0, IQ4_NL (18-byte blocks: d, 16 qs) and Q4_1 (20: d, m, 16 qs) into ops.h's nibble panels */
static void pack_p16_n4(uint8_t *dst, const uint8_t *src, int64_t rows, size_t row_bytes, size_t bb) {
    const size_t nb = row_bytes / bb, sb = bb == 20 ? 64 : 32, at = bb - 16;
    for (int64_t p = 0; p < rows / 16; p++) {
        const uint8_t *sp = src + (size_t)p * 16 * row_bytes;
        uint8_t *panel = dst + (size_t)p * 16 * row_bytes;
        for (size_t i = 0; i < nb; i++) {
            uint8_t *q = panel + n4p16_q((int64_t)i, sb), *sc = panel + n4p16_s((int64_t)i, (int64_t)nb, sb);
            for (int r = 0; r < 16; r++) {
                const uint8_t *b = sp + (size_t)r * row_bytes + i * bb;
                memcpy(sc + 2 * r, b, 2);
                if (sb == 64) memcpy(sc + 32 + 2 * r, b + 2, 2);
                for (int k = 0; k < 4; k++) memcpy(q + 64 * k + 4 * r, b + at + 4 * k, 4);
            }
        }
    }
}

static size_t n4_block_bytes(uint32_t type) { return type == FMT_Q4_1 ? 20 : type == FMT_Q4_0 || type == FMT_IQ4_NL ? 18 : 0; }

bool pack_p16_format(const MatW *w) {
    if (w->rows <= 0 || w->rows % 16) return false;
    if (w->type == FMT_Q8_0) return w->cols % 32 == 0 && w->row_bytes == (size_t)w->cols / 32 * Q8_0_BYTES;
    if (n4_block_bytes(w->type)) return w->cols % 32 == 0 && w->row_bytes == (size_t)w->cols / 32 * n4_block_bytes(w->type);
    if (w->type == FMT_Q4_K) return w->cols % 256 == 0 && w->row_bytes == (size_t)w->cols / 256 * Q4K_BYTES;
    if (w->type == FMT_Q6_K) return w->cols % 256 == 0 && w->row_bytes == (size_t)w->cols / 256 * Q6K_BYTES;
    if (w->type == FMT_Q5_K) return w->cols % 256 == 0 && w->row_bytes == (size_t)w->cols / 256 * Q5K_BYTES;
    return false;
}

size_t pack_p16_bytes(const MatW *w) {
    return w->type == FMT_Q4_K ? (size_t)w->cols / 256 * Q4K_P16_SB
         : w->type == FMT_Q5_K ? (size_t)w->cols / 256 * Q5K_P16_SB
         : w->type == FMT_Q6_K ? (size_t)w->cols / 256 * Q6K_P16_SB
                               : 16 * w->row_bytes;
}

static void pack_p16_rows(uint8_t *dst, const uint8_t *src, uint32_t type, int64_t rows, size_t row_bytes) {
    if (type == FMT_Q4_K || type == FMT_Q5_K) pack_p16_q45_K(dst, src, rows, row_bytes, type == FMT_Q5_K);
    else if (type == FMT_Q6_K) pack_p16_q6_K(dst, src, rows, row_bytes);
    else if (n4_block_bytes(type)) pack_p16_n4(dst, src, rows, row_bytes, n4_block_bytes(type));
    else pack_p16_q8_0(dst, src, rows, row_bytes);
}

void pack_p16(void *dst, const MatW *w) { pack_p16_rows(dst, w->data, w->type, w->rows, w->row_bytes); }

void pack_p16_block(const void *pack, const MatW *w, int64_t r, int64_t i, uint8_t *block) {
    const uint8_t *panel = (const uint8_t *)pack + (size_t)(r / 16) * pack_p16_bytes(w);
    const int lane = (int)(r % 16);
    if (w->type == FMT_Q6_K) {
        const uint8_t *o = panel + (size_t)i * Q6K_P16_SB;
        BlockQ6_K *b = (BlockQ6_K *)block;
        for (int v = 0; v < 32; v++) memcpy(b->ql + 4 * v, o + 64 * v + 4 * lane, 4);
        for (int v = 0; v < 16; v++) memcpy(b->qh + 4 * v, o + 2048 + 64 * v + 4 * lane, 4);
        for (int g = 0; g < 16; g++) b->scales[g] = (int8_t)o[3072 + 16 * g + lane];
        memcpy(&b->d, o + 3328 + 2 * lane, 2);
        return;
    }
    if (w->type == FMT_Q4_K || w->type == FMT_Q5_K) {
        const bool q5 = w->type == FMT_Q5_K;
        const uint8_t *o = panel + (size_t)i * (q5 ? Q5K_P16_SB : Q4K_P16_SB);
        uint8_t *qs, *scales;
        uint16_t *d, *dmin;
        if (q5) {
            BlockQ5_K *b = (BlockQ5_K *)block;
            qs = b->qs, scales = b->scales, d = &b->d, dmin = &b->dmin;
            for (int v = 0; v < 8; v++) memcpy(b->qh + 4 * v, o + 2048 + 64 * v + 4 * lane, 4);
        } else {
            BlockQ4_K *b = (BlockQ4_K *)block;
            qs = b->qs, scales = b->scales, d = &b->d, dmin = &b->dmin;
        }
        for (int v = 0; v < 32; v++) memcpy(qs + 4 * v, o + 64 * v + 4 * lane, 4);
        const size_t at = q5 ? 2560 : 2048; /* the scales; the minimums 128 further, d and dmin 256 further */
        const uint8_t *sc = o + at + lane, *mn = o + at + 128 + lane; /* sub-block k at +16k */
        for (int k = 0; k < 4; k++) { /* quant_k4_scale_min's packing, inverted */
            scales[k] = (uint8_t)(sc[16 * k] | (sc[16 * (k + 4)] >> 4) << 6);
            scales[k + 4] = (uint8_t)(mn[16 * k] | (mn[16 * (k + 4)] >> 4) << 6);
            scales[k + 8] = (uint8_t)((sc[16 * (k + 4)] & 15) | (mn[16 * (k + 4)] & 15) << 4);
        }
        memcpy(d, o + at + 256 + 2 * lane, 2);
        memcpy(dmin, o + at + 288 + 2 * lane, 2);
        return;
    }
    const size_t bb = n4_block_bytes(w->type);
    if (bb) {
        const size_t sb = bb == 20 ? 64 : 32;
        const int64_t nb = (int64_t)(w->row_bytes / bb);
        const uint8_t *sc = panel + n4p16_s(i, nb, sb), *q = panel + n4p16_q(i, sb);
        memcpy(block, sc + 2 * lane, 2);
        if (sb == 64) memcpy(block + 2, sc + 32 + 2 * lane, 2);
        for (int k = 0; k < 4; k++) memcpy(block + bb - 16 + 4 * k, q + 64 * k + 4 * lane, 4);
        return;
    }
    const int64_t nb = (int64_t)(w->row_bytes / Q8_0_BYTES);
    memcpy(block, panel + q8p16_d(i, nb) + 2 * lane, 2);
    for (int g = 0; g < 8; g++)
        for (int k = 0; k < 4; k++) block[2 + 4 * g + k] = panel[q8p16_q(i) + 64 * g + 4 * lane + k] ^ 0x80;
}

static int group_rows(int kind) { return kind == PACK_P16 ? 16 : PACK_ROWS; }

/* bytes of one group of group_rows() rows in the packed copy */
static size_t group_bytes(const MatW *w, int kind) { return kind == PACK_P16 ? pack_p16_bytes(w) : PACK_ROWS * w->row_bytes; }

static bool packable(const MatW *w, int kind) {
    if (!w->data || w->pack || w->gemv) return false;
    if (kind == PACK_P16) return pack_p16_format(w);
    return w->type == FMT_Q8_0 && w->rows > 0 && w->rows % PACK_ROWS == 0 && w->cols % 32 == 0 &&
           w->row_bytes == (size_t)w->cols / 32 * Q8_0_BYTES;
}

/* Drops the whole pages of [p, p+n) from the process; with small_pages also maps them back (when something reads
 * them: the exact mode, a tied embedding's lookup) a page at a time rather than as the file's 2 MiB folios
 * (MADV_NOHUGEPAGE): a huge page straddling a packed matrix and a small unpacked tensor (a norm, read every
 * token) was otherwise mapped whole again by the first read of the small tensor — 47 × 2 MiB of b1's dropped
 * pages came back that way (pagemap), 12% of its resident memory. */
static void drop_pages(const void *p, size_t n, bool small_pages) {
    const long pg = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    const uintptr_t b = ((uintptr_t)p + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    const uintptr_t e = ((uintptr_t)p + n) & ~(uintptr_t)(pg - 1);
    if (e <= b) return;
#ifdef MADV_NOHUGEPAGE
    if (small_pages) madvise((void *)b, e - b, MADV_NOHUGEPAGE); /* a hint: the drop below works without it */
#else
    (void)small_pages;
#endif
    madvise((void *)b, e - b, MADV_DONTNEED);
}

typedef struct Job {
    MatW **mats;
    const bool *drop; /* per packed matrix: its pages may be dropped */
    uint8_t **dst;
    int64_t *first; /* per matrix, the index of its first slice; [n] = all slices */
    int n, kind;
    atomic_llong next;
    atomic_ullong bytes_done; /* for progress */
    uint64_t bytes_total;
    pthread_t caller; /* the thread that reports progress (callbacks run on the caller's thread) */
    const HostProgress *progress;
} Job;

/* Copies slices (up to SLICE_GROUPS 8-row groups of one matrix) until none is left, dropping the file's
 * pages of each slice once copied, so that a big matrix (the head) is never resident twice. */
static void *worker(void *arg) {
    Job *j = arg;
    int m = 0;
    for (;;) {
        const long long s = atomic_fetch_add(&j->next, 1);
        if (s >= j->first[j->n]) return NULL;
        while (s >= j->first[m + 1]) m++;
        const MatW *w = j->mats[m];
        const int gr = group_rows(j->kind);
        const int64_t groups = w->rows / gr, g0 = (s - j->first[m]) * SLICE_GROUPS;
        const int64_t g1 = g0 + SLICE_GROUPS < groups ? g0 + SLICE_GROUPS : groups;
        const size_t off = (size_t)g0 * gr * w->row_bytes, bytes = (size_t)(g1 - g0) * gr * w->row_bytes;
        const uint8_t *src = (const uint8_t *)w->data + off;
        uint8_t *dst = j->dst[m] + (size_t)g0 * group_bytes(w, j->kind);
        if (j->kind == PACK_P16) pack_p16_rows(dst, src, w->type, (g1 - g0) * gr, w->row_bytes);
        else pack_rows8_q8_0(dst, src, (g1 - g0) * gr, w->row_bytes);
        if (j->drop[m]) drop_pages(src, bytes, false);
        const uint64_t done = atomic_fetch_add(&j->bytes_done, bytes) + bytes;
        if (j->progress && pthread_equal(pthread_self(), j->caller))
            j->progress->fn(j->progress->user, "pack", done, j->bytes_total);
    }
}

static int by_address(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const PackedRange *)a)->src, y = (uintptr_t)((const PackedRange *)b)->src;
    return x < y ? -1 : x > y;
}

int host_pack(MatW *all, const bool *droppable, int n_all, int kind, const HostProgress *progress, PackSet *out, Err *err) {
    memset(out, 0, sizeof *out);
    int n = 0;
    MatW **mats = malloc(sizeof *mats * (size_t)(n_all + 1));
    bool *drop = malloc(sizeof *drop * (size_t)(n_all + 1));
    if (!mats || !drop) return free(mats), free(drop), err_set(err, "out of memory");
    for (int k = 0; k < n_all; k++)
        if (packable(&all[k], kind)) drop[n] = droppable[k], mats[n++] = &all[k];
    if (n == 0) return free(mats), free(drop), 0;

    uint8_t **dst = malloc(sizeof *dst * (size_t)n);
    int64_t *first = malloc(sizeof *first * (size_t)(n + 1));
    PackedRange *ranges = malloc(sizeof *ranges * (size_t)n);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += ((size_t)(mats[i]->rows / group_rows(kind)) * group_bytes(mats[i], kind) + 4095) & ~(size_t)4095;
    uint8_t *arena = dst && first && ranges ? big_alloc(total) : NULL;
    if (!arena) {
        free(mats), free(drop), free(dst), free(first), free(ranges);
        return err_set(err, "out of memory packing %zu MiB of weights (--no-pack skips packing)", total >> 20);
    }
    size_t at = 0;
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        dst[i] = arena + at;
        at += ((size_t)(mats[i]->rows / group_rows(kind)) * group_bytes(mats[i], kind) + 4095) & ~(size_t)4095;
        first[i + 1] = first[i] + (mats[i]->rows / group_rows(kind) + SLICE_GROUPS - 1) / SLICE_GROUPS;
        ranges[i] = (PackedRange){mats[i]->data, (size_t)mats[i]->rows * mats[i]->row_bytes};
    }
    Job job = {mats, drop, dst, first, n, kind, 0, 0, 0, pthread_self(), progress && progress->fn ? progress : NULL};
    for (int i = 0; i < n; i++) job.bytes_total += (uint64_t)mats[i]->rows * mats[i]->row_bytes;
    long nt = sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt < 1 ? 1 : nt > MAX_THREADS ? MAX_THREADS : nt;
    pthread_t th[MAX_THREADS];
    int started = 0;
    for (long t = 1; t < nt; t++)
        if (pthread_create(&th[started], NULL, worker, &job) == 0) started++;
    worker(&job);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    if (job.progress) job.progress->fn(job.progress->user, "pack", job.bytes_total, job.bytes_total);
    for (int i = 0; i < n; i++) {
        mats[i]->pack = dst[i];
        mats[i]->pack_kind = (uint8_t)kind;
        if (drop[i]) drop_pages(mats[i]->data, ranges[i].bytes, true); /* the pages across slice edges */
    }
    qsort(ranges, (size_t)n, sizeof *ranges, by_address);
    out->arena = arena;
    out->bytes = total;
    out->ranges = ranges;
    out->n = n;
    free(mats), free(drop), free(dst), free(first);
    return 0;
}

void host_pack_free(PackSet *p) {
    free(p->arena);
    free(p->ranges);
    memset(p, 0, sizeof *p);
}
