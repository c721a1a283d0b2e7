/* bench_pipe.c — the parts of `deltallm bench` for several sessions and for engines over MPI (bench_pipe.h):
 * decode with N sessions at once, and the per-stage table (compute, bubble, bytes per token, memory). */
#include "cli/bench_pipe.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_decode_sessions(DlEngine *e, DlSession **s, int n, const void *at, size_t at_size, const int32_t *toks,
                             int steps, DlError *err) {
    int32_t t[256];
    if (n < 1 || n > 256) return snprintf(err->msg, sizeof err->msg, "1 to 256 sessions"), -1;
    for (int i = 0; i < n; i++) {
        if (!at) dl_session_reset(s[i]);
        else if (dl_session_restore(s[i], at, at_size, err)) return -1;
    }
    int depth = dl_engine_pipeline_depth(e);
    if (depth > n) depth = n;
    const double t0 = now_s();
    if (depth <= 1) {
        for (int k = 0; k < steps; k++) {
            for (int i = 0; i < n; i++) t[i] = toks[(k + i) % steps];
            if (dl_decode_batch(s, t, n, err)) return -1;
        }
        return now_s() - t0;
    }
    /* groups g = [g·n/depth, (g+1)·n/depth): each started again as soon as it is finished */
    int done[64] = {0}, order[64], head = 0, in = 0;
    for (int g = 0; g < depth; g++) {
        const int a = g * n / depth, b = (g + 1) * n / depth;
        for (int i = a; i < b; i++) t[i] = toks[i % steps];
        if (dl_decode_start(s + a, t + a, b - a, err)) return -1;
        order[(head + in++) % 64] = g;
    }
    while (in > 0) {
        const int g = order[head];
        head = (head + 1) % 64, in--;
        if (dl_decode_finish(e, err)) return -1;
        if (++done[g] == steps) continue;
        const int a = g * n / depth, b = (g + 1) * n / depth;
        for (int i = a; i < b; i++) t[i] = toks[(done[g] + i) % steps];
        if (dl_decode_start(s + a, t + a, b - a, err)) return -1;
        order[(head + in++) % 64] = g;
    }
    return now_s() - t0;
}

void bench_stage_rows(const char *test, const DlStageStats *st, int n, FILE *out) {
    for (int i = 0; i < n; i++) {
        const DlStageStats *s = &st[i];
        const double bubble = s->wall_s > s->compute_s ? s->wall_s - s->compute_s : 0;
        fprintf(out, "| %s | %d | %s | [%d, %d) | %.2f GiB | %.2f GiB | %.3f | %.3f | %.0f%% | %.1f |\n", test, s->rank,
                s->host, s->l0, s->l1, (double)s->weight_bytes / (1u << 30), (double)s->rss_bytes / (1u << 30), s->compute_s,
                bubble, s->wall_s > 0 ? 100.0 * s->compute_s / s->wall_s : 0,
                s->tokens ? (double)s->bytes_sent / (double)s->tokens / 1024.0 : 0);
    }
}

void bench_stage_header(FILE *out) {
    fprintf(out, "\n| test | rank | host | layers | weights | RSS | compute s | bubble s | busy | KiB sent / token |\n"
                 "|---|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
}

void bench_stage_json(const DlStageStats *st, int n, FILE *out) {
    fprintf(out, ", \"stages\": [");
    for (int i = 0; i < n; i++)
        fprintf(out,
                "%s{\"rank\": %d, \"host\": \"%s\", \"l0\": %d, \"l1\": %d, \"weight_bytes\": %llu, \"rss_bytes\": %llu, "
                "\"rss_peak_bytes\": %llu, \"compute_s\": %.4f, \"wall_s\": %.4f, \"bytes_sent\": %llu, \"tokens\": %llu}",
                i ? ", " : "", st[i].rank, st[i].host, st[i].l0, st[i].l1, (unsigned long long)st[i].weight_bytes,
                (unsigned long long)st[i].rss_bytes, (unsigned long long)st[i].rss_peak_bytes, st[i].compute_s, st[i].wall_s,
                (unsigned long long)st[i].bytes_sent, (unsigned long long)st[i].tokens);
    fprintf(out, "]");
}
