/* tokenizer_internal.h — the Tokenizer's data layout, shared by the files of src/tokenizer/ only.
 *
 * Symbols: BPE works on symbol ids, never on strings. Symbol i < n_vocab is token i (its canonical id:
 * when two tokens share a text, the later one, as llama.cpp's text->id map does). Symbols >= n_vocab are
 * "virtual": texts that occur in merges (as an operand or a result) but are not tokens. Every symbol has
 * its text in one arena, and text -> symbol is a hash map, so a merge rule is just
 * (left symbol, right symbol) -> (rank, result symbol). */
#ifndef DL_TOKENIZER_INTERNAL_H
#define DL_TOKENIZER_INTERNAL_H

#include <stdint.h>

#include "tokenizer/tokenizer.h"

#define SYM_NONE UINT32_MAX

typedef struct MergeSlot {
    uint64_t key; /* (left << 32) | right; 0 = empty slot (symbol pair (0,0) is stored with key ~0) */
    uint32_t rank;
    uint32_t result;
} MergeSlot;

/* Special-token matcher: a byte trie over the texts of control, user-defined and unknown tokens. */
typedef struct TrieNode {
    uint8_t byte;
    int32_t child;   /* first child, -1 none */
    int32_t sibling; /* next sibling, -1 none */
    int32_t token;   /* token ending here, -1 none */
} TrieNode;

struct Tokenizer {
    TokenizerPre pre;
    char pre_name[64];
    int32_t n_vocab;
    int32_t n_merges;

    /* symbol texts: symbol s is text_arena[sym_off[s] .. sym_off[s + 1]) */
    uint32_t n_symbols, sym_cap;
    uint32_t *sym_off;
    char *text_arena;
    size_t arena_len, arena_cap;
    uint32_t *text_slots; /* hash map text -> symbol; SYM_NONE = empty */
    uint32_t text_mask;

    uint8_t *attr;        /* n_vocab TOKEN_ATTR_* */
    uint32_t *piece_off;  /* n_vocab + 1 offsets into piece_arena */
    char *piece_arena;

    MergeSlot *merges;
    uint32_t merge_mask;

    uint32_t byte_sym[256];          /* symbol of the GPT-2 character of each byte */
    int32_t single_byte_token[256];  /* token whose text is that one raw byte, or -1 (BPE fallback) */

    TokenizerSpecials sp;
    int32_t *eog;
    size_t n_eog;

    TrieNode *trie; /* node 0 is the root; NULL when the vocabulary has no special tokens */
    int32_t n_trie;
    int32_t *special_rank; /* n_vocab: position in llama.cpp's matching order (longest text first), -1 */
    bool special_first_byte[256];

    char *chat_template;
};

/* bpe.c */
uint32_t bpe_text_hash(const char *s, size_t n);
uint32_t bpe_symbol_lookup(const Tokenizer *t, const char *s, size_t n); /* SYM_NONE if unknown */
/* Looks up the merge of (left, right): rank and result symbol, false if the pair does not merge. */
static inline bool bpe_merge_lookup(const Tokenizer *t, uint32_t left, uint32_t right, uint32_t *rank,
                                    uint32_t *result) {
    uint64_t key = ((uint64_t)left << 32) | right;
    if (key == 0) key = ~(uint64_t)0;
    uint32_t i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & t->merge_mask;
    for (;;) {
        const MergeSlot *s = &t->merges[i];
        if (s->key == key) {
            *rank = s->rank;
            *result = s->result;
            return true;
        }
        if (s->key == 0) return false;
        i = (i + 1) & t->merge_mask;
    }
}

/* Per-call scratch for BPE (grown as needed, freed by bpe_scratch_free). */
typedef struct BpeScratch {
    uint32_t *sym;  /* symbol at each position, SYM_NONE once merged away */
    int32_t *next, *prev;
    size_t cap;
    struct BpeCandidate *heap;
    size_t heap_cap;
} BpeScratch;
void bpe_scratch_free(BpeScratch *s);

/* Encodes one pre-token (its bytes, already normalised UTF-8) and appends the ids to out. */
int bpe_encode_word(const Tokenizer *t, const unsigned char *bytes, size_t n, BpeScratch *s, TokenIds *out);

/* Loads tokenizer.ggml.merges into t->merges, interning operands that are not tokens as virtual
 * symbols (grows the symbol tables). */
int bpe_load_merges(Tokenizer *t, const GgufArray *merges, Err *err);
/* Appends the vocabulary's texts as symbols 0..n-1 (override_texts[i], when not NULL, replaces text i)
 * and builds the text map; the later of two equal texts wins the map. */
int bpe_add_tokens(Tokenizer *t, const GgufStr *texts, uint32_t n, const char *const *override_texts);
/* Adds a symbol text (interning); returns its symbol id, or SYM_NONE when memory runs out. */
uint32_t bpe_intern(Tokenizer *t, const char *s, size_t n);

/* tokenizer.c */
int token_ids_push(TokenIds *v, int32_t id);

#endif
