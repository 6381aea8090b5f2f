/* Split GGUF models: llama.cpp's gguf-split format (examples/gguf-split, read
 * by llama-model-loader.cpp).
 *
 * A model of N parts is N GGUF files named PREFIX-00001-of-0000N.gguf ...
 * PREFIX-0000N-of-0000N.gguf (five digits each).  Every part carries
 * split.no (u16, 0-based), split.count (N) and split.tensors.count (the
 * tensors of all parts); the first part holds the model's metadata, the
 * others only the split keys, and each part its own tensors.  gguf_open of
 * the first part opens the others and presents one file: the first part's
 * metadata and every part's tensors, in part order, with `data` pointing into
 * each part's own mapping.  As llama.cpp: the first part must be the one
 * opened, every part must say its number and the count, no tensor may be in
 * two parts, and the tensor total must match split.tensors.count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_impl.h"
#include "util/error.h"

/* u16 in the format; at most this many mappings are opened */
#define SPLIT_MAX_PARTS 4096

/* "PREFIX-%05d-of-%05d.gguf": the length of PREFIX when path ends so with
 * part `no` (1-based) of `count`, else 0. */
static size_t split_prefix_len(const char *path, long long no, long long count) {
    char suffix[64];
    int sl = snprintf(suffix, sizeof suffix, "-%05lld-of-%05lld.gguf", no, count);
    size_t n = strlen(path);
    if (sl <= 0 || (size_t)sl >= n || strcmp(path + n - (size_t)sl, suffix) != 0) return 0;
    return n - (size_t)sl;
}

/* split.no and split.count of a part, both required there. */
static int part_keys(const gguf_file *p, int64_t *no, int64_t *count) {
    const char *path = gguf_path(p);
    if (gguf_find_key(p, "split.no") < 0) return tutti_set_error("%s: missing key split.no in a GGUF split part", path);
    if (gguf_find_key(p, "split.count") < 0)
        return tutti_set_error("%s: missing key split.count in a GGUF split part", path);
    if (!gguf_get_i64(p, "split.no", no) || !gguf_get_i64(p, "split.count", count)) return TUTTI_ERR;
    return 0;
}

static int open_parts(gguf_file *f, int64_t count) {
    const char *path = gguf_path(f);
    size_t pl = split_prefix_len(path, 1, count);
    if (pl == 0)
        return tutti_set_error("%s: the first part of a split model of %lld parts must be named "
                               "PREFIX-00001-of-%05lld.gguf (its other parts are found by that name)",
                               path, (long long)count, (long long)count);
    gguf_file **parts = calloc((size_t)count, sizeof *parts);
    char *name = malloc(pl + 64);
    if (!parts || !name) {
        free(parts), free(name);
        return tutti_set_error("%s: out of memory", path);
    }
    int n = 0, rc = 0;
    for (int64_t i = 1; i < count && rc == 0; i++) {
        snprintf(name, pl + 64, "%.*s-%05lld-of-%05lld.gguf", (int)pl, path, (long long)i + 1, (long long)count);
        gguf_file *p = gguf_open_one(name);
        int64_t no = -1, c = -1;
        if (!p) {
            tutti_error_prefix("split model %s: part %lld of %lld", path, (long long)i + 1, (long long)count);
            rc = TUTTI_ERR;
        } else if (part_keys(p, &no, &c) < 0) {
            rc = TUTTI_ERR;
        } else if (no != i || c != count) {
            rc = tutti_set_error("%s: split.no %lld, split.count %lld: expected part %lld of %lld (0-based no %lld)",
                                 name, (long long)no, (long long)c, (long long)i + 1, (long long)count, (long long)i);
        }
        if (p) parts[n++] = p;
    }
    free(name);
    if (rc == 0 && gguf_adopt_parts(f, parts, n) == 0) return 0;
    for (int i = 0; i < n; i++) gguf_close(parts[i]);
    free(parts);
    return TUTTI_ERR;
}

gguf_file *gguf_open(const char *path) {
    gguf_file *f = gguf_open_one(path);
    if (!f || gguf_find_key(f, "split.count") < 0) return f;
    int64_t no = -1, count = 0;
    if (part_keys(f, &no, &count) < 0) goto fail;
    if (count <= 1 && no == 0) return f; /* a "split" of one part is the file itself */
    if (count < 1 || count > SPLIT_MAX_PARTS || no < 0 || no >= count) {
        tutti_set_error("%s: split.no %lld of split.count %lld is not a part number (count 1..%d)", path, (long long)no,
                        (long long)count, SPLIT_MAX_PARTS);
        goto fail;
    }
    if (no != 0) {
        size_t pl = split_prefix_len(path, no + 1, count);
        if (pl)
            tutti_set_error("%s is part %lld of a split model of %lld parts: open the first part, "
                            "%.*s-00001-of-%05lld.gguf",
                            path, (long long)no + 1, (long long)count, (int)pl, path, (long long)count);
        else
            tutti_set_error("%s is part %lld of a split model of %lld parts: open the first part", path,
                            (long long)no + 1, (long long)count);
        goto fail;
    }
    if (open_parts(f, count) < 0) goto fail;
    int64_t want = 0;
    if (gguf_find_key(f, "split.tensors.count") >= 0) {
        if (!gguf_get_i64(f, "split.tensors.count", &want)) goto fail;
        if (want != gguf_n_tensors(f)) {
            tutti_set_error(
                "%s: corrupted split model: split.tensors.count says %lld tensors, its %lld parts hold %lld", path,
                (long long)want, (long long)count, (long long)gguf_n_tensors(f));
            goto fail;
        }
    }
    return f;
fail:
    gguf_close(f);
    return NULL;
}
