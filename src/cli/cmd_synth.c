/* cmd_synth.c — `deltallm synth`: write a synthetic model (real shapes and vocabulary, random weights)
 * with deltallm's own GGUF writer. `--default`: the Qwen3.5-0.8B shape in Q8_0 (the benchmarks' b1 shape),
 * written once (kept if the file already exists). */
#include "cli/cli.h"
#include "gguf/format.h"
#include "model/synth.h"
#include "vision/mmproj_synth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
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

/* `synth --mmproj PRESET`: a synthetic qwen3vl_merger projector (vision/mmproj_synth.c) */
typedef struct MmprojOpts {
    const char *preset, *deepstack, *type;
    long long proj_dim, width, ff, heads, layers, seed;
} MmprojOpts;

static int write_mmproj(const MmprojOpts *o, const char *out) {
    MmprojSpec sp;
    Err err = {{0}};
    if (mmproj_synth_preset(&sp, o->preset, &err)) {
        fprintf(stderr, "deltallm synth: %s\n", err.msg);
        return 2;
    }
    if (o->type && parse_type(o->type, &sp.wtype)) return cli_usage_error("synth", "unsupported weight type '%s'", o->type);
    if (o->proj_dim) sp.proj_dim = (int)o->proj_dim;
    if (o->width) sp.n_embd = (int)o->width;
    if (o->ff) sp.n_ff = (int)o->ff;
    if (o->heads) sp.n_head = (int)o->heads;
    if (o->layers) sp.n_layer = (int)o->layers;
    sp.seed = (uint64_t)o->seed;
    for (const char *p = o->deepstack; p && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= sp.n_layer || sp.n_deepstack == MMPROJ_SYNTH_MAX_DS)
            return cli_usage_error("synth", "--deepstack takes up to %d block numbers below %d, comma-separated",
                                   MMPROJ_SYNTH_MAX_DS, sp.n_layer);
        sp.deepstack[sp.n_deepstack++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return cli_usage_error("synth", "--deepstack: '%s' is not a list of numbers", o->deepstack);
    }
    if (make_parent(out)) {
        fprintf(stderr, "deltallm synth: cannot create the directory of '%s': %s\n", out, strerror(errno));
        return 1;
    }
    fprintf(stderr, "synth: writing %s (mmproj %s: %d blocks of %d, output %d, random values)...\n", out, o->preset,
            sp.n_layer, sp.n_embd, sp.proj_dim);
    if (mmproj_synth_write(&sp, out, &err)) {
        fprintf(stderr, "deltallm synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}

int cmd_synth(int argc, char **argv) {
    const char *out = NULL, *preset = "qwen3.5-0.8b", *vocab = DEFAULT_VOCAB, *type = NULL, *add_mtp = NULL;
    long long layers = 0, seed = 1;
    bool if_missing = false;
    MmprojOpts mo = {0};
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
                   "       deltallm synth --mmproj PRESET [--proj-dim P] [--width E] [--ff F] [--heads H] [--layers K]\n"
                   "                      [--deepstack L,L..] [--type T] [--seed N] OUT.gguf\n"
                   "  --mmproj: a synthetic vision projector (qwen3vl_merger, as llama.cpp writes Qwen3.5's mmproj);\n"
                   "            presets qwen3.5 (27 x 1152), qwen3.5-small (24 x 1024), tiny (2 x 32); --proj-dim is\n"
                   "            the text model's width\n"
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
        } else if (!strcmp(a, "--mmproj") && v) {
            mo.preset = argv[++i];
        } else if (!strcmp(a, "--deepstack") && v) {
            mo.deepstack = argv[++i];
        } else if (!strcmp(a, "--proj-dim") && v) {
            if (cli_parse_int("synth", a, argv[++i], 1, 65536, &mo.proj_dim)) return 2;
        } else if (!strcmp(a, "--width") && v) {
            if (cli_parse_int("synth", a, argv[++i], 4, 16384, &mo.width)) return 2;
        } else if (!strcmp(a, "--ff") && v) {
            if (cli_parse_int("synth", a, argv[++i], 1, 65536, &mo.ff)) return 2;
        } else if (!strcmp(a, "--heads") && v) {
            if (cli_parse_int("synth", a, argv[++i], 1, 1024, &mo.heads)) return 2;
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
    if (mo.preset) {
        mo.layers = layers, mo.seed = seed, mo.type = type;
        return write_mmproj(&mo, out);
    }
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
