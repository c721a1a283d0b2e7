/* stop.h — stop strings on a text stream, never split across the chunks a client receives.
 *
 * Text goes in as the detokenizer produces it; what comes out is safe to send: a tail that could still
 * turn into a stop string is held back until the next piece decides it. When a stop string appears
 * anywhere in the stream (also across pieces), the text before it is released and the rest — the stop
 * string and anything after it — is dropped. */
#ifndef DL_SERVER_STOP_H
#define DL_SERVER_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "server/util.h"

enum { STOP_MAX = 16, STOP_MAX_LEN = 512 };

typedef struct StopFilter {
    char *stops[STOP_MAX];
    size_t lens[STOP_MAX];
    int n;
    SBuf held;
    bool matched;
    bool include; /* the matched stop string is released too (include_stop_str_in_output) */
    int which;    /* the stop string that matched (when matched) */
} StopFilter;

/* Copies the stop strings (empty ones are ignored). Returns -1 on out of memory. */
int stop_init(StopFilter *f, const char *const *stops, int n);
void stop_free(StopFilter *f);
/* Appends the text that became safe to out. Returns true when a stop string matched (the stream is over;
 * further feeds are ignored). */
bool stop_feed(StopFilter *f, const char *text, size_t len, SBuf *out);
/* End of stream without a match: releases the held tail. */
void stop_flush(StopFilter *f, SBuf *out);

#endif
