/* cmd_synth.c — `deltallm synth`: write a synthetic model (real shapes and vocabulary, random weights)
 * with deltallm's own GGUF writer. `--default`: the Qwen3.5-0.8B shape in Q8_0 (the benchmarks' b1 shape),
 * written once (kept if the file already exists). */
#include "cli/cli.h"
#include "gguf/format.h"
#include "model/synth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_VOCAB "tests/data/vocab/ggml-vocab-qwen35.gguf"

static int parse_type(const char *s, uint32_t *out) {
    for (uint32_t id = 0; id < FMT_COUNT; id++) {
        const Format *f = format_get(id);
        if (f && f->weight && f->quantize && strcasecmp(f->name, s) == 0) return *out = id, 0;
    }
    return -1;
}

/* mkdir -p of the file's directory */
static int make_parent(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

int cmd_synth(int argc, char **argv) {
    const char *out = NULL, *preset = "qwen3.5-0.8b", *vocab = DEFAULT_VOCAB, *type = NULL, *add_mtp = NULL;
    long long layers = 0, seed = 1;
    bool if_missing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm synth [--default] [--preset NAME] [--layers K] [--type T] [--vocab FILE.gguf]\n"
                   "                      [--seed N] [--if-missing] OUT.gguf\n"
                   "       deltallm synth --add-mtp MODEL.gguf [--seed N] OUT.gguf\n"
                   "  presets: qwen3.5-0.8b (default), qwen3.5-2b, qwen3.5-9b, qwen3.5-35b-a3b, qwen3-next-80b-a3b\n"
                   "  --type: matrix weight format (default q8_0): f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K..q6_K iq4_nl iq4_xs\n"
                   "  --vocab: tokenizer source (default %s)\n"
                   "  --default: the Qwen3.5-0.8B shape in Q8_0 (the speed benchmarks' b1 shape), written only if\n"
                   "             missing (make run uses the embedded trained model, assets/tinychat-f16.gguf)\n"
                   "  --add-mtp: a copy of MODEL with one MTP block of random weights added (an attention block with\n"
                   "             the model's FFN and blk.N.nextn.*), for speculative decoding's speed and tests\n",
                   DEFAULT_VOCAB);
            return 0;
        } else if (!strcmp(a, "--default")) {
            if_missing = true;
        } else if (!strcmp(a, "--if-missing")) {
            if_missing = true;
        } else if (!strcmp(a, "--add-mtp") && v) {
            add_mtp = argv[++i];
        } else if (!strcmp(a, "--preset") && v) {
            preset = argv[++i];
        } else if (!strcmp(a, "--vocab") && v) {
            vocab = argv[++i];
        } else if (!strcmp(a, "--type") && v) {
            type = argv[++i];
        } else if (!strcmp(a, "--layers") && v) {
            if (cli_parse_int("synth", a, argv[++i], 2, 512, &layers)) return 2;
        } else if (!strcmp(a, "--seed") && v) {
            if (cli_parse_int("synth", a, argv[++i], 0, INT64_MAX, &seed)) return 2;
        } else if (a[0] == '-') {
            return cli_usage_error("synth", "unknown or incomplete option '%s'", a);
        } else if (out) {
            return cli_usage_error("synth", "one output file");
        } else {
            out = a;
        }
    }
    if (!out) return cli_usage_error("synth", "missing OUT.gguf");
    struct stat st;
    if (if_missing && stat(out, &st) == 0) return 0;
    Err err = {{0}};
    if (add_mtp) {
        if (synth_add_mtp(add_mtp, out, (uint64_t)seed, &err)) {
            fprintf(stderr, "deltallm synth: %s\n", err.msg);
            return 1;
        }
        return 0;
    }
    SynthSpec spec;
    if (synth_preset(&spec, preset, &err)) {
        fprintf(stderr, "deltallm synth: %s\n", err.msg);
        return 2;
    }
    if (type && parse_type(type, &spec.wtype)) return cli_usage_error("synth", "unsupported weight type '%s'", type);
    if (layers) spec.n_layer = (int)layers;
    spec.seed = (uint64_t)seed;
    if (make_parent(out)) {
        fprintf(stderr, "deltallm synth: cannot create the directory of '%s': %s\n", out, strerror(errno));
        return 1;
    }
    fprintf(stderr, "synth: writing %s (%s, %d layers, %s weights, random values)...\n", out, preset, spec.n_layer,
            format_name(spec.wtype));
    clock_t t0 = clock();
    if (synth_write(&spec, vocab, out, &err)) {
        fprintf(stderr, "deltallm synth: %s\n", err.msg);
        return 1;
    }
    fprintf(stderr, "synth: done in %.1f s\n", (double)(clock() - t0) / CLOCKS_PER_SEC);
    return 0;
}
