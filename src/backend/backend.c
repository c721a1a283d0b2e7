/* backend.c — the calls every backend shares (destroy, stats, the copy probe) and the option parsers (KV cache
 * types, the arithmetic). The table of backends and backend_create are registry.c's. */
#include "backend/backend.h"

#include "gguf/format.h"

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
