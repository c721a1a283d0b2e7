/* unicode.h — the Unicode knowledge the tokenizer needs, and nothing more: code point classes (from the
 * generated unicode_data.c), UTF-8 decoding in two flavours (llama.cpp-compatible for tokenizing,
 * strict for validating output), UTF-8 encoding, and GPT-2's byte <-> printable-character map.
 *
 * Not here: normalisation (llama.cpp's BPE path does none), case mapping beyond ASCII (the generator
 * proves ASCII suffices for the contractions), anything that allocates. */
#ifndef DL_TOKENIZER_UNICODE_H
#define DL_TOKENIZER_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Code point flags. The low byte is the folded general category (exactly one bit set); WHITESPACE is the
 * separate White_Space bit that \s of the pre-tokenizer regexes means. Values match tools/gen_unicode.py. */
enum {
    UNICODE_UNDEFINED = 0x0001,   /* Cn: unassigned */
    UNICODE_NUMBER = 0x0002,      /* \p{N} */
    UNICODE_LETTER = 0x0004,      /* \p{L} */
    UNICODE_SEPARATOR = 0x0008,   /* \p{Z} */
    UNICODE_MARK = 0x0010,        /* \p{M} */
    UNICODE_PUNCTUATION = 0x0020, /* \p{P} */
    UNICODE_SYMBOL = 0x0040,      /* \p{S} */
    UNICODE_CONTROL = 0x0080,     /* \p{C} minus Cn */
    UNICODE_WHITESPACE = 0x0100,  /* \s */
};

#define UNICODE_MAX_CODEPOINT 0x10FFFF
#define UNICODE_REPLACEMENT 0xFFFD

typedef struct UnicodeRun {
    uint32_t first;
    uint16_t flags;
} UnicodeRun;

/* Generated (unicode_data.c). */
extern const UnicodeRun unicode_runs[];
extern const int unicode_n_runs;
extern const char unicode_data_version[];

/* Flags of a code point (UNICODE_UNDEFINED above U+10FFFF). A two-level table is built from the runs on
 * first use (thread-safe); the lookup itself is two loads. */
uint16_t unicode_flags(uint32_t cp);

/* unicode_flags for n code points at once (the hot path of tokenizing). */
void unicode_flags_many(const uint32_t *cps, uint16_t *flags, size_t n);

/* Decodes one code point from s[0..n) (n >= 1) exactly as llama.cpp's tokenizer does, so that token ids
 * agree on malformed input too: a lead byte followed by the right number of continuation bytes decodes
 * whatever it spells (overlong forms and surrogates included); anything else yields U+FFFD and consumes
 * one byte. One deviation: a sequence that would spell a value above U+10FFFF (llama.cpp aborts on it)
 * is also treated as one bad byte. Stores the byte count in *used. */
uint32_t unicode_decode_lenient(const unsigned char *s, size_t n, size_t *used);

/* Decodes all of s[0..n) with unicode_decode_lenient into cps (room for n) and returns the number of
 * code points. *canonical is set to whether re-encoding the code points gives back s exactly (false
 * when there were bad bytes or overlong forms). */
size_t unicode_decode_lenient_all(const unsigned char *s, size_t n, uint32_t *cps, bool *canonical);

/* Bytes of the UTF-8 encoding of cp (<= U+10FFFF). */
static inline int unicode_encoded_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

/* Length of the valid UTF-8 sequence at s[0..n) (well-formed per Unicode: no overlongs, no surrogates,
 * <= U+10FFFF): 1..4; 0 when s[0..n) is a proper prefix of a valid sequence (more bytes may complete
 * it); -1 when the bytes are invalid — then *bad (if not NULL) is the length of the maximal ill-formed
 * subpart to replace with one U+FFFD (Unicode's "substitution of maximal subparts"). */
int unicode_valid_prefix(const unsigned char *s, size_t n, size_t *bad);

/* Encodes cp (<= U+10FFFF; surrogates are encoded as-is, as llama.cpp does) into out; returns 1..4. */
int unicode_encode(uint32_t cp, char out[4]);

/* GPT-2 byte-level BPE: every byte maps to one printable code point (bytes '!'..'~', 0xA1..0xAC and
 * 0xAE..0xFF map to themselves, the rest to U+0100.. in order). */
uint32_t unicode_byte_to_cp(uint8_t byte);
/* The inverse: the byte for a code point of that alphabet, or -1. */
int unicode_cp_to_byte(uint32_t cp);

#endif
