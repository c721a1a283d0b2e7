/* cmd_quantize.c — `deltallm quantize IN.gguf OUT.gguf TYPE [-t N] [--leave-output-tensor]`: llama-quantize's
 * type mixes, blocks bit-identical to ggml's (src/quantize/quantize.h). Progress on a TTY. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "gguf/format.h"
#include "quantize/quantize.h"

static void progress(void *ctx, int done, int total, const char *tensor, uint32_t type) {
    (void)ctx;
    fprintf(stderr, "\rquantize: [%4d/%4d] %-40s %-7s", done, total, tensor, format_name(type));
    if (done == total) fputc('\n', stderr);
}

int cmd_quantize(int argc, char **argv) {
    QuantizeOpts o = {0};
    const char *pos[3];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm quantize IN.gguf OUT.gguf TYPE [-t THREADS] [--leave-output-tensor]\n"
                   "  TYPE: %s\n"
                   "  the per-tensor types follow llama-quantize (no importance matrix); the blocks equal ggml's\n",
                   quant_ftype_names());
            return 0;
        } else if (!strcmp(a, "-t") && i + 1 < argc) {
            long long t;
            if (cli_parse_int("quantize", "-t", argv[++i], 1, 1024, &t)) return 2;
            o.n_threads = (int)t;
        } else if (!strcmp(a, "--leave-output-tensor")) {
            o.leave_output = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_usage_error("quantize", "unknown or incomplete option '%s'", a);
        } else if (n_pos == 3) {
            return cli_usage_error("quantize", "usage: quantize IN.gguf OUT.gguf TYPE");
        } else {
            pos[n_pos++] = a;
        }
    }
    if (n_pos != 3) return cli_usage_error("quantize", "usage: quantize IN.gguf OUT.gguf TYPE");
    o.in = pos[0], o.out = pos[1];
    if (!(o.ftype = quant_ftype_find(pos[2])))
        return cli_usage_error("quantize", "unknown type '%s' (one of %s)", pos[2], quant_ftype_names());
    if (!strcmp(o.in, o.out)) return cli_usage_error("quantize", "IN and OUT are the same file");
    if (isatty(2)) o.progress = progress;
    Err err = {{0}};
    if (gguf_quantize(&o, &err)) {
        fprintf(stderr, "deltallm quantize: %s\n", err.msg);
        unlink(o.out);
        return 1;
    }
    fprintf(stderr, "quantize: wrote %s (%s)\n", o.out, o.ftype->name);
    return 0;
}
