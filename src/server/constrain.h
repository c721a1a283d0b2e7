/* constrain.h — constrained generation for forced tool calls (tool_choice "required" or a named
 * function) and JSON output (response_format json_object / json_schema; the schema subset and its
 * strictness: constrain_schema.c).
 *
 * A request's constraint is compiled into a small program over bytes — literals, alternatives, and
 * typed holes (integer, number, JSON string, free XML text, any JSON value) — run as a set of threads
 * (an NFA whose JSON holes carry a pushdown stack). The scheduler masks every token whose bytes the
 * program cannot accept, so the model chooses among the valid continuations only; when the program
 * reaches its end the generation stops. If the token budget runs out first, constraint_completion gives
 * the shortest text that closes what was started (the call is then still well-formed).
 *
 * Forced tool calls follow the model's own format: Qwen3.5 / Qwen3-Coder
 *   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * and Qwen3
 *   <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
 * with the parameters of the function's JSON schema: the required ones in their listed order, then each
 * optional one that the model chooses to give, in schema order. Values follow the schema where it is
 * in the subset constrain_schema.c compiles (objects, arrays, enum, const, anyOf, $ref, ...), unknown
 * keywords ignored; XML string values are free text. Text values may not contain the closing tags that
 * would cut the call short. */
#ifndef DL_SERVER_CONSTRAIN_H
#define DL_SERVER_CONSTRAIN_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "server/util.h"

typedef struct Constraint Constraint;

/* A forced call: xml selects the XML format (else JSON). only: the function to call, or NULL for any of
 * tools (an array of {"type": "function", "function": {"name", "parameters"}}). */
Constraint *constraint_tool_call(bool xml, const cJSON *tools, const char *only, Err *err);
/* A JSON value following schema (NULL: any JSON object). A schema outside the supported subset is refused:
 * NULL, with err naming the keyword and where it is. */
Constraint *constraint_json(const cJSON *schema, Err *err);
void constraint_free(Constraint *c);

/* Whether bytes[0..n) can extend the text accepted so far (n = 0: whether the program is still alive). */
bool constraint_allows(const Constraint *c, const char *bytes, size_t n);
/* Feeds bytes that constraint_allows accepted (bytes it refuses leave no live thread). */
void constraint_advance(Constraint *c, const char *bytes, size_t n);
/* Whether a bound was hit on the way here (more than MAX_THREADS live alternatives of an ambiguous grammar, or
 * the closure's step budget): some were dropped, so from here on text the grammar allows may be refused and
 * the completion may be refused too. Text the grammar refuses is never allowed either way. */
bool constraint_lossy(const Constraint *c);
/* When the continuation is fixed text (one alternative left, inside a literal): that text. The scheduler
 * then emits the tokens of its canonical tokenization instead of sampling byte-sized pieces of it. */
bool constraint_literal(const Constraint *c, const char **text, size_t *len);
/* The program reached its end: nothing more may follow. */
bool constraint_done(const Constraint *c);
/* The text so far is complete (a grammar may go on, or stop here: an end-of-generation token is allowed). */
bool constraint_can_end(const Constraint *c);
/* A GBNF grammar (llama.cpp's format: grammar.c), starting at its rule `root`. NULL with err ("line L, column
 * C: ...") for a grammar that does not parse, has an undefined rule, or can never end. */
Constraint *constraint_grammar(const char *text, size_t len, Err *err);
/* Appends the shortest text that completes the program from here. */
void constraint_completion(const Constraint *c, SBuf *out);
/* The same after bytes (which the program must accept: false otherwise), without advancing. The scheduler
 * uses it to keep a constrained answer within max_tokens: a token whose completion would not fit the
 * budget that is left is not taken, the shortest completion is written instead. */
bool constraint_completion_after(const Constraint *c, const char *bytes, size_t n, SBuf *out);

#endif
