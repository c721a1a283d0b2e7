/* progress.h — the load progress bar of `run`, `chat` and `serve`. On a terminal it is one line on stderr,
 * redrawn in place at most 10 times a second:
 *     loading: read     1.2 / 4.5 GiB [#######...............]  27%  1.1 GiB/s  3 s left
 * and erased when its phase ends. A phase is drawn only once it has run for min_s (0.5 s), so small models
 * print nothing; where stderr is not a terminal (logs, pipes) nothing is drawn at all. Its callback fits
 * DlEngineParams.progress (phases: "read" with --no-mmap, "pack", "prefetch" with --mlock). */
#ifndef DL_CLI_PROGRESS_H
#define DL_CLI_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct LoadProgress {
    FILE *out;
    bool enabled; /* out is a terminal (and TERM is not "dumb") */
    double min_s; /* a phase shorter than this is not drawn */
    char phase[16];
    double t_phase, t_drawn; /* when the phase started, when the line was last drawn */
    bool shown;              /* a line is on the screen */
} LoadProgress;

void load_progress_init(LoadProgress *p, FILE *out);
/* The DlProgressFn: user is a LoadProgress. */
void load_progress_cb(void *user, const char *phase, uint64_t done, uint64_t total);
/* Erases the line, if one is drawn. */
void load_progress_end(LoadProgress *p);
/* The text of the line (without \r), seconds into the phase; width: the terminal's columns. */
void load_progress_line(char *buf, size_t cap, const char *phase, uint64_t done, uint64_t total, double seconds,
                        int width);

#endif
