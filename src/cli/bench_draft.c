/* bench_draft.c — see bench_draft.h. Per model and thread count, r repetitions of n greedy tokens after the
 * prompt, each time plain (one-token steps) and speculative (dl_session_speculate with the options' drafter),
 * interleaved so that both see the same machine. Reports tokens/s of each and their ratio, whether the tokens
 * are the same, the acceptance per draft position, tokens per step, and the costs of the parts of a step next
 * to a decode step of the same run: one drafter pass, the verify pass, the rollback (dl_session_keep's work).
 * --draft-accept A[,A..]: a row per A, the drafts after each drafter pass being the plain run's own tokens with
 * a share 1 - A of them wrong (dl_session_set_draft_oracle), and the drafter forced to n_max drafts. */
#include "cli/bench_draft.h"

#include "cli/cli.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Row {
    const char *model;
    int threads, n_max;
    double accept; /* the oracle's acceptance (0: none) */
    double plain_tps, draft_tps, decode_ms, pass_ms, verify_ms, keep_ms, tokens_per_step;
    bool same;
    DlDraftStats st;
} Row;

/* n greedy tokens after the prompt: plain one-token steps (drafting NULL) or speculative steps. Seconds. */
static double gen(DlSession *s, DlSampler *smp, const int32_t *prompt, int np, int32_t *out, int n, bool drafting,
                  DlError *err) {
    dl_session_reset(s);
    if (dl_session_eval(s, prompt, (size_t)np, err)) return -1;
    const double t0 = now_s();
    int got = 0;
    out[got++] = dl_sampler_sample(smp, dl_session_logits(s));
    while (got < n) {
        if (!drafting) {
            if (dl_session_eval(s, &out[got - 1], 1, err)) return -1;
            out[got] = dl_sampler_sample(smp, dl_session_logits(s));
            got++;
            continue;
        }
        const int k = dl_session_speculate(s, smp, out[got - 1], out + got, (size_t)(n - got), err);
        if (k < 1) return -1;
        got += k;
    }
    return now_s() - t0;
}

