/* cli.h — the subcommands of the deltallm binary. Each lives in its own cmd_*.c and returns the process
 * exit status (0 ok, 1 runtime error, 2 usage error). main.c only dispatches. */
#ifndef DL_CLI_CLI_H
#define DL_CLI_CLI_H

#include <stddef.h>
#include <stdio.h>

typedef int (*CmdFn)(int argc, char **argv);

/* Declared weak so that a command whose file is not built yet reads as "not available". */
#define DL_CMD(name) int name(int argc, char **argv) __attribute__((weak))
DL_CMD(cmd_inspect);
DL_CMD(cmd_run);
DL_CMD(cmd_eval);
DL_CMD(cmd_synth);
DL_CMD(cmd_parity);
DL_CMD(cmd_bench);
DL_CMD(cmd_tokenize);
DL_CMD(cmd_detokenize);
DL_CMD(cmd_chat_format);
DL_CMD(cmd_serve);
DL_CMD(cmd_chat);
DL_CMD(cmd_convert);
DL_CMD(cmd_quantize);
DL_CMD(cmd_perplexity);
DL_CMD(cmd_devices);
#undef DL_CMD

/* Shared helpers for option parsing: print "deltallm CMD: message" to stderr and return 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses a decimal integer in [lo, hi]; returns 0 or -1 (message printed). */
int cli_parse_int(const char *cmd, const char *opt, const char *s, long long lo, long long hi, long long *out);
int cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out);

/* The whole of a stream / file (malloc'd, NUL-terminated, *len bytes before the NUL), or NULL on a read
 * error or when out of memory (errno tells which, for a file that cannot be opened). */
char *cli_read_stream(FILE *f, size_t *len);
char *cli_read_file(const char *path, size_t *len);
/* The embedded model run, chat and serve take when no -m is given: CLI_DEFAULT_MODEL under the current
 * directory, else beside the binary's directory (build/deltallm -> assets/); NULL when neither exists. */
#define CLI_DEFAULT_MODEL "assets/tinychat-f16.gguf"
const char *cli_default_model(void);
/* cli_read_file, where the path "-" means standard input. */
char *cli_read_path(const char *path, size_t *len);

/* A seed from the kernel's random source (the time and pid if that fails), for --seed -1. */
unsigned long long cli_random_seed(void);

#endif
