/* test_grammar.c — GBNF grammars (src/server/grammar.c) on the constraint runtime (group `grammar`): every
 * grammar of llama.cpp's grammars/ folder (copies in tests/data/gbnf, MIT) parses, accepts samples of its
 * language whole (and may end there), refuses near-misses at the byte where they go wrong, and completes a
 * cut-off sample into an accepted text; plus the syntax (escapes, classes, repetition counts, nesting over lines)
 * and the errors (line and column). */
#include "test.h"

#include "server/constrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Constraint *load(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "gbnf/%s.gbnf", name);
    size_t n = 0;
    char *text = test_read_file(test_data(rel), &n);
    if (!text) return NULL;
    Err err = {{0}};
    Constraint *c = constraint_grammar(text, n, &err);
    if (!c) test_note("%s: %s", name, err.msg);
    free(text);
    return c;
}

/* Whether the grammar takes the whole text and may end there. */
static bool accepts(const char *gbnf_name, Constraint *c0, const char *text) {
    (void)gbnf_name;
    /* a fresh copy of the program's state: feed into c0 itself after checking on a throwaway run */
    if (!constraint_allows(c0, text, strlen(text))) return false;
    SBuf rest = {0};
    bool ok = constraint_completion_after(c0, text, strlen(text), &rest) && rest.n == 0;
    sbuf_free(&rest);
    return ok;
}

static const struct {
    const char *name;
    const char *good[4];
    const char *bad[4];
} cases[] = {
    {"json",
     {"{\"a\": [1, 2.5, -3e7, true, null], \"b\": {\"c\": \"x\\u00e9\\n\"}}", "{}", "{\"k\":\"v\"}"},
     {"[1]", "{\"a\" 1}", "{\"a\": tru}", "{\"a\": 01}"}},
    {"json_arr", {"[\n{\"a\": 1},\n[]]", "[\n]"}, {"[1]", "[\n1,]"}},
    {"arithmetic", {"1+2 = x\n", "(a *3) /c = y\nz=2\n"}, {"x = 1+2\n", "x = \n", "= x\n"}},
    {"chess", {"1. e4 e5\n2. Nf3 Nc6\n", "1. O-O-O Qxd8+\n2. exd8=Q# a1\n"}, {"1. e9 e5\n", "1. Zf3 e5\n", "1. e4\n"}},
    {"list", {"- milk\n- eggs\n", "- é\n"}, {"- \n", "* milk\n", "- a\r\n"}},
    {"c", {"int main(){return 0;}", "float f(int x){x = x*2;while(x<3){x = x+1;}}"}, {"int main(){return;}", "void f(){}"}},
    {"japanese", {"こんにちは", "カタカナ 漢字\nです"}, {"hello", "こんにちは  x"}},
    {"english", {"Hello, world!", "a b\tc"}, {"héllo", "a  b"}},
};

TEST(grammar, llama_cpp_grammars_parse_and_are_honoured) {
    int n_good = 0, n_bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Constraint *c = load(cases[i].name);
        CHECK_MSG(c, "%s did not compile", cases[i].name);
        if (!c) continue;
        for (int k = 0; k < 4 && cases[i].good[k]; k++, n_good++)
            CHECK_MSG(accepts(cases[i].name, c, cases[i].good[k]), "%s refuses %s", cases[i].name, cases[i].good[k]);
        for (int k = 0; k < 4 && cases[i].bad[k]; k++, n_bad++)
            CHECK_MSG(!accepts(cases[i].name, c, cases[i].bad[k]), "%s accepts %s", cases[i].name, cases[i].bad[k]);
        constraint_free(c);
    }
    test_note("8 grammars of llama.cpp: %d samples accepted, %d near-misses refused", n_good, n_bad);
}

