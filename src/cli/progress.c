/* progress.c — see progress.h: the load progress bar. */
#include "cli/progress.h"
#include "base/clock.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

void load_progress_init(LoadProgress *p, FILE *out) {
    memset(p, 0, sizeof *p);
    p->out = out;
    const char *term = getenv("TERM");
    p->enabled = out && isatty(fileno(out)) && !(term && strcmp(term, "dumb") == 0);
    p->min_s = 0.5;
}

void load_progress_line(char *buf, size_t cap, const char *phase, uint64_t done, uint64_t total, double seconds,
                        int width) {
    if (done > total) done = total;
    const bool gib = total >= (1ull << 30);
    const double unit = gib ? (double)(1ull << 30) : (double)(1ull << 20), rate = seconds > 0 ? done / seconds : 0;
    const double frac = total ? (double)done / (double)total : 1;
    char head[96], tail[64] = "";
    snprintf(head, sizeof head, "loading: %-8s %.1f / %.1f %s ", phase, done / unit, total / unit, gib ? "GiB" : "MiB");
    int k = snprintf(tail, sizeof tail, " %3d%%", (int)(frac * 100));
    if (rate > 0) {
        const bool rgib = rate >= (double)(1ull << 30);
        k += snprintf(tail + k, sizeof tail - (size_t)k, "  %.1f %s/s", rate / (rgib ? (double)(1ull << 30) : 1048576.0),
                      rgib ? "GiB" : "MiB");
        if (done < total && seconds >= 1)
            snprintf(tail + k, sizeof tail - (size_t)k, "  %.0f s left", (double)(total - done) / rate);
    }
    int bar = width - (int)strlen(head) - 30 - 2; /* room for the longest tail, so the bar keeps its width */
    if (bar > 40) bar = 40;
    char bars[48] = "";
    if (bar >= 10) {
        const int fill = (int)(frac * bar + 0.5);
        bars[0] = '[';
        for (int i = 0; i < bar; i++) bars[1 + i] = i < fill ? '#' : '.';
        bars[bar + 1] = ']';
        bars[bar + 2] = 0;
    }
    snprintf(buf, cap, "%s%s%s", head, bars, tail);
}

void load_progress_cb(void *user, const char *phase, uint64_t done, uint64_t total) {
    LoadProgress *p = user;
    if (!p || !p->enabled) return;
    const double now = now_s();
    if (strncmp(p->phase, phase, sizeof p->phase - 1) != 0) {
        snprintf(p->phase, sizeof p->phase, "%s", phase);
        p->t_phase = now;
        p->t_drawn = 0;
    }
    if (done >= total) { /* the phase is over: erase its line (what follows may be a log line) */
        load_progress_end(p);
        return;
    }
    const double t = now - p->t_phase;
    if (t < p->min_s || now - p->t_drawn < 0.1) return;
    struct winsize ws;
    const int width = ioctl(fileno(p->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 ? ws.ws_col : 80;
    char line[256];
    load_progress_line(line, sizeof line, phase, done, total, t, width - 1);
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->t_drawn = now;
    p->shown = true;
}

void load_progress_end(LoadProgress *p) {
    if (!p->shown) return;
    fputs("\r\033[K", p->out);
    fflush(p->out);
    p->shown = false;
}
