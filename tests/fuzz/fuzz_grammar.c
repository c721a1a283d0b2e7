/* fuzz_grammar.c — libFuzzer target for the GBNF grammar compiler and its runtime (`make fuzz`; seeds in
 * tests/fuzz/seeds/fuzz_grammar/: llama.cpp's grammars, each followed by a sample). The input is a grammar, then
 * optionally a NUL byte and a text to feed it. Promises checked (a broken one traps):
 *   - a grammar compiles, or fails with one line that names a line and column (or the whole grammar);
 *   - fed bytes the program accepts, its completion can be computed and fed back without harm, and where no
 *     bound was hit (constraint_lossy: more live alternatives than the thread set holds, or the closure's step
 *     budget, or the nesting bound, on the way through the text and the completion) a non-empty completion
 *     is accepted and ends the grammar (an empty one: the live threads all lead to a dead end, as after "a" in
 *     `root ::= "a" [] | "b"`);
 *   - nothing hangs: the closure of every step is bounded. */
#include "server/constrain.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPECT(x)                                                                                          \
    do {                                                                                                   \
        if (!(x)) __builtin_trap();                                                                        \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t glen = nul ? (size_t)(nul - data) : size;
    Err err = {{0}};
    Constraint *c = constraint_grammar((const char *)data, glen, &err);
    if (!c) {
        EXPECT(err.msg[0] && !strchr(err.msg, '\n') && !strncmp(err.msg, "grammar", 7));
        return 0;
    }
    if (nul) {
        const char *text = (const char *)nul + 1;
        const size_t n = size - glen - 1;
        /* the longest accepted prefix, fed byte-sized and in one piece alike */
        size_t k = 0;
        while (k < n && constraint_allows(c, text, k + 1)) k++;
        for (size_t i = 0; i < k; i++) constraint_advance(c, text + i, 1);
        SBuf rest = {0};
        constraint_completion(c, &rest);
        if (rest.n) {
            const bool allowed = constraint_allows(c, rest.p, rest.n);
            constraint_advance(c, rest.p, rest.n); /* refused: the thread set empties */
            if (!constraint_lossy(c)) EXPECT(allowed && constraint_can_end(c));
        }
        sbuf_free(&rest);
    }
    constraint_free(c);
    return 0;
}