/* A text cut anywhere completes into one the grammar accepts whole. */
TEST(grammar, completions_close_what_was_started) {
    const char *names[] = {"json", "arithmetic", "chess", "c", "list"};
    const char *texts[] = {"{\"a\": [1, {\"b\": \"x", "x = (a +2", "1. e4 e5\n2. Nf", "int f(int x){while(x<3){x = 1", "- mi"};
    for (int i = 0; i < 5; i++) {
        Constraint *c = load(names[i]);
        REQUIRE(c);
        const size_t n = strlen(texts[i]);
        CHECK(constraint_allows(c, texts[i], n));
        constraint_advance(c, texts[i], n);
        CHECK(!constraint_can_end(c));
        SBuf rest = {0};
        constraint_completion(c, &rest);
        CHECK_MSG(rest.n > 0 && constraint_allows(c, rest.p, rest.n), "%s: completion '%.*s'", names[i], (int)rest.n,
                  rest.p ? rest.p : "");
        constraint_advance(c, rest.p, rest.n);
        CHECK_MSG(constraint_can_end(c), "%s: '%s' + '%.*s' is not complete", names[i], texts[i], (int)rest.n, rest.p);
        sbuf_free(&rest);
        constraint_free(c);
    }
}

/* a way that cannot finish (a class with no member) is never the completion: found by fuzz_grammar */
TEST(grammar, completion_skips_an_empty_class) {
    static const char g[] = "root ::= \"(\" root? \")\" | []";
    Err err = {{0}};
    Constraint *c = constraint_grammar(g, strlen(g), &err);
    REQUIRE_MSG(c, "%s", err.msg);
    SBuf rest = {0};
    constraint_completion(c, &rest);
    CHECK_MSG(rest.n == 2 && memcmp(rest.p, "()", 2) == 0, "completion '%.*s'", (int)rest.n, rest.p ? rest.p : "");
    if (rest.n && constraint_allows(c, rest.p, rest.n)) constraint_advance(c, rest.p, rest.n);
    CHECK(constraint_can_end(c));
    sbuf_free(&rest);
    constraint_free(c);
}

/* a loop whose body can be empty ties with its exit: the completion leaves by the exit (found by fuzz_grammar) */
TEST(grammar, completion_leaves_an_empty_body_loop) {
    static const char g[] = "root ::= \"(\" root?* \")\" | [a\\x0c]";
    Err err = {{0}};
    Constraint *c = constraint_grammar(g, strlen(g), &err);
    REQUIRE_MSG(c, "%s", err.msg);
    CHECK(constraint_allows(c, "(", 1));
    constraint_advance(c, "(", 1);
    SBuf rest = {0};
    constraint_completion(c, &rest);
    CHECK_MSG(rest.n == 1 && rest.p[0] == ')', "completion '%.*s'", (int)rest.n, rest.p ? rest.p : "");
    if (rest.n && constraint_allows(c, rest.p, rest.n)) constraint_advance(c, rest.p, rest.n);
    CHECK(constraint_can_end(c));
    sbuf_free(&rest);
    constraint_free(c);
}

/* "(" root? "x…x) " beside a class that also takes x: while the closing literal is fed, every x may still be
 * the class or the start of the literal at each offset, so about len+2 alternatives live at once. 74 x's
 * overflowed the old 64-thread set and a right completion was refused (a fuzz_grammar finding); the set now holds
 * 256, and past it the constraint says it is lossy instead of dropping threads silently. */
static Constraint *nested_literal_grammar(int n_x) {
    char g[1024];
    int k = snprintf(g, sizeof g, "root ::= \"(\" root? \"");
    for (int i = 0; i < n_x; i++) g[k++] = 'x';
    k += snprintf(g + k, sizeof g - (size_t)k, ") \" | [a# Specifies-z]+");
    Err err = {{0}};
    Constraint *c = constraint_grammar(g, (size_t)k, &err);
    if (!c) fprintf(stderr, "    %s\n", err.msg);
    return c;
}

TEST(grammar, ambiguous_completion_within_the_thread_set) {
    Constraint *c = nested_literal_grammar(74);
    REQUIRE(c);
    REQUIRE(constraint_allows(c, "((a", 3));
    constraint_advance(c, "((a", 3);
    SBuf rest = {0};
    constraint_completion(c, &rest);
    CHECK_MSG(rest.n == 152 && constraint_allows(c, rest.p, rest.n), "completion of %zu bytes refused", rest.n);
    if (rest.n) constraint_advance(c, rest.p, rest.n);
    CHECK(constraint_can_end(c) && !constraint_lossy(c));
    sbuf_free(&rest);
    constraint_free(c);
    /* 300 x's: more alternatives than the set holds; said, not hidden */
    c = nested_literal_grammar(300);
    REQUIRE(c);
    constraint_advance(c, "(a", 2);
    CHECK(!constraint_lossy(c));
    for (int i = 0; i < 299 && constraint_allows(c, "x", 1); i++) constraint_advance(c, "x", 1);
    CHECK_MSG(constraint_lossy(c), "300 live alternatives did not mark the constraint lossy");
    CHECK(!constraint_allows(c, "(", 1)); /* what the grammar refuses stays refused */
    constraint_free(c);
}

