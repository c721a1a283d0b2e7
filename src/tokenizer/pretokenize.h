/* pretokenize.h — splits decoded text into pre-tokens (the "words" BPE merges within), reproducing
 * llama.cpp's hand-written splitters for the Qwen regexes (unicode.cpp, unicode_regex_split_custom_qwen2
 * and _qwen35) decision for decision, including where they differ from a regex engine.
 *
 *   qwen2:  (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 *           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   qwen35: the same with [\p{L}\p{M}]+ for the letter run and [^\s\p{L}\p{M}\p{N}] for punctuation.
 *
 * Internal to src/tokenizer/. */
#ifndef DL_TOKENIZER_PRETOKENIZE_H
#define DL_TOKENIZER_PRETOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* cps[0..n) are the code points of one text fragment and flags[i] = unicode_flags(cps[i]). Writes the
 * end index (exclusive) of each pre-token, in order, to ends[] (room for n entries: each pre-token has
 * at least one code point) and returns their number. */
size_t pretokenize(TokenizerPre pre, const uint32_t *cps, const uint16_t *flags, size_t n, uint32_t *ends);

#endif
