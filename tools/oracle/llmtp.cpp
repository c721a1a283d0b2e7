// llmtp.cpp — llama.cpp v0.4.0's MTP head on a token sequence, as common/speculative.cpp's draft-mtp drives it:
// a target context with nextn embeddings for every row (llama_set_embeddings_nextn(ctx, true, false)), an
// LLAMA_CONTEXT_TYPE_MTP context beside it (ctx_other = the target, nextn embeddings of the output rows), and
//   process(): the MTP context decodes the sequence's tokens at their positions with the target's h rows shifted
//              right by one (row p: token p, h of p − 1; the first h zero, draft-mtp's initial pending_h);
//   draft():   the next token (the target's greedy choice after the sequence) with the last h, at position T, then
//              K chained steps, each the previous draft (its argmax) with the MTP context's own h_nextn row.
// Writes OUT.main.f32 ([T][V], the target's logits), OUT.mtp.f32 ([T][V], process()'s logits), OUT.chain.f32
// ([1 + K][V], draft()'s logits) and OUT.json
// (the next token and the chained drafts). Built and run by check_mtp.sh; the result is recorded in tests/data/mtp/
// so `make test` needs no llama.cpp. Our own code; the library is the npm prebuilt (build-llref.sh fetch-prebuilt).
#include "llama.h"
#include "llama-ext.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static void die(const char *msg) {
    fprintf(stderr, "llmtp: %s\n", msg);
    exit(1);
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static void write_f32(const std::string &path, const std::vector<float> &v) {
    FILE *f = fopen(path.c_str(), "wb");
    if (!f || fwrite(v.data(), sizeof(float), v.size(), f) != v.size() || fclose(f)) die("cannot write output");
}

int main(int argc, char **argv) {
    if (argc < 4) die("usage: llmtp MODEL.gguf TOKENS(1,2,3) OUT_PREFIX [K=3] [THREADS=2] [BACKEND_DIR]");
    const char *path = argv[1], *out = argv[3];
    const int K = argc > 4 ? atoi(argv[4]) : 3, threads = argc > 5 ? atoi(argv[5]) : 2;
    std::vector<llama_token> toks;
    for (const char *s = argv[2]; *s;) {
        char *end;
        toks.push_back((llama_token)strtol(s, &end, 10));
        if (end == s) die("bad token list");
        s = *end == ',' ? end + 1 : end;
    }
    const int T = (int)toks.size();
    llama_log_set([](ggml_log_level l, const char *t, void *) { if (l >= GGML_LOG_LEVEL_WARN) fputs(t, stderr); }, nullptr);
    if (argc > 6) ggml_backend_load_all_from_path(argv[6]);
    if (ggml_backend_dev_count() == 0) ggml_backend_load_all();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mtp = true;
    llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) die("cannot load the model");
    if (llama_model_n_layer_nextn(model) < 1) die("the model has no MTP block");
    const int V = llama_vocab_n_tokens(llama_model_get_vocab(model)), E = llama_model_n_embd(model);

    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = T + K + 16 < 256 ? 256 : T + K + 16;
    cp.n_batch = cp.n_ubatch = T;
    cp.n_seq_max = 1;
    cp.n_outputs_max = 0;
    cp.n_outputs_max_per_seq = 0;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.type_k = cp.type_v = GGML_TYPE_F32; // as llref: F32 KV, no flash attention (deltallm's F32 cache)
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    llama_context *tgt = llama_init_from_model(model, cp);
    if (!tgt) die("cannot create the target context");
    llama_context_params cm = cp;
    cm.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cm.ctx_other = tgt;
    cm.n_rs_seq = 0;
    llama_context *mtp = llama_init_from_model(model, cm);
    if (!mtp) die("cannot create the MTP context");
    llama_set_embeddings_nextn(tgt, true, /*masked*/ false);
    llama_set_embeddings_nextn(mtp, true, /*masked*/ true);

    llama_batch b = llama_batch_init(T, 0, 1);
    for (int i = 0; i < T; i++) {
        b.token[i] = toks[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = T;
    if (llama_decode(tgt, b)) die("target decode failed");
    const int next = argmax(llama_get_logits_ith(tgt, T - 1), V);
    std::vector<float> main_lg((size_t)T * V);
    for (int i = 0; i < T; i++) memcpy(&main_lg[(size_t)i * V], llama_get_logits_ith(tgt, i), sizeof(float) * V);
    write_f32(std::string(out) + ".main.f32", main_lg);
    std::vector<float> h((size_t)T * E);
    for (int i = 0; i < T; i++) memcpy(&h[(size_t)i * E], llama_get_embeddings_nextn_ith(tgt, i), sizeof(float) * E);

    // process(): tokens at their positions, h shifted right by one
    llama_batch m = llama_batch_init(T, E, 1);
    m.token = (llama_token *)malloc(sizeof(llama_token) * T); // as draft-mtp: the batch needs both token and embd
    for (int i = 0; i < T; i++) {
        m.token[i] = toks[i];
        m.pos[i] = i;
        m.n_seq_id[i] = 1;
        m.seq_id[i][0] = 0;
        m.logits[i] = 1;
        if (i == 0) memset(m.embd, 0, sizeof(float) * E);
        else memcpy(m.embd + (size_t)i * E, &h[(size_t)(i - 1) * E], sizeof(float) * E);
    }
    m.n_tokens = T;
    if (llama_decode(mtp, m)) die("MTP decode failed");
    std::vector<float> lg((size_t)T * V);
    for (int i = 0; i < T; i++) memcpy(&lg[(size_t)i * V], llama_get_logits_ith(mtp, i), sizeof(float) * V);
    write_f32(std::string(out) + ".mtp.f32", lg);

    // draft(): the next token with the last h at position T, then chained steps on the MTP's own h
    std::vector<float> chain, hrow(h.end() - E, h.end());
    std::vector<int> drafts;
    llama_token tok = next;
    for (int k = 0; k <= K; k++) {
        m.n_tokens = 1;
        m.token[0] = tok;
        m.pos[0] = T + k;
        m.logits[0] = 1;
        memcpy(m.embd, hrow.data(), sizeof(float) * E);
        if (llama_decode(mtp, m)) die("MTP draft decode failed");
        const float *l = llama_get_logits_ith(mtp, 0);
        chain.insert(chain.end(), l, l + V);
        tok = argmax(l, V);
        drafts.push_back(tok);
        const float *hn = llama_get_embeddings_nextn_ith(mtp, 0);
        hrow.assign(hn, hn + E);
    }
    write_f32(std::string(out) + ".chain.f32", chain);
    FILE *j = fopen((std::string(out) + ".json").c_str(), "w");
    if (!j) die("cannot write the json");
    fprintf(j, "{\"model\": \"%s\", \"n_tokens\": %d, \"n_vocab\": %d, \"next\": %d, \"drafts\": [", path, T, V, next);
    for (size_t i = 0; i < drafts.size(); i++) fprintf(j, "%s%d", i ? ", " : "", drafts[i]);
    fprintf(j, "]}\n");
    fclose(j);
    free(m.token);
    m.token = nullptr;
    llama_batch_free(m);
    llama_batch_free(b);
    llama_free(mtp);
    llama_free(tgt);
    llama_model_free(model);
    return 0;
}
