/* cmd_inspect.c — `deltallm inspect FILE`: what a GGUF file holds and what running it takes.
 *
 * Sections: the file (version, alignment, parts), metadata (arrays summarized), the architecture's
 * hyperparameters read through model/config.c (with the delta-net geometry spelled out), the tensor
 * table, totals per weight format, and the memory a session needs. */
#include "cli/cli.h"
#include "gguf/format.h"
#include "gguf/gguf.h"
#include "backend/backend.h"
#include "model/config.h"
#include "model/model.h"
#include "vision/mmproj.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static void print_str(FILE *f, GgufStr s, size_t max) {
    fputc('"', f);
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch == '\n') fputs("\\n", f);
        else if (ch < 0x20 || ch == 0x7f) fprintf(f, "\\x%02x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
    if (s.len > max) fprintf(f, "...(%" PRIu64 " bytes)", s.len);
}

static void print_scalar(FILE *f, const GgufValue *v) {
    switch (v->type) {
    case GGUF_TYPE_F32: case GGUF_TYPE_F64: fprintf(f, "%.9g", v->f); break;
    case GGUF_TYPE_BOOL: fputs(v->u ? "true" : "false", f); break;
    case GGUF_TYPE_I8: case GGUF_TYPE_I16: case GGUF_TYPE_I32: case GGUF_TYPE_I64: fprintf(f, "%" PRId64, v->i); break;
    case GGUF_TYPE_STRING: print_str(f, v->s, 120); break;
    default: fprintf(f, "%" PRIu64, v->u); break;
    }
}

static void print_array(FILE *f, const GgufArray *a) {
    fprintf(f, "arr[%s,%" PRIu64 "] [", gguf_value_type_name(a->type), a->n);
    uint64_t show = a->n < 6 ? a->n : 5;
    for (uint64_t i = 0; i < show; i++) {
        if (i) fputs(", ", f);
        if (a->type == GGUF_TYPE_STRING) print_str(f, a->strs[i], 40);
        else if (a->type == GGUF_TYPE_ARRAY) fprintf(f, "arr[%s,%" PRIu64 "]", gguf_value_type_name(a->items[i].arr.type), a->items[i].arr.n);
        else if (a->type == GGUF_TYPE_F32 || a->type == GGUF_TYPE_F64) fprintf(f, "%.6g", gguf_arr_f64(a, i));
        else fprintf(f, "%" PRId64, gguf_arr_i64(a, i));
    }
    if (show < a->n) fputs(", ...", f);
    fputc(']', f);
}

