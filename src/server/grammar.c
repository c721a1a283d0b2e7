/* grammar.c — GBNF grammars (llama.cpp's format, its grammars/README.md) compiled to the constraint program of
 * constrain_internal.h, so that a `grammar` runs through the same masking, literal shortcuts and shortest
 * completions as JSON schemas and tool calls.
 *
 * The language: rules `name ::= alternatives`, one per line (a rule's body may go on over lines inside
 * parentheses, and after `::=` or `|`); `#` comments; elements "literal" (escapes \n \r \t \\ \" \[ \] \xHH
 * \uHHHH \UHHHHHHHH), [character classes] ([^...] negated, a-z ranges), `.` (any character), rule names,
 * ( groups ), and the postfixes * + ? {m} {m,} {m,n} {,n}. The grammar starts at `root`.
 *
 * Compilation: the text is parsed into a small tree per rule, then emitted: a literal is LIT, a class CLASS,
 * a rule reference CALL (each rule's body ends in RET), alternatives a FORK with a JMP after each branch,
 * x* a FORK looping back, x{m,n} m copies then n−m nested optional ones. The program is CALL root; END; the
 * rules. Left recursion is not supported (as in llama.cpp): it only nests until the threads' stacks are full.
 * Token references (<[id]>, <token>) are refused. Written from the format's description; no code of llama.cpp. */
#include "server/constrain_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_SEQ, N_ALT, N_LIT, N_CLASS, N_REF, N_REP };
enum { MAX_RULES = 1024, MAX_DEPTH = 48, MAX_REPEAT = 256, MAX_TEXT = 1 << 20 };

typedef struct GNode {
    int kind;
    int *kids, n_kids;
    char *lit; /* N_LIT: UTF-8 bytes */
    size_t len;
    uint32_t *rng; /* N_CLASS: pairs */
    int n_rng;
    bool neg;
    int rule;     /* N_REF */
    int min, max; /* N_REP: max -1 = unbounded */
} GNode;

typedef struct GParser {
    const char *s;
    size_t n, pos;
    Err *err;
    bool failed;
    GNode *nodes;
    int n_nodes, cap_nodes;
    char *names[MAX_RULES];
    int body[MAX_RULES]; /* node, -1 = not defined yet */
    size_t ref_at[MAX_RULES]; /* where it was first referenced (for the message) */
    int n_rules;
    int depth;
} GParser;

static int fail(GParser *p, size_t at, const char *msg, const char *arg) {
    if (p->failed) return -1;
    p->failed = true;
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->n; i++) {
        if (p->s[i] == '\n') line++, col = 1;
        else col++;
    }
    err_set(p->err, "grammar: line %d, column %d: %s%s", line, col, msg, arg ? arg : "");
    return -1;
}

static int new_node(GParser *p, int kind) {
    if (p->n_nodes == p->cap_nodes) {
        int cap = p->cap_nodes ? p->cap_nodes * 2 : 64;
        GNode *nn = realloc(p->nodes, sizeof *nn * (size_t)cap);
        if (!nn) return fail(p, p->pos, "out of memory", NULL);
        p->nodes = nn, p->cap_nodes = cap;
    }
    p->nodes[p->n_nodes] = (GNode){.kind = kind, .rule = -1};
    return p->n_nodes++;
}

static int add_kid(GParser *p, int node, int kid) {
    GNode *g = &p->nodes[node];
    int *k = realloc(g->kids, sizeof *k * (size_t)(g->n_kids + 1));
    if (!k) return fail(p, p->pos, "out of memory", NULL);
    g->kids = k;
    g->kids[g->n_kids++] = kid;
    return 0;
}

static bool word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static char peek(const GParser *p, size_t k) { return p->pos + k < p->n ? p->s[p->pos + k] : 0; }

/* Spaces, tabs and comments; newlines too when nl. */
static void space(GParser *p, bool nl) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->n && p->s[p->pos] != '\n') p->pos++;
        } else {
            break;
        }
    }
}

