/* cmd_chat.c — `deltallm chat` (also `deltallm run -cnv`): an interactive multi-turn chat in the terminal.
 *
 * A prompt line ("> " when standard input is a terminal), the conversation kept and rendered with the
 * model's chat template each turn (chat_conv.c reuses what the session already holds), replies streamed
 * as they are generated, reasoning dimmed (outside a terminal: between <think> and </think> lines).
 * Commands: /reset, /exit (or /quit, Ctrl-D), /image FILE (with --mmproj: the picture goes with the next
 * message), /help; a line ending in \ continues on the next one.
 * Ctrl-C stops the reply being generated (or the prompt being read) and returns to the prompt; at the
 * prompt, a second Ctrl-C in a row quits. Without a terminal each line of standard input is one message. */
#include "cli/chat_conv.h"
#include "cli/chat_prompt.h"
#include "cli/cli_image.h"
#include "cli/cli.h"
#include "cli/gen_options.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Ctrl-C: a flag the generation polls, and a byte in a pipe the prompt's wait polls (the signal may be
 * handled by any of the engine's threads, so the prompt's read cannot rely on being interrupted). */
static volatile sig_atomic_t interrupted;
static int sigint_pipe[2] = {-1, -1};
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
    if (sigint_pipe[1] >= 0) {
        int saved = errno;
        ssize_t w = write(sigint_pipe[1], "", 1);
        (void)w;
        errno = saved;
    }
}

static void usage(void) {
    printf("usage: deltallm chat -m MODEL.gguf [options]   (also: deltallm run -cnv -m MODEL.gguf ...)\n"
           "  -p, --prompt TEXT        a first message, sent before reading the prompt line\n"
           "  --mmproj FILE            vision projector (llama.cpp's Qwen3.5 mmproj): /image FILE attaches a picture\n"
           "  --image FILE             (with --mmproj) a picture for the first message\n"
           "  --vision-device NAME     run the vision encoder on that backend (vulkan[:N], cpu, ref; F32 arithmetic)\n"
           "%s%s"
           "  (-n defaults to -1: each reply runs until end of generation or a full context)\n"
           "at the prompt: /reset forgets the conversation, /image FILE attaches a picture to the next message,\n"
           "/exit (or Ctrl-D) quits, /help; a line ending in \\\n"
           "continues on the next one; Ctrl-C stops a reply.\n",
           gen_options_help, cli_engine_help);
}

typedef struct Screen {
    bool tty;          /* stdout is a terminal: reasoning dimmed, coloured prompt */
    bool in_reasoning; /* reasoning text is being written */
    bool wrote;        /* the reply has written something */
} Screen;

static void write_out(const char *s, size_t n) {
    fwrite(s, 1, n, stdout);
    fflush(stdout);
}

/* Ends the reasoning text: a blank line before content, the end of the reply otherwise. */
static void end_reasoning(Screen *sc, bool content_follows) {
    if (!sc->in_reasoning) return;
    fputs(sc->tty ? "\033[0m\n" : "\n</think>\n", stdout);
    if (content_follows) fputc('\n', stdout);
    sc->in_reasoning = false;
}

static void on_reasoning(void *user, const char *s, size_t n) {
    Screen *sc = user;
    if (!sc->in_reasoning) fputs(sc->tty ? "\033[2m" : "<think>\n", stdout);
    sc->in_reasoning = sc->wrote = true;
    write_out(s, n);
}

static void on_content(void *user, const char *s, size_t n) {
    Screen *sc = user;
    end_reasoning(sc, true);
    sc->wrote = true;
    write_out(s, n);
}

/* Waits until standard input is readable; false when Ctrl-C came first (even just before the wait: its
 * byte is in the pipe). */
static bool wait_input(void) {
    struct pollfd pf[2] = {{STDIN_FILENO, POLLIN, 0}, {sigint_pipe[0], POLLIN, 0}};
    while (!interrupted && poll(pf, 2, -1) < 0 && errno == EINTR) {}
    char drain[64];
    while (read(sigint_pipe[0], drain, sizeof drain) > 0) {}
    return !interrupted;
}

