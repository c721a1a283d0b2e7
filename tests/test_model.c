/* test_model.c — model binding and sequence state: precise errors for missing or mis-shaped tensors and
 * bad keys, a broken MTP block dropped with its reason, context-full and bad-token errors that leave the state
 * untouched, snapshots that restore exactly, batched decode equal to one-by-one decode. */
#include "test.h"
#include "test_forward.h"

#include "cli/tokens_file.h"
#include "deltallm.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rewrites a model file: every KV copied except `drop_key` (set to `u32_value` when >= 0), every tensor
 * copied except `drop_tensor`; `reshape` (if set) gets ne[1] + 1 rows of garbage; extra tensors named
 * blk.<extra_block>.* duplicate blk.<from_block>.* (plus an MTP tensor). Returns the path. */
typedef struct Rewrite {
    const char *drop_key;
    long long u32_value;
    const char *add_key; /* another u32 key to add */
    long long add_value;
    const char *drop_tensor;
    const char *reshape;
    int extra_block, from_block;
} Rewrite;

static const char *rewrite(const char *src, const char *name, const Rewrite *rw) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", test_tmpdir(), name);
    Err err = {{0}};
    Gguf *g = gguf_open(src, &err);
    if (!g) return NULL;
    GgufWriter *w = gguf_writer_new(gguf_alignment(g));
    const char *skip[1] = {rw->drop_key};
    gguf_w_copy_kv(w, g, skip, rw->drop_key ? 1 : 0);
    if (rw->drop_key && rw->u32_value >= 0) gguf_w_u32(w, rw->drop_key, (uint32_t)rw->u32_value);
    if (rw->add_key) gguf_w_u32(w, rw->add_key, (uint32_t)rw->add_value);
    void *junk = calloc(1, 1 << 22);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const GgufTensor *t = gguf_tensor(g, i);
        if (rw->drop_tensor && strcmp(t->name, rw->drop_tensor) == 0) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        const void *data = t->data;
        if (rw->reshape && strcmp(t->name, rw->reshape) == 0) ne[1] += 1, data = junk;
        gguf_w_tensor(w, t->name, t->type, t->n_dims, ne, data, NULL, NULL, &err);
    }
    if (rw->extra_block > 0) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blk.%d.", rw->from_block);
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const GgufTensor *t = gguf_tensor(g, i);
            if (strncmp(t->name, prefix, strlen(prefix)) != 0) continue;
            char nm[GGUF_MAX_NAME];
            snprintf(nm, sizeof nm, "blk.%d.%s", rw->extra_block, t->name + strlen(prefix));
            gguf_w_tensor(w, nm, t->type, t->n_dims, t->ne, t->data, NULL, NULL, &err);
        }
        const GgufTensor *e = gguf_find_tensor(g, "token_embd.weight");
        int64_t ne[2] = {2 * e->ne[0], e->ne[0]};
        char nm[GGUF_MAX_NAME];
        snprintf(nm, sizeof nm, "blk.%d.nextn.eh_proj.weight", rw->extra_block);
        gguf_w_tensor(w, nm, 0, 2, ne, junk, NULL, NULL, &err);
    }
    int rc = gguf_writer_write_file(w, path, &err);
    gguf_writer_free(w);
    gguf_close(g);
    free(junk);
    return rc ? NULL : path;
}

static const char *M7 = "models/m7-qwen35-wide-q8_0.gguf";

TEST(model, binding_errors_name_the_tensor) {
    Err err = {{0}};
    const char *p = rewrite(test_data(M7), "missing.gguf", &(Rewrite){.drop_tensor = "blk.1.ssm_out.weight", .u32_value = -1});
    REQUIRE(p);
    Model *m = model_load(p, &err);
    CHECK(!m);
    CHECK_MSG(strstr(err.msg, "missing tensor 'blk.1.ssm_out.weight'"), "got: %s", err.msg);
    model_free(m);

    err_clear(&err);
    p = rewrite(test_data(M7), "shape.gguf", &(Rewrite){.reshape = "blk.3.attn_k.weight", .u32_value = -1});
    REQUIRE(p);
    m = model_load(p, &err);
    CHECK(!m);
    CHECK_MSG(strstr(err.msg, "tensor 'blk.3.attn_k.weight': expected shape {256, 256}, found {256, 257}"), "got: %s",
              err.msg);
    model_free(m);

    err_clear(&err);
    p = rewrite(test_data(M7), "nokey.gguf", &(Rewrite){.drop_key = "qwen35.ssm.state_size", .u32_value = -1});
    REQUIRE(p);
    m = model_load(p, &err);
    CHECK(!m);
    CHECK_MSG(strstr(err.msg, "qwen35.ssm.state_size"), "got: %s", err.msg);
    model_free(m);

    err_clear(&err);
    p = rewrite(test_data(M7), "badratio.gguf", &(Rewrite){.drop_key = "qwen35.ssm.group_count", .u32_value = 3});
    REQUIRE(p);
    m = model_load(p, &err);
    CHECK(!m);
    CHECK_MSG(strstr(err.msg, "not a multiple"), "got: %s", err.msg);
    model_free(m);

    err_clear(&err);
    m = model_load(test_data("vocab/ggml-vocab-qwen35.gguf"), &err);
    CHECK(!m);
    CHECK_MSG(strstr(err.msg, "unknown architecture 'qwen2'"), "got: %s", err.msg);
}

