/* Helpers shared by the tests: locating ../shared, reading reference files,
 * comparing logits.  Include after <cmocka.h>'s prerequisites. */
#ifndef TUTTI_TEST_COMMON_H
#define TUTTI_TEST_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

/* Path of the shared data file rel ("models/stories260K.gguf",
 * "ref/models/p1.txt"): the repository's copy when it has one (the four
 * quick-start models in models/, the core tests' references in tests/data/),
 * else ../shared/<rel> ($TUTTI_SHARED_DIR when set).  Static buffer,
 * rotates among 8. */
const char *shared_path(const char *rel);
/* Fails the current test, saying that ../shared is missing, unless it exists. */
void require_shared(void);

/* Two parts of a test binary: its core cases, whose data the repository
 * holds (ctest -L core runs them with ../shared absent), and the cases that
 * need ../shared, listed with shared_unit_test(f) (named "shared_f"; each
 * calls require_shared()).  main() calls test_select_part() before running
 * its group: TUTTI_TEST_PART=core runs the core cases only, =shared the
 * others, unset both.  tests/CMakeLists.txt registers such a binary twice,
 * NAME (core) and NAME_shared. */
#define SHARED_TEST_PREFIX "shared_"
#define shared_unit_test(f) \
    { SHARED_TEST_PREFIX #f, f, NULL, NULL, NULL }
void test_select_part(void);
/* Reads a whole file; NULL if it cannot (size in *len).  Caller frees. */
char *read_file(const char *path, size_t *len);
/* The inputs of a fuzz corpus pack (fuzz/corpus/NAME.tar, POSIX ustar of
 * regular files; fuzz/corpus.sh writes them): fn(name, data, size, user)
 * for each, data an exact-size copy (so ASan sees a read past its end).
 * Returns the count; fails the test on a malformed pack. */
typedef void (*pack_entry_fn)(const char *name, const uint8_t *data, size_t size, void *user);
int pack_each(const char *path, pack_entry_fn fn, void *user);
/* A folder holding fuzz/corpus/<harness>.tar's inputs as files (unpacked
 * once per process under /tmp, removed at exit), for tests that give a seed
 * to the CLI or the library by name. */
const char *corpus_dir(const char *harness);
/* Runs a shell command; returns its stdout (malloc'd, NUL-terminated) and
 * sets *status to its exit status (-1 if it did not exit normally). */
char *run_cmd(const char *cmd, int *status);
/* Parses "1,2,3" into ids; returns count. */
int parse_ids(const char *s, int32_t *ids, int n_max);
/* The ids of the JSON array `"key":[...]` in js; returns their count, or -1
 * when js has no such array (or it is not closed). */
int json_ids(const char *js, const char *key, int32_t *ids, int n_max);
/* SHA-256 (FIPS 180-4) of n bytes as 64 lower-case hex digits and a NUL,
 * for comparing with hashes python's hashlib made. */
void sha256_hex(const void *data, size_t n, char out[65]);
/* max over positions and ids of |log_softmax(a) - log_softmax(b)|, rows of n_vocab. */
double max_logsoftmax_diff(const float *a, const float *b, int n_rows, int n_vocab);
/* max_logsoftmax_diff of got's rows (positions first_pos .. first_pos +
 * n_pos - 1) against a reference that keeps every `every`-th position only
 * (ref row k = position k * every), over those positions among them. */
double max_logsoftmax_diff_every(const float *got, int first_pos, int n_pos, const float *ref, int every, int n_vocab);

/* Rewinds s to 0, evaluates ids[0..n_prefix) as one batch (its rows into
 * logits), then ids[n_prefix..n) one token at a time through the KV cache
 * (each step's logits into its row): logits [n][n_vocab].  Fails the test on
 * an evaluation error. */
struct tutti_session;
void eval_prefix_then_steps(struct tutti_session *s, const int32_t *ids, int n_prefix, int n, int n_vocab,
                            float *logits);

/* Copy of GGUF file src written to path, add(w, arg) adding metadata after
 * src's (fails the test on error). */
struct gguf_writer;
void write_gguf_copy(const char *src, const char *path, void (*add)(struct gguf_writer *w, const void *arg),
                     const void *arg);
/* Copy of GGUF file src with tokenizer.chat_template set to tmpl, written
 * to path (fails the test on error). */
void write_with_template(const char *src, const char *tmpl, const char *path);
/* An ensemble of the ../shared models rel[0..n) (paths relative to
 * ../shared), default weights, the given tutti_align and tutti_fusion_rule,
 * one thread; NULL (reason printed) on failure. */
struct tutti_ensemble;
struct tutti_ensemble *test_ensemble(const char *const *rel, int n, int align, int rule);
/* Σ log p(token_k | tokens_<k) (nats) over model_path's canonical
 * tokenization of text from BOS, in double straight from the session API's
 * logits (one forward pass; up to 4096 tokens). */
double test_direct_ll(const char *model_path, const char *text);

/* Pearson's chi-square of observed counts count[0..n_cells) over n draws
 * against the exact probabilities want[0..n_cells) (summing to 1), the
 * cells with an expected count below 5 pooled into one; *df: its degrees
 * of freedom, *crit: the 0.1 % critical value (Wilson-Hilferty).  Returns
 * the statistic (the caller asserts statistic < *crit). */
double test_chi2(const int *count, const double *want, int n_cells, int n, int *df, double *crit);

/* A text receiver for tutti_ensemble_generate (tutti_text_cb): appends to
 * b (NUL-terminated, truncated at its size). */
typedef struct test_sink {
    char b[8192];
    size_t n;
} test_sink;
int test_sink_cb(const char *bytes, size_t n, void *sink);

#endif