/* Reads one message (lines ending in \ are joined). 1: a message in *buf; 0: end of input; -1: Ctrl-C. */
static int read_message(char **buf, size_t *cap, bool tty_in, bool tty_out) {
    size_t len = 0;
    char *line = NULL;
    size_t line_cap = 0;
    int rc = 1;
    for (bool first = true;; first = false) {
        if (tty_in) fputs(tty_out ? (first ? "\033[1;32m> \033[0m" : "\033[1;32m. \033[0m") : (first ? "> " : ". "), stdout);
        fflush(stdout);
        if (!wait_input()) {
            rc = -1;
            break;
        }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n < 0) {
            rc = interrupted ? -1 : len ? 1 : 0;
            clearerr(stdin);
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        bool more = n > 0 && line[n - 1] == '\\';
        if (more) line[--n] = 0;
        if (len + (size_t)n + 2 > *cap) {
            size_t nc = (len + (size_t)n + 2) * 2;
            char *p = realloc(*buf, nc);
            if (!p) {
                rc = 0;
                break;
            }
            *buf = p, *cap = nc;
        }
        if (len) (*buf)[len++] = '\n';
        memcpy(*buf + len, line, (size_t)n);
        len += (size_t)n;
        (*buf)[len] = 0;
        if (!more) break;
    }
    free(line);
    if (rc == 1 && !len && *cap) (*buf)[0] = 0;
    return rc;
}

static void print_help(void) {
    fprintf(stderr, "commands: /reset  forget the conversation (the system prompt stays)\n"
                    "          /image FILE  attach a picture (PNG or JPEG) to the next message (needs --mmproj)\n"
                    "          /exit   quit (also /quit, Ctrl-D)\n"
                    "          /help   this list\n"
                    "a line ending in \\ continues on the next line; to send a message that starts with /, type\n"
                    "it with two (//etc sends /etc)\n"
                    "Ctrl-C stops the reply being generated.\n");
}

/* Encodes a picture for the next message; -1 (the reason printed) when it cannot. The projector (and the encoder's
 * backend with --vision-device) is opened at the first picture and kept in *vis for the next ones. */
static int attach_image(DlEngine *e, ChatConv *conv, CliVision **vis, const char *mmproj, const char *device, const char *path,
                        const GenOptions *o) {
    DlError err = {{0}};
    CliImage img = {0};
    int gw = 0, gh = 0;
    if (!*vis) *vis = cli_vision_open(e, mmproj, (int)o->threads, device, &err);
    if (!*vis || cli_vision_encode(*vis, path, &img, &err) || (gw = img.gw, gh = img.gh, 0) ||
        chat_conv_attach(conv, &img, &err)) {
        cli_image_free(&img);
        fprintf(stderr, "deltallm chat: %s\n", err.msg);
        return -1;
    }
    fprintf(stderr, "[image %s: %d×%d tokens, goes with the next message (%d waiting)]\n", path, gw, gh,
            chat_conv_pending_images(conv));
    return 0;
}

/* One user message: the reply streamed, then a note on how it ended. */
static void chat_turn(ChatConv *conv, const char *msg, DlSampler *smp, const GenOptions *o, bool tty_out) {
    Screen sc = {.tty = tty_out};
    ChatConvOutput out = {on_reasoning, on_content, &sc};
    ChatTurnStats st;
    DlError err = {{0}};
    interrupted = 0;
    ChatTurnEnd end = chat_conv_turn(conv, msg, smp, o->n_gen, o->ignore_eos, &out, &interrupted, &st, &err);
    if (sc.in_reasoning) end_reasoning(&sc, false);
    else if (sc.wrote) fputc('\n', stdout);
    fflush(stdout);
    switch (end) {
    case TURN_DONE: break;
    case TURN_LENGTH: fprintf(stderr, "[reply cut at %zu tokens (-n)]\n", st.n_gen); break;
    case TURN_CONTEXT: fprintf(stderr, "[the context is full: /reset starts a new conversation]\n"); break;
    case TURN_INTERRUPTED: fprintf(stderr, "[stopped]\n"); break;
    case TURN_TOO_LONG: fprintf(stderr, "[%s: /reset starts a new conversation]\n", err.msg); break;
    case TURN_ERROR: fprintf(stderr, "deltallm chat: %s\n", err.msg); break;
    }
    if (o->verbose && end != TURN_TOO_LONG && end != TURN_ERROR)
        fprintf(stderr, "[prompt %zu tokens (%zu reused) in %.2f s; reply %zu tokens in %.2f s, %.1f t/s]\n", st.n_prompt,
                st.n_reused, st.t_prompt, st.n_gen, st.t_gen, st.t_gen > 0 ? st.n_gen / st.t_gen : 0);
    interrupted = 0;
}

