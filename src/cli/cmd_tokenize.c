/* cmd_tokenize.c — `deltallm tokenize` and `deltallm detokenize`: the tokenizer, checkable from outside.
 *
 *   deltallm tokenize   -m MODEL.gguf [--special] [--add-special] [-f FILE | [--] TEXT] [--bench N]
 *   deltallm detokenize -m MODEL.gguf [--no-special] [--raw] IDS
 *
 * tokenize prints the ids as one JSON array line ("[9707,1879]", llref's format). --special lets
 * control-token text (<|im_start|>, ...) become control tokens; --add-special adds BOS/EOS where the
 * model asks for them (Qwen: never). --bench N tokenizes N times and prints timing instead of ids.
 * detokenize takes ids separated by commas and/or spaces (a JSON array works; "-" reads them from
 * stdin) and prints the text exactly, with no newline added. Control tokens are shown (as llref
 * does) unless --no-special; bytes that are not valid UTF-8 become U+FFFD unless --raw.
 * Both work on vocab-only GGUF files and on full models. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "base/clock.h"

/* Opens MODEL and loads its tokenizer; prints one line and returns NULL on failure. */
static Tokenizer *open_tokenizer(const char *cmd, const char *path) {
    Err err = {{0}};
    Gguf *g = gguf_open(path, &err);
    if (!g) {
        fprintf(stderr, "deltallm %s: %s\n", cmd, err.msg);
        return NULL;
    }
    Tokenizer *t = tokenizer_load(g, &err);
    gguf_close(g);
    if (!t) fprintf(stderr, "deltallm %s: %s: %s\n", cmd, path, err.msg);
    return t;
}

/* "[1,2,3]\n" — formatted by hand: printf per id would cost more than tokenizing. */
static void print_ids_json(FILE *f, const TokenIds *ids) {
    char buf[1 << 14];
    size_t k = 0;
    buf[k++] = '[';
    for (size_t i = 0; i < ids->n; i++) {
        if (k > sizeof buf - 16) {
            fwrite(buf, 1, k, f);
            k = 0;
        }
        if (i) buf[k++] = ',';
        char digits[12];
        int nd = 0;
        uint32_t v = (uint32_t)ids->ids[i]; /* ids are >= 0 */
        do digits[nd++] = (char)('0' + v % 10), v /= 10;
        while (v);
        while (nd) buf[k++] = digits[--nd];
    }
    buf[k++] = ']';
    buf[k++] = '\n';
    fwrite(buf, 1, k, f);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL;
    unsigned flags = 0;
    long long bench = 0;
    bool options_done = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options_done || (a[0] != '-' || !a[1])) {
            if (text) return cli_usage_error("tokenize", "more than one TEXT argument (quote the text)");
            text = a;
        } else if (!strcmp(a, "--")) {
            options_done = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm tokenize -m MODEL.gguf [--special] [--add-special] [--bench N] [-f FILE | [--] TEXT]\n"
                   "  prints the token ids of TEXT (or of FILE, '-' = stdin) as one JSON array line\n"
                   "  --special      control-token text such as <|im_start|> becomes control tokens\n"
                   "  --add-special  add BOS/EOS where the model's metadata asks for them\n"
                   "  --bench N      tokenize N times; print timing (tokens/s) instead of the ids\n");
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) return cli_usage_error("tokenize", "%s needs a file", a);
            model = argv[i];
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (++i >= argc) return cli_usage_error("tokenize", "%s needs a file", a);
            file = argv[i];
        } else if (!strcmp(a, "--special")) {
            flags |= TOKENIZE_PARSE_SPECIAL;
        } else if (!strcmp(a, "--add-special")) {
            flags |= TOKENIZE_ADD_SPECIAL;
        } else if (!strcmp(a, "--bench")) {
            if (++i >= argc || cli_parse_int("tokenize", "--bench", argv[i], 1, 1000000, &bench) < 0) return 2;
        } else {
            return cli_usage_error("tokenize", "unknown option '%s' (see --help; '--' ends the options)", a);
        }
    }
    if (!model) return cli_usage_error("tokenize", "-m MODEL.gguf is required");
    if (!!file == !!text) return cli_usage_error("tokenize", "give either TEXT or -f FILE");

    size_t len = 0;
    char *buf = NULL;
    if (file) {
        if (!(buf = cli_read_path(file, &len))) {
            fprintf(stderr, "deltallm tokenize: cannot read %s: %s\n", file, strerror(errno));
            return 1;
        }
    } else {
        len = strlen(text);
    }
    const char *input = file ? buf : text;
    Tokenizer *t = open_tokenizer("tokenize", model);
    if (!t) {
        free(buf);
        return 1;
    }
    TokenIds ids = {0};
    Err err = {{0}};
    int rc = 0;
    if (bench > 0) {
        double best = 1e30, total = 0;
        for (long long r = 0; r < bench && rc == 0; r++) {
            ids.n = 0;
            double t0 = now_s();
            rc = tokenizer_encode(t, input, len, flags, &ids, &err);
            double dt = now_s() - t0;
            total += dt;
            if (dt < best) best = dt;
        }
        if (rc == 0)
            printf("bytes %zu tokens %zu runs %lld best_ms %.3f mean_ms %.3f tokens_per_s %.0f MB_per_s %.2f\n", len,
                   ids.n, bench, best * 1e3, total / (double)bench * 1e3, (double)ids.n / best, (double)len / best / 1e6);
    } else {
        rc = tokenizer_encode(t, input, len, flags, &ids, &err);
        if (rc == 0) print_ids_json(stdout, &ids);
    }
    if (rc < 0) fprintf(stderr, "deltallm tokenize: %s\n", err.msg);
    token_ids_free(&ids);
    tokenizer_free(t);
    free(buf);
    return rc < 0 ? 1 : (fflush(stdout) == 0 ? 0 : 1);
}

