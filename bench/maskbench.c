/* MaskBench (guidance-ai/jsonschemabench, maskbench/) through tutti's public
 * grammar API, with MaskBench's runner semantics:
 *
 *   for each schema: compile it (tutti_grammar_from_json_schema +
 *   tutti_grammar_matcher_new: "compile time"); for each test instance,
 *   tokenize its text with the Llama 3 tokenizer (no BOS, special tokens
 *   not parsed), and per token compute the mask and commit the token
 *   (tutti_grammar_matcher_bitmask, the token bitmask that MaskBench times
 *   for llguidance, or with --logits tutti_grammar_matcher_mask on a full
 *   logits row, which adds writing -inf over the row, about 9 us for 128k
 *   tokens; then tutti_grammar_matcher_accept of its bytes: "mask time"); the instance
 *   is accepted when every token was allowed.  A schema passes when it
 *   compiles, every valid instance is accepted and every invalid one
 *   rejected ("validation error": a valid one rejected; "invalidation
 *   error": an invalid one accepted).  As in MaskBench's runner, nothing is
 *   checked after the last token (no end-of-generation token).
 *
 * One thread.  Schemas run in a forked worker process, one after the other;
 * a worker that dies (signal) counts a crash for the schema it was on, one
 * that takes longer than --timeout seconds on a schema is killed and counts
 * a timeout, and a fresh worker goes on with the next schema.  The worker
 * lives across schemas because the vocabulary's class tables are built on
 * first use and shared by every later grammar, as in a server.
 *
 *   maskbench [--ids FILE] [--first N] [--timeout S] [--lenient] [--generation] [--verbose]
 *             [--results FILE] [--min-pass N] [--progress] [--cpu-clock] [--logits] DATA.jsonl.xz VOCAB.gguf
 *
 * DATA: one JSON line per schema {"id", "schema": TEXT, "tests": [{"valid",
 * "text"}]} (../shared/eval/maskbench-dev.jsonl.xz; .xz is read through
 * `xz -dc`).  --ids: only the schemas whose ids are listed (one a line).
 * --results: one line per schema "ID STATUS TOKENS MASK_MEAN_US MASK_MAX_US
 * COMPILE_MS DETAIL".  --cpu-clock: mask and compile times in the thread's
 * CPU time (for a busy machine; MaskBench's are wall-clock).  --min-pass: exit 1
 * unless at least N schemas pass and no invalid instance is accepted (the CI
 * regression test).  Prints MaskBench's table and the compile errors grouped
 * by keyword.  Schemas are read as the specification reads them (every
 * spelling of a const string, other property names where
 * additionalProperties is absent: tutti_json_schema_params.all_spellings,
 * open_objects); --generation: with the generation defaults instead. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tutti.h"

/* clang says AddressSanitizer through __has_feature, GCC through a macro */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TUTTI_HAS_ASAN 1
#endif
#endif
#ifndef TUTTI_HAS_ASAN
#define TUTTI_HAS_ASAN 0
#endif

/* A worker's address space is capped at 8 GB, so that a runaway schema
 * fails and not the machine; not under AddressSanitizer, whose shadow
 * memory reserves terabytes of address space. */
static void limit_memory(void) {
#if !defined(__SANITIZE_ADDRESS__) && !TUTTI_HAS_ASAN
    struct rlimit rl = {(rlim_t)8 << 30, (rlim_t)8 << 30};
    setrlimit(RLIMIT_AS, &rl);
#endif
}

enum { ST_PASS, ST_COMPILE, ST_VALIDATION, ST_INVALIDATION, ST_CRASH, ST_TIMEOUT, ST_N };
static const char *const k_status[ST_N] = {"pass",  "compile-error", "validation-error", "invalidation-error",
                                           "crash", "timeout"};

typedef struct schema_case {
    char *id;
    char *line; /* the JSON line (parsed in the worker) */
} schema_case;