TEST(grammar, syntax) {
    static const struct {
        const char *g, *yes, *no;
    } t[] = {
        {"root ::= \"a\" [b-d]+ \"\\x41\\u00e9\\U0001F600\"", "abcdAé😀", "aeAé😀"},
        {"root ::= [^a-c\\]]{2,3}", "xyz", "xa"},
        {"root ::= x{3}\nx ::= \"ab\" | \"c\"", "abcab", "abab"},
        {"root ::= (\n  \"a\" # a comment\n  | \"b\"\n)* \"!\"", "abba!", "abc!"},
        {"root ::= \"(\" root? \")\"", "((()))", "(()"},
        {"root ::= .{0,2} \"z\"", "éz", "abcz"},
        {"root ::= a-b\na-b ::= \"x\" [\\-] \"y\"", "x-y", "xy"},
        {"root ::= \"a\"{,2} \"b\"", "aab", "aaab"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        Err err = {{0}};
        Constraint *c = constraint_grammar(t[i].g, strlen(t[i].g), &err);
        CHECK_MSG(c, "'%s': %s", t[i].g, err.msg);
        if (!c) continue;
        CHECK_MSG(accepts("", c, t[i].yes), "'%s' refuses '%s'", t[i].g, t[i].yes);
        CHECK_MSG(!accepts("", c, t[i].no), "'%s' accepts '%s'", t[i].g, t[i].no);
        constraint_free(c);
    }
}

/* A grammar that may end or go on (root ::= item+): done only when nothing can follow. */
TEST(grammar, may_end_or_go_on) {
    const char *g = "root ::= \"a\"+";
    Err err = {{0}};
    Constraint *c = constraint_grammar(g, strlen(g), &err);
    REQUIRE(c);
    constraint_advance(c, "aa", 2);
    CHECK(constraint_can_end(c) && !constraint_done(c) && constraint_allows(c, "a", 1));
    constraint_free(c);
    g = "root ::= \"ab\"";
    c = constraint_grammar(g, strlen(g), &err);
    REQUIRE(c);
    const char *lit;
    size_t n;
    CHECK(constraint_literal(c, &lit, &n) && n == 2 && !memcmp(lit, "ab", 2));
    constraint_advance(c, "ab", 2);
    CHECK(constraint_done(c));
    constraint_free(c);
}

TEST(grammar, errors_name_the_place) {
    static const struct {
        const char *g, *msg;
    } t[] = {
        {"root ::= foo", "line 1, column 10: undefined rule: foo"},
        {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: a rule defined twice"},
        {"a ::= \"x\"", "no rule named 'root'"},
        {"root ::= \"abc", "line 1, column 10: unterminated literal"},
        {"root ::= [a-", "unterminated character class"},
        {"root ::= (\"a\"", "expected ')'"},
        {"root ::= \"a\"{3,1}", "n < m"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= <think>", "token references"},
        {"root = \"a\"", "expected '::='"},
        {"root ::= root \"a\"", "left recursion"},
        {"root ::= x\nx ::= \"a\" x", "can never end"},
        {"root ::= x \"a\" | \"c\"\nx ::= \"b\"? root", "left recursion through rule"},
        {"root ::= [z-a]", "from high to low"},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        Err err = {{0}};
        Constraint *c = constraint_grammar(t[i].g, strlen(t[i].g), &err);
        CHECK_MSG(!c && strstr(err.msg, t[i].msg), "'%s': got '%s', want '%s'", t[i].g, c ? "(compiled)" : err.msg, t[i].msg);
        constraint_free(c);
    }
}
