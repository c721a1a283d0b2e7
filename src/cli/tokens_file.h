/* tokens_file.h — reading token-id lists ("1,2,3" or whitespace separated; files as in tests/data/seqs). */
#ifndef DL_CLI_TOKENS_FILE_H
#define DL_CLI_TOKENS_FILE_H

#include <stdint.h>

#include "base/err.h"

/* Parses ids separated by commas and/or whitespace; refuses anything else and values outside int32. */
int tokens_parse(const char *text, int32_t **ids, int *n, Err *err);
int tokens_file_read(const char *path, int32_t **ids, int *n, Err *err);

#endif
