/* cmd_bench.c — `deltallm bench`, in the style of llama-bench: prompt processing (ppN: N random tokens in
 * one pass from an empty context) and generation (tgN: N one-token steps from an empty context), repeated,
 * mean ± standard deviation in tokens/s, as a markdown table or JSON. Decode rows also show the effective
 * weight bandwidth (weight bytes read per token × tokens/s) next to a read-bandwidth probe measured in the
 * same run (on a device: its copy kernel's bandwidth, bytes read + written), and every row the major page
 * faults during compute (0 once the weights are resident). With an expert cache (--mem-budget below the
 * model's size), a second table has per row the bytes read from disk per token, the hit rate, the next-layer
 * prediction's precision and recall, and the share of the time stalled on reads.
 * `--draft N` measures speculative decoding instead (bench_draft.c); with --mpi a table per stage follows
 * (bench_pipe.c). */
#include "backend/backend.h"
#include "cli/bench_draft.h"
#include "cli/bench_pipe.h"
#include "cli/bwprobe.h"
#include "cli/cli.h"
#include "cli/cli_engine.h"
#include "deltallm.h"
#include "base/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_LIST 16
#define MAX_REPS 8 /* repetitions reported one by one (the first runs cold, the later ones warm) */

typedef struct Result {
    const char *model;
    char arch[16], ops[16];
    uint64_t file_bytes, decode_bytes;
    int threads;
    char test[40];
    int n_tokens;
    double mean, sd;    /* tokens/s */
    double weights_gbs; /* decode: effective weight bandwidth */
    double probe_gbs;
    long majflt;
    bool cache;         /* the experts came through the expert cache: */
    double disk_per_tok, hit, precision, recall, stall_frac; /* bytes read per token, shares */
    int n_reps;
    double rep_tps[MAX_REPS], rep_disk[MAX_REPS], rep_hit[MAX_REPS], rep_stall[MAX_REPS]; /* each repetition */
    bool dev;           /* a device engine: its command counts per token (dl_engine_device_counts) */
    double disp_tok, barr_tok, host_us_tok, disp_layer, barr_layer, rec_tok, replayed; /* replayed: share of passes */
    DlStageStats *stages; /* over MPI: per stage during the test */
    int n_stages;
} Result;

static long majflt_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_majflt;
}

static int parse_list(const char *s, long long lo, long long hi, long long *out, int *n) {
    *n = 0;
    while (*s && *n < MAX_LIST) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < lo || v > hi) return -1;
        out[(*n)++] = v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *n ? 0 : -1;
}

/* One timed run: pp evaluates n tokens at once, tg evaluates n tokens one by one, after the context `at` holds
 * (a snapshot of the depth's tokens, or NULL: an empty context). Returns seconds. */
static double run_once_at(DlSession *s, const void *at, size_t at_size, const int32_t *toks, int n, bool pp, DlError *err) {
    if (at) {
        if (dl_session_restore(s, at, at_size, err)) return -1;
    } else
        dl_session_reset(s);
    double t0 = now_s();
    if (pp) {
        if (dl_session_eval(s, toks, (size_t)n, err)) return -1;
    } else {
        for (int i = 0; i < n; i++)
            if (dl_session_eval(s, &toks[i], 1, err)) return -1;
    }
    return now_s() - t0;
}

