/* test_pipe.c — the pieces of the MPI pipeline that need no MPI: how the layers are cut over the ranks
 * (balanced: no other contiguous cut has a lighter busiest rank; --split shares; the refusals), and a stage
 * whose backend binds only its part of the weight registry computing the same bits as the whole model. The
 * runs over MPI are in test_mpi.c. */
#include "test.h"
#include "test_forward.h"

#include "cli/tokens_file.h"
#include "engine/pipe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static Model *load(const char *name) {
    char rel[256];
    snprintf(rel, sizeof rel, "models/%s.gguf", name);
    Err err = {{0}};
    Model *m = model_load(test_data(rel), &err);
    CHECK_MSG(m, "%s: %s", name, err.msg);
    return m;
}

/* The busiest rank's bytes per token for a cut (rank 0 also runs the head). */
static uint64_t busiest(const Model *m, const int *l0, const int *l1, int n) {
    uint64_t worst = 0;
    for (int r = 0; r < n; r++) {
        uint64_t c = r ? 0 : (uint64_t)m->output->bytes;
        for (int il = l0[r]; il < l1[r]; il++) c += pipe_layer_bytes(m, il);
        if (c > worst) worst = c;
    }
    return worst;
}

/* Every contiguous cut of L layers into n non-empty ranges: the least busiest rank (brute force). */
static uint64_t best_cut(const Model *m, int n, int r, int from, int *l0, int *l1) {
    const int L = m->cfg.n_layer;
    if (r == n - 1) {
        l0[r] = from, l1[r] = L;
        return busiest(m, l0, l1, n);
    }
    uint64_t best = UINT64_MAX;
    for (int e = from + 1; e <= L - (n - 1 - r); e++) {
        l0[r] = from, l1[r] = e;
        const uint64_t c = best_cut(m, n, r + 1, e, l0, l1);
        if (c < best) best = c;
    }
    return best;
}

TEST(pipe, split_balanced_is_optimal) {
    const char *names[] = {"m5-qwen35-7layer-int3-f16", "m4-qwen35moe-q8_0", "m6-qwen35moe-iq2xxs"};
    for (int k = 0; k < 3; k++) {
        Model *m = load(names[k]);
        if (!m) continue;
        const int L = m->cfg.n_layer;
        for (int n = 1; n <= L; n++) {
            int l0[PIPE_MAX_RANKS], l1[PIPE_MAX_RANKS], b0[PIPE_MAX_RANKS], b1[PIPE_MAX_RANKS];
            Err err = {{0}};
            REQUIRE_MSG(pipe_split(m, n, NULL, l0, l1, &err) == 0, "%s", err.msg);
            bool contiguous = l0[0] == 0 && l1[n - 1] == L;
            for (int r = 0; r < n; r++) contiguous &= l0[r] < l1[r] && (r == 0 || l0[r] == l1[r - 1]);
            CHECK_MSG(contiguous, "%s, %d ranks: not a contiguous cut into non-empty ranges", names[k], n);
            CHECK_MSG(busiest(m, l0, l1, n) == best_cut(m, n, 0, 0, b0, b1), "%s, %d ranks: a lighter cut exists", names[k], n);
        }
        Err err = {{0}};
        int l0[PIPE_MAX_RANKS], l1[PIPE_MAX_RANKS];
        CHECK(pipe_split(m, L + 1, NULL, l0, l1, &err) == -1);
        CHECK_MSG(strstr(err.msg, "each rank needs at least one"), "got: %s", err.msg);
        model_free(m);
    }
}

TEST(pipe, split_shares) {
    Model *m = load("m5-qwen35-7layer-int3-f16");
    REQUIRE(m);
    const int L = m->cfg.n_layer;
    double f[PIPE_MAX_RANKS];
    int l0[PIPE_MAX_RANKS], l1[PIPE_MAX_RANKS];
    Err err = {{0}};
    /* equal shares of layers that weigh about the same: the boundary in the middle */
    REQUIRE(pipe_parse_split("1,1", 2, f, &err) == 0);
    REQUIRE(pipe_split(m, 2, f, l0, l1, &err) == 0);
    CHECK_MSG(l1[0] == L / 2 || l1[0] == (L + 1) / 2, "1,1 cut 7 layers at %d", l1[0]);
    /* a share too small for a layer still gets one; the last rank takes the rest */
    REQUIRE(pipe_parse_split("0.001,0.001,5", 3, f, &err) == 0);
    REQUIRE(pipe_split(m, 3, f, l0, l1, &err) == 0);
    CHECK(l0[0] == 0 && l1[0] == 1 && l0[1] == 1 && l1[1] == 2 && l0[2] == 2 && l1[2] == L);
    REQUIRE(pipe_parse_split("0.3,0.3,0.4", 3, f, &err) == 0);
    CHECK(fabs(f[0] - 0.3) < 1e-12 && fabs(f[2] - 0.4) < 1e-12);
    const char *bad[] = {"1,1", "1,2,3,4", "1,-1,1", "1,x,1", "1,,1", "1;1;1", "", "nan,1,1", "0,1,1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err_clear(&err);
        CHECK_MSG(pipe_parse_split(bad[i], 3, f, &err) == -1 && strstr(err.msg, "--split"), "'%s' accepted (%s)", bad[i],
                  err.msg);
    }
    model_free(m);
}

