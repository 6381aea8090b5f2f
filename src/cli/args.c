#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "util/clock.h"

const char *cli_cmd = "";

bool cli_ids(const char *s, int32_t **ids, int32_t *n) {
    int32_t cap = 16, m = 0;
    int32_t *a = malloc(sizeof(int32_t) * (size_t)cap);
    const char *p = s;
    while (a && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(a);
            return false;
        }
        if (m == cap) {
            int32_t *b = realloc(a, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!b) break;
            a = b;
        }
        a[m++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!a || m == 0) {
        free(a);
        return false;
    }
    *ids = a;
    *n = m;
    return true;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error("cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    /* fopen succeeds on a directory and fread then just returns 0: without
     * this check a directory would read as an empty text. */
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        cli_error("%s is a directory, not a file", path);
        fclose(f);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) break;
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    if (buf && ferror(f)) {
        cli_error("error reading %s: %s", path, strerror(errno));
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    if (!buf) {
        cli_error("out of memory reading %s", path);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

int32_t *cli_tokenize(const tutti_vocab *vocab, const char *text, size_t len, bool add_bos, bool parse_special,
                      int32_t *n_out) {
    int32_t cap = (int32_t)(len < (size_t)INT32_MAX / 2 ? len : (size_t)INT32_MAX / 2) + 8;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n = ids ? tutti_tokenize(vocab, text, len, add_bos, parse_special, ids, cap) : TUTTI_ERR_SIZE;
    if (n < 0 && n != TUTTI_ERR_SIZE && ids) {
        cap = -n;
        free(ids);
        ids = malloc(sizeof(int32_t) * (size_t)cap);
        n = ids ? tutti_tokenize(vocab, text, len, add_bos, parse_special, ids, cap) : TUTTI_ERR_SIZE;
    }
    if (n < 0) {
        cli_error("tokenizing failed: %s", tutti_last_error());
        free(ids);
        return NULL;
    }
    *n_out = n;
    return ids;
}

double cli_now(void) { return tutti_now_s(); }

void cli_print_prompt_ids(const char *label, const int32_t *ids, int32_t n) {
    fprintf(stderr, "%s%sprompt ids:", label, *label ? " " : "");
    for (int32_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}
