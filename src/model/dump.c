/* dump.c — see dump.h. File dumps write each tensor as it comes and the index at the end; memory dumps
 * keep copies. A NULL Dump* is valid everywhere and does nothing. */
#include "model/dump.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct Dump {
    char dir[512]; /* empty: in memory */
    uint64_t layers;
    int ubatch, pos0, n_tokens;
    DumpTensor *t;
    int n, cap;
    bool failed;
};

Dump *dump_new(const char *dir, uint64_t layers, Err *err) {
    Dump *d = calloc(1, sizeof *d);
    if (!d) return err_set(err, "out of memory"), NULL;
    d->layers = layers;
    d->ubatch = -1;
    if (dir) {
        if (strlen(dir) >= sizeof d->dir - 1) {
            free(d);
            return err_set(err, "dump directory name too long"), NULL;
        }
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            free(d);
            return err_set(err, "cannot create dump directory '%s': %s", dir, strerror(e)), NULL;
        }
        snprintf(d->dir, sizeof d->dir, "%s", dir);
    }
    return d;
}

void dump_free(Dump *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) free(d->t[i].data);
    free(d->t);
    free(d);
}

static int write_index(Dump *d, Err *err) {
    char path[600];
    snprintf(path, sizeof path, "%s/index.json", d->dir);
    FILE *f = fopen(path, "w");
    if (!f) return err_set(err, "cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "{\"producer\": \"deltallm\", \"tensors\": [\n");
    for (int i = 0; i < d->n; i++) {
        const DumpTensor *t = &d->t[i];
        fprintf(f,
                "  {\"name\": \"%s\", \"occurrence\": %d, \"ubatch\": %d, \"pos0\": %d, \"n_tokens\": %d, "
                "\"ne\": [%lld, %lld, %lld, %lld], \"file\": \"%s\"}%s\n",
                t->name, t->occurrence, t->ubatch, t->pos0, t->n_tokens, (long long)t->ne[0], (long long)t->ne[1],
                (long long)t->ne[2], (long long)t->ne[3], t->file, i + 1 < d->n ? "," : "");
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0) return err_set(err, "cannot write '%s'", path);
    return 0;
}

int dump_close(Dump *d, Err *err) {
    if (!d) return 0;
    int rc = 0;
    if (d->failed) rc = err_set(err, "writing the dump to '%s' failed", d->dir);
    else if (d->dir[0]) rc = write_index(d, err);
    dump_free(d);
    return rc;
}

void dump_begin_ubatch(Dump *d, int pos0, int n_tokens) {
    if (!d) return;
    d->ubatch++;
    d->pos0 = pos0;
    d->n_tokens = n_tokens;
}

bool dump_wants_layer(const Dump *d, int layer) {
    return d && (layer < 0 || layer >= 64 || ((d->layers >> layer) & 1));
}

static DumpTensor *push(Dump *d) {
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 256;
        DumpTensor *t = realloc(d->t, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        d->t = t;
        d->cap = cap;
    }
    DumpTensor *t = &d->t[d->n++];
    memset(t, 0, sizeof *t);
    return t;
}

void dump_tensor(Dump *d, const char *name, int layer, const float *data, int64_t ne0, int64_t ne1, int64_t ne2,
                 int64_t ne3) {
    if (!d || d->failed || !dump_wants_layer(d, layer)) return;
    char full[96];
    if (layer >= 0) snprintf(full, sizeof full, "%s-%d", name, layer);
    else snprintf(full, sizeof full, "%s", name);
    int occ = 0;
    for (int i = d->n - 1; i >= 0 && d->t[i].ubatch == d->ubatch; i--) occ += strcmp(d->t[i].name, full) == 0;
    DumpTensor *t = push(d);
    if (!t) {
        d->failed = true;
        return;
    }
    snprintf(t->name, sizeof t->name, "%s", full);
    t->occurrence = occ;
    t->ubatch = d->ubatch;
    t->pos0 = d->pos0;
    t->n_tokens = d->n_tokens;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = ne3;
    size_t n = (size_t)(ne0 * ne1 * ne2 * ne3);
    if (occ) snprintf(t->file, sizeof t->file, "u%04d__%s__%d.f32", d->ubatch, full, occ);
    else snprintf(t->file, sizeof t->file, "u%04d__%s.f32", d->ubatch, full);
    if (d->dir[0]) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", d->dir, t->file);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(data, sizeof(float), n, f) != n) d->failed = true;
        if (f && fclose(f) != 0) d->failed = true;
    } else {
        t->data = malloc(n * sizeof(float) + 1);
        if (!t->data) {
            d->failed = true;
            return;
        }
        memcpy(t->data, data, n * sizeof(float));
    }
}

int dump_add(Dump *d, const DumpTensor *meta, float *data, Err *err) {
    DumpTensor *t = push(d);
    if (!t) {
        free(data);
        return err_set(err, "out of memory");
    }
    *t = *meta;
    t->data = data;
    return 0;
}

int dump_count(const Dump *d) { return d ? d->n : 0; }
const DumpTensor *dump_get(const Dump *d, int i) { return d && i >= 0 && i < d->n ? &d->t[i] : NULL; }

const DumpTensor *dump_find(const Dump *d, const char *name, int occurrence, int ubatch) {
    for (int i = 0; d && i < d->n; i++)
        if (d->t[i].occurrence == occurrence && d->t[i].ubatch == ubatch && strcmp(d->t[i].name, name) == 0)
            return &d->t[i];
    return NULL;
}
