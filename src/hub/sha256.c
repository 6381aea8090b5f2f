/* SHA-256 through Nettle; only the file loop and the hex text are ours. */
#include "hub/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/error.h"

void hub_sha256_init(hub_sha256 *s) { sha256_init(s); }

void hub_sha256_update(hub_sha256 *s, const void *data, size_t n) { sha256_update(s, n, data); }

void hub_sha256_hex(hub_sha256 *s, char hex[65]) {
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(s, sizeof d, d);
    static const char x[] = "0123456789abcdef";
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) hex[2 * i] = x[d[i] >> 4], hex[2 * i + 1] = x[d[i] & 15];
    hex[64] = 0;
}

int hub_sha256_file(const char *path, char hex[65]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tutti_set_error("%s: cannot open: %s", path, strerror(errno));
    enum { CHUNK = 1 << 20 };
    uint8_t *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return tutti_set_error("%s: out of memory", path);
    }
    hub_sha256 s;
    hub_sha256_init(&s);
    for (;;) {
        ssize_t r = read(fd, buf, CHUNK);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return tutti_set_error("%s: read error: %s", path, strerror(e));
        }
        if (r == 0) break;
        hub_sha256_update(&s, buf, (size_t)r);
    }
    free(buf);
    close(fd);
    hub_sha256_hex(&s, hex);
    return 0;
}