typedef struct result {
    int status;
    double compile_us, total_s;
    int64_t n_tok; /* masks computed */
    double mask_mean_us, mask_max_us;
    char detail[600];
} result;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The clock of mask and compile times: wall (MaskBench's), or with
 * --cpu-clock this thread's CPU time, which a busy machine's preemptions
 * do not inflate. */
static clockid_t g_clock = CLOCK_MONOTONIC;
static double now_timed(void) {
    struct timespec ts;
    clock_gettime(g_clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ---- input ---- */

static char *read_all(FILE *f, size_t *n) {
    size_t cap = 1 << 20, len = 0;
    char *b = malloc(cap);
    for (;;) {
        if (len + 65536 > cap) b = realloc(b, cap *= 2);
        size_t k = fread(b + len, 1, 65536, f);
        if (!k) break;
        len += k;
    }
    b[len] = 0;
    *n = len;
    return b;
}

static char *read_data(const char *path, size_t *n) {
    size_t pl = strlen(path);
    FILE *f;
    bool piped = pl > 3 && !strcmp(path + pl - 3, ".xz");
    if (piped) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "xz -dc '%s'", path);
        f = popen(cmd, "r");
    } else {
        f = fopen(path, "rb");
    }
    if (!f) return NULL;
    char *b = read_all(f, n);
    int rc = piped ? pclose(f) : fclose(f);
    if (rc != 0) {
        free(b);
        return NULL;
    }
    return b;
}

/* The id of a line without parsing all of it: "id" is the first key. */
static char *line_id(const char *line) {
    const char *p = strstr(line, "\"id\": \"");
    if (!p) return strdup("?");
    p += 7;
    const char *e = strchr(p, '"');
    return strndup(p, e ? (size_t)(e - p) : strlen(p));
}

static bool id_listed(char **ids, int n, const char *id) {
    for (int i = 0; i < n; i++)
        if (!strcmp(ids[i], id)) return true;
    return false;
}

/* ---- the worker: one schema ---- */

typedef struct worker_ctx {
    tutti_vocab *v;
    tutti_grammar_vocab *gv;
    float *row;     /* --logits: the row the mask is written on */
    uint32_t *bits; /* otherwise: the token bitmask */
    int32_t V;
    int32_t *ids;
    int32_t cap_ids;
    bool lenient, generation;
    FILE *out; /* the pipe to the parent */
} worker_ctx;

/* Writes the token context around token k of text (for --verbose). */
static void token_context(worker_ctx *w, const int32_t *ids, int n, int k, char *out, size_t cap) {
    char piece[256];
    size_t at = 0;
    int lo = k > 6 ? k - 6 : 0;
    for (int i = lo; i <= k && i < n && at + 80 < cap; i++) {
        int32_t l = tutti_token_to_piece(w->v, ids[i], false, piece, sizeof piece - 1);
        if (l < 0) l = 0;
        piece[l] = 0;
        for (char *c = piece; *c; c++)
            if (*c == '\n' || *c == '\t') *c = ' ';
        at += (size_t)snprintf(out + at, cap - at, i == k ? "[[%.60s]]" : "%.60s", piece);
    }
}

/* One instance: 1 accepted, 0 rejected (where: *fail_tok), -1 error.
 * Appends the per-token times (ns) to the pipe as they come. */
static int run_instance(worker_ctx *w, tutti_grammar_matcher *m, const char *text, int *fail_tok, char *ctx,
                        size_t ctx_cap, long long *t_ns, int *n_t) {
    size_t len = strlen(text);
    int32_t need = (int32_t)len + 16;
    if (need > w->cap_ids) {
        w->ids = realloc(w->ids, sizeof(int32_t) * (size_t)need);
        w->cap_ids = need;
    }
    int32_t n = tutti_tokenize(w->v, text, len, false, false, w->ids, w->cap_ids);
    if (n < 0) return -1;
    tutti_grammar_matcher_reset(m);
    char piece[512];
    for (int32_t k = 0; k < n; k++) {
        int32_t id = w->ids[k];
        int32_t l = tutti_token_to_piece(w->v, id, false, piece, sizeof piece);
        if (w->row) memset(w->row, 0, sizeof(float) * (size_t)w->V);
        double t0 = now_timed();
        int32_t na =
            w->row ? tutti_grammar_matcher_mask(m, w->gv, w->row) : tutti_grammar_matcher_bitmask(m, w->gv, w->bits);
        bool allowed = w->row ? w->row[id] != -INFINITY : (w->bits[id >> 5] >> (id & 31) & 1);
        bool ok = na > 0 && allowed && l > 0 && tutti_grammar_matcher_accept(m, piece, (size_t)l) == 0;
        t_ns[(*n_t)++] = (long long)((now_timed() - t0) * 1e9);
        if (*n_t == 4096) { /* flush the times */
            fputs("T", w->out);
            for (int i = 0; i < *n_t; i++) fprintf(w->out, " %lld", t_ns[i]);
            fputs("\n", w->out);
            *n_t = 0;
        }
        if (!ok) {
            *fail_tok = k;
            token_context(w, w->ids, n, k, ctx, ctx_cap);
            return 0;
        }
    }
    return 1;
}

static void clean(char *s) {
    for (; *s; s++)
        if (*s == '\n' || *s == '\r' || *s == '\t') *s = ' ';
}

static void run_schema(worker_ctx *w, int idx, const char *line) {
    result r = {0};
    double t_start = now();
    static long long t_ns[4096];
    int n_t = 0;
    cJSON *d = cJSON_Parse(line);
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(d, "schema");
    const cJSON *tests = cJSON_GetObjectItemCaseSensitive(d, "tests");
    if (!cJSON_IsString(schema)) {
        r.status = ST_COMPILE;
        snprintf(r.detail, sizeof r.detail, "the data line has no schema text");
        goto report;
    }
    double t0 = now_timed();
    tutti_json_schema_params jp = tutti_json_schema_default_params();
    jp.lenient = w->lenient;
    /* MaskBench's valid instances must all be accepted: the schema as the
     * specification reads it, unless --generation asks for the defaults */
    jp.all_spellings = jp.open_objects = !w->generation;
    tutti_grammar *g = tutti_grammar_from_json_schema_params(schema->valuestring, strlen(schema->valuestring), &jp);
    tutti_grammar_matcher *m = g ? tutti_grammar_matcher_new(g) : NULL;
    r.compile_us = 1e6 * (now_timed() - t0);
    free(jp.warnings);
    if (!m) {
        r.status = ST_COMPILE;
        snprintf(r.detail, sizeof r.detail, "%s", tutti_last_error());
        tutti_grammar_free(g);
        goto report;
    }
    r.status = ST_PASS;
    int i = 0;
    for (const cJSON *t = tests ? tests->child : NULL; t; t = t->next, i++) {
        bool valid = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "valid"));
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(t, "text");
        if (!cJSON_IsString(text)) continue;
        int fail_tok = -1;
        char ctx[600] = "";
        int acc = run_instance(w, m, text->valuestring, &fail_tok, ctx, sizeof ctx, t_ns, &n_t);
        if (acc < 0) {
            r.status = ST_VALIDATION;
            snprintf(r.detail, sizeof r.detail, "test #%d: cannot tokenize", i);
            break;
        }
        if (acc && !valid) {
            r.status = ST_INVALIDATION;
            snprintf(r.detail, sizeof r.detail, "test #%d: should reject but didn't: %.400s", i, text->valuestring);
            break;
        }
        if (!acc && valid) {
            r.status = ST_VALIDATION;
            snprintf(r.detail, sizeof r.detail, "test #%d: should accept but didn't at token %d: %.500s", i, fail_tok,
                     ctx);
            break;
        }
    }
    tutti_grammar_matcher_free(m);
    tutti_grammar_free(g);
