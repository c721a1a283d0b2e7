/* test_convert.c — `deltallm convert` and its safetensors reader.
 *
 * The reader: corrupt and hostile files, each refused with one line (truncated header, header length past
 * the end, offsets outside the data, overlapping tensors, gaps, wrong byte sizes for the dtype, absurd
 * shapes, bad JSON and escapes, duplicates), and valid files read back exactly. The committed seeds of the
 * fuzzer (tests/fuzz/fuzz_safetensors.c) are written here with DELTALLM_WRITE_SEEDS set.
 *
 * The converter (needs python3 with numpy for tools/train/gguf_to_hf.py, which .ci/run installs): test
 * models exported to the Hugging Face layout and converted back reproduce llama.cpp's stored logits, and
 * the trained default model round-trips GGUF → HF → GGUF with identical tensor bytes. */
#include "test.h"

#include "convert/convert.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* header JSON + data → a safetensors image */
static uint8_t *st_image(const char *json, const void *data, size_t ndata, size_t *size) {
    size_t h = strlen(json);
    *size = 8 + h + ndata;
    uint8_t *img = malloc(*size);
    for (int i = 0; i < 8; i++) img[i] = (uint8_t)((uint64_t)h >> (8 * i));
    memcpy(img + 8, json, h);
    if (ndata) memcpy(img + 8 + h, data, ndata);
    return img;
}

static bool refused(const uint8_t *img, size_t size, const char *want, const char *label) {
    Err err = {{0}};
    StFile *f = st_open_memory(img, size, &err);
    if (f) {
        st_close(f);
        return CHECK_MSG(false, "%s: accepted", label);
    }
    bool ok = CHECK_MSG(err.msg[0] && !strchr(err.msg, '\n'), "%s: not one line: '%s'", label, err.msg);
    return ok && CHECK_MSG(!want || strstr(err.msg, want), "%s: '%s' does not say '%s'", label, err.msg, want);
}

static void refuse_json(const char *json, size_t ndata, const char *want, const char *label) {
    uint8_t data[256] = {0};
    size_t size;
    uint8_t *img = st_image(json, data, ndata, &size);
    refused(img, size, want, label);
    free(img);
}

TEST(convert, safetensors_reads_valid_files) {
    const float a[6] = {1, 2, 3, 4, 5, 6};
    const uint16_t b[2] = {0x3c00, 0xc000};
    uint8_t data[28];
    memcpy(data, b, 4);
    memcpy(data + 4, a, 24);
    const char *json = "{\"__metadata__\":{\"format\":\"pt\"},\"z.w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[4,28]},"
                       "\"a\\u00e9\":{\"shape\":[2],\"dtype\":\"F16\",\"data_offsets\":[0,4]},"
                       "\"empty\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[28,28]}}   ";
    size_t size;
    uint8_t *img = st_image(json, data, sizeof data, &size);
    Err err = {{0}};
    StFile *f = st_open_memory(img, size, &err);
    REQUIRE_MSG(f != NULL, "%s", err.msg);
    CHECK(st_n_tensors(f) == 3);
    CHECK(!strcmp(st_tensor(f, 0)->name, "a\xc3\xa9")); /* name order; \u escape decoded */
    const StTensor *t = st_find(f, "z.w");
    REQUIRE(t != NULL);
    CHECK(t->dtype == ST_F32 && t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->n_elements == 6);
    CHECK(memcmp(t->data, a, sizeof a) == 0);
    CHECK(st_find(f, "empty")->n_elements == 0 && st_find(f, "nope") == NULL);
    st_close(f);
    free(img);
}

