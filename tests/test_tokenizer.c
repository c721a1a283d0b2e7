/* test_tokenizer.c — group `tokenizer`: the BPE tokenizer against llama.cpp.
 *
 *   - llama.cpp's own vectors (tests/data/vocab/ggml-vocab-{qwen2,qwen35}.gguf.inp/.out), all of them;
 *   - our cases (empty, whitespace, \r\n, digits, emoji, CJK, Arabic/Hindi marks, invalid UTF-8, special
 *     token text, contractions) with ids produced by llama.cpp v0.4.0 (llref --tokenize-file, with and
 *     without --no-parse-special);
 *   - a generated 1 MB mixed-script text whose id count and hash come from llama.cpp too;
 *   - round trips, streaming detokenization, special ids / EOG, refusals of other tokenizers, thread
 *     safety, the Unicode table, and the `tokenize` / `detokenize` commands. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "base/clock.h"

/* ------------------------------------------------------------------------------------------ fixtures */

static Tokenizer *loaded[2];

static void free_loaded(void) {
    for (int i = 0; i < 2; i++) tokenizer_free(loaded[i]);
}

static const char *vocab_path(int qwen35) {
    return test_data(qwen35 ? "vocab/ggml-vocab-qwen35.gguf" : "vocab/ggml-vocab-qwen2.gguf");
}

/* The test vocabularies, loaded once. */
static Tokenizer *vocab(int qwen35) {
    if (!loaded[qwen35]) {
        Err err = {{0}};
        Gguf *g = gguf_open(vocab_path(qwen35), &err);
        if (!g) {
            test_note("cannot open %s: %s", vocab_path(qwen35), err.msg);
            return NULL;
        }
        loaded[qwen35] = tokenizer_load(g, &err);
        gguf_close(g);
        if (!loaded[qwen35]) test_note("cannot load the tokenizer: %s", err.msg);
        if (!loaded[0] != !loaded[1]) atexit(free_loaded); /* first successful load */
    }
    return loaded[qwen35];
}

/* Parses "1 2 3" into v (reset first). */
static void parse_ids(const char *s, TokenIds *v) {
    v->n = 0;
    char *end;
    for (long x; (x = strtol(s, &end, 10)), end != s; s = end) {
        if (v->n == v->cap) {
            v->cap = v->cap ? v->cap * 2 : 64;
            v->ids = realloc(v->ids, v->cap * sizeof *v->ids);
        }
        v->ids[v->n++] = (int32_t)x;
    }
}

static bool ids_equal(const TokenIds *a, const TokenIds *b) {
    return a->n == b->n && (a->n == 0 || memcmp(a->ids, b->ids, a->n * sizeof *a->ids) == 0);
}

static void print_ids(char *buf, size_t cap, const TokenIds *v) {
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < v->n && k + 16 < cap; i++) k += (size_t)snprintf(buf + k, cap - k, "%s%d", i ? " " : "", v->ids[i]);
}

/* ------------------------------------------------------------------------------------- unicode data */