static int bench_one(const BenchDraft *b, const char *model, int threads, Row *rows) {
    DlError err = {{0}};
    DlEngineParams ep;
    dl_engine_params_init(&ep);
    ep.model_path = model;
    ep.n_threads = threads;
    ep.n_batch = b->n_batch;
    ep.exact = b->exact;
    Err ae = {{0}};
    if (cli_engine_apply(&b->engine, &ep, &ae)) {
        fprintf(stderr, "deltallm bench: %s\n", ae.msg);
        return 1;
    }
    DlEngine *e = NULL;
    DlSession *plain = NULL, *spec = NULL;
    DlSampler *smp = NULL;
    int32_t *prompt = NULL, *ta = NULL, *tb = NULL, *oracle = NULL;
    size_t np = 0;
    int rc = 1;
    DlDraftParams dp;
    draft_options_on(&b->draft, &dp);
    const int na = b->n_accept ? b->n_accept : 1;
    if (b->n_accept) dp.p_min = 0; /* the drafter makes n_max drafts: its whole cost */
    /* the context: the prompt (at most 1024 tokens), the tokens and a step's drafts */
    ep.n_ctx = 1024 + b->n_gen + DL_DRAFT_MAX + 8;
    if (!(e = dl_engine_open(&ep, &err))) goto done;
    if ((b->prefetch || b->mlock) && dl_engine_prefetch(e, b->mlock, &err)) goto done;
    const DlModelInfo *info = dl_engine_info(e);
    if (b->prompt) {
        if (dl_tokenize(e, b->prompt, strlen(b->prompt), false, &prompt, &np, &err)) goto done;
        if (np < 1 || np > 1024) {
            snprintf(err.msg, sizeof err.msg, "the prompt has %zu tokens (1 to 1024)", np);
            goto done;
        }
    } else {
        np = 32;
        prompt = malloc(sizeof(int32_t) * np);
        uint64_t rng = 0x12345678u;
        for (size_t i = 0; prompt && i < np; i++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            prompt[i] = (int32_t)((rng >> 33) % (uint64_t)info->n_vocab);
        }
    }
    DlSamplingParams sp;
    dl_sampling_params_init(&sp);
    sp.temperature = 0; /* greedy: the two must give the same tokens */
    ta = malloc(sizeof(int32_t) * (size_t)b->n_gen);
    tb = malloc(sizeof(int32_t) * (size_t)b->n_gen);
    if (!prompt || !ta || !tb) {
        snprintf(err.msg, sizeof err.msg, "out of memory");
        goto done;
    }
    if (!(plain = dl_session_new(e, &err)) || !(spec = dl_session_new(e, &err)) || !(smp = dl_sampler_new(e, &sp, &err)))
        goto done;
    if (draft_options_open(&b->draft, e, &err) || dl_session_set_draft(spec, &dp, &err)) goto done;
    /* the oracle's tokens: the prompt and a plain greedy run's (the same tokens every plain run gives) */
    if (b->n_accept) {
        if (!(oracle = malloc(sizeof(int32_t) * (np + (size_t)b->n_gen)))) {
            snprintf(err.msg, sizeof err.msg, "out of memory");
            goto done;
        }
        memcpy(oracle, prompt, sizeof(int32_t) * np);
        if (gen(plain, smp, prompt, (int)np, oracle + np, b->n_gen, false, &err) < 0) goto done;
    }
    const int no = (int)np + b->n_gen;
    for (int ai = 0; ai < na; ai++) {
        Row *R = &rows[ai];
        R->accept = b->n_accept ? b->accept[ai] : 0;
        /* warm-up of both paths, then the repetitions; the drafter's counts are those of the timed runs */
        if (dl_session_set_draft(spec, &dp, &err) ||
            (R->accept > 0 && dl_session_set_draft_oracle(spec, oracle, no, R->accept, 1, &err)) ||
            gen(plain, smp, prompt, (int)np, ta, b->n_gen < 8 ? b->n_gen : 8, false, &err) < 0 ||
            gen(spec, smp, prompt, (int)np, tb, b->n_gen < 8 ? b->n_gen : 8, true, &err) < 0 ||
            dl_session_set_draft(spec, &dp, &err) ||
            (R->accept > 0 && dl_session_set_draft_oracle(spec, oracle, no, R->accept, 2, &err)))
            goto done;
        double tp = 0, td = 0;
        R->same = true;
        for (int r = 0; r < b->reps; r++) {
            const double a = gen(plain, smp, prompt, (int)np, ta, b->n_gen, false, &err);
            if (b->profile) dl_engine_profile(e, true);
            const double d = a < 0 ? -1 : gen(spec, smp, prompt, (int)np, tb, b->n_gen, true, &err);
            if (b->profile) {
                char rep[1 << 14];
                dl_engine_profile_report(e, rep, sizeof rep);
                fprintf(stderr, "== %s, %d threads, drafting run %d ==\n%s\n", model, info->n_threads, r + 1, rep);
                dl_engine_profile(e, false);
            }
            if (d < 0) goto done;
            tp += a, td += d;
            R->same = R->same && memcmp(ta, tb, sizeof(int32_t) * (size_t)b->n_gen) == 0;
        }
        dl_session_draft_stats(spec, &R->st);
        const DlDraftStats *st = &R->st;
        R->model = model;
        R->threads = info->n_threads;
        R->n_max = dp.n_max;
        R->plain_tps = (double)b->n_gen * b->reps / tp;
        R->draft_tps = (double)b->n_gen * b->reps / td;
        R->decode_ms = 1e3 * tp / ((double)(b->n_gen - 1) * b->reps); /* n - 1 one-token evaluations per run */
        R->pass_ms = st->draft_passes ? 1e3 * st->draft_s / (double)st->draft_passes : 0;
        R->verify_ms = st->steps ? 1e3 * st->verify_s / (double)st->steps : 0;
        R->keep_ms = st->steps ? 1e3 * st->keep_s / (double)st->steps : 0;
        R->tokens_per_step = st->steps ? (double)(st->steps + st->accepted) / (double)st->steps : 0;
    }
    rc = 0;
done:
    if (rc) fprintf(stderr, "deltallm bench: %s: %s\n", model, err.msg[0] ? err.msg : "failed");
    free(prompt), free(ta), free(tb), free(oracle);
    dl_sampler_free(smp);
    dl_session_free(plain), dl_session_free(spec);
    dl_engine_close(e);
    return rc;
}

