/* web.h — the chat page the server shows at / (the files of src/server/web/, embedded in the binary at
 * build time by tools/embed.c). Routes, served without authentication (they hold no data; the page asks
 * for the API key and sends it with its API calls):
 *   GET/HEAD /            index.html
 *   GET/HEAD /web/NAME    any other file of src/server/web/
 * with ETag / If-None-Match (304), Cache-Control: no-cache, and a Content-Security-Policy that allows
 * only the page's own scripts, styles and API calls (no inline script, no other origin). Other methods
 * on these paths: 405. */
#ifndef DL_SERVER_WEB_H
#define DL_SERVER_WEB_H

#include <stdbool.h>
#include <stddef.h>

typedef struct WebAsset {
    const char *name; /* file name in src/server/web/; NULL ends the table */
    const char *type; /* Content-Type */
    const unsigned char *data;
    size_t size;
    const char *etag; /* quoted */
} WebAsset;

extern const WebAsset web_assets[]; /* the generated web_assets.c */

/* The asset a request path names (a query string is ignored), or NULL: not a web path. */
const WebAsset *web_find(const char *url);

struct MHD_Connection;
/* If url is a web path, queues the response (the asset, 304 or 405) and returns true with the MHD result
 * in *ret; returns false for every other path. */
bool web_serve(struct MHD_Connection *c, const char *url, const char *method, int *ret);

#endif