report:
    cJSON_Delete(d);
    r.total_s = now() - t_start;
    clean(r.detail);
    if (n_t) {
        fputs("T", w->out);
        for (int k = 0; k < n_t; k++) fprintf(w->out, " %lld", t_ns[k]);
        fputs("\n", w->out);
    }
    fprintf(w->out, "R %d %d %.3f %.6f %s\n", idx, r.status, r.compile_us, r.total_s, r.detail);
    fflush(w->out);
}

/* ---- the parent ---- */

typedef struct run_stats {
    double *mask_ns;
    int64_t n_mask, cap_mask;
    double *compile_us;
    int n_compile;
    int count[ST_N];
    int over_10s;
} run_stats;

static void add_times(run_stats *st, char *s) {
    char *p = s;
    for (;;) {
        char *e;
        long long x = strtoll(p, &e, 10);
        if (e == p) break;
        if (st->n_mask == st->cap_mask) {
            st->cap_mask = st->cap_mask ? st->cap_mask * 2 : 1 << 20;
            st->mask_ns = realloc(st->mask_ns, sizeof(double) * (size_t)st->cap_mask);
        }
        st->mask_ns[st->n_mask++] = (double)x;
        p = e;
    }
}

/* Lines from the worker's pipe, each waited for at most a timeout. */
typedef struct line_reader {
    int fd;
    char *buf;
    size_t n, cap, start;
    char *line; /* the last line read (NUL-terminated, in buf) */
} line_reader;

