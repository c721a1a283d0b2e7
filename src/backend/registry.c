/* registry.c — the table of backends: one row per backend (its name, whether it takes ":N", whether it is the
 * host, its create, its device listing and its availability), and what is read from it: backend_create by name
 * (with the check that the backend filled every required slot of BackendVt), the names for messages, and the
 * devices `deltallm devices` lists. Adding a backend is one folder, one row here and one Makefile rule
 * (docs/ARCHITECTURE.md). DL_VULKAN is set by the Makefile when it builds the Vulkan backend. */
#include "backend/backend.h"

#ifndef DL_VULKAN
#define DL_VULKAN 0
#endif

#include "backend/cpu/host_backend.h"
#if DL_VULKAN
#include "backend/vulkan/vk_backend.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Backend *cpu_create(const BackendOptions *o, int index, Err *err) { return host_backend_create(o, false, err); }
static Backend *ref_create(const BackendOptions *o, int index, Err *err) { return host_backend_create(o, true, err); }

#if DL_VULKAN
static int vk_list(const BackendOptions *o, BackendDevice *out, int cap, Err *err) {
    return vk_backend_load(o->device_lib, err) ? vk_devices(out, cap, err) : -1;
}
static bool vk_available(Err *err) {
    const int n = vk_devices(NULL, 0, err);
    if (n == 0) err_set(err, "no Vulkan device");
    return n > 0;
}
#endif

static const BackendReg rows[] = {
    {.name = "cpu", .host = true, .create = cpu_create, .devices = host_devices},
    {.name = "ref", .host = true, .create = ref_create},
#if DL_VULKAN
    {.name = "vulkan", .indexed = true, .create = vk_backend_create, .devices = vk_list, .available = vk_available},
#else
    {.name = "vulkan", .indexed = true,
     .missing = "this build has no Vulkan backend (it was built without the Vulkan headers or glslc: install "
                "libvulkan-dev and glslc, then rebuild)"},
#endif
};

const BackendReg *backend_registry(int *n) {
    *n = (int)(sizeof rows / sizeof rows[0]);
    return rows;
}

bool backend_available(const BackendReg *r, Err *err) {
    if (!r->create) return err_set(err, "%s", r->missing), false;
    return !r->available || r->available(err);
}

const char *backend_names(void) {
    static char buf[256];
    if (!buf[0]) { /* the table is constant: every call writes the same string */
        size_t at = 0;
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            if (rows[i].create && at < sizeof buf)
                at += (size_t)snprintf(buf + at, sizeof buf - at, "%s%s%s", at ? ", " : "", rows[i].name,
                                       rows[i].indexed ? "[:N]" : "");
    }
    return buf;
}

/* The row of name ("vulkan:1" → vulkan, *index 1); NULL with a line in err when there is none or the index is
 * malformed. */
static const BackendReg *lookup(const char *name, int *index, Err *err) {
    const size_t len = strcspn(name, ":");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const BackendReg *r = &rows[i];
        if (strlen(r->name) != len || strncmp(name, r->name, len) != 0) continue;
        *index = 0;
        if (!name[len]) return r;
        if (!r->indexed) return err_set(err, "backend '%s': %s takes no device index", name, r->name), NULL;
        char *end = NULL;
        const long v = name[len + 1] ? strtol(name + len + 1, &end, 10) : -1;
        if (v < 0 || v > 255 || *end)
            return err_set(err, "backend '%s': a %s device is %s or %s:N (N from 0)", name, r->name, r->name, r->name), NULL;
        *index = (int)v;
        return r;
    }
    return err_set(err, "unknown backend '%s' (this build has: %s)", name, backend_names()), NULL;
}

bool backend_is_host(const char *name) {
    int index;
    Err e = {{0}};
    const BackendReg *r = lookup(name && *name ? name : "cpu", &index, &e);
    return r && r->host;
}

const char *backend_first_device(void) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (!rows[i].host && rows[i].create) return rows[i].name;
    return NULL;
}

/* The first required slot vt leaves empty, or NULL. The optional ones (BackendVt says which): matmul_swiglu,
 * matmul_add, matmul_add_gated, matmul_add_sigmoid, matmul_pair, dn_prep, dn_prep_scan, conv_silu_seqs,
 * deltanet_seqs, attention_gated, attn_prep,
 * moe_ffn, moe_ffn_combine,
 * graph_capture / graph_end / graph_replay, mark, marks, stats, copy_probe. */
static const char *missing_op(const BackendVt *vt) {
#define REQUIRED(f) \
    if (!vt->f) return #f
    REQUIRED(destroy);
    REQUIRED(reserve);
    REQUIRED(alloc);
    REQUIRED(free);
    REQUIRED(upload);
    REQUIRED(download);
    REQUIRED(copy);
    REQUIRED(fill);
    REQUIRED(wrap_host);
    REQUIRED(bind);
    REQUIRED(make_resident);
    REQUIRED(begin);
    REQUIRED(submit);
    REQUIRED(wait);
    REQUIRED(get_rows);
    REQUIRED(matmul);
    REQUIRED(rms_norm);
    REQUIRED(l2_norm);
    REQUIRED(add);
    REQUIRED(copy_rows);
    REQUIRED(dn_gates);
    REQUIRED(conv_silu);
    REQUIRED(deltanet);
    REQUIRED(gated_norm);
    REQUIRED(rope);
    REQUIRED(kv_append);
    REQUIRED(attention);
    REQUIRED(mul_sigmoid);
    REQUIRED(silu);
    REQUIRED(swiglu);
    REQUIRED(moe_route);
    REQUIRED(gather_rows);
    REQUIRED(scatter_rows);
    REQUIRED(moe_combine);
    REQUIRED(sigmoid);
    REQUIRED(add_scaled);
    REQUIRED(layer_norm);
    REQUIRED(bias_act);
    REQUIRED(rope_2d);
    REQUIRED(attention_full);
#undef REQUIRED
    return NULL;
}

Backend *backend_create_from(const BackendReg *r, const BackendOptions *o, int index, Err *err) {
    if (!r->create) return err_set(err, "%s", r->missing), NULL;
    Backend *be = r->create(o, index, err);
    if (!be) return NULL;
    const char *op = missing_op(be->vt);
    if (op) {
        err_set(err, "backend '%s' is incomplete: its required op '%s' is empty (BackendVt.%s)", r->name, op, op);
        if (be->vt->destroy) be->vt->destroy(be);
        return NULL;
    }
    return be;
}

Backend *backend_create(const BackendOptions *o, Err *err) {
    int index;
    const BackendReg *r = lookup(o->name && *o->name ? o->name : "cpu", &index, err);
    return r ? backend_create_from(r, o, index, err) : NULL;
}

int backend_devices(const BackendOptions *o, BackendDevice *out, int cap, char *note, size_t note_cap) {
    const BackendOptions none = {0};
    if (!o) o = &none;
    if (note && note_cap) note[0] = 0;
    size_t at = 0;
    int n = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const BackendReg *r = &rows[i];
        Err e = {{0}};
        int got = 0;
        if (!r->create) got = err_set(&e, "%s", r->missing);
        else if (r->devices) got = r->devices(o, cap > n ? out + n : NULL, cap > n ? cap - n : 0, &e);
        if (got > 0) n += got;
        if (got < 0 && note && at < note_cap) at += (size_t)snprintf(note + at, note_cap - at, "%s%s: %s", at ? "; " : "", r->name, e.msg);
    }
    return n;
}