/* Parses ids separated by commas, spaces or newlines, optionally inside [ ]. */
static int parse_ids(const char *s, int32_t n_vocab, TokenIds *out) {
    const char *p = s;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    bool bracket = *p == '[';
    if (bracket) p++;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',') p++;
        if (!*p || (bracket && *p == ']')) break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno) {
            fprintf(stderr, "deltallm detokenize: expected a token id at '%.20s'\n", p);
            return -1;
        }
        if (v < 0 || v >= n_vocab) {
            fprintf(stderr, "deltallm detokenize: token id %lld is out of range (vocabulary of %d)\n", v, n_vocab);
            return -1;
        }
        if (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r' && *end != ']') {
            fprintf(stderr, "deltallm detokenize: expected a token id at '%.20s'\n", p);
            return -1;
        }
        if (out->n == out->cap) {
            size_t cap = out->cap ? out->cap * 2 : 64;
            int32_t *ids = realloc(out->ids, cap * sizeof *ids);
            if (!ids) return -1;
            out->ids = ids;
            out->cap = cap;
        }
        out->ids[out->n++] = (int32_t)v;
        p = end;
    }
    if (bracket && *p != ']') {
        fprintf(stderr, "deltallm detokenize: missing ']'\n");
        return -1;
    }
    if (bracket) p++;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p) {
        fprintf(stderr, "deltallm detokenize: unexpected text after the ids: '%.20s'\n", p);
        return -1;
    }
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    const char *model = NULL, *arg = NULL;
    unsigned flags = DETOKENIZE_SPECIAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm detokenize -m MODEL.gguf [--no-special] [--raw] IDS\n"
                   "  prints the text of IDS (\"9707,1879\", \"9707 1879\" or \"[9707, 1879]\"; '-' = stdin) exactly\n"
                   "  --no-special  hide control tokens (<|im_end|>, ...)\n"
                   "  --raw         print the bytes as they are, even when not valid UTF-8\n");
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) return cli_usage_error("detokenize", "%s needs a file", a);
            model = argv[i];
        } else if (!strcmp(a, "--no-special")) {
            flags &= ~(unsigned)DETOKENIZE_SPECIAL;
        } else if (!strcmp(a, "--raw")) {
            flags |= DETOKENIZE_RAW;
        } else if (a[0] == '-' && a[1] && !(a[1] >= '0' && a[1] <= '9')) {
            return cli_usage_error("detokenize", "unknown option '%s' (see --help)", a);
        } else if (!arg) {
            arg = a;
        } else {
            return cli_usage_error("detokenize", "give the ids as one argument (quote them)");
        }
    }
    if (!model) return cli_usage_error("detokenize", "-m MODEL.gguf is required");
    if (!arg) return cli_usage_error("detokenize", "IDS are required");
    char *stdin_buf = NULL;
    if (!strcmp(arg, "-")) {
        size_t n;
        if (!(stdin_buf = cli_read_stream(stdin, &n))) {
            fprintf(stderr, "deltallm detokenize: cannot read stdin\n");
            return 1;
        }
        arg = stdin_buf;
    }
    Tokenizer *t = open_tokenizer("detokenize", model);
    if (!t) {
        free(stdin_buf);
        return 1;
    }
    TokenIds ids = {0};
    int rc = parse_ids(arg, tokenizer_n_vocab(t), &ids);
    if (rc == 0) {
        Err err = {{0}};
        char *text;
        size_t len;
        rc = tokenizer_decode(t, ids.ids, ids.n, flags, &text, &len, &err);
        if (rc == 0) {
            fwrite(text, 1, len, stdout);
            free(text);
        } else {
            fprintf(stderr, "deltallm detokenize: %s\n", err.msg);
        }
    }
    token_ids_free(&ids);
    tokenizer_free(t);
    free(stdin_buf);
    return rc < 0 ? 1 : (fflush(stdout) == 0 ? 0 : 1);
}
