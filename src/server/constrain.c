/* constrain.c — see constrain.h: the NFA that runs a constraint program (constrain_internal.h, compiled
 * by constrain_schema.c) byte by byte, the shortest completions, and the emitters the compiler uses. */
#include "server/constrain_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_DIGITS = 15 /* exact in a double */, MAX_EXP_DIGITS = 2 /* with 15 digits: below 1e115, finite */ };

/* Closing tags a text value may not contain: they would end the call (or the parameter) early. */
static const char *const FORBID[3] = {"</tool_call>", "</parameter>", "</function>"};
enum { FB_CALL = 1, FB_ALL = 7 };

/* ------------------------------------------------------------------------------------------ emitting */

int cop_emit(Constraint *c, int kind) {
    if (c->n_ops >= MAX_OPS) {
        c->oom = true;
        return -1;
    }
    if (c->n_ops == c->cap_ops) {
        int cap = c->cap_ops ? c->cap_ops * 2 : 64;
        COp *o = realloc(c->ops, (size_t)cap * sizeof *o);
        if (!o) {
            c->oom = true;
            return -1;
        }
        c->ops = o;
        c->cap_ops = cap;
    }
    c->ops[c->n_ops] = (COp){.kind = kind};
    return c->n_ops++;
}

void cop_lit(Constraint *c, const char *s, size_t n) {
    if (!n) return;
    int i = cop_emit(c, OP_LIT);
    if (i < 0) return;
    c->ops[i].lit = malloc(n);
    if (!c->ops[i].lit) {
        c->oom = true;
        return;
    }
    memcpy(c->ops[i].lit, s, n);
    c->ops[i].len = n;
}

void cop_lits(Constraint *c, const char *s) { cop_lit(c, s, strlen(s)); }

static int emit_targets(Constraint *c, int kind, int n) {
    int i = cop_emit(c, kind);
    if (i < 0) return -1;
    if (!(c->ops[i].tgt = calloc((size_t)n, sizeof(int)))) {
        c->oom = true;
        return -1;
    }
    c->ops[i].n_tgt = n;
    return i;
}

int cop_fork(Constraint *c, int n) { return emit_targets(c, OP_FORK, n); }
int cop_jmp(Constraint *c) { return emit_targets(c, OP_JMP, 1); }
int cop_call(Constraint *c) { return emit_targets(c, OP_CALL, 1); }

static bool class_has(const COp *op, uint32_t cp) {
    bool in = false;
    for (int i = 0; i < op->n_rng && !in; i++) in = cp >= op->rng[2 * i] && cp <= op->rng[2 * i + 1];
    return in != op->neg;
}

/* The smallest member of the class in [lo, hi], or NO_CHAR. */
static uint32_t class_first_in(const COp *op, uint32_t lo, uint32_t hi) {
    if (!op->neg) {
        uint32_t best = NO_CHAR;
        for (int i = 0; i < op->n_rng; i++) {
            const uint32_t a = op->rng[2 * i] > lo ? op->rng[2 * i] : lo, b = op->rng[2 * i + 1] < hi ? op->rng[2 * i + 1] : hi;
            if (a <= b && a < best) best = a;
        }
        return best;
    }
    for (uint32_t cp = lo;;) { /* step over the excluded ranges */
        bool moved = false;
        for (int i = 0; i < op->n_rng; i++)
            if (cp >= op->rng[2 * i] && cp <= op->rng[2 * i + 1]) {
                if (op->rng[2 * i + 1] >= hi) return NO_CHAR;
                cp = op->rng[2 * i + 1] + 1, moved = true;
            }
        if (!moved) return cp <= hi ? cp : NO_CHAR;
    }
}

/* The code points a partly read UTF-8 character of `total` bytes (bits so far, `left` continuation bytes to
 * come) may be: not below the least that needs that many bytes (no overlong forms). */
static const uint32_t UTF8_MIN[5] = {0, 0, 0x80, 0x800, 0x10000};
static void class_span(uint32_t bits, int left, int total, uint32_t *lo, uint32_t *hi) {
    *lo = bits << (6 * left);
    *hi = *lo | ((1u << (6 * left)) - 1);
    if (total >= 2 && total <= 4 && *lo < UTF8_MIN[total]) *lo = UTF8_MIN[total];
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
}

