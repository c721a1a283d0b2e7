/* chat_conv.h — the conversation behind `deltallm chat`: the messages so far, rendered with the model's chat
 * template every turn, and one session whose timeline is reused from turn to turn.
 *
 * Reuse: the session holds the tokens it has evaluated (the last prompt and the reply generated after it).
 * A new turn's prompt is the whole conversation rendered again; what the session already holds of it is
 * kept. When the template renders the last reply differently from how it was generated (the Qwen3.5
 * templates drop earlier turns' reasoning; BPE may split the reply otherwise), the session goes back to a
 * snapshot taken at the end of the last user message (a recurrent state cannot be rolled back, only
 * restored) and evaluates the rest; failing that, it starts over. Either way the session ends up holding
 * exactly the tokens of the rendered conversation (chat_conv_tokens), evaluating only what is new. */
#ifndef DL_CLI_CHAT_CONV_H
#define DL_CLI_CHAT_CONV_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "chat/chat.h"
#include "deltallm.h"

typedef struct ChatConv ChatConv;

/* Where the reply goes as it is generated: reasoning and content text, in order. */
typedef struct ChatConvOutput {
    void (*reasoning)(void *user, const char *text, size_t len);
    void (*content)(void *user, const char *text, size_t len);
    void *user;
} ChatConvOutput;

typedef enum ChatTurnEnd {
    TURN_DONE,        /* end of generation */
    TURN_LENGTH,      /* n_gen tokens */
    TURN_CONTEXT,     /* the context filled up during the reply */
    TURN_INTERRUPTED, /* *stop was set (Ctrl-C) */
    TURN_TOO_LONG,    /* the conversation no longer fits the context: nothing was done */
    TURN_ERROR,       /* err says why */
} ChatTurnEnd;

typedef struct ChatTurnStats {
    size_t n_prompt; /* tokens of the rendered conversation */
    size_t n_reused; /* of them, already in the session */
    size_t n_gen;    /* generated */
    double t_prompt, t_gen;
} ChatTurnStats;

/* system may be NULL. The template and engine must outlive the conversation. */
ChatConv *chat_conv_new(DlEngine *e, const ChatTemplate *t, const char *system, bool think, DlError *err);
void chat_conv_free(ChatConv *c);
/* Forgets the messages (the system prompt stays) and the session's timeline. */
void chat_conv_reset(ChatConv *c);

/* One turn: adds the user message, evaluates what the session lacks of the prompt, generates the reply
 * (at most n_gen tokens; -1: no limit) into out, and adds it to the conversation. stop (may be NULL) is
 * polled between forward passes: once set, the turn ends with TURN_INTERRUPTED, keeping what was
 * generated (if nothing was, the user message is dropped too). TURN_TOO_LONG and TURN_ERROR leave the
 * conversation as it was. */
ChatTurnEnd chat_conv_turn(ChatConv *c, const char *user, DlSampler *smp, long long n_gen, bool ignore_eos,
                           const ChatConvOutput *out, volatile sig_atomic_t *stop, ChatTurnStats *st, DlError *err);

/* Takes *img (its embeddings; *img is emptied): it goes into the next user message, before the text (the
 * model's chat format must place images: qwen35). 0, or -1 with err. */
struct MmImage;
int chat_conv_attach(ChatConv *c, struct MmImage *img, DlError *err);
/* Images attached and not yet sent. */
int chat_conv_pending_images(const ChatConv *c);

/* The messages so far (a JSON array of {"role", "content", "reasoning_content"}). */
const cJSON *chat_conv_messages(const ChatConv *c);
/* The tokens the session has evaluated. */
const int32_t *chat_conv_tokens(const ChatConv *c, size_t *n);

#endif
