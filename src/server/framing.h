/* HTTP/1.1 message framing checks of `tutti serve` (RFC 9112 §3 and §6),
 * pure functions over bytes and header lists so that they are fuzzed
 * (fuzz/fuzz_http.c) and used where the server sees the bytes: the request
 * line of a new connection before libmicrohttpd gets it (conn.c), the
 * headers once libmicrohttpd has parsed them (http.c).
 *
 * Why: behind a proxy, a request whose length two parties read differently
 * smuggles a second request (the proxy forwards one, the server sees two).
 * libmicrohttpd 0.9.75 takes the first of two Content-Length headers,
 * ignores Content-Length next to Transfer-Encoding, reads an unknown coding
 * (`identity`) until the connection closes, and drops some garbage request
 * lines without an answer; llama-server answers 400 to all of them. */
#ifndef TUTTI_SERVER_FRAMING_H
#define TUTTI_SERVER_FRAMING_H

#include <stdbool.h>
#include <stddef.h>

typedef struct srv_header {
    const char *name; /* as received (compared case-insensitively) */
    const char *value;
} srv_header;

/* A request's framing headers (every Content-Length and Transfer-Encoding
 * among h[0..n)), RFC 9112 §6.1 and §6.3: 0 when the body length is
 * unambiguous, else 400 with the reason in err.  Refused: Transfer-Encoding
 * other than exactly "chunked" (one header, one coding: tutti decodes no
 * other, and RFC 9112 §6.3 item 4 says to respond 400 and close when the
 * final coding is not chunked), Transfer-Encoding with Content-Length
 * (item 3), a Content-Length that is not digits, or several that differ
 * (item 5: identical repeats are accepted). */
int srv_framing_check(const srv_header *h, size_t n, char *err, size_t cap);

/* RFC 9112 §3: method SP request-target SP HTTP-version, line[0..n)
 * without its line end: the method a token, the target visible ASCII, the
 * version "HTTP/" DIGIT "." DIGIT. */
bool srv_request_line_ok(const char *line, size_t n);

/* The first bytes of a connection, buf[0..n) (n <= max, the most the
 * caller reads): 1 when they hold a well-formed request line (after any
 * empty lines, which RFC 9112 §2.2 lets a server skip), 0 when the line is
 * not complete yet, -1 when it is garbage (or longer than max allows). */
int srv_first_line(const char *buf, size_t n, size_t max);

#endif