void cop_class(Constraint *c, const uint32_t *ranges, int n, bool neg) {
    int i = cop_emit(c, OP_CLASS);
    if (i < 0) return;
    COp *op = &c->ops[i];
    if (n && !(op->rng = malloc(sizeof *op->rng * 2 * (size_t)n))) {
        c->oom = true;
        return;
    }
    if (n) memcpy(op->rng, ranges, sizeof *op->rng * 2 * (size_t)n);
    op->n_rng = n, op->neg = neg;
    /* an example: the first printable member, else the first member at all */
    op->example = NO_CHAR;
    static const uint32_t tries[] = {'a', '0', ' ', 'A'};
    for (size_t k = 0; k < sizeof tries / sizeof *tries && op->example == NO_CHAR; k++)
        if (class_has(op, tries[k])) op->example = tries[k];
    for (int r = 0; r < n && op->example == NO_CHAR && !neg; r++)
        if (ranges[2 * r] <= ranges[2 * r + 1] && ranges[2 * r] <= 0x10FFFF && !(ranges[2 * r] >= 0xD800 && ranges[2 * r] < 0xE000))
            op->example = ranges[2 * r];
    for (uint32_t cp = 0; op->example == NO_CHAR && neg && cp < 0x3000; cp++)
        if (class_has(op, cp)) op->example = cp;
}

static size_t utf8_put(uint32_t cp, char *b) {
    if (cp < 0x80) return b[0] = (char)cp, 1;
    if (cp < 0x800) return b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), b[2] = (char)(0x80 | (cp & 0x3F)), 3;
    b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3F)), b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

void cop_target(Constraint *c, int op, int k, int target) {
    if (op >= 0 && !c->oom && k < c->ops[op].n_tgt) c->ops[op].tgt[k] = target;
}

void constraint_free(Constraint *c) {
    if (!c) return;
    for (int i = 0; i < c->n_ops; i++) {
        free(c->ops[i].lit);
        free(c->ops[i].tgt);
        free(c->ops[i].rng);
    }
    free(c->ops);
    free(c->min_len);
    free(c->seen);
    free(c);
}

/* ------------------------------------------------------------------------------------------ JSON */

static const char *const JLIT[3] = {"true", "false", "null"};

