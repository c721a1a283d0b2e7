/* bpe.c — the symbol table (text <-> symbol id), the merge table, and byte-level BPE of one word.
 *
 * BPE, as llama.cpp does it (llm_tokenizer_bpe_session): every byte of the word starts as the symbol of
 * its GPT-2 character; then the adjacent pair with the lowest merge rank is merged, ties going to the
 * leftmost pair, until no adjacent pair has a merge rule. Each final symbol that is a token is emitted;
 * one that is not (possible only with odd vocabularies) is emitted byte by byte as tokens whose text is
 * that single raw byte, skipping bytes that have none.
 *
 * The merge loop uses a binary heap of candidate pairs keyed (rank, left position), with lazy deletion:
 * a candidate is stale when either of its two symbols changed since it was pushed (a symbol only ever
 * changes by growing into a longer one, so comparing symbol ids is exact). That makes a word of n bytes
 * cost O(n log n), so long words (200 x "a" + U+0300, 1 MB without spaces) stay fast. */
#include <stdlib.h>
#include <string.h>

#include "base/checked.h"
#include "tokenizer/tokenizer_internal.h"

/* ------------------------------------------------------------------------------------- symbol table */

uint32_t bpe_text_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

static bool sym_text_eq(const Tokenizer *t, uint32_t sym, const char *s, size_t n) {
    uint32_t off = t->sym_off[sym], len = t->sym_off[sym + 1] - off;
    return len == n && memcmp(t->text_arena + off, s, n) == 0;
}

uint32_t bpe_symbol_lookup(const Tokenizer *t, const char *s, size_t n) {
    uint32_t i = bpe_text_hash(s, n) & t->text_mask;
    for (;;) {
        uint32_t sym = t->text_slots[i];
        if (sym == SYM_NONE) return SYM_NONE;
        if (sym_text_eq(t, sym, s, n)) return sym;
        i = (i + 1) & t->text_mask;
    }
}

static void text_map_insert(Tokenizer *t, uint32_t sym) {
    const char *s = t->text_arena + t->sym_off[sym];
    size_t n = t->sym_off[sym + 1] - t->sym_off[sym];
    uint32_t i = bpe_text_hash(s, n) & t->text_mask;
    while (t->text_slots[i] != SYM_NONE) {
        if (sym_text_eq(t, t->text_slots[i], s, n)) { /* same text again: the later symbol wins */
            t->text_slots[i] = sym;
            return;
        }
        i = (i + 1) & t->text_mask;
    }
    t->text_slots[i] = sym;
}

/* Keeps the map at most half full (rehashing every symbol when it grows). */
static int text_map_reserve(Tokenizer *t, uint32_t n_syms) {
    if (t->text_slots && (uint64_t)n_syms * 2 <= (uint64_t)t->text_mask + 1) return 0;
    uint64_t size = 1024;
    while (size < (uint64_t)n_syms * 2) size *= 2;
    if (size > (1ull << 31)) return -1;
    uint32_t *slots = malloc(size * sizeof *slots);
    if (!slots) return -1;
    memset(slots, 0xFF, size * sizeof *slots);
    free(t->text_slots);
    t->text_slots = slots;
    t->text_mask = (uint32_t)(size - 1);
    for (uint32_t s = 0; s < t->n_symbols; s++) text_map_insert(t, s);
    return 0;
}

/* Appends a symbol with the given text without consulting the map. */
static uint32_t symbol_append(Tokenizer *t, const char *s, size_t n) {
    if (t->n_symbols + 1 >= t->sym_cap) {
        uint32_t cap = t->sym_cap ? t->sym_cap * 2 : 1024;
        uint32_t *off = realloc(t->sym_off, ((size_t)cap + 1) * sizeof *off);
        if (!off) return SYM_NONE;
        if (!t->sym_off) off[0] = 0;
        t->sym_off = off;
        t->sym_cap = cap;
    }
    size_t need;
    if (!ck_add_size(t->arena_len, n, &need) || need > UINT32_MAX) return SYM_NONE;
    if (need > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < need) cap *= 2;
        char *a = realloc(t->text_arena, cap);
        if (!a) return SYM_NONE;
        t->text_arena = a;
        t->arena_cap = cap;
    }
    memcpy(t->text_arena + t->arena_len, s, n);
    t->arena_len = need;
    uint32_t sym = t->n_symbols++;
    t->sym_off[sym + 1] = (uint32_t)need;
    return sym;
}

