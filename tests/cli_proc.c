/* cli_proc.c — see cli_proc.h: running the CLI from the tests, with pipes or a pseudo-terminal. */
#include "cli_proc.h"

#include "test.h"
#include "base/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

const char *cli_bin(void) {
    const char *b = getenv("DELTALLM_BIN");
    return b && *b ? b : NULL;
}

static int counter;

int cli_run(const char *args, const char *stdin_text, char **out, char **err) {
    char in_path[512], out_path[512], err_path[512], cmd[8192];
    int k = counter++;
    snprintf(in_path, sizeof in_path, "%s/cli%d.in", test_tmpdir(), k);
    snprintf(out_path, sizeof out_path, "%s/cli%d.out", test_tmpdir(), k);
    snprintf(err_path, sizeof err_path, "%s/cli%d.err", test_tmpdir(), k);
    FILE *f = fopen(in_path, "wb");
    if (!f) return -1;
    if (stdin_text) fputs(stdin_text, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s %s < '%s' > '%s' 2> '%s'", cli_bin(), args, in_path, out_path, err_path);
    int st = system(cmd);
    if (out) *out = test_read_file(out_path, NULL);
    if (err) *err = test_read_file(err_path, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double now_ms(void) { return now_s() * 1e3; }

bool pty_start(Pty *p, const char *const *argv) {
    memset(p, 0, sizeof *p);
    struct winsize ws = {.ws_row = 40, .ws_col = 120};
    p->pid = forkpty(&p->fd, NULL, NULL, &ws);
    if (p->pid < 0) return false;
    if (p->pid == 0) {
        execv(cli_bin(), (char *const *)argv);
        _exit(127);
    }
    fcntl(p->fd, F_SETFL, fcntl(p->fd, F_GETFL) | O_NONBLOCK);
    return true;
}

void pty_send(Pty *p, const char *text) {
    size_t n = strlen(text);
    while (n) {
        ssize_t w = write(p->fd, text, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        text += w, n -= (size_t)w;
    }
}

/* Reads what is there (waiting up to ms); false at end of output. */
static bool pty_read(Pty *p, int ms) {
    struct pollfd pf = {p->fd, POLLIN, 0};
    if (poll(&pf, 1, ms) <= 0) return true;
    char tmp[4096];
    ssize_t r = read(p->fd, tmp, sizeof tmp);
    if (r <= 0) return r < 0 && (errno == EAGAIN || errno == EINTR);
    if (p->len + (size_t)r + 1 > p->cap) {
        p->cap = (p->len + (size_t)r + 1) * 2;
        p->buf = realloc(p->buf, p->cap);
    }
    for (ssize_t i = 0; i < r; i++) {
        /* the terminal writes \n as \r\n: keep the program's own bytes */
        if (tmp[i] == '\n' && p->len > p->pos && p->buf[p->len - 1] == '\r') p->len--;
        p->buf[p->len++] = tmp[i];
    }
    p->buf[p->len] = 0;
    return true;
}

char *pty_expect(Pty *p, const char *marker, int timeout_ms) {
    const double end = now_ms() + timeout_ms;
    for (;;) {
        /* memmem, not strstr: a sampled reply may hold NUL bytes (a byte token), and the search must look past them */
        char *hit = p->buf ? memmem(p->buf + p->pos, p->len - p->pos, marker, strlen(marker)) : NULL;
        if (hit) {
            const size_t n = (size_t)(hit - (p->buf + p->pos));
            char *text = malloc(n + 1);
            if (!text) return NULL;
            for (size_t i = 0; i < n; i++) text[i] = p->buf[p->pos + i] ? p->buf[p->pos + i] : '?'; /* callers strstr it */
            text[n] = 0;
            p->pos = (size_t)(hit - p->buf) + strlen(marker);
            return text;
        }
        const double left = end - now_ms();
        if (left <= 0 || !pty_read(p, left > 50 ? 50 : (int)left + 1)) return NULL;
    }
}

bool pty_wait_bytes(Pty *p, size_t n, int timeout_ms) {
    const double end = now_ms() + timeout_ms;
    while (p->len < p->pos + n) {
        const double left = end - now_ms();
        if (left <= 0 || !pty_read(p, 50)) return false;
    }
    return true;
}

int pty_finish(Pty *p, int timeout_ms) {
    const double end = now_ms() + timeout_ms;
    int st = 0;
    pid_t r;
    while ((r = waitpid(p->pid, &st, WNOHANG)) == 0 && now_ms() < end) pty_read(p, 20);
    if (r == 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &st, 0);
        st = -1;
    }
    close(p->fd);
    free(p->buf);
    p->buf = NULL;
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