/* Two stages on backends that hold only their part of the registry (their layers, and the global tensors:
 * embeddings, output norm and matrix, for the embedding and the head), the hidden rows handed over: the same
 * bits as one forward pass with the same batches. */
TEST(pipe, stages_bind_only_their_weights) {
    const char *names[] = {"m2-qwen3next-new-mixed", "m4-qwen35moe-q8_0", "m7-qwen35-wide-q8_0"};
    for (int k = 0; k < 3; k++) {
        Model *m = load(names[k]);
        if (!m) continue;
        char rel[256];
        snprintf(rel, sizeof rel, "seqs/%s/len65.txt", names[k]);
        int32_t *ids = NULL;
        int T = 0;
        Err err = {{0}};
        REQUIRE_MSG(tokens_file_read(test_data(rel), &ids, &T, &err) == 0, "%s", err.msg);
        const int L = m->cfg.n_layer, cut = 1 + L / 2, V = m->cfg.n_vocab, step = 32;
        Backend *be[2];
        Weight *w[2];
        Forward *f[2];
        SeqState *s[2];
        uint64_t bytes[2];
        for (int i = 0; i < 2; i++) {
            int n = 0;
            const BackendOptions bo = tf_backend(MATMUL_GGML, 2, true);
            w[i] = pipe_weights(m, i ? cut : 0, i ? L : cut, true, &n, &bytes[i], &err);
            be[i] = backend_create(&bo, &err);
            REQUIRE_MSG(w[i] && be[i] && be[i]->vt->bind(be[i], w[i], n, &err) == 0, "%s", err.msg);
            ForwardOptions fo = {.max_batch = step, .max_ctx = T, .be = be[i]};
            f[i] = forward_new(m, &fo, &err);
            s[i] = f[i] ? seqstate_new(m, be[i], T, i ? cut : 0, i ? L : cut, &err) : NULL;
            REQUIRE_MSG(s[i], "%s", err.msg);
        }
        uint64_t all = 0, globals = 0;
        for (int i = 0; i < m->n_weights; i++) {
            const Weight *x = &m->weights[i];
            const uint64_t b = (uint64_t)x->bytes * (uint64_t)(x->n_expert ? x->n_expert : 1);
            all += b;
            globals += x->layer < 0 ? b : 0;
        }
        CHECK_MSG(bytes[0] + bytes[1] == all + globals, "%s: the two parts do not add up to the registry", names[k]);
        float *hidden = malloc(sizeof(float) * (size_t)step * (size_t)m->cfg.n_embd);
        float *logits = malloc(sizeof(float) * (size_t)T * V);
        for (int p = 0; p < T; p += step) {
            const int n = T - p < step ? T - p : step;
            BatchSeq a = {s[0], ids + p, n, 0, NULL, false}, b = {s[1], NULL, n, n, logits + (size_t)p * V, false};
            REQUIRE(forward_begin(f[0], &a, 1, &err) == 0);
            forward_embed(f[0]);
            forward_layers(f[0], 0, cut);
            forward_hidden_read(f[0], hidden);
            REQUIRE(forward_end(f[0], &err) == 0);
            REQUIRE(forward_begin(f[1], &b, 1, &err) == 0);
            forward_hidden_write(f[1], hidden);
            forward_layers(f[1], cut, L);
            forward_head(f[1]);
            REQUIRE(forward_end(f[1], &err) == 0);
        }
        float *whole = tf_eval(m, ids, T, step, MATMUL_GGML, DELTANET_AUTO, 2, true);
        CHECK_MSG(whole && memcmp(whole, logits, sizeof(float) * (size_t)T * V) == 0,
                  "%s: stages bound to parts of the registry give other logits", names[k]);
        free(whole), free(hidden), free(logits), free(ids);
        for (int i = 0; i < 2; i++) seqstate_free(s[i]), forward_free(f[i]), backend_destroy(be[i]), free(w[i]);
        model_free(m);
    }
}
