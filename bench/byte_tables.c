/* bench/byte_tables: one member's byte-level next-byte distributions over a
 * text, written to files, for studying fusion rules offline
 * (docs/fusion-study-explore.py; docs/fusion-study.md, "Session 15").
 *
 *   byte_tables MODEL TEXT PREFIX [TEMP...]     (default TEMP: 1)
 *
 * The text is cut into chunks as `tutti eval` and `tutti fit` cut it
 * (sentence-aligned, at most 200 bytes, each scored from BOS), and the
 * member's rows are exactly the tables those commands fuse (byte alignment,
 * default pruning, one thread).  Writes, all little-endian:
 *   PREFIX.y       int32 [rows]           the true byte of every row
 *   PREFIX.cs      int64 [chunks + 1]     first row of every chunk, then rows
 *   PREFIX.tTEMP   float32 [rows][257]    log-probabilities of the 256 bytes
 *                                         and end of text at temperature TEMP
 *                                         (the member's token logits / TEMP);
 *                                         -inf where the member has none
 * (TEMP as given on the command line, e.g. PREFIX.t1, PREFIX.t0.9).
 * Fusing these rows with a rule gives the ensemble's bits per byte as eval
 * reports it: Σ -log2 q(y) / rows.  Exit 0, 1 on an error (message on
 * stderr), 2 on bad usage. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fusion/eval_impl.h"
#include "tutti.h"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) break;
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f) || !buf;
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int write_file(const char *prefix, const char *suffix, const void *data, size_t size, size_t count) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s.%s", prefix, suffix) >= (int)sizeof path) {
        fprintf(stderr, "byte_tables: output path too long\n");
        return -1;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, size, count, f) != count || fclose(f) != 0) {
        fprintf(stderr, "byte_tables: cannot write %s\n", path);
        if (f) fclose(f);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4 || !strcmp(argv[1], "--help")) {
        fprintf(stderr, "usage: byte_tables MODEL TEXT PREFIX [TEMP...]   (default TEMP: 1)\n");
        return 2;
    }
    for (int t = 4; t < argc; t++) {
        char *end;
        double v = strtod(argv[t], &end);
        if (*end || !(v >= TUTTI_TEMP_MIN && v <= TUTTI_TEMP_MAX)) {
            fprintf(stderr, "byte_tables: temperature \"%s\" is not a number in [1e-6, 1e6]\n", argv[t]);
            return 2;
        }
    }
    size_t len = 0;
    char *text = read_all(argv[2], &len);
    if (!text) {
        fprintf(stderr, "byte_tables: cannot read %s\n", argv[2]);
        return 1;
    }
    tutti_member_desc md = {.model_path = argv[1], .weight = 1, .temp = 1};
    tutti_ensemble_params p = tutti_ensemble_default_params();
    p.members = &md, p.n_members = 1, p.rule = TUTTI_RULE_MIX, p.align = TUTTI_ALIGN_BYTE, p.n_threads = 1;
    tutti_ensemble *e = tutti_ensemble_new(&p);
    if (!e) {
        fprintf(stderr, "byte_tables: %s\n", tutti_last_error());
        free(text);
        return 1;
    }
    text_data d;
    int rc = fusion_text_data_init(e, text, len, 200, &d);
    int64_t *cs = NULL;
    if (rc < 0) fprintf(stderr, "byte_tables: %s\n", tutti_last_error());
    if (rc == 0 && !(cs = malloc(sizeof(int64_t) * (size_t)(d.n_chunks + 1)))) {
        fprintf(stderr, "byte_tables: out of memory\n");
        rc = -2;
    }
    if (rc == 0) {
        for (int c = 0; c <= d.n_chunks; c++) cs[c] = d.chunk_start[c];
        if (write_file(argv[3], "y", d.y, sizeof(int32_t), (size_t)d.n_rows) < 0 ||
            write_file(argv[3], "cs", cs, sizeof(int64_t), (size_t)d.n_chunks + 1) < 0)
            rc = -2;
    }
    const char *one = "1";
    const char *const *temps = argc > 4 ? (const char *const *)argv + 4 : &one;
    int n_temps = argc > 4 ? argc - 4 : 1;
    for (int t = 0; rc == 0 && t < n_temps; t++) {
        float temp = (float)strtod(temps[t], NULL), *rows[1] = {NULL};
        char suffix[64];
        snprintf(suffix, sizeof suffix, "t%s", temps[t]);
        if ((rc = fusion_compute_tables(e, &d, &temp, rows)) < 0)
            fprintf(stderr, "byte_tables: %s\n", tutti_last_error());
        if (rc == 0 && write_file(argv[3], suffix, rows[0], sizeof(float), (size_t)d.n_rows * (size_t)d.width) < 0)
            rc = -2;
        free(rows[0]);
    }
    if (rc == 0) fprintf(stderr, "byte_tables: %lld rows, %d chunks\n", (long long)d.n_rows, d.n_chunks);
    free(cs);
    fusion_text_data_free(&d);
    tutti_ensemble_free(e);
    free(text);
    return rc == 0 ? 0 : 1;
}
