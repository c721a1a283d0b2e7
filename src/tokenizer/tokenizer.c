/* tokenizer.c — loading a tokenizer from GGUF metadata, and encoding text.
 *
 * Loading follows llama.cpp's llama_vocab::impl::load for BPE vocabularies: token texts and types, the
 * merges, special ids from their keys, then the same text-based adjustments (end-of-turn and FIM tokens
 * found by their text get the CONTROL attribute; the EOG set) and the special-token matching order.
 * Rules llama.cpp applies only to other model families (gpt-oss, gemma4, solar, phi-3) are not here:
 * we refuse those tokenizers anyway.
 *
 * Encoding: (1) split the text on special tokens, longest text first, with llama.cpp's sequential
 * semantics (tokenizer_st_partition); (2) decode each plain-text fragment to code points, (3) split it
 * into pre-tokens (pretokenize.c), (4) BPE each pre-token (bpe.c). Steps 2-4 never look at strings of
 * the GPT-2 alphabet: bytes map straight to symbols. */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/unicode.h"

/* ------------------------------------------------------------------------------------------- helpers */

int token_ids_push(TokenIds *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *ids = realloc(v->ids, cap * sizeof *ids);
        if (!ids) return -1;
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

void token_ids_free(TokenIds *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static bool text_is(const Tokenizer *t, int32_t id, const char *s) {
    size_t n = strlen(s);
    uint32_t off = t->sym_off[id];
    return t->sym_off[id + 1] - off == n && memcmp(t->text_arena + off, s, n) == 0;
}

static bool text_in(const Tokenizer *t, int32_t id, const char *const *list) {
    for (; *list; list++)
        if (text_is(t, id, *list)) return true;
    return false;
}

/* --------------------------------------------------------------------------------- special handling */

/* Texts llama.cpp uses to find special tokens the GGUF does not name (llama-vocab.cpp, "auto-detect
 * special tokens by text"), in the order we prefer when several are present (llama.cpp takes whichever
 * its hash map yields first). */
static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        "<end_of_utterance>", NULL};
static const char *const eom_texts[] = {"<|eom_id|>", NULL};
static const char *const fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                            "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
                                            "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                            "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
                                            "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                            "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
                                            "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const fim_sep_texts[] = {"<|file_sep|>", NULL};
/* Every token with one of these texts ends generation (llama-vocab.cpp, special_eog_ids). */
static const char *const eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                        "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                                        "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                                        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                                        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                        "[e~[", NULL};

/* If *id is unset, finds the first token (in list order) whose text is in the list and makes it CONTROL. */
static void detect_by_text(Tokenizer *t, int32_t *id, const char *const *list) {
    if (*id >= 0) return;
    for (; *list; list++) {
        uint32_t s = bpe_symbol_lookup(t, *list, strlen(*list));
        if (s != SYM_NONE && s < (uint32_t)t->n_vocab) {
            *id = (int32_t)s;
            t->attr[s] |= TOKEN_ATTR_CONTROL;
            return;
        }
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int build_eog(Tokenizer *t) {
    const TokenizerSpecials *sp = &t->sp;
    TokenIds v = {0};
    int32_t fixed[] = {sp->fim_pad, sp->fim_rep, sp->fim_sep, sp->eos, sp->eot, sp->eom};
    int rc = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && rc == 0; i++)
        if (fixed[i] >= 0) rc = token_ids_push(&v, fixed[i]);
    for (int32_t id = 0; id < t->n_vocab && rc == 0; id++) {
        if (text_in(t, id, eog_texts)) {
            t->attr[id] |= TOKEN_ATTR_CONTROL;
            rc = token_ids_push(&v, id);
        }
    }
    if (rc < 0) {
        token_ids_free(&v);
        return -1;
    }
    qsort(v.ids, v.n, sizeof *v.ids, cmp_i32);
    size_t k = 0;
    for (size_t i = 0; i < v.n; i++)
        if (k == 0 || v.ids[k - 1] != v.ids[i]) v.ids[k++] = v.ids[i];
    t->eog = v.ids;
    t->n_eog = k;
    return 0;
}

/* llama.cpp matches special tokens in order of decreasing text length (ties: ascending id here; its
 * std::sort leaves them unspecified, which only matters for overlapping texts of equal length). */
static int cmp_special(const void *a, const void *b, void *ctx) {
    const Tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->sym_off[x + 1] - t->sym_off[x], ly = t->sym_off[y + 1] - t->sym_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

static int build_special_trie(Tokenizer *t) {
    const unsigned special = TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED | TOKEN_ATTR_UNKNOWN;
    int32_t n = 0;
    size_t total = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->attr[id] & special) n++, total += t->sym_off[id + 1] - t->sym_off[id];
    t->special_rank = malloc((size_t)t->n_vocab * sizeof *t->special_rank);
    if (!t->special_rank) return -1;
    for (int32_t id = 0; id < t->n_vocab; id++) t->special_rank[id] = -1;
    if (n == 0) return 0;
    int32_t *order = malloc((size_t)n * sizeof *order);
    t->trie = malloc((total + 1) * sizeof *t->trie);
    if (!order || !t->trie) {
        free(order);
        return -1;
    }
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->attr[id] & special) order[n++] = id;
    qsort_r(order, (size_t)n, sizeof *order, cmp_special, t);
    t->trie[0] = (TrieNode){0, -1, -1, -1};
    t->n_trie = 1;
    for (int32_t r = 0; r < n; r++) {
        int32_t id = order[r];
        t->special_rank[id] = r;
        const unsigned char *s = (const unsigned char *)t->text_arena + t->sym_off[id];
        uint32_t len = t->sym_off[id + 1] - t->sym_off[id];
        int32_t node = 0;
        for (uint32_t i = 0; i < len; i++) {
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != s[i]) c = t->trie[c].sibling;
            if (c < 0) {
                c = t->n_trie++;
                t->trie[c] = (TrieNode){s[i], -1, t->trie[node].child, -1};
                t->trie[node].child = c;
            }
            node = c;
        }
        t->trie[node].token = id; /* texts are unique among tokens that own their text */
        t->special_first_byte[s[0]] = true;
    }
    free(order);
    return 0;
}

