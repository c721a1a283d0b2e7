/* tokens.c — the token functions of include/deltallm.h, thin wrappers over tokenizer/. */
#include "deltallm.h"

#include "engine/engine_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct DlDetok {
    Detokenizer *d;
};

static int fail(DlError *err, const Err *e) {
    if (err) snprintf(err->msg, sizeof err->msg, "%s", e->msg);
    return -1;
}

int dl_tokenize(const DlEngine *e, const char *text, size_t len, bool parse_special, int32_t **ids, size_t *n,
                DlError *err) {
    Err er = {{0}};
    TokenIds v = {0};
    if (tokenizer_encode(e->tok, text, len, parse_special ? TOKENIZE_PARSE_SPECIAL : 0, &v, &er)) {
        token_ids_free(&v);
        return fail(err, &er);
    }
    *ids = v.ids;
    *n = v.n;
    return 0;
}

const char *dl_token_piece(const DlEngine *e, int32_t id, size_t *len) { return tokenizer_piece(e->tok, id, len); }
bool dl_token_is_eog(const DlEngine *e, int32_t id) { return tokenizer_is_eog(e->tok, id); }
bool dl_token_is_control(const DlEngine *e, int32_t id) {
    return (tokenizer_token_attr(e->tok, id) & (TOKEN_ATTR_CONTROL | TOKEN_ATTR_UNKNOWN)) != 0;
}
int32_t dl_token_id(const DlEngine *e, const char *text) { return tokenizer_token_id(e->tok, text, strlen(text)); }
const char *dl_chat_template(const DlEngine *e) { return tokenizer_chat_template(e->tok); }

DlDetok *dl_detok_new(const DlEngine *e, bool render_special, DlError *err) {
    Err er = {{0}};
    DlDetok *d = calloc(1, sizeof *d);
    if (!d) return err_set(&er, "out of memory"), fail(err, &er), NULL;
    d->d = detokenizer_new(e->tok, render_special ? DETOKENIZE_SPECIAL : 0, &er);
    if (!d->d) {
        free(d);
        return fail(err, &er), NULL;
    }
    return d;
}

void dl_detok_free(DlDetok *d) {
    if (!d) return;
    detokenizer_free(d->d);
    free(d);
}

int dl_detok_push(DlDetok *d, int32_t id, const char **text, size_t *len, DlError *err) {
    Err er = {{0}};
    if (detokenizer_push(d->d, id, text, len, &er)) return fail(err, &er);
    return 0;
}

void dl_detok_flush(DlDetok *d, const char **text, size_t *len) { detokenizer_flush(d->d, text, len); }
