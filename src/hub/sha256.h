/* SHA-256 (FIPS 180-4), for checking downloads against the hub's LFS oids. */
#ifndef TUTTI_HUB_SHA256_H
#define TUTTI_HUB_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct hub_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t buf[64];
    size_t n_buf;
} hub_sha256;

void hub_sha256_init(hub_sha256 *s);
void hub_sha256_update(hub_sha256 *s, const void *data, size_t n);
/* The digest as 64 lowercase hex digits and a NUL (hex[65]). */
void hub_sha256_hex(hub_sha256 *s, char hex[65]);
/* The digest of a whole file (hex[65]); -1 with an error naming it. */
int hub_sha256_file(const char *path, char hex[65]);

#endif
