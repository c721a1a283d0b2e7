/* cmd_perplexity.c — `deltallm perplexity -m MODEL -f TEXT [-c N] [--chunks K] [--exact] [-t T] [--kl-base BASE.gguf]`
 *
 * llama-perplexity's method (tools/perplexity/perplexity.cpp): the text is tokenized whole (BOS only if the
 * model asks for one, replacing the first token of each window, as llama.cpp does), cut into windows of
 * N tokens (N = -c, default 512), each window evaluated from an empty state, and the second half of each
 * window scored: the positions N/2 … N−2 predict the next token. Progress "[i]running-PPL," per window,
 * then "Final estimate: PPL = x +/- e" with e = PPL · sqrt(var(nll)/(count − 1)).
 *
 * --kl-base BASE.gguf: evaluates a base model (e.g. the F16 original) on the same windows and reports what
 * llama-perplexity's --kl-divergence does: PPL of both, their ratio, the mean KL divergence KL(base ‖ model)
 * with its error, its max / 99th percentile / median, and how often both models' top token agree.
 * (llama-perplexity saves the base logits to a file in a first run; here the base model runs alongside.)
 *
 * A developer command: it runs the forward pass directly (model/model.h) for all-position logits, like eval. */
#include "cli/cli.h"
#include "cli/cli_engine.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "base/clock.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Runner {
    Model *m;
    SeqState *st;
    Forward *fw;
    float *logits;
} Runner;

static void runner_free(Runner *r) {
    if (r->st) seqstate_free(r->st); /* allocated by the forward pass's backend: before it */
    if (r->fw) forward_free(r->fw);
    if (r->m) model_free(r->m);
    free(r->logits);
}

static int runner_open(Runner *r, const char *path, int n_ctx, const CliEngine *eo, int threads, Err *err) {
    memset(r, 0, sizeof *r);
    if (!(r->m = model_load(path, err))) return -1;
    ForwardOptions fo = {.max_batch = n_ctx, .max_ctx = n_ctx};
    if (cli_engine_forward(eo, threads, &fo, err)) return -1;
    if (!(r->fw = forward_new(r->m, &fo, err))) return -1;
    if (!(r->st = seqstate_new(r->m, forward_backend(r->fw), n_ctx, 0, 0, err))) return -1;
    if (!(r->logits = malloc(sizeof(float) * (size_t)n_ctx * (size_t)r->m->cfg.n_vocab))) return err_set(err, "out of memory for logits");
    return 0;
}

