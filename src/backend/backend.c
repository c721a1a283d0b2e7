/* backend.c — the backend registry: backend_create by name ("cpu", "ref" → backend/cpu/; "vulkan",
 * "vulkan:N" → backend/vulkan/ when the build has it), the device listing, and the calls every backend
 * shares (destroy, stats). DL_VULKAN is set by the Makefile when it builds the Vulkan backend. */
#include "backend/backend.h"

#ifndef DL_VULKAN
#define DL_VULKAN 0
#endif

#include "backend/cpu/host_backend.h"
#include "gguf/format.h"
#include "kernels/cpu/isa.h"
#if DL_VULKAN
#include "backend/vulkan/vk_backend.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const kv_names[KV_COUNT] = {[KV_F32] = "f32", [KV_F16] = "f16", [KV_Q8_0] = "q8_0", [KV_Q4_0] = "q4_0"};

int kv_type_parse(const char *name, int *kv_type, Err *err) {
    if (!name || !*name) return *kv_type = KV_DEFAULT, 0;
    for (int t = KV_F32; t < KV_COUNT; t++)
        if (!strcmp(name, kv_names[t])) return *kv_type = t, 0;
    return err_set(err, "unknown KV cache type '%s' (f32, f16, q8_0 or q4_0)", name);
}

int kv_type_format(int kv_type, MatMode mode, uint32_t *fmt, Err *err) {
    static const uint32_t fmts[KV_COUNT] = {[KV_F32] = FMT_F32, [KV_F16] = FMT_F16, [KV_Q8_0] = FMT_Q8_0, [KV_Q4_0] = FMT_Q4_0};
    if (kv_type < 0 || kv_type >= KV_COUNT) return err_set(err, "KV cache type %d out of range", kv_type);
    if (kv_type == KV_DEFAULT) kv_type = mode == MATMUL_FAST ? KV_F16 : KV_F32;
    if ((kv_type == KV_Q8_0 || kv_type == KV_Q4_0) && mode != MATMUL_FAST)
        return err_set(err, "a %s KV cache needs the fast arithmetic (the %s arithmetic keeps f32 or f16)", kv_names[kv_type],
                       arith_name(mode));
    *fmt = fmts[kv_type];
    return 0;
}

const char *kv_format_name(uint32_t fmt) {
    return fmt == FMT_F32 ? "f32" : fmt == FMT_F16 ? "f16" : fmt == FMT_Q8_0 ? "q8_0" : fmt == FMT_Q4_0 ? "q4_0" : "?";
}

size_t kv_row_bytes(uint32_t fmt, int64_t n) {
    const Format *f = format_get(fmt);
    ASSERT(f && n % f->block == 0);
    return format_row_bytes(f, n);
}

int arith_parse(const char *name, bool exact, MatMode *mode, Err *err) {
    if (!name || !*name || !strcmp(name, "fast")) *mode = MATMUL_FAST;
    else if (!strcmp(name, "llama")) *mode = MATMUL_GGML;
    else if (!strcmp(name, "exact")) *mode = MATMUL_EXACT;
    else return err_set(err, "unknown arithmetic '%s' (fast, llama or exact)", name);
    if (exact) *mode = MATMUL_EXACT;
    return 0;
}

const char *arith_name(MatMode mode) { return mode == MATMUL_EXACT ? "exact" : mode == MATMUL_GGML ? "llama" : "fast"; }

const char *backend_names(void) { return DL_VULKAN ? "cpu, ref, vulkan[:N]" : "cpu, ref"; }

/* "vulkan" → 0, "vulkan:N" → N; -1 when name is not a Vulkan name, -2 when its index is malformed */
static int vulkan_index(const char *name) {
    if (strncmp(name, "vulkan", 6) != 0) return -1;
    if (name[6] == 0) return 0;
    if (name[6] != ':' || !name[7]) return -2;
    char *end;
    const long i = strtol(name + 7, &end, 10);
    return *end || i < 0 || i > 255 ? -2 : (int)i;
}

Backend *backend_create(const BackendOptions *o, Err *err) {
    const char *name = o->name && *o->name ? o->name : "cpu";
    if (strcmp(name, "cpu") == 0 || strcmp(name, "ref") == 0) return host_backend_create(o, strcmp(name, "ref") == 0, err);
    const int vi = vulkan_index(name);
    if (vi == -2) return err_set(err, "backend '%s': a Vulkan device is vulkan or vulkan:N (N from 0)", name), NULL;
    if (vi >= 0) {
#if DL_VULKAN
        return vk_backend_create(o, vi, err);
#else
        return err_set(err, "this build has no Vulkan backend (it was built without the Vulkan headers or glslc: "
                            "install libvulkan-dev and glslc, then rebuild)"), NULL;
#endif
    }
    return err_set(err, "unknown backend '%s' (this build has: %s)", name, backend_names()), NULL;
}

void backend_destroy(Backend *be) {
    if (be) be->vt->destroy(be);
}

void backend_stats(const Backend *be, BackendStats *out) {
    memset(out, 0, sizeof *out);
    if (be && be->vt->stats) be->vt->stats(be, out);
}

int backend_copy_probe(const char *name, size_t bytes, double *gbs, Err *err) {
    Backend *be = backend_create(&(BackendOptions){.name = name}, err);
    if (!be) return -1;
    const int rc = be->vt->copy_probe ? be->vt->copy_probe(be, bytes, gbs, err) : err_set(err, "%s has no copy probe", be->name);
    backend_destroy(be);
    return rc;
}

static void cpu_name(char *buf, size_t cap) {
    snprintf(buf, cap, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (strncmp(line, "model name", 10) == 0 && c) {
            c++;
            while (*c == ' ' || *c == '\t') c++;
            c[strcspn(c, "\n")] = 0;
            snprintf(buf, cap, "%s", c);
            break;
        }
    }
    fclose(f);
}

int backend_devices(BackendDevice *out, int cap, char *note, size_t note_cap) {
    if (note && note_cap) note[0] = 0;
    int n = 0;
    if (cap > 0) {
        BackendDevice *d = &out[0];
        memset(d, 0, sizeof *d);
        snprintf(d->name, sizeof d->name, "cpu");
        char model[160];
        cpu_name(model, sizeof model);
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        snprintf(d->desc, sizeof d->desc, "%s (%ld threads, kernels: %s)", model, cpus, isa_name(isa_best()));
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        d->memory_bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    }
    n++;
#if DL_VULKAN
    Err e = {{0}};
    const int nv = vk_devices(cap > n ? out + n : NULL, cap > n ? cap - n : 0, &e);
    if (nv < 0 && note) snprintf(note, note_cap, "vulkan: %s", e.msg);
    if (nv > 0) n += nv;
#else
    if (note) snprintf(note, note_cap, "vulkan: not in this build (built without the Vulkan headers or glslc)");
#endif
    return n;
}
