/* cli_proc.h — for the CLI tests: run the deltallm binary ($DELTALLM_BIN) with captured output, or drive
 * it through a pseudo-terminal as a person at a keyboard would. */
#ifndef DL_TESTS_CLI_PROC_H
#define DL_TESTS_CLI_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* $DELTALLM_BIN, or NULL (the test notes that it is skipped). */
const char *cli_bin(void);

/* Runs `BIN args` (args is shell text) with stdin_text on standard input (NULL: /dev/null); returns the
 * exit status (-1 if it did not exit normally); *out and *err (malloc'd, may be NULL) get what it printed. */
int cli_run(const char *args, const char *stdin_text, char **out, char **err);

typedef struct Pty {
    pid_t pid;
    int fd;     /* the terminal's master side */
    char *buf;  /* everything read so far, \r\n turned into \n */
    size_t len, cap, pos; /* pos: where the next expect starts looking */
} Pty;

/* Starts BIN argv... on a new terminal (its controlling terminal: ^C there is SIGINT). */
bool pty_start(Pty *p, const char *const *argv);
/* Types text (\r is Enter, \x03 is Ctrl-C). */
void pty_send(Pty *p, const char *text);
/* Waits until marker appears after pos (up to timeout_ms); returns a malloc'd copy of the text from pos
 * to the marker and moves pos past the marker, or NULL on timeout / end of output. */
char *pty_expect(Pty *p, const char *marker, int timeout_ms);
/* Waits until at least n more bytes than pos have arrived. */
bool pty_wait_bytes(Pty *p, size_t n, int timeout_ms);
/* Waits for the process to end (killing it after timeout_ms); its exit status, or -1. */
int pty_finish(Pty *p, int timeout_ms);

#endif
