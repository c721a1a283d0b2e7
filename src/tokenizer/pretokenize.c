/* pretokenize.c — the qwen2 / qwen35 pre-tokenizers (see pretokenize.h for the regexes).
 *
 * One scan over the code points; at each position the alternatives are tried in regex order and the
 * first that applies consumes its run. Behaviour that a reader of the regex might not expect, kept on
 * purpose because the reference does the same:
 *   - the optional prefix of a letter run is any one code point except \r, \n and digits (a space, a
 *     tab, punctuation, and for qwen35 a mark) — it is taken whenever a letter (or mark) follows;
 *   - "\s+(?!\S)" gives back exactly one whitespace code point when more text follows the run;
 *   - a run of whitespace that contains \r or \n ends right after its last \r / \n;
 *   - contractions are case-insensitive ('S, 'Ll, ...) and are tried first, before any other rule.
 * Positions past the end read as "no code point" (flags 0), never as whitespace. */
#include "tokenizer/pretokenize.h"

#include "tokenizer/unicode.h"

static inline uint16_t flags_at(const uint16_t *flags, size_t n, size_t i) { return i < n ? flags[i] : 0; }

static inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

size_t pretokenize(TokenizerPre pre, const uint32_t *cps, const uint16_t *flags, size_t n, uint32_t *ends) {
    /* letter-run class and the classes the punctuation run stops at */
    const uint16_t word = pre == TOKENIZER_PRE_QWEN35 ? (UNICODE_LETTER | UNICODE_MARK) : UNICODE_LETTER;
    const uint16_t not_punct = UNICODE_WHITESPACE | UNICODE_NUMBER | word;
    size_t n_out = 0;
    size_t pos = 0;
#define EMIT(end) (ends[n_out++] = (uint32_t)(end), pos = (end))

    while (pos < n) {
        const uint32_t c = cps[pos];
        const uint16_t f = flags[pos];

        /* contractions: 's 't 're 've 'm 'll 'd, any case */
        if (c == '\'' && pos + 1 < n) {
            uint32_t c1 = ascii_lower(cps[pos + 1]);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                EMIT(pos + 2);
                continue;
            }
            if (pos + 2 < n) {
                uint32_t c2 = ascii_lower(cps[pos + 2]);
                if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
                    EMIT(pos + 3);
                    continue;
                }
            }
        }

        /* [^\r\n\p{L}\p{N}]?\p{L}+  (qwen35: [\p{L}\p{M}]+) */
        if (c != '\r' && c != '\n' && !(f & UNICODE_NUMBER) && ((f & word) || (flags_at(flags, n, pos + 1) & word))) {
            size_t end = pos + 1;
            while (end < n && (flags[end] & word)) end++;
            EMIT(end);
            continue;
        }

        /* \p{N}: one digit at a time */
        if (f & UNICODE_NUMBER) {
            EMIT(pos + 1);
            continue;
        }

        /* " ?[^\s\p{L}\p{N}]+[\r\n]*" */
        {
            size_t end = pos + (c == ' ');
            uint16_t f2 = flags_at(flags, n, end);
            if (!(f2 & not_punct)) {
                while (f2 && !(f2 & not_punct)) f2 = flags_at(flags, n, ++end);
                while (end < n && (cps[end] == '\r' || cps[end] == '\n')) end++;
                EMIT(end);
                continue;
            }
        }

        /* whitespace runs */
        size_t run = 0, after_last_newline = 0;
        while (pos + run < n && (flags[pos + run] & UNICODE_WHITESPACE)) {
            if (cps[pos + run] == '\r' || cps[pos + run] == '\n') after_last_newline = pos + run + 1;
            run++;
        }
        if (after_last_newline) { /* \s*[\r\n]+ */
            EMIT(after_last_newline);
        } else if (run > 1 && pos + run < n) { /* \s+(?!\S) */
            EMIT(pos + run - 1);
        } else if (run > 0) { /* \s+ */
            EMIT(pos + run);
        } else {
            EMIT(pos + 1); /* nothing matched: one code point on its own */
        }
    }
#undef EMIT
    return n_out;
}