static void print_bytes(FILE *f, double b) {
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    fprintf(f, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static void print_config(FILE *f, const ModelConfig *c, uint64_t weight_bytes) {
    fprintf(f, "\n== hyperparameters (%s) ==\n", c->arch_name);
    fprintf(f, "  name                 %s\n", c->name[0] ? c->name : "(none)");
    fprintf(f, "  n_vocab              %d\n", c->n_vocab);
    fprintf(f, "  n_embd               %d\n", c->n_embd);
    fprintf(f, "  layers               %d (block_count %d, MTP blocks %d skipped)\n", c->n_layer, c->n_layer_all, c->n_nextn);
    fprintf(f, "  layer kinds          %d delta-net, %d full attention (", c->n_recurrent, c->n_attention);
    if (c->full_attention_interval) {
        const int k = c->full_attention_interval, t = k % 100;
        const char *suf = t >= 11 && t <= 13 ? "th" : k % 10 == 1 ? "st" : k % 10 == 2 ? "nd" : k % 10 == 3 ? "rd" : "th";
        fprintf(f, "every %d%s layer is attention)\n", k, suf);
    }
    else fprintf(f, "from attention.recurrent_layers)\n");
    fprintf(f, "  context_length       %d\n", c->n_ctx_train);
    fprintf(f, "  rms_eps              %g\n", c->rms_eps);
    fprintf(f, "  attention            %d query heads, %d kv heads, head dim %d, rope dims %d, base %g, %s",
            c->n_head, c->n_head_kv, c->head_dim, c->n_rot, c->rope_base, c->rope_imrope ? "imrope" : "neox");
    if (c->rope_imrope)
        fprintf(f, " sections [%d,%d,%d,%d]", c->rope_sections[0], c->rope_sections[1], c->rope_sections[2], c->rope_sections[3]);
    fputc('\n', f);
    fprintf(f, "  delta-net            d_conv %d, d_inner %d, d_state %d, %d value heads (dt_rank), %d key groups,\n",
            c->ssm_d_conv, c->ssm_d_inner, c->ssm_d_state, c->ssm_n_v_head, c->ssm_n_k_head);
    fprintf(f, "                       conv channels %d, Q %d, K %d, V %d, value head dim %d, key->value head %s\n",
            c->ssm_conv_dim, c->ssm_key_dim, c->ssm_key_dim, c->ssm_d_inner, c->ssm_head_v_dim,
            c->arch == ARCH_QWEN3NEXT ? "j / r (grouped)" : "j % Hk (tiled)");
    if (c->moe)
        fprintf(f, "  ffn                  MoE: %d experts, %d used, expert ff %d, shared expert ff %d\n", c->n_expert,
                c->n_expert_used, c->n_ff_exp, c->n_ff_shexp);
    else
        fprintf(f, "  ffn                  dense SwiGLU, ff %d\n", c->n_ff);

    /* memory: weights are mapped; per sequence, the recurrent state is fixed and the KV cache grows */
    double conv = (double)(c->ssm_d_conv - 1) * c->ssm_conv_dim * 4;
    double state = (double)c->ssm_d_state * c->ssm_d_inner * 4;
    double rec = (conv + state) * c->n_recurrent;
    double kv_tok = 2.0 * c->n_head_kv * c->head_dim * 4 * c->n_attention; /* F32 K and V */
    fprintf(f, "\n== memory ==\n  weights (mapped)     ");
    print_bytes(f, (double)weight_bytes);
    fprintf(f, "\n  recurrent state      ");
    print_bytes(f, rec);
    fprintf(f, " per sequence (conv ");
    print_bytes(f, conv * c->n_recurrent);
    fprintf(f, " + delta ");
    print_bytes(f, state * c->n_recurrent);
    fprintf(f, ")\n  KV cache (F32)       ");
    print_bytes(f, kv_tok);
    fprintf(f, " per token; ");
    print_bytes(f, kv_tok * 4096);
    fprintf(f, " at 4096 tokens\n  total, 1 sequence   ");
    print_bytes(f, (double)weight_bytes + rec + kv_tok * 4096);
    fprintf(f, " at 4096 tokens of context\n");

    /* a session's whole state by the engine's own accounting (model/state.c seqstate_bytes: what a session
     * allocates, the fused delta-net layout included) for each K/V cache type of the fast arithmetic */
    Model m;
    memset(&m, 0, sizeof m);
    m.cfg = *c;
    fprintf(f, "\n  one session's state (seqstate_bytes), by KV cache type (-ctk/-ctv):\n"
               "  %-10s %12s %12s %14s %14s   %s\n", "K/V", "per token", "at 32768", "at 131072", "at 262144",
            "most tokens with the weights in 24 GiB");
    static const int types[4] = {KV_F32, KV_F16, KV_Q8_0, KV_Q4_0};
    for (int i = 0; i < 4; i++) {
        uint32_t fmt;
        Err e = {{0}};
        if (kv_type_format(types[i], MATMUL_FAST, &fmt, &e) || seqstate_check_kv(&m, fmt, fmt, &e)) continue;
        const double s0 = (double)seqstate_bytes(&m, 1, fmt, fmt), s1 = (double)seqstate_bytes(&m, 2, fmt, fmt);
        const double tok = s1 - s0, fixed = s0 - tok, room = 24.0 * (1u << 30) - (double)weight_bytes - fixed;
        fprintf(f, "  %-10s %9.0f B  ", kv_format_name(fmt), tok);
        const int ctx[3] = {32768, 131072, 262144};
        for (int k = 0; k < 3; k++) fprintf(f, " %10.2f GiB", (double)seqstate_bytes(&m, ctx[k], fmt, fmt) / (1u << 30));
        if (tok > 0 && room > 0 && room / tok > (double)(1 << 24)) fprintf(f, "   over %d (the engine's context limit)\n", 1 << 24);
        else if (tok > 0 && room > 0) fprintf(f, "   %.0f\n", floor(room / tok));
        else fprintf(f, "   -\n");
    }
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    int show_tensors = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: deltallm inspect [--no-tensors] FILE.gguf\n");
            return 0;
        } else if (strcmp(argv[i], "--no-tensors") == 0) {
            show_tensors = 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cli_usage_error("inspect", "unknown option '%s'", argv[i]);
        } else if (path) {
            return cli_usage_error("inspect", "one file at a time");
        } else {
            path = argv[i];
        }
    }
    if (!path) return cli_usage_error("inspect", "missing FILE (usage: deltallm inspect [--no-tensors] FILE.gguf)");
    Err err = {{0}};
    Gguf *g = gguf_open(path, &err);
    if (!g) {
        fprintf(stderr, "deltallm inspect: %s\n", err.msg);
        return 1;
    }
    FILE *f = stdout;
    fprintf(f, "== file ==\n  path                 %s\n  GGUF version         %u\n  alignment            %u\n",
            path, gguf_version(g), gguf_alignment(g));
    fprintf(f, "  parts                %d\n  size                 ", gguf_n_splits(g));
    print_bytes(f, (double)gguf_file_size(g));
    fprintf(f, " (%" PRIu64 " bytes)\n  metadata entries     %" PRId64 "\n  tensors              %" PRId64 "\n",
            gguf_file_size(g), gguf_n_kv(g), gguf_n_tensors(g));

    fprintf(f, "\n== metadata ==\n");
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const GgufKV *kv = gguf_kv(g, i);
        char key[121];
        gguf_str_copy(kv->key, key, sizeof key);
        for (char *p = key; *p; p++) /* keys come from the file: keep control bytes off the terminal */
            if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
        fprintf(f, "  %-44s ", key);
        if (kv->val.type == GGUF_TYPE_ARRAY) print_array(f, &kv->val.arr);
        else {
            fprintf(f, "%s = ", gguf_value_type_name(kv->val.type));
            print_scalar(f, &kv->val);
        }
        fputc('\n', f);
    }

    uint64_t per_type_bytes[FMT_COUNT] = {0}, per_type_n[FMT_COUNT] = {0}, total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        per_type_bytes[t->type] += t->nbytes;
        per_type_n[t->type]++;
        total += t->nbytes;
    }

    ModelConfig cfg;
    int rc = 0;
    if (gguf_get(g, "general.architecture") == NULL) {
        fprintf(f, "\n(no general.architecture: not a model file)\n");
    } else if (mmproj_is_clip(g)) { /* a multimodal projector (vision/mmproj.c) */
        Mmproj *m = mmproj_open(path, &err);
        if (m) mmproj_print(f, m);
        else fprintf(f, "\n== vision projector ==\n  %s\n", err.msg), rc = 1;
        mmproj_close(m);
    } else if (model_config_read(&cfg, g, &err) == 0) {
        print_config(f, &cfg, total);
    } else {
        fprintf(f, "\n== hyperparameters ==\n  %s\n", err.msg);
        if (gguf_n_tensors(g) > 0) rc = 1; /* a model file deltallm cannot run */
    }

    if (show_tensors && gguf_n_tensors(g) > 0) {
        fprintf(f, "\n== tensors ==\n  %-40s %-8s %-26s %14s %14s%s\n", "name", "type", "shape", "offset", "bytes",
                gguf_n_splits(g) > 1 ? "  part" : "");
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const GgufTensor *t = gguf_tensor(g, i);
            char shape[128]; /* 4 dims whose product fits in int64: at most ~40 characters */
            int n = snprintf(shape, sizeof shape, "{");
            for (int d = 0; d < t->n_dims; d++)
                n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
            snprintf(shape + n, sizeof shape - (size_t)n, "}");
            fprintf(f, "  %-40s %-8s %-26s %14" PRIu64 " %14" PRIu64, t->name, format_name(t->type), shape, t->file_off,
                    t->nbytes);
            if (gguf_n_splits(g) > 1) fprintf(f, "  %5d", t->split + 1); /* offsets are within that part's file */
            fputc('\n', f);
        }
    }
    if (gguf_n_tensors(g) > 0) {
        fprintf(f, "\n== totals per type ==\n");
        for (int t = 0; t < FMT_COUNT; t++) {
            if (!per_type_n[t]) continue;
            fprintf(f, "  %-8s %6" PRIu64 " tensors  ", format_name((uint32_t)t), per_type_n[t]);
            print_bytes(f, (double)per_type_bytes[t]);
            fprintf(f, " (%.1f%%)\n", 100.0 * (double)per_type_bytes[t] / (double)(total ? total : 1));
        }
        fprintf(f, "  total    %6" PRId64 " tensors  ", gguf_n_tensors(g));
        print_bytes(f, (double)total);
        fputc('\n', f);
    }
    gguf_close(g);
    if (rc) fprintf(stderr, "deltallm inspect: %s\n", err.msg);
    return rc;
}
