/* gen_grammar.c — see gen_grammar.h. */
#include "cli/gen_grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/constrain.h"

struct GenGrammar {
    Constraint *c;
    const DlEngine *e;
    int n_vocab;
    float *work; /* [n_vocab] masked logits */
};

GenGrammar *gen_grammar_open(const char *text, const char *file, const DlEngine *e, DlError *err) {
    err->msg[0] = 0;
    if (!text && !file) return NULL;
    char *buf = NULL;
    size_t n = 0;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) return snprintf(err->msg, sizeof err->msg, "cannot read the grammar file %s", file), NULL;
        for (size_t cap = 0;;) {
            if (n == cap && !(buf = realloc(buf, (cap = cap ? cap * 2 : 4096) + 1))) break;
            const size_t k = fread(buf + n, 1, cap - n, f);
            n += k;
            if (!k) break;
        }
        fclose(f);
        if (!buf) return snprintf(err->msg, sizeof err->msg, "out of memory"), NULL;
        text = buf;
    } else {
        n = strlen(text);
    }
    Err ce = {{0}};
    GenGrammar *g = calloc(1, sizeof *g);
    if (g) {
        g->e = e;
        g->n_vocab = dl_engine_info(e)->n_vocab;
        g->work = malloc(sizeof(float) * (size_t)g->n_vocab);
        g->c = constraint_grammar(text, n, &ce);
    }
    free(buf);
    if (!g || !g->work || !g->c) {
        snprintf(err->msg, sizeof err->msg, "%s", g && !g->c && g->work ? ce.msg : "out of memory");
        gen_grammar_free(g);
        return NULL;
    }
    return g;
}

void gen_grammar_free(GenGrammar *g) {
    if (!g) return;
    constraint_free(g->c);
    free(g->work);
    free(g);
}

static bool allowed(const GenGrammar *g, int32_t t) {
    if (dl_token_is_eog(g->e, t)) return constraint_can_end(g->c);
    if (dl_token_is_control(g->e, t)) return false;
    size_t n = 0;
    const char *p = dl_token_piece(g->e, t, &n);
    return p && n && constraint_allows(g->c, p, n);
}

int32_t gen_grammar_sample(GenGrammar *g, DlSampler *smp, const float *logits) {
    const int32_t t = dl_sampler_sample(smp, logits);
    if (allowed(g, t)) return t;
    int n_ok = 0;
    for (int32_t v = 0; v < g->n_vocab; v++) {
        const bool ok = allowed(g, v);
        g->work[v] = ok ? logits[v] : -INFINITY;
        n_ok += ok;
    }
    return n_ok ? dl_sampler_sample(smp, g->work) : -1;
}

bool gen_grammar_accept(GenGrammar *g, int32_t token) {
    if (dl_token_is_eog(g->e, token)) return true;
    size_t n = 0;
    const char *p = dl_token_piece(g->e, token, &n);
    if (p && n) constraint_advance(g->c, p, n);
    return constraint_done(g->c);
}
