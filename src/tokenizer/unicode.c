/* unicode.c — code point class lookup, UTF-8 decoding/encoding and the GPT-2 byte alphabet.
 *
 * The class table: unicode_data.c stores ~2300 runs. On first use they are expanded into a two-level
 * table (one uint16 index per 256-code-point block, then the distinct blocks), so a lookup costs two
 * loads instead of a binary search. Identical blocks (all of a CJK or unassigned plane, say) are stored
 * once, so the table stays a few hundred KiB of static storage of which only the distinct blocks are
 * ever touched. */
#include "tokenizer/unicode.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#define BLOCK_BITS 8
#define BLOCK_SIZE (1u << BLOCK_BITS)
#define N_BLOCKS ((UNICODE_MAX_CODEPOINT + 1) >> BLOCK_BITS) /* 0x1100 */
#define MAX_DISTINCT 1024                                  /* checked at build: ~300 in Unicode 15.1 */
#define HASH_SLOTS 2048

static uint16_t block_index[N_BLOCKS];
static uint16_t blocks[MAX_DISTINCT][BLOCK_SIZE];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;
static bool table_ok;

static uint32_t block_hash(const uint16_t *b) {
    uint32_t h = 2166136261u;
    for (unsigned i = 0; i < BLOCK_SIZE; i++) h = (h ^ b[i]) * 16777619u;
    return h;
}

static void build_table(void) {
    static int16_t slots[HASH_SLOTS]; /* distinct block number + 1, 0 = empty */
    uint16_t cur[BLOCK_SIZE];
    int n_distinct = 0, run = 0;
    for (uint32_t blk = 0; blk < N_BLOCKS; blk++) {
        for (uint32_t i = 0; i < BLOCK_SIZE; i++) {
            uint32_t cp = (blk << BLOCK_BITS) | i;
            while (run + 1 < unicode_n_runs && unicode_runs[run + 1].first <= cp) run++;
            cur[i] = unicode_runs[run].flags;
        }
        uint32_t h = block_hash(cur) & (HASH_SLOTS - 1);
        int found = -1;
        while (slots[h]) {
            if (memcmp(blocks[slots[h] - 1], cur, sizeof cur) == 0) {
                found = slots[h] - 1;
                break;
            }
            h = (h + 1) & (HASH_SLOTS - 1);
        }
        if (found < 0) {
            if (n_distinct == MAX_DISTINCT) return; /* table_ok stays false: lookups fall back to search */
            memcpy(blocks[n_distinct], cur, sizeof cur);
            found = n_distinct++;
            slots[h] = (int16_t)(found + 1);
        }
        block_index[blk] = (uint16_t)found;
    }
    table_ok = true;
}

static uint16_t flags_by_search(uint32_t cp) {
    int lo = 0, hi = unicode_n_runs - 1; /* last run with first <= cp */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (unicode_runs[mid].first <= cp) lo = mid;
        else hi = mid - 1;
    }
    return unicode_runs[lo].flags;
}

uint16_t unicode_flags(uint32_t cp) {
    if (cp > UNICODE_MAX_CODEPOINT) return UNICODE_UNDEFINED;
    pthread_once(&table_once, build_table);
    if (!table_ok) return flags_by_search(cp);
    return blocks[block_index[cp >> BLOCK_BITS]][cp & (BLOCK_SIZE - 1)];
}

void unicode_flags_many(const uint32_t *cps, uint16_t *flags, size_t n) {
    pthread_once(&table_once, build_table);
    if (!table_ok) {
        for (size_t i = 0; i < n; i++) flags[i] = cps[i] > UNICODE_MAX_CODEPOINT ? UNICODE_UNDEFINED : flags_by_search(cps[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t cp = cps[i];
        flags[i] = cp > UNICODE_MAX_CODEPOINT ? UNICODE_UNDEFINED
                                              : blocks[block_index[cp >> BLOCK_BITS]][cp & (BLOCK_SIZE - 1)];
    }
}

static inline bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

uint32_t unicode_decode_lenient(const unsigned char *s, size_t n, size_t *used) {
    unsigned char b0 = s[0];
    *used = 1;
    if (b0 < 0x80) return b0;
    if (!(b0 & 0x40)) return UNICODE_REPLACEMENT; /* stray continuation byte */
    if (!(b0 & 0x20)) {
        if (n < 2 || !is_cont(s[1])) return UNICODE_REPLACEMENT;
        *used = 2;
        return ((uint32_t)(b0 & 0x1F) << 6) | (s[1] & 0x3F);
    }
    if (!(b0 & 0x10)) {
        if (n < 3 || !is_cont(s[1]) || !is_cont(s[2])) return UNICODE_REPLACEMENT;
        *used = 3;
        return ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    }
    if (!(b0 & 0x08)) {
        if (n < 4 || !is_cont(s[1]) || !is_cont(s[2]) || !is_cont(s[3])) return UNICODE_REPLACEMENT;
        uint32_t cp = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                      ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (cp > UNICODE_MAX_CODEPOINT) return UNICODE_REPLACEMENT;
        *used = 4;
        return cp;
    }
    return UNICODE_REPLACEMENT;
}

size_t unicode_decode_lenient_all(const unsigned char *s, size_t n, uint32_t *cps, bool *canonical) {
    size_t i = 0, k = 0;
    bool canon = true;
    while (i < n) {
        if (s[i] < 0x80) {
            cps[k++] = s[i++];
            continue;
        }
        size_t used;
        uint32_t cp = unicode_decode_lenient(s + i, n - i, &used);
        if ((size_t)unicode_encoded_len(cp) != used) canon = false;
        cps[k++] = cp;
        i += used;
    }
    *canonical = canon;
    return k;
}

int unicode_valid_prefix(const unsigned char *s, size_t n, size_t *bad) {
    unsigned char b0 = s[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 < 0x80) return 1;
    if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0;      /* no overlongs */
        else if (b0 == 0xED) hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90;
        else if (b0 == 0xF4) hi = 0x8F; /* <= U+10FFFF */
    } else {
        if (bad) *bad = 1;
        return -1;
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0; /* so far valid, needs more bytes */
        unsigned char c = s[i];
        bool ok = i == 1 ? (c >= lo && c <= hi) : is_cont(c);
        if (!ok) {
            if (bad) *bad = (size_t)i;
            return -1;
        }
    }
    return len;
}

int unicode_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* GPT-2's map: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes
 * (0x00..0x20, 0x7F..0xA0, 0xAD), in byte order, become U+0100..U+0143. */
uint32_t unicode_byte_to_cp(uint8_t b) {
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    if (b == 0xAD) return 0x100 + 67;
    return b;
}

int unicode_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) return (cp <= 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) ? -1 : (int)cp;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 67) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}
