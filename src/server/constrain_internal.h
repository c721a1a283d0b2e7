/* constrain_internal.h — the constraint program shared by its compiler (constrain_schema.c: JSON schemas and
 * tool calls to ops) and its runtime (constrain.c: the NFA). Internal to src/server/.
 *
 * Ops: LIT (exact bytes), INT, NUM (finite JSON numbers: at most 15 integer and 15 fraction digits, no
 * exponent), JSTR (a JSON string), XTEXT (free text, can end anywhere), JANY / JOBJ (any JSON value / any
 * JSON object: a pushdown automaton, numbers bounded so they stay finite), FORK (alternatives), JMP, FAIL
 * (a dead end: nothing can follow, for branches a schema rules out), END. Jumps may go back (array loops);
 * every loop body consumes bytes, so there are no empty cycles.
 * GBNF grammars (grammar.c) add CLASS (one UTF-8 character in a set of code-point ranges, or outside it), CALL
 * (push the return address, go to a rule) and RET (pop): each thread carries its own stack of return
 * addresses. A grammar's loops may have empty bodies; the closure is bounded (CLOSURE_BUDGET) instead. */
#ifndef DL_SERVER_CONSTRAIN_INTERNAL_H
#define DL_SERVER_CONSTRAIN_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/constrain.h"

enum { OP_LIT, OP_INT, OP_NUM, OP_JSTR, OP_XTEXT, OP_JANY, OP_JOBJ, OP_FORK, OP_JMP, OP_FAIL, OP_END, OP_CLASS, OP_CALL,
       OP_RET };
enum { MAX_OPS = 16384, MAX_THREADS = 256, JDEPTH = 24, GSTACK = 24, CLOSURE_BUDGET = 16384, SEEN_SLOTS = 4096 };

/* Grammars: the control ops (FORK, JMP, CALL, RET) one closure has been through, by op and stack, so that a
 * loop whose body may be empty is followed once. */
typedef struct Seen {
    uint32_t gen, pc;
    uint64_t stack;
} Seen;
#define MIN_LEN_INF ((size_t)1 << 40) /* the shortest completion from a FAIL: none */

typedef struct COp {
    int kind;
    char *lit;
    size_t len;
    int *tgt; /* FORK targets, JMP and CALL target (tgt[0]) */
    int n_tgt;
    uint32_t *rng; /* CLASS: code-point ranges [lo, hi] as pairs */
    int n_rng;
    bool neg;          /* CLASS: any character outside the ranges */
    uint32_t example;  /* CLASS: a character of the class (for completions); NO_CHAR when none */
} COp;
#define NO_CHAR 0xFFFFFFFFu

/* JSON pushdown states */
enum { J_VALUE, J_OBJ_FIRST, J_OBJ_KEY, J_COLON, J_ARR_FIRST, J_AFTER, J_STR, J_ESC, J_HEX, J_NUM, J_LIT, J_DONE };

typedef struct JState {
    uint8_t st, depth, sub, lit, in_key, obj_required, ndig;
    uint8_t stack[JDEPTH];
} JState;

typedef struct Thread {
    uint16_t pc;
    uint16_t pos; /* LIT offset, digit count */
    uint8_t sub;
    uint8_t fb[3]; /* forbidden-substring progress */
    uint8_t sp;    /* grammars: return addresses on the stack */
    uint32_t cp;   /* CLASS: the code point being decoded */
    uint16_t stack[GSTACK];
    JState j;
} Thread;

struct Constraint {
    COp *ops;
    int n_ops, cap_ops;
    size_t *min_len; /* shortest completion from each op (MIN_LEN_INF: none) */
    Thread threads[MAX_THREADS];
    int n_threads;
    bool oom; /* out of memory or past MAX_OPS */
    bool end_when_all; /* grammars: done when every thread reached END (else: as soon as one did — JSON, calls) */
    int budget;        /* closure steps left */
    int dropped;       /* threads dropped so far (the set full, or the closure's budget spent): a bound hit */
    bool lossy;        /* a thread of the live set was dropped: valid text may be refused from here on */
    Seen *seen;        /* grammars: [SEEN_SLOTS] (NULL: JSON and calls, whose loops always read a byte) */
    uint32_t gen;      /* the closure seen[] belongs to */
};

/* Emitting ops; on failure c->oom is set and the index is -1. */
int cop_emit(Constraint *c, int kind);
void cop_lit(Constraint *c, const char *s, size_t n);
void cop_lits(Constraint *c, const char *s);
int cop_fork(Constraint *c, int n);
int cop_jmp(Constraint *c);
int cop_call(Constraint *c); /* target set with cop_target(c, op, 0, rule start) */
/* A CLASS of n ranges (pairs lo, hi), negated or not. */
void cop_class(Constraint *c, const uint32_t *ranges, int n, bool neg);
void cop_target(Constraint *c, int op, int k, int target);

/* After the last op: the shortest completions, the initial threads. -1 (with err) when the program is too
 * large or cannot reach its END. */
int constraint_finish(Constraint *c, Err *err);

#endif