/* Piece bytes of every token (llama.cpp's token_to_piece cache, special=true). */
static int build_pieces(Tokenizer *t) {
    size_t cap = t->arena_len + 1024, len = 0;
    char *arena = malloc(cap);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    if (!arena || !t->piece_off) {
        free(arena);
        return -1;
    }
    t->piece_off[0] = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const unsigned char *s = (const unsigned char *)t->text_arena + t->sym_off[id];
        size_t n = t->sym_off[id + 1] - t->sym_off[id];
        unsigned a = t->attr[id];
        bool raw = a & (TOKEN_ATTR_UNKNOWN | TOKEN_ATTR_CONTROL | TOKEN_ATTR_USER_DEFINED);
        bool decode = !raw && (a & (TOKEN_ATTR_NORMAL | TOKEN_ATTR_BYTE));
        size_t worst = raw ? n : decode ? n * (16 + n) + 16 : 0;
        if (len + worst > cap) {
            while (len + worst > cap) cap *= 2;
            char *na = realloc(arena, cap);
            if (!na) {
                free(arena);
                return -1;
            }
            arena = na;
        }
        if (raw) {
            memcpy(arena + len, s, n);
            len += n;
        } else if (decode) {
            for (size_t i = 0; i < n;) {
                size_t used;
                uint32_t cp = unicode_decode_lenient(s + i, n - i, &used);
                int b = unicode_cp_to_byte(cp);
                if (b >= 0) {
                    arena[len++] = (char)b;
                } else { /* as llama_decode_text: "[UNK_BYTE_0x<hex of the character>" + token text + "]" */
                    char u[4];
                    int k = unicode_encode(cp, u);
                    memcpy(arena + len, "[UNK_BYTE_0x", 12);
                    len += 12;
                    for (int j = 0; j < k; j++) {
                        static const char hex[] = "0123456789abcdef";
                        arena[len++] = hex[(unsigned char)u[j] >> 4];
                        arena[len++] = hex[(unsigned char)u[j] & 15];
                    }
                    memcpy(arena + len, s, n);
                    len += n;
                    arena[len++] = ']';
                }
                i += used;
            }
        }
        if (len > UINT32_MAX) {
            free(arena);
            return -1;
        }
        t->piece_off[id + 1] = (uint32_t)len;
    }
    t->piece_arena = arena;
    return 0;
}

/* --------------------------------------------------------------------------------------------- load */

