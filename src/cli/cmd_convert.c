/* cmd_convert.c — `deltallm convert HF_DIR -o OUT.gguf [--type auto|f32|f16|bf16|q8_0] [--name N] [--no-mtp]`:
 * a Hugging Face checkpoint of Qwen3.5 / Qwen3.5-MoE / Qwen3-Next to GGUF (src/convert/convert.h). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli/cli.h"
#include "convert/convert.h"

static void progress(void *ctx, int done, int total, const char *tensor) {
    (void)ctx;
    fprintf(stderr, "\rconvert: [%4d/%4d] %-48s", done, total, tensor);
    if (done == total) fputc('\n', stderr);
}

int cmd_convert(int argc, char **argv) {
    HfConvertOpts o = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm convert HF_DIR -o OUT.gguf [--type auto|f32|f16|bf16|q8_0] [--name NAME] [--no-mtp]\n"
                   "  HF_DIR: config.json, tokenizer.json, tokenizer_config.json and model*.safetensors (with or without\n"
                   "  model.safetensors.index.json) of Qwen3.5, Qwen3.5/3.6-MoE or Qwen3-Next\n"
                   "  --type  matrix type; auto (default) = bf16 for a bf16 checkpoint, else f16 (llama.cpp's rule)\n"
                   "  --name  general.name (default: the directory's name)\n"
                   "  --no-mtp  leave out the multi-token-prediction block\n");
            return 0;
        } else if ((!strcmp(a, "-o") || !strcmp(a, "--outfile")) && i + 1 < argc) {
            o.out = argv[++i];
        } else if ((!strcmp(a, "--type") || !strcmp(a, "--outtype")) && i + 1 < argc) {
            const char *t = argv[++i];
            static const char *const names[] = {"auto", "f32", "f16", "bf16", "q8_0"};
            int k = -1;
            for (int j = 0; j < 5; j++)
                if (!strcasecmp(t, names[j])) k = j;
            if (k < 0) return cli_usage_error("convert", "--type %s: one of auto, f32, f16, bf16, q8_0", t);
            o.type = (HfOutType)k;
        } else if (!strcmp(a, "--name") && i + 1 < argc) {
            o.name = argv[++i];
        } else if (!strcmp(a, "--no-mtp")) {
            o.no_mtp = true;
        } else if (a[0] == '-') {
            return cli_usage_error("convert", "unknown or incomplete option '%s'", a);
        } else if (o.dir) {
            return cli_usage_error("convert", "one HF_DIR");
        } else {
            o.dir = a;
        }
    }
    if (!o.dir || !o.out) return cli_usage_error("convert", "usage: convert HF_DIR -o OUT.gguf");
    if (isatty(2)) o.progress = progress;
    Err err = {{0}};
    if (hf_convert(&o, &err)) {
        fprintf(stderr, "deltallm convert: %s\n", err.msg);
        unlink(o.out);
        return 1;
    }
    fprintf(stderr, "convert: wrote %s\n", o.out);
    return 0;
}
