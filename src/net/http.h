/* The `net` layer (internal): the HTTP client of remote members
 * (src/member/remote.c) and of the hub's listings and downloads (src/hub/),
 * a small wrapper of libcurl.
 *
 * One remote_http per member: its curl easy handle keeps the connection to
 * the server alive between requests (no TCP handshake per step), and is used
 * by one thread at a time (the member's worker).  Every request has a total
 * timeout.  The API key, when given, goes only into the Authorization
 * header; it is never part of an error message. */
#ifndef TUTTI_NET_HTTP_H
#define TUTTI_NET_HTTP_H

#include <stddef.h>

typedef struct remote_http remote_http;

/* libcurl's process-wide initialisation, once (also for src/hub's
 * downloads); 0, or -1 with an error. */
int remote_http_init(void);

/* base: "http://host:port" or with a path prefix ("http://h/v1" style bases
 * are joined as base + path).  timeout_ms > 0.  api_key may be NULL.
 * NULL + error on out of memory or a libcurl failure. */
remote_http *remote_http_new(const char *base, long timeout_ms, const char *api_key);
void remote_http_free(remote_http *h);

/* GET (body == NULL) or POST of a JSON body to base + path.  On success
 * returns the HTTP status (200, 404, ...) and the response in *resp
 * (NUL-terminated, owned by h, valid until the next request; *n its length).
 * On a transport failure (refused, timeout, reset) returns -1 with an error
 * that names the URL.  Responses larger than 64 MiB are refused. */
int remote_http_request(remote_http *h, const char *path, const char *body, const char **resp, size_t *n);

/* The URL base (for messages). */
const char *remote_http_base(const remote_http *h);

#endif