/* 1: a line in r->line; 0: timeout; -1: end of the pipe. */
static int reader_line(line_reader *r, int timeout_ms) {
    double t_end = now() + 1e-3 * timeout_ms;
    for (;;) {
        char *nl = r->start < r->n ? memchr(r->buf + r->start, '\n', r->n - r->start) : NULL;
        if (nl) {
            *nl = 0;
            r->line = r->buf + r->start;
            r->start = (size_t)(nl - r->buf) + 1;
            return 1;
        }
        if (r->start) { /* keep the unfinished line at the front */
            memmove(r->buf, r->buf + r->start, r->n - r->start);
            r->n -= r->start, r->start = 0;
        }
        if (r->n + 65536 > r->cap) r->buf = realloc(r->buf, r->cap = (r->n + 65536) * 2);
        struct pollfd pfd = {r->fd, POLLIN, 0};
        int left = (int)((t_end - now()) * 1000);
        int pr = left > 0 ? poll(&pfd, 1, left) : 0;
        if (pr < 0 && errno == EINTR) continue;
        if (pr == 0) return 0;
        ssize_t k = read(r->fd, r->buf + r->n, r->cap - r->n - 1);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        r->n += (size_t)k;
    }
}

typedef struct err_key {
    char *key;
    int n;
    char *example; /* the first schema id */
} err_key;

/* The compile error without its schema path and with long quoted values
 * shortened: "unsupported keyword 'x'" stays itself. */
static void error_key(const char *msg, char *out, size_t cap) {
    const char *p = strstr(msg, ": at ");
    if (p) {
        const char *c = strstr(p + 5, ": ");
        if (c) p = c + 2;
    } else {
        p = msg;
    }
    size_t k = 0;
    while (*p && k + 8 < cap) {
        if (*p == '\'') {
            const char *e = strchr(p + 1, '\'');
            if (e && e - p > 32) {
                k += (size_t)snprintf(out + k, cap - k, "'...'");
                p = e + 1;
                continue;
            }
        }
        if (*p >= '0' && *p <= '9') {
            out[k++] = 'N';
            while (*p >= '0' && *p <= '9') p++;
            continue;
        }
        out[k++] = *p++;
    }
    out[k] = 0;
}

static int cmp_key(const void *a, const void *b) {
    const err_key *x = a, *y = b;
    return y->n - x->n;
}

/* The data's lines (split in place) whose ids are wanted (want NULL:
 * all), at most first (<= 0: no limit). */
static schema_case *select_cases(char *txt, char **want, int n_want, int first, int *n_out) {
    schema_case *cases = NULL;
    int n_cases = 0, cap_cases = 0;
    for (char *l = strtok(txt, "\n"); l; l = strtok(NULL, "\n")) {
        char *id = line_id(l);
        if (want && !id_listed(want, n_want, id)) {
            free(id);
            continue;
        }
        if (n_cases == cap_cases)
            cases = realloc(cases, sizeof *cases * (size_t)(cap_cases = cap_cases ? cap_cases * 2 : 1024));
        cases[n_cases++] = (schema_case){id, l};
        if (first > 0 && n_cases >= first) break;
    }
    *n_out = n_cases;
    return cases;
}