TEST(tokenizer, unicode_classes) {
    struct { uint32_t cp; uint16_t flags; } cases[] = {
        {'a', UNICODE_LETTER}, {'Z', UNICODE_LETTER}, {'5', UNICODE_NUMBER}, {'!', UNICODE_PUNCTUATION},
        {'$', UNICODE_SYMBOL}, {' ', UNICODE_SEPARATOR | UNICODE_WHITESPACE}, {'\t', UNICODE_CONTROL | UNICODE_WHITESPACE},
        {'\n', UNICODE_CONTROL | UNICODE_WHITESPACE}, {0x1C, UNICODE_CONTROL}, {0x85, UNICODE_CONTROL | UNICODE_WHITESPACE},
        {0xA0, UNICODE_SEPARATOR | UNICODE_WHITESPACE}, {0x0301, UNICODE_MARK}, {0x0903, UNICODE_MARK},
        {0x0663, UNICODE_NUMBER}, {0x00BD, UNICODE_NUMBER}, {0x2167, UNICODE_NUMBER}, {0x200B, UNICODE_CONTROL},
        {0x2028, UNICODE_SEPARATOR | UNICODE_WHITESPACE}, {0x3000, UNICODE_SEPARATOR | UNICODE_WHITESPACE},
        {0x4E00, UNICODE_LETTER}, {0xAC00, UNICODE_LETTER}, {0xD800, UNICODE_CONTROL}, {0xE000, UNICODE_CONTROL},
        {0xFFFD, UNICODE_SYMBOL}, {0x0378, UNICODE_UNDEFINED}, {0x1F999, UNICODE_SYMBOL}, {0x20000, UNICODE_LETTER},
        {0x2EBF0, UNICODE_LETTER}, {0x2FFC, UNICODE_SYMBOL}, {0x31EF, UNICODE_SYMBOL}, /* Unicode 15.1 additions */
        {0x10FFFF, UNICODE_UNDEFINED}, {0x110000, UNICODE_UNDEFINED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(unicode_flags(cases[i].cp) == cases[i].flags, "U+%04X: flags 0x%x, want 0x%x", cases[i].cp,
                  unicode_flags(cases[i].cp), cases[i].flags);
    /* the two-level table agrees with the runs everywhere */
    int run = 0, bad = 0;
    for (uint32_t cp = 0; cp <= UNICODE_MAX_CODEPOINT; cp++) {
        while (run + 1 < unicode_n_runs && unicode_runs[run + 1].first <= cp) run++;
        bad += unicode_flags(cp) != unicode_runs[run].flags;
    }
    CHECK_MSG(bad == 0, "%d code points disagree with the run table", bad);
    test_note("Unicode %s, %d runs", unicode_data_version, unicode_n_runs);
}

TEST(tokenizer, byte_alphabet) {
    bool seen[0x200] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t cp = unicode_byte_to_cp((uint8_t)b);
        CHECK_MSG(cp < 0x200 && !seen[cp], "byte 0x%02x -> U+%04X", b, cp);
        if (cp < 0x200) seen[cp] = true;
        CHECK_MSG(unicode_cp_to_byte(cp) == b, "U+%04X -> %d, want %d", cp, unicode_cp_to_byte(cp), b);
    }
    CHECK(unicode_byte_to_cp(' ') == 0x120); /* 'Ġ' */
    CHECK(unicode_byte_to_cp('\n') == 0x10A); /* 'Ċ' */
    CHECK(unicode_byte_to_cp(0xAD) == 0x143);
    CHECK(unicode_cp_to_byte(0x144) == -1 && unicode_cp_to_byte(0xAD) == -1 && unicode_cp_to_byte(0x20) == -1);
}

TEST(tokenizer, utf8_decoding) {
    struct { const char *s; size_t n; uint32_t cp; size_t used; } lenient[] = {
        {"A", 1, 'A', 1},         {"\xc3\xa9", 2, 0xE9, 2},      {"\xe4\xb8\x80", 3, 0x4E00, 3},
        {"\xf0\x9f\xa6\x99", 4, 0x1F999, 4}, {"\x80", 1, 0xFFFD, 1}, {"\xc3", 1, 0xFFFD, 1},
        {"\xc3(", 2, 0xFFFD, 1},  {"\xc0\x80", 2, 0, 2}, /* overlong: decoded as llama.cpp does */
        {"\xed\xa0\x80", 3, 0xD800, 3}, {"\xf4\x90\x80\x80", 4, 0xFFFD, 1}, /* > U+10FFFF: one bad byte */
        {"\xf8\x88\x80\x80\x80", 5, 0xFFFD, 1}, {"\xe2\x82", 2, 0xFFFD, 1},
    };
    for (size_t i = 0; i < sizeof lenient / sizeof lenient[0]; i++) {
        size_t used;
        uint32_t cp = unicode_decode_lenient((const unsigned char *)lenient[i].s, lenient[i].n, &used);
        CHECK_MSG(cp == lenient[i].cp && used == lenient[i].used, "case %zu: U+%04X/%zu", i, cp, used);
    }
    struct { const char *s; size_t n; int len; size_t bad; } strict[] = {
        {"a", 1, 1, 0}, {"\xc3\xa9", 2, 2, 0}, {"\xc3", 1, 0, 0}, {"\xe2\x82", 2, 0, 0}, {"\xe2\x82(", 3, -1, 2},
        {"\xc0\x80", 2, -1, 1}, {"\xe0\x80\x80", 3, -1, 1}, {"\xed\xa0\x80", 3, -1, 1}, {"\xf4\x90\x80\x80", 4, -1, 1},
        {"\xf0\x9f\xa6", 3, 0, 0}, {"\xf0\x9f\xa6\x99", 4, 4, 0}, {"\xff", 1, -1, 1}, {"\x80", 1, -1, 1},
    };
    for (size_t i = 0; i < sizeof strict / sizeof strict[0]; i++) {
        size_t bad = 0;
        int len = unicode_valid_prefix((const unsigned char *)strict[i].s, strict[i].n, &bad);
        CHECK_MSG(len == strict[i].len && (len >= 0 || bad == strict[i].bad), "case %zu: %d/%zu", i, len, bad);
    }
}

/* ---------------------------------------------------------------------------------- llama.cpp vectors */

static void run_vectors(int qwen35) {
    Tokenizer *t = vocab(qwen35);
    REQUIRE(t);
    char path[1100];
    snprintf(path, sizeof path, "%s.inp", vocab_path(qwen35));
    size_t in_len, out_len;
    char *inp = test_read_file(path, &in_len);
    snprintf(path, sizeof path, "%s.out", vocab_path(qwen35));
    char *outp = test_read_file(path, &out_len);
    REQUIRE(inp && outp);
    const char *sep = "\n__ggml_vocab_test__\n";
    int n = 0, pass = 0;
    char *line = outp, *p = inp, *hit;
    TokenIds want = {0}, got = {0};
    while ((hit = strstr(p, sep)) != NULL) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        parse_ids(line, &want);
        line = nl ? nl + 1 : line + strlen(line);
        got.n = 0;
        Err err = {{0}};
        CHECK(tokenizer_encode(t, p, (size_t)(hit - p), 0, &got, &err) == 0);
        n++;
        if (ids_equal(&want, &got)) {
            pass++;
        } else {
            char a[400], b[400];
            print_ids(a, sizeof a, &want);
            print_ids(b, sizeof b, &got);
            CHECK_MSG(false, "case %d '%.40s': want [%s] got [%s]", n - 1, p, a, b);
        }
        /* the text comes back from the ids */
        char *text;
        size_t len;
        if (tokenizer_decode(t, got.ids, got.n, 0, &text, &len, &err) == 0) {
            CHECK_MSG(len == (size_t)(hit - p) && memcmp(text, p, len) == 0, "case %d does not round-trip", n - 1);
            free(text);
        }
        p = hit + strlen(sep);
    }
    test_note("%s vectors: %d/%d pass", qwen35 ? "qwen35" : "qwen2", pass, n);
    CHECK(n == (qwen35 ? 50 : 46));
    token_ids_free(&want);
    token_ids_free(&got);
    free(inp);
    free(outp);
}

