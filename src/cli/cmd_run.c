/* cmd_run.c — `deltallm run`: generate text from a prompt, streaming it as it comes, then report prompt
 * and generation speed. Sits on the public API (deltallm.h) only, plus the chat formatter for --chat. */
#include "cli/cli.h"
#include "cli/cli_engine.h"
#include "cli/chat_prompt.h"
#include "deltallm.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void) {
    printf("usage: deltallm run -m MODEL.gguf (-p PROMPT | -f FILE) [options]\n"
           "  -n N               tokens to generate (default 64; -1 = until end of generation or context)\n"
           "  -c N               context size (default min(model, 4096))\n"
           "  -t N               threads (default: all)\n"
           "  --chat             wrap the prompt in the model's chat template (user turn + assistant prompt)\n"
           "  --no-think         with --chat: disable the thinking block\n"
           "  --temp T           temperature (default 0.8; 0 = greedy)\n"
           "  --top-k K --top-p P --min-p P --repeat-penalty R --repeat-last-n N --seed S\n"
           "  --ignore-eos       keep generating past end-of-generation tokens\n"
           "  --exact            F32 activations (the reference mode)\n"
           "  --special          print control tokens too\n%s", cli_engine_help);
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *file = NULL;
    long long n_gen = 64, n_ctx = 0, threads = 0, top_k = 40, last_n = 64, seed = 0x5eed;
    double temp = 0.8, top_p = 0.95, min_p = 0.05, rp = 1.0;
    bool chat = false, think = true, ignore_eos = false, exact = false, special = false, synthetic = false;
    CliEngine eo;
    cli_engine_init(&eo);
    for (int i = 1; i < argc; i++) {
        const int er = cli_engine_arg("run", argc, argv, &i, &eo);
        if (er == 2) return 2;
        if (er == 1) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV                                                                                              \
    if (!v) return cli_usage_error("run", "%s needs a value", a);                                          \
    i++
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return usage(), 0;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEEDV; model = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEEDV; prompt = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { NEEDV; file = v; }
        else if (!strcmp(a, "-n")) { NEEDV; if (cli_parse_int("run", a, v, -1, 1 << 24, &n_gen)) return 2; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) { NEEDV; if (cli_parse_int("run", a, v, 1, 1 << 24, &n_ctx)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEEDV; if (cli_parse_int("run", a, v, 1, 1024, &threads)) return 2; }
        else if (!strcmp(a, "--temp")) { NEEDV; if (cli_parse_float("run", a, v, 0, 100, &temp)) return 2; }
        else if (!strcmp(a, "--top-k")) { NEEDV; if (cli_parse_int("run", a, v, 0, 1 << 24, &top_k)) return 2; }
        else if (!strcmp(a, "--top-p")) { NEEDV; if (cli_parse_float("run", a, v, 0, 1, &top_p)) return 2; }
        else if (!strcmp(a, "--min-p")) { NEEDV; if (cli_parse_float("run", a, v, 0, 1, &min_p)) return 2; }
        else if (!strcmp(a, "--repeat-penalty")) { NEEDV; if (cli_parse_float("run", a, v, 0.01, 100, &rp)) return 2; }
        else if (!strcmp(a, "--repeat-last-n")) { NEEDV; if (cli_parse_int("run", a, v, 0, 1 << 20, &last_n)) return 2; }
        else if (!strcmp(a, "--seed")) { NEEDV; if (cli_parse_int("run", a, v, 0, INT64_MAX, &seed)) return 2; }
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--no-think")) think = false;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = true;
        else if (!strcmp(a, "--exact")) exact = true;
        else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "--synthetic-note")) synthetic = true;
        else return cli_usage_error("run", "unknown option '%s' (see --help)", a);