/* Counts the statuses into st, writes --results and --verbose lines, and
 * groups the compile errors by reason (*keys_out, their count returned). */
static int count_results(const result *res, const schema_case *cases, int n_cases, run_stats *stp,
                         const char *results_file, bool verbose, err_key **keys_out) {
    run_stats *pst = stp;
    FILE *rf = results_file ? fopen(results_file, "w") : NULL;
    err_key *keys = NULL;
    int n_keys = 0;
    for (int i = 0; i < n_cases; i++) {
        const result *r = &res[i];
        pst->count[r->status]++;
        if (r->total_s > 10) pst->over_10s++;
        if (r->status != ST_COMPILE && r->status != ST_CRASH && r->status != ST_TIMEOUT)
            pst->compile_us[pst->n_compile++] = r->compile_us;
        if (rf)
            fprintf(rf, "%s %s %lld %.1f %.1f %.3f %s\n", cases[i].id, k_status[r->status], (long long)r->n_tok,
                    r->mask_mean_us, r->mask_max_us, 1e-3 * r->compile_us, r->detail);
        if (verbose && r->status != ST_PASS) printf("%-50s %-18s %s\n", cases[i].id, k_status[r->status], r->detail);
        if (r->status == ST_COMPILE) {
            char k[300];
            error_key(r->detail, k, sizeof k);
            int j = 0;
            while (j < n_keys && strcmp(keys[j].key, k)) j++;
            if (j == n_keys) {
                keys = realloc(keys, sizeof *keys * (size_t)(n_keys + 1));
                keys[n_keys++] = (err_key){strdup(k), 0, cases[i].id};
            }
            keys[j].n++;
        }
    }
    if (rf) fclose(rf);
    *keys_out = keys;
    return n_keys;
}

/* MaskBench's table from the run's counts and times (sorts them). */
static void print_table(run_stats *stp, int n_cases, const char *data, const char *vocab, int32_t V, double t_run,
                        int timeout_s) {
    run_stats st = *stp;
    qsort(st.mask_ns, (size_t)st.n_mask, sizeof(double), cmp_d);
    qsort(st.compile_us, (size_t)st.n_compile, sizeof(double), cmp_d);
    double sum = 0;
    for (int64_t i = 0; i < st.n_mask; i++) sum += st.mask_ns[i];
#define PCT(a, n, p) ((n) ? (a)[(int64_t)((p) * (double)((n)-1))] : 0.0)
    printf("MaskBench: %d schemas from %s, vocabulary %s (%d tokens), one thread, %.0f s\n", n_cases, data, vocab, V,
           t_run);
    printf("| metric | tutti |\n|---|---:|\n");
    printf("| schemas | %d |\n", n_cases);
    printf("| passing | %d (%.1f %%) |\n", st.count[ST_PASS], n_cases ? 100.0 * st.count[ST_PASS] / n_cases : 0.0);
    printf("| compile error | %d |\n| validation error | %d |\n| invalidation error | %d |\n", st.count[ST_COMPILE],
           st.count[ST_VALIDATION], st.count[ST_INVALIDATION]);
    printf("| crash | %d |\n| timeout (%d s) | %d |\n| schemas over 10 s | %d |\n", st.count[ST_CRASH], timeout_s,
           st.count[ST_TIMEOUT], st.over_10s);
    printf("| tokens | %lld |\n", (long long)st.n_mask);
    printf("| mask mean (us) | %.1f |\n| mask p50 (us) | %.1f |\n| mask p99 (us) | %.1f |\n| mask max (us) | %.1f |\n",
           st.n_mask ? 1e-3 * sum / (double)st.n_mask : 0.0, 1e-3 * PCT(st.mask_ns, st.n_mask, 0.5),
           1e-3 * PCT(st.mask_ns, st.n_mask, 0.99), 1e-3 * PCT(st.mask_ns, st.n_mask, 1.0));
    printf("| compile p50 (ms) | %.3f |\n| compile p99 (ms) | %.3f |\n| compile max (ms) | %.3f |\n",
           1e-3 * PCT(st.compile_us, st.n_compile, 0.5), 1e-3 * PCT(st.compile_us, st.n_compile, 0.99),
           1e-3 * PCT(st.compile_us, st.n_compile, 1.0));
}