static int rule_index(GParser *p, const char *name, size_t len, size_t at) {
    for (int i = 0; i < p->n_rules; i++)
        if (strlen(p->names[i]) == len && !memcmp(p->names[i], name, len)) return i;
    if (p->n_rules == MAX_RULES) return fail(p, at, "too many rules", NULL);
    char *s = malloc(len + 1);
    if (!s) return fail(p, at, "out of memory", NULL);
    memcpy(s, name, len);
    s[len] = 0;
    p->names[p->n_rules] = s;
    p->body[p->n_rules] = -1;
    p->ref_at[p->n_rules] = at;
    return p->n_rules++;
}

static int hex_value(GParser *p, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        char c = peek(p, 0);
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(p, p->pos, "expected a hexadecimal digit", NULL);
        v = v * 16 + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

/* One character of a literal or class (an escape, or one UTF-8 character). */
static int read_char(GParser *p, uint32_t *cp) {
    const size_t at = p->pos;
    unsigned char c = (unsigned char)peek(p, 0);
    if (p->pos >= p->n) return fail(p, at, "unexpected end of the grammar", NULL);
    if (c == '\\') {
        p->pos++;
        char e = peek(p, 0);
        p->pos++;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '\\': case '"': case '[': case ']': case '-': case '^': *cp = (uint32_t)e; return 0;
        case 'x': return hex_value(p, 2, cp);
        case 'u': return hex_value(p, 4, cp);
        case 'U':
            if (hex_value(p, 8, cp)) return -1;
            return *cp > 0x10FFFF ? fail(p, at, "a code point above U+10FFFF", NULL) : 0;
        default: return fail(p, at, "unknown escape", NULL);
        }
    }
    int k = c < 0x80 ? 0 : c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : -1;
    if (k < 0) return fail(p, at, "invalid UTF-8", NULL);
    uint32_t v = k == 0 ? c : k == 1 ? c & 0x1Fu : k == 2 ? c & 0x0Fu : c & 0x07u;
    p->pos++;
    for (int i = 0; i < k; i++, p->pos++) {
        unsigned char d = (unsigned char)peek(p, 0);
        if (p->pos >= p->n || (d & 0xC0) != 0x80) return fail(p, at, "invalid UTF-8", NULL);
        v = v << 6 | (d & 0x3Fu);
    }
    *cp = v;
    return 0;
}

