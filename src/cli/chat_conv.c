/* chat_conv.c — see chat_conv.h: the conversation of `deltallm chat`, its rendering and session reuse. */
#include "cli/chat_conv.h"
#include "base/clock.h"
#include "vision/mm_prompt.h"

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
    /* images (chat_conv_attach): those of the messages, in order, then the ones waiting for the next message */
    MmImage *imgs;
    int *serial; /* each image's number in this conversation (its rows' keys in past[]) */
    int n_imgs, n_pending, cap_imgs, next_serial;
    MmRows rows; /* the current prompt's rows when it holds images (rows.n 0: none) */
    int width;
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

static void drop_images(ChatConv *c, int keep) {
    while (c->n_imgs > keep) mm_image_free(&c->imgs[--c->n_imgs]);
    if (c->n_pending > c->n_imgs) c->n_pending = c->n_imgs;
}

int chat_conv_attach(ChatConv *c, MmImage *img, DlError *err) {
    if (c->n_imgs == c->cap_imgs) {
        const int cap = c->cap_imgs ? 2 * c->cap_imgs : 8;
        MmImage *p = realloc(c->imgs, sizeof *p * (size_t)cap);
        if (p) c->imgs = p;
        int *q = p ? realloc(c->serial, sizeof *q * (size_t)cap) : NULL;
        if (q) c->serial = q;
        if (!p || !q) return fail(err, "out of memory");
        c->cap_imgs = cap;
    }
    c->serial[c->n_imgs] = c->next_serial++;
    c->imgs[c->n_imgs++] = *img;
    c->n_pending++;
    c->width = img->width;
    memset(img, 0, sizeof *img);
    return 0;
}

int chat_conv_pending_images(const ChatConv *c) { return c->n_pending; }

void chat_conv_free(ChatConv *c) {
    if (!c) return;
    drop_images(c, 0);
    free(c->imgs);
    free(c->serial);
    mm_rows_free(&c->rows);
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
    drop_images(c, 0);
    c->n_pending = 0;
    mm_rows_free(&c->rows);
}

const cJSON *chat_conv_messages(const ChatConv *c) { return c->messages; }
const int32_t *chat_conv_tokens(const ChatConv *c, size_t *n) {
    *n = c->n_past;
    return c->past;
}

/* The images' rows in a rendered conversation ids[0, n) (one <|image_pad|> per image of its messages): c->rows
 * gets the rows; *ids becomes their keys — an image row's is negative, from the image's number in the
 * conversation and the row, so the timeline comparison below tells images apart. */
static int expand_images(ChatConv *c, int32_t **ids, size_t *n, MmRows *rows, DlError *err) {
    mm_rows_free(rows);
    const int n_msg_imgs = c->n_imgs; /* the pending ones are in the message by now */
    if (!n_msg_imgs) return 0;
    const MmImage **v = malloc(sizeof *v * (size_t)n_msg_imgs);
    if (!v) return fail(err, "out of memory");
    for (int k = 0; k < n_msg_imgs; k++) v[k] = &c->imgs[k];
    Err e = {{0}};
    const int rc = mm_rows_build(*ids, *n, dl_token_id(c->engine, "<|image_pad|>"), v, n_msg_imgs, 0, rows, &e);
    free(v);
    if (rc) return fail(err, e.msg);
    int32_t *keys = malloc(sizeof *keys * rows->n);
    if (!keys) return mm_rows_free(rows), fail(err, "out of memory");
    int k = -1;
    size_t r0 = 0;
    for (size_t r = 0; r < rows->n; r++) {
        if (!rows->row[r]) {
            keys[r] = rows->tok[r];
            continue;
        }
        if (r == 0 || !rows->row[r - 1] || r - r0 == (size_t)c->imgs[k].n_tokens) k++, r0 = r;
        keys[r] = -(int32_t)(1 + ((uint32_t)(c->serial[k] & 0x3fff) << 16 | (uint32_t)(r - r0)));
    }
    free(*ids);
    *ids = keys, *n = rows->n;
    return 0;
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
    if (rc) return rc;
    MmRows tmp = {0}; /* the rows of the prompt to evaluate are kept (c->rows), the others only counted */
    rc = expand_images(c, ids, n, gen_prompt ? &c->rows : &tmp, err);
    mm_rows_free(&tmp);
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
        if (c->rows.n ? mm_rows_eval(c->session, &c->rows, c->width, k, k + n, err)
                      : dl_session_eval(c->session, ids + k, n, err))
            return -1;
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
    const int imgs_before = c->n_imgs - c->n_pending;
    if (!add_message(c->messages, "user", user, strlen(user), NULL, 0)) {
        fail(err, "out of memory");
        goto done;
    }
    if (c->n_pending) { /* the images before the text, as `run --image` puts them */
        cJSON *m = cJSON_GetArrayItem(c->messages, cJSON_GetArraySize(c->messages) - 1), *parts = cJSON_CreateArray();
        for (int k = 0; parts && k < c->n_pending; k++) {
            cJSON *p = cJSON_CreateObject();
            cJSON_AddStringToObject(p, "type", "image");
            cJSON_AddItemToArray(parts, p);
        }
        cJSON *t = cJSON_CreateObject();
        cJSON_AddStringToObject(t, "type", "text");
        cJSON_AddStringToObject(t, "text", user);
        cJSON_AddItemToArray(parts, t);
        cJSON_ReplaceItemInObjectCaseSensitive(m, "content", parts);
        c->n_pending = 0;
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
    for (size_t i = 0; i < n_ids; i++) dl_sampler_accept(smp, c->rows.n ? c->rows.tok[i] : ids[i]);
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
    if (!keep) {
        while (cJSON_GetArraySize(c->messages) > n_before) cJSON_DeleteItemFromArray(c->messages, n_before);
        drop_images(c, imgs_before); /* the message's images go with it */
    }
    chat_parser_free(parser);
    dl_detok_free(dt);
    free(prompt);
    free(ids);
    free(a_ids);
    return end;
}
