/* chat_internal.h — what the per-format renderers share: the render state, error reporting in the
 * templates' own words, and accessors with Jinja's view of JSON values. Internal to src/chat/. */
#ifndef DL_CHAT_INTERNAL_H
#define DL_CHAT_INTERNAL_H

#include "chat/chat.h"
#include "chat/chat_text.h"

#include <string.h>

typedef struct Render {
    const ChatTemplate *tmpl;
    const ChatRenderOptions *opt;
    StrBuf out;
    Err *err;
    /* temporaries owned by the render (flattened contents, parsed arguments) */
    StrBuf *temps;
    size_t n_temps, cap_temps;
    cJSON **owned;
    size_t n_owned, cap_owned;
} Render;

/* Records "chat template (FORMAT): message" and returns -1. */
int render_fail(Render *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Member of an object (NULL when v is not an object or lacks the key). */
static inline const cJSON *jget(const cJSON *v, const char *key) {
    return cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, key) : NULL;
}
/* String member, or NULL. */
static inline const char *jstr(const cJSON *v, const char *key) {
    const cJSON *s = jget(v, key);
    return cJSON_IsString(s) ? s->valuestring : NULL;
}
/* Whether a message's role is the given one. */
static inline bool role_is(const cJSON *msg, const char *role) {
    const char *r = jstr(msg, "role");
    return r && !strcmp(r, role);
}

/* A message's content where the template concatenates it as a string ('...' + message.content):
 * strings as they are, null/missing as "" (our deviation), text-part arrays joined when the caller
 * allows it, anything else fails with what the template would say. */
int content_as_string(Render *r, const cJSON *msg, Str *out);
/* <|im_start|>ROLE\nCONTENT<|im_end|>\n — a plain turn, its content by content_as_string. */
int render_turn(Render *r, const char *role, const cJSON *msg);
/* The text of a value printed with {{ }} (str()), null/missing as "". Owned by the render. */
Str printed(Render *r, const cJSON *v);
/* Tool-call arguments as a mapping for the XML formats: an object as it is, a string holding a JSON
 * object parsed (owned by the render); anything else fails. *args is NULL when absent. */
int call_arguments_object(Render *r, const cJSON *call, const cJSON **args);
/* The function part of a tool call ({"function": {...}} or the call itself) and its name. */
int call_function(Render *r, const cJSON *call, const cJSON **fn, const char **name);
/* <parameter=K>\nV\n</parameter>\n for every argument, as the XML templates print them. */
void render_xml_parameters(Render *r, const cJSON *args);
/* Whether the generation prompt's thinking is off: the caller said false, or said nothing to a template that
 * thinks only on request. */
static inline bool thinking_disabled(const Render *r) {
    return r->opt->enable_thinking == 0 ||
           (r->opt->enable_thinking == CHAT_THINKING_DEFAULT && r->tmpl && r->tmpl->thinking_opt_in);
}

int render_chatml(Render *r, const cJSON *messages);
int render_qwen3(Render *r, const cJSON *messages, const cJSON *tools);
int render_qwen3_coder(Render *r, const cJSON *messages, const cJSON *tools);
int render_qwen35(Render *r, const cJSON *messages, const cJSON *tools);

#endif
