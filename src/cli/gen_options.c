/* gen_options.c — see gen_options.h: the options `run` and `chat` share. */
#include "cli/gen_options.h"

#include "cli/cli.h"
#include "cli/progress.h"
#include "base/clock.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

void gen_options_init(GenOptions *o, long long n_gen_default) {
    memset(o, 0, sizeof *o);
    o->n_gen = n_gen_default;
    DlSamplingParams sp; /* the library's defaults, which the server and the page use too */
    dl_sampling_params_init(&sp);
    o->top_k = sp.top_k;
    o->last_n = sp.penalty_last_n;
    o->seed = -1;
    o->temp = sp.temperature;
    o->top_p = sp.top_p;
    o->min_p = sp.min_p;
    o->repeat_penalty = sp.repeat_penalty;
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    o->typical = x.typical_p, o->mirostat_lr = x.mirostat_eta, o->mirostat_ent = x.mirostat_tau;
    o->dry_base = x.dry_base, o->dry_allowed_length = x.dry_allowed_length, o->dry_penalty_last_n = x.dry_penalty_last_n;
    o->xtc_threshold = x.xtc_threshold, o->top_n_sigma = x.top_n_sigma;
    o->dynatemp_range = x.dynatemp_range, o->dynatemp_exp = x.dynatemp_exponent;
    o->think = true;
    cli_engine_init(&o->engine);
}

const char gen_options_help[] =
    "  -m, --model FILE         the GGUF file (any part of a split set; default: the embedded model,\n"
    "                           assets/tinychat-f16.gguf)\n"
    "  -n, --n-predict N        tokens to generate (-1 = until end of generation or context)\n"
    "  -c, --ctx-size N         context size in tokens (default min(model, 4096))\n"
    "  -t, --threads N          compute threads (default: one per 128 MiB of weights read per token, at most\n"
    "                           the CPUs: 1 for the embedded model)\n"
    "  -sys, --system-prompt S  a system message first (chat template formats only)\n"
    "  --no-think               disable the thinking block (chat template formats only)\n"
    "  --chat-template-file F   use this chat template instead of the GGUF's\n"
    "  --chat-format NAME       force the chat format: chatml, qwen3, qwen3-coder, qwen35\n"
    "  --temp T                 temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K --top-p P --min-p P --repeat-penalty R --repeat-last-n N\n"
    "  --presence-penalty P --frequency-penalty F\n"
    "  --typical P --mirostat 0|1|2 --mirostat-lr ETA --mirostat-ent TAU\n"
    "  --dry-multiplier M --dry-base B --dry-allowed-length N --dry-penalty-last-n N\n"
    "  --dry-sequence-breaker S (repeatable) --xtc-probability P --xtc-threshold T --top-n-sigma N\n"
    "  --dynatemp-range R --dynatemp-exp E  dynamic temperature: temp ± R by the entropy^E (R 0: off)\n"
    "  --samplers a;b;..         the chain's order (llama.cpp's names; --sampling-seq: its letters)\n"
    "  --grammar G, --grammar-file F  constrain the output to a GBNF grammar (run)\n"
    "  --seed S                 sampling seed (default -1: random; -v prints it)\n"
    "  --ignore-eos             keep generating past end-of-generation tokens\n"
    "  --no-mmap                read the weights into memory instead of mapping the file\n"
    "  --mlock                  read every weight page first and lock them in memory\n"
    "  --special                print control tokens too\n"
    "  -v, --verbose            also print the seed and timings\n";

