/* tokenizer.h — text <-> token ids for Qwen3-Next and Qwen3.5/3.6 GGUF models, identical to llama.cpp.
 *
 * What it does: byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the `qwen2` and `qwen35`
 * pre-tokenizers, read from GGUF metadata (a vocab-only file is enough). Control tokens in the text
 * (`<|im_start|>`, ...) are recognised only when the caller asks (TOKENIZE_PARSE_SPECIAL); user-defined
 * added tokens (`<think>`, `<tool_call>`, ...) always are, as in llama.cpp. Decoding maps ids back to
 * bytes, and a streaming detokenizer turns a token stream into valid UTF-8 text piece by piece.
 *
 * What it does not do: chat templates (chat/chat.h), sampling, anything with tensors. It never prints.
 *
 * Thread safety: a loaded Tokenizer is immutable; any number of threads may encode/decode with it at
 * once. A Detokenizer is one stream's state: one thread at a time.
 *
 * Errors: functions returning int give 0 on success and -1 with a one-line message in *err. */
#ifndef DL_TOKENIZER_TOKENIZER_H
#define DL_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "gguf/gguf.h"

typedef struct Tokenizer Tokenizer;

/* ------------------------------------------------------------------------------------------ loading */

/* Reads the tokenizer from a GGUF's metadata; the Tokenizer copies what it needs, so g may be closed
 * afterwards. Refuses (clear message) a tokenizer model other than "gpt2", a missing pre-tokenizer or
 * one other than qwen2 (and its aliases deepseek-r1-qwen, kormo, f2llmv2, megrez) or qwen35, a
 * missing/mistyped token list or merges, token types of the wrong length or type, add_bos/add_eos
 * without the id. A special id out of range is ignored (as llama.cpp does). Takes ~0.1-0.2 s for a
 * 150k-token vocabulary. */
Tokenizer *tokenizer_load(const Gguf *g, Err *err);
void tokenizer_free(Tokenizer *t);

typedef enum TokenizerPre {
    TOKENIZER_PRE_QWEN2 = 0,  /* Qwen2/Qwen3/Qwen3-Next: letters, single digits, contractions */
    TOKENIZER_PRE_QWEN35 = 1, /* Qwen3.5/3.6: like qwen2, and combining marks \p{M} join letter runs */
} TokenizerPre;

TokenizerPre tokenizer_pre(const Tokenizer *t);
const char *tokenizer_pre_name(const Tokenizer *t); /* the GGUF's tokenizer.ggml.pre string */
int32_t tokenizer_n_vocab(const Tokenizer *t);
int32_t tokenizer_n_merges(const Tokenizer *t);
/* tokenizer.chat_template of the file (NUL-terminated copy), or NULL when the file has none. */
const char *tokenizer_chat_template(const Tokenizer *t);

/* ------------------------------------------------------------------------------------------ encoding */

/* A growable array of token ids. Zero-initialise; free with token_ids_free. */
typedef struct TokenIds {
    int32_t *ids;
    size_t n, cap;
} TokenIds;
void token_ids_free(TokenIds *v);

enum {
    TOKENIZE_PARSE_SPECIAL = 1 << 0, /* control tokens written in the text become their ids */
    TOKENIZE_ADD_SPECIAL = 1 << 1,   /* prepend BOS / append EOS as the GGUF's add_bos/add_eos flags say
                                        (both false for Qwen: then this adds nothing) */
};

/* Appends the ids of text[0..len) (any bytes; need not be NUL-terminated or valid UTF-8) to out.
 * Malformed UTF-8 is tokenized as llama.cpp does: each bad byte counts as U+FFFD. Fails only when
 * memory runs out or len > 2 GiB. Cost is linear in len (plus n log n inside very long words).
 * A prompt rendered by chat/chat.h contains control tokens as text: encode it with
 * TOKENIZE_PARSE_SPECIAL. User text on its own should be encoded without it, so that a user who types
 * "<|im_end|>" cannot forge a control token. */
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, unsigned flags, TokenIds *out, Err *err);

/* The id of the token whose vocabulary text is exactly text[0..len) (e.g. "<think>"), or -1. */
int32_t tokenizer_token_id(const Tokenizer *t, const char *text, size_t len);