static int put_utf8(GNode *g, uint32_t cp) {
    char *l = realloc(g->lit, g->len + 4);
    if (!l) return -1;
    g->lit = l;
    if (cp < 0x80) l[g->len++] = (char)cp;
    else if (cp < 0x800) l[g->len++] = (char)(0xC0 | cp >> 6), l[g->len++] = (char)(0x80 | (cp & 0x3F));
    else if (cp < 0x10000) {
        l[g->len++] = (char)(0xE0 | cp >> 12), l[g->len++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        l[g->len++] = (char)(0x80 | (cp & 0x3F));
    } else {
        l[g->len++] = (char)(0xF0 | cp >> 18), l[g->len++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        l[g->len++] = (char)(0x80 | ((cp >> 6) & 0x3F)), l[g->len++] = (char)(0x80 | (cp & 0x3F));
    }
    return 0;
}

static int literal(GParser *p) {
    const size_t at = p->pos;
    p->pos++; /* " */
    int nd = new_node(p, N_LIT);
    if (nd < 0) return -1;
    while (peek(p, 0) != '"') {
        if (p->pos >= p->n || peek(p, 0) == '\n') return fail(p, at, "unterminated literal", NULL);
        uint32_t cp;
        if (read_char(p, &cp)) return -1;
        if (put_utf8(&p->nodes[nd], cp)) return fail(p, at, "out of memory", NULL);
    }
    p->pos++;
    return nd;
}

static int char_class(GParser *p, bool any) {
    const size_t at = p->pos;
    int nd = new_node(p, N_CLASS);
    if (nd < 0) return -1;
    if (any) { /* . : any character but none (a negated empty set) */
        p->pos++;
        p->nodes[nd].neg = true;
        return nd;
    }
    p->pos++; /* [ */
    if (peek(p, 0) == '^') p->nodes[nd].neg = true, p->pos++;
    while (peek(p, 0) != ']') {
        if (p->pos >= p->n) return fail(p, at, "unterminated character class", NULL);
        uint32_t lo, hi;
        if (read_char(p, &lo)) return -1;
        hi = lo;
        if (peek(p, 0) == '-' && peek(p, 1) != ']' && p->pos + 1 < p->n) {
            p->pos++;
            if (read_char(p, &hi)) return -1;
            if (hi < lo) return fail(p, at, "a character range from high to low", NULL);
        }
        GNode *g = &p->nodes[nd];
        uint32_t *r = realloc(g->rng, sizeof *r * 2 * (size_t)(g->n_rng + 1));
        if (!r) return fail(p, at, "out of memory", NULL);
        g->rng = r;
        r[2 * g->n_rng] = lo, r[2 * g->n_rng + 1] = hi;
        g->n_rng++;
    }
    p->pos++;
    return nd;
}

static int alternatives(GParser *p, bool nested);

static int number(GParser *p, int *out) {
    if (!(peek(p, 0) >= '0' && peek(p, 0) <= '9')) return 0;
    long v = 0;
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        v = v * 10 + (peek(p, 0) - '0');
        if (v > MAX_REPEAT) return fail(p, p->pos, "a repetition count above 256", NULL);
        p->pos++;
    }
    *out = (int)v;
    return 1;
}

/* x* x+ x? x{m,n} around node x. */
static int postfix(GParser *p, int x) {
    for (;;) {
        char c = peek(p, 0);
        int lo, hi;
        if (c == '*') lo = 0, hi = -1;
        else if (c == '+') lo = 1, hi = -1;
        else if (c == '?') lo = 0, hi = 1;
        else if (c == '{') {
            const size_t at = p->pos;
            p->pos++;
            space(p, false);
            int has_lo = number(p, &lo);
            if (has_lo < 0) return -1;
            if (!has_lo) lo = 0;
            space(p, false);
            if (peek(p, 0) == ',') {
                p->pos++;
                space(p, false);
                int has_hi = number(p, &hi);
                if (has_hi < 0) return -1;
                if (!has_hi) hi = -1;
            } else {
                if (!has_lo) return fail(p, at, "expected a count in { }", NULL);
                hi = lo;
            }
            space(p, false);
            if (peek(p, 0) != '}') return fail(p, at, "expected '}'", NULL);
            if (hi >= 0 && hi < lo) return fail(p, at, "a repetition {m,n} with n < m", NULL);
        } else {
            return x;
        }
        p->pos++;
        int r = new_node(p, N_REP);
        if (r < 0 || add_kid(p, r, x)) return -1;
        p->nodes[r].min = lo, p->nodes[r].max = hi;
        x = r;
    }
}

static int sequence(GParser *p, bool nested) {
    int seq = new_node(p, N_SEQ);
    if (seq < 0) return -1;
    for (;;) {
        const char c = peek(p, 0);
        const size_t at = p->pos;
        int x;
        if (p->pos >= p->n) break;
        if (c == '"') x = literal(p);
        else if (c == '[') x = char_class(p, false);
        else if (c == '.') x = char_class(p, true);
        else if (c == '(') {
            if (++p->depth > MAX_DEPTH) return fail(p, at, "groups nested too deep", NULL);
            p->pos++;
            space(p, true);
            x = alternatives(p, true);
            if (x < 0) return -1;
            if (peek(p, 0) != ')') return fail(p, at, "expected ')' to close this group", NULL);
            p->pos++;
            p->depth--;
        } else if (word_char(c)) {
            size_t e = p->pos;
            while (e < p->n && word_char(p->s[e])) e++;
            x = new_node(p, N_REF);
            if (x < 0) return -1;
            int r = rule_index(p, p->s + p->pos, e - p->pos, at);
            if (r < 0) return -1;
            p->nodes[x].rule = r;
            p->pos = e;
        } else if (c == '<') {
            return fail(p, at, "token references (<...>) are not supported", NULL);
        } else {
            break;
        }
        if (x < 0 || (x = postfix(p, x)) < 0 || add_kid(p, seq, x)) return -1;
        space(p, nested);
        /* outside a group a line ends the rule: the next rule (name ::=) is the caller's */
        if (!nested && p->pos < p->n && (peek(p, 0) == '\n' || peek(p, 0) == '\r')) break;
    }
    return seq;
}

static int alternatives(GParser *p, bool nested) {
    int alt = new_node(p, N_ALT);
    if (alt < 0) return -1;
    for (;;) {
        int s = sequence(p, nested);
        if (s < 0 || add_kid(p, alt, s)) return -1;
        if (peek(p, 0) != '|') break;
        p->pos++;
        space(p, true);
    }
    return alt;
}

static int parse(GParser *p) {
    space(p, true);
    while (p->pos < p->n) {
        const size_t at = p->pos;
        size_t e = p->pos;
        while (e < p->n && word_char(p->s[e])) e++;
        if (e == p->pos) return fail(p, at, "expected a rule name", NULL);
        int r = rule_index(p, p->s + p->pos, e - p->pos, at);
        if (r < 0) return -1;
        if (p->body[r] >= 0) return fail(p, at, "a rule defined twice: ", p->names[r]);
        p->pos = e;
        space(p, false);
        if (!(peek(p, 0) == ':' && peek(p, 1) == ':' && peek(p, 2) == '=')) return fail(p, p->pos, "expected '::='", NULL);
        p->pos += 3;
        space(p, true);
        int body = alternatives(p, false);
        if (body < 0) return -1;
        p->body[r] = body;
        if (p->pos < p->n && peek(p, 0) != '\n' && peek(p, 0) != '\r')
            return fail(p, p->pos, "expected the end of the line", NULL);
        space(p, true);
    }
    int root = -1;
    for (int i = 0; i < p->n_rules; i++) {
        if (p->body[i] < 0) return fail(p, p->ref_at[i], "undefined rule: ", p->names[i]);
        if (!strcmp(p->names[i], "root")) root = i;
    }
    if (root < 0) return fail(p, 0, "no rule named 'root'", NULL);
    return root;
}

/* ------------------------------------------------------------------------------------------ emitting */

typedef struct Patch {
    int op, rule;
} Patch;

typedef struct Emit {
    Constraint *c;
    GParser *p;
    Patch *patch;
    int n_patch, cap_patch;
} Emit;

static void emit(Emit *m, int node, int depth);

static void emit_alt(Emit *m, const GNode *g, int depth) {
    Constraint *c = m->c;
    if (g->n_kids == 1) {
        emit(m, g->kids[0], depth + 1);
        return;
    }
    int *jumps = calloc((size_t)g->n_kids, sizeof *jumps);
    if (!jumps) {
        c->oom = true;
        return;
    }
    const int f = cop_fork(c, g->n_kids);
    for (int i = 0; i < g->n_kids && !c->oom; i++) {
        cop_target(c, f, i, c->n_ops);
        emit(m, g->kids[i], depth + 1);
        jumps[i] = i + 1 < g->n_kids ? cop_jmp(c) : -1;
    }
    for (int i = 0; i + 1 < g->n_kids; i++) cop_target(c, jumps[i], 0, c->n_ops);
    free(jumps);
}

static void emit_rep(Emit *m, const GNode *g, int depth) {
    Constraint *c = m->c;
    for (int i = 0; i < g->min && !c->oom; i++) emit(m, g->kids[0], depth + 1);
    if (g->max < 0) { /* L: FORK(body, out); body; JMP L */
        const int f = cop_fork(c, 2);
        cop_target(c, f, 0, c->n_ops);
        emit(m, g->kids[0], depth + 1);
        cop_target(c, cop_jmp(c), 0, f);
        cop_target(c, f, 1, c->n_ops);
        return;
    }
    const int k = g->max - g->min; /* nested optional copies: (x (x (x)?)?)? */
    int *forks = calloc((size_t)k + 1, sizeof *forks);
    if (!forks) {
        c->oom = true;
        return;
    }
    for (int i = 0; i < k && !c->oom; i++) {
        forks[i] = cop_fork(c, 2);
        cop_target(c, forks[i], 0, c->n_ops);
        emit(m, g->kids[0], depth + 1);
    }
    for (int i = 0; i < k; i++) cop_target(c, forks[i], 1, c->n_ops);
    free(forks);
}

static void emit(Emit *m, int node, int depth) {
    Constraint *c = m->c;
    if (c->oom) return;
    if (depth > 4 * MAX_DEPTH) {
        c->oom = true;
        return;
    }
    const GNode *g = &m->p->nodes[node];
    switch (g->kind) {
    case N_SEQ:
        for (int i = 0; i < g->n_kids; i++) emit(m, g->kids[i], depth + 1);
        return;
    case N_ALT: emit_alt(m, g, depth); return;
    case N_LIT: cop_lit(c, g->lit, g->len); return;
    case N_CLASS: cop_class(c, g->rng, g->n_rng, g->neg); return;
    case N_REP: emit_rep(m, g, depth); return;
    case N_REF: {
        const int op = cop_call(c);
        if (op < 0) return;
        if (m->n_patch == m->cap_patch) {
            int cap = m->cap_patch ? m->cap_patch * 2 : 64;
            Patch *pp = realloc(m->patch, sizeof *pp * (size_t)cap);
            if (!pp) {
                c->oom = true;
                return;
            }
            m->patch = pp, m->cap_patch = cap;
        }
        m->patch[m->n_patch++] = (Patch){op, g->rule};
        return;
    }
    }
}

/* Left recursion: rule r reaches a call of itself before reading a byte (through calls of rules that may be
 * empty). The runtime would nest such calls until the threads' stacks are full, so it is refused here. */
static int left_recursive(const Constraint *c, const int *start, int n_rules) {
    int *stamp = calloc((size_t)c->n_ops, sizeof *stamp), *todo = malloc(sizeof *todo * (size_t)c->n_ops);
    uint8_t *edge = calloc((size_t)n_rules * (size_t)n_rules, 1);
    int found = -2;
    if (!stamp || !todo || !edge) goto done;
    for (int r = 0; r < n_rules; r++) {
        int n = 0;
        todo[n++] = start[r];
        stamp[start[r]] = r + 1;
        while (n) {
            const int pc = todo[--n];
            const COp *op = &c->ops[pc];
            int next[2] = {0, 0}, k = 0;
            if (op->kind == OP_FORK || op->kind == OP_JMP) {
                for (int i = 0; i < op->n_tgt; i++)
                    if (stamp[op->tgt[i]] != r + 1) stamp[op->tgt[i]] = r + 1, todo[n++] = op->tgt[i];
                continue;
            }
            if (op->kind != OP_CALL) continue; /* a byte is read (LIT, CLASS), or the rule ends (RET) */
            for (int x = 0; x < n_rules; x++)
                if (start[x] == op->tgt[0]) {
                    edge[(size_t)r * (size_t)n_rules + (size_t)x] = 1;
                    if (c->min_len[start[x]] == 0) next[k++] = pc + 1; /* x may be empty: what follows is first too */
                    break;
                }
            for (int i = 0; i < k; i++)
                if (stamp[next[i]] != r + 1) stamp[next[i]] = r + 1, todo[n++] = next[i];
        }
    }
    /* a cycle in the "calls first" graph: repeated squaring is overkill; a DFS with colours */
    found = -1;
    uint8_t *colour = calloc((size_t)n_rules, 1);
    int *stack = malloc(sizeof *stack * (size_t)n_rules * 2);
    if (!colour || !stack) {
        found = -2;
    } else {
        for (int root = 0; root < n_rules && found < 0; root++) {
            if (colour[root]) continue;
            int sp = 0;
            stack[sp++] = root, stack[sp++] = 0;
            colour[root] = 1;
            while (sp && found < 0) {
                const int r = stack[sp - 2], x = stack[sp - 1];
                if (x == n_rules) {
                    colour[r] = 2;
                    sp -= 2;
                    continue;
                }
                stack[sp - 1]++;
                if (!edge[(size_t)r * (size_t)n_rules + (size_t)x]) continue;
                if (colour[x] == 1) found = x;
                else if (!colour[x]) colour[x] = 1, stack[sp++] = x, stack[sp++] = 0;
            }
        }
    }
    free(colour);
    free(stack);
done:
    free(stamp);
    free(todo);
    free(edge);
    return found;
}

static void parser_free(GParser *p) {
    for (int i = 0; i < p->n_nodes; i++) {
        free(p->nodes[i].kids);
        free(p->nodes[i].lit);
        free(p->nodes[i].rng);
    }
    free(p->nodes);
    for (int i = 0; i < p->n_rules; i++) free(p->names[i]);
}

Constraint *constraint_grammar(const char *text, size_t len, Err *err) {
    if (len > MAX_TEXT) return err_set(err, "grammar: longer than %d bytes", MAX_TEXT), NULL;
    GParser p;
    memset(&p, 0, sizeof p);
    p.s = text, p.n = len, p.err = err;
    const int root = parse(&p);
    Constraint *c = root >= 0 ? calloc(1, sizeof *c) : NULL;
    if (root >= 0 && !c) err_set(err, "out of memory");
    if (!c) {
        parser_free(&p);
        return NULL;
    }
    c->end_when_all = true;
    if (!(c->seen = calloc(SEEN_SLOTS, sizeof *c->seen))) c->oom = true;
    c->gen = 1;
    Emit m = {.c = c, .p = &p};
    const int call_root = cop_call(c);
    cop_emit(c, OP_END);
    int start[MAX_RULES];
    for (int r = 0; r < p.n_rules && !c->oom; r++) {
        start[r] = c->n_ops;
        emit(&m, p.body[r], 0);
        cop_emit(c, OP_RET);
    }
    if (!c->oom) {
        cop_target(c, call_root, 0, start[root]);
        for (int i = 0; i < m.n_patch; i++) cop_target(c, m.patch[i].op, 0, start[m.patch[i].rule]);
    }
    free(m.patch);
    if (c->oom && c->n_ops >= MAX_OPS) {
        parser_free(&p);
        constraint_free(c);
        return err_set(err, "grammar: too large (more than %d steps once compiled)", MAX_OPS), NULL;
    }
    for (int i = 0; i < c->n_ops && !c->oom; i++)
        if (c->ops[i].kind == OP_CALL && c->ops[i].tgt[0] == i) { /* rule ::= rule ...: nothing read first */
            constraint_free(c);
            parser_free(&p);
            return err_set(err, "grammar: left recursion (a rule that begins with itself) is not supported"), NULL;
        }
    Err fe = {{0}};
    int lr = -1;
    if (constraint_finish(c, &fe) == 0 && (lr = left_recursive(c, start, p.n_rules)) != -1) {
        if (lr == -2) err_set(err, "out of memory");
        else err_set(err, "grammar: left recursion through rule '%s' (a rule that can begin with itself) is not supported",
                     p.names[lr]);
        constraint_free(c);
        parser_free(&p);
        return NULL;
    }
    parser_free(&p);
    if (fe.msg[0]) {
        constraint_free(c);
        if (strstr(fe.msg, "cannot be satisfied")) err_set(err, "grammar: root can never end (every way through it recurses forever)");
        else err_set(err, "grammar: %s", fe.msg);
        return NULL;
    }
    return c;
}