TEST(convert, safetensors_refuses_corrupt_files) {
    uint8_t tiny[5] = {1, 2, 3, 4, 5};
    refused(tiny, sizeof tiny, "shorter than the 8-byte header length", "truncated header");
    size_t size;
    uint8_t *img = st_image("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", "\0\0\0\0", 4, &size);
    refused(img, 20, "past the end", "header cut short (file truncated inside the JSON)");
    img[0] = 0xff, img[7] = 0x7f;
    refused(img, size, "past the end", "header length past EOF");
    free(img);
    static const struct {
        const char *json;
        size_t ndata;
        const char *want, *label;
    } cases[] = {
        {"[]", 0, "does not start with '{'", "not an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "outside the", "offsets outside the data"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,4]}}", 8, "outside the", "begin after end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "overlap", "overlapping tensors"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "unindexed", "a gap before a tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "after the last", "trailing data"},
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "need 6", "wrong byte size for the dtype"},
        {"{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype", "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 4, "absurd shape", "absurd shape (overflow)"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[1125899906842624,1024],\"data_offsets\":[0,8]}}", 8, "absurd shape", "absurd shape (2^60 elements)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "dimensions", "too many dims"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "non-negative integer", "negative dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, "integer", "fractional dim"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,4]}}", 4, "too large", "huge integer"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "missing data_offsets", "missing key"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown key", "unknown key"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "duplicate", "duplicate key"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "duplicate tensor name", "duplicate tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}", 4, "expected", "unterminated object"},
        {"{\"a\\q\":{}}", 0, "bad escape", "bad escape"},
        {"{\"a\\ud800\":{}}", 0, "surrogate", "lone surrogate"},
        {"{\"a\xff\":{}}", 0, "UTF-8", "invalid UTF-8"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", 4, "trailing bytes", "junk after the JSON"},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "empty name", "empty name"},
        {"{\"__metadata__\":{\"a\":1}}", 0, NULL, "metadata value not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) refuse_json(cases[i].json, cases[i].ndata, cases[i].want, cases[i].label);
}

/* The fuzzer's seeds: valid files and near-misses. DELTALLM_WRITE_SEEDS=DIR writes them. */
TEST(convert, safetensors_fuzz_seeds) {
    static const char *const seeds[] = {
        "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
        "{\"a\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[8,16]}}",
        "{\"x\\u0041\\n\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
        "{}",
    };
    const char *dir = getenv("DELTALLM_WRITE_SEEDS");
    uint8_t data[16] = {0};
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        size_t size;
        uint8_t *img = st_image(seeds[i], data, i == 4 ? 0 : 16, &size);
        Err err = {{0}};
        StFile *f = st_open_memory(img, size, &err);
        CHECK_MSG((f != NULL) == (i != 3), "seed %zu: %s", i, err.msg);
        st_close(f);
        if (dir) {
            char path[512];
            snprintf(path, sizeof path, "%s/seed%zu.safetensors", dir, i);
            FILE *o = fopen(path, "wb");
            if (CHECK(o != NULL)) fwrite(img, 1, size, o), fclose(o);
        }
        free(img);
    }
}

/* ---- the converter on exported test models ------------------------------------------------------------ */

#include <math.h>

#include "cli/tokens_file.h"
#include "model/model.h"
#include "test_forward.h"

/* max |a − b| / std(a) over T rows of V, and the rows whose argmax differs (shared with test_trained.c) */
double logits_rel_diff(const float *a, const float *b, int T, int V, int *top_bad) {
    double s = 0, s2 = 0, md = 0;
    const size_t n = (size_t)T * V;
    for (size_t i = 0; i < n; i++) s += a[i], s2 += (double)a[i] * a[i], md = fmax(md, fabs((double)a[i] - b[i]));
    *top_bad = 0;
    for (int t = 0; t < T; t++) {
        int x = 0, y = 0;
        for (int v = 1; v < V; v++) {
            if (a[(size_t)t * V + v] > a[(size_t)t * V + x]) x = v;
            if (b[(size_t)t * V + v] > b[(size_t)t * V + y]) y = v;
        }
        *top_bad += x != y;
    }
    return md / sqrt(s2 / (double)n - (s / (double)n) * (s / (double)n));
}