TEST(tokenizer, vectors_qwen2) { run_vectors(0); }
TEST(tokenizer, vectors_qwen35) { run_vectors(1); }

/* ------------------------------------------------------------------------------------------ our cases */

/* ids from llama.cpp v0.4.0: [vocab qwen2/qwen35][parse_special off/on] */
static const struct OwnCase {
    const char *name, *text;
    size_t len;
    const char *ids[2][2];
} own_cases[] = {
    {"empty", "", 0, {{"", ""}, {"", ""}}},
    {"whitespace_runs", "   \t\t  \n\n  \r\n\r\n   x  \n \xc2\xa0 y\xe3\x80\x80\xe3\x80\x80z   ", 37,
     {{"262 13544 271 72745 256 856 2303 17091 379 22441 22441 89 262", "262 13544 271 72745 256 856 2303 17091 379 22441 22441 89 262"},
      {"262 13544 271 72745 256 856 2303 17091 379 22441 22441 89 262", "262 13544 271 72745 256 856 2303 17091 379 22441 22441 89 262"}}},
    {"crlf", "line1\r\nline2\r\n\r\n\rline3\n\r", 24,
     {{"1056 16 319 1056 17 871 201 1056 18 198 201", "1056 16 319 1056 17 871 201 1056 18 198 201"},
      {"1056 16 319 1056 17 871 201 1056 18 198 201", "1056 16 319 1056 17 871 201 1056 18 198 201"}}},
    {"digits", "3.14159 and 1234567890, ١٢٣ ½ Ⅷ x2y", 41,
     {{"18 13 16 19 16 20 24 323 220 16 17 18 19 20 21 22 23 24 15 11 220 149 94 149 95 149 96 220 26062 220 70467 100 856 17 88",
       "18 13 16 19 16 20 24 323 220 16 17 18 19 20 21 22 23 24 15 11 220 149 94 149 95 149 96 220 26062 220 70467 100 856 17 88"},
      {"18 13 16 19 16 20 24 323 220 16 17 18 19 20 21 22 23 24 15 11 220 149 94 149 95 149 96 220 26062 220 70467 100 856 17 88",
       "18 13 16 19 16 20 24 323 220 16 17 18 19 20 21 22 23 24 15 11 220 149 94 149 95 149 96 220 26062 220 70467 100 856 17 88"}}},
    {"emoji", "👍🏽 👨‍👩‍👧‍👦 🦙! ❤️", 47,
     {{"144349 145375 61804 101 378 235 145233 378 235 145665 378 235 145988 11162 99 247 0 70470 30543",
       "144349 145375 61804 101 378 235 145233 378 235 145665 378 235 145988 11162 99 247 0 70470 30543"},
      {"144349 145375 61804 101 378 235 145233 378 235 145665 378 235 145988 11162 99 247 0 70470 30543",
       "144349 145375 61804 101 378 235 145233 378 235 145665 378 235 145988 11162 99 247 0 70470 30543"}}},
    {"cjk", "我想在apple工作。日本語のテキスト、한국어 텍스트", 69,
     {{"104100 18493 22377 99257 1773 101059 102819 15767 56833 61803 70534 5373 23573 124785 31079 10764 44104 53189",
       "104100 18493 22377 99257 1773 101059 102819 15767 56833 61803 70534 5373 23573 124785 31079 10764 44104 53189"},
      {"104100 18493 22377 99257 1773 101059 102819 15767 56833 61803 70534 5373 23573 124785 31079 10764 44104 53189",
       "104100 18493 22377 99257 1773 101059 102819 15767 56833 61803 70534 5373 23573 124785 31079 10764 44104 53189"}}},
    {"arabic_marks", "مَرْحَبًا بِالْعَالَمِ", 43,
     {{"10176 27910 11071 59397 29825 27910 21360 127837 27846 52704 31382 59397 23224 27910 31382 27910 10176 52704",
       "10176 27910 11071 59397 29825 27910 21360 127837 27846 52704 31382 59397 23224 27910 31382 27910 10176 52704"},
      {"130531 11071 59397 132078 21360 127837 27846 52704 31382 59397 131319 31382 27910 131339",
       "130531 11071 59397 132078 21360 127837 27846 52704 31382 59397 131319 31382 27910 131339"}}},
    {"hindi_marks", "नमस्ते दुनिया क्षत्रिय", 62,
     {{"60096 87244 78368 30484 97 34370 14925 99 72653 60096 42311 107 23868 47809 30484 115 79238 85033 42311 107",
       "60096 87244 78368 30484 97 34370 14925 99 72653 60096 42311 107 23868 47809 30484 115 79238 85033 42311 107"},
      {"60096 87244 78368 30484 97 34370 14925 99 72653 60096 42311 107 23868 47809 30484 115 79238 85033 42311 107",
       "60096 87244 78368 30484 97 34370 14925 99 72653 60096 42311 107 23868 47809 30484 115 79238 85033 42311 107"}}},
    {"invalid_utf8", "ab\xff\xfe c\xe2\x82 d\xc0\x80" "e\xed\xa0\x80" "f\x80\xbf g\xf0\x9f\x98", 24,
     {{"370 9973 272 9973 294 188 68 169 63219 69 9973 342 57332", "370 9973 272 9973 294 188 68 169 63219 69 9973 342 57332"},
      {"370 9973 272 9973 294 188 68 169 63219 69 9973 342 57332", "370 9973 272 9973 294 188 68 169 63219 69 9973 342 57332"}}},
    {"specials", "<|im_start|>user\nhi<|im_end|>\n</s>[PAD151650]<think><|endoftext|", 64,
     {{"27 91 318 4906 91 29 872 198 6023 27 91 318 6213 91 397 522 82 29 151650 13708 766 1784 91 8691 723 427 91",
       "151644 872 198 6023 151645 198 128247 151650 13708 766 1784 91 8691 723 427 91"},
      {"27 91 318 4906 91 29 872 198 6023 27 91 318 6213 91 397 522 82 29 151650 13708 766 1784 91 8691 723 427 91",
       "151644 872 198 6023 151645 198 128247 151650 13708 766 1784 91 8691 723 427 91"}}},
    {"contractions", "I'M HE'LL we'Re they'VE it's 'tis y'all", 39,
     {{"40 27603 11685 6 4086 582 49427 807 6 4491 432 594 364 83 285 379 64848",
       "40 27603 11685 6 4086 582 49427 807 6 4491 432 594 364 83 285 379 64848"},
      {"40 27603 11685 6 4086 582 49427 807 6 4491 432 594 364 83 285 379 64848",
       "40 27603 11685 6 4086 582 49427 807 6 4491 432 594 364 83 285 379 64848"}}},
};