static float *eval_all(const char *path, const int32_t *ids, int T) {
    Err err = {{0}};
    Model *m = model_load(path, &err);
    if (!m) return test_check(false, __FILE__, __LINE__, "model_load", "%s", err.msg), NULL;
    float *out = tf_eval(m, ids, T, 0, MATMUL_GGML, DELTANET_AUTO, 2, false);
    model_free(m);
    return out;
}

TEST(model, mtp_blocks_skipped) {
    /* the same model with one more (MTP) block: block_count 5, nextn_predict_layers 1 */
    const char *p = rewrite(test_data(M7), "mtp.gguf",
                            &(Rewrite){.drop_key = "qwen35.block_count", .u32_value = 5,
                                       .add_key = "qwen35.nextn_predict_layers", .add_value = 1, .extra_block = 4,
                                       .from_block = 3});
    REQUIRE(p);
    Err err = {{0}};
    Model *m = model_load(p, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    CHECK(m->cfg.n_layer == 4 && m->cfg.n_layer_all == 5 && m->cfg.n_nextn == 1 && !m->cfg.recurrent[4]);
    /* the block lacks its enorm: the model runs without MTP and says why */
    CHECK(m->n_mtp == 0);
    CHECK_MSG(strstr(m->mtp_missing, "missing tensor 'blk.4.nextn.enorm.weight'"), "got: %s", m->mtp_missing);
    for (int i = 0; i < m->n_weights; i++) CHECK_MSG(m->weights[i].layer < 4, "%s bound", m->weights[i].name);
    model_free(m);
    int32_t *ids;
    int T;
    REQUIRE(tokens_file_read(test_data("seqs/m7-qwen35-wide-q8_0/len65.txt"), &ids, &T, &err) == 0);
    float *a = eval_all(test_data(M7), ids, T), *b = eval_all(p, ids, T);
    REQUIRE(a && b);
    CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)T * 1003) == 0, "logits differ with an MTP block present");
    free(a), free(b), free(ids);
}

static DlEngine *open_engine_mode(const char *model, int n_ctx, int n_seq, bool exact) {
    DlEngineParams p;
    dl_engine_params_init(&p);
    p.exact = exact;
    p.model_path = test_data(model);
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_threads = 2;
    DlError err = {{0}};
    DlEngine *e = dl_engine_open(&p, &err);
    CHECK_MSG(e, "%s", err.msg);
    return e;
}

static DlEngine *open_engine(const char *model, int n_ctx, int n_seq) { return open_engine_mode(model, n_ctx, n_seq, false); }

TEST(model, context_full_and_bad_tokens_leave_state) {
    DlEngine *e = open_engine("models/m4-qwen35moe-q8_0.gguf", 16, 1);
    REQUIRE(e);
    DlError err = {{0}};
    DlSession *s = dl_session_new(e, &err);
    REQUIRE(s);
    int32_t ids[20];
    for (int i = 0; i < 20; i++) ids[i] = 10 + i;
    REQUIRE(dl_session_eval(s, ids, 10, &err) == 0);
    CHECK(dl_session_eval(s, ids, 7, &err) == -1);
    CHECK_MSG(strstr(err.msg, "context full: 10 tokens + 7 new exceed the context size 16"), "got: %s", err.msg);
    CHECK(dl_session_n_past(s) == 10);
    int32_t bad[2] = {5, 5000};
    CHECK(dl_session_eval(s, bad, 2, &err) == -1);
    CHECK_MSG(strstr(err.msg, "token id 5000 out of range"), "got: %s", err.msg);
    CHECK(dl_session_n_past(s) == 10);
    CHECK(dl_session_eval(s, ids, 6, &err) == 0 && dl_session_n_past(s) == 16);
    dl_session_free(s);
    dl_engine_close(e);
}