static bool pre_is_qwen2(GgufStr s) {
    static const char *const names[] = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", NULL};
    for (const char *const *n = names; *n; n++)
        if (gguf_str_eq(s, *n)) return true;
    return false;
}

static int read_special_id(const Gguf *g, const char *key, int32_t n_vocab, int32_t *id, Err *err) {
    const GgufValue *v = gguf_get(g, key);
    if (!v) return 0;
    if (!gguf_type_is_int(v->type)) return err_set(err, "%s: expected an integer, got %s", key, gguf_value_type_name(v->type));
    int64_t x = (v->type == GGUF_TYPE_I8 || v->type == GGUF_TYPE_I16 || v->type == GGUF_TYPE_I32 || v->type == GGUF_TYPE_I64)
                    ? v->i : (int64_t)v->u;
    if (x >= 0 && x < n_vocab) *id = (int32_t)x; /* out of range: ignored, as llama.cpp does */
    return 0;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->sym_off);
    free(t->text_arena);
    free(t->text_slots);
    free(t->attr);
    free(t->piece_off);
    free(t->piece_arena);
    free(t->merges);
    free(t->eog);
    free(t->trie);
    free(t->special_rank);
    free(t->chat_template);
    free(t);
}

static unsigned attr_from_type(int64_t type) {
    switch (type) {
    case 1: return TOKEN_ATTR_NORMAL;
    case 2: return TOKEN_ATTR_UNKNOWN;
    case 3: return TOKEN_ATTR_CONTROL;
    case 4: return TOKEN_ATTR_USER_DEFINED;
    case 5: return TOKEN_ATTR_UNUSED;
    case 6: return TOKEN_ATTR_BYTE;
    default: return 0; /* undefined */
    }
}

static Tokenizer *load_fail(Tokenizer *t, char **overrides, uint32_t n) {
    if (overrides)
        for (uint32_t i = 0; i < n; i++) free(overrides[i]);
    free(overrides);
    tokenizer_free(t);
    return NULL;
}