TEST(tokenizer, own_cases) {
    TokenIds want = {0}, got = {0};
    for (int v = 0; v < 2; v++) {
        Tokenizer *t = vocab(v);
        REQUIRE(t);
        for (size_t i = 0; i < sizeof own_cases / sizeof own_cases[0]; i++) {
            const struct OwnCase *c = &own_cases[i];
            CHECK_MSG(strlen(c->text) == c->len || c->len == 0, "%s: length %zu", c->name, strlen(c->text));
            for (int sp = 0; sp < 2; sp++) {
                Err err = {{0}};
                parse_ids(c->ids[v][sp], &want);
                got.n = 0;
                CHECK(tokenizer_encode(t, c->text, c->len, sp ? TOKENIZE_PARSE_SPECIAL : 0, &got, &err) == 0);
                char a[600], b[600];
                print_ids(a, sizeof a, &want);
                print_ids(b, sizeof b, &got);
                CHECK_MSG(ids_equal(&want, &got), "%s (%s%s): want [%s] got [%s]", c->name, v ? "qwen35" : "qwen2",
                          sp ? ", special" : "", a, b);
                if (strcmp(c->name, "invalid_utf8") == 0) continue;
                char *text;
                size_t len;
                CHECK(tokenizer_decode(t, got.ids, got.n, DETOKENIZE_SPECIAL, &text, &len, &err) == 0);
                CHECK_MSG(len == c->len && memcmp(text, c->text, len) == 0, "%s does not round-trip", c->name);
                free(text);
            }
        }
    }
    token_ids_free(&want);
    token_ids_free(&got);
}

/* ------------------------------------------------------------------------------------ 1 MB and speed */

/* A deterministic 1 MB mixed-script text (its own generator; the benchmark uses bench/tokenizer_corpus.py).
 * The Python script that produced the reference count and hash with llref mirrors it word for word. */
static const char *const corpus_words[] = {
    "The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".", ",", "\n", "\n\n", "  ", "\t",
    " 12345", " 3.14", " 2024", "'s", " don't", " I'LL", " \"quoted\"", " (paren)", " http://example.com/a?b=c",
    " 我想在", "工作", "。", " 日本語", "のテキスト", " 한국어", " Привет", " мир", " Grüße", " café",
    " cafe\xcc\x81", " naïve", " مرحبا", " بالعالم", " مَرْحَبًا", " नमस्ते", " दुनिया", " 🦙", "🚀", " 👍🏽", " ✅",
    " ½", " ①", "\r\n", "\xc2\xa0", "\xe3\x80\x80", " int main() {", " return 0;", " }", " x += y * 2;", "    ",
    " <|im_start|>", " <think>", " [PAD151650]",
};

static char *make_corpus(size_t *len) {
    size_t cap = (1 << 20) + 256, n = 0;
    char *s = malloc(cap);
    uint64_t state = 0x9E3779B97F4A7C15ull;
    const size_t n_words = sizeof corpus_words / sizeof corpus_words[0];
    while (s && n < (1 << 20)) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        const char *w = corpus_words[(state >> 33) % n_words];
        size_t k = strlen(w);
        memcpy(s + n, w, k);
        n += k;
    }
    *len = n;
    return s;
}

