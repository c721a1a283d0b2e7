/* cmd_eval.c — `deltallm eval`: all-position logits for a token file, the way llref writes them, so any
 * case compares from outside (shared/tools/compare.py) or in the parity tests.
 *
 *   deltallm eval -m MODEL.gguf --tokens-file F [--mode prefill|decode|chunk K] [--exact]
 *                 [--logits-out OUT.f32] [--greedy N] [-t THREADS] [--dump DIR] [--dump-layers 2,3]
 *
 * prefill: the whole sequence in one forward call; decode: one token per call; chunk K: K per call.
 * --greedy N continues the sequence with N argmax tokens (one per call) and prints their ids.
 * With --mpi (under mpirun) the same passes run through the engine over the ranks (the public API: each
 * step a tentative batch, whose logits are every position's, kept whole); the logits are the same bits. */
#include "cli/cli.h"
#include "cli/cli_engine.h"
#include "cli/tokens_file.h"
#include "deltallm.h"
#include "model/dump.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* eval --mpi: the steps through an engine over the MPI job. */
static int eval_engine(const CliEngine *eo, const char *path, const int32_t *tokens, int n_tokens, int step, int greedy,
                       int threads, FILE *out, Err *err) {
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.model_path = path;
    p.n_ctx = n_tokens + greedy;
    p.n_batch = step;
    p.n_threads = threads;
    if (cli_engine_apply(eo, &p, err)) return -1;
    DlError de = {{0}};
    DlEngine *e = dl_engine_open(&p, &de);
    DlSession *s = e ? dl_session_new(e, &de) : NULL;
    int rc = s && dl_session_set_rollback(s, step, &de) == 0 ? 0 : -1;
    const int V = e ? dl_engine_info(e)->n_vocab : 0;
    int last = 0;
    for (int at = 0; rc == 0 && at < n_tokens; at += step) {
        const int T = n_tokens - at < step ? n_tokens - at : step;
        rc = dl_session_eval_tentative(s, tokens + at, (size_t)T, &de);
        const float *lg = rc ? NULL : dl_session_tentative_logits(s);
        if (lg && out && fwrite(lg, sizeof(float), (size_t)T * V, out) != (size_t)T * V) rc = err_set(err, "write failed");
        if (lg) last = argmax(lg + (size_t)(T - 1) * V, V);
        if (rc == 0) rc = dl_session_keep(s, (size_t)T, &de);
    }
    if (rc == 0 && greedy) {
        printf("greedy:");
        for (int g = 0; rc == 0 && g < greedy; g++) {
            printf(" %d", last);
            int32_t tok = last;
            rc = dl_session_eval(s, &tok, 1, &de);
            if (rc == 0) last = argmax(dl_session_logits(s), V);
        }
        printf("\n");
    }
    if (rc && !err->msg[0]) err_set(err, "%s", de.msg);
    dl_session_free(s);
    dl_engine_close(e);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    const char *model_path = NULL, *tokens_path = NULL, *out_path = NULL, *dump_dir = NULL;
    long long chunk = 0, greedy = 0, threads = 0;
    uint64_t dump_layers = ~0ull;
    CliEngine eo;
    cli_engine_init(&eo);
    for (int i = 1; i < argc; i++) {
        const int er = cli_engine_arg("eval", argc, argv, &i, &eo);
        if (er == 2) return 2;
        if (er == 1) continue;
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: deltallm eval -m MODEL.gguf --tokens-file F [--mode prefill|decode|chunk K] [--exact]\n"
                   "                     [--logits-out OUT.f32] [--greedy N] [-t THREADS] [--dump DIR [--dump-layers L,..]]\n"
                   "%s", cli_engine_help);
            return 0;
        } else if ((strcmp(a, "-m") == 0 || strcmp(a, "--model") == 0) && next) {
            model_path = argv[++i];
        } else if (strcmp(a, "--tokens-file") == 0 && next) {
            tokens_path = argv[++i];
        } else if (strcmp(a, "--logits-out") == 0 && next) {
            out_path = argv[++i];
        } else if (strcmp(a, "--mode") == 0 && next) {
            const char *mode = argv[++i];
            if (strcmp(mode, "prefill") == 0) chunk = 0;
            else if (strcmp(mode, "decode") == 0) chunk = 1;
            else if (strcmp(mode, "chunk") == 0) {
                if (cli_parse_int("eval", "--mode chunk", i + 1 < argc ? argv[++i] : NULL, 1, 1 << 20, &chunk)) return 2;
            } else return cli_usage_error("eval", "--mode must be prefill, decode or chunk K, not '%s'", mode);
        } else if (strcmp(a, "--greedy") == 0 && next) {
            if (cli_parse_int("eval", a, argv[++i], 0, 1 << 20, &greedy)) return 2;
        } else if ((strcmp(a, "-t") == 0 || strcmp(a, "--threads") == 0) && next) {
            if (cli_parse_int("eval", a, argv[++i], 1, 1024, &threads)) return 2;
        } else if (strcmp(a, "--dump") == 0 && next) {
            dump_dir = argv[++i];
        } else if (strcmp(a, "--dump-layers") == 0 && next) {
            dump_layers = 0;
            for (char *s = argv[++i]; *s;) {
                char *end;
                long l = strtol(s, &end, 10);
                if (end == s || l < 0 || l > 63) return cli_usage_error("eval", "--dump-layers takes layer numbers 0..63");
                dump_layers |= 1ull << l;
                s = *end == ',' ? end + 1 : end;
                if (*end && *end != ',') return cli_usage_error("eval", "--dump-layers takes a comma-separated list");
            }
        } else {
            return cli_usage_error("eval", "unknown or incomplete option '%s'", a);
        }
    }
    if (!model_path || !tokens_path) return cli_usage_error("eval", "needs -m MODEL and --tokens-file F");

    Err err = {{0}};
    int32_t *tokens = NULL;
    int n_tokens = 0;
    if (tokens_file_read(tokens_path, &tokens, &n_tokens, &err)) {
        fprintf(stderr, "deltallm eval: %s\n", err.msg);
        return 1;
    }
    int rc = 1;
    if (eo.mpi) {
        const int step = chunk ? (int)chunk : n_tokens;
        FILE *o = out_path ? fopen(out_path, "wb") : NULL;
        if (dump_dir) err_set(&err, "--dump does not run over MPI");
        else if (step > 4096) err_set(&err, "--mpi evaluates at most 4096 tokens per step (--mode chunk K)");
        else if (out_path && !o) err_set(&err, "cannot write '%s'", out_path);
        else if (eval_engine(&eo, model_path, tokens, n_tokens, step, (int)greedy, (int)threads, o, &err) == 0) rc = 0;
        if (o && fclose(o) != 0 && rc == 0) rc = 1, err_set(&err, "write to '%s' failed", out_path);
        if (rc) fprintf(stderr, "deltallm eval: %s\n", err.msg);
        free(tokens);
        return rc;
    }
    Model *m = NULL;
    SeqState *st = NULL;
    Forward *fw = NULL;
    Dump *dump = NULL;
    float *logits = NULL;
    FILE *out = NULL;
    m = model_load(model_path, &err);
    if (!m) goto done;
    const int V = m->cfg.n_vocab;
    const int step = chunk ? (int)chunk : n_tokens;
    ForwardOptions fo = {.max_batch = step, .max_ctx = n_tokens + (int)greedy};
    if (cli_engine_forward(&eo, (int)threads, &fo, &err)) goto done;
    fw = forward_new(m, &fo, &err);
    if (!fw) goto done;
    st = seqstate_new(m, forward_backend(fw), n_tokens + (int)greedy, 0, 0, &err);
    if (!st) goto done;
    if (dump_dir) {
        dump = dump_new(dump_dir, dump_layers, &err);
        if (!dump) goto done;
        forward_set_dump(fw, dump);
    }
    logits = malloc(sizeof(float) * (size_t)step * (size_t)V);
    if (!logits) {
        err_set(&err, "out of memory for logits");
        goto done;
    }
    if (out_path && !(out = fopen(out_path, "wb"))) {
        err_set(&err, "cannot write '%s'", out_path);
        goto done;
    }
    int last = 0;
    for (int p = 0; p < n_tokens; p += step) {
        const int T = n_tokens - p < step ? n_tokens - p : step;
        if (forward_run(fw, st, tokens + p, T, logits, T, &err)) goto done;
        if (out && fwrite(logits, sizeof(float), (size_t)T * V, out) != (size_t)T * V) {
            err_set(&err, "write to '%s' failed", out_path);
            goto done;
        }
        last = argmax(logits + (size_t)(T - 1) * V, V);
    }
    if (greedy) {
        printf("greedy:");
        for (long long g = 0; g < greedy; g++) {
            printf(" %d", last);
            int32_t tok = last;
            if (forward_run(fw, st, &tok, 1, logits, 1, &err)) goto done;
            last = argmax(logits, V);
        }
        printf("\n");
    }
    if (dump && dump_close(dump, &err)) {
        dump = NULL;
        goto done;
    }
    dump = NULL;
    rc = 0;
done:
    if (out && fclose(out) != 0 && rc == 0) rc = 1, err_set(&err, "write to '%s' failed", out_path);
    if (rc) fprintf(stderr, "deltallm eval: %s\n", err.msg);
    dump_free(dump);
    free(logits);
    seqstate_free(st);
    forward_free(fw);
    model_free(m);
    free(tokens);
    return rc;
}
