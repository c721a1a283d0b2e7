/* convert_internal.h — what convert.c and convert_vocab.c share (internal to src/convert/). */
#ifndef DL_CONVERT_CONVERT_INTERNAL_H
#define DL_CONVERT_CONVERT_INTERNAL_H

#include <cjson/cJSON.h>

#include "base/err.h"
#include "gguf/gguf_writer.h"

/* Reads a whole JSON file; NULL with a one-line error (missing file: only when required). */
cJSON *cv_read_json(const char *dir, const char *name, bool required, Err *err);
/* The config value of key, text_config first (llama.cpp merges text_config over the top level). */
const cJSON *cv_hparam(const cJSON *cfg, const char *key);

/* Writes the tokenizer.* metadata llama.cpp's _set_vocab_gpt2 + SpecialVocab write, for n_vocab tokens
 * (the config's vocab_size; missing ids become [PADi] tokens of type UNUSED). */
int cv_write_vocab(GgufWriter *w, const char *dir, const cJSON *cfg, int n_vocab, Err *err);

#endif
