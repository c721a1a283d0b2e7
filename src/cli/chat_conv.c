/* chat_conv.c — see chat_conv.h: the conversation of `deltallm chat`, its rendering and session reuse. */
#include "cli/chat_conv.h"
#include "base/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PREFILL_CHUNK 256 /* tokens per dl_session_eval while prefilling: how often *stop is looked at */

struct ChatConv {
    DlEngine *engine;
    const ChatTemplate *tmpl;
    bool think;
    cJSON *messages;
    DlSession *session;
    int32_t *past; /* the tokens the session holds */
    size_t n_past, cap_past;
    void *snap; /* the session at snap_pos tokens (the end of the last user message); snap_pos 0: none */
    size_t snap_cap, snap_len, snap_pos;
};

static int fail(DlError *err, const char *msg) {
    snprintf(err->msg, sizeof err->msg, "%s", msg);
    return -1;
}

static bool add_message(cJSON *msgs, const char *role, const char *content, size_t len, const char *reasoning,
                        size_t rlen) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(msgs, m)) return cJSON_Delete(m), false;
    char *c = strndup(content, len), *r = reasoning && rlen ? strndup(reasoning, rlen) : NULL;
    bool ok = c && cJSON_AddStringToObject(m, "role", role) && cJSON_AddStringToObject(m, "content", c) &&
              (!reasoning || !rlen || (r && cJSON_AddStringToObject(m, "reasoning_content", r)));
    free(c);
    free(r);
    return ok;
}

ChatConv *chat_conv_new(DlEngine *e, const ChatTemplate *t, const char *system, bool think, DlError *err) {
    ChatConv *c = calloc(1, sizeof *c);
    if (!c) return fail(err, "out of memory"), NULL;
    c->engine = e;
    c->tmpl = t;
    c->think = think;
    c->messages = cJSON_CreateArray();
    if (!c->messages || (system && !add_message(c->messages, "system", system, strlen(system), NULL, 0))) {
        fail(err, "out of memory");
        chat_conv_free(c);
        return NULL;
    }
    if (!(c->session = dl_session_new(e, err))) {
        chat_conv_free(c);
        return NULL;
    }
    return c;
}

void chat_conv_free(ChatConv *c) {
    if (!c) return;
    cJSON_Delete(c->messages);
    dl_session_free(c->session);
    free(c->past);
    free(c->snap);
    free(c);
}

void chat_conv_reset(ChatConv *c) {
    int keep = cJSON_GetArraySize(c->messages) > 0 &&
               !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(c->messages, 0), "role")), "system");
    while (cJSON_GetArraySize(c->messages) > keep) cJSON_DeleteItemFromArray(c->messages, keep);
    dl_session_reset(c->session);
    c->n_past = 0;
    c->snap_pos = 0;
}

const cJSON *chat_conv_messages(const ChatConv *c) { return c->messages; }
const int32_t *chat_conv_tokens(const ChatConv *c, size_t *n) {
    *n = c->n_past;
    return c->past;
}

/* The conversation rendered (with or without the assistant prompt) and tokenized. */
static int render_tokens(ChatConv *c, bool gen_prompt, char **text, size_t *text_len, int32_t **ids, size_t *n,
                         DlError *err) {
    ChatRenderOptions o = {.add_generation_prompt = gen_prompt,
                           .enable_thinking = c->think ? CHAT_THINKING_DEFAULT : 0,
                           .flatten_text_parts = true};
    Err e = {{0}};
    char *s = NULL;
    size_t len = 0;
    if (chat_render(c->tmpl, c->messages, NULL, &o, &s, &len, &e)) return fail(err, e.msg);
    int rc = dl_tokenize(c->engine, s, len, true, ids, n, err);
    if (rc == 0 && text) *text = s, *text_len = len;
    else free(s);
    return rc;
}