static void print_bytes(char *buf, size_t cap, double b) {
    if (b >= 1024.0 * 1024 * 1024) snprintf(buf, cap, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    else snprintf(buf, cap, "%.2f MiB", b / (1024.0 * 1024));
}

int cmd_bench(int argc, char **argv) {
    const char *models[MAX_LIST];
    int n_models = 0, n_pp = 1, n_tg = 1, n_thr = 1;
    long long pp[MAX_LIST] = {512}, tg[MAX_LIST] = {128}, thr[MAX_LIST] = {0}, reps = 3, batch = 512, slots = 1, depth = 0;
    long long slot_list[MAX_LIST] = {1};
    int n_sl = 1;
    bool json = false, profile = false, mlock_ = false, prefetch = true, draft = false, n_given = false;
    const char *prompt = NULL;
    double accept[MAX_LIST];
    int n_accept = 0;
    CliEngine eo;
    cli_engine_init(&eo);
    DraftOptions dro;
    draft_options_init(&dro);
    for (int i = 1; i < argc; i++) {
        const int er = cli_engine_arg("bench", argc, argv, &i, &eo);
        if (er == 2) return 2;
        if (er == 1) continue;
        const int dr = draft_options_parse(&dro, "bench", argc, argv, &i);
        if (dr < 0) return 2;
        if (dr > 0) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltallm bench -m MODEL.gguf [-m ...] [-p 512[,..]] [-n 128[,..]] [-t 1,2] [-r 3] [-b 512]\n"
                   "                      [-d DEPTH] [--json] [--profile] [--mlock] [--no-prefetch] [--exact] [--slots N[,..]]\n"
                   "       deltallm bench -m MODEL.gguf --draft N [--draft-p-min P] [--model-draft F] [--prompt TEXT]\n"
                   "                      [--draft-accept A[,A..]] [--draft-vocab N]\n"
                   "                      [-n 128] [-t 1,2] [-r 3] [--json]\n"
                   "  -p 0 or -n 0 skips that test. -d N: every test after a context of N tokens (llama-bench's depth).\n"
                   "  Weights are read into memory first (--no-prefetch: not);\n"
                   "  --mlock also locks them. --slots N[,..]: tgN decodes N sessions at once (t/s counts all of them;\n"
                   "  with --mpi in groups kept in flight, as the server does; with -d each from the depth's context);\n"
                   "  a row per count. With --mpi a table per stage follows.\n"
                   "  --draft N: speculative decoding against plain decoding, greedy, n tokens after the prompt\n"
                   "  (default: 32 random tokens): tokens/s of both, acceptance per draft position, the cost of a\n"
                   "  drafter pass, the verify and the rollback next to a decode step of the same run (not with\n"
                   "  --mpi or --slots). --draft-accept A[,A..]: a row per acceptance A in (0, 1], the drafts being\n"
                   "  the model's own greedy tokens with a share 1 - A of them wrong (the machinery's cost at a known\n"
                   "  acceptance, on any model; the drafter still runs, n_max passes a step).\n%s",
                   cli_engine_help);
            return 0;
        } else if (!strcmp(a, "-m") && v) {
            if (n_models == MAX_LIST) return cli_usage_error("bench", "too many models");
            models[n_models++] = argv[++i];
        } else if (!strcmp(a, "-p") && v) {
            if (parse_list(argv[++i], 0, 1 << 20, pp, &n_pp)) return cli_usage_error("bench", "bad -p list '%s'", v);
        } else if (!strcmp(a, "-n") && v) {
            if (parse_list(argv[++i], 0, 1 << 20, tg, &n_tg)) return cli_usage_error("bench", "bad -n list '%s'", v);
            n_given = true;
        } else if (!strcmp(a, "--draft") && v) {
            if (cli_parse_int("bench", a, argv[++i], 1, DL_DRAFT_MAX, &dro.n_max)) return 2;
            draft = true;
        } else if (!strcmp(a, "--draft-accept") && v) {
            n_accept = 0;
            for (const char *c = argv[++i]; *c;) {
                char *end;
                const double x = strtod(c, &end);
                if (end == c || !(x > 0 && x <= 1) || n_accept == MAX_LIST || (*end && *end != ','))
                    return cli_usage_error("bench", "bad --draft-accept list '%s' (acceptances in (0, 1])", v);
                accept[n_accept++] = x;
                c = *end ? end + 1 : end;
            }
            if (!n_accept) return cli_usage_error("bench", "bad --draft-accept list '%s' (acceptances in (0, 1])", v);
        } else if (!strcmp(a, "--prompt") && v) {
            prompt = argv[++i];
        } else if (!strcmp(a, "-t") && v) {
            if (parse_list(argv[++i], 1, 1024, thr, &n_thr)) return cli_usage_error("bench", "bad -t list '%s'", v);
        } else if (!strcmp(a, "-r") && v) {
            if (cli_parse_int("bench", a, argv[++i], 1, 1000, &reps)) return 2;
        } else if (!strcmp(a, "-b") && v) {
            if (cli_parse_int("bench", a, argv[++i], 1, 65536, &batch)) return 2;
        } else if ((!strcmp(a, "-d") || !strcmp(a, "--depth")) && v) {
            if (cli_parse_int("bench", a, argv[++i], 0, 1 << 20, &depth)) return 2;
        } else if (!strcmp(a, "--slots") && v) {
            if (parse_list(argv[++i], 1, 256, slot_list, &n_sl)) return cli_usage_error("bench", "bad --slots list '%s' (1 to 256)", v);
            slots = 1;
            for (int k = 0; k < n_sl; k++) slots = slot_list[k] > slots ? slot_list[k] : slots;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--profile")) {
            profile = true;
        } else if (!strcmp(a, "--mlock")) {
            mlock_ = true;
        } else if (!strcmp(a, "--no-prefetch")) {
            prefetch = false;
        } else {
            return cli_usage_error("bench", "unknown or incomplete option '%s'", a);
        }
    }
    if (!n_models) return cli_usage_error("bench", "needs -m MODEL.gguf");
    if (draft_options_check(&dro, "bench")) return 2;
    if (!draft && (prompt || dro.model || dro.n_max >= 0 || n_accept)) return cli_usage_error("bench", "--prompt and the draft options need --draft N");
    if (draft) {
        if (eo.mpi || slots > 1) return cli_usage_error("bench", "--draft measures one session in one process (not with --mpi or --slots)");
        if (depth) return cli_usage_error("bench", "-d is not taken with --draft");
        if (n_tg != 1 || tg[0] < 2 || tg[0] > 65536)
            return cli_usage_error("bench", "--draft: -n takes one count of 2 to 65536 tokens");
        BenchDraft bd = {models, n_models, thr, n_thr, n_given ? (int)tg[0] : 128, (int)reps, (int)batch, eo.exact, json,
                         prefetch, mlock_, profile, prompt, accept, n_accept, dro, eo};
        return bench_draft(&bd);
    }
    long long max_tok = 0;
    for (int i = 0; i < n_pp; i++) max_tok = pp[i] > max_tok ? pp[i] : max_tok;
    for (int i = 0; i < n_tg; i++) max_tok = tg[i] > max_tok ? tg[i] : max_tok;
    if (max_tok == 0) return cli_usage_error("bench", "nothing to run (-p 0 -n 0)");

    Result res[MAX_LIST * MAX_LIST * 2 * 4];
    if ((long long)n_models * n_thr * (n_pp + n_tg * n_sl) > (long long)(sizeof res / sizeof res[0]))
        return cli_usage_error("bench", "too many rows (models x threads x tests x slot counts)");
    int n_res = 0, rc = 0;
    double probe_cache[1025] = {0}, device_probe = 0;
    char *report = profile ? malloc(1 << 16) : NULL;
    for (int mi = 0; mi < n_models && rc == 0; mi++) {
        for (int ti = 0; ti < n_thr && rc == 0; ti++) {
            DlError err = {{0}};
            DlEngineParams ep;
            dl_engine_params_init(&ep);
            ep.model_path = models[mi];
            ep.n_threads = (int)thr[ti];
            ep.n_ctx = (int)(max_tok + depth) + 8;
            ep.n_batch = (int)batch;
            ep.n_seq_max = (int)slots;
            Err ae = {{0}};
            if (cli_engine_apply(&eo, &ep, &ae)) return cli_usage_error("bench", "%s", ae.msg);
            DlEngine *e = dl_engine_open(&ep, &err);
            if (e) cli_engine_report(e);
            DlSession *ss[256] = {NULL};
            for (int k = 0; e && k < slots && (k == 0 || ss[k - 1]); k++) ss[k] = dl_session_new(e, &err);
            DlSession *s = ss[slots - 1] ? ss[0] : NULL;
            /* with an expert cache every repetition gets tokens of its own: the same tokens again would find
             * the same experts in the cache, which a real prompt or generation does not */
            const long long n_seqs = 1 + (reps < MAX_REPS ? reps : MAX_REPS);
            int32_t *toks = malloc(sizeof(int32_t) * (size_t)(max_tok * n_seqs + depth));
            if (!s || !toks || ((prefetch || mlock_) && dl_engine_prefetch(e, mlock_, &err))) {
                fprintf(stderr, "deltallm bench: %s: %s\n", models[mi], err.msg[0] ? err.msg : "out of memory");
                rc = 1;
            }
            const DlModelInfo *info = e ? dl_engine_info(e) : NULL;
            uint64_t rng = 0x12345678u;
            DlCacheStats cs0;
            const bool has_cache = e && dl_engine_cache_stats(e, &cs0, false) == 0;
            for (long long i = 0; rc == 0 && i < max_tok * n_seqs + depth; i++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                toks[i] = (int32_t)((rng >> 33) % (uint64_t)info->n_vocab);
            }
            /* -d N: every timed run starts from a context of N tokens (llama-bench's depth), restored from one
             * snapshot; the depth's own prefill is not timed */
            void *at = NULL;
            size_t at_size = 0;
            if (rc == 0 && depth > 0) {
                dl_session_reset(s);
                if (dl_session_eval(s, toks + max_tok * n_seqs, (size_t)depth, &err) ||
                    !(at = malloc(at_size = dl_session_snapshot_size(s))) || dl_session_snapshot(s, at, at_size, &err)) {
                    fprintf(stderr, "deltallm bench: %s: the depth's context: %s\n", models[mi], err.msg[0] ? err.msg : "out of memory");
                    rc = 1;
                }
            }
            const int nthreads = rc ? 1 : info->n_threads;
            for (int kind = 0; kind < 2 && rc == 0; kind++) {
                const long long *list = kind == 0 ? pp : tg;
                /* decode: a row per count of tokens and count of sessions (--slots) */
                const int n_sc = kind == 1 ? n_sl : 1;
                for (int li = 0; li < (kind == 0 ? n_pp : n_tg * n_sc) && rc == 0; li++) {
                    const int n = (int)list[li / n_sc];
                    const long long nsl = kind == 1 ? slot_list[li % n_sc] : 1;
                    if (n == 0) continue;
                    if (run_once_at(s, at, at_size, toks, n < 8 ? n : 8, kind == 0, &err) < 0) rc = 1; /* warm-up */
                    if (profile) dl_engine_profile(e, true);
                    DlCacheStats cs;
                    const bool cached = dl_engine_cache_stats(e, &cs, true) == 0;
                    DlStageStats stages[64];
                    dl_engine_stage_stats(e, true, stages, 64, &err); /* the counters from here */
                    DlDeviceCounts dc;
                    dl_engine_device_counts(e, &dc, true);
                    double sum = 0, sum2 = 0, secs = 0;
                    long f0 = majflt_now();
                    const bool many = kind == 1 && slots > 1;
                    for (long long r = 0; r < reps && rc == 0; r++) {
                        const int32_t *tk = has_cache ? toks + max_tok * (1 + r % (n_seqs - 1)) : toks;
                        DlCacheStats c0, c1;
                        if (cached) dl_engine_cache_stats(e, &c0, false);
                        double t = many ? bench_decode_sessions(e, ss, (int)nsl, at, at_size, tk, n, &err)
                                        : run_once_at(s, at, at_size, tk, n, kind == 0, &err);
                        if (t < 0) {
                            rc = 1;
                            break;
                        }
                        double tps = (many ? (double)nsl : 1.0) * n / t;
                        sum += tps, sum2 += tps * tps, secs += t;
                        if (r < MAX_REPS) {
                            Result *R = &res[n_res];
                            R->rep_tps[r] = tps;
                            R->n_reps = (int)r + 1;
                            if (cached && dl_engine_cache_stats(e, &c1, false) == 0) {
                                R->rep_disk[r] = (double)(c1.bytes_read - c0.bytes_read) / n;
                                R->rep_hit[r] = c1.lookups > c0.lookups ? (double)(c1.hits - c0.hits) / (double)(c1.lookups - c0.lookups) : 0;
                                R->rep_stall[r] = (c1.stall_s - c0.stall_s) / t;
                            }
                        }
                    }
                    if (rc) {
                        fprintf(stderr, "deltallm bench: %s\n", err.msg);
                        break;
                    }
                    Result *R = &res[n_res++]; /* the per-repetition arrays are filled already */
                    Result keep = *R;
                    memset(R, 0, sizeof *R);
                    R->n_reps = keep.n_reps;
                    memcpy(R->rep_tps, keep.rep_tps, sizeof R->rep_tps), memcpy(R->rep_disk, keep.rep_disk, sizeof R->rep_disk);
                    memcpy(R->rep_hit, keep.rep_hit, sizeof R->rep_hit), memcpy(R->rep_stall, keep.rep_stall, sizeof R->rep_stall);
                    R->model = models[mi];
                    snprintf(R->arch, sizeof R->arch, "%s", info->arch);
                    snprintf(R->ops, sizeof R->ops, "%s", info->ops);
                    R->file_bytes = info->file_bytes;
                    R->decode_bytes = info->decode_bytes;
                    R->threads = nthreads;
                    snprintf(R->test, sizeof R->test, "%s%d", kind == 0 ? "pp" : "tg", n);
                    if (depth > 0) snprintf(R->test + strlen(R->test), sizeof R->test - strlen(R->test), " @ d%lld", depth);
                    R->n_tokens = n;
                    const int n_st = dl_engine_stage_stats(e, false, stages, 64, &err);
                    if (n_st > 0 && (R->stages = malloc(sizeof stages[0] * (size_t)n_st)))
                        memcpy(R->stages, stages, sizeof stages[0] * (size_t)n_st), R->n_stages = n_st;
                    if (many) {
                        snprintf(R->test, sizeof R->test, "tg%d x%lld", n, nsl);
                        if (depth > 0) snprintf(R->test + strlen(R->test), sizeof R->test - strlen(R->test), " @ d%lld", depth);
                    }
                    R->mean = sum / (double)reps;
                    R->sd = reps > 1 ? sqrt(fmax(0, (sum2 - sum * sum / (double)reps) / (double)(reps - 1))) : 0;
                    R->majflt = majflt_now() - f0;
                    if (dl_engine_device_counts(e, &dc, false) == 0 && dc.tokens) {
                        const double tk = (double)dc.tokens, per_pass = (double)dc.passes / tk;
                        const double ls = dc.layer_steps ? (double)dc.layer_steps : 1;
                        R->dev = true;
                        R->disp_tok = (double)dc.dispatches / tk, R->barr_tok = (double)dc.barriers / tk;
                        R->host_us_tok = dc.host_s * 1e6 / tk;
                        R->disp_layer = (double)dc.layer_dispatches / ls * per_pass;
                        R->barr_layer = (double)dc.layer_barriers / ls * per_pass;
                        R->rec_tok = (double)dc.recorded / tk;
                        R->replayed = dc.passes ? (double)dc.replays / (double)dc.passes : 0;
                    }
                    if (cached && dl_engine_cache_stats(e, &cs, false) == 0) {
                        const double tok = cs.tokens ? (double)cs.tokens : 1;
                        R->cache = true;
                        R->disk_per_tok = (double)cs.bytes_read / tok;
                        R->hit = cs.lookups ? (double)cs.hits / (double)cs.lookups : 0;
                        R->precision = cs.predicted ? (double)cs.predicted_used / (double)cs.predicted : 0;
                        R->recall = cs.used_after_predict ? (double)cs.predicted_used / (double)cs.used_after_predict : 0;
                        R->stall_frac = secs > 0 ? cs.stall_s / secs : 0;
                    }
                    if (R->majflt > 0 && (prefetch || mlock_)) { /* resident weights: a gate, not a hope */
                        fprintf(stderr,
                                "deltallm bench: %ld major page faults during %s although the weights were made "
                                "resident first (memory pressure? try --mlock)\n",
                                R->majflt, R->test);
                        rc = 1;
                    }
                    if (kind == 1) {
                        R->weights_gbs = (double)info->decode_bytes * R->mean / (many ? (double)nsl : 1.0) / 1e9; /* per step */
                        if (strncmp(info->ops, "vulkan", 6) == 0) { /* a device: its copy kernel's bandwidth */
                            Err pe = {{0}};
                            if (device_probe == 0 && backend_copy_probe(info->ops, (size_t)1 << 30, &device_probe, &pe))
                                fprintf(stderr, "deltallm bench: device probe: %s\n", pe.msg);
                            R->probe_gbs = device_probe;
                        } else {
                            if (nthreads <= 1024 && probe_cache[nthreads] == 0)
                                probe_cache[nthreads] = bwprobe_read_gbs((size_t)512 << 20, nthreads, 3);
                            R->probe_gbs = probe_cache[nthreads];
                        }
                    }
                    if (profile) {
                        dl_engine_profile_report(e, report, 1 << 16);
                        fprintf(stderr, "== %s, %d threads, %s ==\n%s\n", models[mi], nthreads, R->test, report);
                        dl_engine_profile(e, false);
                    }
                }
            }
            free(toks);
            free(at);
            for (int k = 0; k < slots; k++) dl_session_free(ss[k]);
            dl_engine_close(e);
        }
    }
    free(report);
    if (rc) return rc; /* the error is on stderr; no partial table on stdout */
    if (json) {
        printf("[\n");
        for (int i = 0; i < n_res; i++) {
            const Result *R = &res[i];
            printf("  {\"model\": \"%s\", \"arch\": \"%s\", \"file_bytes\": %llu, \"ops\": \"%s\", \"threads\": %d, "
                   "\"test\": \"%s\", \"n_tokens\": %d, \"tps_mean\": %.3f, \"tps_sd\": %.3f, \"decode_bytes\": %llu, "
                   "\"weights_gbs\": %.3f, \"probe_gbs\": %.3f, \"major_faults\": %ld",
                   R->model, R->arch, (unsigned long long)R->file_bytes, R->ops, R->threads, R->test,
                   R->n_tokens, R->mean, R->sd, (unsigned long long)R->decode_bytes, R->weights_gbs, R->probe_gbs,
                   R->majflt);
            if (R->cache) {
                printf(", \"disk_bytes_per_token\": %.0f, \"hit_rate\": %.4f, \"prefetch_precision\": %.4f, "
                       "\"prefetch_recall\": %.4f, \"io_stall_fraction\": %.4f, \"reps\": [",
                       R->disk_per_tok, R->hit, R->precision, R->recall, R->stall_frac);
                for (int k = 0; k < R->n_reps; k++)
                    printf("%s{\"tps\": %.3f, \"disk_bytes_per_token\": %.0f, \"hit_rate\": %.4f, \"io_stall_fraction\": %.4f}",
                           k ? ", " : "", R->rep_tps[k], R->rep_disk[k], R->rep_hit[k], R->rep_stall[k]);
                printf("]");
            }
            if (R->dev)
                printf(", \"dispatches_per_token\": %.2f, \"barriers_per_token\": %.2f, \"host_us_per_token\": %.1f, "
                       "\"dispatches_per_layer\": %.3f, \"barriers_per_layer\": %.3f, \"recorded_per_token\": %.2f, "
                       "\"replayed_passes\": %.3f",
                       R->disp_tok, R->barr_tok, R->host_us_tok, R->disp_layer, R->barr_layer, R->rec_tok, R->replayed);
            if (R->n_stages) bench_stage_json(R->stages, R->n_stages, stdout);
            printf("}%s\n", i + 1 < n_res ? "," : "");
        }
        printf("]\n");
    } else {
        printf("| model | size | arch | ops | threads | test | t/s | weights GB/s | probe GB/s | major faults |\n");
        printf("|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < n_res; i++) {
            const Result *R = &res[i];
            const char *base = strrchr(R->model, '/') ? strrchr(R->model, '/') + 1 : R->model;
            char size[32], bw[32] = "", probe[32] = "";
            print_bytes(size, sizeof size, (double)R->file_bytes);
            if (R->weights_gbs > 0) snprintf(bw, sizeof bw, "%.1f", R->weights_gbs);
            if (R->probe_gbs > 0) snprintf(probe, sizeof probe, "%.1f", R->probe_gbs);
            printf("| %s | %s | %s | %s | %d | %s | %.2f ± %.2f | %s | %s | %ld |\n", base, size, R->arch,
                   R->ops, R->threads, R->test, R->mean, R->sd, bw, probe, R->majflt);
        }
        bool any = false;
        for (int i = 0; i < n_res; i++) any |= res[i].cache;
        if (any) {
            printf("\n| model | test | expert cache: MiB read per token | hit rate | prediction precision | recall | "
                   "stalled on reads |\n|---|---:|---:|---:|---:|---:|---:|\n");
            for (int i = 0; i < n_res; i++) {
                const Result *R = &res[i];
                const char *base = strrchr(R->model, '/') ? strrchr(R->model, '/') + 1 : R->model;
                if (R->cache)
                    printf("| %s | %s | %.2f | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", base, R->test,
                           R->disk_per_tok / (1024.0 * 1024), 100 * R->hit, 100 * R->precision, 100 * R->recall,
                           100 * R->stall_frac);
            }
        }
        bool any_stage = false;
        for (int i = 0; i < n_res; i++)
            if (res[i].n_stages) {
                if (!any_stage) bench_stage_header(stdout), any_stage = true;
                bench_stage_rows(res[i].test, res[i].stages, res[i].n_stages, stdout);
            }
    }
    for (int i = 0; i < n_res; i++) free(res[i].stages);
    return rc;
}
