/* dump_load.c — see dump_load.h. JSON via cJSON (the CLI layer's JSON library). */
#include "cli/dump_load.h"

#include "cli/cli.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int num(const cJSON *o, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valueint : def;
}

Dump *dump_load(const char *dir, DumpInfo *info, Err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/index.json", dir);
    size_t len;
    char *txt = cli_read_file(path, &len);
    if (!txt) return err_set(err, "cannot read '%s'", path), NULL;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!root) return err_set(err, "'%s' is not valid JSON", path), NULL;
    Dump *d = dump_new(NULL, ~0ull, err);
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(root, "tensors");
    if (!d || !cJSON_IsArray(tensors)) {
        if (d) err_set(err, "'%s' has no tensors array", path);
        goto fail;
    }
    if (info) {
        memset(info, 0, sizeof *info);
        const cJSON *mode = cJSON_GetObjectItemCaseSensitive(root, "mode");
        if (cJSON_IsString(mode)) snprintf(info->mode, sizeof info->mode, "%s", mode->valuestring);
        const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens");
        if (cJSON_IsArray(toks) && cJSON_GetArraySize(toks) > 0) {
            info->n_tokens = cJSON_GetArraySize(toks);
            info->tokens = malloc(sizeof(int32_t) * (size_t)info->n_tokens);
            if (!info->tokens) goto oom;
            for (int i = 0; i < info->n_tokens; i++) info->tokens[i] = cJSON_GetArrayItem(toks, i)->valueint;
        }
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, tensors) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name"), *file = cJSON_GetObjectItemCaseSensitive(t, "file"),
                    *ne = cJSON_GetObjectItemCaseSensitive(t, "ne");
        if (!cJSON_IsString(name) || !cJSON_IsString(file) || !cJSON_IsArray(ne) || cJSON_GetArraySize(ne) != 4) {
            err_set(err, "'%s': malformed tensor entry", path);
            goto fail;
        }
        DumpTensor m;
        memset(&m, 0, sizeof m);
        snprintf(m.name, sizeof m.name, "%s", name->valuestring);
        snprintf(m.file, sizeof m.file, "%s", file->valuestring);
        m.occurrence = num(t, "occurrence", 0);
        m.ubatch = num(t, "ubatch", 0);
        m.pos0 = num(t, "pos0", 0);
        m.n_tokens = num(t, "n_tokens", 0);
        int64_t n = 1;
        for (int i = 0; i < 4; i++) {
            m.ne[i] = (int64_t)cJSON_GetArrayItem(ne, i)->valuedouble;
            if (m.ne[i] < 1 || m.ne[i] > (1 << 30)) {
                err_set(err, "'%s': tensor '%s' has a bad shape", path, m.name);
                goto fail;
            }
            n *= m.ne[i];
        }
        snprintf(path, sizeof path, "%s/%s", dir, m.file);
        size_t bytes;
        float *data = (float *)cli_read_file(path, &bytes);
        if (!data || bytes != (size_t)n * sizeof(float)) {
            free(data);
            err_set(err, "'%s': missing or %zu bytes, expected %lld", path, data ? bytes : 0, (long long)n * 4);
            goto fail;
        }
        if (dump_add(d, &m, data, err)) goto fail;
    }
    cJSON_Delete(root);
    return d;
oom:
    err_set(err, "out of memory");
fail:
    cJSON_Delete(root);
    dump_free(d);
    if (info) free(info->tokens), info->tokens = NULL;
    return NULL;
}