#undef NEEDV
    }
    if (!model) return cli_usage_error("run", "needs -m MODEL.gguf");
    if (!prompt == !file) return cli_usage_error("run", "needs exactly one of -p PROMPT or -f FILE");
    char *text = NULL;
    size_t text_len = 0;
    if (file) {
        text = cli_read_file(file, &text_len);
        if (!text) {
            fprintf(stderr, "deltallm run: cannot read '%s': %s\n", file, strerror(errno));
            return 1;
        }
    } else {
        text = strdup(prompt);
        text_len = strlen(text);
    }

    int rc = 1;
    DlError err = {{0}};
    DlEngine *e = NULL;
    DlSession *s = NULL;
    DlSampler *smp = NULL;
    DlDetok *dt = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    DlEngineParams ep;
    dl_engine_params_init(&ep);
    ep.model_path = model;
    ep.n_ctx = (int)n_ctx;
    ep.n_threads = (int)threads;
    ep.exact = exact;
    cli_engine_apply(&eo, &ep);
    double t0 = now_s();
    e = dl_engine_open(&ep, &err);
    if (!e) goto done;
    const DlModelInfo *info = dl_engine_info(e);
    double t_load = now_s() - t0;
    if (synthetic)
        fprintf(stderr, "synthetic weights: text is meaningless (this shows the engine working; "
                        "run a real model with `make run MODEL=path.gguf PROMPT=...`)\n");
    fprintf(stderr, "model: %s (%s), %d layers, vocab %d, context %d; loaded in %.2f s\n",
            info->name[0] ? info->name : model, info->arch, info->n_layer, info->n_vocab, info->n_ctx, t_load);
    if (chat) {
        char *rendered = NULL;
        if (chat_prompt_render(dl_chat_template(e), text, think, &rendered, err.msg, sizeof err.msg)) goto done;
        free(text);
        text = rendered;
        text_len = strlen(text);
    }
    if (dl_tokenize(e, text, text_len, chat, &ids, &n_ids, &err)) goto done;
    if (n_ids == 0) {
        snprintf(err.msg, sizeof err.msg, "the prompt is empty");
        goto done;
    }
    s = dl_session_new(e, &err);
    if (!s) goto done;
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    sp.temperature = (float)temp;
    sp.top_k = (int)top_k;
    sp.top_p = (float)top_p;
    sp.min_p = (float)min_p;
    sp.repeat_penalty = (float)rp;
    sp.penalty_last_n = (int)last_n;
    sp.seed = (uint64_t)seed;
    smp = dl_sampler_new(e, &sp, &err);
    dt = dl_detok_new(e, special, &err);
    if (!smp || !dt) goto done;
    for (size_t i = 0; i < n_ids; i++) dl_sampler_accept(smp, ids[i]);

    if (!chat) fwrite(text, 1, text_len, stdout);
    fflush(stdout);
    double t1 = now_s();
    if (dl_session_eval(s, ids, n_ids, &err)) goto done;
    double t_prompt = now_s() - t1;
    long long n_done = 0;
    double t2 = now_s();
    const char *stop = NULL;
    while (n_gen < 0 || n_done < n_gen) {
        if (dl_session_n_past(s) >= dl_session_n_ctx(s)) {
            stop = "context full";
            break;
        }
        int32_t tok = dl_sampler_sample(smp, dl_session_logits(s));
        dl_sampler_accept(smp, tok);
        n_done++;
        if (!ignore_eos && dl_token_is_eog(e, tok)) {
            stop = "end of generation";
            break;
        }
        const char *piece;
        size_t len;
        if (dl_detok_push(dt, tok, &piece, &len, &err)) goto done;
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
        if (dl_session_eval(s, &tok, 1, &err)) goto done;
    }
    double t_gen = now_s() - t2;
    const char *piece;
    size_t len;
    dl_detok_flush(dt, &piece, &len);
    fwrite(piece, 1, len, stdout);
    printf("\n");
    fprintf(stderr, "\nprompt: %zu tokens in %.3f s (%.1f t/s); generation: %lld tokens in %.3f s (%.1f t/s)%s%s\n", n_ids,
            t_prompt, (double)n_ids / (t_prompt > 0 ? t_prompt : 1e-9), n_done, t_gen,
            (double)n_done / (t_gen > 0 ? t_gen : 1e-9), stop ? "; stopped: " : "", stop ? stop : "");
    rc = 0;
done:
    if (rc) fprintf(stderr, "deltallm run: %s\n", err.msg[0] ? err.msg : "failed");
    free(ids);
    free(text);
    dl_detok_free(dt);
    dl_sampler_free(smp);
    dl_session_free(s);
    dl_engine_close(e);
    return rc;
}