static uint64_t ids_hash(const TokenIds *v) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < v->n; i++) h = (h ^ (uint64_t)v->ids[i]) * 1099511628211ull;
    return h;
}

TEST(tokenizer, megabyte_matches_llama_cpp) {
    size_t len;
    char *text = make_corpus(&len);
    REQUIRE(text);
    CHECK(len == 1048582);
    /* llama.cpp v0.4.0: count and FNV-1a hash of the ids (parse_special off) */
    const size_t want_n[2] = {370077, 367465};
    const uint64_t want_h[2] = {0x531d9d3fb3d061cbull, 0x40905bc235b8f224ull};
    for (int v = 0; v < 2; v++) {
        Tokenizer *t = vocab(v);
        REQUIRE(t);
        TokenIds ids = {0};
        Err err = {{0}};
        double t0 = now_s();
        CHECK(tokenizer_encode(t, text, len, 0, &ids, &err) == 0);
        double dt = now_s() - t0;
        CHECK_MSG(ids.n == want_n[v] && ids_hash(&ids) == want_h[v], "%s: %zu ids, hash %llx", v ? "qwen35" : "qwen2",
                  ids.n, (unsigned long long)ids_hash(&ids));
        test_note("%s: 1 MB in %.1f ms, %.2f M tokens/s", v ? "qwen35" : "qwen2", dt * 1e3, (double)ids.n / dt / 1e6);
        CHECK_MSG(dt < 10.0, "1 MB took %.1f s", dt);
        char *back;
        size_t back_len;
        CHECK(tokenizer_decode(t, ids.ids, ids.n, 0, &back, &back_len, &err) == 0);
        CHECK(back_len == len && memcmp(back, text, len) == 0);
        free(back);
        token_ids_free(&ids);
    }
    free(text);
}

TEST(tokenizer, long_words_are_not_quadratic) {
    Tokenizer *t = vocab(1);
    REQUIRE(t);
    /* 200000 x "a" + U+0300 is one pre-token for qwen35 (marks join letters); 1 MB without a space */
    size_t n = 200000 * 3;
    char *s = malloc(n);
    REQUIRE(s);
    for (size_t i = 0; i < n; i += 3) memcpy(s + i, "a\xcc\x80", 3);
    for (int pass = 0; pass < 2; pass++) {
        TokenIds ids = {0};
        Err err = {{0}};
        double t0 = now_s();
        CHECK(tokenizer_encode(t, s, n, 0, &ids, &err) == 0);
        double dt = now_s() - t0;
        CHECK_MSG(dt < 10.0, "%zu bytes in one word took %.1f s", n, dt);
        char *back;
        size_t len;
        CHECK(tokenizer_decode(t, ids.ids, ids.n, 0, &back, &len, &err) == 0);
        CHECK(len == n && memcmp(back, s, n) == 0);
        free(back);
        test_note("%zu-byte single word: %zu ids in %.1f ms", n, ids.n, dt * 1e3);
        token_ids_free(&ids);
        memset(s, 'x', n); /* second pass: one 600 KB ASCII word */
    }
    free(s);
}

/* ----------------------------------------------------------------------------------- specials and EOG */

TEST(tokenizer, special_tokens) {
    for (int v = 0; v < 2; v++) {
        Tokenizer *t = vocab(v);
        REQUIRE(t);
        const TokenizerSpecials *sp = tokenizer_specials(t);
        CHECK(tokenizer_n_vocab(t) == 151936 && tokenizer_n_merges(t) == 151387);
        CHECK(tokenizer_pre(t) == (v ? TOKENIZER_PRE_QWEN35 : TOKENIZER_PRE_QWEN2));
        CHECK(sp->bos == 151643 && sp->eos == 151643 && sp->pad == 151643 && sp->eot == 151645);
        CHECK(sp->im_start == 151644 && sp->im_end == 151645 && sp->unk == -1 && sp->fim_pad == -1);
        CHECK(!sp->add_bos && !sp->add_eos);
        /* llama.cpp: "</s>" (a normal token here) is an end-of-turn text, so it becomes control + EOG */
        const int32_t *eog;
        size_t n_eog = tokenizer_eog_ids(t, &eog);
        CHECK(n_eog == 3 && eog[0] == 128247 && eog[1] == 151643 && eog[2] == 151645);
        CHECK(tokenizer_is_eog(t, 151645) && tokenizer_is_eog(t, 128247) && !tokenizer_is_eog(t, 151644));
        CHECK(tokenizer_token_attr(t, 128247) & TOKEN_ATTR_CONTROL);
        CHECK(tokenizer_token_attr(t, 151650) == TOKEN_ATTR_USER_DEFINED);
        CHECK(tokenizer_token_attr(t, -1) == 0 && tokenizer_token_attr(t, 151936) == 0);
        CHECK(tokenizer_token_id(t, "<|im_end|>", 10) == 151645 && tokenizer_token_id(t, "nope\x01", 5) == -1);
        size_t len;
        const char *piece = tokenizer_piece(t, 1879, &len);
        CHECK(piece && len == 6 && memcmp(piece, " world", 6) == 0);
        const char *text = tokenizer_token_text(t, 1879, &len);
        CHECK(text && len == 7 && memcmp(text, "\xc4\xa0world", 7) == 0);
        CHECK(tokenizer_piece(t, 151936, &len) == NULL);
        CHECK(tokenizer_chat_template(t) && strstr(tokenizer_chat_template(t), "<|im_start|>"));
        /* add_special adds nothing for Qwen */
        TokenIds ids = {0};
        Err err = {{0}};
        CHECK(tokenizer_encode(t, "Hello world", 11, TOKENIZE_ADD_SPECIAL, &ids, &err) == 0);
        CHECK(ids.n == 2 && ids.ids[0] == 9707 && ids.ids[1] == 1879);
        token_ids_free(&ids);
    }
}