Tokenizer *tokenizer_load(const Gguf *g, Err *err) {
    GgufStr model, pre;
    const GgufArray *tokens, *types = NULL, *merges = NULL;
    if (gguf_get_str(g, "tokenizer.ggml.model", &model, true, err) < 0) return NULL;
    if (!gguf_str_eq(model, "gpt2")) {
        err_set(err, "unsupported tokenizer model '%.*s' (deltallm supports byte-level BPE, tokenizer.ggml.model = gpt2)",
                (int)(model.len > 64 ? 64 : model.len), model.ptr);
        return NULL;
    }
    if (gguf_get_str(g, "tokenizer.ggml.pre", &pre, true, err) < 0) return NULL;
    TokenizerPre pre_type;
    if (pre_is_qwen2(pre)) pre_type = TOKENIZER_PRE_QWEN2;
    else if (gguf_str_eq(pre, "qwen35")) pre_type = TOKENIZER_PRE_QWEN35;
    else {
        err_set(err, "unsupported pre-tokenizer '%.*s' (deltallm supports qwen2 and qwen35)",
                (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
        return NULL;
    }
    if (gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens, true, err) < 0) return NULL;
    if (tokens->type != GGUF_TYPE_STRING || tokens->n == 0 || tokens->n > INT32_MAX / 2) {
        err_set(err, "tokenizer.ggml.tokens: expected a non-empty array of strings");
        return NULL;
    }
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &types, false, err) < 0) return NULL;
    if (types && (!gguf_type_is_int(types->type) || types->n < tokens->n)) {
        err_set(err, "tokenizer.ggml.token_type: expected %llu integers, got %llu of type %s",
                (unsigned long long)tokens->n, (unsigned long long)types->n, gguf_value_type_name(types->type));
        return NULL;
    }
    if (gguf_get_arr(g, "tokenizer.ggml.merges", &merges, true, err) < 0) return NULL;
    if (merges->type != GGUF_TYPE_STRING) {
        err_set(err, "tokenizer.ggml.merges: expected an array of strings");
        return NULL;
    }

    Tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        err_set(err, "out of memory");
        return NULL;
    }
    t->pre = pre_type;
    gguf_str_copy(pre, t->pre_name, sizeof t->pre_name);
    t->n_vocab = (int32_t)tokens->n;
    uint32_t n = (uint32_t)tokens->n;

    /* empty texts become "[EMPTY_<id>]", as in llama.cpp */
    char **overrides = NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (tokens->strs[i].len) continue;
        if (!overrides && !(overrides = calloc(n, sizeof *overrides))) goto oom;
        char buf[32];
        snprintf(buf, sizeof buf, "[EMPTY_%u]", i);
        if (!(overrides[i] = strdup(buf))) goto oom;
    }
    if (bpe_add_tokens(t, tokens->strs, n, (const char *const *)overrides) < 0) goto oom;
    if (overrides) {
        for (uint32_t i = 0; i < n; i++) free(overrides[i]);
        free(overrides);
        overrides = NULL;
    }

    t->attr = malloc(n);
    if (!t->attr) goto oom;
    for (uint32_t i = 0; i < n; i++) t->attr[i] = types ? (uint8_t)attr_from_type(gguf_arr_i64(types, i)) : TOKEN_ATTR_NORMAL;

    for (int b = 0; b < 256; b++) {
        char u[4], raw = (char)b;
        int k = unicode_encode(unicode_byte_to_cp((uint8_t)b), u);
        if ((t->byte_sym[b] = bpe_intern(t, u, (size_t)k)) == SYM_NONE) goto oom;
        uint32_t s = bpe_symbol_lookup(t, &raw, 1);
        t->single_byte_token[b] = s != SYM_NONE && s < n ? (int32_t)s : -1;
    }
    if (bpe_load_merges(t, merges, err) < 0) return load_fail(t, NULL, 0);

    /* special ids from their keys; later keys of the same id override (deprecated FIM names last) */
    TokenizerSpecials *sp = &t->sp;
    int32_t mask = -1;
    *sp = (TokenizerSpecials){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, false, false};
    struct { const char *key; int32_t *id; } keys[] = {
        {"tokenizer.ggml.bos_token_id", &sp->bos},         {"tokenizer.ggml.eos_token_id", &sp->eos},
        {"tokenizer.ggml.eot_token_id", &sp->eot},         {"tokenizer.ggml.eom_token_id", &sp->eom},
        {"tokenizer.ggml.unknown_token_id", &sp->unk},     {"tokenizer.ggml.seperator_token_id", &sp->sep},
        {"tokenizer.ggml.padding_token_id", &sp->pad},     {"tokenizer.ggml.mask_token_id", &mask},
        {"tokenizer.ggml.fim_pre_token_id", &sp->fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &sp->fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &sp->fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &sp->fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &sp->fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &sp->fim_sep},
        {"tokenizer.ggml.prefix_token_id", &sp->fim_pre},  {"tokenizer.ggml.suffix_token_id", &sp->fim_suf},
        {"tokenizer.ggml.middle_token_id", &sp->fim_mid},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (read_special_id(g, keys[i].key, t->n_vocab, keys[i].id, err) < 0) return load_fail(t, NULL, 0);
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &sp->add_bos, false, err) < 0 ||
        gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &sp->add_eos, false, err) < 0)
        return load_fail(t, NULL, 0);
    if (sp->add_bos && sp->bos < 0) {
        err_set(err, "tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
        return load_fail(t, NULL, 0);
    }
    if (sp->add_eos && sp->eos < 0) {
        err_set(err, "tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
        return load_fail(t, NULL, 0);
    }

    detect_by_text(t, &sp->eot, eot_texts);
    detect_by_text(t, &sp->eom, eom_texts);
    detect_by_text(t, &sp->fim_pre, fim_pre_texts);
    detect_by_text(t, &sp->fim_suf, fim_suf_texts);
    detect_by_text(t, &sp->fim_mid, fim_mid_texts);
    detect_by_text(t, &sp->fim_pad, fim_pad_texts);
    detect_by_text(t, &sp->fim_rep, fim_rep_texts);
    detect_by_text(t, &sp->fim_sep, fim_sep_texts);
    {
        static const char *const im_start[] = {"<|im_start|>", NULL}, *const im_end[] = {"<|im_end|>", NULL};
        uint32_t s = bpe_symbol_lookup(t, im_start[0], strlen(im_start[0]));
        sp->im_start = s != SYM_NONE && s < n ? (int32_t)s : -1;
        s = bpe_symbol_lookup(t, im_end[0], strlen(im_end[0]));
        sp->im_end = s != SYM_NONE && s < n ? (int32_t)s : -1;
    }
    /* control tokens whose text says "unused" are unused */
    for (uint32_t i = 0; i < n; i++) {
        if (!(t->attr[i] & TOKEN_ATTR_CONTROL)) continue;
        uint32_t off = t->sym_off[i], len = t->sym_off[i + 1] - off;
        if (len >= 6 && memmem(t->text_arena + off, len, "unused", 6)) t->attr[i] |= TOKEN_ATTR_UNUSED;
    }
    if (build_eog(t) < 0 || build_special_trie(t) < 0 || build_pieces(t) < 0) goto oom;

    GgufStr tmpl;
    int rc = gguf_get_str(g, "tokenizer.chat_template", &tmpl, false, err);
    if (rc < 0) return load_fail(t, NULL, 0);
    if (rc == 1) {
        if (!(t->chat_template = malloc(tmpl.len + 1))) goto oom;
        memcpy(t->chat_template, tmpl.ptr, tmpl.len);
        t->chat_template[tmpl.len] = 0;
    }
    return t;

oom:
    err_set(err, "out of memory while loading the tokenizer (%u tokens)", n);
    return load_fail(t, overrides, n);
}

/* ------------------------------------------------------------------------------------------ getters */

TokenizerPre tokenizer_pre(const Tokenizer *t) { return t->pre; }
const char *tokenizer_pre_name(const Tokenizer *t) { return t->pre_name; }
int32_t tokenizer_n_vocab(const Tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_n_merges(const Tokenizer *t) { return t->n_merges; }
const char *tokenizer_chat_template(const Tokenizer *t) { return t->chat_template; }
const TokenizerSpecials *tokenizer_specials(const Tokenizer *t) { return &t->sp; }

unsigned tokenizer_token_attr(const Tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->attr[id] : 0;
}

const char *tokenizer_token_text(const Tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    *len = t->sym_off[id + 1] - t->sym_off[id];
    return t->text_arena + t->sym_off[id];
}

int32_t tokenizer_token_id(const Tokenizer *t, const char *text, size_t len) {
    uint32_t s = bpe_symbol_lookup(t, text, len);
    return s != SYM_NONE && s < (uint32_t)t->n_vocab ? (int32_t)s : -1;
}

bool tokenizer_is_eog(const Tokenizer *t, int32_t id) {
    size_t lo = 0, hi = t->n_eog;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->eog[mid] == id) return true;
        if (t->eog[mid] < id) lo = mid + 1;
        else hi = mid;
    }
    return false;
}