static double pct(uint64_t a, uint64_t b) { return b ? 100.0 * (double)a / (double)b : 0; }

int bench_draft(const BenchDraft *b) {
    const int na = b->n_accept ? b->n_accept : 1;
    Row *rows = calloc((size_t)(b->n_models * b->n_threads * na), sizeof *rows);
    int n = 0;
    if (!rows) return fprintf(stderr, "deltallm bench: out of memory\n"), 1;
    for (int mi = 0; mi < b->n_models; mi++)
        for (int ti = 0; ti < b->n_threads; ti++) {
            if (bench_one(b, b->models[mi], (int)b->threads[ti], &rows[n])) return free(rows), 1;
            n += na;
        }
    if (b->json) printf("[\n");
    else {
        printf("| model | threads | draft-max | draft-accept | plain t/s | drafting t/s | speedup | same tokens | accepted | by position | "
               "tokens/step | decode step ms | drafter pass ms (%% of decode) | verify ms | rollback ms (%% of decode) |\n");
        printf("|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|\n");
    }
    for (int i = 0; i < n; i++) {
        const Row *R = &rows[i];
        const char *base = strrchr(R->model, '/') ? strrchr(R->model, '/') + 1 : R->model;
        char pos[16 * DL_DRAFT_MAX] = "", acc[16] = "drafter";
        if (R->accept > 0) snprintf(acc, sizeof acc, "%.2f", R->accept);
        for (int j = 0, o = 0; j < R->n_max && j < DL_DRAFT_MAX; j++)
            o += snprintf(pos + o, sizeof pos - (size_t)o, b->json ? "%s%.2f" : "%s%.0f%%", j ? (b->json ? ", " : " / ") : "",
                          b->json ? pct(R->st.accepted_at[j], R->st.drafted_at[j]) / 100 : pct(R->st.accepted_at[j], R->st.drafted_at[j]));
        if (b->json)
            printf("  {\"model\": \"%s\", \"threads\": %d, \"draft_max\": %d, \"draft_accept\": %.3f, \"plain_tps\": %.3f, \"draft_tps\": %.3f, "
                   "\"speedup\": %.4f, \"same_tokens\": %s, \"drafted\": %llu, \"accepted\": %llu, \"accepted_at\": [%s], "
                   "\"tokens_per_step\": %.3f, \"decode_ms\": %.4f, \"draft_pass_ms\": %.4f, \"verify_ms\": %.4f, "
                   "\"rollback_ms\": %.4f}%s\n",
                   R->model, R->threads, R->n_max, R->accept, R->plain_tps, R->draft_tps, R->draft_tps / R->plain_tps,
                   R->same ? "true" : "false", (unsigned long long)R->st.drafted, (unsigned long long)R->st.accepted, pos,
                   R->tokens_per_step, R->decode_ms, R->pass_ms, R->verify_ms, R->keep_ms, i + 1 < n ? "," : "");
        else
            printf("| %s | %d | %d | %s | %.1f | %.1f | %.2f× | %s | %.1f%% | %s | %.2f | %.3f | %.3f (%.1f%%) | %.3f | %.4f (%.2f%%) |\n",
                   base, R->threads, R->n_max, acc, R->plain_tps, R->draft_tps, R->draft_tps / R->plain_tps, R->same ? "yes" : "NO",
                   pct(R->st.accepted, R->st.drafted), pos, R->tokens_per_step, R->decode_ms, R->pass_ms,
                   100 * R->pass_ms / R->decode_ms, R->verify_ms, R->keep_ms, 100 * R->keep_ms / R->decode_ms);
    }
    if (b->json) printf("]\n");
    free(rows);
    return 0;
}
