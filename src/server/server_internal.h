/* server_internal.h — the Server object shared by server.c (life cycle), http.c (routes) and prepare.c
 * (requests to jobs). Internal to src/server/. */
#ifndef DL_SERVER_SERVER_INTERNAL_H
#define DL_SERVER_SERVER_INTERNAL_H

#include <microhttpd.h>
#include <stdatomic.h>

#include "chat/chat.h"
#include "deltallm.h"
#include "server/conn_guard.h"
#include "server/openai.h"
#include "server/prefix_cache.h"
#include "server/responses.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "server/vision.h"

/* Request counters for /metrics (atomics: every HTTP thread adds to them). */
typedef struct ServerCounters {
    atomic_ullong requests[32]; /* by Route (R_COUNT ≤ 32) */
    atomic_ullong status_4xx, status_5xx, read_timeouts;
} ServerCounters;

struct Server {
    ServerConfig cfg;
    DlEngine *engine;
    const DlModelInfo *info;
    ChatTemplate tmpl;
    bool have_template;
    char *model_id;
    char *api_key;
    size_t api_key_len;
    ApiDefaults defaults;
    PrefixCache *cache;
    Scheduler *sched;
    struct MHD_Daemon *daemon;
    int listen_fd; /* bound by http_bind before the model loads (-1: none); the daemon takes it over */
    int port;
    double started;
    ConnGuard *guard;       /* NULL when there is no read deadline */
    ResponsesStore *store;  /* /v1/responses conversations (previous_response_id) */
    ServerCounters counters;
    uint64_t fingerprint[2]; /* of checkpoint and slot files: the model and the arithmetic settings */
    ServerVision *vision;    /* --mmproj (NULL: images are refused) */
};

/* prepare.c: a validated request to a job (prompt tokens, sampling, stop strings, constraint); index: which
 * of a completion request's prompts (0 for chat). On failure *e holds the 4xx. *starts_in_reasoning: for
 * the chat parser. */
int prepare_job(Server *s, const ApiRequest *req, int index, Job **job, bool *starts_in_reasoning, ApiError *e);

/* prepare.c: the chat prompt of a request, as the model's template renders it (malloc'd, JSON_NUL for NULs).
 * *forced: the output is constrained (forced tool call, JSON). */
int render_chat(Server *s, const ApiRequest *req, char **text, size_t *len, bool *forced, ApiError *e);

/* slots.c: POST /slots/{id}?action=save|restore|erase (id: the path's digits). */
struct MHD_Connection;
int slot_action(Server *s, const char *id, const char *action, const char *body, size_t len, char **json, ApiError *e);

/* server.c: a whole text file (malloc'd, NUL-terminated), or NULL with a reason. */
char *server_read_file(const char *path, Err *err);

/* http.c */
/* Binds and listens on the configured address (the error names the cause: errno's text), before the model
 * loads, so a port in use fails at once; http_start then serves on that socket. */
int http_bind(Server *s, Err *err);
int http_start(Server *s, Err *err);
void http_stop(Server *s);

#endif