static size_t common_prefix(const int32_t *a, size_t na, const int32_t *b, size_t nb) {
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Records tokens the session has evaluated; -1 when out of memory. */
static int push_past(ChatConv *c, const int32_t *t, size_t n) {
    if (c->n_past + n > c->cap_past) {
        size_t cap = c->cap_past ? c->cap_past : 1024;
        while (cap < c->n_past + n) cap *= 2;
        int32_t *p = realloc(c->past, cap * sizeof *p);
        if (!p) return -1;
        c->past = p, c->cap_past = cap;
    }
    memcpy(c->past + c->n_past, t, n * sizeof *t);
    c->n_past += n;
    return 0;
}

/* Evaluates ids[from, to) in chunks, recording them; 1 when *stop cut it short. */
static int prefill(ChatConv *c, const int32_t *ids, size_t from, size_t to, volatile sig_atomic_t *stop, DlError *err) {
    for (size_t k = from; k < to;) {
        if (stop && *stop) return 1;
        size_t n = to - k < PREFILL_CHUNK ? to - k : PREFILL_CHUNK;
        if (dl_session_eval(c->session, ids + k, n, err)) return -1;
        if (push_past(c, ids + k, n)) return fail(err, "out of memory");
        k += n;
    }
    return 0;
}

/* Hands a parser delta to the output. */
static void emit(const ChatConvOutput *out, const ChatDelta *d) {
    if (d->reasoning_len && out->reasoning) out->reasoning(out->user, d->reasoning, d->reasoning_len);
    if (d->content_len && out->content) out->content(out->user, d->content, d->content_len);
}

static int take_snapshot(ChatConv *c) {
    size_t size = dl_session_snapshot_size(c->session);
    if (size > c->snap_cap) {
        void *p = realloc(c->snap, size);
        if (!p) return -1;
        c->snap = p, c->snap_cap = size;
    }
    DlError err;
    if (dl_session_snapshot(c->session, c->snap, size, &err)) return -1;
    c->snap_len = size;
    c->snap_pos = c->n_past;
    return 0;
}

/* Brings the session to hold ids[0, n) (see chat_conv.h); a_len: where the last user message ends. */
static int sync_session(ChatConv *c, const int32_t *ids, size_t n, size_t a_len, volatile sig_atomic_t *stop,
                        ChatTurnStats *st, DlError *err) {
    const size_t common = common_prefix(ids, n, c->past, c->n_past);
    size_t start;
    if (common == c->n_past && common < n) {
        start = common;
    } else if (c->snap_pos > 0 && c->snap_pos <= common && c->snap_pos < n &&
               dl_session_restore(c->session, c->snap, c->snap_len, err) == 0) {
        start = c->snap_pos;
    } else {
        dl_session_reset(c->session);
        start = 0;
        c->snap_pos = 0;
    }
    c->n_past = start;
    st->n_reused = start;
    int rc = 0;
    if (a_len > start && a_len < n) {
        rc = prefill(c, ids, start, a_len, stop, err);
        if (rc == 0 && take_snapshot(c)) c->snap_pos = 0; /* out of memory: no reuse next turn */
        start = a_len;
    }
    return rc ? rc : prefill(c, ids, start, n, stop, err);
}

ChatTurnEnd chat_conv_turn(ChatConv *c, const char *user, DlSampler *smp, long long n_gen, bool ignore_eos,
                           const ChatConvOutput *out, volatile sig_atomic_t *stop, ChatTurnStats *st, DlError *err) {
    memset(st, 0, sizeof *st);
    const int n_before = cJSON_GetArraySize(c->messages);
    char *prompt = NULL;
    size_t prompt_len = 0, n_ids = 0, n_a = 0;
    int32_t *ids = NULL, *a_ids = NULL;
    ChatParser *parser = NULL;
    DlDetok *dt = NULL;
    ChatTurnEnd end = TURN_ERROR;
    bool keep = false; /* the turn stays in the conversation */
    if (!add_message(c->messages, "user", user, strlen(user), NULL, 0)) {
        fail(err, "out of memory");
        goto done;
    }
    if (render_tokens(c, true, &prompt, &prompt_len, &ids, &n_ids, err) ||
        render_tokens(c, false, NULL, NULL, &a_ids, &n_a, err))
        goto done;
    st->n_prompt = n_ids;
    if (n_ids + 1 > (size_t)dl_session_n_ctx(c->session)) {
        snprintf(err->msg, sizeof err->msg, "the conversation (%zu tokens) does not fit the context (%d)", n_ids,
                 dl_session_n_ctx(c->session));
        end = TURN_TOO_LONG;
        goto done;
    }
    Err pe = {{0}};
    if (!(parser = chat_parser_new(c->tmpl->format, chat_prompt_opens_reasoning(prompt, prompt_len), NULL, &pe))) {
        fail(err, pe.msg);
        goto done;
    }
    if (!(dt = dl_detok_new(c->engine, false, err))) goto done;
    double t0 = now_s();
    int rc = sync_session(c, ids, n_ids, common_prefix(ids, n_ids, a_ids, n_a), stop, st, err);
    st->t_prompt = now_s() - t0;
    if (rc) {
        end = rc > 0 ? TURN_INTERRUPTED : TURN_ERROR;
        goto done;
    }
    dl_sampler_reset(smp);
    for (size_t i = 0; i < n_ids; i++) dl_sampler_accept(smp, ids[i]);
    t0 = now_s();
    ChatDelta d;
    for (bool ended = false; !ended;) {
        const char *piece = "";
        size_t len = 0;
        ChatTurnEnd why = TURN_DONE;
        if (stop && *stop) why = TURN_INTERRUPTED, ended = true;
        else if (n_gen >= 0 && (long long)st->n_gen >= n_gen) why = TURN_LENGTH, ended = true;
        else if (dl_session_n_past(c->session) >= dl_session_n_ctx(c->session)) why = TURN_CONTEXT, ended = true;
        else {
            int32_t tok = dl_sampler_sample(smp, dl_session_logits(c->session));
            dl_sampler_accept(smp, tok);
            st->n_gen++;
            if (!ignore_eos && dl_token_is_eog(c->engine, tok)) ended = true;
            else if (dl_detok_push(dt, tok, &piece, &len, err) || dl_session_eval(c->session, &tok, 1, err))
                goto done;
            else if (push_past(c, &tok, 1)) {
                fail(err, "out of memory");
                goto done;
            }
        }
        if (ended) dl_detok_flush(dt, &piece, &len);
        bool parsed = chat_parser_feed(parser, piece, len, &d, &pe) == 0;
        if (parsed) emit(out, &d);
        if (parsed && ended) parsed = chat_parser_finish(parser, &d, &pe) == 0;
        if (!parsed) {
            fail(err, pe.msg);
            goto done;
        }
        if (ended) emit(out, &d), end = why;
    }
    st->t_gen = now_s() - t0;
    size_t rlen, clen;
    const char *r = chat_parser_reasoning(parser, &rlen), *ct = chat_parser_content(parser, &clen);
    keep = end != TURN_INTERRUPTED || st->n_gen > 0;
    if (keep && !add_message(c->messages, "assistant", ct, clen, r, rlen)) {
        fail(err, "out of memory");
        keep = false;
        end = TURN_ERROR;
    }
done:
    if (!keep)
        while (cJSON_GetArraySize(c->messages) > n_before) cJSON_DeleteItemFromArray(c->messages, n_before);
    chat_parser_free(parser);
    dl_detok_free(dt);
    free(prompt);
    free(ids);
    free(a_ids);
    return end;
}