int gen_options_parse(GenOptions *o, const char *cmd, int argc, char **argv, int *i) {
    const int er = cli_engine_arg(cmd, argc, argv, i, &o->engine);
    if (er) return er == 1 ? 1 : -1;
    const char *a = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long *ip = NULL, ilo = 0, ihi = 0;
    double *fp = NULL, flo = 0, fhi = 0;
    const char **sp = NULL;
#define IS(x) (!strcmp(a, x))
    if (IS("-m") || IS("--model")) sp = &o->model;
    else if (IS("-sys") || IS("--system-prompt")) sp = &o->system_prompt;
    else if (IS("--chat-template-file")) sp = &o->chat_template_file;
    else if (IS("--chat-format")) sp = &o->chat_format;
    else if (IS("-n") || IS("--n-predict")) ip = &o->n_gen, ilo = -1, ihi = 1 << 24;
    else if (IS("-c") || IS("--ctx-size")) ip = &o->n_ctx, ilo = 1, ihi = 1 << 24;
    else if (IS("-t") || IS("--threads")) ip = &o->threads, ilo = 1, ihi = 1024;
    else if (IS("--top-k")) ip = &o->top_k, ilo = 0, ihi = 1 << 24;
    else if (IS("--repeat-last-n")) ip = &o->last_n, ilo = 0, ihi = 1 << 20;
    else if (IS("--seed")) ip = &o->seed, ilo = -1, ihi = INT64_MAX;
    else if (IS("--temp")) fp = &o->temp, flo = 0, fhi = 100;
    else if (IS("--top-p")) fp = &o->top_p, flo = 0, fhi = 1;
    else if (IS("--min-p")) fp = &o->min_p, flo = 0, fhi = 1;
    else if (IS("--repeat-penalty")) fp = &o->repeat_penalty, flo = 0.01, fhi = 100;
    else if (IS("--presence-penalty")) fp = &o->presence_penalty, flo = -2, fhi = 2;
    else if (IS("--frequency-penalty")) fp = &o->frequency_penalty, flo = -2, fhi = 2;
    else if (IS("--typical")) fp = &o->typical, flo = 0, fhi = 1;
    else if (IS("--mirostat")) ip = &o->mirostat, ilo = 0, ihi = 2;
    else if (IS("--mirostat-lr")) fp = &o->mirostat_lr, flo = 0, fhi = 1;
    else if (IS("--mirostat-ent")) fp = &o->mirostat_ent, flo = 0, fhi = 100;
    else if (IS("--dry-multiplier")) fp = &o->dry_multiplier, flo = 0, fhi = 100;
    else if (IS("--dry-base")) fp = &o->dry_base, flo = 1, fhi = 100;
    else if (IS("--dry-allowed-length")) ip = &o->dry_allowed_length, ilo = 0, ihi = 1 << 20;
    else if (IS("--dry-penalty-last-n")) ip = &o->dry_penalty_last_n, ilo = -1, ihi = 1 << 20;
    else if (IS("--xtc-probability")) fp = &o->xtc_probability, flo = 0, fhi = 1;
    else if (IS("--xtc-threshold")) fp = &o->xtc_threshold, flo = 0, fhi = 1;
    else if (IS("--top-n-sigma")) fp = &o->top_n_sigma, flo = -1, fhi = 1000;
    else if (IS("--dynatemp-range")) fp = &o->dynatemp_range, flo = 0, fhi = 100;
    else if (IS("--dynatemp-exp")) fp = &o->dynatemp_exp, flo = 0, fhi = 100;
    else if (IS("--samplers") || IS("--sampling-seq")) sp = &o->samplers;
    else if (IS("--grammar")) sp = &o->grammar;
    else if (IS("--grammar-file")) sp = &o->grammar_file;
    else if (IS("--dry-sequence-breaker")) {
        if (o->n_dry_breakers == (int)(sizeof o->dry_breakers / sizeof *o->dry_breakers))
            return cli_usage_error(cmd, "at most 16 --dry-sequence-breaker"), -1;
        sp = &o->dry_breakers[o->n_dry_breakers++];
    }
    else if (IS("--no-think")) o->think = false;
    else if (IS("--ignore-eos")) o->ignore_eos = true;
    else if (IS("--no-mmap")) o->no_mmap = true;
    else if (IS("--mlock")) o->mlock = true;
    else if (IS("--special")) o->special = true;
    else if (IS("-v") || IS("--verbose")) o->verbose = true;
    else if (IS("--synthetic-note")) o->synthetic_note = true;
    else return 0;
#undef IS
    if (!sp && !ip && !fp) return 1;
    if (!v) return cli_usage_error(cmd, "%s needs a value", a), -1;
    ++*i;
    if (sp) *sp = v;
    else if (ip && cli_parse_int(cmd, a, v, ilo, ihi, ip)) return -1;
    else if (fp && cli_parse_float(cmd, a, v, flo, fhi, fp)) return -1;
    return 1;
}