static bool is_ws(int ch) { return ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r'; }
static bool is_digit(int ch) { return ch >= '0' && ch <= '9'; }
static bool is_hex(int ch) { return is_digit(ch) || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F'); }

/* A value just ended: back to the container, or done at the top. */
static void j_value_done(JState *j) { j->st = j->depth ? J_AFTER : J_DONE; }

static bool j_start_value(JState *j, int ch) {
    if (j->depth == 0 && j->obj_required && ch != '{') return false;
    switch (ch) {
    case '{':
    case '[':
        if (j->depth >= JDEPTH) return false;
        j->stack[j->depth++] = (uint8_t)ch;
        j->st = ch == '{' ? J_OBJ_FIRST : J_ARR_FIRST;
        return true;
    case '"': j->st = J_STR, j->in_key = 0; return true;
    case '-': j->st = J_NUM, j->sub = 0; return true;
    case 't': case 'f': case 'n':
        j->st = J_LIT, j->lit = ch == 't' ? 0 : ch == 'f' ? 1 : 2, j->sub = 1;
        return true;
    default:
        if (is_digit(ch)) {
            j->st = J_NUM, j->sub = ch == '0' ? 1 : 2, j->ndig = 1;
            return true;
        }
        return false;
    }
}

/* Number substates: 0 after '-', 1 after a leading 0, 2 integer digits, 3 after '.', 4 fraction digits,
 * 5 after 'e', 6 after the exponent sign, 7 exponent digits. 1, 2, 4, 7 may end. */
static bool num_can_end(int sub) { return sub == 1 || sub == 2 || sub == 4 || sub == 7; }

/* Digits are counted per part (ndig): at most 15 integer and 15 fraction digits and a 2-digit exponent, so
 * every number stays finite in a double (23580e3798164 would read as infinity). */
static bool j_num_step(JState *j, int ch) {
    const bool d = is_digit(ch);
    switch (j->sub) {
    case 0: if (d) { j->sub = ch == '0' ? 1 : 2, j->ndig = 1; return true; } return false;
    case 1: if (ch == '.') { j->sub = 3; return true; } if (ch == 'e' || ch == 'E') { j->sub = 5; return true; } return false;
    case 2: if (d) return j->ndig < MAX_DIGITS ? (j->ndig++, true) : false; if (ch == '.') { j->sub = 3; return true; } if (ch == 'e' || ch == 'E') { j->sub = 5; return true; } return false;
    case 3: if (d) { j->sub = 4, j->ndig = 1; return true; } return false;
    case 4: if (d) return j->ndig < MAX_DIGITS ? (j->ndig++, true) : false; if (ch == 'e' || ch == 'E') { j->sub = 5; return true; } return false;
    case 5: if (ch == '+' || ch == '-') { j->sub = 6; return true; } if (d) { j->sub = 7, j->ndig = 1; return true; } return false;
    case 6: if (d) { j->sub = 7, j->ndig = 1; return true; } return false;
    case 7: return d && j->ndig < MAX_EXP_DIGITS ? (j->ndig++, true) : false;
    }
    return false;
}

static bool fb_step(uint8_t *fb, int ch, unsigned set) {
    for (int k = 0; k < 3; k++) {
        if (!(set & (1u << k))) continue;
        const char *f = FORBID[k];
        if ((unsigned char)f[fb[k]] == (unsigned)ch) {
            if (!f[++fb[k]]) return false;
        } else {
            fb[k] = ch == '<';
        }
    }
    return true;
}

static bool j_step(JState *j, uint8_t *fb, int ch) {
    for (;;) {
        switch (j->st) {
        case J_DONE: return false;
        case J_VALUE: return is_ws(ch) && j->depth ? true : j_start_value(j, ch);
        case J_OBJ_FIRST:
            if (is_ws(ch)) return true;
            if (ch == '}') return j->depth--, j_value_done(j), true;
            if (ch == '"') return j->st = J_STR, j->in_key = 1, true;
            return false;
        case J_OBJ_KEY:
            if (is_ws(ch)) return true;
            if (ch == '"') return j->st = J_STR, j->in_key = 1, true;
            return false;
        case J_COLON:
            if (is_ws(ch)) return true;
            if (ch == ':') return j->st = J_VALUE, true;
            return false;
        case J_ARR_FIRST:
            if (is_ws(ch)) return true;
            if (ch == ']') return j->depth--, j_value_done(j), true;
            return j_start_value(j, ch);
        case J_AFTER: {
            if (is_ws(ch)) return true;
            uint8_t top = j->stack[j->depth - 1];
            if (ch == ',') return j->st = top == '{' ? J_OBJ_KEY : J_VALUE, true;
            if ((top == '{' && ch == '}') || (top == '[' && ch == ']')) return j->depth--, j_value_done(j), true;
            return false;
        }
        case J_STR:
            if (ch == '"') {
                memset(fb, 0, 3); /* each string is checked on its own */
                if (j->in_key) j->st = J_COLON;
                else j_value_done(j);
                return true;
            }
            if (ch == '\\') return j->st = J_ESC, true;
            if (ch < 0x20) return false;
            return fb_step(fb, ch, FB_CALL);
        case J_ESC:
            if (ch == 'u') return j->st = J_HEX, j->sub = 0, true;
            if (strchr("\"\\/bfnrt", ch) && ch) return j->st = J_STR, true;
            return false;
        case J_HEX:
            if (!is_hex(ch)) return false;
            if (++j->sub == 4) j->st = J_STR;
            return true;
        case J_NUM:
            if (j_num_step(j, ch)) return true;
            if (!num_can_end(j->sub) || j->depth == 0) return false;
            j->st = J_AFTER; /* the number ended: the byte belongs to the container */
            continue;
        case J_LIT:
            if (JLIT[j->lit][j->sub] != ch) return false;
            if (!JLIT[j->lit][++j->sub]) j_value_done(j);
            return true;
        }
        return false;
    }
}

static bool j_can_end(const JState *j) {
    return j->st == J_DONE || (j->st == J_NUM && j->depth == 0 && num_can_end(j->sub));
}

/* The shortest text closing a JSON value from state j. */
static void j_complete(JState j, uint8_t *fb, SBuf *out) {
    for (int guard = 0; guard < 4 * JDEPTH + 64 && !j_can_end(&j); guard++) {
        int ch;
        switch (j.st) {
        case J_STR: ch = '"'; break;
        case J_ESC: ch = 'n'; break;
        case J_HEX: ch = '0'; break;
        case J_NUM: ch = num_can_end(j.sub) ? (j.stack[j.depth - 1] == '{' ? '}' : ']') : '0'; break;
        case J_LIT: ch = JLIT[j.lit][j.sub]; break;
        case J_VALUE: ch = j.depth == 0 && j.obj_required ? '{' : 'n'; break;
        case J_OBJ_FIRST: ch = '}'; break;
        case J_OBJ_KEY: ch = '"'; break;
        case J_COLON: ch = ':'; break;
        case J_ARR_FIRST: ch = ']'; break;
        case J_AFTER: ch = j.stack[j.depth - 1] == '{' ? '}' : ']'; break;
        default: return;
        }
        char b = (char)ch;
        sbuf_put(out, &b, 1);
        if (!j_step(&j, fb, ch)) return;
    }
}

/* ------------------------------------------------------------------------------------------ the NFA */

static Thread fresh(int pc) {
    Thread t;
    memset(&t, 0, sizeof t);
    t.pc = (uint16_t)pc;
    return t;
}

static Thread fresh_for(const Constraint *c, int pc) {
    Thread t = fresh(pc);
    if (c->ops[pc].kind == OP_JOBJ) t.j.obj_required = 1;
    return t;
}

/* The next op of a thread, on the same stack. */
static Thread fresh_at(const Constraint *c, int pc, const Thread *from) {
    Thread t = fresh_for(c, pc);
    t.sp = from->sp;
    memcpy(t.stack, from->stack, sizeof t.stack);
    return t;
}

/* Whether the thread's op is finished in its current state and whether it may still take bytes. */
static void op_status(const Constraint *c, const Thread *t, bool *can_end, bool *can_continue) {
    const COp *op = &c->ops[t->pc];
    switch (op->kind) {
    case OP_LIT: *can_end = t->pos == op->len, *can_continue = t->pos < op->len; return;
    case OP_INT:
    case OP_NUM:
        *can_end = t->sub == 1 || t->sub == 2 || t->sub == 4;
        switch (t->sub) {
        case 1: *can_continue = op->kind == OP_NUM; break;
        case 2: *can_continue = t->pos < MAX_DIGITS || op->kind == OP_NUM; break;
        case 4: *can_continue = t->pos < MAX_DIGITS; break;
        default: *can_continue = true; break;
        }
        return;
    case OP_JSTR: *can_end = t->sub == 7, *can_continue = t->sub != 7; return;
    case OP_XTEXT: *can_end = true, *can_continue = true; return;
    case OP_JANY:
    case OP_JOBJ: *can_end = j_can_end(&t->j), *can_continue = t->j.st != J_DONE; return;
    case OP_END: *can_end = false, *can_continue = false; return;
    case OP_CLASS: *can_end = t->sub == 2, *can_continue = t->sub < 2; return;
    }
    *can_end = *can_continue = false;
}

/* Whether this closure went through control op pc with this stack already (and marks it). */
static bool seen_before(Constraint *c, const Thread *t) {
    uint64_t h = 1469598103934665603ull ^ t->sp;
    for (int i = 0; i < t->sp; i++) h = (h ^ t->stack[i]) * 1099511628211ull;
    uint32_t at = (uint32_t)((h ^ (uint64_t)t->pc * 0x9E3779B97F4A7C15ull) >> 20) % SEEN_SLOTS;
    for (int probe = 0; probe < 16; probe++, at = (at + 1) % SEEN_SLOTS) {
        Seen *s = &c->seen[at];
        if (s->gen != c->gen) {
            *s = (Seen){c->gen, t->pc, h};
            return false;
        }
        if (s->pc == t->pc && s->stack == h) return true;
    }
    return false; /* the table is crowded: follow it again (the budget still bounds the closure) */
}

static void add_thread(Constraint *c, Thread *set, int *n, Thread t, int depth) {
    if (depth > 1024 || c->budget-- <= 0) {
        c->dropped++;
        return;
    }
    const COp *op = &c->ops[t.pc];
    if (c->seen && (op->kind == OP_FORK || op->kind == OP_JMP || op->kind == OP_CALL || op->kind == OP_RET) &&
        seen_before(c, &t))
        return;
    if (op->kind == OP_FORK) {
        for (int i = 0; i < op->n_tgt; i++) add_thread(c, set, n, fresh_at(c, op->tgt[i], &t), depth + 1);
        return;
    }
    if (op->kind == OP_JMP) {
        add_thread(c, set, n, fresh_at(c, op->tgt[0], &t), depth + 1);
        return;
    }
    if (op->kind == OP_CALL) {
        if (t.sp == GSTACK) { /* deeper than the grammar may nest */
            c->dropped++;
            return;
        }
        Thread u = fresh_at(c, op->tgt[0], &t);
        u.stack[u.sp++] = (uint16_t)(t.pc + 1);
        add_thread(c, set, n, u, depth + 1);
        return;
    }
    if (op->kind == OP_RET) {
        if (!t.sp) return;
        Thread u = fresh_at(c, t.stack[t.sp - 1], &t);
        u.stack[--u.sp] = 0;
        add_thread(c, set, n, u, depth + 1);
        return;
    }
    bool end, cont;
    op_status(c, &t, &end, &cont);
    if (cont || op->kind == OP_END) {
        bool dup = false;
        for (int i = 0; i < *n && !dup; i++) dup = memcmp(&set[i], &t, sizeof t) == 0;
        if (!dup && *n < MAX_THREADS) set[(*n)++] = t;
        else if (!dup) c->dropped++;
    }
    if (end) add_thread(c, set, n, fresh_at(c, t.pc + 1, &t), depth + 1);
}

/* One byte through one thread (the op's own transition). */
static bool thread_step(const Constraint *c, Thread *t, int ch) {
    const COp *op = &c->ops[t->pc];
    switch (op->kind) {
    case OP_LIT:
        if (t->pos < op->len && (unsigned char)op->lit[t->pos] == (unsigned)ch) return t->pos++, true;
        return false;
    case OP_INT:
    case OP_NUM:
        /* 0 start, 5 after '-', 1 leading zero, 2 digits, 3 after '.', 4 fraction digits */
        switch (t->sub) {
        case 0:
        case 5:
            if (ch == '-' && t->sub == 0) return t->sub = 5, true;
            if (!is_digit(ch)) return false;
            t->sub = ch == '0' ? 1 : 2, t->pos = 1;
            return true;
        case 1:
        case 2:
            if (is_digit(ch) && t->sub == 2 && t->pos < MAX_DIGITS) return t->pos++, true;
            if (ch == '.' && op->kind == OP_NUM) return t->sub = 3, true;
            return false;
        case 3:
            if (!is_digit(ch)) return false;
            t->sub = 4, t->pos = 1;
            return true;
        case 4:
            if (is_digit(ch) && t->pos < MAX_DIGITS) return t->pos++, true;
            return false;
        }
        return false;
    case OP_JSTR:
        switch (t->sub) {
        case 0: return ch == '"' ? (t->sub = 1, true) : false;
        case 1:
            if (ch == '"') return t->sub = 7, true;
            if (ch == '\\') return t->sub = 2, true;
            if (ch < 0x20) return false;
            return fb_step(t->fb, ch, FB_CALL);
        case 2:
            if (ch == 'u') return t->sub = 3, true;
            if (ch && strchr("\"\\/bfnrt", ch)) return t->sub = 1, true;
            return false;
        case 3: case 4: case 5: case 6:
            if (!is_hex(ch)) return false;
            t->sub = t->sub == 6 ? 1 : t->sub + 1;
            return true;
        }
        return false;
    case OP_XTEXT: return fb_step(t->fb, ch, FB_ALL);
    case OP_CLASS: /* UTF-8: sub 0 a lead byte, 1 continuation bytes (pos left), 2 a whole character */
        if (t->sub == 0) {
            if (ch < 0x80) t->cp = (uint32_t)ch, t->pos = 0;
            else if (ch >= 0xC2 && ch <= 0xDF) t->cp = (uint32_t)ch & 0x1F, t->pos = 1;
            else if (ch >= 0xE0 && ch <= 0xEF) t->cp = (uint32_t)ch & 0x0F, t->pos = 2;
            else if (ch >= 0xF0 && ch <= 0xF4) t->cp = (uint32_t)ch & 0x07, t->pos = 3;
            else return false;
            t->fb[0] = (uint8_t)(t->pos + 1); /* the character's length (fb is unused by CLASS) */
        } else if (t->sub == 1 && (ch & 0xC0) == 0x80) {
            t->cp = t->cp << 6 | ((uint32_t)ch & 0x3F);
            t->pos--;
        } else {
            return false;
        }
        t->sub = 1;
        if (t->pos) { /* a character begun: some member must still be reachable */
            uint32_t lo, hi;
            class_span(t->cp, t->pos, t->fb[0], &lo, &hi);
            return lo <= hi && class_first_in(op, lo, hi) != NO_CHAR;
        }
        if (t->cp < UTF8_MIN[t->fb[0]] || t->cp > 0x10FFFF || (t->cp >= 0xD800 && t->cp < 0xE000) || !class_has(op, t->cp))
            return false;
        t->fb[0] = 0;
        t->sub = 2, t->cp = 0;
        return true;
    case OP_JANY:
    case OP_JOBJ: return j_step(&t->j, t->fb, ch);
    }
    return false;
}

/* Feeds bytes to a thread set in place; returns the number of surviving threads. */
static int run_bytes(Constraint *c, Thread *set, int n, const char *bytes, size_t len) {
    Thread next[MAX_THREADS];
    for (size_t i = 0; i < len && n; i++) {
        int m = 0;
        c->budget = CLOSURE_BUDGET;
        c->gen++;
        for (int k = 0; k < n; k++) {
            Thread t = set[k];
            if (thread_step(c, &t, (unsigned char)bytes[i])) add_thread(c, next, &m, t, 0);
        }
        memcpy(set, next, (size_t)m * sizeof *set);
        n = m;
    }
    return n;
}

static size_t add_len(size_t a, size_t b) { return a >= MIN_LEN_INF || b >= MIN_LEN_INF ? MIN_LEN_INF : a + b; }

static size_t op_min_len(const Constraint *c, int pc) {
    const COp *op = &c->ops[pc];
    const size_t next = pc + 1 < c->n_ops ? c->min_len[pc + 1] : MIN_LEN_INF;
    switch (op->kind) {
    case OP_LIT: return add_len(op->len, next);
    case OP_INT: case OP_NUM: return add_len(1, next);
    case OP_JSTR: case OP_JOBJ: return add_len(2, next);
    case OP_XTEXT: return next;
    case OP_JANY: return add_len(4, next);
    case OP_JMP: return c->min_len[op->tgt[0]];
    case OP_CALL: return add_len(c->min_len[op->tgt[0]], next);
    case OP_RET: return 0; /* the end of the rule: what follows is the caller's */
    case OP_CLASS: {
        char b[4];
        return op->example == NO_CHAR ? MIN_LEN_INF : add_len(utf8_put(op->example, b), next);
    }
    case OP_FORK: {
        size_t best = MIN_LEN_INF;
        for (int i = 0; i < op->n_tgt; i++)
            if (c->min_len[op->tgt[i]] < best) best = c->min_len[op->tgt[i]];
        return best;
    }
    case OP_END: return 0;
    default: return MIN_LEN_INF; /* OP_FAIL */
    }
}

static void reset_threads(Constraint *c) {
    c->n_threads = 0;
    c->budget = CLOSURE_BUDGET;
    c->gen++;
    const int dropped = c->dropped;
    add_thread(c, c->threads, &c->n_threads, fresh_for(c, 0), 0);
    if (c->dropped != dropped) c->lossy = true;
}

int constraint_finish(Constraint *c, Err *err) {
    if (c->oom || !c->n_ops) return err_set(err, "out of memory");
    for (int pc = 0; pc < c->n_ops; pc++) {
        const COp *op = &c->ops[pc];
        for (int i = 0; i < op->n_tgt; i++)
            if (op->tgt[i] < 0 || op->tgt[i] >= c->n_ops || op->tgt[i] == pc)
                return err_set(err, "internal error: a bad jump in the constraint program"); /* a compiler bug */
    }
    if (!(c->min_len = malloc(((size_t)c->n_ops + 1) * sizeof *c->min_len))) return err_set(err, "out of memory");
    for (int pc = 0; pc <= c->n_ops; pc++) c->min_len[pc] = MIN_LEN_INF;
    /* shortest paths to END; loops jump back, so relax until nothing changes */
    for (int pass = 0, changed = 1; changed && pass <= c->n_ops; pass++) {
        changed = 0;
        for (int pc = c->n_ops - 1; pc >= 0; pc--) {
            size_t m = op_min_len(c, pc);
            if (m < c->min_len[pc]) c->min_len[pc] = m, changed = 1;
        }
    }
    if (c->min_len[0] >= MIN_LEN_INF)
        return err_set(err, "the schema cannot be satisfied: no finite value fits it (a recursion without a way to end, "
                            "or a 'false' schema where a value is needed)");
    reset_threads(c);
    return 0;
}

bool constraint_allows(const Constraint *c, const char *bytes, size_t n) {
    Thread set[MAX_THREADS];
    memcpy(set, c->threads, (size_t)c->n_threads * sizeof *set);
    return run_bytes((Constraint *)c, set, c->n_threads, bytes, n) > 0;
}

void constraint_advance(Constraint *c, const char *bytes, size_t n) {
    const int dropped = c->dropped;
    c->n_threads = run_bytes(c, c->threads, c->n_threads, bytes, n);
    if (c->dropped != dropped) c->lossy = true;
}

bool constraint_lossy(const Constraint *c) { return c->lossy; }

bool constraint_literal(const Constraint *c, const char **text, size_t *len) {
    if (c->n_threads != 1) return false;
    const Thread *t = &c->threads[0];
    const COp *op = &c->ops[t->pc];
    if (op->kind != OP_LIT || t->pos >= op->len) return false;
    *text = op->lit + t->pos;
    *len = op->len - t->pos;
    return true;
}

bool constraint_done(const Constraint *c) {
    int at_end = 0;
    for (int i = 0; i < c->n_threads; i++)
        if (c->ops[c->threads[i].pc].kind == OP_END) {
            if (!c->end_when_all) return true;
            at_end++;
        }
    return at_end == c->n_threads;
}

bool constraint_can_end(const Constraint *c) {
    for (int i = 0; i < c->n_threads; i++)
        if (c->ops[c->threads[i].pc].kind == OP_END) return true;
    return c->n_threads == 0;
}

/* The shortest text from op pc on (no partial state), to the END or (in a rule) its RET. */
static void min_text_at(const Constraint *c, int pc, SBuf *out, int depth) {
    /* the forks passed in this frame and the way taken: a loop whose body can be empty ties with its exit, and a
     * second visit must leave by a later way, or the walk would go round until its step budget and stop short */
    enum { SEEN = 64 };
    int seen_pc[SEEN], seen_way[SEEN], n_seen = 0;
    for (int steps = 0; pc < c->n_ops && steps < 4 * MAX_OPS; steps++) {
        const COp *op = &c->ops[pc];
        switch (op->kind) {
        case OP_CALL:
            if (depth < 64 * GSTACK) min_text_at(c, op->tgt[0], out, depth + 1);
            pc++;
            break;
        case OP_CLASS: {
            char b[4];
            if (op->example != NO_CHAR) sbuf_put(out, b, utf8_put(op->example, b));
            pc++;
            break;
        }
        case OP_LIT: sbuf_put(out, op->lit, op->len); pc++; break;
        case OP_INT: case OP_NUM: sbuf_puts(out, "0"); pc++; break;
        case OP_JSTR: sbuf_puts(out, "\"\""); pc++; break;
        case OP_JOBJ: sbuf_puts(out, "{}"); pc++; break;
        case OP_JANY: sbuf_puts(out, "null"); pc++; break;
        case OP_XTEXT: pc++; break;
        case OP_JMP: pc = op->tgt[0]; break;
        case OP_FORK: {
            int k = 0;
            while (k < n_seen && seen_pc[k] != pc) k++;
            const int from = k < n_seen ? seen_way[k] + 1 : 0;
            int best = -1;
            for (int i = from; i < op->n_tgt; i++)
                if (best < 0 || c->min_len[op->tgt[i]] < c->min_len[op->tgt[best]]) best = i;
            if (best < 0) return; /* every way out of this fork taken already */
            if (k < n_seen) seen_way[k] = best;
            else if (n_seen < SEEN) seen_pc[n_seen] = pc, seen_way[n_seen++] = best;
            pc = op->tgt[best];
            break;
        }
        default: return; /* END, RET, FAIL */
        }
    }
}

static void min_text(const Constraint *c, int pc, SBuf *out) { min_text_at(c, pc, out, 0); }

/* The completion of one thread: the rest of its op, then the shortest path to the end. */
static void thread_completion(const Constraint *c, const Thread *t, SBuf *out) {
    const COp *op = &c->ops[t->pc];
    switch (op->kind) {
    case OP_LIT: sbuf_put(out, op->lit + t->pos, op->len - t->pos); break;
    case OP_INT:
    case OP_NUM:
        if (t->sub == 0 || t->sub == 5 || t->sub == 3) sbuf_puts(out, "0");
        break;
    case OP_JSTR:
        if (t->sub == 0) sbuf_puts(out, "\"\"");
        else if (t->sub == 1) sbuf_puts(out, "\"");
        else if (t->sub == 2) sbuf_puts(out, "n\"");
        else if (t->sub >= 3 && t->sub <= 6) {
            for (int i = t->sub; i <= 6; i++) sbuf_puts(out, "0");
            sbuf_puts(out, "\"");
        }
        break;
    case OP_JANY:
    case OP_JOBJ: {
        uint8_t fb[3];
        memcpy(fb, t->fb, 3);
        j_complete(t->j, fb, out);
        break;
    }
    case OP_CLASS:
        if (t->sub == 0 && op->example != NO_CHAR) {
            char b[4];
            sbuf_put(out, b, utf8_put(op->example, b));
        }
        if (t->sub == 1) { /* the rest of the smallest member the character begun can be */
            uint32_t lo, hi;
            class_span(t->cp, t->pos, t->fb[0], &lo, &hi);
            const uint32_t m = lo <= hi ? class_first_in(op, lo, hi) : NO_CHAR;
            char b[4];
            const size_t k = m == NO_CHAR ? 0 : utf8_put(m, b);
            if (k >= (size_t)t->pos) sbuf_put(out, b + k - t->pos, t->pos);
        }
        break;
    case OP_END: return;
    default: break;
    }
    min_text(c, t->pc + 1, out);
    for (int k = t->sp; k-- > 0;) min_text(c, t->stack[k], out); /* then each caller's rest */
}

/* A thread that cannot finish its own op: a character class with no member (`[]`, or a negation of everything),
 * or a begun character that no member continues; its completion would be empty and leave it unfinished. */
static bool thread_stuck(const Constraint *c, const Thread *t) {
    const COp *op = &c->ops[t->pc];
    if (op->kind != OP_CLASS) return false;
    if (t->sub == 0) return op->example == NO_CHAR;
    if (t->sub == 1) {
        uint32_t lo, hi;
        class_span(t->cp, t->pos, t->fb[0], &lo, &hi);
        return lo > hi || class_first_in(op, lo, hi) == NO_CHAR;
    }
    return false;
}

/* The shortest completion over a set of threads (threads whose way on is a dead end are skipped). */
static void set_completion(const Constraint *c, const Thread *set, int n, SBuf *out) {
    SBuf best = {0};
    bool have = false;
    for (int i = 0; i < n; i++) {
        const Thread *t = &set[i];
        if (c->ops[t->pc].kind == OP_END) { /* complete already */
            sbuf_free(&best);
            return;
        }
        if (c->min_len[t->pc + 1] >= MIN_LEN_INF || thread_stuck(c, t)) continue;
        SBuf s = {0};
        thread_completion(c, t, &s);
        if (!have || s.n < best.n) {
            sbuf_free(&best);
            best = s;
            have = true;
        } else {
            sbuf_free(&s);
        }
    }
    if (have && best.n) sbuf_put(out, best.p, best.n);
    sbuf_free(&best);
}

void constraint_completion(const Constraint *c, SBuf *out) { set_completion(c, c->threads, c->n_threads, out); }

bool constraint_completion_after(const Constraint *c, const char *bytes, size_t n, SBuf *out) {
    Thread set[MAX_THREADS];
    memcpy(set, c->threads, (size_t)c->n_threads * sizeof *set);
    int m = run_bytes((Constraint *)c, set, c->n_threads, bytes, n);
    if (!m) return false;
    set_completion(c, set, m, out);
    return true;
}