TEST(tokenizer, decode_specials_and_errors) {
    Tokenizer *t = vocab(0);
    REQUIRE(t);
    int32_t ids[] = {151644, 872, 198, 6023, 151645, 151650};
    char *text;
    size_t len;
    Err err = {{0}};
    CHECK(tokenizer_decode(t, ids, 6, 0, &text, &len, &err) == 0);
    CHECK(strcmp(text, "user\nhi[PAD151650]") == 0); /* control hidden, user-defined shown */
    free(text);
    CHECK(tokenizer_decode(t, ids, 6, DETOKENIZE_SPECIAL, &text, &len, &err) == 0);
    CHECK(strcmp(text, "<|im_start|>user\nhi<|im_end|>[PAD151650]") == 0);
    free(text);
    int32_t bad[] = {9707, 151936};
    CHECK(tokenizer_decode(t, bad, 2, 0, &text, &len, &err) == -1);
    CHECK_MSG(strstr(err.msg, "151936") != NULL, "%s", err.msg);
    /* one byte of a 3-byte character: raw keeps it, the default replaces it */
    TokenIds v = {0};
    CHECK(tokenizer_encode(t, "\xe2\x82\xac", 3, 0, &v, &err) == 0); /* "€" */
    REQUIRE(v.n >= 1);
    size_t pn;
    const char *p = tokenizer_piece(t, v.ids[0], &pn);
    if (pn < 3) {
        CHECK(tokenizer_decode(t, v.ids, 1, DETOKENIZE_RAW, &text, &len, &err) == 0);
        CHECK(len == pn && memcmp(text, p, pn) == 0);
        free(text);
        CHECK(tokenizer_decode(t, v.ids, 1, 0, &text, &len, &err) == 0);
        CHECK(strcmp(text, "\xef\xbf\xbd") == 0);
        free(text);
    }
    token_ids_free(&v);
}

/* ------------------------------------------------------------------------------------------ streaming */

TEST(tokenizer, streaming_detokenizer) {
    Tokenizer *t = vocab(1);
    REQUIRE(t);
    const char *text = "Grüße 🦙 我想在 e\xcc\x81 👨‍👩‍👧 <|im_end|> done";
    TokenIds ids = {0};
    Err err = {{0}};
    REQUIRE(tokenizer_encode(t, text, strlen(text), TOKENIZE_PARSE_SPECIAL, &ids, &err) == 0);
    for (int special = 0; special < 2; special++) {
        Detokenizer *d = detokenizer_new(t, special ? DETOKENIZE_SPECIAL : 0, &err);
        REQUIRE(d);
        char out[256];
        size_t n = 0;
        int empty_pushes = 0;
        for (size_t i = 0; i < ids.n; i++) {
            const char *s;
            size_t len;
            CHECK(detokenizer_push(d, ids.ids[i], &s, &len, &err) == 0);
            size_t bad = 0;
            for (size_t k = 0; k < len;) { /* every piece handed out is whole, valid UTF-8 */
                int l = unicode_valid_prefix((const unsigned char *)s + k, len - k, &bad);
                CHECK_MSG(l > 0, "invalid UTF-8 handed out at token %zu", i);
                if (l <= 0) break;
                k += (size_t)l;
            }
            empty_pushes += len == 0;
            if (n + len < sizeof out) memcpy(out + n, s, len), n += len;
        }
        const char *s;
        size_t len;
        detokenizer_flush(d, &s, &len);
        CHECK(len == 0);
        out[n] = 0;
        const char *want = special ? text : "Grüße 🦙 我想在 e\xcc\x81 👨‍👩‍👧  done";
        CHECK_MSG(strcmp(out, want) == 0, "got '%s'", out);
        CHECK(empty_pushes > 0); /* the llama's bytes are split over tokens */
        detokenizer_free(d);
    }
    token_ids_free(&ids);

    /* invalid bytes come out as U+FFFD, an unfinished character at the end too */
    Detokenizer *d = detokenizer_new(t, 0, &err);
    REQUIRE(d);
    int32_t lead = tokenizer_token_id(t, "\xc3\xa2", 2); /* "â": the GPT-2 character of byte 0xE2 */
    REQUIRE(lead >= 0);
    const char *s;
    size_t len;
    CHECK(detokenizer_push(d, lead, &s, &len, &err) == 0 && len == 0);
    CHECK(detokenizer_push(d, 9707, &s, &len, &err) == 0); /* "Hello" breaks the sequence */
    CHECK(len == 8 && memcmp(s, "\xef\xbf\xbdHello", 8) == 0);
    CHECK(detokenizer_push(d, lead, &s, &len, &err) == 0 && len == 0);
    detokenizer_flush(d, &s, &len);
    CHECK(len == 3 && memcmp(s, "\xef\xbf\xbd", 3) == 0);
    CHECK(detokenizer_push(d, -5, &s, &len, &err) == -1);
    CHECK(detokenizer_push(d, lead, &s, &len, &err) == 0 && len == 0);
    detokenizer_reset(d);
    detokenizer_flush(d, &s, &len);
    CHECK(len == 0);
    detokenizer_free(d);
}

