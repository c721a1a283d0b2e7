/* engine_cache.h — an engine's memory budget and expert cache (engine_cache.c). */
#ifndef DL_ENGINE_ENGINE_CACHE_H
#define DL_ENGINE_ENGINE_CACHE_H

#include "engine/engine_internal.h"

/* Before the stages are opened: opens the expert cache when the budget calls for one (en->cache). */
int engine_cache_open(DlEngine *en, const DlEngineParams *p, Err *e);
/* After: hands it to every stage and makes the other weights resident. */
int engine_cache_attach(DlEngine *en, Err *e);
void engine_cache_close(DlEngine *en);
/* The cache's lines of the profile report (nothing without a cache); returns the length needed. */
int engine_cache_report(DlEngine *en, char *buf, size_t cap);

#endif