/* log-softmax of row x at index k, and (optionally) the full distribution's log-probs into lp */
static double log_prob(const float *x, int n, int k, double *lp) {
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    const double lse = mx + log(s);
    if (lp)
        for (int i = 0; i < n; i++) lp[i] = (double)x[i] - lse;
    return (double)x[k] - lse;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int cmd_perplexity(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *base_path = NULL;
    long long n_ctx = 512, max_chunks = -1, threads = 0;
    CliEngine eo;
    cli_engine_init(&eo);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const int er = cli_engine_arg("perplexity", argc, argv, &i, &eo);
        if (er == 2) return 2;
        if (er == 1) continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm perplexity -m MODEL.gguf -f TEXT [-c N] [--chunks K] [--exact] [-t THREADS]\n"
                   "                           [--kl-base BASE.gguf]\n"
                   "  windows of N tokens (default 512), the second half of each scored, as llama-perplexity does\n"
                   "  --kl-base  also evaluate BASE on the same windows: KL divergence, top-token agreement, PPL ratio\n"
                   "%s", cli_engine_help);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) {
            model_path = argv[++i];
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && v) {
            text_path = argv[++i];
        } else if (!strcmp(a, "--kl-base") && v) {
            base_path = argv[++i];
        } else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && v) {
            if (cli_parse_int("perplexity", a, argv[++i], 8, 1 << 20, &n_ctx)) return 2;
        } else if (!strcmp(a, "--chunks") && v) {
            if (cli_parse_int("perplexity", a, argv[++i], 1, 1 << 30, &max_chunks)) return 2;
        } else if (!strcmp(a, "-t") && v) {
            if (cli_parse_int("perplexity", a, argv[++i], 1, 1024, &threads)) return 2;
        } else {
            return cli_usage_error("perplexity", "unknown or incomplete option '%s'", a);
        }
    }
    if (!model_path || !text_path) return cli_usage_error("perplexity", "needs -m MODEL.gguf and -f TEXT");

    Err err = {{0}};
    int rc = 1;
    Runner r = {0}, b = {0};
    Tokenizer *tok = NULL;
    TokenIds ids = {0};
    double *lp_m = NULL, *lp_b = NULL, *klds = NULL;
    long long count_windows = 0; /* progress printed: a failure message starts on a new line */
    size_t len = 0;
    char *text = cli_read_file(text_path, &len);
    if (!text) {
        fprintf(stderr, "deltallm perplexity: cannot read %s: %s\n", text_path, strerror(errno));
        return 1;
    }
    if (runner_open(&r, model_path, (int)n_ctx, &eo, (int)threads, &err)) goto done;
    if (!(tok = tokenizer_load(r.m->gguf, &err))) goto done;
    if (tokenizer_encode(tok, text, len, 0, &ids, &err)) goto done;
    const int V = r.m->cfg.n_vocab;
    const TokenizerSpecials *sp = tokenizer_specials(tok);
    const bool add_bos = sp->add_bos && sp->bos >= 0;
    if ((long long)ids.n < 2 * n_ctx) {
        err_set(&err, "%s tokenizes to %zu tokens: at least %lld (2 windows of %lld) are needed", text_path, ids.n,
                2 * n_ctx, n_ctx);
        goto done;
    }
    if (base_path) {
        if (runner_open(&b, base_path, (int)n_ctx, &eo, (int)threads, &err)) goto done;
        if (b.m->cfg.n_vocab != V) {
            err_set(&err, "--kl-base: %s has %d tokens in its vocabulary, the model %d", base_path, b.m->cfg.n_vocab, V);
            goto done;
        }
    }
    long long n_chunk = (long long)ids.n / n_ctx;
    if (max_chunks > 0 && max_chunks < n_chunk) n_chunk = max_chunks;
    const int first = (int)n_ctx / 2, per = (int)n_ctx - first - 1;
    lp_m = malloc(sizeof(double) * (size_t)V);
    lp_b = malloc(sizeof(double) * (size_t)V);
    klds = base_path ? malloc(sizeof(double) * (size_t)(n_chunk * per)) : NULL;
    if (!lp_m || !lp_b || (base_path && !klds)) {
        err_set(&err, "out of memory");
        goto done;
    }
    fprintf(stderr, "perplexity: %zu tokens, %lld windows of %lld, scoring %d positions each%s\n", ids.n, n_chunk, n_ctx, per,
            eo.exact ? " (exact mode)" : "");
    double nll = 0, nll2 = 0, nll_b = 0, nll_b2 = 0, kl_sum = 0, kl_sum2 = 0;
    long long count = 0, same_top = 0;
    const double t0 = now_s();
    int32_t *window = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!window) {
        err_set(&err, "out of memory");
        goto done;
    }
    for (long long c = 0; c < n_chunk; c++) {
        memcpy(window, ids.ids + c * n_ctx, sizeof(int32_t) * (size_t)n_ctx);
        if (add_bos) window[0] = sp->bos;
        seqstate_reset(r.st);
        if (forward_run(r.fw, r.st, window, (int)n_ctx, r.logits, (int)n_ctx, &err)) break;
        if (base_path) {
            seqstate_reset(b.st);
            if (forward_run(b.fw, b.st, window, (int)n_ctx, b.logits, (int)n_ctx, &err)) break;
        }
        const int32_t *toks = ids.ids + c * n_ctx;
        for (int j = first; j < n_ctx - 1; j++) {
            const float *lm = r.logits + (size_t)j * V;
            const double l = log_prob(lm, V, toks[j + 1], base_path ? lp_m : NULL);
            nll -= l, nll2 += l * l;
            if (base_path) {
                const float *lb = b.logits + (size_t)j * V;
                const double lb_t = log_prob(lb, V, toks[j + 1], lp_b);
                nll_b -= lb_t, nll_b2 += lb_t * lb_t;
                double kl = 0;
                for (int k = 0; k < V; k++) kl += exp(lp_b[k]) * (lp_b[k] - lp_m[k]);
                klds[count] = kl;
                kl_sum += kl, kl_sum2 += kl * kl;
                same_top += argmax(lm, V) == argmax(lb, V);
            }
            count++;
        }
        if (c == 0) {
            double s = now_s() - t0;
            fprintf(stderr, "perplexity: %.2f seconds per window - ETA %.2f minutes\n", s, s * (double)n_chunk / 60);
        }
        printf("[%lld]%.4f,", c + 1, exp(nll / (double)count));
        count_windows++;
        fflush(stdout);
    }
    free(window);
    if (err.msg[0]) goto done;
    printf("\n");
    const double mean = nll / (double)count, var = nll2 / (double)count - mean * mean, ppl = exp(mean);
    printf("Final estimate: PPL = %.4f +/- %.5f\n", ppl, var > 0 ? sqrt(var / (double)(count - 1)) * ppl : 0.0);
    if (base_path) {
        const double mb = nll_b / (double)count, ppl_b = exp(mb);
        const double klm = kl_sum / (double)count, klv = kl_sum2 / (double)count - klm * klm;
        const double p_same = (double)same_top / (double)count;
        qsort(klds, (size_t)count, sizeof *klds, cmp_double);
        printf("====== KL divergence vs %s ======\n", base_path);
        printf("Mean PPL(Q)                 : %10.6f\n", ppl);
        printf("Mean PPL(base)              : %10.6f\n", ppl_b);
        printf("Mean PPL(Q)/PPL(base)       : %10.6f\n", exp(mean - mb));
        printf("Mean ln(PPL(Q)/PPL(base))   : %10.6f\n", mean - mb);
        printf("Mean    KLD: %10.6f +/- %10.6f\n", klm, klv > 0 ? sqrt(klv / (double)(count - 1)) : 0.0);
        printf("Maximum KLD: %10.6f\n", klds[count - 1]);
        printf("99.0%%   KLD: %10.6f\n", klds[(size_t)(0.99 * (double)(count - 1))]);
        printf("Median  KLD: %10.6f\n", klds[(count - 1) / 2]);
        printf("Same top p : %6.3f +/- %5.3f %%\n", 100 * p_same, 100 * sqrt(p_same * (1 - p_same) / (double)(count - 1)));
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "%sdeltallm perplexity: %s\n", count_windows ? "\n" : "", err.msg);
    free(text);
    free(lp_m), free(lp_b), free(klds);
    token_ids_free(&ids);
    tokenizer_free(tok);
    runner_free(&r);
    runner_free(&b);
    return rc;
}
