/* dump_load.h — reading a dump folder in llref's format (index.json + one .f32 per tensor), as written by
 * `llref --dump-dir` and by `deltallm eval --dump`. */
#ifndef DL_CLI_DUMP_LOAD_H
#define DL_CLI_DUMP_LOAD_H

#include <stdint.h>

#include "base/err.h"
#include "model/dump.h"

typedef struct DumpInfo {
    char mode[16];   /* "prefill", "decode", ... ("" when absent) */
    int32_t *tokens; /* malloc'ed, NULL when absent */
    int n_tokens;
} DumpInfo;

/* Loads every tensor listed (sizes checked against ne). info may be NULL. */
Dump *dump_load(const char *dir, DumpInfo *info, Err *err);

#endif