uint32_t bpe_intern(Tokenizer *t, const char *s, size_t n) {
    uint32_t sym = bpe_symbol_lookup(t, s, n);
    if (sym != SYM_NONE) return sym;
    if (text_map_reserve(t, t->n_symbols + 1) < 0) return SYM_NONE;
    sym = symbol_append(t, s, n);
    if (sym != SYM_NONE) text_map_insert(t, sym);
    return sym;
}

int bpe_add_tokens(Tokenizer *t, const GgufStr *texts, uint32_t n, const char *const *override_texts) {
    for (uint32_t i = 0; i < n; i++) {
        const char *s = override_texts && override_texts[i] ? override_texts[i] : texts[i].ptr;
        size_t len = override_texts && override_texts[i] ? strlen(override_texts[i]) : (size_t)texts[i].len;
        if (symbol_append(t, s, len) == SYM_NONE) return -1;
    }
    /* inserted in id order, so the later of two equal texts wins */
    return text_map_reserve(t, t->n_symbols);
}

/* -------------------------------------------------------------------------------------- merge table */

int bpe_load_merges(Tokenizer *t, const GgufArray *merges, Err *err) {
    uint64_t n = merges ? merges->n : 0;
    if (n > INT32_MAX) return err_set(err, "tokenizer.ggml.merges: %llu entries is too many", (unsigned long long)n);
    uint64_t size = 1024;
    while (size < n * 2) size *= 2;
    t->merges = calloc(size, sizeof *t->merges);
    if (!t->merges) return err_set(err, "out of memory for %llu merges", (unsigned long long)n);
    t->merge_mask = (uint32_t)(size - 1);
    t->n_merges = (int32_t)n;

    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t r = 0; r < n; r++) {
        GgufStr m = merges->strs[r];
        /* "left right", split at the first space after the first byte (a left operand may be a space) */
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) continue; /* llama.cpp records an ("", "") pair, which can never match */
        size_t nl = (size_t)(sp - m.ptr), nr = m.len - nl - 1;
        if (nl + nr > buf_cap) {
            buf_cap = (nl + nr) * 2 + 64;
            char *nb = realloc(buf, buf_cap);
            if (!nb) {
                free(buf);
                return err_set(err, "out of memory while loading merges");
            }
            buf = nb;
        }
        uint32_t left = bpe_intern(t, m.ptr, nl);
        uint32_t right = left == SYM_NONE ? SYM_NONE : bpe_intern(t, sp + 1, nr);
        memcpy(buf, m.ptr, nl);
        memcpy(buf + nl, sp + 1, nr);
        uint32_t result = right == SYM_NONE ? SYM_NONE : bpe_intern(t, buf, nl + nr);
        if (result == SYM_NONE) {
            free(buf);
            return err_set(err, "out of memory while loading merges");
        }
        uint64_t key = ((uint64_t)left << 32) | right;
        if (key == 0) key = ~(uint64_t)0;
        uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & t->merge_mask;
        while (t->merges[i].key != 0 && t->merges[i].key != key) i = (i + 1) & t->merge_mask;
        if (t->merges[i].key == 0) { /* the first rule for a pair wins, as with llama.cpp's emplace */
            t->merges[i].key = key;
            t->merges[i].rank = (uint32_t)r;
            t->merges[i].result = result;
        }
    }
    free(buf);
    return 0;
}

/* ------------------------------------------------------------------------------------ word encoding */

