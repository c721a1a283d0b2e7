/* convert_vocab.c — the tokenizer metadata of a converted checkpoint, as llama.cpp's converter writes it
 * for byte-level BPE (conversion/base.py _set_vocab_gpt2, gguf-py SpecialVocab):
 *   tokenizer.ggml.model "gpt2", .pre, .tokens (vocab + added tokens, [PADi] up to vocab_size), .token_type
 *   (normal 1, control 3 for special or special-looking added tokens, user-defined 4, unused 5), .merges
 *   ("a b"; pairs joined, a space inside a part written as U+0120 as the converter does), the special ids
 *   bos/eos/unk/sep/pad/cls/mask from tokenizer_config.json (content looked up in added_tokens), then from
 *   config.json, add_*_token flags, and the chat template (tokenizer_config.json, else chat_template.jinja).
 * tokenizer.ggml.pre: llama.cpp identifies the pre-tokenizer by hashing the tokenization of a test text;
 * we read the Split regex of tokenizer.json instead: one with \p{M} is Qwen3.5's (`qwen35`), else `qwen2`
 * (the only two these archs use). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/convert_internal.h"

cJSON *cv_read_json(const char *dir, const char *name, bool required, Err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (required) err_set(err, "%s: cannot open", path);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 && n < (1L << 30) ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(buf);
        err_set(err, "%s: cannot read", path);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    cJSON *j = cJSON_ParseWithLength(buf, (size_t)n);
    free(buf);
    if (!j) err_set(err, "%s: not valid JSON", path);
    return j;
}

const cJSON *cv_hparam(const cJSON *cfg, const char *key) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
    const cJSON *v = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, key) : NULL;
    return v ? v : cJSON_GetObjectItemCaseSensitive(cfg, key);
}

static bool looks_special(const char *t) {
    size_t n = strlen(t);
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]")) return true;
    if (n >= 4 && !strncmp(t, "<|", 2) && !strcmp(t + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(t, "<\xef\xbd\x9c", 4) && !strcmp(t + n - 4, "\xef\xbd\x9c>")) return true;
    return n >= 8 && !strncmp(t, "<unused", 7) && t[n - 1] == '>';
}

/* the content of a tokenizer_config entry: a string or {"content": string} */
static const char *entry_content(const cJSON *e) {
    if (cJSON_IsString(e)) return e->valuestring;
    const cJSON *c = cJSON_IsObject(e) ? cJSON_GetObjectItemCaseSensitive(e, "content") : NULL;
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* "a b" from a merge given as a string or as a pair; spaces inside pair parts become U+0120 */
static char *merge_text(const cJSON *m) {
    if (cJSON_IsString(m)) return strdup(m->valuestring);
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2) return NULL;
    const cJSON *a = cJSON_GetArrayItem(m, 0), *b = cJSON_GetArrayItem(m, 1);
    if (!cJSON_IsString(a) || !cJSON_IsString(b)) return NULL;
    size_t n = strlen(a->valuestring) + strlen(b->valuestring);
    char *out = malloc(2 * n + 2), *o = out;
    if (!out) return NULL;
    for (int part = 0; part < 2; part++) {
        for (const char *s = part ? b->valuestring : a->valuestring; *s; s++) {
            if (*s == ' ') *o++ = '\xc4', *o++ = '\xa0'; /* U+0120 */
            else *o++ = *s;
        }
        if (!part) *o++ = ' ';
    }
    *o = '\0';
    return out;
}

