/* stop.c — see stop.h. The held tail is always shorter than the longest stop string, so each feed costs
 * O((held + len) * total stop length) at worst, in practice a few memcmp calls. */
#include "server/stop.h"

#include <stdlib.h>
#include <string.h>

int stop_init(StopFilter *f, const char *const *stops, int n) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < n && f->n < STOP_MAX; i++) {
        size_t len = strlen(stops[i]);
        if (!len) continue;
        if (!(f->stops[f->n] = strdup(stops[i]))) return -1;
        f->lens[f->n++] = len;
    }
    return 0;
}

void stop_free(StopFilter *f) {
    for (int i = 0; i < f->n; i++) free(f->stops[i]);
    sbuf_free(&f->held);
    memset(f, 0, sizeof *f);
}

/* Length of the longest proper prefix of a stop string that the text ends with. */
static size_t partial_len(const StopFilter *f, const char *s, size_t n) {
    size_t best = 0;
    for (int i = 0; i < f->n; i++) {
        size_t k = f->lens[i] - 1 < n ? f->lens[i] - 1 : n;
        for (; k > best; k--)
            if (memcmp(s + n - k, f->stops[i], k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

bool stop_feed(StopFilter *f, const char *text, size_t len, SBuf *out) {
    if (f->matched) return true;
    if (f->n == 0) {
        sbuf_put(out, text, len);
        return false;
    }
    sbuf_put(&f->held, text, len);
    const char *s = f->held.p ? f->held.p : "";
    size_t n = f->held.n, first = n, hit_len = 0;
    for (int i = 0; i < f->n; i++) {
        const char *hit = memmem(s, n, f->stops[i], f->lens[i]);
        if (hit && (size_t)(hit - s) < first) first = (size_t)(hit - s), hit_len = f->lens[i], f->which = i;
    }
    if (first < n) {
        sbuf_put(out, s, first + (f->include ? hit_len : 0));
        f->held.n = 0;
        f->matched = true;
        return true;
    }
    size_t keep = partial_len(f, s, n);
    sbuf_put(out, s, n - keep);
    sbuf_consume(&f->held, n - keep);
    return false;
}

void stop_flush(StopFilter *f, SBuf *out) {
    if (!f->matched && f->held.n) sbuf_put(out, f->held.p, f->held.n);
    f->held.n = 0;
}
