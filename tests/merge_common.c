/* Helpers of the `tutti merge` tests (merge_common.h). */
#include "test_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "merge_common.h"

static char g_dir[256];

int merge_dir_make(const char *pattern) {
    snprintf(g_dir, sizeof g_dir, "%s", pattern);
    return mkdtemp(g_dir) ? 0 : -1;
}

int merge_dir_remove(void **state) {
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

const char *merge_dir(void) { return g_dir; }

const char *tmp(const char *name) {
    static char buf[8][512];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 512, "%s/%s", g_dir, name);
    return b;
}

void write_text(const char *path, const char *text) {
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

int merge_cli(const char *args, char **err) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s merge %s 2>%s", TUTTI_CLI, args, tmp("stderr.txt"));
    int st;
    free(run_cmd(cmd, &st));
    size_t len;
    char *e = read_file(tmp("stderr.txt"), &len);
    if (err) *err = e ? e : strdup("");
    else free(e);
    return st;
}

char *merge_ok_stderr(const char *args) {
    char *err;
    if (merge_cli(args, &err) != 0) fail_msg("tutti merge %s\n%s", args, err);
    return err;
}

void merge_ok(const char *args) { free(merge_ok_stderr(args)); }

void expect_refusal(const char *args, int status, const char *needle) {
    char *err;
    int st = merge_cli(args, &err);
    if (st != status || !strstr(err, needle))
        fail_msg("tutti merge %s: status %d (want %d), stderr: %s (want '%s')", args, st, status, err, needle);
    free(err);
}

bool same_file(const char *a, const char *b) {
    size_t la, lb;
    char *x = read_file(a, &la), *y = read_file(b, &lb);
    assert_non_null(x);
    assert_non_null(y);
    bool same = la == lb && !memcmp(x, y, la);
    free(x), free(y);
    return same;
}

void reference_run(const char *label, const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    const char *head = "/usr/bin/python3 " TUTTI_SOURCE_DIR "/tests/", *tail = " 2>&1";
    const int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    const size_t o = strlen(head), cap = o + (size_t)n + strlen(tail) + 1;
    char *cmd = malloc(cap);
    assert_non_null(cmd);
    memcpy(cmd, head, o);
    vsnprintf(cmd + o, cap - o, fmt, ap2);
    va_end(ap2);
    strcat(cmd, tail);
    int st;
    char *out = run_cmd(cmd, &st);
    free(cmd);
    if (st != 0) fprintf(stderr, "%s", out);
    else if (label) printf("%s: %s", label, out);
    else printf("%s", out);
    free(out);
    assert_int_equal(st, 0);
}