size_t tokenizer_eog_ids(const Tokenizer *t, const int32_t **ids) {
    *ids = t->eog;
    return t->n_eog;
}

/* ------------------------------------------------------------------------------------------ encoding */

/* Within one long encode call most words repeat, so the ids of short words are remembered: BPE is a
 * pure function of the word's bytes. The cache lives and dies with the call (no shared state between
 * threads) and is only set up for texts long enough to profit. */
#define WORD_CACHE_MIN_TEXT 4096
#define WORD_CACHE_SLOTS (1u << 16)
#define WORD_CACHE_MAX_WORD 48
#define WORD_CACHE_MAX_FILL (WORD_CACHE_SLOTS / 2)

typedef struct WordCacheSlot {
    uint32_t hash;
    uint32_t data; /* offset into the cache arena: the word's bytes, then its ids (int32, aligned) */
    uint16_t len;  /* 0 = empty slot */
    uint16_t n_ids;
} WordCacheSlot;

typedef struct WordCache {
    WordCacheSlot *slots;
    uint32_t fill;
    char *arena;
    size_t arena_len, arena_cap;
} WordCache;

typedef struct EncodeScratch {
    uint32_t *cps;
    uint16_t *flags;
    uint32_t *ends;
    size_t cap;
    char *norm; /* re-encoded text when the input was not canonical UTF-8 */
    size_t norm_cap;
    BpeScratch bpe;
    WordCache cache;
} EncodeScratch;

static void scratch_free(EncodeScratch *s) {
    free(s->cps);
    free(s->flags);
    free(s->ends);
    free(s->norm);
    free(s->cache.slots);
    free(s->cache.arena);
    bpe_scratch_free(&s->bpe);
}

static const WordCacheSlot *cache_find(const WordCache *c, const unsigned char *w, size_t n, uint32_t h) {
    for (uint32_t i = h & (WORD_CACHE_SLOTS - 1);; i = (i + 1) & (WORD_CACHE_SLOTS - 1)) {
        const WordCacheSlot *s = &c->slots[i];
        if (!s->len) return NULL;
        if (s->hash == h && s->len == n && memcmp(c->arena + s->data, w, n) == 0) return s;
    }
}

