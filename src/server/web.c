/* web.c — see web.h: serving the embedded chat page. */
#include "server/web.h"

#include <microhttpd.h>
#include <string.h>

#include "server/util.h"

#define WEB_PREFIX "/web/"

/* Only the page's own files; API calls to this origin; nothing inline, no frames. */
static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                          "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const WebAsset *web_find(const char *url) {
    size_t n = strcspn(url, "?#");
    const char *name;
    size_t name_len;
    if (n == 1 && url[0] == '/') name = "index.html", name_len = 10;
    else if (n > strlen(WEB_PREFIX) && !strncmp(url, WEB_PREFIX, strlen(WEB_PREFIX)))
        name = url + strlen(WEB_PREFIX), name_len = n - strlen(WEB_PREFIX);
    else return NULL;
    for (const WebAsset *a = web_assets; a->name; a++)
        if (strlen(a->name) == name_len && !memcmp(a->name, name, name_len)) return a;
    return NULL;
}

static int queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r) {
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    int rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

bool web_serve(struct MHD_Connection *c, const char *url, const char *method, int *ret) {
    const size_t n = strcspn(url, "?#");
    const bool web_path = (n == 1 && url[0] == '/') || !strncmp(url, WEB_PREFIX, strlen(WEB_PREFIX));
    if (!web_path) return false;
    const WebAsset *a = web_find(url);
    static const char not_found[] = "not found\n", not_allowed[] = "method not allowed (GET, HEAD)\n";
    if (!a) {
        *ret = queue(c, 404, MHD_create_response_from_buffer(sizeof not_found - 1, (void *)not_found, MHD_RESPMEM_PERSISTENT));
        return true;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        struct MHD_Response *r =
            MHD_create_response_from_buffer(sizeof not_allowed - 1, (void *)not_allowed, MHD_RESPMEM_PERSISTENT);
        if (r) MHD_add_response_header(r, "Allow", "GET, HEAD");
        *ret = queue(c, 405, r);
        return true;
    }
    const char *inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match");
    const bool fresh = inm && strstr(inm, a->etag);
    struct MHD_Response *r = MHD_create_response_from_buffer(fresh ? 0 : a->size, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (r) {
        MHD_add_response_header(r, "Content-Type", a->type);
        MHD_add_response_header(r, "ETag", a->etag);
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        if (!strcmp(a->name, "index.html")) {
            MHD_add_response_header(r, "Content-Security-Policy", csp);
            MHD_add_response_header(r, "X-Frame-Options", "DENY");
        }
    }
    srv_log(LOG_DEBUG, "web: %s -> %d", a->name, fresh ? 304 : 200);
    *ret = queue(c, fresh ? 304 : 200, r);
    return true;
}
