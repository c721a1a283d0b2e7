/* gen_grammar.h — `run` with a GBNF grammar (--grammar TEXT, --grammar-file FILE, as llama.cpp's CLI): each
 * token is drawn from those the grammar allows (src/server/grammar.c, the server's constraint machinery), an
 * end-of-generation token only where the grammar may end, and the run stops when nothing more may follow. */
#ifndef DL_CLI_GEN_GRAMMAR_H
#define DL_CLI_GEN_GRAMMAR_H

#include <stdbool.h>

#include "deltallm.h"

typedef struct GenGrammar GenGrammar;

/* NULL with err->msg empty when neither is given; NULL with err set for a bad grammar or an unreadable file. */
GenGrammar *gen_grammar_open(const char *text, const char *file, const DlEngine *e, DlError *err);
void gen_grammar_free(GenGrammar *g);
/* The next token (drawn with smp, not yet accepted), or -1 when the grammar allows none. */
int32_t gen_grammar_sample(GenGrammar *g, DlSampler *smp, const float *logits);
/* Feeds the token's text; true when the grammar is complete and nothing may follow. */
bool gen_grammar_accept(GenGrammar *g, int32_t token);

#endif