int cmd_chat(int argc, char **argv) {
    GenOptions o;
    gen_options_init(&o, -1);
    const char *first = NULL, *mmproj = NULL, *image = NULL, *vision_device = NULL;
    CliVision *vis = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = gen_options_parse(&o, "chat", argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "-cnv") || !strcmp(a, "--conversation") || !strcmp(a, "--chat")) continue;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) {
            if (i + 1 >= argc) return cli_usage_error("chat", "%s needs a value", a);
            first = argv[++i];
        } else if (!strcmp(a, "--mmproj") || !strcmp(a, "--image")) {
            if (i + 1 >= argc) return cli_usage_error("chat", "%s needs a value", a);
            *(a[2] == 'm' ? &mmproj : &image) = argv[++i];
        } else if (!strcmp(a, "--vision-device")) {
            if (i + 1 >= argc) return cli_usage_error("chat", "%s needs a value", a);
            vision_device = argv[++i];
        } else return cli_usage_error("chat", "unknown option '%s' (see --help)", a);
    }
    if (image && !mmproj) return cli_usage_error("chat", "--image needs --mmproj (the vision projector)");
    if (vision_device && !mmproj) return cli_usage_error("chat", "--vision-device needs --mmproj");
    if (!o.model && !(o.model = cli_default_model()))
        return cli_usage_error("chat", "needs -m MODEL.gguf (the embedded %s is not here)", CLI_DEFAULT_MODEL);
    const bool tty_in = isatty(STDIN_FILENO), tty_out = isatty(STDOUT_FILENO);

    DlError err = {{0}};
    int rc = 1;
    ChatTemplate tmpl;
    ChatConv *conv = NULL;
    DlSampler *smp = NULL;
    char *buf = NULL;
    size_t cap = 0;
    DlEngine *e = gen_open_engine(&o, &err);
    if (!e) goto done;
    if (chat_prompt_template(dl_chat_template(e), o.chat_template_file, o.chat_format, &tmpl, err.msg, sizeof err.msg))
        goto done;
    if (!(conv = chat_conv_new(e, &tmpl, o.system_prompt, o.think, &err)) || !(smp = gen_new_sampler(&o, e, &err)))
        goto done;
    if (image && attach_image(e, conv, &vis, mmproj, vision_device, image, &o)) goto done_quiet;
    if (pipe2(sigint_pipe, O_CLOEXEC | O_NONBLOCK)) {
        snprintf(err.msg, sizeof err.msg, "cannot create a pipe: %s", strerror(errno));
        goto done;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_sigint; /* no SA_RESTART: a Ctrl-C ends the read of the prompt line */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    if (tty_in)
        fprintf(stderr, "chat format %s; /help lists the commands, Ctrl-C stops a reply, /exit or Ctrl-D quits\n",
                chat_format_name(tmpl.format));
    if (first) chat_turn(conv, first, smp, &o, tty_out);
    for (bool ctrl_c = false;;) {
        int r = read_message(&buf, &cap, tty_in, tty_out);
        if (r == 0) {
            if (tty_in) fputc('\n', stdout);
            break;
        }
        if (r < 0) {
            interrupted = 0;
            if (ctrl_c || !tty_in) {
                fputc('\n', stdout);
                break;
            }
            fputs("\n", stdout);
            fprintf(stderr, "(Ctrl-C again, /exit or Ctrl-D quits)\n");
            ctrl_c = true;
            continue;
        }
        ctrl_c = false;
        const char *msg = buf;
        while (*msg == ' ' || *msg == '\t') msg++;
        if (!*msg) continue;
        if (msg[0] == '/' && msg[1] != '/') {
            size_t n = strcspn(msg, " \t");
            if ((n == 5 && !strncmp(msg, "/exit", 5)) || (n == 5 && !strncmp(msg, "/quit", 5))) break;
            if ((n == 6 && !strncmp(msg, "/reset", 6)) || (n == 6 && !strncmp(msg, "/clear", 6))) {
                chat_conv_reset(conv);
                fprintf(stderr, "[conversation cleared]\n");
            } else if (n == 5 && !strncmp(msg, "/help", 5)) {
                print_help();
            } else if (n == 6 && !strncmp(msg, "/image", 6)) {
                const char *path = msg + n;
                while (*path == ' ' || *path == '\t') path++;
                if (!mmproj) fprintf(stderr, "/image needs a vision projector: start chat with --mmproj FILE\n");
                else if (!*path) fprintf(stderr, "usage: /image FILE (a PNG or JPEG)\n");
                else attach_image(e, conv, &vis, mmproj, vision_device, path, &o);
            } else {
                fprintf(stderr, "unknown command %.*s (/help lists them; type // to send a message that starts with /)\n",
                        (int)n, msg);
            }
            continue;
        }
        chat_turn(conv, msg[0] == '/' ? msg + 1 : msg, smp, &o, tty_out);
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "deltallm chat: %s\n", err.msg[0] ? err.msg : "failed");
done_quiet:
    free(buf);
    cli_vision_close(vis);
    dl_sampler_free(smp);
    chat_conv_free(conv);
    dl_engine_close(e);
    signal(SIGINT, SIG_DFL);
    for (int i = 0; i < 2; i++)
        if (sigint_pipe[i] >= 0) close(sigint_pipe[i]), sigint_pipe[i] = -1;
    return rc;
}
