/* gen_options.h — what `run` and `chat` share: the model, loading, context and sampling options (parsing
 * and help text), opening the engine they describe (load progress bar, --mlock, the model line on stderr)
 * and the sampler (--seed -1: a random seed, printed with -v). */
#ifndef DL_CLI_GEN_OPTIONS_H
#define DL_CLI_GEN_OPTIONS_H

#include <stdbool.h>

#include "cli/cli_engine.h"
#include "deltallm.h"

typedef struct GenOptions {
    const char *model;
    long long n_gen, n_ctx, threads, top_k, last_n, seed; /* seed -1: random */
    double temp, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
    /* llama.cpp's further samplers (--typical, --mirostat*, --dry-*, --xtc-*, --top-n-sigma, --samplers) */
    double typical, mirostat_lr, mirostat_ent, dry_multiplier, dry_base, xtc_probability, xtc_threshold, top_n_sigma;
    double dynatemp_range, dynatemp_exp; /* --dynatemp-range, --dynatemp-exp */
    long long mirostat, dry_allowed_length, dry_penalty_last_n;
    const char *samplers;
    const char *grammar, *grammar_file; /* GBNF (run: cli/gen_grammar.h) */
    const char *dry_breakers[16];
    int n_dry_breakers;
    bool no_mmap, mlock, verbose, ignore_eos, special, think;
    const char *system_prompt;
    const char *chat_template_file, *chat_format; /* override the GGUF's chat template */
    bool synthetic_note;                          /* make run: say the weights are random */
    CliEngine engine;                             /* --backend, --isa, --deltanet, --no-pack (cli_engine.h) */
} GenOptions;

void gen_options_init(GenOptions *o, long long n_gen_default);
/* If argv[*i] is one of the shared options, takes it (and its value: *i advances) and returns 1; returns 0
 * for any other argument, -1 for a bad value (the message printed, exit status 2). */
int gen_options_parse(GenOptions *o, const char *cmd, int argc, char **argv, int *i);
/* The help lines of the shared options (print cli_engine_help after them). */
extern const char gen_options_help[];

/* Opens o->model (progress bar on a terminal, --mlock, the "model: ..." line on stderr); NULL with err set. */
DlEngine *gen_open_engine(const GenOptions *o, DlError *err);
/* The sampler of o; a seed of -1 becomes a random one (printed to stderr with -v). */
DlSampler *gen_new_sampler(const GenOptions *o, const DlEngine *e, DlError *err);

#endif