static const char *python(void) { return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3"; }

/* tools/train/gguf_to_hf.py MODEL OUT [--shards=N]; returns the output directory or NULL */
static const char *export_hf(const char *model_rel, const char *tag, int shards) {
    static char dir[8][512];
    static int k;
    char *d = dir[k++ % 8], cmd[2048];
    snprintf(d, 512, "%s/hf-%s", test_tmpdir(), tag);
    snprintf(cmd, sizeof cmd, "%s tools/train/gguf_to_hf.py %s %s --shards=%d > %s.log 2>&1", python(), test_data(model_rel), d,
             shards, d);
    int rc = system(cmd);
    return CHECK_MSG(rc == 0, "gguf_to_hf.py %s failed (python3 with numpy needed; see %s.log)", model_rel, d) ? d : NULL;
}

static const char *convert_to(const char *dir, const char *tag, HfOutType type) {
    static char out[8][512];
    static int k;
    char *o = out[k++ % 8];
    snprintf(o, 512, "%s/cv-%s.gguf", test_tmpdir(), tag);
    HfConvertOpts opts = {.dir = dir, .out = o, .type = type};
    Err err = {{0}};
    return CHECK_MSG(hf_convert(&opts, &err) == 0, "convert %s: %s", dir, err.msg) ? o : NULL;
}

/* Every tensor of a in b with the same type, shape (trailing 1s aside) and bytes; ssm_a values may be one ulp
 * apart (a random ssm_a need not be −exp of any F32). Returns the number of such ulp differences, -1 on a
 * real difference. */
static int same_tensors(const char *pa, const char *pb, const char *skip) {
    Err err = {{0}};
    Gguf *a = gguf_open(pa, &err), *b = a ? gguf_open(pb, &err) : NULL;
    int ulps = 0, bad = 0;
    if (!CHECK_MSG(a && b, "%s", err.msg)) goto done;
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const GgufTensor *x = gguf_tensor(a, i), *y = gguf_find_tensor(b, x->name);
        if (skip && strstr(x->name, skip)) continue;
        if (!CHECK_MSG(y != NULL, "%s: missing after the round trip", x->name)) {
            bad++;
            continue;
        }
        if (!CHECK_MSG(x->type == y->type && x->n_elements == y->n_elements && x->ne[0] == y->ne[0] && x->nbytes == y->nbytes,
                       "%s: type %u / %u, ne0 %lld / %lld", x->name, x->type, y->type, (long long)x->ne[0], (long long)y->ne[0])) {
            bad++;
            continue;
        }
        if (!memcmp(x->data, y->data, x->nbytes)) continue;
        const bool ssm_a = strstr(x->name, "ssm_a") != NULL;
        for (uint64_t e = 0; ssm_a && e < x->n_elements; e++) {
            int32_t u, v;
            memcpy(&u, (const char *)x->data + 4 * e, 4), memcpy(&v, (const char *)y->data + 4 * e, 4);
            if (u != v) ulps += abs(u - v) == 1 ? 1 : 1000;
        }
        if (!CHECK_MSG(ssm_a, "%s: data differs", x->name)) bad++;
    }
    CHECK_MSG(ulps < 1000, "ssm_a values more than one ulp apart");
done:
    gguf_close(a);
    gguf_close(b);
    return bad || ulps >= 1000 ? -1 : ulps;
}

/* default-mode logits of a model on a stored sequence, against llama.cpp's stored prefill logits */
static void logits_vs_llama(const char *gguf_path, const char *model, double max_rel, bool *bitwise) {
    char rel[256];
    snprintf(rel, sizeof rel, "seqs/%s/len64.txt", model);
    Err err = {{0}};
    int32_t *ids = NULL;
    int T = 0;
    if (!CHECK_MSG(tokens_file_read(test_data(rel), &ids, &T, &err) == 0, "%s", err.msg)) return;
    Model *m = model_load(gguf_path, &err);
    float *lg = m ? tf_eval(m, ids, T, 0, MATMUL_GGML, DELTANET_AUTO, 2, true) : NULL, *ref = NULL;
    const int V = m ? m->cfg.n_vocab : 0;
    if (CHECK_MSG(lg != NULL, "%s", err.msg)) {
        snprintf(rel, sizeof rel, "ref/%s/len64.prefill.f32", model);
        size_t n = 0;
        ref = test_read_file(test_data(rel), &n);
        if (CHECK(ref && n == sizeof(float) * (size_t)T * V)) {
            int top_bad = 0;
            const double r = logits_rel_diff(ref, lg, T, V, &top_bad);
            *bitwise = memcmp(ref, lg, n) == 0;
            test_note("%s converted from HF: max |Δ| / std vs llama.cpp %.3g%s, top-1 differs at %d of %d", model, r,
                      *bitwise ? " (bit-identical)" : "", top_bad, T);
            CHECK_MSG(r <= max_rel && top_bad == 0, "%s: %.3g of std, %d top-1 differences", model, r, top_bad);
        }
    }
    free(ref), free(lg), free(ids);
    model_free(m);
}

TEST(convert, qwen35_sharded_checkpoint) {
    const char *hf = export_hf("models/m5-qwen35-7layer-int3-f16.gguf", "m5", 3); /* r = 3 V heads per key head */
    const char *out = hf ? convert_to(hf, "m5", HF_OUT_AUTO) : NULL;           /* auto: F16 from the F16 matrices */
    if (!out) return;
    int ulps = same_tensors(test_data("models/m5-qwen35-7layer-int3-f16.gguf"), out, NULL);
    test_note("m5 (qwen35, 3 shards + index): every tensor equal, %d ssm_a values one ulp apart", ulps);
    CHECK(ulps >= 0 && ulps <= 8);
}