/* ---------------------------------------------------------------------------------- threads */

typedef struct EncodeJob {
    const Tokenizer *t;
    const char *text;
    size_t len;
    uint64_t hash;
    size_t n;
} EncodeJob;

static void *encode_job(void *arg) {
    EncodeJob *j = arg;
    TokenIds ids = {0};
    Err err = {{0}};
    if (tokenizer_encode(j->t, j->text, j->len, 0, &ids, &err) == 0) {
        j->hash = ids_hash(&ids);
        j->n = ids.n;
    }
    token_ids_free(&ids);
    return NULL;
}

TEST(tokenizer, concurrent_encoding) {
    Tokenizer *t = vocab(1);
    REQUIRE(t);
    size_t len;
    char *text = make_corpus(&len);
    REQUIRE(text);
    len /= 4;
    EncodeJob jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (EncodeJob){t, text + i * 7, len, 0, 0};
        pthread_create(&th[i], NULL, encode_job, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        EncodeJob alone = {t, text + i * 7, len, 0, 0};
        encode_job(&alone);
        CHECK_MSG(alone.n && alone.n == jobs[i].n && alone.hash == jobs[i].hash, "thread %d differs", i);
    }
    free(text);
}

/* ---------------------------------------------------------------------------------- other vocabularies */

/* A toy BPE vocabulary: the 256 byte characters plus a few merges, one of whose results is not a token
 * (so the byte fallback runs), written with the GGUF writer. */
static Gguf *toy_vocab(const char *model, const char *pre, bool with_merges, uint8_t **mem) {
    GgufWriter *w = gguf_writer_new(32);
    const char *toks[260];
    char bufs[256][4];
    for (int b = 0; b < 256; b++) {
        int k = unicode_encode(unicode_byte_to_cp((uint8_t)b), bufs[b]);
        bufs[b][k] = 0;
        toks[b] = bufs[b];
    }
    toks[256] = "ab";
    toks[257] = "abc";
    toks[258] = "<|im_end|>";
    toks[259] = "<x>";
    int32_t types[260];
    for (int i = 0; i < 260; i++) types[i] = i == 258 ? 3 : i == 259 ? 4 : 1;
    const char *merges[] = {"a b", "ab c", "c d", "cd e"}; /* "cd" and "cde" are not tokens */
    gguf_w_str(w, "general.architecture", "qwen2");
    gguf_w_str(w, "tokenizer.ggml.model", model);
    if (pre) gguf_w_str(w, "tokenizer.ggml.pre", pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 260);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_I32, types, 260);
    if (with_merges) gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 4);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 258);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 999999); /* out of range: ignored */
    size_t size;
    Err err = {{0}};
    Gguf *g = NULL;
    if (gguf_writer_write_mem(w, mem, &size, &err) == 0) g = gguf_open_memory(*mem, size, &err);
    gguf_writer_free(w);
    return g;
}

TEST(tokenizer, toy_vocabulary) {
    uint8_t *mem = NULL;
    Gguf *g = toy_vocab("gpt2", "qwen2", true, &mem);
    REQUIRE(g);
    Err err = {{0}};
    Tokenizer *t = tokenizer_load(g, &err);
    REQUIRE_MSG(t, "%s", err.msg);
    CHECK(tokenizer_specials(t)->bos == -1 && tokenizer_specials(t)->eos == 258 && tokenizer_specials(t)->eot == 258);
    TokenIds ids = {0};
    /* "abc" merges fully; "cde" ends as a non-token symbol: emitted byte by byte, and only bytes whose
     * one-byte string is a token survive ('c', 'd', 'e' are: '!'..'~' map to themselves) */
    CHECK(tokenizer_encode(t, "abc cde<x><|im_end|>", 20, 0, &ids, &err) == 0);
    /* token b is the character of byte b: "abc" -> 257, " " -> 32, "cde" -> 'c' 'd' 'e', "<x>" -> 259 */
    const int32_t want[] = {257, 32, 'c', 'd', 'e', 259};
    CHECK(ids.n > 6 && memcmp(ids.ids, want, sizeof want) == 0);
    char *text;
    size_t len;
    CHECK(tokenizer_decode(t, ids.ids, ids.n, DETOKENIZE_SPECIAL, &text, &len, &err) == 0);
    CHECK_MSG(strcmp(text, "abc cde<x><|im_end|>") == 0, "'%s'", text);
    free(text);
    ids.n = 0;
    CHECK(tokenizer_encode(t, "<x><|im_end|>", 13, 0, &ids, &err) == 0);
    CHECK(ids.n > 2 && ids.ids[0] == 259); /* user-defined always, control only with PARSE_SPECIAL */
    ids.n = 0;
    CHECK(tokenizer_encode(t, "<x><|im_end|>", 13, TOKENIZE_PARSE_SPECIAL, &ids, &err) == 0);
    CHECK(ids.n == 2 && ids.ids[0] == 259 && ids.ids[1] == 258);
    token_ids_free(&ids);
    tokenizer_free(t);
    gguf_close(g);
    free(mem);
}