typedef struct BpeCandidate {
    uint32_t rank;
    uint32_t left;     /* position of the left symbol */
    uint32_t left_sym; /* symbols at push time: the candidate is stale if either changed */
    uint32_t right_sym;
    uint32_t result; /* the merged symbol */
} BpeCandidate;

static inline bool cand_before(const BpeCandidate *a, const BpeCandidate *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

void bpe_scratch_free(BpeScratch *s) {
    free(s->sym);
    free(s->next);
    free(s->prev);
    free(s->heap);
    memset(s, 0, sizeof *s);
}

static int scratch_reserve(BpeScratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    uint32_t *sym = realloc(s->sym, cap * sizeof *sym);
    if (!sym) return -1;
    s->sym = sym;
    int32_t *next = realloc(s->next, cap * sizeof *next);
    if (!next) return -1;
    s->next = next;
    int32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (!prev) return -1;
    s->prev = prev;
    s->cap = cap;
    return 0;
}

typedef struct Heap {
    BpeCandidate *v;
    size_t n, cap;
} Heap;

static int heap_push(Heap *h, BpeCandidate c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        BpeCandidate *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!cand_before(&c, &h->v[parent])) break;
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = c;
    return 0;
}

static BpeCandidate heap_pop(Heap *h) {
    BpeCandidate top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && cand_before(&h->v[c + 1], &h->v[c])) c++;
        if (!cand_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static int try_candidate(const Tokenizer *t, const BpeScratch *s, Heap *h, int32_t left) {
    if (left < 0) return 0;
    int32_t right = s->next[left];
    if (right < 0) return 0;
    uint32_t rank, result;
    if (!bpe_merge_lookup(t, s->sym[left], s->sym[right], &rank, &result)) return 0;
    BpeCandidate c = {rank, (uint32_t)left, s->sym[left], s->sym[right], result};
    return heap_push(h, c);
}

static int emit_symbol(const Tokenizer *t, uint32_t sym, TokenIds *out) {
    if (sym < (uint32_t)t->n_vocab) return token_ids_push(out, (int32_t)sym);
    /* not a token: one token per byte of its text, where a single-byte token exists */
    const char *s = t->text_arena + t->sym_off[sym];
    uint32_t n = t->sym_off[sym + 1] - t->sym_off[sym];
    for (uint32_t i = 0; i < n; i++) {
        int32_t id = t->single_byte_token[(unsigned char)s[i]];
        if (id >= 0 && token_ids_push(out, id) < 0) return -1;
    }
    return 0;
}

int bpe_encode_word(const Tokenizer *t, const unsigned char *bytes, size_t n, BpeScratch *s, TokenIds *out) {
    if (n == 0) return 0;
    if (n == 1) return emit_symbol(t, t->byte_sym[bytes[0]], out);
    if (n > INT32_MAX || scratch_reserve(s, n) < 0) return -1;
    for (size_t i = 0; i < n; i++) {
        s->sym[i] = t->byte_sym[bytes[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    Heap h = {s->heap, 0, s->heap_cap};
    int rc = 0;
    for (size_t i = 0; i + 1 < n && rc == 0; i++) rc = try_candidate(t, s, &h, (int32_t)i);
    while (rc == 0 && h.n > 0) {
        BpeCandidate c = heap_pop(&h);
        int32_t left = (int32_t)c.left, right = s->next[left];
        if (s->sym[left] != c.left_sym || right < 0 || s->sym[right] != c.right_sym) continue; /* stale */
        s->sym[left] = c.result;
        s->sym[right] = SYM_NONE;
        s->next[left] = s->next[right];
        if (s->next[right] >= 0) s->prev[s->next[right]] = left;
        rc = try_candidate(t, s, &h, s->prev[left]);
        if (rc == 0) rc = try_candidate(t, s, &h, left);
    }
    s->heap = h.v;
    s->heap_cap = h.cap;
    for (int32_t i = 0; rc == 0 && i >= 0; i = s->next[i]) rc = emit_symbol(t, s->sym[i], out);
    return rc;
}