TEST(model, snapshot_restore_is_exact) {
    DlEngine *e = open_engine("models/m2-qwen3next-new-mixed.gguf", 64, 1);
    REQUIRE(e);
    DlError err = {{0}};
    DlSession *s = dl_session_new(e, &err), *t = dl_session_new(e, &err);
    REQUIRE(s && t);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (i * 37) % 500;
    REQUIRE(dl_session_eval(s, ids, 20, &err) == 0);
    size_t n = dl_session_snapshot_size(s);
    void *buf = malloc(n);
    REQUIRE(dl_session_snapshot(s, buf, n, &err) == 0);
    REQUIRE(dl_session_eval(s, ids + 20, 20, &err) == 0);
    const int V = dl_engine_info(e)->n_vocab;
    float *cold = malloc(sizeof(float) * (size_t)V);
    memcpy(cold, dl_session_logits(s), sizeof(float) * (size_t)V);
    /* restore into another session and continue: identical logits */
    REQUIRE(dl_session_restore(t, buf, n, &err) == 0);
    CHECK(dl_session_n_past(t) == 20);
    REQUIRE(dl_session_eval(t, ids + 20, 20, &err) == 0);
    CHECK(memcmp(cold, dl_session_logits(t), sizeof(float) * (size_t)V) == 0);
    /* a corrupted snapshot is refused */
    ((char *)buf)[0] ^= 1;
    CHECK(dl_session_restore(t, buf, n, &err) == -1);
    CHECK(dl_session_restore(t, buf, n / 2, &err) == -1);
    free(buf), free(cold);
    dl_session_free(s), dl_session_free(t);
    dl_engine_close(e);
}

/* In exact mode every op is independent of the batch: bitwise equal. So is the fast arithmetic (the default:
 * batch-invariant products, and the conv and delta rule of all the sessions in one op, conv_silu_seqs /
 * deltanet_seqs, with each session's single-call bits). `bitwise` false: agree to float rounding only (kept for
 * the MoE model's check). n sessions (≤ 5), prompts of different lengths. */
static void batched_vs_single_n(const char *model, bool exact, bool bitwise, int n) {
    DlEngine *e = open_engine_mode(model, 64, n, exact);
    REQUIRE(e);
    DlError err = {{0}};
    DlSession *s[5], *r[5];
    const int V = dl_engine_info(e)->n_vocab;
    int32_t prompt[5][9];
    for (int k = 0; k < n; k++) {
        s[k] = dl_session_new(e, &err);
        r[k] = dl_session_new(e, &err);
        REQUIRE(s[k] && r[k]);
        for (int i = 0; i < 9; i++) prompt[k][i] = (7 * i + 100 * k) % 500;
        REQUIRE(dl_session_eval(s[k], prompt[k], 5 + k, &err) == 0);
        REQUIRE(dl_session_eval(r[k], prompt[k], 5 + k, &err) == 0);
    }
    for (int step = 0; step < 4; step++) {
        int32_t tok[5] = {11 + step, 22 + step, 33 + step, 44 + step, 55 + step};
        REQUIRE(dl_decode_batch(s, tok, n, &err) == 0);
        for (int k = 0; k < n; k++) {
            REQUIRE(dl_session_eval(r[k], &tok[k], 1, &err) == 0);
            const float *a = dl_session_logits(s[k]), *b = dl_session_logits(r[k]);
            double d = 0, m = 0;
            for (int v = 0; v < V; v++) d = fmax(d, fabs((double)a[v] - b[v])), m = fmax(m, fabs(a[v]));
            if (bitwise)
                CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)V) == 0, "%s session %d step %d: batched decode differs (max|d| %.3g)",
                          model, k, step, d);
            else
                CHECK_MSG(d <= 1e-4 * m, "session %d step %d: batched vs single max|d| %.3g (max|logit| %.3g)", k, step,
                          d, m);
        }
    }
    for (int k = 0; k < n; k++) dl_session_free(s[k]), dl_session_free(r[k]);
    dl_engine_close(e);
}
static void batched_vs_single(const char *model, bool exact) { batched_vs_single_n(model, exact, exact, 3); }

TEST(model, batched_decode_exact_bitwise) { batched_vs_single("models/m6-qwen35moe-iq2xxs.gguf", true); }
/* the fast arithmetic: a session decoded beside 4 others gives the bits it gives alone (qwen35 and qwen3next) */
TEST(model, batched_decode_fast_bitwise) {
    batched_vs_single_n("models/m3-qwen35-dense-bf16.gguf", false, true, 5);
    batched_vs_single_n("models/m8-qwen3next-wide-mixed.gguf", false, true, 5);
}
TEST(model, batched_decode_default_close) { batched_vs_single("models/m4-qwen35moe-q8_0.gguf", false); }
