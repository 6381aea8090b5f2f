/* Helpers of the `tutti merge` tests (test_merge.c, test_merge_moe.c,
 * test_merge_search.c): a scratch folder per test binary, the CLI run with
 * its stderr kept, whole-file comparison, and the numpy references
 * (tests/merge_ref.py, tests/moe_ref.py) run with /usr/bin/python3.
 * Include after test_common.h. */
#ifndef TUTTI_MERGE_COMMON_H
#define TUTTI_MERGE_COMMON_H

#include <stdbool.h>

/* The group's setup makes the scratch folder from a mkdtemp pattern
 * ("/tmp/tutti-merge-test-XXXXXX"): 0, or -1; merge_dir_remove is the
 * group's teardown. */
int merge_dir_make(const char *pattern);
int merge_dir_remove(void **state);
/* The scratch folder, and name in it (static buffer, rotates among 8). */
const char *merge_dir(void);
const char *tmp(const char *name);
/* Writes text to path (fails the test when it cannot). */
void write_text(const char *path, const char *text);
/* Runs tutti merge with args; returns the exit status, stderr in *err
 * (malloc'd; err may be NULL). */
int merge_cli(const char *args, char **err);
/* tutti merge args must exit 0 (the test fails with its stderr if not):
 * merge_ok_stderr returns that stderr (malloc'd), merge_ok drops it. */
char *merge_ok_stderr(const char *args);
void merge_ok(const char *args);
/* tutti merge args must exit with status and say needle on stderr. */
void expect_refusal(const char *args, int status, const char *needle);
/* The two files hold the same bytes (fails the test when one cannot be read). */
bool same_file(const char *a, const char *b);
/* Runs `/usr/bin/python3 tests/SCRIPT ARGS` (what fmt makes: the script in
 * the source tree and its arguments) and fails the test unless it exits 0;
 * its output goes to stdout after "label: " (label may be NULL), or to
 * stderr when it fails. */
void reference_run(const char *label, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