TEST(convert, qwen35moe_fused_experts) {
    const char *hf = export_hf("models/m4-qwen35moe-q8_0.gguf", "m4", 1);
    const char *out = hf ? convert_to(hf, "m4", HF_OUT_Q8_0) : NULL;
    if (!out) return;
    int ulps = same_tensors(test_data("models/m4-qwen35moe-q8_0.gguf"), out, NULL);
    CHECK(ulps >= 0 && ulps <= 8);
    bool bitwise = false;
    logits_vs_llama(out, "m4-qwen35moe-q8_0", 1e-4, &bitwise);
}

TEST(convert, qwen3next_qkvz_and_per_expert_tensors) {
    const char *hf = export_hf("models/m1-qwen3next-legacy-f32.gguf", "m1", 1); /* legacy ssm_in = HF in_proj_qkvz */
    const char *out = hf ? convert_to(hf, "m1", HF_OUT_F32) : NULL;
    if (!out) return;
    Err err = {{0}};
    Gguf *g = gguf_open(out, &err);
    REQUIRE_MSG(g != NULL, "%s", err.msg);
    CHECK(gguf_find_tensor(g, "blk.0.attn_qkv.weight") && gguf_find_tensor(g, "blk.0.attn_gate.weight") &&
          !gguf_find_tensor(g, "blk.0.ssm_in.weight") && gguf_find_tensor(g, "blk.0.ffn_gate_exps.weight"));
    gguf_close(g);
    bool bitwise = false;
    logits_vs_llama(out, "m1-qwen3next-legacy-f32", 1e-4, &bitwise);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

TEST(convert, refuses_bad_checkpoints) {
    const char *hf = export_hf("models/m3-qwen35-dense-bf16.gguf", "m3bad", 1);
    if (!hf) return;
    char path[600], cmd[1400];
    Err err = {{0}};
    HfConvertOpts o = {.dir = "/nonexistent-dir", .out = "/dev/null"};
    CHECK(hf_convert(&o, &err) != 0 && err.msg[0] && !strchr(err.msg, '\n'));
    /* a truncated shard */
    snprintf(cmd, sizeof cmd, "cp -r %s %s-trunc && truncate -s 5000 %s-trunc/model.safetensors", hf, hf, hf);
    REQUIRE(system(cmd) == 0);
    snprintf(path, sizeof path, "%s-trunc", hf);
    o.dir = path, err_clear(&err);
    CHECK(hf_convert(&o, &err) != 0 && strstr(err.msg, "model.safetensors") && !strchr(err.msg, '\n'));
    test_note("truncated shard: %s", err.msg);
    /* an architecture that is not ours */
    snprintf(cmd, sizeof cmd, "cp -r %s %s-arch", hf, hf);
    REQUIRE(system(cmd) == 0);
    snprintf(path, sizeof path, "%s-arch/config.json", hf);
    write_text(path, "{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2}");
    snprintf(path, sizeof path, "%s-arch", hf);
    o.dir = path, err_clear(&err);
    CHECK(hf_convert(&o, &err) != 0 && strstr(err.msg, "LlamaForCausalLM"));
    /* config.json that is not JSON */
    snprintf(path, sizeof path, "%s-arch/config.json", hf);
    write_text(path, "{\"architectures\": [");
    snprintf(path, sizeof path, "%s-arch", hf);
    err_clear(&err);
    CHECK(hf_convert(&o, &err) != 0 && strstr(err.msg, "not valid JSON"));
    /* head counts that do not match the tensors */
    snprintf(cmd, sizeof cmd, "cp -r %s %s-heads && sed -i 's/\"linear_num_value_heads\": 4/\"linear_num_value_heads\": 2/' %s-heads/config.json", hf,
             hf, hf);
    REQUIRE(system(cmd) == 0);
    snprintf(path, sizeof path, "%s-heads", hf);
    o.dir = path, err_clear(&err);
    int rc = hf_convert(&o, &err);
    CHECK_MSG(rc != 0 && !strchr(err.msg, '\n'), "mismatched head count accepted");
    test_note("mismatched heads: %s", err.msg);
}