static void usage(void) {
    fprintf(stderr, "usage: maskbench [--ids FILE] [--first N] [--timeout S] [--lenient] [--generation] [--verbose] "
                    "[--results FILE] [--min-pass N] [--progress] [--cpu-clock] [--logits] DATA.jsonl.xz VOCAB.gguf\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *ids_file = NULL, *results_file = NULL, *data = NULL, *vocab = NULL;
    int first = -1, timeout_s = 60, min_pass = -1;
    bool lenient = false, generation = false, verbose = false, progress = false, logits = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--ids") && i + 1 < argc) ids_file = argv[++i];
        else if (!strcmp(argv[i], "--first") && i + 1 < argc) first = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout_s = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-pass") && i + 1 < argc) min_pass = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--results") && i + 1 < argc) results_file = argv[++i];
        else if (!strcmp(argv[i], "--lenient")) lenient = true;
        else if (!strcmp(argv[i], "--generation")) generation = true;
        else if (!strcmp(argv[i], "--verbose")) verbose = true;
        else if (!strcmp(argv[i], "--progress")) progress = true;
        else if (!strcmp(argv[i], "--cpu-clock")) g_clock = CLOCK_THREAD_CPUTIME_ID;
        else if (!strcmp(argv[i], "--logits")) logits = true;
        else if (argv[i][0] == '-') usage();
        else if (!data) data = argv[i];
        else if (!vocab) vocab = argv[i];
        else usage();
    }
    if (!data || !vocab) usage();
    size_t n_txt;
    char *txt = read_data(data, &n_txt);
    if (!txt) {
        fprintf(stderr, "maskbench: cannot read %s\n", data);
        return 1;
    }
    char **want = NULL;
    int n_want = 0;
    if (ids_file) {
        size_t n;
        FILE *f = fopen(ids_file, "r");
        char *b = f ? read_all(f, &n) : NULL;
        if (f) fclose(f);
        if (!b) {
            fprintf(stderr, "maskbench: cannot read %s\n", ids_file);
            return 1;
        }
        for (char *l = strtok(b, "\n"); l; l = strtok(NULL, "\n"))
            if (*l && *l != '#')
                want = realloc(want, sizeof(char *) * (size_t)(n_want + 1)), want[n_want++] = strdup(l);
        free(b);
    }
    int n_cases = 0;
    schema_case *cases = select_cases(txt, want, n_want, first, &n_cases);
    if (want && n_cases != n_want) fprintf(stderr, "maskbench: %d of the %d listed ids found\n", n_cases, n_want);

    worker_ctx w = {.lenient = lenient, .generation = generation};
    if (!(w.v = tutti_vocab_load(vocab)) || !(w.gv = tutti_grammar_vocab_new(w.v))) {
        fprintf(stderr, "maskbench: %s\n", tutti_last_error());
        return 1;
    }
    w.V = tutti_vocab_n_tokens(w.v);
    if (logits) w.row = malloc(sizeof(float) * (size_t)w.V);
    else w.bits = malloc(sizeof(uint32_t) * (size_t)((w.V + 31) / 32));
    result *res = calloc((size_t)n_cases + 1, sizeof *res);
    bool *done = calloc((size_t)n_cases + 1, 1);
    run_stats st = {0};
    st.compile_us = malloc(sizeof(double) * (size_t)(n_cases + 1));
    double t_run = now();
    int next = 0;
    while (next < n_cases) {
        int fd[2];
        if (pipe(fd) < 0) return 1;
        fflush(stdout), fflush(stderr);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            close(fd[0]);
            limit_memory();
            w.out = fdopen(fd[1], "w");
            for (int i = next; i < n_cases; i++) run_schema(&w, i, cases[i].line);
            fclose(w.out);
            _exit(0);
        }
        close(fd[1]);
        line_reader lr = {.fd = fd[0]};
        int cur = next;
        bool killed = false;
        double t_schema = now();
        int64_t tok0 = st.n_mask; /* the current schema's first mask */
        for (;;) {
            double left = timeout_s - (now() - t_schema);
            int k = left > 0 ? reader_line(&lr, (int)(left * 1000) + 1) : 0;
            if (k == 0) {
                kill(pid, SIGKILL);
                killed = true;
                break;
            }
            if (k < 0) break;
            char *line = lr.line;
            if (line[0] == 'T') add_times(&st, line + 1);
            else if (line[0] == 'R') {
                int idx, status, off = 0;
                double cu, ts;
                if (sscanf(line, "R %d %d %lf %lf %n", &idx, &status, &cu, &ts, &off) < 4 || idx != cur) break;
                res[idx].status = status, res[idx].compile_us = cu, res[idx].total_s = ts;
                double sum = 0, mx = 0;
                for (int64_t j = tok0; j < st.n_mask; j++)
                    sum += st.mask_ns[j], mx = st.mask_ns[j] > mx ? st.mask_ns[j] : mx;
                res[idx].n_tok = st.n_mask - tok0;
                res[idx].mask_mean_us = res[idx].n_tok ? 1e-3 * sum / (double)res[idx].n_tok : 0;
                res[idx].mask_max_us = 1e-3 * mx;
                tok0 = st.n_mask;
                snprintf(res[idx].detail, sizeof res[idx].detail, "%s", off ? line + off : "");
                done[idx] = true;
                cur = idx + 1;
                t_schema = now();
                if (progress && cur % 500 == 0) fprintf(stderr, "maskbench: %d of %d schemas\n", cur, n_cases);
            }
        }
        free(lr.buf);
        close(fd[0]);
        int ws = 0;
        waitpid(pid, &ws, 0);
        if (cur < n_cases && !done[cur]) {
            res[cur].status = killed ? ST_TIMEOUT : ST_CRASH;
            res[cur].total_s = killed ? timeout_s : 0;
            snprintf(res[cur].detail, sizeof res[cur].detail, killed ? "over %d s" : "worker died (status 0x%x)",
                     killed ? timeout_s : ws);
            done[cur] = true;
            cur++;
        }
        next = cur;
    }
    t_run = now() - t_run;

    err_key *keys = NULL;
    int n_keys = count_results(res, cases, n_cases, &st, results_file, verbose, &keys);
    print_table(&st, n_cases, data, vocab, w.V, t_run, timeout_s);
    qsort(keys, (size_t)n_keys, sizeof *keys, cmp_key);
    if (n_keys) printf("\ncompile errors by reason (%d distinct; count, first schema):\n", n_keys);
    for (int j = 0; j < n_keys && j < 60; j++) printf("%6d  %-90.90s %s\n", keys[j].n, keys[j].key, keys[j].example);
    int rc = 0;
    if (min_pass >= 0 && (st.count[ST_PASS] < min_pass || st.count[ST_INVALIDATION] > 0 || st.count[ST_CRASH] > 0)) {
        printf("\nFAIL: %d passing (at least %d expected), %d invalidation errors, %d crashes (0 expected)\n",
               st.count[ST_PASS], min_pass, st.count[ST_INVALIDATION], st.count[ST_CRASH]);
        rc = 1;
    }
    for (int j = 0; j < n_keys; j++) free(keys[j].key);
    free(keys);
    for (int i = 0; i < n_cases; i++) free(cases[i].id);
    for (int i = 0; i < n_want; i++) free(want[i]);
    free(want), free(cases), free(res), free(done), free(st.mask_ns), free(st.compile_us), free(txt), free(w.row),
        free(w.bits), free(w.ids);
    tutti_grammar_vocab_free(w.gv);
    tutti_vocab_free(w.v);
    return rc;
}