TEST(tokenizer, refuses_other_tokenizers) {
    struct { const char *model, *pre; bool merges; const char *msg; } cases[] = {
        {"llama", "qwen2", true, "unsupported tokenizer model 'llama'"},
        {"gpt2", "gpt-4o", true, "unsupported pre-tokenizer 'gpt-4o'"},
        {"gpt2", NULL, true, "tokenizer.ggml.pre"},
        {"gpt2", "qwen35", false, "tokenizer.ggml.merges"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *mem = NULL;
        Gguf *g = toy_vocab(cases[i].model, cases[i].pre, cases[i].merges, &mem);
        REQUIRE(g);
        Err err = {{0}};
        Tokenizer *t = tokenizer_load(g, &err);
        CHECK_MSG(!t && strstr(err.msg, cases[i].msg), "case %zu: '%s'", i, err.msg);
        tokenizer_free(t);
        gguf_close(g);
        free(mem);
    }
    /* aliases of qwen2 load */
    uint8_t *mem = NULL;
    Gguf *g = toy_vocab("gpt2", "deepseek-r1-qwen", true, &mem);
    REQUIRE(g);
    Err err = {{0}};
    Tokenizer *t = tokenizer_load(g, &err);
    CHECK(t && tokenizer_pre(t) == TOKENIZER_PRE_QWEN2);
    tokenizer_free(t);
    gguf_close(g);
    free(mem);
}

/* ------------------------------------------------------------------------------------------ the CLI */

/* Runs a shell command line; returns its exit status and stdout+stderr in out. */
static int run_cli(const char *cmdline, char *out, size_t cap) {
    FILE *f = popen(cmdline, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

TEST(tokenizer, cli_tokenize_detokenize) {
    const char *bin = getenv("DELTALLM_BIN");
    if (!bin) {
        test_skip("DELTALLM_BIN not set: skipped");
        return;
    }
    char cmd[4096], out[8192];
    const char *m = vocab_path(0);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' 'Hello world' 2>&1", bin, m);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "[9707,1879]\n") == 0);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' '<|im_start|>hi' 2>&1", bin, m);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "[27,91,318,4906,91,29,6023]\n") == 0);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' --special '<|im_start|>hi' 2>&1", bin, m);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "[151644,6023]\n") == 0);
    snprintf(cmd, sizeof cmd, "%s/cli_in.txt", test_tmpdir());
    FILE *f = fopen(cmd, "wb");
    REQUIRE(f);
    fputs("Hello world\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' -f '%s/cli_in.txt' 2>&1", bin, m, test_tmpdir());
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "[9707,1879,198]\n") == 0);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' '' 2>&1", bin, m);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "[]\n") == 0);
    snprintf(cmd, sizeof cmd, "'%s' detokenize -m '%s' '9707,1879 151645' 2>&1", bin, m);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "Hello world<|im_end|>") == 0);
    snprintf(cmd, sizeof cmd, "'%s' detokenize -m '%s' --no-special '[9707, 151645]' 2>&1", bin, m);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "Hello") == 0);
    snprintf(cmd, sizeof cmd, "echo 9707 1879 | '%s' detokenize -m '%s' - 2>&1", bin, m);
    CHECK(run_cli(cmd, out, sizeof out) == 0 && strcmp(out, "Hello world") == 0);
    /* bad input: one clear line and a failing status, never a crash */
    const char *bad[] = {"detokenize -m '%s' '9707,999999'", "detokenize -m '%s' '12,abc'", "detokenize -m '%s' '-3'",
                         "tokenize -m /nonexistent.gguf hi", "tokenize -m '%s'", "tokenize 'x'",
                         "tokenize -m '%s' -f /nonexistent.txt"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1200];
        snprintf(args, sizeof args, bad[i], m);
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", bin, args);
        int rc = run_cli(cmd, out, sizeof out);
        CHECK_MSG(rc == 1 || rc == 2, "'%s': status %d", args, rc);
        CHECK_MSG(count_lines(out) == 1 && strncmp(out, "deltallm", 8) == 0, "'%s': '%s'", args, out);
    }
    /* a GGUF with another tokenizer */
    uint8_t *mem = NULL;
    Gguf *g = toy_vocab("llama", "qwen2", true, &mem);
    REQUIRE(g);
    gguf_close(g);
    GgufWriter *w = gguf_writer_new(32);
    const char *toks[] = {"a", "b"};
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, 2);
    char path[1100];
    snprintf(path, sizeof path, "%s/llama_vocab.gguf", test_tmpdir());
    Err err = {{0}};
    CHECK(gguf_writer_write_file(w, path, &err) == 0);
    gguf_writer_free(w);
    free(mem);
    snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' hi 2>&1", bin, path);
    CHECK(run_cli(cmd, out, sizeof out) == 1);
    CHECK_MSG(count_lines(out) == 1 && strstr(out, "unsupported tokenizer model 'llama'"), "'%s'", out);
}
