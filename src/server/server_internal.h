/* server_internal.h — the Server object shared by server.c (life cycle), http.c (routes) and prepare.c
 * (requests to jobs). Internal to src/server/. */
#ifndef DL_SERVER_SERVER_INTERNAL_H
#define DL_SERVER_SERVER_INTERNAL_H

#include <microhttpd.h>

#include "chat/chat.h"
#include "deltallm.h"
#include "server/openai.h"
#include "server/prefix_cache.h"
#include "server/scheduler.h"
#include "server/server.h"

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
    int port;
    double started;
};

/* prepare.c: a validated request to a job (prompt tokens, sampling, stop strings, constraint). On
 * failure *e holds the 4xx. *starts_in_reasoning: for the chat parser. */
int prepare_job(Server *s, const ApiRequest *req, Job **job, bool *starts_in_reasoning, ApiError *e);

/* http.c */
int http_start(Server *s, Err *err);
void http_stop(Server *s);

#endif