int cv_write_vocab(GgufWriter *w, const char *dir, const cJSON *cfg, int n_vocab, Err *err) {
    int rc = -1;
    cJSON *tj = cv_read_json(dir, "tokenizer.json", true, err);
    cJSON *tc = cv_read_json(dir, "tokenizer_config.json", false, err);
    char **toks = NULL, **merges = NULL;
    int32_t *types = NULL;
    int n_merges = 0;
    if (!tj) goto done;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") || !cJSON_IsObject(vocab)) {
        err_set(err, "tokenizer.json: not a byte-level BPE tokenizer (deltallm converts the Qwen tokenizers)");
        goto done;
    }
    toks = calloc((size_t)n_vocab, sizeof *toks);
    types = calloc((size_t)n_vocab, sizeof *types);
    if (!toks || !types) goto oom;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valueint < 0 || it->valueint >= n_vocab) {
            err_set(err, "tokenizer.json: token %.60s has id %d outside the vocabulary of %d", it->string,
                    cJSON_IsNumber(it) ? it->valueint : -1, n_vocab);
            goto done;
        }
        toks[it->valueint] = it->string;
        types[it->valueint] = 1;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens");
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id"), *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(it, "special");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valueint < 0 || id->valueint >= n_vocab) {
            err_set(err, "tokenizer.json: an added token without a valid id / content");
            goto done;
        }
        toks[id->valueint] = content->valuestring;
        types[id->valueint] = cJSON_IsTrue(special) || looks_special(content->valuestring) ? 3 : 4;
    }
    char (*pads)[24] = NULL;
    int n_pad = 0;
    for (int i = 0; i < n_vocab; i++) n_pad += !toks[i];
    if (n_pad && !(pads = calloc((size_t)n_pad, sizeof *pads))) goto oom;
    for (int i = 0, k = 0; i < n_vocab; i++)
        if (!toks[i]) snprintf(pads[k], sizeof pads[k], "[PAD%d]", i), toks[i] = pads[k++], types[i] = 5;

    /* pre-tokenizer from the Split regex */
    const char *pre = "qwen2";
    char *pt = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer"));
    if (pt && strstr(pt, "\\\\p{M}")) pre = "qwen35";
    free(pt);

    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(model, "merges");
    n_merges = cJSON_GetArraySize(jm);
    if (n_merges && !(merges = calloc((size_t)n_merges, sizeof *merges))) goto oom_pads;
    for (int i = 0; i < n_merges; i++)
        if (!(merges[i] = merge_text(cJSON_GetArrayItem(jm, i)))) {
            err_set(err, "tokenizer.json: merge %d is neither \"a b\" nor a pair of strings", i);
            free(pads);
            goto done;
        }
    if (gguf_w_str(w, "tokenizer.ggml.model", "gpt2") || gguf_w_str(w, "tokenizer.ggml.pre", pre) ||
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, (uint64_t)n_vocab) ||
        gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, types, (uint64_t)n_vocab) ||
        (n_merges && gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, (uint64_t)n_merges)))
        goto oom_pads;
    free(pads);
    pads = NULL;

    /* special ids: tokenizer_config.json first, then config.json, in SpecialVocab's type order */
    static const char *const kinds[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    static const char *const keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
                                       "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
                                       "tokenizer.ggml.mask_token_id"};
    int ids[7];
    int order[14], n_order = 0;
    for (int k = 0; k < 7; k++) ids[k] = -1;
    for (int k = 0; k < 7 && tc; k++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token", kinds[k]);
        const char *content = entry_content(cJSON_GetObjectItemCaseSensitive(tc, key));
        if (!content) continue;
        cJSON_ArrayForEach(it, added) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
            if (cJSON_IsString(c) && !strcmp(c->valuestring, content)) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
                if (cJSON_IsNumber(id) && id->valueint >= 0 && id->valueint < n_vocab) ids[k] = id->valueint, order[n_order++] = k;
                break;
            }
        }
    }
    for (int k = 0; k < 7; k++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", kinds[k]);
        const cJSON *v = cv_hparam(cfg, key);
        if (ids[k] < 0 && cJSON_IsNumber(v) && v->valueint >= 0 && v->valueint < n_vocab && v->valuedouble == v->valueint)
            ids[k] = v->valueint, order[n_order++] = k;
    }
    for (int i = 0; i < n_order; i++)
        if (gguf_w_u32(w, keys[order[i]], (uint32_t)ids[order[i]])) goto oom;
    for (int k = 0; k < 7 && tc; k++) {
        char key[32], gkey[48];
        snprintf(key, sizeof key, "add_%s_token", kinds[k]);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, key);
        snprintf(gkey, sizeof gkey, "tokenizer.ggml.add_%s_token", kinds[k]);
        if (cJSON_IsBool(v) && gguf_w_bool(w, gkey, cJSON_IsTrue(v))) goto oom;
    }
    const cJSON *tmpl = tc ? cJSON_GetObjectItemCaseSensitive(tc, "chat_template") : NULL;
    if (cJSON_IsString(tmpl)) {
        if (gguf_w_str(w, "tokenizer.chat_template", tmpl->valuestring)) goto oom;
    } else if (tc) {
        char path[4096];
        snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
        FILE *f = fopen(path, "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fseek(f, 0, SEEK_SET);
            char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
            bool ok = s && fread(s, 1, (size_t)n, f) == (size_t)n;
            fclose(f);
            if (ok) s[n] = '\0';
            int r = ok ? gguf_w_str(w, "tokenizer.chat_template", s) : -1;
            free(s);
            if (r) goto oom;
        }
    }
    rc = 0;
    goto done;
oom_pads:
    free(pads);
oom:
    err_set(err, "out of memory writing the vocabulary");
done:
    for (int i = 0; i < n_merges && merges; i++) free(merges[i]);
    free(merges);
    free(toks);
    free(types);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    return rc;
}
