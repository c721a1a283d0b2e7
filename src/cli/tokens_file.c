/* tokens_file.c — see tokens_file.h. */
#include "cli/tokens_file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tokens_parse(const char *text, int32_t **ids, int *n, Err *err) {
    int cap = 64, cnt = 0;
    int32_t *v = malloc(sizeof *v * (size_t)cap);
    if (!v) return err_set(err, "out of memory");
    const char *p = text;
    for (;;) {
        while (*p && (isspace((unsigned char)*p) || *p == ',' || *p == '[' || *p == ']')) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < INT32_MIN || x > INT32_MAX) {
            free(v);
            return err_set(err, "bad token id at '%.20s'", p);
        }
        if (cnt == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, sizeof *v * (size_t)cap);
            if (!nv) {
                free(v);
                return err_set(err, "out of memory");
            }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    if (cnt == 0) {
        free(v);
        return err_set(err, "no token ids");
    }
    *ids = v;
    *n = cnt;
    return 0;
}

int tokens_file_read(const char *path, int32_t **ids, int *n, Err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(err, "cannot open '%s': %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return err_set(err, "out of memory");
            }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, 4096, f);
        len += r;
        if (r < 4096) break;
    }
    fclose(f);
    buf[len] = '\0';
    int rc = tokens_parse(buf, ids, n, err);
    free(buf);
    if (rc) err_prefix(err, "%s", path);
    return rc;
}
