/* SHA-256 (FIPS 180-4), for checking downloads against the hub's LFS oids:
 * a thin wrapper of Nettle's (nettle/sha2.h), so the hash is a well-kept
 * library's and not ours. */
#ifndef TUTTI_HUB_SHA256_H
#define TUTTI_HUB_SHA256_H

#include <nettle/sha2.h>
#include <stddef.h>

typedef struct sha256_ctx hub_sha256; /* plain state, no allocation */

void hub_sha256_init(hub_sha256 *s);
void hub_sha256_update(hub_sha256 *s, const void *data, size_t n);
/* The digest as 64 lowercase hex digits and a NUL (hex[65]); the state is
 * reset for another message. */
void hub_sha256_hex(hub_sha256 *s, char hex[65]);
/* The digest of a whole file (hex[65]); -1 with an error naming it. */
int hub_sha256_file(const char *path, char hex[65]);

#endif
