/* main.c — entry point of the deltallm binary: dispatches to a subcommand. The only place that exits. */
#include "cli/cli.h"
#include "deltallm.h"
#include "git_rev.h" /* DL_GIT_REV, written by the Makefile */
#include "cli/cli_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct Command {
    const char *name;
    CmdFn *fn; /* address of the (weak) function pointer, so unbuilt commands read as NULL */
    const char *help;
} Command;

static CmdFn f_inspect = cmd_inspect, f_run = cmd_run, f_eval = cmd_eval, f_synth = cmd_synth,
             f_parity = cmd_parity, f_bench = cmd_bench, f_tokenize = cmd_tokenize, f_detokenize = cmd_detokenize,
             f_chat_format = cmd_chat_format, f_serve = cmd_serve, f_chat = cmd_chat, f_convert = cmd_convert,
             f_quantize = cmd_quantize, f_perplexity = cmd_perplexity, f_devices = cmd_devices;

static const Command commands[] = {
    {"run", &f_run, "generate text: run -m MODEL.gguf -p PROMPT [-n N] [--chat] [sampling options]"},
    {"chat", &f_chat, "interactive multi-turn chat in the terminal: chat -m MODEL.gguf [-sys PROMPT]"},
    {"serve", &f_serve, "OpenAI-compatible HTTP server: serve -m MODEL.gguf [--host H] [--port P]"},
    {"inspect", &f_inspect, "show a GGUF file: metadata, hyperparameters, tensors, memory needs"},
    {"eval", &f_eval, "write all-position logits for a token file: eval -m MODEL --tokens-file F --logits-out OUT"},
    {"parity", &f_parity, "compare stage dumps and logits with llama.cpp reference dumps"},
    {"bench", &f_bench, "prefill / decode speed in the style of llama-bench"},
    {"tokenize", &f_tokenize, "text to token ids (JSON array): tokenize -m MODEL [--special] [-f FILE | TEXT]"},
    {"detokenize", &f_detokenize, "token ids to text: detokenize -m MODEL IDS"},
    {"chat-format", &f_chat_format, "render an OpenAI-style conversation (JSON on stdin) as the model's prompt"},
    {"convert", &f_convert, "Hugging Face checkpoint directory to GGUF: convert HF_DIR -o OUT.gguf [--type T]"},
    {"quantize", &f_quantize, "requantize a GGUF with llama-quantize's type mixes: quantize IN.gguf OUT.gguf TYPE"},
    {"perplexity", &f_perplexity, "perplexity of a text file (llama-perplexity's windows), KL vs a base: -m M -f TEXT"},
    {"devices", &f_devices, "the devices this build can run on (--device names), with memory; --probe: copy bandwidth"},
    {"synth", &f_synth, "write a synthetic random-weight model (real shapes) with deltallm's GGUF writer"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: deltallm COMMAND [options]   (deltallm COMMAND --help for its options; --version)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s%s\n", commands[i].name, commands[i].help, *commands[i].fn ? "" : " [not built]");
}

int main(int argc, char **argv) {
    if (argc >= 2 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) {
        printf("deltallm %s (%s)\n", dl_version(), DL_GIT_REV);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    int rc = 0;
    if (cli_mpi_start(argc, argv, &rc)) return cli_mpi_end(argv[1], rc); /* --mpi: a rank other than 0 */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0) continue;
        if (!*commands[i].fn) {
            fprintf(stderr, "deltallm: '%s' is not available in this build\n", argv[1]);
            return cli_mpi_end(argv[1], 2);
        }
        return cli_mpi_end(argv[1], (*commands[i].fn)(argc - 1, argv + 1));
    }
    fprintf(stderr, "deltallm: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return cli_mpi_end(argv[1], 2);
}