/* Remembers the ids of word w (the last n_ids entries of out); silently does nothing when full. */
static void cache_add(WordCache *c, const unsigned char *w, size_t n, uint32_t h, const int32_t *ids, size_t n_ids) {
    if (c->fill >= WORD_CACHE_MAX_FILL || n_ids > UINT16_MAX) return;
    size_t off = (c->arena_len + 3) & ~(size_t)3, need = off + ((n + 3) & ~(size_t)3) + n_ids * sizeof *ids;
    if (need > UINT32_MAX) return;
    if (need > c->arena_cap) {
        size_t cap = c->arena_cap ? c->arena_cap * 2 : 1 << 16;
        while (cap < need) cap *= 2;
        char *a = realloc(c->arena, cap);
        if (!a) return;
        c->arena = a;
        c->arena_cap = cap;
    }
    memcpy(c->arena + off, w, n);
    memcpy(c->arena + off + ((n + 3) & ~(size_t)3), ids, n_ids * sizeof *ids);
    c->arena_len = need;
    uint32_t i = h & (WORD_CACHE_SLOTS - 1);
    while (c->slots[i].len) i = (i + 1) & (WORD_CACHE_SLOTS - 1);
    c->slots[i] = (WordCacheSlot){h, (uint32_t)off, (uint16_t)n, (uint16_t)n_ids};
    c->fill++;
}

static int encode_word(const Tokenizer *t, const unsigned char *w, size_t n, EncodeScratch *s, TokenIds *out) {
    if (!s->cache.slots || n < 2 || n > WORD_CACHE_MAX_WORD) return bpe_encode_word(t, w, n, &s->bpe, out);
    uint32_t h = bpe_text_hash((const char *)w, n) | 1;
    const WordCacheSlot *hit = cache_find(&s->cache, w, n, h);
    if (hit) {
        const int32_t *ids = (const int32_t *)(s->cache.arena + hit->data + ((hit->len + 3) & ~3u));
        for (uint16_t i = 0; i < hit->n_ids; i++)
            if (token_ids_push(out, ids[i]) < 0) return -1;
        return 0;
    }
    size_t before = out->n;
    if (bpe_encode_word(t, w, n, &s->bpe, out) < 0) return -1;
    cache_add(&s->cache, w, n, h, out->ids + before, out->n - before);
    return 0;
}

static int scratch_reserve(EncodeScratch *s, size_t n) {
    if (n <= s->cap) return 0;
    free(s->cps);
    free(s->flags);
    free(s->ends);
    s->cps = malloc(n * sizeof *s->cps);
    s->flags = malloc(n * sizeof *s->flags);
    s->ends = malloc(n * sizeof *s->ends);
    s->cap = n;
    if (!s->cps || !s->flags || !s->ends) {
        s->cap = 0;
        return -1;
    }
    return 0;
}

