/* conn_guard.h — a deadline for receiving each request (headers and body), against slowloris clients.
 *
 * libmicrohttpd's connection timeout only closes idle connections: a client that sends one header byte
 * a second keeps its socket (and, with one thread per connection, a thread) forever. The guard tracks
 * every connection from the moment it opens (or its previous response ends) until its request has
 * been read completely; a watchdog thread shuts down the socket of any connection still reading after
 * the deadline, and libmicrohttpd then closes it. While a request is handled or its response streamed,
 * no deadline applies (generation may take long). An idle keep-alive connection counts as "reading"
 * its next request, so it is closed after the deadline too.
 *
 * Two deadlines: one for the headers (short: seconds), one for the whole request. And a cap: when a
 * connection opens beyond it, the connection that has waited longest for its headers is closed (the oldest
 * first), so that a flood of slow clients from many addresses cannot lock others out; libmicrohttpd's own
 * limit is set above the cap, so the newcomer is accepted while the evicted one closes.
 *
 * Threads: the notify callbacks run on libmicrohttpd's threads; one mutex guards the list. The socket
 * is shut down under that mutex and libmicrohttpd reports a closed connection before it closes the
 * descriptor, so the watchdog never touches a descriptor that was reused. */
#ifndef DL_SERVER_CONN_GUARD_H
#define DL_SERVER_CONN_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

typedef struct ConnGuard ConnGuard;
typedef struct GuardedConn GuardedConn;

/* deadline_s: seconds to read one request; header_deadline_s: seconds to read its headers (≤ 0: no such
 * deadline); cap: connections beyond which the oldest one still waiting for headers is closed (≤ 0: none).
 * Starts the watchdog thread. */
ConnGuard *guard_new(double deadline_s, double header_deadline_s, int cap, Err *err);
void guard_free(ConnGuard *g);

/* A connection opened (fd: its socket; peer: its address, for the log). */
GuardedConn *guard_open(ConnGuard *g, int fd, const char *peer);
void guard_close(ConnGuard *g, GuardedConn *c);
/* The request's headers are in: the request deadline applies, and it no longer gives way at the cap. */
void guard_headers_read(ConnGuard *g, GuardedConn *c);
/* The request is read: no deadline until guard_next. */
void guard_request_read(ConnGuard *g, GuardedConn *c);
/* The response is sent: the deadline for the next request on this connection starts now. */
void guard_next(ConnGuard *g, GuardedConn *c);

/* Connections closed by the deadline so far. */
uint64_t guard_timeouts(ConnGuard *g);
/* Connections closed at the cap so far. */
uint64_t guard_evictions(ConnGuard *g);

#endif