/* ------------------------------------------------------------------------------------------ tokens */

/* Token attributes (bit flags, llama.cpp's meaning). Loaded from tokenizer.ggml.token_type, then
 * adjusted as llama.cpp does: tokens whose text marks end of turn or FIM (<|im_end|>, <|endoftext|>,
 * <|fim_pad|>, </s>, ...) get TOKEN_ATTR_CONTROL added. */
enum {
    TOKEN_ATTR_UNKNOWN = 1 << 0,
    TOKEN_ATTR_UNUSED = 1 << 1,
    TOKEN_ATTR_NORMAL = 1 << 2,
    TOKEN_ATTR_CONTROL = 1 << 3,
    TOKEN_ATTR_USER_DEFINED = 1 << 4,
    TOKEN_ATTR_BYTE = 1 << 5,
};
/* 0 for an id out of range. */
unsigned tokenizer_token_attr(const Tokenizer *t, int32_t id);

/* The vocabulary text of a token as stored in the GGUF (GPT-2 byte alphabet for normal tokens), or NULL
 * for an id out of range. Not NUL-terminated: use *len. */
const char *tokenizer_token_text(const Tokenizer *t, int32_t id, size_t *len);

/* The bytes a token stands for: byte-decoded text for normal tokens, the literal text for control,
 * unknown and user-defined tokens. NULL for an id out of range. The bytes of one token may be an
 * incomplete part of a UTF-8 character; use the Detokenizer to produce text. */
const char *tokenizer_piece(const Tokenizer *t, int32_t id, size_t *len);

/* Special ids; -1 where the vocabulary has none. */
typedef struct TokenizerSpecials {
    int32_t bos, eos, eot, eom, unk, sep, pad;
    int32_t im_start, im_end; /* "<|im_start|>", "<|im_end|>" */
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    bool add_bos, add_eos; /* tokenizer.ggml.add_bos_token / add_eos_token (default false) */
} TokenizerSpecials;
const TokenizerSpecials *tokenizer_specials(const Tokenizer *t);

/* End of generation: true for every id in llama.cpp's EOG set (EOS, EOT, EOM, the FIM pad/repo/sep
 * tokens and every token whose text is an end-of-turn marker such as <|im_end|> or <|endoftext|>). */
bool tokenizer_is_eog(const Tokenizer *t, int32_t id);
/* The EOG set, ascending. */
size_t tokenizer_eog_ids(const Tokenizer *t, const int32_t **ids);

/* ------------------------------------------------------------------------------------------ decoding */

enum {
    DETOKENIZE_SPECIAL = 1 << 0, /* render control/unknown tokens as their text (else they vanish) */
    DETOKENIZE_RAW = 1 << 1,     /* tokenizer_decode only: return the exact bytes, even if they are not
                                    valid UTF-8 (llama_detokenize's output); otherwise invalid sequences
                                    become U+FFFD */
};

/* Whole-sequence decoding: the concatenated pieces of ids[0..n) as a NUL-terminated malloc'd string
 * (*out, length *len). Fails on an id out of range (naming it). */
int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, unsigned flags, char **out, size_t *len,
                     Err *err);

/* Streaming decoding, for showing tokens as they are generated. Each push returns the text that became
 * final with this token: bytes of a UTF-8 character split across tokens are held until the character
 * is complete, and invalid bytes come out as U+FFFD — the returned text is always valid UTF-8. */
typedef struct Detokenizer Detokenizer;
Detokenizer *detokenizer_new(const Tokenizer *t, unsigned flags, Err *err); /* flags: DETOKENIZE_SPECIAL */
void detokenizer_free(Detokenizer *d);
/* Feeds one token. *text receives *len >= 0 bytes (not NUL-terminated), valid until the next call on d.
 * Fails on an id out of range; d is unchanged then. */
int detokenizer_push(Detokenizer *d, int32_t id, const char **text, size_t *len, Err *err);
/* End of stream: returns what is still held (an incomplete character becomes U+FFFD) and resets d. */
void detokenizer_flush(Detokenizer *d, const char **text, size_t *len);
/* Forgets held bytes without returning them. */
void detokenizer_reset(Detokenizer *d);

#endif