/* Encodes a fragment that contains no special token. */
static int encode_plain(const Tokenizer *t, const char *text, size_t len, EncodeScratch *s, TokenIds *out) {
    if (len == 0) return 0;
    if (scratch_reserve(s, len) < 0) return -1;
    bool canonical;
    size_t n = unicode_decode_lenient_all((const unsigned char *)text, len, s->cps, &canonical);
    const unsigned char *bytes = (const unsigned char *)text;
    if (!canonical) { /* BPE sees the re-encoded code points (bad bytes as U+FFFD), as in llama.cpp */
        size_t need = 0;
        for (size_t i = 0; i < n; i++) need += (size_t)unicode_encoded_len(s->cps[i]);
        if (need > s->norm_cap) {
            char *nb = realloc(s->norm, need);
            if (!nb) return -1;
            s->norm = nb;
            s->norm_cap = need;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += (size_t)unicode_encode(s->cps[i], s->norm + k);
        bytes = (const unsigned char *)s->norm;
    }
    unicode_flags_many(s->cps, s->flags, n);
    size_t n_words = pretokenize(t->pre, s->cps, s->flags, n, s->ends);
    size_t cp = 0, byte = 0;
    for (size_t w = 0; w < n_words; w++) {
        size_t start = byte;
        for (; cp < s->ends[w]; cp++) byte += (size_t)unicode_encoded_len(s->cps[cp]);
        if (encode_word(t, bytes + start, byte - start, s, out) < 0) return -1;
    }
    return 0;
}

typedef struct SpecialMatch {
    int32_t rank; /* matching order of the token */
    int32_t token;
    size_t pos, len;
} SpecialMatch;

static int cmp_match_rank(const void *a, const void *b) {
    const SpecialMatch *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int cmp_match_pos(const void *a, const void *b) {
    const SpecialMatch *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Finds where special tokens split the text: all occurrences of every allowed special text, then
 * resolved exactly as llama.cpp's sequential partition does — token by token in matching order, each
 * taking its leftmost non-overlapping occurrences that do not touch text an earlier token took.
 * Returns the accepted matches sorted by position in *out (malloc'd, may be NULL when none). */
static int find_specials(const Tokenizer *t, const char *text, size_t len, bool parse_special, SpecialMatch **out,
                         size_t *n_out) {
    *out = NULL;
    *n_out = 0;
    if (!t->trie) return 0;
    SpecialMatch *m = NULL;
    size_t n = 0, cap = 0;
    const unsigned char *s = (const unsigned char *)text;
    for (size_t p = 0; p < len; p++) {
        if (!t->special_first_byte[s[p]]) continue;
        int32_t node = 0;
        for (size_t q = p; q < len; q++) {
            int32_t c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != s[q]) c = t->trie[c].sibling;
            if (c < 0) break;
            node = c;
            int32_t id = t->trie[node].token;
            if (id < 0) continue;
            if (!parse_special && (t->attr[id] & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_UNKNOWN))) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                SpecialMatch *nm = realloc(m, cap * sizeof *nm);
                if (!nm) {
                    free(m);
                    return -1;
                }
                m = nm;
            }
            m[n++] = (SpecialMatch){t->special_rank[id], id, p, q - p + 1};
        }
    }
    if (n == 0) return 0;
    qsort(m, n, sizeof *m, cmp_match_rank);
    uint8_t *taken = calloc(len, 1);
    if (!taken) {
        free(m);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t next_free = 0; /* end of this token's previous accepted occurrence */
        int32_t rank = m[i].rank;
        for (; i < n && m[i].rank == rank; i++) {
            if (m[i].pos < next_free) continue;
            bool clear = true;
            for (size_t b = m[i].pos; b < m[i].pos + m[i].len && clear; b++) clear = !taken[b];
            if (!clear) continue;
            memset(taken + m[i].pos, 1, m[i].len);
            next_free = m[i].pos + m[i].len;
            m[k++] = m[i];
        }
    }
    free(taken);
    qsort(m, k, sizeof *m, cmp_match_pos);
    *out = m;
    *n_out = k;
    return 0;
}

int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, unsigned flags, TokenIds *out, Err *err) {
    if (len > INT32_MAX) return err_set(err, "text of %zu bytes is too long to tokenize (limit 2 GiB)", len);
    size_t n0 = out->n;
    if ((flags & TOKENIZE_ADD_SPECIAL) && t->sp.add_bos && token_ids_push(out, t->sp.bos) < 0) goto oom;
    if (len > 0) {
        SpecialMatch *m;
        size_t n_m;
        if (find_specials(t, text, len, flags & TOKENIZE_PARSE_SPECIAL, &m, &n_m) < 0) goto oom;
        EncodeScratch s = {0};
        if (len >= WORD_CACHE_MIN_TEXT) s.cache.slots = calloc(WORD_CACHE_SLOTS, sizeof *s.cache.slots); /* optional */
        size_t at = 0;
        int rc = 0;
        for (size_t i = 0; i <= n_m && rc == 0; i++) {
            size_t end = i < n_m ? m[i].pos : len;
            rc = encode_plain(t, text + at, end - at, &s, out);
            if (rc == 0 && i < n_m) {
                rc = token_ids_push(out, m[i].token);
                at = m[i].pos + m[i].len;
            }
        }
        scratch_free(&s);
        free(m);
        if (rc < 0) goto oom;
    }
    if ((flags & TOKENIZE_ADD_SPECIAL) && t->sp.add_eos && token_ids_push(out, t->sp.eos) < 0) goto oom;
    return 0;
oom:
    out->n = n0;
    return err_set(err, "out of memory while tokenizing %zu bytes", len);
}