DlEngine *gen_open_engine(const GenOptions *o, DlError *err) {
    LoadProgress bar;
    load_progress_init(&bar, stderr);
    DlEngineParams ep;
    dl_engine_params_init(&ep);
    ep.model_path = o->model;
    ep.n_ctx = (int)o->n_ctx;
    ep.n_threads = (int)o->threads;
    ep.no_mmap = o->no_mmap;
    ep.progress = load_progress_cb;
    ep.progress_user = &bar;
    Err ae = {{0}};
    if (cli_engine_apply(&o->engine, &ep, &ae)) {
        snprintf(err->msg, sizeof err->msg, "%s", ae.msg);
        return NULL;
    }
    const double t0 = now_s();
    DlEngine *e = dl_engine_open(&ep, err);
    if (e && o->mlock && dl_engine_prefetch(e, true, err)) {
        dl_engine_close(e);
        e = NULL;
    }
    load_progress_end(&bar);
    if (!e) return NULL;
    cli_engine_report(e);
    const DlModelInfo *info = dl_engine_info(e);
    if (o->synthetic_note)
        fprintf(stderr, "synthetic weights: text is meaningless (this shows the engine working; "
                        "run a real model with `make run MODEL=path.gguf PROMPT=...`)\n");
    fprintf(stderr, "model: %s (%s), %d layers, vocab %d, context %d; loaded in %.2f s\n",
            info->name[0] ? info->name : o->model, info->arch, info->n_layer, info->n_vocab, info->n_ctx, now_s() - t0);
    if (info->n_ctx_train > 0 && info->n_ctx > info->n_ctx_train) /* llama.cpp warns the same way */
        fprintf(stderr, "warning: the context (-c %d) is larger than the model was trained for (%d tokens): output "
                        "beyond %d tokens may degrade\n",
                info->n_ctx, info->n_ctx_train, info->n_ctx_train);
    DlCacheStats cs;
    if (dl_engine_cache_stats(e, &cs, false) == 0)
        fprintf(stderr, "expert cache: the weights exceed the memory budget (%.1f GiB): %.2f GiB resident%s, experts "
                        "read from the file into %d slots (%.1f GiB, %.0f%% of them)\n",
                cs.budget / 1073741824.0, cs.resident_bytes / 1073741824.0, cs.locked ? " (locked)" : "", cs.n_slots,
                (double)cs.n_slots * cs.slot_bytes / 1073741824.0, 100.0 * cs.n_slots * cs.slot_bytes / cs.expert_bytes);
    return e;
}

DlSampler *gen_new_sampler(const GenOptions *o, const DlEngine *e, DlError *err) {
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    sp.temperature = (float)o->temp;
    sp.top_k = (int)o->top_k;
    sp.top_p = (float)o->top_p;
    sp.min_p = (float)o->min_p;
    sp.repeat_penalty = (float)o->repeat_penalty;
    sp.penalty_last_n = (int)o->last_n;
    sp.presence_penalty = (float)o->presence_penalty;
    sp.frequency_penalty = (float)o->frequency_penalty;
    DlSamplerExtra x;
    dl_sampler_extra_init(&x);
    x.typical_p = o->typical > 0 ? (float)o->typical : 1.0f;
    x.mirostat = (int)o->mirostat, x.mirostat_eta = (float)o->mirostat_lr, x.mirostat_tau = (float)o->mirostat_ent;
    x.dry_multiplier = (float)o->dry_multiplier, x.dry_base = (float)o->dry_base;
    x.dry_allowed_length = (int)o->dry_allowed_length, x.dry_penalty_last_n = (int)o->dry_penalty_last_n;
    if (o->n_dry_breakers) x.dry_breakers = o->dry_breakers, x.n_dry_breakers = o->n_dry_breakers;
    x.xtc_probability = (float)o->xtc_probability, x.xtc_threshold = (float)o->xtc_threshold;
    x.top_n_sigma = (float)o->top_n_sigma;
    x.dynatemp_range = (float)o->dynatemp_range, x.dynatemp_exponent = (float)o->dynatemp_exp;
    x.samplers = o->samplers;
    sp.seed = o->seed < 0 ? cli_random_seed() % 4294967296u : (uint64_t)o->seed; /* 32 bits: easy to type back */
    if (o->verbose) fprintf(stderr, "seed: %llu\n", (unsigned long long)sp.seed);
    return dl_sampler_new_extra(e, &sp, &x, err);
}
