/* Connections of `tutti serve` (conn.c): the listening socket, the
 * connection limits and the time limits, around libmicrohttpd.
 *
 * One thread accepts every connection (libmicrohttpd runs without a
 * listening socket of its own and gets them with MHD_add_connection):
 *   - beyond --max-connections in all, or --max-connections-per-ip from one
 *     client address, a new connection is answered 503 at once and closed;
 *   - the first request line is read (peeked: libmicrohttpd reads it again)
 *     and a malformed one is answered 400 and closed (framing.h);
 *   - a request's head (request line and headers) must be complete within
 *     --timeout-head seconds of the connection's start or of the previous
 *     response, its body within --timeout-body seconds of the head; a
 *     connection past its limit is closed (408 before libmicrohttpd has it)
 *     -- a slow client ("slowloris") cannot hold a connection, whose bytes
 *     trickle in below any per-read timeout;
 *   - libmicrohttpd's own timeout (--timeout) closes a connection silent for
 *     that long between two reads or writes, which bounds keep-alive idling.
 * While a request is generating there is no limit (the slot's job has its
 * own: the client leaving cancels it).
 * Answers that close a connection are sent before a lingering close (the
 * client's unread bytes are drained for a moment), so the client reads the
 * answer instead of a reset. */
#ifndef TUTTI_SERVER_CONN_H
#define TUTTI_SERVER_CONN_H

#include <microhttpd.h>

typedef struct srv_server srv_server;
typedef struct srv_conns srv_conns;

/* Binds and listens on s->opts.host:port (0: any free port; *port gets the
 * one bound).  0, or -1 with a message (exit 1). */
int srv_conns_listen(srv_server *s, int *port, char *err, size_t cap);
/* Starts accepting into the daemon d (made with MHD_USE_NO_LISTEN_SOCKET and
 * srv_conn_notify as MHD_OPTION_NOTIFY_CONNECTION).  0 or -1. */
int srv_conns_start(srv_server *s, struct MHD_Daemon *d, char *err, size_t cap);
/* Stops accepting (closes the listening socket and the connections not yet
 * handed over); srv_conns_free, after MHD_stop_daemon, releases the rest. */
void srv_conns_stop(srv_server *s);
void srv_conns_free(srv_server *s);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the server). */
void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_ctx, enum MHD_ConnectionNotificationCode code);
/* The phases of a request on connection c: its head was read (the body's
 * time limit starts), the request was read (no limit while it runs), the
 * response was sent (the next head's limit starts). */
void srv_conn_head_read(srv_server *s, struct MHD_Connection *c);
void srv_conn_request_read(srv_server *s, struct MHD_Connection *c);
void srv_conn_response_sent(srv_server *s, struct MHD_Connection *c);

#endif
